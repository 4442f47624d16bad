"""``jim arc-backend submit|scan|cancel|info``: what the ARC CE's ``lrms=jim`` scripts run.

A-REX 6 runs ``/usr/share/arc/{submit,scan,cancel}-jim-job`` (shims that exec
this command, see :mod:`jim.arc.install`) and its information provider loads
``JIMmod.pm``, which runs ``jim arc-backend info``:

* **submit** ``--config CFG GRAMI`` runs as the mapped user with A-REX's
  environment (``HOME=/root``, no ``USER``): the user's home comes from the
  password database, ``JIM_HOME`` from ``jim_home`` of ``[custom:jim]``; the
  grami becomes a jim description (:mod:`jim.arc.grami`) submitted through
  jim's normal path; ``joboption_jobid=<jim id>`` is appended to the grami.  A
  refused description prints jim's one-line reason on stdout (A-REX's failure
  reason) and exits 1.
* **cancel** ``--config CFG GRAMI`` (mapped user): ``jim cancel`` of the
  grami's ``joboption_jobid``.
* **scan** ``--config CFG CONTROLDIR...`` runs as root every ~10 s: the jobs in
  INLRMS or CANCELING without ``job.<id>.lrms_done``, grouped by owner (the
  owner of ``job.<id>.local``); ONE ``jim poll --json --job-id ...`` per owner,
  run as that owner; for each grid job that ended, ``exitcode=`` (and the wall
  time, start and end, node names where jim knows them) appended to the
  session-side diag *as the owner*, then ``job.<id>.lrms_done`` and ``gm-kick``.
  A failed or timed-out answer is no news: the next pass asks again.
* **info** ``--config CFG`` (root, from ``JIMmod.pm``): one JSON object with
  the cluster and queue figures (jim's adapter: free slots) and the state of
  every INLRMS job (Q, R, S, EXECUTED), from the same per-owner bulk poll.

Nothing a user wrote is trusted by root: ``job.<id>.local`` is read without
following a symbolic link and bounded, the session directory it names is only
touched as the user, the jim id only reaches that user's jim.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial

from jim.safeio import NotRegular, open_regular, read_at_most

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from jim.config import Config

#: The runtime configuration jim reads (A-REX's pre-processed arc.conf), at most.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: ``job.<id>.local`` and status files read by root, at most.
MAX_LOCAL_BYTES = 64 * 1024
#: ``jim poll --json`` answer read, at most.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: Job ids in one ``jim poll --json`` call (more are asked in further calls of the same pass).
IDS_PER_CALL = 5000
GM_KICK = "/usr/lib/arc/gm-kick"
DEFAULT_HOME_PATTERN = "~/.jim"
DEFAULT_TIMEOUT = 30.0

_ARC_ID = re.compile(r"[A-Za-z0-9_.-]{1,200}")
#: jim's GRAM state -> the info provider's job status.
ARC_STATUS = {
    "PENDING": "Q",
    "UNSUBMITTED": "Q",
    "ACTIVE": "R",
    "SUSPENDED": "S",
    "DONE": "EXECUTED",
    "FAILED": "EXECUTED",
}


class BackendError(Exception):
    """A one-line reason the backend step cannot go on."""


# ---------------------------------------------------------------------------
# the runtime configuration: [custom:jim]
# ---------------------------------------------------------------------------


def read_config(path: str) -> dict[str, dict[str, str]]:
    """Block name -> option -> value of an arc.conf-style file (the last value of an option wins)."""
    try:
        fd, _st = open_regular(path)
    except (OSError, NotRegular) as e:
        raise BackendError(f"cannot read the ARC configuration {path}: {e}") from None
    try:
        data = read_at_most(fd, MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise BackendError(f"the ARC configuration {path} is longer than {MAX_CONFIG_BYTES} bytes")
    blocks: dict[str, dict[str, str]] = {}
    current: dict[str, str] = blocks.setdefault("", {})
    for raw in data.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = blocks.setdefault(line[1:-1].strip(), {})
            continue
        key, sep, value = line.partition("=")
        if sep:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            current[key.strip()] = value
    return blocks


@dataclass
class Options:
    """``[custom:jim]`` of the runtime configuration."""

    jim_command: str
    timeout: float = DEFAULT_TIMEOUT
    home_pattern: str = DEFAULT_HOME_PATTERN
    jim_config: str = ""
    scan_passes: int = 1
    scan_interval: float = 2.0
    controldir: str = ""
    queues: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | None) -> Options:
        blocks = read_config(path) if path else {}
        custom = blocks.get("custom:jim", {})
        opts = cls(jim_command=custom.get("jim_command") or own_jim_command())
        opts.timeout = _number(custom, "jim_timeout", DEFAULT_TIMEOUT, float)
        opts.home_pattern = custom.get("jim_home") or DEFAULT_HOME_PATTERN
        opts.jim_config = custom.get("jim_config", "")
        opts.scan_passes = int(_number(custom, "scan_passes", 1, int))
        opts.scan_interval = _number(custom, "scan_interval", 2.0, float)
        opts.controldir = blocks.get("arex", {}).get("controldir", "")
        opts.queues = [b[len("queue:") :] for b in blocks if b.startswith("queue:")]
        if not os.path.isabs(opts.jim_command):
            raise BackendError(f"[custom:jim] jim_command must be an absolute path, not {opts.jim_command[:200]!r}")
        return opts


def _number(block: dict[str, str], key: str, default: float, kind: type) -> float:
    raw = block.get(key, "")
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise BackendError(f"[custom:jim] {key} must be a number, not {raw[:80]!r}") from None
    if value <= 0 or value > 1e6:
        raise BackendError(f"[custom:jim] {key} must be positive, not {raw[:80]!r}")
    return float(value)


def own_jim_command() -> str:
    """The jim console script of this installation (next to this Python), else the running one."""
    candidate = os.path.join(os.path.dirname(sys.executable), "jim")
    if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return candidate
    return os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else candidate


def expand_home(pattern: str, pw: pwd.struct_passwd) -> str:
    """The jim home of the account ``pw``: ``{user}``, ``{home}`` and a leading ``~`` expanded."""
    text = pattern.replace("{user}", pw.pw_name).replace("{home}", pw.pw_dir)
    if text == "~" or text.startswith("~/"):
        text = pw.pw_dir.rstrip("/") + text[1:]
    if not os.path.isabs(text):
        raise BackendError(f"[custom:jim] jim_home must give an absolute path, not {pattern[:200]!r}")
    return os.path.normpath(text)


def user_env(opts: Options, pw: pwd.struct_passwd) -> dict[str, str]:
    """The environment of a jim run for the account ``pw``."""
    env = {
        "HOME": pw.pw_dir,
        "USER": pw.pw_name,
        "LOGNAME": pw.pw_name,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "JIM_HOME": expand_home(opts.home_pattern, pw),
    }
    if opts.jim_config:
        env["JIM_CONFIG"] = opts.jim_config
    return env


# ---------------------------------------------------------------------------
# submit and cancel: as the mapped user, in this process
# ---------------------------------------------------------------------------


def _become_user(opts: Options) -> None:
    """HOME, USER, JIM_HOME (and JIM_CONFIG) of the calling account, from the password database."""
    try:
        pw = pwd.getpwuid(os.getuid())
    except KeyError:
        raise BackendError(f"uid {os.getuid()} has no account") from None
    os.environ.update(user_env(opts, pw))
    if not opts.jim_config:
        os.environ.pop("JIM_CONFIG", None)


def _read_grami(path: str) -> str:
    from jim.arc.grami import MAX_GRAMI_BYTES, GramiError  # (lazy: submit and cancel only)

    try:
        fd, _st = open_regular(path, follow=False)
    except (OSError, NotRegular) as e:
        raise GramiError(f"cannot read the grami file {path}: {e}") from None
    try:
        data = read_at_most(fd, MAX_GRAMI_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_GRAMI_BYTES:
        raise GramiError(f"the grami file is longer than {MAX_GRAMI_BYTES} bytes")
    return data.decode("utf-8", "surrogateescape")


def _jim_config() -> Config:
    """jim's configuration and home for this account, checked, with jim's log set up."""
    from jim.config import load  # (lazy: the backend steps that run jim in this process)
    from jim.errors import ConfigError  # (lazy: likewise)
    from jim.log import setup  # (lazy: likewise)
    from jim.ownership import home_problem  # (lazy: likewise)

    config = load()
    why = home_problem(config.home)
    if why:
        raise ConfigError(why)
    setup(config.home)
    return config


def submit(opts: Options, grami_path: str) -> str:
    """Submit the grami's job to jim; append ``joboption_jobid``; return the jim id."""
    from jim.arc.grami import to_description  # (lazy: submit only)
    from jim.handlers import discover  # (lazy: submit only)
    from jim.jobdesc import JIM_ATTRIBUTES  # (lazy: submit only)
    from jim.requirements import parse_resources  # (lazy: submit only)
    from jim.site import Site  # (lazy: submit only)
    from jim.submit import submit as jim_submit  # (lazy: submit only)

    _become_user(opts)
    config = _jim_config()
    text = _read_grami(grami_path)
    known = set(JIM_ATTRIBUTES)
    for entry in discover().values():
        if isinstance(entry, type):
            known |= set(getattr(entry, "attributes", ()) or ())
    queues = None
    if config.resources:
        tree = parse_resources(config.resources)
        queues = {q.name for q in tree} | {tree.label(q) for q in tree}
    else:
        queues = set()
    desc, _options = to_description(text, known=known, queues=queues)
    job_id = jim_submit(Site(config), desc)
    fd = os.open(grami_path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, f"joboption_jobid={job_id}\n".encode())
    finally:
        os.close(fd)
    return job_id


