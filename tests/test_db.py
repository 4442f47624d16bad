"""The XML database: records, atomic writes, locks, schema, index."""

from __future__ import annotations

import multiprocessing
import os
import stat
import threading
import time

import pytest
from lxml import etree

from jim.db import Database, validate
from jim.errors import JobNotFound, LockTimeout
from jim.jobid import new_job_id, valid_job_id
from jim.locks import SingleInstance, locked
from jim.paths import Home
from jim.record import NewJob, new_record
from jim.states import Evidence, GramState, LocalState


def make(db: Database, n: int = 3, name: str = "test") -> str:
    job_id = new_job_id()
    rec = new_record(
        job_id,
        NewJob(
            jobtype="generic",
            name=name,
            owner="u",
            adapter="fork",
            description={"executable": ["/bin/true"], "environment": [["A", "1"]]},
            source_format="rsl",
            source_text="&(executable=/bin/true)",
            plan={"localJobs": n, "binding": "count"},
            explanation=f"{n} jobs",
            slices=[{"firstEvent": k, "params": {"p": str(k)}} for k in range(n)],
        ),
    )
    db.create(rec)
    return job_id


@pytest.fixture
def db(tmp_path):
    return Database(Home(tmp_path / "home"), lock_timeout=2.0)


def test_create_read_validate(db):
    job_id = make(db)
    path = db.home.record(job_id)
    assert validate(path) == []
    assert validate(db.home.index) == []
    text = path.read_text()
    assert '<?xml-stylesheet type="text/xsl" href="jim.xsl"?>' in text
    assert (db.home.db / "jim.xsl").exists()
    job = db.read(job_id)
    assert job.state is GramState.PENDING and len(job.local_jobs()) == 3
    assert job.local(1).slice == {"firstEvent": "1", "p": "1"}
    assert job.local(2).get("MasterJobID") == job_id and job.local(2).get("SplitID") == "2"
    assert job.description()["environment"] == [["A", "1"]]


def test_private_files(db):
    job_id = make(db)
    for p in (db.home.root, db.home.db):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700
    for p in (db.home.record(job_id), db.home.summary(job_id), db.home.index):
        assert stat.S_IMODE(p.stat().st_mode) == 0o600


def test_update_history_and_no_regression(db):
    job_id = make(db, 2)
    with db.update(job_id) as rec:
        lj = rec.local(0)
        assert lj.set_state(LocalState.SUBMITTING)
        lj.batch_id = "123"
        assert lj.set_state(LocalState.RUNNING)
        assert lj.set_state(LocalState.DONE, evidence=Evidence.BATCH, exit_code=0)
        assert not lj.set_state(LocalState.RUNNING)  # terminal is final
        with pytest.raises(ValueError):
            rec.local(1).set_state(LocalState.FAILED)  # terminal needs evidence
        rec.recompute()
    job = db.read(job_id)
    lj = job.local(0)
    assert [s.get("name") for s in lj.el.find("history")] == ["PLANNED", "SUBMITTING", "RUNNING", "DONE"]
    assert lj.get("started") and lj.get("ended") and lj.exit_code == 0 and lj.evidence == "batch"
    assert job.state is GramState.ACTIVE
    assert job.get("HerdState") == "WillSplit"
    assert validate(db.home.record(job_id)) == []
    summary = db.home.summary(job_id).read_text()
    assert summary.startswith("JOB_STATE=ACTIVE\n") and "#UNSUBMITTED=1" in summary


def test_progress_and_escaping(db):
    job_id = make(db, 1, name='<script>alert("x")</script> & co')
    with db.update(job_id) as rec:
        rec.local(0).set_progress({"d0gstar": (117, 250), "reco": (0, 250)})
    job = db.read(job_id)
    assert job.local(0).progress == [("d0gstar", 117, 250), ("reco", 0, 250)]
    assert job.get("name") == '<script>alert("x")</script> & co'
    assert "<script>" not in db.home.record(job_id).read_text()
    assert validate(db.home.record(job_id)) == []


def test_control_characters_do_not_break_the_file(db):
    job_id = make(db, 1, name="bell\x07 and nul\x00")
    assert validate(db.home.record(job_id)) == []


def test_unchanged_update_does_not_write(db):
    job_id = make(db)
    before = db.home.record(job_id).stat().st_mtime_ns
    time.sleep(0.01)
    with db.update(job_id):
        pass
    assert db.home.record(job_id).stat().st_mtime_ns == before


