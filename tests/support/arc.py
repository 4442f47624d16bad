"""The ARC CE test service (tests/services/arc) and the real ARC client, as the tests use them.

``start.sh`` runs A-REX on ``https://localhost:<port>/arex`` and writes
``$STATE/env.sh``; :func:`service` reads it.  The client commands (``arcproxy``,
``arcsub``, ``arcstat``, ``arcget``, ``arckill``) run as the unprivileged
submitter account; grid jobs run as the mapped account.  A :class:`Watch`
asks ``arcstat`` about every job a test follows, every couple of seconds, and
keeps the states each job was shown in, in order: a test then asserts what the
client saw (Queuing, then Running, then Finished), not when.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.env import REPO
from support.users import UnixUser

SERVICE = REPO / "tests" / "services" / "arc"
STATE = Path(os.environ.get("JIM_TEST_ARC_STATE", "/var/tmp/jim-test-arc"))
CLIENT_PATH = "/usr/bin:/bin"
#: arcstat -l fields the tests read
FIELDS = ("State", "Exit Code", "Job Error", "Specific state")
#: arcstat states a job never leaves
TERMINAL = ("Finished", "Failed", "Killed", "Deleted")


def read_env() -> dict[str, str] | None:
    try:
        text = (STATE / "env.sh").read_text()
    except OSError:
        return None
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def _arched_alive(pidfile: Path) -> bool:
    try:
        pid = int(pidfile.read_text().strip())
        return os.readlink(f"/proc/{pid}/exe") == "/usr/sbin/arched"
    except (OSError, ValueError):
        return False


def running_mode() -> str | None:
    """The mode A-REX runs in (jim-fork, jim-slurm, fork), or None when it does not run."""
    if not (_arched_alive(STATE / "run" / "arex.pid") and _arched_alive(STATE / "run" / "arex-ws.pid")):
        return None
    try:
        return (STATE / "run" / "mode").read_text().strip()
    except OSError:
        return None


@dataclass
class ArcJob:
    url: str
    name: str
    marker: str

    @property
    def id(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]


@dataclass
class Watch:
    """arcstat of the followed jobs every ``interval`` seconds, in a thread."""

    ce: ArcCE
    interval: float = 2.0
    seen: dict[str, list[str]] = field(default_factory=dict)
    _jobs: list[ArcJob] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def follow(self, job: ArcJob) -> None:
        with self._lock:
            self._jobs.append(job)
            self.seen.setdefault(job.url, [])
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def states(self, job: ArcJob) -> list[str]:
        """The states arcstat showed for the job, consecutive repeats dropped."""
        with self._lock:
            return list(self.seen.get(job.url, []))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                jobs = list(self._jobs)
            try:
                states = self.ce.status(*jobs)
            except (OSError, subprocess.SubprocessError):
                continue
            with self._lock:
                for url, fields in states.items():
                    st = fields.get("State", "")
                    seq = self.seen.setdefault(url, [])
                    if st and (not seq or seq[-1] != st):
                        seq.append(st)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)


class ArcCE:
    """The running service: submit, follow, fetch and kill jobs with the real client."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.endpoint = env["JIM_TEST_ARC_ENDPOINT"]
        self.mode = env["JIM_TEST_ARC_MODE"]
        self.client = UnixUser.lookup(env["JIM_TEST_ARC_CLIENT"])
        self.mapped = UnixUser.lookup(env["JIM_TEST_ARC_MAPPED"])
        self.work = STATE / "client"
        self._proxy_ok = False

    # -- the client account --------------------------------------------------------
    def run(self, *argv: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """An ARC client command as the submitter, with a clean environment."""
        return self.client.run(list(argv), env={"PATH": CLIENT_PATH}, cwd=cwd or self.client.home, timeout=timeout)

    def proxy(self) -> None:
        if self._proxy_ok:
            return
        p = self.run("arcproxy", "-c", "validityPeriod=12h")
        assert p.returncode == 0, f"arcproxy failed: {p.stdout}{p.stderr}"
        self._proxy_ok = True

    def job_dir(self, name: str) -> Path:
        """A fresh directory for one job's files, owned by the submitter."""
        self.work.mkdir(mode=0o755, exist_ok=True)
        os.chown(self.work, self.client.uid, self.client.gid)
        d = self.work / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(mode=0o755)
        os.chown(d, self.client.uid, self.client.gid)
        return d

    def write(self, d: Path, name: str, text: str, mode: int = 0o644) -> Path:
        p = d / name
        p.write_text(text)
        os.chown(p, self.client.uid, self.client.gid)
        os.chmod(p, mode)
        return p

    # -- jobs ----------------------------------------------------------------------
    def submit(self, name: str, xrsl: str, files: dict[str, str] | None = None, broker: str = "") -> ArcJob:
        """arcsub an xRSL (or ADL) text (``{marker}`` in it becomes a word unique to this job);
        ``broker``: arcsub's ``-b`` (``Null``: no matchmaking against the CE's published figures)."""
        self.proxy()
        marker = f"jimarc{secrets.token_hex(6)}"
        d = self.job_dir(name)
        for fname, text in (files or {}).items():
            self.write(d, fname, text.replace("{marker}", marker), 0o755)
        path = self.write(d, "job.xrsl", xrsl.replace("{marker}", marker).replace("{dir}", str(d)))
        p = self.run(
            "arcsub", "-C", self.endpoint, "-T", "arcrest", *(["-b", broker] if broker else []), str(path), cwd=d
        )
        m = re.search(r"Job submitted with jobid: (\S+)", p.stdout)
        assert p.returncode == 0 and m, f"arcsub failed ({p.returncode}): {p.stdout}{p.stderr}"
        return ArcJob(m.group(1), name, marker)

    def status(self, *jobs: ArcJob) -> dict[str, dict[str, str]]:
        """``arcstat -l`` of the jobs: {url: {"State": ..., "Exit Code": ..., ...}}."""
        if not jobs:
            return {}
        p = self.run("arcstat", "-l", *(j.url for j in jobs), timeout=90)
        out: dict[str, dict[str, str]] = {}
        cur: dict[str, str] | None = None
        for line in p.stdout.splitlines():
            if line.startswith("Job: "):
                cur = out.setdefault(line[5:].strip(), {})
            elif cur is not None and line.startswith(" ") and ": " in line:
                key, _, value = line.strip().partition(": ")
                if key in FIELDS and key not in cur:
                    cur[key] = value.strip()
        return out

    def wait(self, job: ArcJob, pattern: str, timeout: float = 240) -> dict[str, str]:
        """Ask arcstat every 2 s until the job's State matches ``pattern``; its fields then."""
        deadline = time.monotonic() + timeout
        last: dict[str, str] = {}
        while time.monotonic() < deadline:
            last = self.status(job).get(job.url, {})
            if re.match(pattern, last.get("State", "")):
                return last
            if last.get("State", "").split(" ")[0] in TERMINAL:
                break
            time.sleep(2)
        raise AssertionError(
            f"{job.name}: arcstat did not show {pattern!r} (waited at most {timeout:.0f} s); last {last}, "
            f"A-REX {self.arex_state(job)!r}\n{self.diagnostics(job)}"
        )

    def get(self, job: ArcJob) -> Path:
        """arcget the job's outputs; the directory they landed in."""
        d = self.job_dir(f"{job.name}-out")
        p = self.run("arcget", "-k", job.url, cwd=d, timeout=180)
        assert p.returncode == 0, f"arcget failed: {p.stdout}{p.stderr}"
        got = d / job.id
        assert got.is_dir(), f"arcget left no {got}: {p.stdout}"
        return got

    def kill(self, job: ArcJob) -> None:
        p = self.run("arckill", job.url)
        assert p.returncode == 0, f"arckill failed: {p.stdout}{p.stderr}"

    def clean(self, *jobs: ArcJob) -> None:
        if jobs:
            self.run("arcclean", "-f", *(j.url for j in jobs))

    # -- the server side (root) ----------------------------------------------------
    def control_file(self, job: ArcJob, suffix: str) -> Path | None:
        control = STATE / "control"
        for p in (control / f"job.{job.id}.{suffix}", *control.glob(f"*/job.{job.id}.{suffix}")):
            if p.exists():
                return p
        return None

    def arex_state(self, job: ArcJob) -> str:
        """A-REX's own state of the job (ACCEPTED, ..., INLRMS, FINISHED)."""
        p = self.control_file(job, "status")
        return p.read_text().split("\n", 1)[0].strip() if p else ""

    def jim_id(self, job: ArcJob) -> str | None:
        """The grid job id jim answered at submit (``joboption_jobid`` in the grami)."""
        p = self.control_file(job, "grami")
        if p is None:
            return None
        m = re.search(r"^joboption_jobid=['\"]?([^'\"\n]+)", p.read_text(), re.M)
        return m.group(1) if m else None

    def processes(self, marker: str) -> list[int]:
        """The mapped account's processes whose command line holds ``marker``."""
        pids = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if d.stat().st_uid != self.mapped.uid:
                    continue
                if marker.encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                continue
        return pids

    def diagnostics(self, job: ArcJob) -> str:
        """What A-REX and the backend said about a job: for failure messages."""
        parts = []
        for suffix in ("errors", "failed", "diag"):
            p = self.control_file(job, suffix)
            if p is not None:
                parts.append(f"--- job.{suffix}\n" + p.read_text(errors="replace")[-3000:])
        helper = STATE / "log" / "job.helper.errors"
        if helper.exists():
            parts.append("--- job.helper.errors (tail)\n" + helper.read_text(errors="replace")[-2000:])
        return "\n".join(parts)


def run_root(argv: list[str], env: dict[str, str]) -> None:
    """A command of the service's neighbours (scontrol) as root; it must succeed."""
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"{argv} failed: {p.stdout}{p.stderr}"


def start(mode: str) -> ArcCE:
    """The service in ``mode`` (start.sh restarts it when it runs in another)."""
    if running_mode() != mode:
        p = subprocess.run([str(SERVICE / "start.sh"), mode], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"start.sh {mode} failed:\n{p.stdout}\n{p.stderr}"
    env = read_env()
    assert env is not None and env.get("JIM_TEST_ARC_MODE") == mode
    return ArcCE(env)


def available() -> tuple[bool, str]:
    """Whether the tests can use the service: it runs (any mode) and we are root (start.sh switches modes)."""
    if os.geteuid() != 0:
        return False, "the ARC tests need root (they switch the service's mode)"
    if running_mode() is None:
        return False, f"A-REX is not running ({SERVICE / 'start.sh'})"
    return True, ""
