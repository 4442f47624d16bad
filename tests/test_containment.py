"""One bad grid job is contained: hostile wrapper files parse to nothing, a failing output tar fails
its own grid job only, and every other grid job of the user goes on."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jim import background, localfiles, monitor, summary, worker
from jim.config import parse
from jim.db import Database
from jim.jobdesc import parse_rsl
from jim.localfiles import read_exit, read_heartbeat, read_progress, read_progress_counted
from jim.memo import Memo
from jim.monitor import refresh
from jim.paths import Home
from jim.site import Site
from jim.states import GramState, LocalState
from jim.submit import submit

from support.fake_adapter import FakeAdapter
from support.jimcli import processes_of


def test_progress_digits_of_other_scripts_are_bad_lines(tmp_path):
    # str.isdigit() accepts these; int() rejects the superscript and accepts the Arabic-Indic digit
    (tmp_path / "progress").write_text("gen 10 250\nsim \u00b2 3\nsim \u0663 3\nsim +1 3\nreco 5 7\n")
    phases, bad = read_progress_counted(tmp_path)
    assert phases == {"gen": (10, 250), "reco": (5, 7)}
    assert bad == 3


def test_progress_lines_bounded(tmp_path):
    long_name = "x" * (localfiles.MAX_PHASE_NAME + 1)
    huge = "9" * 19
    lines = [f"{long_name} 1 2", f"gen {huge} 1", "gen 1 2 3", "a" * 300 + " 1 2", "\udcff 1 2", "ok 1 2"]
    (tmp_path / "progress").write_bytes("\n".join(lines).encode(errors="surrogateescape"))
    assert read_progress_counted(tmp_path) == ({"ok": (1, 2)}, 5)


def test_progress_many_phases_and_lines(tmp_path):
    many = "".join(f"p{i} {i} 100\n" for i in range(localfiles.MAX_PHASES + 10))
    (tmp_path / "progress").write_text(many)
    phases, bad = read_progress_counted(tmp_path)
    assert len(phases) == localfiles.MAX_PHASES and bad == 10
    # only the tail of a file that grows without end is read
    (tmp_path / "progress").write_bytes(b"gen 1 2\n" + b"junk\n" * 100_000 + b"gen 2 2\n")
    phases, bad = read_progress_counted(tmp_path)
    assert phases == {"gen": (2, 2)} and bad <= localfiles.MAX_PROGRESS_BYTES // 5


def test_exit_and_heartbeat_files_take_ascii_digits_only(tmp_path):
    (tmp_path / "exit_code").write_text("\u0663\n")
    assert read_exit(tmp_path) is None
    (tmp_path / "exit_code").write_bytes(b"3\nerror=\xff\n")
    assert read_exit(tmp_path).code == 3
    (tmp_path / "heartbeat").write_text("\u0661\u0662")
    assert read_heartbeat(tmp_path) is None
    (tmp_path / "heartbeat").write_text("9" * 40)
    assert read_heartbeat(tmp_path) is None
    (tmp_path / "heartbeat").write_text("1700000000\n")
    assert read_heartbeat(tmp_path) == 1700000000


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=4096) | st.lists(st.text(max_size=40)).map(lambda ls: "\n".join(ls).encode()))
def test_read_progress_never_raises_and_is_bounded(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("p")
    (d / "progress").write_bytes(data)
    phases, bad = read_progress_counted(d)
    assert read_progress(d) == phases
    assert len(phases) <= localfiles.MAX_PHASES
    assert bad <= data.count(b"\n") + 1
    for name, (done, total) in phases.items():
        assert 0 < len(name) <= localfiles.MAX_PHASE_NAME and name.isprintable() and not any(c.isspace() for c in name)
        assert 0 <= done < 10**18 and 0 <= total < 10**18


def _monitors(home) -> list[psutil.Process]:
    found = []
    for p in processes_of(home):
        try:
            if "_monitor" in p.cmdline():
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow  # (waits for the monitor's idle exit)
def test_one_bad_grid_job_does_not_stop_the_others(jim_env, tmp_path):
    """A poisoned progress file and an output tar that cannot be renamed into place, next to healthy
    grid jobs: the healthy ones and the poisoned one end DONE, the other FAILED with a MESSAGE, and
    the monitor exits when nothing is left to follow."""
    poison = tmp_path / "poison.sh"
    poison.write_text(
        'printf "sim \\262 3\\nsim \\331\\243 3\\n" >> "$JIM_PROGRESS_FILE"\n'
        'echo "gen 5 5" >> "$JIM_PROGRESS_FILE"\necho poisoned\n'
    )
    go = tmp_path / "go"
    gated = tmp_path / "gated.sh"
    gated.write_text(f'while [ ! -e "{go}" ]; do sleep 0.1; done\necho gated\n')
    outdir = tmp_path / "out"
    outdir.mkdir()
    tar = outdir / "blocked.tar.gz"

    bad_progress = jim_env.submit(f"&(executable=/bin/sh)(arguments={poison})(count=2)")
    blocked = jim_env.submit(f"&(executable=/bin/sh)(arguments={gated})(outputtar={tar})")
    healthy = [jim_env.submit('&(executable=/bin/sh)(arguments=-c "echo ok")(count=2)') for _ in range(2)]
    tar.mkdir()  # the final rename of the output tar cannot replace a directory
    go.touch()

    for job in healthy:
        out = jim_env.wait(job)
        assert (out["JOB_STATE"], out["EXIT_CODE"]) == ("DONE", "0"), out
    out = jim_env.wait(bad_progress)
    assert (out["JOB_STATE"], out["EXIT_CODE"]) == ("DONE", "0"), out
    assert all(
        lj["progress"] == [{"name": "gen", "done": 5, "total": 5}] for lj in jim_env.status(bad_progress)["localJobs"]
    )
    out = jim_env.wait(blocked)
    assert out["JOB_STATE"] == "FAILED", out
    assert "output tar not written" in out["MESSAGE"] and str(tar) in out["MESSAGE"], out
    assert jim_env.status(blocked)["failReason"] == out["MESSAGE"]
    assert tar.is_dir() and [p.name for p in outdir.iterdir()] == ["blocked.tar.gz"]  # no temporary file left

    deadline = time.monotonic() + 30
    while _monitors(jim_env.home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _monitors(jim_env.home), "the monitor did not exit once nothing was active"
    log = (jim_env.home / "log" / "jim.log").read_text()
    assert "Traceback" not in log and "monitor pass failed" not in log
    assert log.count("output tar not written") == 2, log  # once when it first failed, once when it gave up


# ---------------------------------------------------------------------------
# the monitor's pass, in process, against an in-memory batch system
# ---------------------------------------------------------------------------


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A config, a database, a fake batch system; background process starts are recorded, not made."""
    config = parse({"monitor": {"interval": 0.01, "lost_grace": 60.0}}, env={"JIM_HOME": str(tmp_path / "home")})
    db = Database(Home(config.home).ensure())
    fake = FakeAdapter(db.home)
    monkeypatch.setattr(background, "start_monitor", lambda home: None)
    monkeypatch.setattr(background, "start_worker", lambda home, job_id: None)

    def grid_job(n: int) -> str:
        job_id = submit(Site(config), parse_rsl(f"&(executable=/bin/true)(count={n})"), start_background=False)
        worker.submit_pending(Site(config, db=db, adapter=fake), job_id)
        return job_id

    return config, db, fake, grid_job


