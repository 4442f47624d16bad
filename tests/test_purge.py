"""Housekeeping: ``[retention]``, ``jim purge`` and the monitor's hourly retention (docs/housekeeping.md).

Real grid jobs on fork (finished, failed, cancelled, running), run by the real ``jim`` command; their
records are then made older than they are (their end moved back: :func:`age`), and the real ``jim
purge`` removes what the retention says, no more.  The in-process tests use records and work areas
made as a run leaves them.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lxml import etree

from jim import background, purge, removal
from jim.config import RetentionConfig, parse
from jim.db import Database
from jim.errors import ConfigError
from jim.locks import locked
from jim.paths import Home
from jim.record import PARSER
from jim.safeio import atomic_write
from jim.timestamps import now_iso, parse_iso

from support.finished import Maker
from support.jimcli import write_config

DAY = 86400.0


def age(home: Path, job_id: str, days: float) -> None:
    """Move the grid job's end (and every time the purge reads: its last update, its grid states, its
    outputs' gathering) ``days`` back, in its record and its index line."""
    db = Database(Home(home))
    shift = days * DAY
    with locked(db.home.db_lock(job_id)):
        path = db.home.record(job_id)
        root = etree.parse(str(path), PARSER).getroot()
        for el in [root, *root.iterfind("history/grid"), *root.iterfind("outputs")]:
            for name in ("at", "updated", "created"):
                if el.get(name):
                    el.set(name, now_iso(parse_iso(el.get(name)) - shift))
        atomic_write(path, etree.tostring(root.getroottree(), xml_declaration=True, encoding="UTF-8"))
    with locked(db.home.index_lock):
        db._write_index(db.rebuild_index_root())


def files_of(home: Path, *parts: str) -> dict[str, int]:
    """Every path under these parts of the home (not following links), with its size."""
    out = {}
    for part in parts:
        top = home / part
        if not top.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                p = Path(dirpath, name)
                out[str(p.relative_to(home))] = os.lstat(p).st_size
    return out


def fresh_stamp(home: Path) -> None:
    """The monitor applied the retention just now: it will not again within the hour (this test purges)."""
    Home(home).ensure()
    atomic_write(home / "cache" / purge.STAMP, b"")