def cancel(opts: Options, grami_path: str) -> str:
    """``jim cancel`` of the grami's ``joboption_jobid``; the grid state's name."""
    from jim.arc.grami import parse  # (lazy: cancel only)
    from jim.cancel import cancel as jim_cancel  # (lazy: cancel only)
    from jim.errors import JobNotFound  # (lazy: cancel only)
    from jim.site import Site  # (lazy: cancel only)

    _become_user(opts)
    config = _jim_config()
    job_id = parse(_read_grami(grami_path)).get("joboption_jobid", "")
    if not job_id:
        raise JobNotFound("the grami file names no jim job (joboption_jobid): it was never submitted to jim")
    return jim_cancel(Site(config), job_id).name


# ---------------------------------------------------------------------------
# scan and info: as root, one jim call per owner
# ---------------------------------------------------------------------------


@dataclass
class ArcJob:
    """One ARC job in the LRMS, as the control directory shows it."""

    arc_id: str
    controldir: str
    state: str
    local_path: str
    uid: int
    gid: int
    localid: str
    sessiondir: str


def _read_small(path: str) -> tuple[str, os.stat_result] | None:
    """The text of a regular file (not through a symbolic link), bounded; None if absent or not regular."""
    try:
        fd, st = open_regular(path, follow=False)
    except (OSError, NotRegular):
        return None
    try:
        return read_at_most(fd, MAX_LOCAL_BYTES).decode("utf-8", "replace"), st
    finally:
        os.close(fd)


