"""jim behind Condor-G: real ``condor_submit`` of ``universe = grid`` / ``grid_resource = batch jim`` jobs.

The pool's gridmanager starts blahpd as the test account inside the chroot; blahpd runs the
``jim_*.sh`` scripts ``jim blah-install`` wrote, which run the jim installed in the chroot.  Each
test writes its own jim configuration (its own jim home) under a work directory of the account in
/tmp and names it in the account's ``~/.blah/user.config`` (what BLAH's scripts read), so a test holds
:func:`support.services.htcondor_account_lock` (``flock``) while it runs: any test that
points the account's ``user.config`` elsewhere must take it too.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.env import require_service
from support.services import (
    HTC_JIM_SRC,
    HTC_JIM_VENV,
    HTC_ROOT,
    HTC_USER,
    condor_job_ad,
    htcondor_account_lock,
    htcondor_env,
    in_htcondor_root,
)

pytestmark = [pytest.mark.htcondor, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
#: Where this checkout is installed inside the chroot when it is not the one mounted at /opt/jim-src.
COPY_SRC, COPY_VENV = Path("/tmp/jim-blah-src"), Path("/tmp/jim-blah-venv")
#: Seconds a Condor-G job may take to end (the gridmanager takes 10-60 s to act).
TIMEOUT = 300.0


def _same_dir(a: Path, b: Path) -> bool:
    try:
        sa, sb = a.stat(), b.stat()
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


@pytest.fixture(scope="module")
def blah_jim() -> str:
    """This checkout's jim installed in the chroot and as its BLAH backend; the jim command there."""
    require_service(htcondor_env() is not None, "the HTCondor test pool (tests/services/htcondor)")
    if _same_dir(HTC_ROOT / str(HTC_JIM_SRC).lstrip("/"), REPO):
        src, venv = HTC_JIM_SRC, HTC_JIM_VENV
    else:  # (another checkout is mounted there: install this one under /tmp, which the chroot shares)
        src, venv = COPY_SRC, COPY_VENV
        shutil.rmtree(src, ignore_errors=True)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        for part in ("jim", "adapters", "handlers", "sandbox", "tests/services/lib"):
            shutil.copytree(REPO / part, src / part, ignore=ignore)
        for part in ("pyproject.toml", "README.md"):
            shutil.copy(REPO / part, src / part)
        subprocess.run(["chmod", "-R", "a+rX", str(src)], check=True)
    done = in_htcondor_root(str(src / "tests/services/lib/jim-venv.sh"), str(venv), "/var/log/jim-venv", timeout=600)
    assert done.returncode == 0, done.stderr
    return str(venv / "bin" / "jim")


def _blah_install(jim: str) -> None:
    """(Again before every test: the chroot's BLAH installation is shared by everything that uses the pool.)"""
    done = in_htcondor_root(jim, "blah-install", "--jim-command", jim, "--force")
    assert done.returncode == 0, done.stderr


class Account:
    """The test account's work directory, jim configuration and Condor-G jobs."""

    def __init__(self, work: Path) -> None:
        self.pw = pwd.getpwnam(HTC_USER)
        self.work = work
        self.home = work / "jimhome"

    def write(self, path: Path, text: str, mode: int = 0o644) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.chmod(path, mode)
        os.chown(path, self.pw.pw_uid, self.pw.pw_gid)
        return path

    def configure(self, batch: str) -> None:
        """jim's configuration for blahpd's jim, named in ``~/.blah/user.config``."""
        config = self.write(
            self.work / "jim.toml",
            f'[jim]\nhome = "{self.home}"\n[site]\nname = "BLAH.TEST"\ndefault_events_per_job = 5\n'
            f"[batch]\n{batch}\n[monitor]\ninterval = 1.0\nidle_exit = 20.0\n",
        )
        blah = Path(self.pw.pw_dir) / ".blah"
        if not blah.exists():
            blah.mkdir(mode=0o755)
            os.chown(blah, self.pw.pw_uid, self.pw.pw_gid)
        self.write(blah / "user.config", f"jim_config={config}\n")

    def script(self, name: str, body: str) -> Path:
        return self.write(self.work / name, "#!/bin/sh\n" + body, mode=0o755)

    def submit(self, executable: Path, *, environment: str, arguments: str = "", name: str = "job") -> int:
        sub = self.write(
            self.work / f"{name}.sub",
            "universe = grid\ngrid_resource = batch jim\n"
            f'executable = {executable}\narguments = {arguments}\nenvironment = "{environment}"\n'
            f"initialdir = {self.work}\noutput = {self.work}/{name}.out\nerror = {self.work}/{name}.err\n"
            f"log = {self.work}/{name}.log\nqueue\n",
        )
        done = in_htcondor_root("condor_submit", "-terse", str(sub), user=HTC_USER, cwd="/")
        assert done.returncode == 0, done.stderr
        return int(done.stdout.split(".")[0])

    def ad(self, cluster: int) -> dict[str, object]:
        """The Condor-G job's ad, from the queue or else the history ({} while neither has it)."""
        return condor_job_ad(cluster)

    def wait(self, cluster: int, want: set[int], timeout: float = TIMEOUT) -> dict[str, object]:
        """The ad once its JobStatus is one of ``want``."""
        deadline = time.monotonic() + timeout
        ad: dict[str, object] = {}
        while time.monotonic() < deadline:
            ad = self.ad(cluster)
            if ad.get("JobStatus") in want:
                return ad
            time.sleep(2)
        raise AssertionError(f"Condor-G job {cluster} never reached JobStatus {want}: {ad}")

    def jim_ids(self) -> list[str]:
        db = self.home / "db"
        return sorted(p.name[: -len(".state")] for p in db.glob("*.state")) if db.is_dir() else []

    def record(self, job_id: str) -> str:
        return (self.home / "db" / f"{job_id}.xml").read_text()


