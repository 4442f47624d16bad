"""Caps (docs/caps.md): at most so many local jobs in the batch system at once, per user, per queue,
site-wide; the others wait in jim (PLANNED, with the reason) and go as others end, never failing.

Real processes on the fork backend: the records are sampled while the grid jobs run, and so are the
local jobs' live processes (each carries its ``JIM_TAG``), the batch side of the count.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from jim import background, caps, summary
from jim.config import CapsConfig, parse
from jim.db import Database
from jim.errors import ConfigError
from jim.locks import SingleInstance
from jim.paths import Home

from support.jimcli import Jim, kill_all, write_config

#: Local states of a local job in the batch system (what a cap counts).
IN_BATCH = {"SUBMITTING", "QUEUED", "RUNNING", "HELD", "SUSPENDED"}
FORK = '[batch]\nadapter = "fork"\ncores = 8\n'  # (more cores than any cap here: the cap is what binds)


def wait_for(what: str, check: Callable[[], object], timeout: float = 60.0, every: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def states(home: Path, job_id: str) -> dict[str, int]:
    """The local states of a grid job, from its record as it is on disk now."""
    out: dict[str, int] = {}
    for lj in Database(Home(home)).read(job_id).local_jobs():
        out[lj.state.value] = out.get(lj.state.value, 0) + 1
    return out


def in_batch(counts: dict[str, int]) -> int:
    return sum(n for state, n in counts.items() if state in IN_BATCH)


def live_tags(prefixes: tuple[str, ...]) -> int:
    """Local jobs of these grid jobs with a live process (wrapper or payload), by their JIM_TAG."""
    found = set()
    for p in psutil.process_iter():
        try:
            tag = p.environ().get("JIM_TAG", "")
            if tag.startswith(prefixes) and p.status() != psutil.STATUS_ZOMBIE:
                found.add(tag)
        except (psutil.Error, OSError):
            continue
    return len(found)


class Sampler:
    """Samples the records of grid jobs (and their live processes) until every one has ended."""

    def __init__(self, jobs: list[tuple[Jim, str]]):
        self.jobs = jobs
        self.samples: list[list[dict[str, int]]] = []
        self.processes: list[int] = []

    def run(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        prefixes = tuple(f"{job}." for _jim, job in self.jobs)
        while time.monotonic() < deadline:
            sample = [states(jim.home, job) for jim, job in self.jobs]
            self.samples.append(sample)
            self.processes.append(live_tags(prefixes))
            if all(set(s) <= {"DONE", "FAILED", "CANCELLED", "LOST"} for s in sample):
                return
            time.sleep(0.05)
        raise AssertionError(f"grid jobs not ended after {timeout:g} s: last sample {self.samples[-1]}")

    def most_in_batch(self) -> int:
        return max(sum(in_batch(s) for s in sample) for sample in self.samples)


def test_caps_settings_are_checked_at_load(tmp_path: Path):
    env = {"JIM_HOME": str(tmp_path / "home")}
    config = parse({"caps": {"max_local_jobs_per_user": 20, "queues": {"long": 5}}}, env=env).caps
    assert config.on and config.max_local_jobs_per_user == 20 and config.queues == {"long": 5}
    assert not parse({}, env=env).caps.on  # (no cap by default: 0)
    bad = [
        ({"max_local_jobs_per_user": -1}, "[caps].max_local_jobs_per_user: must not be negative, got -1"),
        ({"max_local_jobs_site": 2.5}, "[caps].max_local_jobs_site: expected a whole number, got 2.5"),
        ({"max_local_jobs_per_user": "10"}, "expected a whole number, got '10'"),
        ({"max_local_jobs_per_user": True}, "expected a whole number, got True"),
        ({"max_local_jobs_per_user": 10**9}, "must be at most 10000000"),
        ({"max_local_jobs_site": 5, "shared_dir": "caps"}, "[caps].shared_dir must be an absolute path"),
        ({"queues": {"long": 0}}, "[caps.queues].long: expected a whole number from 1 to"),
        ({"queues": {"long": -3}}, "[caps.queues].long: expected a whole number from 1 to"),
        ({"queues": {"-x": 3}}, "a queue name must not begin with '-'"),
        ({"queues": 3}, "[caps].queues must be a table"),
        ({"per_user": 3}, "[caps]: unknown key 'per_user'"),
    ]
    for table, why in bad:
        with pytest.raises(ConfigError) as e:
            parse({"caps": table}, env=env)
        assert why in e.value.message and "\n" not in e.value.message, (table, e.value.message)


def test_the_free_slots_are_dealt_in_turn():
    assert caps.share(5, ["a"], "a") == 5
    assert [caps.share(5, ["a", "b"], me) for me in "ab"] == [3, 2]
    assert [caps.share(1, ["a", "b", "c"], me) for me in "abc"] == [1, 0, 0]
    assert [caps.share(0, ["a", "b"], me) for me in "ab"] == [0, 0]
    assert caps.share(2, ["a", "b"], "c") == 0  # (a newcomer is served after those already waiting)


def test_without_caps_the_gate_costs_nothing(tmp_path: Path):
    home = Home(tmp_path / "home").ensure()
    gate = caps.Gate(CapsConfig(), home)
    assert gate.take("20261129-101400-4e22d678", 100, "", time.time()) == caps.Turn(100, None)
    gate.release("20261129-101400-4e22d678")
    assert not (home.cache / "caps.json").exists() and not (home.locks / "caps.lock").exists()


def test_claims_count_until_released_and_the_slots_go_in_turn(tmp_path: Path):
    home = Home(tmp_path / "home").ensure()
    a, b, other = "20261129-101400-0000000a", "20261129-101400-0000000b", "20261129-101400-0000000c"

    def in_batch_now(n: int) -> None:  # (what the records of the home say is in the batch system)
        text = summary.render("ACTIVE", exit_code=None, message=None, unsubmitted=0, cancel=False)
        (home.db / f"{other}.state").write_bytes(text + summary.in_batch_lines(n, ""))

    workers = {j: SingleInstance(background.worker_lock(home.root, j)) for j in (a, b)}
    assert all(lock.acquire() for lock in workers.values())  # (both workers run)
    gate = caps.Gate(CapsConfig(max_local_jobs_per_user=5), home)
    now = time.time()
    capped = "waiting for a slot: at most 5 local jobs of this user in the batch system at once"
    in_batch_now(3)
    assert gate.take(a, 10, "", now).n == 2
    turn = gate.take(b, 10, "", now + 1)
    assert turn.n == 0 and (turn.reason or "").startswith(capped)  # (a's claim counts)
    in_batch_now(5)  # (a's two are in its record now)
    gate.release(a)
    assert gate.take(b, 10, "", now + 2).n == 0
    in_batch_now(4)  # (one ended)
    turn = gate.take(a, 10, "", now + 3)
    assert turn.n == 0 and "go to this user's other grid jobs first, in turn" in (turn.reason or "")
    assert gate.take(b, 10, "", now + 4).n == 1  # (b, served longest ago, has it)
    in_batch_now(5)
    gate.release(b)
    in_batch_now(3)  # (two ended)
    assert [gate.take(j, 10, "", now + 5).n for j in (a, b)] == [1, 1]  # (one each)
    workers[a].release()  # (a's worker died: its claim and its turn go with it)
    assert gate.take(b, 10, "", now + 6).n == 2
    ledger = json.loads((home.cache / "caps.json").read_text())
    assert ledger["workers"][b]["claim"] == 2 and a not in ledger["workers"]
    workers[b].release()


def test_a_grid_job_never_has_more_local_jobs_in_the_batch_system_than_the_cap(jim_env: Jim):
    write_config(jim_env, FORK + "\n[caps]\nmax_local_jobs_per_user = 5\n")
    job = jim_env.submit("&(executable=/bin/sleep)(arguments=0.5)(count=30)")
    held = wait_for("local jobs held by the cap", lambda: _held(jim_env, job))
    assert isinstance(held, dict)
    waiting = [lj for lj in held["localJobs"] if lj["state"] == "PLANNED"]
    reason = "waiting for a slot: at most 5 local jobs of this user in the batch system at once"
    assert waiting and all(lj["waiting"].startswith(reason) and lj["waitingSince"] for lj in waiting)
    assert reason in jim_env.run("status", job).stdout  # (the text shows it too)
    assert jim_env.poll(job)["JOB_STATE"] in ("PENDING", "ACTIVE")  # (never FAILED for waiting)
    sampler = Sampler([(jim_env, job)])
    sampler.run(timeout=120)
    assert sampler.most_in_batch() <= 5, sampler.samples
    assert max(sampler.processes) <= 5, sampler.processes
    assert len(sampler.samples) > 20  # (sampled all along)
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    st = jim_env.status(job)
    assert [lj["state"] for lj in st["localJobs"]] == ["DONE"] * 30
    assert all(lj["waiting"] is None for lj in st["localJobs"])  # (a local job that went has no reason left)
    log = (jim_env.home / "log" / "jim.log").read_text()
    assert log.count("local jobs wait: waiting for a slot") == 1  # (once, when they started to wait)


def _held(jim: Jim, job: str) -> dict | None:
    st = jim.status(job)
    return st if any(lj.get("waiting") for lj in st["localJobs"]) else None


def test_two_grid_jobs_of_one_user_share_the_cap(jim_env: Jim):
    write_config(jim_env, FORK + "\n[caps]\nmax_local_jobs_per_user = 4\n")
    first = jim_env.submit("&(executable=/bin/sleep)(arguments=0.5)(count=16)")
    second = jim_env.submit("&(executable=/bin/sleep)(arguments=0.5)(count=16)")
    sampler = Sampler([(jim_env, first), (jim_env, second)])
    sampler.run(timeout=120)
    assert sampler.most_in_batch() <= 4, sampler.samples
    assert max(sampler.processes) <= 4, sampler.processes
    for job in (first, second):
        assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    # both made progress all along: when one of them had ended, the other had done at least a quarter
    ended = next(s for s in sampler.samples if any(set(c) == {"DONE"} for c in s))
    assert min(c.get("DONE", 0) for c in ended) >= 16 // 4, ended
    both = [s for s in sampler.samples if all(in_batch(c) for c in s)]
    assert len(both) > len(sampler.samples) // 3  # (most of the time both had local jobs in)


def test_the_site_wide_cap_counts_every_home(jim_env: Jim, tmp_path: Path):
    shared = tmp_path / "caps"
    shared.mkdir()
    shared.chmod(0o1777)
    write_config(jim_env, FORK + f'\n[caps]\nmax_local_jobs_site = 4\nshared_dir = "{shared}"\n')
    other = Jim(tmp_path / "otherhome", jim_env.config)
    try:
        first = jim_env.submit("&(executable=/bin/sleep)(arguments=0.5)(count=10)")
        wait_for("the first home's count", lambda: list(shared.iterdir()))
        second = other.submit("&(executable=/bin/sleep)(arguments=0.5)(count=10)")
        sampler = Sampler([(jim_env, first), (other, second)])
        sampler.run(timeout=120)
        assert sampler.most_in_batch() <= 4, sampler.samples
        assert max(sampler.processes) <= 4, sampler.processes
        for jim, job in ((jim_env, first), (other, second)):
            assert jim.wait(job)["JOB_STATE"] == "DONE"
        assert any(in_batch(s[1]) for s in sampler.samples)
        reason = "waiting for a slot: at most 4 local jobs of all users in the batch system at once"
        logs = [(j.home / "log" / "jim.log").read_text() for j in (jim_env, other)]
        assert any(reason in text for text in logs)
        # every home's count goes once it has nothing in the batch system
        wait_for("the counts removed", lambda: not [p for p in shared.iterdir() if not p.name.startswith(".")])
    finally:
        kill_all(other.home)


def test_an_unusable_shared_directory_holds_local_jobs_with_the_reason(jim_env: Jim, tmp_path: Path):
    shared = tmp_path / "caps"
    write_config(jim_env, FORK + f'\n[caps]\nmax_local_jobs_site = 4\nshared_dir = "{shared}"\n')
    job = jim_env.submit("&(executable=/bin/true)(count=3)")
    held = wait_for("local jobs held", lambda: _held(jim_env, job))
    assert isinstance(held, dict)
    assert f"the site-wide cap cannot be counted: {shared} does not exist" in held["localJobs"][0]["waiting"]
    shared.mkdir()
    shared.chmod(0o1777)
    assert jim_env.wait(job, timeout=120)["JOB_STATE"] == "DONE"  # (looked at again within a minute)


def test_a_capped_grid_job_is_cancelled_at_once(jim_env: Jim):
    write_config(jim_env, FORK + "\n[caps]\nmax_local_jobs_per_user = 2\n")
    job = jim_env.submit("&(executable=/bin/sleep)(arguments=300)(count=10)")
    wait_for("two running, the others held", lambda: _held(jim_env, job) and jim_env.wait_running(job, 2))
    started = time.monotonic()
    out = jim_env.protocol("cancel", "--job-id", job)
    assert out["_rc"] == "0" and out["JOB_STATE"] == "FAILED", out
    assert time.monotonic() - started < 20
    st = jim_env.status(job)
    assert {lj["state"] for lj in st["localJobs"]} == {"CANCELLED"}
    assert live_tags((f"{job}.",)) == 0


def test_a_count_in_the_shared_directory_is_believed_only_as_written(tmp_path: Path):
    shared = tmp_path / "caps"
    shared.mkdir()
    shared.chmod(0o1777)
    config = CapsConfig(max_local_jobs_per_user=50, max_local_jobs_site=100, shared_dir=str(shared))
    mine = caps.Shared(config, Home(tmp_path / "a"))
    uid = os.getuid()
    now = time.time()
    (shared / f"{uid}-{'1' * 16}").write_text("7\n")
    assert mine.others(now) == 7
    (shared / f"{uid}-{'2' * 16}").write_text("500\n")  # (more than one user may have: the per-user cap)
    assert mine.others(now) == 57
    old = shared / f"{uid}-{'3' * 16}"
    old.write_text("9\n")
    os.utime(old, (now - caps.STALE - 1, now - caps.STALE - 1))  # (its monitor is gone)
    (shared / f"{uid + 1}-{'4' * 16}").write_text("9\n")  # (not its owner's name)
    (shared / f"{uid}-{'5' * 16}").symlink_to(shared / f"{uid}-{'1' * 16}")  # (never through a link)
    (shared / f"{uid}-{'6' * 16}").write_text("lots\n")
    (shared / f"{uid}-{'7' * 16}").mkdir()
    os.mkfifo(shared / f"{uid}-{'8' * 16}")  # (never waited on)
    (shared / "notes").write_text("12\n")
    assert mine.others(now) == 57
    mine.publish(3)
    path = shared / mine.name
    assert path.read_text() == "3\n" and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert mine.others(now) == 57  # (its own is not another's)
    mine.publish(0)
    assert not path.exists()


def test_what_a_shared_directory_must_be(tmp_path: Path):
    shared = tmp_path / "caps"
    assert "does not exist (root makes it: install -d -m 1777" in (caps.directory_problem(shared) or "")
    shared.mkdir()
    shared.chmod(0o777)
    assert "writable by others without the sticky bit" in (caps.directory_problem(shared) or "")
    shared.chmod(0o1777)
    assert caps.directory_problem(shared) is None
    link = tmp_path / "link"
    link.symlink_to(shared)
    assert "is a symbolic link" in (caps.directory_problem(link) or "")
    (tmp_path / "file").write_text("")
    assert "not a directory" in (caps.directory_problem(tmp_path / "file") or "")


def test_the_poll_summary_counts_the_local_jobs_in_the_batch_system(jim_env: Jim):
    write_config(jim_env, FORK)
    job = jim_env.submit("&(executable=/bin/sleep)(arguments=300)(count=3)(queue=batch)")
    jim_env.wait_running(job, 3)
    text = (jim_env.home / "db" / f"{job}.state").read_text()
    assert "#INBATCH=3\n" in text and "#QUEUE=batch\n" in text
    assert jim_env.poll(job) == {"JOB_STATE": "ACTIVE", "_rc": "0", "_stderr": ""}  # (never printed)
    jim_env.protocol("cancel", "--job-id", job)
    assert "#INBATCH" not in (jim_env.home / "db" / f"{job}.state").read_text()