def _local_value(text: str, key: str) -> str:
    for line in text.splitlines():
        if line.startswith(key + "="):
            return line[len(key) + 1 :].strip()
    return ""


def jobs_in_lrms(controldir: str, states: tuple[str, ...] = ("INLRMS", "CANCELING")) -> list[ArcJob]:
    """The ARC jobs of ``controldir`` in ``states`` that jim has (a localid) and that have no ``lrms_done``."""
    found: list[ArcJob] = []
    processing = os.path.join(controldir, "processing")
    try:
        names = sorted(os.listdir(processing))
    except OSError:
        return found
    for name in names:
        if not (name.startswith("job.") and name.endswith(".status")):
            continue
        arc_id = name[len("job.") : -len(".status")]
        if not _ARC_ID.fullmatch(arc_id):
            continue
        status = _read_small(os.path.join(processing, name))
        if status is None or status[0].strip() not in states:
            continue
        if os.path.lexists(os.path.join(controldir, f"job.{arc_id}.lrms_done")):
            continue
        local_path = os.path.join(controldir, f"job.{arc_id}.local")
        local = _read_small(local_path)
        if local is None:
            continue
        text, st = local
        localid = _local_value(text, "localid")
        if not localid:  # (not submitted to jim yet)
            continue
        if os.geteuid() != 0 and st.st_uid != os.geteuid():  # (only root acts as another account)
            continue
        found.append(
            ArcJob(
                arc_id, controldir, status[0].strip(), local_path, st.st_uid, st.st_gid, localid,
                _local_value(text, "sessiondir"),
            )
        )  # fmt: skip
    return found