@pytest.fixture
def account(blah_jim: str) -> Iterator[Account]:
    lock = contextlib.ExitStack()
    lock.enter_context(htcondor_account_lock())  # (the account's BLAH configuration is one for every test)
    _blah_install(blah_jim)
    made = subprocess.run(
        ["runuser", "-u", HTC_USER, "--", "mktemp", "-d", "/tmp/jim-blah.XXXXXX"],
        capture_output=True,
        text=True,
        check=True,
    )
    work = Path(made.stdout.strip())
    os.chmod(work, 0o755)
    try:
        yield Account(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        lock.close()


MC = 'echo "events $JIM_FIRST_EVENT-$JIM_LAST_EVENT of $JIM_EVENTS: $*"\n'


def _montecarlo(account: Account) -> None:
    cluster = account.submit(
        account.script("mc.sh", MC), environment="JIM_JOBTYPE=montecarlo JIM_EVENTS=20", arguments="\"one 'two three'\""
    )
    ad = account.wait(cluster, {4, 5})
    assert ad["JobStatus"] == 4 and ad.get("ExitCode") == 0, ad
    (job_id,) = account.jim_ids()
    assert account.record(job_id).count("<localjob ") == 4
    out = (account.work / "job.out").read_text().splitlines()
    assert out == [f"events {a}-{a + 4} of 5: one two three" for a in (1, 6, 11, 16)]
    assert (account.work / "jim-output.tar.gz").is_file()


def test_montecarlo_through_condor_g_on_fork(account: Account):
    account.configure('adapter = "fork"\ncores = 4')
    _montecarlo(account)


def test_montecarlo_through_condor_g_on_the_same_pool(account: Account):
    account.configure('adapter = "condor"\npython = "/usr/bin/python3"')
    _montecarlo(account)
    done = in_htcondor_root("condor_history", "-af", "Owner", "-limit", "20", user=HTC_USER)
    assert done.returncode == 0


def test_exit_code_of_the_local_job_is_the_condor_g_jobs(account: Account):
    account.configure('adapter = "fork"')
    cluster = account.submit(account.script("three.sh", "echo three\nexit 3\n"), environment="A=1")
    ad = account.wait(cluster, {4, 5})
    assert ad["JobStatus"] == 4 and ad.get("ExitCode") == 3, ad
    assert (account.work / "job.out").read_text() == "three\n"


def _processes_of(marker: str) -> list[str]:
    done = subprocess.run(["pgrep", "-u", HTC_USER, "-f", marker], capture_output=True, text=True)
    return done.stdout.split()


def test_condor_rm_cancels_every_local_job(account: Account):
    account.configure('adapter = "fork"\ncores = 4')
    marker = f"sleep 3{os.getpid() % 1000:03d}"
    script = account.script("long.sh", f"exec {marker}\n")
    cluster = account.submit(script, environment="JIM_JOBTYPE=montecarlo JIM_EVENTS=10")
    deadline = time.monotonic() + TIMEOUT
    while len(_processes_of(marker)) < 2:
        assert time.monotonic() < deadline, f"the local jobs never ran: {account.ad(cluster)}"
        time.sleep(2)
    in_htcondor_root("condor_rm", str(cluster), user=HTC_USER)
    account.wait(cluster, {3})
    (job_id,) = account.jim_ids()
    deadline = time.monotonic() + TIMEOUT
    while _processes_of(marker) or "JOB_STATE=FAILED" not in (account.home / "db" / f"{job_id}.state").read_text():
        assert time.monotonic() < deadline, f"local jobs left after condor_rm: {_processes_of(marker)}"
        time.sleep(2)
    assert 'cancelRequested="true"' in account.record(job_id)


def test_a_bad_job_type_is_held_with_jims_reason_and_nothing_recorded(account: Account):
    account.configure('adapter = "fork"')
    cluster = account.submit(account.script("x.sh", "true\n"), environment="JIM_JOBTYPE=nosuchtype")
    ad = account.wait(cluster, {5})
    assert "unknown job type 'nosuchtype'" in str(ad.get("HoldReason")), ad
    assert account.jim_ids() == []
    in_htcondor_root("condor_rm", str(cluster), user=HTC_USER)
