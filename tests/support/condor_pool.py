"""jim on the real HTCondor test pool (tests/services/htcondor), as the unprivileged test account.

HTCondor runs no job of root's, so every jim here runs as ``HTC_USER``: the
installed jim (``PYTHON``, a venv every account can run), with a private home
under ``/tmp`` (bound into the pool's chroot, where the jobs run) owned by that
account, mode 0700, and the client ``CONDOR_CONFIG`` of :func:`htcondor_env`.
jim is started from ``/root``, a directory the account cannot read: HTCondor's
default initial directory is the submitter's, jim must set its own.

:class:`AccountAdapter` is the adapter the conformance suite asks directly, run
as that account in a subprocess (the schedd answers a user's token, not root).
:func:`remove_jobs_under` removes every job of the account whose ``Iwd`` lies
under one directory (a test's own: other tests may use the account at the same
time), :func:`schedd_ads` reads job ads as an admin inside the chroot.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jim.adapters.model import BatchStatus, QueryResult

from support.env import require_service
from support.jimcli import Jim, kill_all
from support.services import HTC_ROOT, HTC_STATE, HTC_USER, htcondor_env, in_htcondor_root

#: the jim the account runs (start.sh installs this repository there; JIM_TEST_HTC_PYTHON: another venv)
PYTHON = os.environ.get("JIM_TEST_HTC_PYTHON", "/opt/jim-test-venv/bin/python")
#: the wrapper's interpreter: the chroot's, where the jobs run
JOB_PYTHON = "/usr/bin/python3"
#: where jim is started from: a directory the account cannot read
SUBMIT_CWD = "/root"

POOL_CONFIG = """
[batch]
adapter = "condor"
python = "{python}"
cache_interval = 1.0
"""


class Account:
    """The test account: its ids, its clean environment, a private directory of one test."""

    def __init__(self, condor_env: dict[str, str]):
        pw = pwd.getpwnam(HTC_USER)
        self.name, self.uid, self.gid, self.home = HTC_USER, pw.pw_uid, pw.pw_gid, pw.pw_dir
        self.condor_env = dict(condor_env)
        self.base = Path(tempfile.mkdtemp(prefix="jim-htc-test-", dir="/tmp"))
        os.chown(self.base, self.uid, self.gid)
        self.base.chmod(0o700)
        self.jims: list[Jim] = []  # (the jims a test ran as the account: stopped by :func:`pool_account`)

    def env(self) -> dict[str, str]:
        return {
            "HOME": self.home,
            "USER": self.name,
            "LOGNAME": self.name,
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "CONDOR_CONFIG": self.condor_env["CONDOR_CONFIG"],
        }

    def own(self, path: Path, mode: int = 0o600) -> Path:
        """``path`` (made by this process) given to the account."""
        os.chown(path, self.uid, self.gid)
        path.chmod(mode)
        return path

    def mkdir(self, name: str) -> Path:
        path = self.base / name
        path.mkdir(exist_ok=True)
        return self.own(path, 0o700)

    def jim(self, name: str = "jim") -> Jim:
        """A jim of this account with its own home and config under :attr:`base`."""
        config = self.base / f"{name}.toml"
        config.touch()
        self.own(config)  # (it exists before the test writes it: it stays the account's)
        return Jim(self.base / f"{name}-home", config).as_account(self.uid, self.gid, PYTHON, self.env(), SUBMIT_CWD)

    def run(self, argv: list[str], timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            user=self.uid,
            group=self.gid,
            extra_groups=[],
            env={**self.env(), **env},
            cwd=str(self.base),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def cleanup(self, *jims: Jim) -> None:
        """Every process of these jims killed, every job under :attr:`base` removed, the directory gone."""
        for jim in jims:
            kill_all(jim.home)
        remove_jobs_under(self.base)
        shutil.rmtree(self.base, ignore_errors=True)


_QUERY = """
import json, sys, tomllib
from jim.adapters import adapter_class
from jim.paths import Home
cfg = tomllib.loads(open(sys.argv[1]).read())["batch"]
cfg.pop("adapter")
a = adapter_class("condor")(Home(sys.argv[2]).ensure(), cfg)
ids = json.loads(sys.argv[4])
res = getattr(a, sys.argv[3])(ids)
if sys.argv[3] == "query":
    print(json.dumps({"ok": res.ok, "error": res.error, "statuses": {b: s.to_json() for b, s in res.statuses.items()}}))
else:
    print(json.dumps({"ok": True, "error": "", "statuses": {b: s.to_json() for b, s in res.items()}}))
