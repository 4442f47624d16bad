"""``jim submit`` killed anywhere: a grid job runs only when its ``JOB_ID`` line was written.

The gatekeeper kills a submit that runs out of time, with its whole process
group.  These tests kill the real ``jim submit`` (at its fault points, and by
``killpg`` at random moments), let the recovery run as it does at a site (the
next worker, the monitor, a poll) and look at what ran: every local job
appends a line to a file named by its tag outside jim's home, so a local job
that ran is seen even if jim removed every trace of its grid job.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from jim.config import load
from jim.jobdesc import parse_rsl
from jim.journal import ABANDONED_MESSAGE
from jim.site import Site
from jim.submit import submit

from support.jimcli import Jim

N = 2  # local jobs per grid job


def marking_rsl(tmp_path: Path) -> str:
    """A grid job of N local jobs; each appends one line to ``ran/<its tag>``."""
    ran = tmp_path / "ran"
    ran.mkdir(exist_ok=True)
    script = tmp_path / "mark.sh"
    script.write_text(f'#!/bin/sh\necho ran >> "{ran}/$JIM_TAG"\n')
    script.chmod(0o755)
    return f"&(executable={script})(count={N})"


def runs(tmp_path: Path) -> dict[str, int]:
    """local job tag -> how many times it ran."""
    return {p.name: len(p.read_text().splitlines()) for p in (tmp_path / "ran").iterdir()}


def ids_in(home: Path) -> set[str]:
    """Every grid job id anything in the home names (pending marks, locks, work areas, records)."""
    found = {p.name.split(".")[0] for p in (home / "locks").glob("2*")} if (home / "locks").is_dir() else set()
    found |= {p.name for p in (home / "jobs").glob("2*")} if (home / "jobs").is_dir() else set()
    found |= {p.name.split(".")[0] for p in (home / "db").glob("2*")} if (home / "db").is_dir() else set()
    return found


def phase(home: Path, job_id: str | None, printed: bool) -> str:
    """Where a kill landed, from what the submit left (looked at right after the kill)."""
    if job_id is None:
        return "before-pending-mark"
    pending = (home / "locks" / f"{job_id}.submit").exists()
    if printed:
        return "answered-not-confirmed" if pending else "confirmed"
    if (home / "db" / f"{job_id}.xml").exists():
        return "record-written"
    if (home / "jobs" / job_id).exists():
        return "plan-written"
    return "pending-mark-only" if pending else "removed-before-seen"


def protocol_lines(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        assert sep and key.isupper(), f"non-protocol line on stdout: {line!r}"
        out[key] = value
    return out


def tagged_processes(job_ids: set[str]) -> list[int]:
    """Live processes whose JIM_TAG belongs to one of ``job_ids``."""
    found = []
    for p in psutil.process_iter():
        try:
            tag = p.environ().get("JIM_TAG", "")
        except (psutil.Error, OSError):
            continue
        if tag.rpartition(".")[0] in job_ids:
            found.append(p.pid)
    return found


def settle(jim: Jim, tmp_path: Path, printed: set[str], timeout: float = 120.0) -> dict[str, dict[str, str]]:
    """Let the recovery run as at a site: one more grid job submitted normally (its worker removes
    what killed submits left), every printed JOB_ID polled until it ends."""
    last = jim.submit(marking_rsl(tmp_path))
    answers = {job_id: jim.wait(job_id, timeout=timeout) for job_id in sorted(printed | {last})}
    deadline = time.monotonic() + 30
    while list((jim.home / "locks").glob("*.submit")) and time.monotonic() < deadline:
        time.sleep(0.2)  # a worker may still be sweeping
    return answers


def check_outcome(jim: Jim, tmp_path: Path, seen: set[str], printed: set[str], answers: dict) -> None:
    home = jim.home
    ran = runs(tmp_path)
    ran_ids = {tag.rpartition(".")[0] for tag in ran}
    unprinted = seen - printed
    # nothing ran, runs or is recorded for a grid job whose JOB_ID was not written
    assert not ran_ids & unprinted, f"local jobs ran for grid jobs nobody got a JOB_ID for: {ran_ids & unprinted}"
    assert not tagged_processes(unprinted)
    assert not list((home / "locks").glob("*.submit")), "pending marks left"
    for job_id in unprinted:
        assert not (home / "db" / f"{job_id}.xml").exists(), f"half-made record {job_id} left"
        assert not (home / "jobs" / job_id).exists(), f"work area of {job_id} left"
    # every grid job whose JOB_ID was written ran exactly N local jobs, once each (or, killed between the
    # answer and the confirmation, none, and poll says why)
    for job_id in printed:
        out = answers[job_id]
        mine = {tag: n for tag, n in ran.items() if tag.rpartition(".")[0] == job_id}
        if out["JOB_STATE"] == "DONE":
            assert mine == {f"{job_id}.{k}": 1 for k in range(N)}, (job_id, mine)
        else:
            assert out["JOB_STATE"] == "FAILED" and out.get("MESSAGE") == ABANDONED_MESSAGE, out
            assert not mine


def test_killed_after_its_record_the_grid_job_never_runs_and_is_removed(jim_env, tmp_path):
    rsl = marking_rsl(tmp_path)
    out = jim_env.protocol("submit", "--rsl", rsl, env={"JIM_FAULT": "submit-after-record"})
    assert out["_rc"] == str(-signal.SIGKILL) and "JOB_ID" not in out
    (killed,) = ids_in(jim_env.home)
    assert (jim_env.home / "db" / f"{killed}.xml").exists() and (jim_env.home / "locks" / f"{killed}.submit").exists()
    answers = settle(jim_env, tmp_path, set())
    check_outcome(jim_env, tmp_path, ids_in(jim_env.home), set(answers), answers)
    assert not (jim_env.home / "jobs" / killed).exists()


def test_killed_after_its_plan_nothing_is_left(jim_env, tmp_path):
    out = jim_env.protocol("submit", "--rsl", marking_rsl(tmp_path), env={"JIM_FAULT": "submit-after-pending"})
    assert out["_rc"] == str(-signal.SIGKILL) and "JOB_ID" not in out
    (killed,) = ids_in(jim_env.home)
    answers = settle(jim_env, tmp_path, set())
    check_outcome(jim_env, tmp_path, ids_in(jim_env.home), set(answers), answers)
    assert not (jim_env.home / "db" / f"{killed}.state").exists()  # no record was written: nothing to answer


def test_killed_between_answer_and_confirmation_poll_says_why(jim_env, tmp_path):
    out = jim_env.protocol("submit", "--rsl", marking_rsl(tmp_path), env={"JIM_FAULT": "submit-after-answer"})
    assert out["_rc"] == str(-signal.SIGKILL) and out["JOB_STATE"] == "PENDING"
    job_id = out["JOB_ID"]
    answer = jim_env.wait(job_id)  # the poll starts a worker, which finds the submit dead
    assert answer["JOB_STATE"] == "FAILED" and answer["MESSAGE"] == ABANDONED_MESSAGE, answer
    assert not (jim_env.home / "db" / f"{job_id}.xml").exists() and not (jim_env.home / "jobs" / job_id).exists()
    time.sleep(1.0)
    assert not runs(tmp_path)


def test_answer_that_cannot_be_written_records_nothing(jim_env, tmp_path):
    rd, wr = os.pipe()
    os.close(rd)  # the gatekeeper is gone: the JOB_ID cannot reach anyone
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "jim", "submit", "--rsl", marking_rsl(tmp_path)],
            stdout=wr,
            stderr=subprocess.PIPE,
            env=jim_env.env,
            timeout=60,
        )
    finally:
        os.close(wr)
    assert proc.returncode != 0
    time.sleep(1.0)
    assert not list((jim_env.home / "db").glob("2*")) and not list((jim_env.home / "jobs").iterdir())
    assert not list((jim_env.home / "locks").glob("*.submit"))
    assert not runs(tmp_path)


KILLS = 110


@pytest.mark.slow
def test_submit_process_group_killed_at_random_moments(jim_env, tmp_path):
    """At least 100 SIGKILLs of the submit's whole process group, spread over its duration."""
    rsl = marking_rsl(tmp_path)
    argv = [sys.executable, "-m", "jim", "submit", "--rsl", rsl]
    durations, answers_at = [], []
    for _ in range(5):  # how long a submit takes here, uninterrupted, and when it answers
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, env=jim_env.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None and proc.stdout.readline().startswith(b"JOB_ID=")
        answers_at.append(time.monotonic() - t0)
        proc.communicate(timeout=60)
        durations.append(time.monotonic() - t0)
    duration, answer_at = sorted(durations)[2], sorted(answers_at)[2]
    rng = random.Random(os.environ.get("JIM_TEST_SEED", "submit-kills"))
    printed: set[str] = set()
    seen = ids_in(jim_env.home)
    printed |= seen  # (the three above answered)
    phases: dict[str, int] = {}
    started = time.monotonic()
    for _ in range(KILLS):
        before = ids_in(jim_env.home)
        proc = subprocess.Popen(
            argv, env=jim_env.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
        )
        # a third spread over the whole submit, the rest over the 40 ms before its answer, where it writes
        late = rng.uniform(max(0.0, answer_at - 0.04), answer_at + 0.005)
        time.sleep(rng.uniform(0.0, 1.2) * duration if rng.random() < 1 / 3 else late)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout = proc.stdout.read().decode() if proc.stdout else ""
        proc.wait()
        proc.stdout.close() if proc.stdout else None
        out = protocol_lines(stdout)
        new = ids_in(jim_env.home) - before
        assert len(new) <= 1, new
        job_id = out.get("JOB_ID") or (next(iter(new)) if new else None)
        if "JOB_ID" in out:
            assert out["JOB_STATE"] == "PENDING"
            printed.add(job_id)
        where = phase(jim_env.home, job_id, "JOB_ID" in out)
        phases[where] = phases.get(where, 0) + 1
        if job_id:
            seen.add(job_id)
    killing = time.monotonic() - started
    answers = settle(jim_env, tmp_path, printed)
    seen |= ids_in(jim_env.home)
    printed |= set(answers)
    answered = sum(v for k, v in phases.items() if k in ("confirmed", "answered-not-confirmed"))
    print(
        f"\n{KILLS} kills over {killing:.1f} s (submit takes {duration * 1000:.0f} ms,"
        f" answers at {answer_at * 1000:.0f} ms; delays up to 1.2 times its duration),"
        f" settled in {time.monotonic() - started - killing:.1f} s; phases {dict(sorted(phases.items()))};"
        f" JOB_IDs printed by killed submits: {answered}"
    )
    check_outcome(jim_env, tmp_path, seen, printed, answers)