def by_owner(jobs: list[ArcJob]) -> dict[int, list[ArcJob]]:
    owners: dict[int, list[ArcJob]] = {}
    for job in jobs:
        owners.setdefault(job.uid, []).append(job)
    return owners


def _credentials(uid: int) -> tuple[pwd.struct_passwd, list[int]] | None:
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return None
    return pw, os.getgrouplist(pw.pw_name, pw.pw_gid)


def bulk_poll(opts: Options, uid: int, job_ids: list[str]) -> dict[str, dict[str, object]]:
    """``jim poll --json`` of ``job_ids`` as the account ``uid`` (one call per :data:`IDS_PER_CALL`);
    an id without an answer (jim failed, timed out, said nothing usable) is left out: no news."""
    creds = _credentials(uid)
    if creds is None:
        _log(f"uid {uid} has no account: its jobs are not polled")
        return {}
    pw, groups = creds
    answers: dict[str, dict[str, object]] = {}
    for start in range(0, len(job_ids), IDS_PER_CALL):
        argv = [opts.jim_command, "poll", "--json"]
        for job_id in job_ids[start : start + IDS_PER_CALL]:
            argv += ["--job-id", job_id]
        switch: dict[str, object] = {}
        if os.geteuid() == 0:
            switch = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": groups}
        try:
            proc = subprocess.run(  # type: ignore[call-overload]
                argv,
                **switch,
                env=user_env(opts, pw),
                cwd="/",
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=opts.timeout,
            )
        except (OSError, subprocess.SubprocessError) as e:
            _log(f"jim poll as {pw.pw_name}: {e} (no news)")
            continue
        try:
            data = json.loads(proc.stdout[:MAX_ANSWER_BYTES])
        except ValueError:
            data = None
        if not isinstance(data, dict) or "ERROR" in data:
            what = data.get("MESSAGE") if isinstance(data, dict) else proc.stderr[-300:].decode("utf-8", "replace")
            _log(f"jim poll as {pw.pw_name} (exit {proc.returncode}): {' '.join(str(what).split())} (no news)")
            continue
        for key, value in data.items():
            if isinstance(value, dict):
                answers[key] = value
    return answers


def lrms_done_line(localid: str, answer: dict[str, object]) -> tuple[int, str] | None:
    """(exit code, the ``lrms_done`` line) of a grid job that ended; None while it runs or when unclear."""
    state = answer.get("JOB_STATE")
    code = answer.get("EXIT_CODE")
    message = " ".join(str(answer.get("MESSAGE") or "").split())[:500]
    if state == "DONE":
        n = code if isinstance(code, int) else 0
        return n, f"{n}" if n == 0 else f"{n} jim: the job ended with exit code {n}"
    if state == "FAILED":
        n = code if isinstance(code, int) else -1
        return n, f"{n} {message or 'failed in jim'}"
    if answer.get("ERROR") == 156:
        return -1, f"-1 job {localid[:100]} unknown to jim"
    return None


def _as_user(uid: int, work: Callable[[], int]) -> int:
    """Run ``work()`` in a fork switched to the account ``uid`` (groups, gid, uid); its exit status."""
    creds = _credentials(uid)
    if creds is None:
        return 1
    pw, groups = creds
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        status = 1
        try:
            if os.geteuid() == 0:
                os.setgroups(groups)
                os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
                os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
            os.environ.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name)
            status = int(work())
        except BaseException as e:
            _log(f"as {pw.pw_name}: {type(e).__name__}: {e}")
        finally:
            os._exit(status)
    _pid, wstatus = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wstatus)


def _append_diags(writes: list[tuple[str, str]]) -> int:
    """Append each text to its diag file (run as the owner: never through a symbolic link, a regular file)."""
    failed = 0
    for path, text in writes:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        except OSError as e:
            _log(f"cannot write {path}: {e.strerror}")
            failed += 1
            continue
        try:
            import stat  # (lazy: in the owner's fork only)

            if not stat.S_ISREG(os.fstat(fd).st_mode):
                failed += 1
                continue
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    return 1 if failed else 0


