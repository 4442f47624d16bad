"""The real ``jim`` command with a private home and config, and what a test leaves behind.

:class:`Jim` runs ``python -m jim`` with its own ``JIM_HOME`` and ``JIM_CONFIG``
(the ``jim_env`` fixture of conftest.py makes one per test); :func:`kill_all`
stops every process that carries that home in its environment (monitor,
workers, wrappers, local jobs); :func:`validate_home` checks every XML file of
the home against the shipped schema.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from jim.db import validate

FAST_CONFIG = """
[site]
recommended_cpu_per_job = 3600
max_cpu_per_job = 36000
max_local_jobs = 500
default_events_per_job = 250

[monitor]
interval = 0.3
lost_grace = 5.0
idle_exit = 5.0

[deadlines]
cancel_grace = 3.0

[retry]
# one attempt: a test of anything else sees each local job end once; the tests of retries
# (test_retry.py, the multi-node Slurm's) set their own
max_attempts = 1
"""


class Jim:
    """Runs the real ``jim`` command with a private home and config.

    By default as this process, with this interpreter and environment.  :meth:`as_account` makes it
    another account's jim: ``python`` (an installed jim every account can run) as ``uid``/``gid``
    with no other group, from ``cwd``, with only the environment given (no shell).
    """

    def __init__(self, home: Path, config: Path):
        self.home = home
        self.config = config
        self.env = dict(os.environ)
        self.env.update({"JIM_HOME": str(home), "JIM_CONFIG": str(config)})
        self.env.pop("JIM_FAULT", None)
        self.python = sys.executable
        self.account: tuple[int, int] | None = None
        self.cwd: str | None = None

    def as_account(self, uid: int, gid: int, python: str, env: dict[str, str], cwd: str) -> Jim:
        """This jim, run as another account (see the class docstring); ``env`` replaces the environment."""
        self.account, self.python, self.cwd = (uid, gid), python, cwd
        self.env = {**env, "JIM_HOME": str(self.home), "JIM_CONFIG": str(self.config)}
        return self

    def run(self, *args: str, env: dict | None = None, timeout: float = 60, input: str | None = None):
        e = dict(self.env)
        if env:
            e.update(env)
        who = {} if self.account is None else {"user": self.account[0], "group": self.account[1], "extra_groups": []}
        return subprocess.run(
            [self.python, "-m", "jim", *args],
            capture_output=True,
            text=True,
            env=e,
            timeout=timeout,
            input=input,
            cwd=self.cwd,
            **who,
        )

    def protocol(self, *args: str, **kw) -> dict[str, str]:
        """Run a protocol command; every stdout line must be KEY=VALUE."""
        proc = self.run(*args, **kw)
        out = {}
        for line in proc.stdout.splitlines():
            assert "=" in line and line.split("=", 1)[0].isupper(), (
                f"non-protocol line on stdout: {line!r}\nstderr: {proc.stderr}"
            )
            k, v = line.split("=", 1)
            out[k] = v
        out["_rc"] = str(proc.returncode)
        out["_stderr"] = proc.stderr
        return out

    def submit(self, rsl: str, **kw) -> str:
        out = self.protocol("submit", "--rsl", rsl, **kw)
        assert "JOB_ID" in out, out
        assert out["JOB_STATE"] == "PENDING"
        return out["JOB_ID"]

    def poll(self, job_id: str) -> dict[str, str]:
        return self.protocol("poll", "--job-id", job_id)

    def wait(self, job_id: str, states=("DONE", "FAILED"), timeout: float = 60.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            out = self.poll(job_id)
            state = out.get("JOB_STATE") or f"(no state: ERROR {out.get('ERROR')})"
            if not seen or seen[-1] != state:
                seen.append(state)
            if out.get("JOB_STATE") in states:
                out["_seen"] = ",".join(seen)
                return out
            time.sleep(0.2)
        raise AssertionError(
            f"grid job {job_id} not in {states} after {timeout} s; seen {seen}; "
            f"status:\n{self.run('status', job_id).stdout}"
        )

    def status(self, job_id: str) -> dict:
        proc = self.run("status", job_id, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def wait_running(self, job_id: str, n: int, timeout: float = 60.0, every: float = 0.2) -> dict:
        """``jim status --json`` of the grid job once at least ``n`` of its local jobs run."""
        deadline = time.monotonic() + timeout
        st: dict = {}
        while time.monotonic() < deadline:
            st = self.status(job_id)
            if sum(lj["state"] == "RUNNING" for lj in st["localJobs"]) >= n:
                return st
            time.sleep(every)
        raise AssertionError(f"fewer than {n} local jobs of {job_id} running after {timeout:g} s: {st.get('counts')}")

    def job_ids(self) -> list[str]:
        return sorted(p.stem for p in (self.home / "db").glob("*.state"))


def processes_of(home: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid == os.getpid():
                continue
            if p.environ().get("JIM_HOME") == str(home):
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def tagged(tag: str) -> list[psutil.Process]:
    """Live processes whose environment has JIM_TAG=<tag> (seen through psutil, not jim's scan)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("JIM_TAG") == tag and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def kill_all(home: Path, timeout: float = 5.0) -> None:
    """SIGKILL every process of this home and wait until each is dead (a zombie that init has not
    reaped yet is dead too: psutil's wait would sit out the reaping)."""
    procs = processes_of(home)
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    deadline = time.monotonic() + timeout
    while procs and time.monotonic() < deadline:
        procs = [p for p in procs if _alive(p)]
        if procs:
            time.sleep(0.01)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def validate_home(home: Path) -> list[str]:
    errors = []
    for path in sorted((home / "db").glob("*.xml")):
        errors += [f"{path.name}: {e}" for e in validate(path)]
    return errors


def write_config(jim: Jim, extra: str) -> None:
    jim.config.write_text(FAST_CONFIG + "\n" + extra)
