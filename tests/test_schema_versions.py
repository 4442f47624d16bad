"""Schema versions (docs/upgrades.md): records written by earlier jims are read, shown and finished by this
one, and brought up to version 2 when first written; a record of a newer version is refused with one line
by every command, answered as an error by ``jim poll``, and left alone by the monitor while it follows the
other grid jobs; ``jim doctor`` counts both kinds; the index of another version is migrated or rebuilt.

The old records (tests/data/records/, see its README) are the bytes earlier jims wrote, run on fork.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from lxml import etree

from jim import summary
from jim.background import monitor_lock, running
from jim.db import Database, validate
from jim.doctor import schema_report
from jim.errors import DatabaseError, RecordTooNew
from jim.paths import Home
from jim.record import SCHEMA_VERSION
from jim.record.migrate import INDEX_STEPS, RECORD_STEPS, file_version, upgrade, version_of

from support.jimcli import FAST_CONFIG, Jim, kill_all

DATA = Path(__file__).resolve().parent / "data" / "records"
V1_SCHEMA = etree.RelaxNG(etree.parse(str(DATA / "jim-v1.rng")))

FIRST = "20261129-100941-b1f9aca1"  # the first jim: DONE
MC_DONE = "20261129-100954-35288df6"  # jim at 8e0db11: a Monte Carlo grid job, DONE, with usage
PENDING = "20261129-100955-4af3fc65"  # jim at 8e0db11: PENDING, nothing submitted
ACTIVE = "20261129-101001-332c08c3"  # jim at 8e0db11: RUNNING local jobs that ended with no monitor
FUTURE = "20261129-120000-99999999"  # schema version 99

TOO_NEW = f"record {FUTURE} was written by a newer jim (schema 99, this jim reads up to 2): upgrade jim"


@pytest.fixture
def old_home(tmp_path):
    """A jim whose home is filled from tests/data/records by :func:`install`; on teardown every process of
    the home is killed and each record and index validates against the schema of its own version (this
    jim's for 2, version 1's for 1); a version-99 record must be as it was installed."""
    home = tmp_path / "jimhome"
    config = tmp_path / "jim.toml"
    # (the fixtures' records ended on 2026-11-29: kept whatever today's date, or the monitor's retention forgets them)
    keep = '\n[retention]\nrecord = "forever"\nwork_area = "forever"\noutput_tar = "forever"\n'
    config.write_text(FAST_CONFIG + keep)
    yield Jim(home, config)
    kill_all(home)
    errors = []
    for path in sorted((home / "db").glob("*.xml")):
        version = _version(path)
        if version == 2:
            errors += [f"{path.name}: {e}" for e in validate(path)]
        elif version == 1:
            if not V1_SCHEMA.validate(etree.parse(str(path))):
                errors.append(f"{path.name}: not a valid version-1 file: {V1_SCHEMA.error_log}")
        elif path.read_bytes() != (DATA / "v99" / "db" / path.name).read_bytes():
            errors.append(f"{path.name}: a record of version {version} was written by this jim")
    assert not errors, "\n".join(errors)


def install(jim: Jim, *parts: str) -> None:
    """Copy the homes ``parts`` of tests/data/records into ``jim``'s home (the index from the first that
    has one), private to this account, with the directories a home has."""
    home = jim.home
    for sub in ("db", "jobs", "locks", "log", "cache"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    for part in parts:
        for src in sorted((DATA / part).rglob("*")):
            dst = home / src.relative_to(DATA / part)
            if src.is_dir():
                dst.mkdir(parents=True, exist_ok=True)
            elif not (src.name == "index.xml" and dst.exists()):
                shutil.copyfile(src, dst)
    for path in [home, *home.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)


def _version(path: Path) -> int:
    text = etree.parse(str(path)).getroot().get("schemaVersion")
    return int(text) if text is not None else 1


def _installed_bytes(jim: Jim, job_id: str) -> tuple[bytes, bytes]:
    db = jim.home / "db"
    return (db / f"{job_id}.xml").read_bytes(), (db / f"{job_id}.state").read_bytes()


def _wait_for(what: str, condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout:g} s")
        time.sleep(0.05)


# ---- the old records as they are


def test_the_old_records_are_version_1_and_valid_in_it():
    for path in sorted(DATA.glob("v1-*/db/*.xml")):
        doc = etree.parse(str(path))
        assert doc.getroot().get("schemaVersion") == "1", path
        assert V1_SCHEMA.validate(doc), f"{path}: {V1_SCHEMA.error_log}"
    for path in sorted(DATA.glob("v1-*/db/*.state")):
        assert "SCHEMA" not in (summary.read(path) or {}), path


def test_this_jim_writes_the_version_its_schema_says():
    rng = etree.parse(str(Path(__file__).resolve().parent.parent / "jim" / "schema" / "jim.rng"))
    ns = {"r": "http://relaxng.org/ns/structure/1.0"}
    values = rng.xpath("//r:attribute[@name='schemaVersion']/r:value/text()", namespaces=ns)
    assert values == [SCHEMA_VERSION, SCHEMA_VERSION]  # (the record's and the index's)
    assert SCHEMA_VERSION == str(summary.RECORD_SCHEMA) == "2"
    assert set(RECORD_STEPS) == set(INDEX_STEPS) == set(range(1, summary.RECORD_SCHEMA))


# ---- reading and writing a version-1 record


def test_a_v1_record_is_shown_and_listed_and_not_written(old_home):
    install(old_home, "v1-first", "v1-mc-done")
    before = {job_id: _installed_bytes(old_home, job_id) for job_id in (FIRST, MC_DONE)}
    index = (old_home.home / "db" / "index.xml").read_bytes()
    first = old_home.status(FIRST)
    assert first["state"] == "DONE" and [lj["state"] for lj in first["localJobs"]] == ["DONE"] * 3
    mc = old_home.status(MC_DONE)
    assert mc["jobtype"] == "montecarlo" and all(lj["usage"]["source"] == "wrapper" for lj in mc["localJobs"])
    text = old_home.run("status", FIRST)
    assert text.returncode == 0 and "DONE" in text.stdout, text.stderr
    listed = json.loads(old_home.run("list", "--json").stdout)
    assert {j["id"] for j in listed} == {FIRST}  # (the index installed is the first jim's)
    for job_id, data in before.items():
        assert _installed_bytes(old_home, job_id) == data  # (shown, never written)
    assert (old_home.home / "db" / "index.xml").read_bytes() == index


def test_reading_for_an_update_that_changes_nothing_writes_nothing(old_home):
    install(old_home, "v1-first")
    db = Database(Home(old_home.home))
    path = old_home.home / "db" / f"{FIRST}.xml"
    data = path.read_bytes()
    job = db.read(FIRST)
    assert job.get("schemaVersion") == "2"  # (brought up to date in memory)
    with db.update(FIRST):
        pass
    assert path.read_bytes() == data
    with db.update(FIRST) as rec:
        rec.set("name", "renamed")
    assert _version(path) == 2 and not validate(path)
    assert db.read(FIRST).get("name") == "renamed"


def test_an_active_v1_grid_job_is_finished_and_migrated_by_the_monitor_poll_starts(old_home):
    install(old_home, "v1-active")
    assert old_home.poll(ACTIVE)["JOB_STATE"] == "ACTIVE"
    assert old_home.wait(ACTIVE)["JOB_STATE"] == "DONE"
    record = old_home.home / "db" / f"{ACTIVE}.xml"
    assert _version(record) == 2 and not validate(record)
    st = old_home.status(ACTIVE)
    assert [(lj["state"], lj["evidence"]) for lj in st["localJobs"]] == [("DONE", "wrapper-exit-file")] * 2
    assert summary.read(old_home.home / "db" / f"{ACTIVE}.state")["SCHEMA"] == "2"
    index = old_home.home / "db" / "index.xml"
    assert _version(index) == 2 and not validate(index)


def test_a_pending_v1_grid_job_is_migrated_by_cancel(old_home):
    install(old_home, "v1-pending")
    out = old_home.protocol("cancel", "--job-id", PENDING)
    assert out["_rc"] == "0", out
    record = old_home.home / "db" / f"{PENDING}.xml"
    assert _version(record) == 2 and not validate(record)
    assert {lj["state"] for lj in old_home.status(PENDING)["localJobs"]} == {"CANCELLED"}


def test_a_pending_v1_grid_job_runs_to_its_end_with_this_jim(old_home):
    install(old_home, "v1-pending")
    assert old_home.wait(PENDING)["JOB_STATE"] == "DONE"
    record = old_home.home / "db" / f"{PENDING}.xml"
    assert _version(record) == 2 and not validate(record)
    assert [lj["exitCode"] for lj in old_home.status(PENDING)["localJobs"]] == [0, 0]


# ---- a record of a newer version


def test_a_newer_record_is_refused_by_status_poll_and_cancel(old_home):
    install(old_home, "v1-first", "v99")
    before = _installed_bytes(old_home, FUTURE)
    status = old_home.run("status", FUTURE)
    assert status.returncode == 1 and status.stderr.strip().splitlines()[-1] == f"jim: error: {TOO_NEW}"
    poll = old_home.poll(FUTURE)
    assert (poll["_rc"], poll.get("ERROR"), poll.get("MESSAGE"), poll.get("JOB_STATE")) == ("1", "123", TOO_NEW, None)
    bulk = json.loads(old_home.run("poll", "--json", "--job-id", FUTURE, "--job-id", FIRST).stdout)
    assert bulk == {FUTURE: {"ERROR": 123, "MESSAGE": TOO_NEW}, FIRST: {"JOB_STATE": "DONE", "EXIT_CODE": 0}}
    cancel = old_home.protocol("cancel", "--job-id", FUTURE)
    assert (cancel["_rc"], cancel.get("ERROR"), cancel.get("MESSAGE")) == ("1", "123", TOO_NEW)
    assert not running(monitor_lock(old_home.home))  # (poll started nothing for it)
    assert _installed_bytes(old_home, FUTURE) == before


def test_the_monitor_leaves_a_newer_record_alone_and_follows_the_others(old_home):
    install(old_home, "v1-active", "v99")
    before = _installed_bytes(old_home, FUTURE)
    assert old_home.wait(ACTIVE)["JOB_STATE"] == "DONE"
    # (the monitor exits once nothing else is active: the newer grid job is not counted as active)
    _wait_for("the monitor exited", lambda: not running(monitor_lock(old_home.home)), timeout=60)
    assert _installed_bytes(old_home, FUTURE) == before  # neither written nor ended FAILED
    log = (old_home.home / "log" / "jim.log").read_text()
    assert log.count(f"grid job {FUTURE} is left alone: {TOO_NEW}") == 1, log


def test_doctor_counts_the_records_to_migrate_and_the_newer_ones(old_home):
    install(old_home, "v1-active", "v1-first", "v1-mc-done", "v99")
    assert old_home.wait(ACTIVE)["JOB_STATE"] == "DONE"  # (now at version 2)
    out = old_home.run("doctor")
    assert out.returncode == 1, out.stdout
    lines = out.stdout.splitlines()
    assert "records:  4, 1 at schema 2 (this jim's)" in lines
    assert "  2 need migration (schema 1): each is brought up to date when next written" in lines
    assert f"  PROBLEM: 1 written by a newer jim (schema 99; this jim reads up to 2): upgrade jim: {FUTURE}" in lines, (
        out.stdout
    )


def test_doctor_finds_nothing_to_say_of_a_home_of_this_version(old_home):
    install(old_home, "v1-active")
    assert old_home.wait(ACTIVE)["JOB_STATE"] == "DONE"
    out = old_home.run("doctor")
    assert "records:  1, 1 at schema 2 (this jim's)" in out.stdout.splitlines()
    assert "migration" not in out.stdout and "index:" not in out.stdout and "newer jim" not in out.stdout


# ---- the index


def test_an_older_index_is_read_and_written_at_this_version_with_the_next_change(old_home):
    install(old_home, "v1-first", "v1-pending")
    index = old_home.home / "db" / "index.xml"
    data = index.read_bytes()
    assert [j["id"] for j in json.loads(old_home.run("list", "--json").stdout)] == [FIRST]
    assert "index:    schema 1: brought up to date when next written" in old_home.run("doctor").stdout
    assert index.read_bytes() == data  # (listed, not written)
    assert old_home.protocol("cancel", "--job-id", PENDING)["_rc"] == "0"
    assert _version(index) == 2 and not validate(index)
    assert {j["id"] for j in json.loads(old_home.run("list", "--json").stdout)} == {FIRST, PENDING}


def test_a_newer_index_is_rebuilt_from_the_records_this_jim_reads(old_home):
    install(old_home, "v1-first", "v1-pending", "v99")
    index = old_home.home / "db" / "index.xml"
    index.write_text('<index schemaVersion="99"><job id="20261129-130000-aaaaaaaa" state="DONE" lease="x"/></index>\n')
    listed = json.loads(old_home.run("list", "--json").stdout)
    assert sorted(j["id"] for j in listed) == [FIRST, PENDING]  # (the records: not the newer record, not the index)
    assert "index:    schema 99: rebuilt from the records when next written" in old_home.run("doctor").stdout
    assert old_home.protocol("cancel", "--job-id", PENDING)["_rc"] == "0"
    assert _version(index) == 2 and not validate(index)
    assert sorted(el.get("id") for el in etree.parse(str(index)).getroot()) == [FIRST, PENDING]


# ---- the parts


def _root(attrs: str, tag: str = "gridjob") -> etree._Element:
    return etree.fromstring(f"<{tag} {attrs}/>")


def test_the_version_of_a_root():
    assert version_of(_root('id="x"')) == 1
    assert version_of(_root('schemaVersion="2"')) == 2
    for bad in ("", "abc", "0", "-1", "1.5", "1" * 10):
        with pytest.raises(DatabaseError, match="not a version: corrupt file"):
            version_of(_root(f'schemaVersion="{bad}"'))


def test_upgrade_is_idempotent_and_refuses_a_newer_root():
    for tag in ("gridjob", "index"):
        root = _root('schemaVersion="1"', tag)
        assert upgrade(root, "x") == 1 and root.get("schemaVersion") == "2"
        assert upgrade(root, "x") == 2 and etree.tostring(root) == etree.tostring(_root('schemaVersion="2"', tag))
        bare = _root("", tag)
        assert upgrade(bare, "x") == 1 and bare.get("schemaVersion") == "2"
    newer = _root('schemaVersion="3"')
    with pytest.raises(RecordTooNew) as e:
        upgrade(newer, "record R")
    assert e.value.message == "record R was written by a newer jim (schema 3, this jim reads up to 2): upgrade jim"
    assert e.value.gram_error == 123 and newer.get("schemaVersion") == "3"


def test_the_version_of_a_file_from_its_first_bytes():
    head = b"<?xml version='1.0'?>\n<?xml-stylesheet type='text/xsl' href='jim.xsl'?>\n"
    tag = b'<gridjob schemaVersion="7" name="' + b"n" * 100_000 + b'">'
    chunks = [head + tag[:10], tag[10:70_000], tag[70_000:], b"<never-read"]
    assert file_version(iter(chunks)) == 7
    assert file_version([head + b"<gridjob id='x'>"]) == 1
    assert file_version([head]) is None  # (no start tag at all)
    assert file_version([b"not xml"]) is None
    assert file_version([b"<gridjob schemaVersion='x'>"]) is None


def test_the_summary_says_its_records_version():
    assert summary.newer_schema({"JOB_STATE": "DONE"}) is None  # (written before versions: 1)
    assert summary.newer_schema({"SCHEMA": "2"}) is None
    assert summary.newer_schema({"SCHEMA": "99"}) == 99
    assert summary.newer_schema({"SCHEMA": "x9"}) is None
    rendered = summary.render("ACTIVE", exit_code=None, message=None, unsubmitted=0, cancel=False)
    assert b"\n#SCHEMA=2\n" in rendered


def test_the_database_refuses_a_newer_record_and_counts_it(tmp_path):
    """Listed as active (its summary is not terminal: the monitor finds it, to leave it alone); read only to be
    refused; counted from its first bytes, never through a link."""
    home = Home(tmp_path / "home")
    home.ensure()
    for name in (f"{FUTURE}.xml", f"{FUTURE}.state"):
        shutil.copyfile(DATA / "v99" / "db" / name, home.db / name)
    db = Database(home)
    assert db.active_ids() == [FUTURE]
    with pytest.raises(RecordTooNew, match="schema 99, this jim reads up to 2"):
        db.read(FUTURE)
    with pytest.raises(RecordTooNew), db.update(FUTURE):
        pass
    assert db.schema_versions() == {FUTURE: 99}
    os.symlink(home.db / f"{FUTURE}.xml", home.db / "20261129-120000-88888888.xml")
    assert db.schema_versions()["20261129-120000-88888888"] is None  # (never through a link)


def test_doctor_names_the_records_it_cannot_read(tmp_path, capsys):
    home = Home(tmp_path / "home")
    home.ensure()
    shutil.copyfile(DATA / "v99" / "db" / f"{FUTURE}.xml", home.db / f"{FUTURE}.xml")
    (home.db / "20261129-130000-bbbbbbbb.xml").write_bytes(b"not a record")
    os.symlink(home.db / f"{FUTURE}.xml", home.db / "20261129-130000-cccccccc.xml")
    assert schema_report(Database(home)) is False
    assert capsys.readouterr().out.splitlines() == [
        "records:  3, 0 at schema 2 (this jim's)",
        f"  PROBLEM: 1 written by a newer jim (schema 99; this jim reads up to 2): upgrade jim: {FUTURE}",
        "  PROBLEM: 2 without a schema version jim can read (damaged, or a link): jim status ID says why: "
        "20261129-130000-bbbbbbbb, 20261129-130000-cccccccc",
    ]