def diag_text(exit_code: int, accounting: list[tuple[str, str]] | None = None) -> str:
    lines = [f"exitcode={exit_code}"]
    for key, value in accounting or []:
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def accounting(rows: list[dict[str, object]]) -> list[tuple[str, str]]:
    """The diag's accounting keys from ``jim status --json``'s local-job rows: ``WallTime`` (the local
    jobs' wall times added up, each from its start, or its submission when jim never saw it run),
    ``Processors`` (local jobs that ran), ``LRMSStartTime`` (the first start), ``LRMSEndTime`` (the last
    end), one ``nodename`` per node."""
    from jim.timestamps import parse_iso  # (lazy: in the owner's fork only)

    wall = 0.0
    starts: list[float] = []
    ends: list[float] = []
    nodes: list[str] = []
    for row in rows:
        began = row.get("started") or row.get("submitted")  # (a short job may end before jim sees it run)
        start = parse_iso(str(began)) if began else None
        end = parse_iso(str(row.get("ended") or "")) if row.get("ended") else None
        if start is None:
            continue
        starts.append(start)
        if end is not None and end >= start:
            ends.append(end)
            wall += end - start
        node = str(row.get("node") or row.get("host") or "")
        if node and node not in nodes and node.isprintable() and len(node) < 256 and len(nodes) < 1000:
            nodes.append(node)
    if not starts:
        return []
    stamp = "%Y%m%d%H%M%SZ"
    out = [("WallTime", f"{round(wall)}s"), ("Processors", str(len(starts)))]
    out.append(("LRMSStartTime", time.strftime(stamp, time.gmtime(min(starts)))))
    if ends:
        out.append(("LRMSEndTime", time.strftime(stamp, time.gmtime(max(ends)))))
    out += [("nodename", n) for n in nodes]
    return out


class _TimedOut(BaseException):
    """The owner's fork took longer than the timeout to read jim's records (never caught per job)."""


def _owner_diags(opts: Options, ended: list[tuple[ArcJob, int]]) -> int:
    """In the owner's fork: each ended job's accounting from its jim record (best effort, bounded by
    the timeout), then its diag appended."""
    import signal  # (lazy: in the owner's fork only)

    rows: dict[str, list[dict[str, object]]] = {}

    def timed_out(_signum: int, _frame: object) -> None:
        raise _TimedOut()

    try:
        signal.signal(signal.SIGALRM, timed_out)
        signal.alarm(max(1, int(opts.timeout)))
        pw = pwd.getpwuid(os.getuid())
        os.environ.update(user_env(opts, pw))
        from jim.config import load  # (lazy: in the owner's fork only)
        from jim.db import Database  # (lazy: likewise)
        from jim.paths import Home  # (lazy: likewise)
        from jim.status import status_json  # (lazy: likewise)

        config = load()
        home = Home(config.home)
        db = Database(home, config.deadlines.lock)
        for job, _code in ended:
            try:
                rows[job.localid] = list(status_json(db.read(home.check_id(job.localid)))["localJobs"])
            except Exception as e:
                _log(f"job {job.arc_id}: no accounting from jim's record ({type(e).__name__}: {e})")
    except (Exception, _TimedOut) as e:
        _log(f"no accounting from jim's records: {type(e).__name__}: {e}")
    finally:
        signal.alarm(0)
    writes = []
    for job, code in ended:
        try:
            extra = accounting(rows.get(job.localid, []))
        except Exception:
            extra = []
        writes.append((job.sessiondir.rstrip("/") + ".diag", diag_text(code, extra)))
    return _append_diags(writes)