HOLDER = """
import sys
from jim import journal
from jim.config import load
from jim.db import Database
from jim.paths import Home

config = load()
mark = journal.Pending(Database(Home(config.home)), sys.argv[1]).take()
print("held", flush=True)
if sys.stdin.readline().strip() == "confirm":
    mark.confirm()
"""


def test_worker_submits_nothing_until_the_submit_confirms(jim_env, tmp_path):
    """A worker started while the submit still runs (the monitor or a poll can start one as soon as
    the record exists) waits; it submits once the submit confirms, and not before."""
    saved = dict(os.environ)
    os.environ.update(jim_env.env)
    try:
        job_id = submit(Site(load()), parse_rsl(marking_rsl(tmp_path)), start_background=False)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    # a live submit's pending mark, held by another process
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, job_id],
        env=jim_env.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        worker = subprocess.Popen([sys.executable, "-m", "jim", "_worker", job_id], env=jim_env.env)
        time.sleep(1.5)
        assert worker.poll() is None, "the worker did not wait for the submit"
        assert all(lj["state"] == "PLANNED" for lj in jim_env.status(job_id)["localJobs"])
        assert not runs(tmp_path)
        assert holder.stdin is not None
        holder.stdin.write("confirm\n")
        holder.stdin.flush()
        assert worker.wait(timeout=30) == 0
    finally:
        holder.kill()
        holder.wait()
    assert jim_env.wait(job_id)["JOB_STATE"] == "DONE"
    assert runs(tmp_path) == {f"{job_id}.{k}": 1 for k in range(N)}