"""


class AccountAdapter:
    """The ``condor`` adapter of a jim of the account, each call made as that account in a subprocess."""

    def __init__(self, account: Account, jim: Jim):
        self.account, self.jim = account, jim

    def _ask(self, method: str, batch_ids: list[str]) -> dict[str, Any]:
        p = self.account.run(
            [PYTHON, "-c", _QUERY, str(self.jim.config), str(self.jim.home), method, json.dumps(batch_ids)]
        )
        assert p.returncode == 0, f"the adapter's {method} as {self.account.name} failed: {p.stderr[-2000:]}"
        answer: dict[str, Any] = json.loads(p.stdout)
        return answer

    def query(self, batch_ids: list[str]) -> QueryResult:
        a = self._ask("query", batch_ids)
        statuses = {b: BatchStatus.from_json(v) for b, v in a["statuses"].items()}
        return QueryResult(ok=a["ok"], statuses=statuses, error=a["error"])

    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        return {b: BatchStatus.from_json(v) for b, v in self._ask("accounting", batch_ids)["statuses"].items()}


@contextlib.contextmanager
def _own_condor_config() -> Iterator[None]:
    """This process's environment without the ``CONDOR_CONFIG=/dev/null`` that importing the htcondor2
    bindings leaves there when none was set: the chroot's commands would read that instead of their
    own configuration and fail ("Error: (null)")."""
    planted = os.environ.get("CONDOR_CONFIG") == "/dev/null"
    if planted:
        del os.environ["CONDOR_CONFIG"]
    try:
        yield
    finally:
        if planted:
            os.environ["CONDOR_CONFIG"] = "/dev/null"


def pool_env(wait: float = 60.0) -> dict[str, str] | None:
    """:func:`htcondor_env`, asked again for ``wait`` seconds while it says no (a busy pool's
    collector or schedd may refuse one query: the tests of several users share it)."""
    deadline = time.monotonic() + wait
    while True:
        with _own_condor_config():
            env = htcondor_env()
        if env is not None or time.monotonic() >= deadline or not (HTC_STATE / "master.pid").exists():
            return env
        time.sleep(2)


def admin(*argv: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
    """An HTCondor command inside the chroot, as root (an administrator of the pool) or as ``user``."""
    env = {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG"}  # (the chroot's own configuration)
    p: subprocess.CompletedProcess[str] = in_htcondor_root(*argv, user=user, env=env)
    return p


def schedd_ads(constraint: str, *attrs: str, history: bool = False) -> list[dict[str, Any]]:
    """Job ads (queue, or history) matching ``constraint``, as JSON, read by an admin."""
    argv = ["condor_history"] if history else ["condor_q", "-allusers"]
    for _ in range(5):  # (a busy schedd may refuse a query now and then: the tests of several users share it)
        p = admin(*argv, "-constraint", constraint, "-json", *(["-attributes", ",".join(attrs)] if attrs else []))
        if p.returncode == 0:
            break
        time.sleep(2)
    assert p.returncode == 0, p.stderr
    out: list[dict[str, Any]] = json.loads(p.stdout) if p.stdout.strip() else []
    return out


def admin_remove(constraint: str, timeout: float = 60.0) -> None:
    """An admin's ``condor_rm`` of the jobs matching ``constraint``, then ``condor_rm -forcex`` of those
    still in the queue once their removal had ``timeout`` seconds to finish.

    Not at once: ``-forcex`` while the shadow still waits for the starter's last word makes the
    schedd drop the shadow, and the starter then keeps its slot Preempting/Vacating for the whole job
    lease (40 minutes), waiting for a shadow that never comes back.
    """
    admin("condor_rm", "-constraint", constraint)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and schedd_ads(constraint, "ClusterId"):
        time.sleep(0.5)
    if schedd_ads(constraint, "ClusterId"):
        admin("condor_rm", "-forcex", "-constraint", constraint)


def remove_jobs_under(base: Path) -> None:
    """Remove every job of the pool whose initial directory is under ``base`` (see :func:`admin_remove`)."""
    admin_remove(f'Owner == "{HTC_USER}" && substr(Iwd, 0, {len(str(base))}) == "{base}"')


def startd_pids() -> list[int]:
    """The pool's condor_startd processes (their root is the chroot)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if Path(f"/proc/{entry}/comm").read_text().strip() == "condor_startd" and os.path.samefile(
                f"/proc/{entry}/root", HTC_ROOT
            ):
                out.append(int(entry))
        except OSError:
            continue
    return out


@contextlib.contextmanager
def pool_account() -> Iterator[Account]:
    """The test account on the running pool for one test (a missing pool fails under CI); afterwards every
    jim in ``account.jims`` stopped, the test's jobs removed, its directory gone."""
    env = pool_env()
    require_service(env is not None, "the HTCondor test pool (tests/services/htcondor/start.sh)")
    assert env is not None
    account = Account(env)
    yield account
    account.cleanup(*account.jims)
