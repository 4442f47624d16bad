"""The two ARC CE test services and the real ARC client, as the tests use them.

- ``arc6``: A-REX 6.17 of Debian 12 on this host (tests/services/arc, ``https://localhost:40450/arex``;
  modes jim-fork, jim-slurm, fork), the 6.17 client as the host account ``jimtest-arcclient``;
- ``arc7``: A-REX 7.0 of Debian 13 in the HTCondor pool's trixie chroot (tests/services/arc7,
  ``https://localhost:41443/arex``; modes jim-fork, fork), the ARC 7 client *inside the chroot* as
  the chroot account ``jimtest-arc7client`` (X.509 proxy from the service's test CA, or a bearer
  token from its JWT issuer: :meth:`ArcCE.submit` with ``token=True``).

Each ``start.sh`` writes an env file (:data:`ARC6`, :data:`ARC7`); :func:`connect` reads it.  The
client commands run as the unprivileged submitter with a clean environment; grid jobs run as the
mapped account.  Paths: a :class:`ArcCE` speaks of files as the CE and its client see them (for
arc7 paths inside the chroot); :meth:`ArcCE.host` is the same file on this host.  A :class:`Watch`
asks ``arcstat`` about every job a test follows and keeps the states each job was shown in, in
order: a test then asserts what the client saw (Queuing, then Running, then Finished), not when.
Waiting is always for a condition, with a generous bound: a loaded machine makes a test slower,
never red.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.env import REPO

CLIENT_PATH = "/usr/bin:/bin"
#: arcstat -l fields the tests read
FIELDS = ("State", "Exit Code", "Job Error", "Specific state")
#: arcstat states a job never leaves
TERMINAL = ("Finished", "Failed", "Killed", "Deleted")
#: A-REX's state directories of the control directory (a job's <id>.status is in one of them)
STATUS_DIRS = ("accepting", "processing", "finished", "restarting")


@dataclass(frozen=True)
class Service:
    """One of the two test CEs: where its scripts are and where its start.sh writes the env file."""

    name: str
    dir: Path
    env_file: Path
    prefix: str  # of the env file's keys

    def read_env(self) -> dict[str, str] | None:
        try:
            text = self.env_file.read_text()
        except OSError:
            return None
        env = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
        return {k[len(self.prefix) :]: v for k, v in env.items() if k.startswith(self.prefix)}


#: A-REX 6.17's state directory on the host (``JIM_TEST_ARC_STATE``)
STATE = Path(os.environ.get("JIM_TEST_ARC_STATE", "/var/tmp/jim-test-arc"))
SERVICE = REPO / "tests" / "services" / "arc"
ARC6 = Service("arc6", SERVICE, STATE / "env.sh", "JIM_TEST_ARC_")
ARC7 = Service(
    "arc7",
    REPO / "tests" / "services" / "arc7",
    Path(os.environ.get("JIM_TEST_ARC7_ENV", "/var/tmp/jim-test-arc7/env.sh")),
    "JIM_TEST_ARC7_",
)
SERVICES = {s.name: s for s in (ARC6, ARC7)}


def read_env() -> dict[str, str] | None:
    """The A-REX 6.17 service's env file, its keys as written (``JIM_TEST_ARC_...``)."""
    env = ARC6.read_env()
    return None if env is None else {ARC6.prefix + k: v for k, v in env.items()}


def _arched_alive(pidfile: Path, root: Path) -> bool:
    try:
        pid = int(pidfile.read_text().strip())
        exe = os.readlink(f"/proc/{pid}/exe")
    except (OSError, ValueError):
        return False
    return exe in ("/usr/sbin/arched", str(root / "usr/sbin/arched"))


def _locate(service: Service) -> tuple[Path, Path]:
    """(root, state) of a service: the chroot ("/" for none) and its state directory in it."""
    env = service.read_env() or {}
    if service is ARC6:
        return Path("/"), STATE
    root = Path(env.get("ROOT", os.environ.get("JIM_TEST_HTC_ROOT", "/var/lib/jim-htcondor/root")))
    return root, Path(env.get("STATE", "/var/lib/jim-arc7"))


def running_mode(service: Service = ARC6) -> str | None:
    """The mode the CE runs in (jim-fork, jim-slurm, fork), or None when it does not run."""
    root, state = _locate(service)
    run = root / str(state).lstrip("/") / "run"
    if not (_arched_alive(run / "arex.pid", root) and _arched_alive(run / "arex-ws.pid", root)):
        return None
    try:
        return (run / "mode").read_text().strip()
    except OSError:
        return None


