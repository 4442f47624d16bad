"""Two real local accounts, ``jimtest-alice`` and ``jimtest-bob``, for the isolation tests.

``tests/services/users/start.sh`` creates them and installs this repository's
jim into a venv every account can run (``/opt/jim-test-venv``); the
``unix_users`` fixture (conftest.py) runs that script again when it can (as
root: it only reinstalls when the sources changed), gives each test the two
accounts, and on teardown kills every process they own and removes what the
test left in their home directories.

A command runs as an account through :func:`subprocess.run` with ``user=``,
``group=`` and ``extra_groups=[]`` (no shell, no ``su``), with a small clean
environment.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.env import REPO

NAMES = ("jimtest-alice", "jimtest-bob")
VENV = Path(os.environ.get("JIM_TEST_VENV", "/opt/jim-test-venv"))
START = REPO / "tests" / "services" / "users" / "start.sh"

CONFIG = """
[monitor]
interval = 0.3
lost_grace = 5.0
idle_exit = 5.0

[deadlines]
cancel_grace = 3.0
"""


@dataclass
class UnixUser:
    """One local account: runs commands, and the installed jim, as itself."""

    name: str
    uid: int
    gid: int
    home: Path
    _before: set[str] = field(default_factory=set)

    @classmethod
    def lookup(cls, name: str) -> UnixUser:
        pw = pwd.getpwnam(name)
        return cls(name, pw.pw_uid, pw.pw_gid, Path(pw.pw_dir))

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {
            "HOME": str(self.home),
            "USER": self.name,
            "LOGNAME": self.name,
            "PATH": f"{VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
        }
        env.update(extra or {})
        return env

    def run(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        timeout: float = 60,
        input: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as this account (its own uid, gid and no other group)."""
        return subprocess.run(
            argv,
            user=self.uid,
            group=self.gid,
            extra_groups=[],
            env=self.env(env),
            cwd=str(cwd or self.home),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )

    def jim(
        self, *args: str, home: Path, config: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """The installed jim, as this account, with ``JIM_HOME=home`` (and ``JIM_CONFIG=config``)."""
        extra = {"JIM_HOME": str(home), "JIM_CONFIG": str(config or self.config())}
        extra.update(env or {})
        return self.run([str(VENV / "bin" / "jim"), *args], env=extra, timeout=timeout)

    def write(self, relative: str, text: str, mode: int = 0o600) -> Path:
        """A file in this account's home, owned by it."""
        path = self.home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.chown(path, self.uid, self.gid)
        os.chmod(path, mode)
        return path

    def mkdir(self, relative: str, mode: int = 0o700) -> Path:
        path = self.home / relative
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, self.uid, self.gid)
        os.chmod(path, mode)
        return path

    def config(self) -> Path:
        """A fast jim configuration (fork backend) in this account's home."""
        path = self.home / "jim-test.toml"
        if not path.exists():
            self.write("jim-test.toml", CONFIG, 0o644)
        return path

    def processes(self) -> list[int]:
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.stat(f"/proc/{entry}").st_uid == self.uid:
                        out.append(int(entry))
                except FileNotFoundError:
                    pass
        return out

    def kill_all(self) -> None:
        for _ in range(50):
            pids = self.processes()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def snapshot(self) -> None:
        self._before = set(os.listdir(self.home))

    def clean(self) -> None:
        """Remove what a test left in the home directory (kept: what was there before)."""
        for name in set(os.listdir(self.home)) - self._before:
            path = self.home / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


@dataclass
class Users:
    alice: UnixUser
    bob: UnixUser


def available() -> tuple[bool, str]:
    """Whether the two accounts and the shared jim are there (set up now when running as root)."""
    if os.geteuid() == 0:
        done = subprocess.run([str(START)], capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            return False, f"{START} failed: {done.stderr.strip()[-500:]}"
    else:
        return False, "the isolation tests run as root (they switch to two test accounts)"
    for name in NAMES:
        try:
            pwd.getpwnam(name)
        except KeyError:
            return False, f"no account {name} (tests/services/users/start.sh creates it)"
    if not (VENV / "bin" / "jim").exists():
        return False, f"no jim in {VENV} (tests/services/users/start.sh installs it)"
    return True, ""