def _damage(db: Database, job_id: str, old: bytes, new: bytes) -> None:
    path = db.home.record(job_id)
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))


def test_an_error_in_one_grid_job_fails_it_alone_after_bounded_tries(site, caplog):
    config, db, fake, grid_job = site
    bad, good = grid_job(2), grid_job(2)
    # a record jim itself cannot make sense of: a progress phase that is no number
    with db.update(bad) as rec:
        rec.local(0).set_progress({"gen": (1, 2)})
    _damage(db, bad, b'done="1"', b'done="one"')
    local = db.home.local_dir(bad, 0)
    local.mkdir(parents=True)
    (local / "progress").write_text("gen 2 2\n")
    memo = Memo()
    caplog.set_level(logging.INFO, logger="jim")
    for k in range(2):
        fake.set_state(f"{good}.{k}", LocalState.DONE, exit_code=0)
    assert refresh(Site(config, db=db, adapter=fake), memo=memo) == 1  # the other grid job went on and ended
    assert db.read(good).state is GramState.DONE
    for _ in range(monitor.MAX_TRIES - 1):
        refresh(Site(config, db=db, adapter=fake), memo=memo)
    job = db.read(bad)
    assert job.state is GramState.FAILED
    assert [lj.state for lj in job.local_jobs()] == [LocalState.CANCELLED] * 2
    answer = summary.read(db.home.summary(bad))
    assert answer["JOB_STATE"] == "FAILED" and "jim could not follow this grid job: ValueError" in answer["MESSAGE"]
    batch_ids = sorted(lj.batch_id for lj in job.local_jobs())
    assert [sorted(c) for k, c in fake.calls if k == "cancel"] == [batch_ids]  # its local jobs stopped
    assert refresh(Site(config, db=db, adapter=fake), memo=memo) == 0
    failures = [r for r in caplog.records if "monitoring of grid job" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is None  # once, with its cause, no traceback


def test_a_record_that_cannot_be_read_is_no_longer_followed(site, caplog):
    config, db, fake, grid_job = site
    bad, good = grid_job(1), grid_job(1)
    db.home.record(bad).write_bytes(b"<gridjob")
    memo = Memo()
    caplog.set_level(logging.INFO, logger="jim")
    for _ in range(monitor.MAX_TRIES):
        assert refresh(Site(config, db=db, adapter=fake), memo=memo) >= 1
    fake.set_state(f"{good}.0", LocalState.DONE, exit_code=0)
    assert (
        refresh(Site(config, db=db, adapter=fake), memo=memo) == 0
    )  # nothing left that can be followed: the monitor may exit
    assert db.read(good).state is GramState.DONE
    assert bad in memo.given_up
    assert sum("monitoring of grid job" in r.getMessage() for r in caplog.records) == 1


def test_a_failing_pass_logs_its_traceback_once_per_cause(caplog):
    failing = monitor._PassFailures()
    with caplog.at_level(logging.INFO, logger="jim.monitor"):
        for _ in range(20):
            failing.failed(OSError("sacct: connection refused"))
        failing.failed(ValueError("bad answer"))
        failing.ok()
        failing.ok()
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert [str(r.exc_info[1]) for r in tracebacks] == ["sacct: connection refused", "bad answer"]
    assert [r.getMessage() for r in caplog.records if "work again" in r.getMessage()] == [
        "monitor passes work again after 21 failed"
    ]


def test_wrapper_files_that_are_fifos_never_stall_the_monitor(tmp_path):
    """A local job may turn its progress, exit-code, heartbeat or started file into a FIFO: opening
    one to read would wait for a writer for ever and stop the user's monitor; it reads as absent."""
    for name in ("progress", "exit_code", "heartbeat", "started"):
        os.mkfifo(tmp_path / name)
    code = (
        "import sys; from pathlib import Path; from jim import localfiles as f; d = Path(sys.argv[1]);"
        "print(f.read_progress_counted(d), f.read_exit(d), f.read_heartbeat(d), f.read_started(d))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "({}, 0) None None None"