def finish(job: ArcJob, line: str) -> None:
    """``job.<id>.lrms_done`` (as root, in the root-owned control directory), then ``gm-kick``."""
    path = os.path.join(job.controldir, f"job.{job.arc_id}.lrms_done")
    tmp = os.path.join(job.controldir, f".job.{job.arc_id}.lrms_done.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if os.access(GM_KICK, os.X_OK):
        try:
            subprocess.run(
                [GM_KICK, "-j", job.arc_id, job.local_path],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError) as e:
            _log(f"gm-kick of {job.arc_id}: {e}")


def scan_pass(opts: Options, controldirs: list[str]) -> dict[str, int]:
    """One pass over the control directories; counts: checked, ended, jim calls."""
    jobs = [j for d in controldirs for j in jobs_in_lrms(d)]
    counts = {"checked": len(jobs), "ended": 0, "calls": 0}
    for uid, owned in sorted(by_owner(jobs).items()):
        ids = list(dict.fromkeys(j.localid for j in owned))
        counts["calls"] += -(-len(ids) // IDS_PER_CALL)
        answers = bulk_poll(opts, uid, ids)
        ended: list[tuple[ArcJob, int, str]] = []
        for job in owned:
            answer = answers.get(job.localid)
            result = lrms_done_line(job.localid, answer) if answer is not None else None
            if result is not None:
                ended.append((job, result[0], result[1]))
        if not ended:
            continue
        with_diag = [(j, code) for j, code, _l in ended if j.sessiondir]
        if with_diag and _as_user(uid, partial(_owner_diags, opts, with_diag)) != 0:
            _log(f"uid {uid}: some session diag files could not be written")
        for job, _code, line in ended:
            try:
                finish(job, line)
                counts["ended"] += 1
            except OSError as e:
                _log(f"job {job.arc_id}: cannot write lrms_done: {e}")
    return counts


def scan(opts: Options, controldirs: list[str]) -> int:
    for n in range(max(1, opts.scan_passes)):
        if n:
            time.sleep(opts.scan_interval)
        counts = scan_pass(opts, controldirs)
        _log(f"scan pass: {counts['checked']} job(s) checked, {counts['ended']} ended, {counts['calls']} jim call(s)")
    return 0


def info(opts: Options, controldir: str | None = None) -> dict[str, object]:
    """The figures ``JIMmod.pm`` publishes: cluster, queues, and every INLRMS job's status."""
    cdir = controldir or opts.controldir
    jobs = jobs_in_lrms(cdir, ("INLRMS", "CANCELING")) if cdir else []
    statuses: dict[str, str] = {}
    for uid, owned in sorted(by_owner(jobs).items()):
        answers = bulk_poll(opts, uid, list(dict.fromkeys(j.localid for j in owned)))
        for job in owned:
            answer = answers.get(job.localid) or {}
            statuses[job.localid] = ARC_STATUS.get(str(answer.get("JOB_STATE", "")), "O")
    running = sum(1 for s in statuses.values() if s == "R")
    queued = sum(1 for s in statuses.values() if s == "Q")
    site = _site_figures(opts)
    return {
        "lrms_type": "jim",
        "lrms_version": site.pop("version"),
        "running": running,
        "queued": queued,
        "jobs": statuses,
        **site,
    }


def _site_figures(opts: Options) -> dict[str, object]:
    """jim's version, job types, queues and the adapter's free slots (None: unknown)."""
    import tempfile  # (lazy: info only)

    from jim import __version__  # (lazy: info only)
    from jim.adapters import get_adapter  # (lazy: info only)
    from jim.config import load  # (lazy: info only)
    from jim.handlers import discover  # (lazy: info only)
    from jim.paths import Home  # (lazy: info only)
    from jim.requirements import parse_resources  # (lazy: info only)

    figures: dict[str, object] = {"version": __version__, "free_slots": None, "queues": [], "adapter": None}
    figures["jobtypes"] = sorted(n for n, e in discover().items() if isinstance(e, type))
    env = dict(os.environ)
    if opts.jim_config:
        env["JIM_CONFIG"] = opts.jim_config
    try:
        config = load(env)
        figures["adapter"] = config.batch.adapter
        if config.resources:
            tree = parse_resources(config.resources)
            figures["queues"] = [tree.label(q) for q in tree]
        with tempfile.TemporaryDirectory(prefix="jim-arc-info.") as scratch:
            figures["free_slots"] = get_adapter(config, Home(scratch)).free_slots()
    except Exception as e:  # (an unreachable batch system: the figures say "unknown")
        _log(f"site figures: {type(e).__name__}: {e}")
    figures["totalcpus"] = os.cpu_count() or 1
    return figures


def _log(message: str) -> None:
    """One line on stderr (A-REX appends the scan step's stderr to its helper log)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        print(f"[{stamp}] jim arc-backend: {message}", file=sys.stderr, flush=True)
    except OSError:
        pass
