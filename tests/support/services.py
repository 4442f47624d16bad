"""The real test services (tests/services/*): whether they run, and the environment their commands need.

Slurm (a small cluster of its own), Slurm's PBS/Torque wrappers over it, a
Grid Engine cell and an HTCondor pool (with Condor-G and blahpd); each is started by its
``start.sh`` (scripts/test.sh does that as root).  Tests that use the Slurm cluster serialize on
:func:`cluster_lock` (one of them stops its controller).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.env import REPO

SLURM_SERVICE = REPO / "tests" / "services" / "slurm"
SLURM_STATE = Path(os.environ.get("JIM_TEST_SLURM_STATE", "/var/tmp/jim-test-slurm"))
PBS_STATE = Path(os.environ.get("JIM_TEST_PBS_STATE", "/var/tmp/jim-test-pbs"))
PBS_BIN = PBS_STATE / "bin"
SGE_SERVICE = REPO / "tests" / "services" / "sge"
SGE_STATE = Path(os.environ.get("JIM_TEST_SGE_STATE", "/var/tmp/jim-test-sge"))
SGE_VARIABLES = ("SGE_ROOT", "SGE_CELL", "SGE_QMASTER_PORT", "SGE_EXECD_PORT", "SGE_ARCH", "PATH")


# -- Slurm -------------------------------------------------------------------------


def slurm_env(wait: float = 90.0) -> dict[str, str] | None:
    """The environment for the test cluster, or None when it is not running.

    A cluster that is set up but whose controller does not answer may be
    restarting: it gets ``wait`` seconds to come back before we say no.
    """
    conf = SLURM_STATE / "slurm.conf"
    if not conf.exists():
        return None
    env = {**os.environ, "SLURM_CONF": str(conf)}
    deadline = time.monotonic() + wait
    while True:
        try:
            ok = subprocess.run([str(SLURM_SERVICE / "ctl.sh"), "status"], env=env, capture_output=True, timeout=30)
            if ok.returncode == 0:
                return env
        except (OSError, subprocess.TimeoutExpired):
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(3)


#: The cluster lock's holders in this process (see :func:`cluster_lock`).
_HELD: list[bool] = []


@contextlib.contextmanager
def cluster_lock(timeout: float = 1800.0) -> Iterator[None]:
    """Serialize test runs that use the shared test cluster (one of them stops its controller).

    Re-entrant within one process: two module-scoped fixtures of one test module may both hold it
    (an ``flock`` on a second open file would wait for the first for ever)."""
    if _HELD:
        _HELD.append(True)
        try:
            yield
        finally:
            _HELD.pop()
        return
    SLURM_STATE.mkdir(parents=True, exist_ok=True)
    with open(SLURM_STATE / "tests.lock", "a") as f:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("another test run holds the Slurm test cluster for too long")
                time.sleep(1)
        _HELD.append(True)
        try:
            yield
        finally:
            _HELD.pop()


# -- PBS (Slurm's torque wrappers) -------------------------------------------------------


def pbs_available() -> bool:
    return (PBS_BIN / "qsub").exists() and (PBS_BIN / "qstat").exists() and slurm_env() is not None


def pbs_env() -> dict[str, str]:
    return {"SLURM_CONF": str(SLURM_STATE / "slurm.conf"), "PATH": f"{PBS_BIN}:{os.environ['PATH']}"}


# -- Grid Engine -------------------------------------------------------------------------


def sge_env() -> dict[str, str] | None:
    """The environment of the test cell (SGE_ROOT, SGE_CELL, ports, PATH), if it is up."""
    env_sh = SGE_STATE / "env.sh"
    if not env_sh.exists():
        return None
    try:
        p = subprocess.run(
            ["bash", "-c", f'. "{env_sh}" && "{SGE_SERVICE}/ctl.sh" status >/dev/null && env -0'],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    env = dict(line.split("=", 1) for line in p.stdout.decode().split("\0") if "=" in line)
    return {**os.environ, **{k: env[k] for k in SGE_VARIABLES if k in env}}


def sge_service_env() -> dict[str, str]:
    """Only the variables the Grid Engine commands need (for the conformance suite)."""
    env = sge_env() or {}
    return {k: env[k] for k in SGE_VARIABLES if k in env}


# -- HTCondor (a pool with Condor-G and blahpd, in a trixie chroot) -------------------------


HTC_SERVICE = REPO / "tests" / "services" / "htcondor"
HTC_ROOT = Path(os.environ.get("JIM_TEST_HTC_ROOT", "/var/lib/jim-htcondor/root"))
HTC_STATE = Path(os.environ.get("JIM_TEST_HTC_STATE", "/var/lib/jim-htcondor/state"))
HTC_USER = os.environ.get("JIM_TEST_HTC_USER", "jimtest-condor")
#: jim inside the chroot (what blahpd runs), and the repository mounted there (start.sh)
HTC_JIM_VENV = Path("/opt/jim-venv")
HTC_JIM_SRC = Path("/opt/jim-src")


def htcondor_env() -> dict[str, str] | None:
    """What a host-side HTCondor client needs (``CONDOR_CONFIG``), or None when the test pool is not up:
    its master runs and its collector answers from inside the chroot."""
    pid_file, client = HTC_STATE / "master.pid", HTC_STATE / "condor_config.client"
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except (OSError, ValueError):
        return None
    if not client.exists():
        return None
    try:
        p = in_htcondor_root("condor_status", "-af", "Name", timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {"CONDOR_CONFIG": str(client)} if p.returncode == 0 and p.stdout.strip() else None


def chroot_env() -> dict[str, str]:
    """This process's environment for a command inside the chroot, without ``CONDOR_CONFIG``: the chroot's
    commands read their own configuration, and importing htcondor2 sets ``CONDOR_CONFIG=/dev/null`` here."""
    return {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG"}


def in_htcondor_root(*argv: str, user: str | None = None, timeout: float = 120, **kw: object):
    """Run a command inside the pool's chroot (as ``user`` through runuser, else as root)."""
    cmd = ["chroot", str(HTC_ROOT), *(["runuser", "-u", user, "--"] if user else []), *argv]
    kw.setdefault("env", chroot_env())
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]


def condor_job_ad(cluster: int, user: str = HTC_USER) -> dict[str, Any]:
    """A job's ad as ``user`` sees it, from the pool's queue or else its history ({} while neither has it)."""
    for argv in (["condor_q", "-json", str(cluster)], ["condor_history", "-json", "-limit", "1", str(cluster)]):
        done = in_htcondor_root(*argv, user=user)
        if done.returncode == 0 and done.stdout.strip():
            ads = json.loads(done.stdout)
            if ads:
                return dict(ads[0])
    return {}


#: Held while a test points the test account's ``~/.blah/user.config`` (what BLAH's scripts read) at its own
#: jim configuration: that file is one for every test module of the session and any other test run.
HTC_ACCOUNT_LOCK = HTC_STATE / "blah-account.lock"


@contextlib.contextmanager
def htcondor_account_lock() -> Iterator[None]:
    """The test account's BLAH configuration, to one test (or module) at a time (``flock``)."""
    fd = os.open(HTC_ACCOUNT_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
