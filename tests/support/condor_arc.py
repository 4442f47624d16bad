"""Condor-G in front of the ARC 7 CE test service: an HTCondor ``universe = grid`` job of the pool's test account,
``grid_resource = arc <A-REX>/rest/1.0``, that A-REX 7 hands to jim.

Both services run in the one trixie chroot (tests/services/lib/trixie.sh): the HTCondor pool
(tests/services/htcondor: schedd, gridmanager, ``arc_gahp``) and A-REX 7 with ``lrms=jim``
(tests/services/arc7, https://localhost:41443/arex, its own test CA and JWT issuer). What a test
needs of them:

- :func:`arc7_service`: the running A-REX 7 (``env.sh`` of its start.sh, its two ``arched`` alive in
  the pool's chroot, mode ``jim-*``), or why not;
- :func:`schedd_trust_problem`: whether the pool's schedd hands ``arc_gahp`` the service's CA
  directory (``X509_CERT_DIR`` from ``SCHEDD_ENVIRONMENT``, config.d/jim-arc.config): the only CA
  directory arc_gahp trusts;
- :meth:`Arc7.proxy` / :meth:`Arc7.token`: the submitter's credentials, an X.509 proxy of the
  service's test user (made by ``arcproxy`` as the service's client account, which owns the key) or a
  JWT of its test issuer (``arcctl test-jwt token``), handed to the pool's account (0600);
- :class:`GridSubmitter`: the pool's account submitting (``condor_submit`` inside the chroot, as
  that account) and following its Condor-G jobs until a JobStatus (condor_q, then condor_history).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.services import HTC_ROOT, HTC_USER, condor_job_ad, in_htcondor_root

#: What the ARC 7 service's start.sh writes for the tests (tests/services/arc7/lib.sh: ENV_FILE).
ARC7_ENV = Path(os.environ.get("JIM_TEST_ARC7_ENV", "/var/tmp/jim-test-arc7/env.sh"))
#: The REST interface under A-REX's URL: Condor-G's ``grid_resource = arc`` needs it spelled out.
REST = "/rest/1.0"
#: HTCondor JobStatus values.
IDLE, RUNNING, REMOVED, COMPLETED, HELD = 1, 2, 3, 4, 5
#: Seconds a Condor-G job through A-REX and jim may take (gridmanager probes every 5 s, A-REX scans
#: every ~10 s, jim's fork backend runs the local jobs; about a minute when the host is idle).
TIMEOUT = 420.0


def read_arc7_env(path: Path = ARC7_ENV) -> dict[str, str]:
    try:
        text = path.read_text()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def _arched_in(root: Path, pidfile: Path) -> bool:
    """The pid file names a live ``arched`` whose root is ``root``."""
    try:
        pid = int(pidfile.read_text().strip())
        return os.path.samefile(f"/proc/{pid}/root", root) and os.readlink(f"/proc/{pid}/exe").endswith("/arched")
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class Arc7:
    """The running ARC 7 CE test service, as its ``env.sh`` describes it."""

    endpoint: str  # https://localhost:41443/arex
    root: Path  # the chroot (the pool's)
    state: str  # its state directory, a path inside the chroot
    mapped: str  # the account grid jobs run as (and jim)
    client: str  # the account that owns the test user's certificate and key
    jwtconf: str  # arcctl's configuration for the test JWT issuer
    token_subject: str
    mode: str

    @property
    def rest(self) -> str:
        """What ``grid_resource = arc`` names."""
        return self.endpoint.rstrip("/") + REST

    @property
    def cert_dir(self) -> str:
        """The service's test CA directory (inside the chroot): what ``arc_gahp`` must trust."""
        return f"{self.state}/certificates"

    def host_path(self, path: str) -> Path:
        """A path inside the chroot, seen from the host."""
        return self.root / path.lstrip("/")

    def _home(self, account: str) -> str:
        for line in self.host_path("/etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if fields[0] == account:
                return fields[5]
        raise AssertionError(f"no account {account} in the chroot {self.root}")

    def run(self, *argv: str, user: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A command inside the chroot, as root or ``user``, with a small clean environment."""
        home = self._home(user) if user else "/root"
        spec = [f"--userspec={user}:{user}"] if user else []
        cmd = ["chroot", *spec, str(self.root), "/usr/bin/env", "-i", "-C", home, f"HOME={home}"]
        cmd += ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)

    def proxy(self, dest: Path, uid: int, gid: int, hours: int = 12) -> Path:
        """An X.509 proxy of the service's test user (whom its arc.conf maps) at ``dest``, owned by uid/gid.

        ``arcproxy`` refuses a key that is not the caller's own: it runs as the client account, which
        owns the key, writing into that account's home; the proxy is then moved to ``dest``."""
        home = self._home(self.client)
        made = f"{home}/.arc/condor-g-proxy.{os.getpid()}.pem"
        p = self.run(
            "arcproxy",
            "-C",
            f"{home}/.globus/usercert.pem",
            "-K",
            f"{home}/.globus/userkey.pem",
            "-T",
            self.cert_dir,
            "-P",
            made,
            "-c",
            f"validityPeriod={hours}h",
            user=self.client,
        )
        assert p.returncode == 0, f"arcproxy failed: {p.stdout}{p.stderr}"
        return _hand_over(self.host_path(made), dest, uid, gid)

    def token(self, dest: Path, uid: int, gid: int) -> Path:
        """A JWT of the service's test issuer (``arcctl test-jwt token``) at ``dest``, owned by uid/gid."""
        p = self.run("arcctl", "-c", self.jwtconf, "test-jwt", "token", "-n", self.token_subject)
        words = p.stdout.split()
        assert p.returncode == 0 and words and words[-1].count(".") == 2, f"no token: {p.stdout}{p.stderr}"
        with tempfile.NamedTemporaryFile("w", dir=dest.parent, delete=False) as f:
            f.write(words[-1] + "\n")
        return _hand_over(Path(f.name), dest, uid, gid)

    def user_dn(self) -> str:
        """The DN of the service's test user, whose proxy :meth:`proxy` makes (its setup.sh writes it down)."""
        return self.host_path(f"{self.state}/etc/user-dn").read_text().strip()

    def owner(self, arc_id: str) -> str | None:
        """Whom A-REX says a job belongs to (its job log's ``owner:``): a DN, or a token's subject."""
        try:
            log = self.host_path(f"{self.state}/log/arex-jobs.log").read_text(errors="replace")
        except OSError:
            return None
        for line in log.splitlines():
            if arc_id in line and 'owner: "' in line:
                return line.split('owner: "', 1)[1].split('"', 1)[0]
        return None

    def jim_records(self, arc_id: str) -> list[str]:
        """jim's records (db/<id>.xml under the mapped account's jim homes) of the ARC job ``arc_id``."""
        home = self.host_path(self._home(self.mapped))
        out = []
        for record in home.glob(".jim*/db/*.xml"):
            text = record.read_text(errors="replace")
            if arc_id in text:
                out.append(text)
        return out


def _hand_over(made: Path, dest: Path, uid: int, gid: int) -> Path:
    """``made`` (a credential) moved to ``dest``, owned by uid/gid, mode 0600."""
    os.chown(made, uid, gid)
    made.chmod(0o600)
    shutil.move(str(made), str(dest))
    return dest


def arc7_service() -> tuple[Arc7 | None, str]:
    """The running ARC 7 CE test service, or None and why not."""
    env = read_arc7_env()
    if not env.get("JIM_TEST_ARC7_ENDPOINT"):
        return None, f"the ARC 7 CE test service (tests/services/arc7/start.sh): no {ARC7_ENV}"
    arc = Arc7(
        endpoint=env["JIM_TEST_ARC7_ENDPOINT"],
        root=Path(env.get("JIM_TEST_ARC7_ROOT", str(HTC_ROOT))),
        state=env.get("JIM_TEST_ARC7_STATE", "/var/lib/jim-arc7"),
        mapped=env.get("JIM_TEST_ARC7_MAPPED", "jimtest-arc7user"),
        client=env.get("JIM_TEST_ARC7_CLIENT", "jimtest-arc7client"),
        jwtconf=env.get("JIM_TEST_ARC7_JWTCONF", "/var/lib/jim-arc7/etc/arcctl-jwt.conf"),
        token_subject=env.get("JIM_TEST_ARC7_TOKEN_SUBJECT", "jim arc7 token user"),
        mode=env.get("JIM_TEST_ARC7_MODE", ""),
    )
    try:
        same_root = os.path.samefile(arc.root, HTC_ROOT)
    except OSError:
        same_root = False
    if not same_root:
        return None, f"the ARC 7 CE test service in the HTCondor pool's chroot {HTC_ROOT} (it runs in {arc.root})"
    run = arc.host_path(f"{arc.state}/run")
    if not (_arched_in(arc.root, run / "arex.pid") and _arched_in(arc.root, run / "arex-ws.pid")):
        return None, "the ARC 7 CE test service (tests/services/arc7/start.sh): A-REX does not run"
    try:
        mode = (run / "mode").read_text().strip()
    except OSError:
        mode = ""
    if not mode.startswith("jim"):
        return None, f"the ARC 7 CE test service with lrms=jim (tests/services/arc7/start.sh jim-fork): mode {mode!r}"
    return arc, ""


def schedd_environment() -> dict[str, str] | None:
    """The environment the pool's running schedd was started with (None when none runs)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if Path(f"/proc/{entry}/comm").read_text().strip() != "condor_schedd":
                continue
            if not os.path.samefile(f"/proc/{entry}/root", HTC_ROOT):
                continue
            raw = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        return dict(v.split("=", 1) for v in raw.decode(errors="replace").split("\0") if "=" in v)
    return None


def schedd_trust_problem(arc: Arc7) -> str:
    """Why the pool's Condor-G would not trust A-REX's host certificate ('' when it would)."""
    env = schedd_environment()
    if env is None:
        return "the HTCondor test pool's schedd does not run (tests/services/htcondor/start.sh)"
    got = env.get("X509_CERT_DIR")
    if got != arc.cert_dir:
        return (
            f"the HTCondor test pool's schedd with X509_CERT_DIR={arc.cert_dir} (it has {got!r}): "
            "tests/services/htcondor/start.sh installs config.d/jim-arc.config and restarts the schedd"
        )
    return ""


class GridSubmitter:
    """The pool's test account with a work directory of one test under /tmp (bound into the chroot)."""

    def __init__(self) -> None:
        pw = pwd.getpwnam(HTC_USER)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.work = Path(tempfile.mkdtemp(prefix="jim-condor-arc-", dir="/tmp"))
        os.chown(self.work, self.uid, self.gid)
        self.work.chmod(0o700)

    def write(self, name: str, text: str, mode: int = 0o644) -> Path:
        path = self.work / name
        path.write_text(text)
        os.chown(path, self.uid, self.gid)
        path.chmod(mode)
        return path

    def submit(self, submit_file: Path) -> int:
        """``condor_submit`` inside the chroot as the account; the cluster id."""
        done = in_htcondor_root("condor_submit", "-terse", str(submit_file), user=HTC_USER, cwd="/")
        assert done.returncode == 0, f"condor_submit failed: {done.stdout}{done.stderr}"
        return int(done.stdout.split(".")[0])

    def ad(self, cluster: int) -> dict[str, Any]:
        """The job's ad, from the queue or else the history ({} while neither answers)."""
        return condor_job_ad(cluster)

    def wait(self, cluster: int, want: set[int], timeout: float = TIMEOUT) -> dict[str, Any]:
        """The job's ad once its JobStatus is one of ``want`` (or it is held, or removed: then failed)."""
        deadline = time.monotonic() + timeout
        ad: dict[str, Any] = {}
        while time.monotonic() < deadline:
            ad = self.ad(cluster)
            status = ad.get("JobStatus")
            if status in want:
                return ad
            if status in (HELD, REMOVED):
                raise AssertionError(f"Condor-G job {cluster} ended as {status}: {ad.get('HoldReason')}\n{ad}")
            time.sleep(2)
        raise AssertionError(f"Condor-G job {cluster} never reached JobStatus {want} in {timeout:g} s: {ad}")

    def cleanup(self) -> None:
        """Every job of the account under the work directory removed, the directory gone."""
        from support.condor_pool import remove_jobs_under  # (it imports jim: only when a test ran)

        remove_jobs_under(self.work)
        shutil.rmtree(self.work, ignore_errors=True)


def grid_submit_file(
    arc: Arc7,
    work: Path,
    *,
    executable: str,
    arguments: str,
    environment: str,
    credential: str,
    name: str = "job",
    extra: str = "",
) -> str:
    """The submit file of a Condor-G job to A-REX: output, error, log and jim's output tar back into ``work``.

    ``credential``: ``x509userproxy = FILE`` or ``scitokens_file = FILE``. ``request_memory`` is always
    given (without it arc_gahp's ADL asks for no memory and A-REX refuses the job)."""
    return (
        "universe = grid\n"
        f"grid_resource = arc {arc.rest}\n"
        f"executable = {executable}\n"
        f"arguments = {arguments}\n"
        f'environment = "{environment}"\n'
        f"{credential}\n"
        "request_memory = 256\n"
        f"initialdir = {work}\n"
        f"output = {name}.out\n"
        f"error = {name}.err\n"
        f"log = {name}.log\n"
        "transfer_output_files = jim-output.tar.gz\n"
        f"{extra}"
        "queue\n"
    )