def wait_for(what, timeout: float = 60.0, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(every)


def started(jim_env, job: str) -> None:
    wait_for(lambda: any(lj["state"] == "RUNNING" for lj in jim_env.status(job)["localJobs"]))


def test_only_what_has_expired_of_finished_grid_jobs_goes(jim_env, tmp_path):
    home = jim_env.home
    write_config(jim_env, '[batch]\nadapter = "fork"\ncores = 8\n')  # (two sleepers, three others beside)
    fresh_stamp(home)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("not jim's")
    done_old = jim_env.submit("&(executable=/bin/echo)(arguments=old)(count=2)")
    failed = jim_env.submit('&(executable=/bin/sh)(arguments=-c "exit 3")')
    cancelled = jim_env.submit("&(executable=/bin/sleep)(arguments=300)")
    running = jim_env.submit("&(executable=/bin/sleep)(arguments=300)")
    done_new = jim_env.submit("&(executable=/bin/echo)(arguments=new)")
    assert jim_env.wait(done_old)["JOB_STATE"] == "DONE"
    assert jim_env.wait(failed)["JOB_STATE"] == "FAILED"
    assert jim_env.wait(done_new)["JOB_STATE"] == "DONE"
    started(jim_env, cancelled)
    started(jim_env, running)
    assert jim_env.protocol("cancel", "--job-id", cancelled)["JOB_STATE"] == "FAILED"
    for job, days in ((done_old, 8), (failed, 31), (cancelled, 91), (running, 200)):
        age(home, job, days)
    jobs = home / "jobs"
    os.symlink(outside, jobs / failed / "local" / "0" / "planted")  # (a link in a work area going away)
    os.symlink(outside, jobs / cancelled / "planted")  # (and in one forgotten whole)
    before = files_of(home, "db", "jobs", "locks", "fork")

    dry = jim_env.run("purge", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    *lines, total = dry.stdout.splitlines()
    by_id = {line.split()[0]: line for line in lines}
    assert sorted(by_id) == sorted([done_old, failed, cancelled]), dry.stdout
    assert by_id[done_old].split()[1] == "DONE" and "would remove work area  " in by_id[done_old]
    assert by_id[failed].split()[1] == "FAILED" and "would remove work area, output tar  " in by_id[failed]
    assert by_id[cancelled].split()[1] == "CANCELLED"
    assert "would forget (record, work area, output tar)" in by_id[cancelled]
    assert total.startswith("3 grid job(s): 1 to forget, 2 to lose their work area or tar; would free ")
    assert files_of(home, "db", "jobs", "locks", "fork") == before  # (nothing removed, written or locked)

    done = jim_env.run("purge")
    assert done.returncode == 0, done.stderr
    *lines, total = done.stdout.splitlines()
    by_id = {line.split()[0]: line for line in lines}
    assert sorted(by_id) == sorted([done_old, failed, cancelled]), done.stdout
    assert "removed work area  " in by_id[done_old] and "removed work area, output tar  " in by_id[failed]
    assert "forgotten (record, work area, output tar)" in by_id[cancelled]
    freed = int(total.split("(")[-1].split()[0])
    assert total.startswith("3 grid job(s): 1 forgotten, 2 lost their work area or tar, 0 kept") and freed > 0

    assert sorted(os.listdir(jobs / done_old)) == [f"{done_old}.tar.gz"]  # (work area gone, tar kept)
    assert not (jobs / failed).exists() and not (jobs / cancelled).exists()
    assert (home / "db" / f"{failed}.xml").exists() and (home / "db" / f"{done_old}.xml").exists()
    assert not (home / "db" / f"{cancelled}.xml").exists() and not (home / "db" / f"{cancelled}.state").exists()
    assert not [p for p in os.listdir(home / "locks") if p.startswith(cancelled)]
    assert jim_env.poll(cancelled)["ERROR"] == "156"
    meta = jim_env.status(failed)
    assert meta["state"] == "FAILED"
    assert (outside / "precious").read_text() == "not jim's"  # (the links went, never what they point to)
    for job in (running, done_new):  # (running: however old; done_new: not expired)
        assert (jobs / job / "local" / "0").is_dir() and (jobs / job / "sandbox.tar.gz").exists()
    assert jim_env.poll(running)["JOB_STATE"] == "ACTIVE"
    after = files_of(home, "fork")
    assert after == {k: v for k, v in before.items() if k.startswith("fork")}  # (the batch side: untouched)

    listed = {j["id"] for j in json.loads(jim_env.run("list", "--json").stdout)}
    records = {p.stem for p in (home / "db").glob("*.xml") if p.name != "index.xml"}
    index = {el.get("id") for el in etree.parse(str(home / "db" / "index.xml")).getroot().iterfind("job")}
    assert listed == records == index == {done_old, failed, running, done_new}
    record = etree.parse(str(home / "db" / f"{failed}.xml")).getroot()
    assert record.find("meta").get("workAreaRemoved") and record.find("meta").get("outputTarRemoved")

    again = jim_env.run("purge")
    assert again.stdout.startswith("0 grid job(s)"), again.stdout
    jim_env.protocol("cancel", "--job-id", running)


def test_older_than_forgets_every_finished_grid_job_and_never_a_running_one(jim_env):
    fresh_stamp(jim_env.home)
    done = jim_env.submit("&(executable=/bin/true)")
    running = jim_env.submit("&(executable=/bin/sleep)(arguments=300)")
    jim_env.wait(done)
    started(jim_env, running)
    out = jim_env.run("purge", "--older-than", "0s")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith(f"{done}  DONE") and "forgotten (record" in out.stdout
    assert [j["id"] for j in json.loads(jim_env.run("list", "--json").stdout)] == [running]
    assert jim_env.poll(running)["JOB_STATE"] == "ACTIVE"
    bad = jim_env.run("purge", "--older-than", "3 months")
    assert bad.returncode == 1 and bad.stderr.startswith("jim: error: --older-than: '3 months' has a unit jim")
    jim_env.protocol("cancel", "--job-id", running)


@pytest.mark.parametrize(
    "table, why",
    [
        ('work_area = "-3d"', "[retention].work_area: '-3d' is negative"),
        ('record = "3mo"', "[retention].record: '3mo' has a unit jim does not know"),
        ('output_tar = "0d"', "[retention].output_tar: zero is ambiguous"),
        ("record = 30", "[retention].record: expected a string, got 30"),
        ('record = "1.5d"', "[retention].record: expected a whole number and a unit"),
        ('record = "5d"', "[retention].record (5d) is shorter than work_area (7d)"),
        ('keep = "5d"', "[retention]: unknown key 'keep'"),
    ],
)
def test_a_retention_that_makes_no_sense_is_refused_at_load(jim_env, table, why):
    write_config(jim_env, f"[retention]\n{table}\n")
    people = jim_env.run("list")
    assert people.returncode == 1 and people.stderr.startswith(f"jim: error: {why}"), people.stderr
    assert len(people.stderr.strip().splitlines()) == 1
    gatekeeper = jim_env.protocol("submit", "--rsl", "&(executable=/bin/true)")
    assert gatekeeper["ERROR"] == "47" and why in gatekeeper["MESSAGE"], gatekeeper
    with pytest.raises(ConfigError):
        parse({"retention": dict([tuple(part.strip().strip('"') for part in table.split("="))])})


def test_each_part_may_be_kept_for_ever():
    kept = RetentionConfig(work_area="forever", output_tar="forever", record="forever")
    assert purge.Rules.of(kept).soonest() is None
    assert purge.Rules.of(RetentionConfig(work_area="forever")).soonest() == 30 * DAY


def test_the_monitor_applies_the_retention_at_most_hourly(jim_env):
    home = jim_env.home
    old = jim_env.submit("&(executable=/bin/echo)(arguments=old)")
    jim_env.wait(old)
    wait_for(lambda: not background.running(background.monitor_lock(home)), timeout=30)  # (idle, gone)
    age(home, old, 8)
    stamp = home / "cache" / purge.STAMP
    stamp.unlink(missing_ok=True)  # (never applied in this home: the next monitor applies it at its start)
    running = jim_env.submit("&(executable=/bin/sleep)(arguments=300)")  # (a monitor runs for it)
    wait_for(lambda: sorted(os.listdir(home / "jobs" / old)) == [f"{old}.tar.gz"])
    wait_for(stamp.exists)  # (written once the whole home was looked at, a moment after)
    assert f"{old}  DONE" in (home / "log" / "jim.log").read_text()
    assert (home / "jobs" / running / "sandbox.tar.gz").exists() and jim_env.poll(running)["JOB_STATE"] == "ACTIVE"
    jim_env.protocol("cancel", "--job-id", running)

    db = Database(Home(home))  # (in process: the stamp is an hour's promise)
    keeping = purge.Housekeeping(db, RetentionConfig())
    keeping.maybe()
    assert keeping.next > time.monotonic() + purge.INTERVAL - 60
    os.utime(stamp, (time.time() - 2 * purge.INTERVAL,) * 2)
    purge.Housekeeping(db, RetentionConfig()).maybe()
    assert time.time() - stamp.stat().st_mtime < 60  # (applied again: more than an hour had gone)


# ---------------------------------------------------------------------------
# in process: records and work areas as a run leaves them
# ---------------------------------------------------------------------------


def made(db: Database, *, days: float, gathered: bool = True) -> str:
    job_id = Maker(db, 2, days * DAY).one()
    if not gathered:
        with db.update(job_id) as rec:
            rec.root.remove(rec.root.find("outputs"))
    return job_id


def test_a_grid_job_not_finished_is_never_touched(tmp_path):
    db = Database(Home(tmp_path / "home").ensure())
    ungathered = made(db, days=100, gathered=False)
    with_worker = made(db, days=100)
    holder = subprocess.Popen(  # (another process holds the worker's lock, as a running worker does)
        [sys.executable, "-c", "import fcntl,os,sys,time; fd=os.open(sys.argv[1],os.O_RDWR|os.O_CREAT); "
         "fcntl.flock(fd,fcntl.LOCK_EX); print('held',flush=True); time.sleep(60)",
         background.worker_lock(db.home.root, with_worker)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        report = purge.purge_home(db, purge.Rules.of(RetentionConfig()))
    finally:
        holder.kill()
        holder.wait()
    assert report.outcomes == []
    for job_id in (ungathered, with_worker):
        assert db.exists(job_id) and (db.home.job_dir(job_id) / "local").is_dir()


def test_links_and_odd_trees_in_a_work_area(tmp_path):
    db = Database(Home(tmp_path / "home").ensure())
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "file").write_text("keep")
    linked = made(db, days=100)
    readonly = made(db, days=100)
    jobs = db.home.jobs
    job_dir = jobs / linked
    os.rename(job_dir, tmp_path / "moved")
    os.symlink(outside, job_dir)  # (the work area itself a link out of the home)
    locked_dir = jobs / readonly / "local" / "0" / "sub"
    locked_dir.mkdir()
    (locked_dir / "f").write_text("x")
    locked_dir.chmod(0o500)  # (a payload made it read-only)
    report = purge.purge_home(db, purge.Rules.of(RetentionConfig()))
    assert [o.job_id for o in report.outcomes] == sorted([linked, readonly])
    assert all(not o.error for o in report.outcomes), report.lines()
    assert (outside / "deep" / "file").read_text() == "keep" and not os.path.lexists(job_dir)
    assert not (jobs / readonly).exists() and db.list() == []


def test_a_home_whose_jobs_directory_is_a_link_is_not_purged(tmp_path):
    db = Database(Home(tmp_path / "home").ensure())
    made(db, days=100)
    os.rename(db.home.jobs, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", db.home.jobs)
    with pytest.raises(Exception, match="is a symbolic link: nothing of"):
        purge.purge_home(db, purge.Rules.of(RetentionConfig()))
    assert len(db.list()) == 1


def test_remover_never_follows_a_directory_swapped_for_a_link(tmp_path):
    top = tmp_path / "top"
    (top / "d").mkdir(parents=True)
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "f").write_text("keep")
    fd = removal.open_dir(top)
    try:
        seen = os.lstat("d", dir_fd=fd)  # (what the walk saw; then the directory becomes a link)
        os.rmdir(top / "d")
        os.symlink(tmp_path / "target", top / "d")
        with pytest.raises(OSError):
            removal.Remover()._empty(fd, "d", seen, seen.st_dev, 0)
        assert removal.Remover().remove(fd, "d")  # (looked at afresh: a link, removed as one)
    finally:
        os.close(fd)
    assert (tmp_path / "target" / "f").read_text() == "keep" and not os.path.lexists(top / "d")


def test_a_budget_stops_and_the_rest_goes_next_time(tmp_path):
    db = Database(Home(tmp_path / "home").ensure())
    ids = sorted(made(db, days=100) for _ in range(3))
    rules = purge.Rules.of(RetentionConfig())
    budget = purge.Budget(0.0)
    seen = []
    for k in range(2):  # (no time at all: one grid job each, each purge going on after the last one's)
        report = purge.purge_home(db, rules, budget=budget)
        assert not report.finished and budget.after == ids[k]
        seen += [o.job_id for o in report.outcomes]
    assert seen == ids[:2]
    budget.seconds = 60.0
    rest = purge.purge_home(db, rules, budget=budget)
    assert rest.finished and budget.after == "" and [o.job_id for o in rest.outcomes] == ids[2:]
    assert db.list() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="--all-users is root's")
def test_all_users_as_root_goes_through_the_homes_a_pattern_names(jim_env, tmp_path):
    fresh_stamp(jim_env.home)
    done = jim_env.submit("&(executable=/bin/true)")
    jim_env.wait(done)
    age(jim_env.home, done, 100)
    name = pwd.getpwuid(0).pw_name
    os.symlink(jim_env.home, tmp_path / name)  # (root's home by the pattern; no other account has one)
    out = jim_env.run("purge", "--all-users", "--homes", str(tmp_path / "{user}"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith(f"{name}  {done}  DONE"), out.stdout
    assert out.stdout.splitlines()[-1].startswith("1 grid job(s): 1 forgotten")
    assert json.loads(jim_env.run("list", "--json").stdout) == []


def test_jims_log_rotates_by_size_across_processes(tmp_path):
    writer = (
        "import logging, sys\nfrom pathlib import Path\nimport jim.log as jl\n"
        "jl.MAX_LOG_BYTES = 20000\njl.setup(Path(sys.argv[1]))\n"
        "for i in range(1500):\n"
        "    logging.getLogger('jim.t').info('writer %s line %05d %s', sys.argv[2], i, 'x' * 40)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", writer, str(tmp_path / "home"), str(n)]) for n in range(3)]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    logdir = tmp_path / "home" / "log"
    names = sorted(os.listdir(logdir))
    assert names == [".jim.log.lock", "jim.log", *(f"jim.log.{k}" for k in range(1, 6))], names
    for name in names[1:]:
        st = (logdir / name).stat()
        assert st.st_size < 20000 + 3 * 200 and st.st_mode & 0o777 == 0o600
    lines = [line for name in names[1:] for line in (logdir / name).read_text().splitlines()]
    assert lines and all(" writer " in line for line in lines)  # (whole lines only)


def test_a_childs_answer_is_checked_before_root_prints_it():
    good = purge.Outcome("20261129-101311-61e91ccc", "DONE", now_iso(), ["work area"], 4096, "")
    report = purge.Report()
    report.add_json({"outcomes": [dict(good.__dict__)], "skipped": ["odd\x1b[2Jhome"], "finished": True}, "alice")
    assert report.outcomes[0].user == "alice" and report.skipped == ["alice: odd?[2Jhome"]
    for bad in (
        {**good.__dict__, "job_id": "../../etc"},
        {**good.__dict__, "state": "PWNED"},
        {**good.__dict__, "removed": ["/etc/passwd"]},
        {**good.__dict__, "freed": -1},
        {**good.__dict__, "extra": 1},
    ):
        with pytest.raises(ValueError):
            purge.Report().add_json({"outcomes": [bad], "skipped": [], "finished": True}, "alice")
    tampered = dict(good.__dict__, error="\x1b]0;owned\x07 line\nbreak")
    report.add_json({"outcomes": [tampered], "skipped": [], "finished": True}, "bob")
    assert report.outcomes[1].error == "?]0;owned? line break"
