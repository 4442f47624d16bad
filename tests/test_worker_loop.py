"""The worker's submit loop, in process, against an in-memory batch system (tests/support/fake_adapter.py).

What only the loop decides: chunks, the intent journal, reconcile by tag before
anything is submitted again, retries, refusals, a cancel, a degraded batch system.
"""

from __future__ import annotations

import time

import pytest

from jim import background, journal, worker
from jim.config import parse
from jim.db import Database
from jim.jobdesc import parse_rsl
from jim.paths import Home
from jim.site import Site
from jim.states import LocalState
from jim.submit import submit

from support.fake_adapter import FakeAdapter

UNSUBMITTED = (LocalState.PLANNED, LocalState.SUBMITTING)


@pytest.fixture
def grid(tmp_path, monkeypatch):
    """A grid job of 10 local jobs recorded by the real submit (no worker started), and a fake batch system."""
    config = parse({"monitor": {"interval": 0.01}}, env={"JIM_HOME": str(tmp_path / "home")})
    job_id = submit(Site(config), parse_rsl("&(executable=/bin/true)(count=10)"), start_background=False)
    home = Home(config.home)
    started: list[str] = []
    monkeypatch.setattr(background, "start_monitor", lambda home: started.append("monitor"))
    return config, Database(home), job_id, FakeAdapter(home), started


def tags(job_id, indices):
    return [f"{job_id}.{k}" for k in indices]


def test_every_local_job_is_submitted_once_in_chunks_and_journaled(grid):
    config, db, job_id, fake, _ = grid
    worker.submit_pending(Site(config, db=db, adapter=fake), job_id)
    assert [c for k, c in fake.calls if k == "submit"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert fake.submitted_tags() == sorted(tags(job_id, range(10)))
    job = db.read(job_id)
    assert {lj.state for lj in job.local_jobs()} == {LocalState.QUEUED}
    assert sorted(lj.batch_id for lj in job.local_jobs()) == sorted(fake.jobs)
    intents = journal.read(db.home.job_dir(job_id))
    assert sorted(intents) == list(range(10))
    for lj in job.local_jobs():  # SUBMITTING dated by the intent, then QUEUED
        assert [e.get("name") for e in lj.el.find("history")] == ["PLANNED", "SUBMITTING", "QUEUED"]
        assert abs(lj.entered(LocalState.SUBMITTING) - intents[lj.index]) < 0.002


def test_a_submit_whose_outcome_is_unknown_is_looked_up_by_tag_before_any_retry(grid):
    config, db, job_id, fake, _ = grid
    fake.faults.lost_submits = 1  # the first array goes in, but the command reports a timeout
    worker.submit_pending(Site(config, db=db, adapter=fake), job_id)
    assert fake.submitted_tags() == sorted(tags(job_id, range(10)))  # never twice
    assert fake.count("find_by_tag") == 1
    assert [c for k, c in fake.calls if k == "submit"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert {lj.state for lj in db.read(job_id).local_jobs()} == {LocalState.QUEUED}


def test_a_transient_refusal_is_retried(grid):
    config, db, job_id, fake, _ = grid
    fake.faults.transient_submits = 2
    worker.submit_pending(Site(config, db=db, adapter=fake), job_id)
    submits = [c for k, c in fake.calls if k == "submit"]
    assert submits[:3] == [[0, 1, 2, 3]] * 3 and fake.count("find_by_tag") == 2
    assert fake.submitted_tags() == sorted(tags(job_id, range(10)))


def test_a_refused_chunk_fails_its_local_jobs_with_the_reason(grid):
    config, db, job_id, fake, _ = grid
    fake.faults.refuse = "invalid partition specified: nosuch"
    worker.submit_pending(Site(config, db=db, adapter=fake), job_id)
    job = db.read(job_id)
    assert {lj.state for lj in job.local_jobs()} == {LocalState.FAILED}
    assert {lj.get("reason") for lj in job.local_jobs()} == {"submission refused: invalid partition specified: nosuch"}
    assert {lj.evidence for lj in job.local_jobs()} == {"batch"}
    assert fake.count("find_by_tag") == 0  # a refusal is certain: nothing to look up


def test_journaled_jobs_of_a_dead_worker_are_found_and_never_submitted_again(grid):
    """A worker journaled chunk 0-3, the batch system took it, the worker died before recording it."""
    config, db, job_id, fake, _ = grid
    assert journal.append(db, job_id, [0, 1, 2, 3], time.time())
    for tag in tags(job_id, range(4)):
        fake.add(tag)
    worker.submit_pending(Site(config, db=db, adapter=fake), job_id)
    assert fake.submitted_tags() == sorted(tags(job_id, range(10)))
    assert [c for k, c in fake.calls if k == "submit"] == [[4, 5, 6, 7], [8, 9]]
    assert sorted(lj.batch_id for lj in db.read(job_id).local_jobs())[:4] == ["100", "101", "102", "103"]


def test_when_the_lookup_cannot_answer_the_worker_waits_and_never_submits_blind(grid, monkeypatch):
    config, db, job_id, fake, started = grid
    assert journal.append(db, job_id, [0, 1, 2, 3], time.time())
    fake.faults.find_down = True

    def monitor_started(home):  # the worker waits for the monitor: the batch system answers again
        started.append("monitor")
        fake.faults.find_down = False

    monkeypatch.setattr(background, "start_monitor", monitor_started)
    worker.submit_pending(Site(config, db=db, adapter=fake), job_id)
    assert started == ["monitor"]
    kinds = [k for k, _ in fake.calls]
    assert kinds[:2] == ["find_by_tag", "find_by_tag"] and kinds.index("submit") > 1
    assert fake.submitted_tags() == sorted(tags(job_id, range(10)))


def test_a_cancel_stops_the_loop_before_the_next_chunk(grid):
    config, db, job_id, fake, _ = grid
    with db.update(job_id) as rec:
        rec.set("cancelRequested", "true")
    worker.submit_pending(Site(config, db=db, adapter=fake), job_id)
    assert fake.count("submit") == 0
    assert {lj.state for lj in db.read(job_id).local_jobs()} == {LocalState.PLANNED}


def test_a_cancel_between_chunks_is_seen_by_the_journal(grid, monkeypatch):
    config, db, job_id, fake, _ = grid
    append = journal.append

    def cancel_after_first(db_, job_id_, indices, at, attempt=1):
        if indices[0] == 4:  # a cancel arrives while the first chunk is being recorded
            with db.update(job_id) as rec:
                rec.set("cancelRequested", "true")
        return append(db_, job_id_, indices, at, attempt)

    monkeypatch.setattr(journal, "append", cancel_after_first)
    worker.submit_pending(Site(config, db=db, adapter=fake), job_id)
    assert [c for k, c in fake.calls if k == "submit"] == [[0, 1, 2, 3]]
    assert sorted(journal.read(db.home.job_dir(job_id))) == [0, 1, 2, 3]


def test_a_degraded_batch_system_gets_nothing_until_it_recovers(grid, monkeypatch):
    config, db, job_id, fake, started = grid
    fake.cache.mark_degraded("squeue: Unable to contact slurm controller")

    def monitor_started(home):
        started.append("monitor")
        assert fake.count("submit") == 0
        fake.cache.mark_healthy()

    monkeypatch.setattr(background, "start_monitor", monitor_started)
    worker.submit_pending(Site(config, db=db, adapter=fake), job_id)
    assert started == ["monitor"]
    assert fake.submitted_tags() == sorted(tags(job_id, range(10)))