def test_lock_timeout(db, tmp_path):
    path = tmp_path / "x.lock"
    held = threading.Event()
    release = threading.Event()

    def holder():
        with locked(path, 1.0):
            held.set()
            release.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(5)
    with pytest.raises(LockTimeout), locked(path, 0.2):
        pass
    release.set()
    t.join()
    with locked(path, 0.2):
        pass


def _bump(home_root, job_id, n):
    db = Database(Home(home_root), lock_timeout=30)
    for _ in range(n):
        with db.update(job_id) as rec:
            v = int(rec.get("name") or 0)
            rec.set("name", str(v + 1))


def test_concurrent_read_modify_write_loses_nothing(db):
    job_id = make(db, 1, name="0")
    procs = [multiprocessing.Process(target=_bump, args=(db.home.root, job_id, 25)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert db.read(job_id).get("name") == "100"


def test_readers_never_see_partial_files(db):
    job_id = make(db, 300)
    stop = threading.Event()
    errors = []

    def reader():
        while not stop.is_set():
            try:
                etree.parse(str(db.home.record(job_id)))
            except Exception as e:  # pragma: no cover - the failure we look for
                errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    for k in range(30):
        with db.update(job_id) as rec:
            rec.local(k).set_state(LocalState.SUBMITTING)
    stop.set()
    t.join()
    assert not errors


def test_unknown_and_bad_ids(db):
    make(db)
    with pytest.raises(JobNotFound):
        db.read("20990101-000000-abcdef")
    with pytest.raises(JobNotFound):
        db.home.record("../../etc/passwd")
    assert not valid_job_id("x/../y")


def test_index_list_and_rebuild(db):
    ids = [make(db, 1, name=f"j{k}") for k in range(3)]
    listed = db.list()
    assert {j["id"] for j in listed} == set(ids)
    db.home.index.write_text("garbage")
    assert {j["id"] for j in db.list()} == set(ids)  # rebuilt from the records
    db.delete(ids[0])
    assert {j["id"] for j in db.list()} == set(ids[1:])
    assert not db.home.record(ids[0]).exists()


def test_single_instance(tmp_path):
    a = SingleInstance(tmp_path / "w.lock")
    b = SingleInstance(tmp_path / "w.lock")
    assert not b.held_elsewhere()
    assert a.acquire()
    assert b.held_elsewhere()  # flock locks open files, so even this process sees a's lock
    assert not b.acquire()
    assert a.holder_pid() == os.getpid()
    a.release()
    assert b.acquire()
    b.release()


def test_failed_on_creation_slice(db):
    job_id = new_job_id()
    rec = new_record(
        job_id,
        NewJob(
            jobtype="x",
            name="n",
            owner="u",
            adapter="fork",
            description={},
            source_format="json",
            source_text="{}",
            plan={"localJobs": 2, "binding": "b"},
            explanation="e",
            slices=[{"events": 1}, {"events": 9, "failed_on_creation": "too long"}],
        ),
    )
    db.create(rec)
    lj = db.read(job_id).local(1)
    assert lj.state is LocalState.FAILED and lj.evidence == "creation" and lj.get("reason") == "too long"
    assert validate(db.home.record(job_id)) == []


def test_update_reuses_a_known_record_only_while_the_file_is_unchanged(db):
    mine = db.read(make(db))
    with db.update(mine.id, known=mine) as rec:
        assert rec is mine  # the file is the one it was read from: no second parse
        rec.local(0).set_state(LocalState.SUBMITTING)
    with db.update(mine.id) as other:  # someone else writes it meanwhile
        other.local(1).set_state(LocalState.SUBMITTING)
    with db.update(mine.id, known=mine) as rec:
        assert rec is not mine and rec.local(1).state is LocalState.SUBMITTING
    # a record changed in memory by an update that failed is never reused
    fresh = db.read(mine.id)
    with pytest.raises(RuntimeError), db.update(mine.id, known=fresh) as rec:
        rec.local(2).set_state(LocalState.SUBMITTING)
        raise RuntimeError("boom")
    assert fresh.disk_key is None
    with db.update(mine.id, known=fresh) as rec:
        assert rec is not fresh and rec.local(2).state is LocalState.PLANNED