@dataclass(frozen=True)
class Account:
    """An account of the CE: on this host, or (``root`` not "/") one that exists only in a chroot."""

    name: str
    uid: int
    gid: int
    home: Path  # as the account sees it
    root: Path = Path("/")

    @classmethod
    def lookup(cls, name: str, root: Path = Path("/")) -> Account:
        if root == Path("/"):
            pw = pwd.getpwnam(name)
            return cls(name, pw.pw_uid, pw.pw_gid, Path(pw.pw_dir))
        for line in (root / "etc" / "passwd").read_text().splitlines():
            f = line.split(":")
            if f[0] == name:
                return cls(name, int(f[2]), int(f[3]), Path(f[5]), root)
        raise KeyError(f"no account {name} in {root}/etc/passwd")

    def run(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` as this account (its uid and gid, no other group), with a small clean environment."""
        full = {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name, "PATH": CLIENT_PATH}
        full["LANG"] = "C.UTF-8"
        full.update(env or {})
        where = str(cwd or self.home)
        if self.root == Path("/"):
            return subprocess.run(
                argv, user=self.uid, group=self.gid, extra_groups=[], env=full, cwd=where,
                capture_output=True, text=True, timeout=timeout,
            )  # fmt: skip
        # chroot execs env, env execs argv: one process, killed as such on a timeout
        cmd = ["chroot", f"--userspec={self.uid}:{self.gid}", "--groups=", str(self.root), "/usr/bin/env", "-i"]
        cmd += ["-C", where, *(f"{k}={v}" for k, v in full.items()), *argv]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd="/")


@dataclass
class ArcJob:
    url: str
    name: str
    marker: str
    #: submitted with a bearer token and no proxy (arc7): every client command on it uses the token
    token: bool = False

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
    """A running test CE: submit, follow, fetch and kill jobs with its real client."""

    def __init__(self, env: dict[str, str], service: Service = ARC6):
        if service is ARC6 and "ENDPOINT" not in env:  # (the env file's keys as written)
            env = {k[len(ARC6.prefix) :]: v for k, v in env.items() if k.startswith(ARC6.prefix)}
        self.service = service
        self.name = service.name
        self.env = env
        self.endpoint = env["ENDPOINT"]
        self.mode = env["MODE"]
        self.root, self.state = _locate(service)
        self.version = 7 if service is ARC7 else 6
        self.client = Account.lookup(env["CLIENT"], self.root)
        self.mapped = Account.lookup(env["MAPPED"], self.root)
        self.work = self.client.home / "jobs" if self.version == 7 else STATE / "client"
        self._proxy_ok = False
        self._token_ok = False

    def __repr__(self) -> str:
        return f"ArcCE({self.name}, {self.endpoint}, {self.mode})"

    def host(self, path: Path | str) -> Path:
        """A path as the CE sees it, on this host."""
        return self.root / str(path).lstrip("/")

    # -- the client account --------------------------------------------------------
    def run(
        self, *argv: str, cwd: Path | None = None, timeout: float = 120, token: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """An ARC client command as the submitter (``token``: authenticated by the bearer token only)."""
        env: dict[str, str] = {}
        if token:
            env["BEARER_TOKEN_FILE"] = str(self.token_file())
            argv = (argv[0], "-z", str(self.client.home / ".arc" / "client-token.conf"), "--token-authentication",
                    *argv[1:])  # fmt: skip
        return self.client.run(list(argv), env=env, cwd=cwd, timeout=timeout)

    def proxy(self) -> None:
        if self._proxy_ok:
            return
        p = self.run("arcproxy", "-c", "validityPeriod=12h")
        assert p.returncode == 0, f"arcproxy failed: {p.stdout}{p.stderr}"
        self._proxy_ok = True

    def token_file(self) -> Path:
        """A bearer token of the CE's test JWT issuer in the client's ~/.arc/token (arc7), made anew
        once per :class:`ArcCE` (a token expires), and ~/.arc/client-token.conf: the client's
        configuration without any certificate or proxy, so that a command given it can authenticate
        with the token only."""
        if self.version != 7:
            raise NotImplementedError("tokens: the ARC 7 CE only")
        arc = self.client.home / ".arc"
        token, conf = arc / "token", arc / "client-token.conf"
        if self._token_ok:
            return token
        p = subprocess.run(
            ["chroot", str(self.root), "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
             "arcctl", "-c", self.env["JWTCONF"], "test-jwt", "token", "-n", self.env["TOKEN_SUBJECT"]],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        lines = p.stdout.strip().splitlines()
        assert p.returncode == 0 and lines and lines[-1].count(".") == 2, f"arcctl test-jwt token: {p}"
        self._write_host(self.host(token), lines[-1] + "\n", 0o600)
        text = self.host(arc / "client.conf").read_text()
        for key in ("certificatepath", "keypath", "proxypath"):
            text = re.sub(rf"^{key}=.*$", f"{key}=/nonexistent/{key}", text, flags=re.M)
        self._write_host(self.host(conf), text, 0o644)
        self._token_ok = True
        return token

    def _write_host(self, p: Path, text: str, mode: int) -> None:
        p.write_text(text)
        os.chown(p, self.client.uid, self.client.gid)
        os.chmod(p, mode)

    def job_dir(self, name: str) -> Path:
        """A fresh directory for one job's files, owned by the submitter (the path as the client sees it)."""
        work = self.host(self.work)
        work.mkdir(mode=0o755, exist_ok=True)
        os.chown(work, self.client.uid, self.client.gid)
        d = work / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(mode=0o755)
        os.chown(d, self.client.uid, self.client.gid)
        return self.work / name

    def write(self, d: Path, name: str, text: str, mode: int = 0o644) -> Path:
        """A file in a job directory (``d`` as :meth:`job_dir` gave it); its path as the client sees it."""
        self._write_host(self.host(d / name), text, mode)
        return d / name

    # -- jobs ----------------------------------------------------------------------
    def submit(
        self, name: str, xrsl: str, files: dict[str, str] | None = None, broker: str = "", token: bool = False
    ) -> ArcJob:
        """arcsub an xRSL (or ADL) text (``{marker}`` in it becomes a word unique to this job, ``{dir}``
        the job's directory); ``broker``: arcsub's ``-b`` (``Null``: no matchmaking against the CE's
        published figures); ``token``: a bearer token and no proxy at all (arc7)."""
        if not token:
            self.proxy()
        marker = f"jimarc{secrets.token_hex(6)}"
        d = self.job_dir(name)
        for fname, text in (files or {}).items():
            self.write(d, fname, text.replace("{marker}", marker), 0o755)
        path = self.write(d, "job.xrsl", xrsl.replace("{marker}", marker).replace("{dir}", str(d)))
        argv = ["arcsub", "-C", self.endpoint, "-T", "arcrest", *(["-b", broker] if broker else []), str(path)]
        p = self.run(*argv, cwd=d, token=token)
        m = re.search(r"Job submitted with jobid: (\S+)", p.stdout)
        assert p.returncode == 0 and m, f"{self.name}: arcsub failed ({p.returncode}): {p.stdout}{p.stderr}"
        return ArcJob(m.group(1), name, marker, token)

    def status(self, *jobs: ArcJob) -> dict[str, dict[str, str]]:
        """``arcstat -l`` of the jobs: {url: {"State": ..., "Exit Code": ..., ...}}."""
        out: dict[str, dict[str, str]] = {}
        for token in (False, True):
            some = [j.url for j in jobs if j.token == token]
            if some:
                out.update(_parse_arcstat(self.run("arcstat", "-l", *some, timeout=90, token=token).stdout))
        return out

    def wait(self, job: ArcJob, pattern: str, timeout: float = 300) -> dict[str, str]:
        """Ask arcstat every 2 s until the job's State matches ``pattern``; its fields then.  A job
        that reached another terminal state fails at once."""
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
            f"{self.name} {job.name}: arcstat did not show {pattern!r} (waited at most {timeout:.0f} s); "
            f"last {last}, A-REX {self.arex_state(job)!r}\n{self.diagnostics(job)}"
        )

    def wait_terminal(self, job: ArcJob, timeout: float = 300) -> dict[str, str]:
        """Until arcstat shows the job Finished, Failed, Killed or Deleted; its fields then."""
        return self.wait(job, "|".join(TERMINAL), timeout)

    def get(self, job: ArcJob) -> Path:
        """arcget the job's outputs (kept on the CE); the directory they landed in, on this host."""
        d = self.job_dir(f"{job.name}-out")
        p = self.run("arcget", "-k", job.url, cwd=d, timeout=180, token=job.token)
        assert p.returncode == 0, f"{self.name}: arcget failed: {p.stdout}{p.stderr}"
        got = self.host(d / job.id)
        assert got.is_dir(), f"arcget left no {got}: {p.stdout}"
        return got

    def log(self, job: ArcJob) -> str:
        """The job's A-REX log as the client reads it (``arccat -l``): the LRMS submit step's stderr too."""
        return self.run("arccat", "-l", job.url, token=job.token).stdout

    def errors(self, job: ArcJob) -> str:
        """The job's stderr as the client reads it (``arccat -e``)."""
        return self.run("arccat", "-e", job.url, token=job.token).stdout

    def kill(self, job: ArcJob) -> None:
        p = self.run("arckill", job.url, token=job.token)
        assert p.returncode == 0, f"{self.name}: arckill failed: {p.stdout}{p.stderr}"

    def clean(self, *jobs: ArcJob) -> None:
        for token in (False, True):
            some = [j.url for j in jobs if j.token == token]
            if some:
                self.run("arcclean", "-f", *some, token=token)

    # -- the server side (root) ----------------------------------------------------
    @property
    def control(self) -> Path:
        """The control directory, on this host."""
        return self.host(self.state / "control")

    def control_file(self, job: ArcJob, suffix: str) -> Path | None:
        """One of the job's control files: ``job.<id>.<suffix>`` (6.17; status files in the state
        directories) or ``jobs/abc/def/ghi/<rest>/<suffix>`` and ``<state>/<id>.status`` (ARC 7)."""
        c = self.control
        if self.version == 7:
            i = job.id
            cands = [c / f"{d}/{i}.status" for d in STATUS_DIRS] if suffix == "status" else []
            cands.append(c / "jobs" / i[:3] / i[3:6] / i[6:9] / i[9:] / suffix)
        else:
            cands = [c / f"job.{job.id}.{suffix}", *c.glob(f"*/job.{job.id}.{suffix}")]
        return next((p for p in cands if p.exists()), None)

    def arex_state(self, job: ArcJob) -> str:
        """A-REX's own state of the job (ACCEPTED, ..., INLRMS, FINISHED)."""
        p = self.control_file(job, "status")
        return p.read_text().split("\n", 1)[0].strip() if p else ""

    def local(self, job: ArcJob) -> dict[str, str]:
        """A-REX's ``local`` file of the job (``subject=``, ``auth=``, ``localid=``, ``tokenclaim.*``...)."""
        p = self.control_file(job, "local")
        text = p.read_text(errors="replace") if p else ""
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

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
                parts.append(f"--- {suffix}\n" + p.read_text(errors="replace")[-3000:])
        helper = self.host(self.state / "log" / "job.helper.errors")
        if helper.exists():
            parts.append("--- job.helper.errors (tail)\n" + helper.read_text(errors="replace")[-2000:])
        return "\n".join(parts)


def _parse_arcstat(stdout: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    cur: dict[str, str] | None = None
    for line in stdout.splitlines():
        if line.startswith("Job: "):
            cur = out.setdefault(line[5:].strip(), {})
        elif cur is not None and line.startswith(" ") and ": " in line:
            key, _, value = line.strip().partition(": ")
            if key in FIELDS and key not in cur:
                cur[key] = value.strip()
    return out


def run_root(argv: list[str], env: dict[str, str]) -> None:
    """A command of the service's neighbours (scontrol) as root; it must succeed."""
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"{argv} failed: {p.stdout}{p.stderr}"


def connect(name: str = "arc6", mode: str = "jim-fork") -> ArcCE:
    """The CE ``name`` (arc6, arc7) running in ``mode`` (its start.sh restarts it in another)."""
    service = SERVICES[name]
    # (arc7 always: when it runs, start.sh only mounts again what the HTCondor pool's stop.sh may have
    # unmounted under the shared chroot, and keeps jim current: under a second)
    if running_mode(service) != mode or service is ARC7:
        p = subprocess.run([str(service.dir / "start.sh"), mode], capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, f"{service.dir}/start.sh {mode} failed:\n{p.stdout}\n{p.stderr}"
    env = service.read_env()
    assert env is not None and env.get("MODE") == mode, env
    return ArcCE(env, service)


def start(mode: str) -> ArcCE:
    """The A-REX 6.17 CE in ``mode`` (start.sh restarts it when it runs in another)."""
    return connect("arc6", mode)


def available(name: str = "arc6") -> tuple[bool, str]:
    """Whether the tests can use a CE: it runs (any mode) and we are root (start.sh switches modes;
    the ARC 7 client runs through chroot)."""
    service = SERVICES[name]
    if os.geteuid() != 0:
        return False, "the ARC tests need root (they switch the service's mode, and chroot for ARC 7)"
    if running_mode(service) is None:
        return False, f"A-REX of {name} is not running ({service.dir / 'start.sh'})"
    return True, ""
