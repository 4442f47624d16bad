"""APEL "blah" records of jim's local jobs: one line per counted attempt, in daily files.

APEL's client joins two kinds of record on the batch system's job id: the batch system's own
(CPU, wall time, cores: the site's batch log, read by APEL's parser of that batch system) and the
CE's "blah" records (who ran it: DN, FQAN, CE), whose ``lrmsID`` must equal the ``JobName`` the
batch parser read.  jim writes the blah records, in the form BLAHP writes them
(``BLAHPD_ACCOUNTING_INFO_FILE``, ``blahp.log-YYYYMMDD``)::

    "timestamp=2026-11-29 06:19:56" "userDN=/DC=org/CN=Jane" "userFQAN=/atlas/Role=production"
    "userFQAN=/atlas" "ceID=ce.example.org:2119/jim-slurm-long" "jobID=https://..." "lrmsID=4242_7"
    "localUser=1001"

(one line, one space between fields).  APEL's blah parser splits a line at every ``"``, drops the
parts of at most one character (the spaces between fields), splits each part at its first ``=``
and keeps the first value of each key (the first ``userFQAN`` is the primary one).  So a value
never holds ``"`` (nor a control character): :func:`field` replaces ``"`` by ``'`` and removes
control characters, and fields are always in this order, each key once but ``userFQAN``.

* ``timestamp``: the attempt's batch submission, UTC (APEL reads a time without a zone as UTC);
  APEL takes the record as valid from a day before it to 28 days after it, and joins it with the
  batch record that ended then.
* ``lrmsID``: the batch id as APEL's parser of the batch system prints it (:func:`lrms_id`): Slurm
  ``sacct``'s ``JobID`` (``ARRAYID_TASK`` for jim's array tasks, which is jim's batch id), Grid
  Engine's ``job_number`` (the array job's, without the task), PBS's and HTCondor's id as jim has it.
* ``jobID``: the grid job's id as its front end knows it (:func:`frontend_job_id`).
* ``localUser``: the uid of the home's owner (as BLAHP writes it).

Only counted attempts (:mod:`jim.accounting`) of grid jobs that have ended get a line (then no
attempt can follow: ``jim resubmit`` is refused once a grid job has ended); an attempt that never
reached the batch system (no batch id) gets none.  :func:`publish` writes each ended grid job's
lines once: the grid jobs published are kept in a ledger beside the logs, under a lock.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import glob
import json
import logging
import os
import pwd
import re
import shlex
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from jim.accounting import attempts, identity_of
from jim.config import Config
from jim.db import Database
from jim.errors import JimError
from jim.ownership import act_as_owner, home_problem
from jim.paths import Home
from jim.record import GridJob
from jim.states import GramState

log = logging.getLogger("jim.apel")

#: The longest value written (a DN or an FQAN is far shorter).
MAX_VALUE = 1024
#: What a batch id must look like to be an ``lrmsID``.
_LRMS_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\[\]@:+#-]{0,254}", re.ASCII)
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_GRIDID = re.compile(r"^joboption_gridid=(.{1,512})$", re.MULTILINE)
_TERMINAL = frozenset(s.name for s in GramState if s.terminal)


@dataclass(frozen=True)
class BlahSettings:
    """``[accounting]``: where the blah records go and the CE they name."""

    directory: Path
    ce_id: str
    """The CE as APEL's ``SpecRecords`` name it; ``{queue}`` is the local job's queue."""
    prefix: str = "blahp.log"


@dataclass(frozen=True)
class BlahRecord:
    """One line (see the module docstring)."""

    timestamp: float
    user_dn: str
    fqans: tuple[str, ...]
    ce_id: str
    job_id: str
    lrms_id: str
    local_user: str

    def line(self) -> str:
        stamp = _dt.datetime.fromtimestamp(self.timestamp, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        parts = [field("timestamp", stamp), field("userDN", self.user_dn)]
        parts += [field("userFQAN", f) for f in self.fqans] or [field("userFQAN", "")]
        parts += [
            field("ceID", self.ce_id),
            field("jobID", self.job_id),
            field("lrmsID", self.lrms_id),
            field("localUser", self.local_user),
        ]
        return " ".join(parts) + "\n"


def field(key: str, value: str) -> str:
    """``"key=value"``, the value without ``"`` (as ``'``) or control characters."""
    return '"' + key + "=" + _CONTROL.sub("", value.replace('"', "'"))[:MAX_VALUE] + '"'


def lrms_id(adapter: str, batch_id: str | None) -> str | None:
    """The ``lrmsID`` of a batch id (see the module docstring); None for one that cannot be one."""
    if not batch_id or not _LRMS_ID.fullmatch(batch_id):
        return None
    if adapter == "sge":  # (jim's "JOB.TASK"; APEL's SGE parser reads the job_number alone)
        return batch_id.partition(".")[0]
    return batch_id


def frontend_job_id(job: GridJob) -> str:
    """The grid job's id as its front end knows it: ARC's job id (the grami's ``joboption_gridid``),
    BLAH's (``jim/<id>``), GRAM's unique id of the job, else jim's own id."""
    fmt = job.source_format
    if fmt == "grami":
        source = job.root.findtext("description/source") or ""
        found = _GRIDID.search(source)
        if found:
            try:
                words = shlex.split(found.group(1))
            except ValueError:
                words = []
            if len(words) == 1 and _LRMS_ID.fullmatch(words[0]):
                return words[0]
    if fmt == "blah":
        return f"jim/{job.id}"
    return job.meta("gramUniqid") or job.id


def blah_records(job: GridJob, ce_id: str, local_user: str) -> list[BlahRecord]:
    """The lines of an ended grid job: one per counted attempt that reached the batch system; none
    while the grid job has not ended, or when nobody said who submitted it."""
    if not job.state.terminal:
        return []
    dn, fqans = identity_of(job)
    if not dn and not fqans:
        log.warning("grid job %s: no grid identity recorded, no APEL record", job.id)
        return []
    adapter = job.get("adapter") or ""
    job_id = frontend_job_id(job)
    out = []
    for a in attempts(job):
        lrms = lrms_id(adapter, a.batch_id)
        when = a.submitted or a.ended
        if not a.counted or lrms is None or when is None:
            continue
        ce = ce_id.replace("{queue}", a.queue or "")
        out.append(BlahRecord(when, dn or "", fqans, ce, job_id, lrms, local_user))
    return out


# -- publishing -----------------------------------------------------------------------------


@dataclass
class Published:
    """What one :func:`publish` did."""

    grid_jobs: int = 0
    lines: int = 0
    skipped_homes: int = 0
    files: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "gridJobs": self.grid_jobs,
            "lines": self.lines,
            "skippedHomes": self.skipped_homes,
            "files": list(self.files),
        }

    def render(self) -> str:
        skipped = f"; {self.skipped_homes} home(s) skipped (see jim's log)" if self.skipped_homes else ""
        files = ", ".join(self.files)
        return f"{self.lines} APEL blah record(s) of {self.grid_jobs} ended grid job(s) to {files}{skipped}"


def publish_configured(config: Config, own: Home, patterns: list[str]) -> Published:
    """``jim accounting --publish``: :func:`publish` under ``[accounting]``, of the homes ``patterns``
    name (globs; as root only) or of the command's own home."""
    acct = config.accounting
    if not acct.blah_log_dir:
        raise JimError("no [accounting] blah_log_dir configured: no APEL records to write")
    if patterns and os.geteuid() != 0:
        raise JimError("--home is root's (a user publishes its own home)")
    homes = [Path(p) for pattern in patterns for p in sorted(glob.glob(pattern))] if patterns else [own.root]
    settings = BlahSettings(Path(acct.blah_log_dir), acct.ce_id, acct.blah_log_prefix)
    return publish(settings, homes)


def publish(settings: BlahSettings, homes: Iterable[Path], *, now: float | None = None) -> Published:
    """Append the lines of every ended grid job of ``homes`` not published yet to today's file.

    As root (the site's cron): today's file is ``<prefix>-YYYYMMDD``, each home is read as it is
    (its owner named by the directory, not by the records), and its ledger is
    ``.jim-published-<uid>`` in the log directory.  As a user: the user's own home only, into
    ``<prefix>-YYYYMMDD-<user>``.  A home another account may write to is skipped."""
    directory = settings.directory
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise JimError(f"[accounting] blah_log_dir {directory} is not a directory")
    euid = os.geteuid()
    day = time.strftime("%Y%m%d", time.gmtime(now))
    name = f"{settings.prefix}-{day}" if euid == 0 else f"{settings.prefix}-{day}-{_account(euid)}"
    out = Published(files=(str(directory / name),))
    for home in homes:
        try:
            uid = os.stat(home).st_uid
        except OSError:
            out.skipped_homes += 1
            continue
        why = home_problem(home, uid) if (euid == 0 or uid == euid) else "not the caller's"
        if why is not None:
            log.warning("APEL records: home %s skipped: %s", home, why)
            out.skipped_homes += 1
            continue
        _publish_home(settings, Home(home), uid, directory / name, out)
    return out


def _publish_home(settings: BlahSettings, home: Home, uid: int, target: Path, out: Published) -> None:
    ledger_fd = _open_append(settings.directory / f".jim-published-{uid}", uid, read=True)
    try:
        fcntl.flock(ledger_fd, fcntl.LOCK_EX)
        done = set(_read_all(ledger_fd).decode("ascii", "replace").split())
        for job_id, lines in _unpublished(home, uid, settings.ce_id, done):
            if lines:
                fd = _open_append(target, os.geteuid())
                try:  # (one write of whole lines, O_APPEND: never interleaved with another's)
                    os.write(fd, lines.encode("utf-8", "replace"))
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.write(ledger_fd, f"{job_id}\n".encode("ascii", "replace"))
            out.grid_jobs += 1
            out.lines += lines.count("\n")
    finally:
        os.close(ledger_fd)


#: Bytes of lines one owner's records may give root's pass, at most.
MAX_HOME_ANSWER = 256 * 1024 * 1024


def _unpublished(home: Home, uid: int, ce_id: str, done: set[str]) -> list[tuple[str, str]]:
    """(grid job id, its lines) of the ended grid jobs of ``home`` not in ``done``.  As root, the
    records are read in a fork switched to the home's owner: nothing in a home (a link planted
    among the records) is ever opened with root's rights; the lines come back through a pipe."""
    if os.geteuid() != 0 or uid == 0:
        return _collect(home, uid, ce_id, done)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        status = 1
        try:
            os.close(r)
            if act_as_owner(home.root) is None:
                data = json.dumps(_collect(home, uid, ce_id, done)).encode()
                view = memoryview(data)
                while view:
                    view = view[os.write(w, view) :]
                status = 0
        except BaseException as e:  # (the child never returns into the caller's code)
            log.warning("APEL records: %s: %s: %s", home.root, type(e).__name__, e)
        finally:
            os._exit(status)
    os.close(w)
    try:
        data = _read_all(r, MAX_HOME_ANSWER + 1)
    finally:
        os.close(r)
        _pid, wstatus = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(wstatus) != 0 or len(data) > MAX_HOME_ANSWER:
        log.warning("APEL records: home %s skipped: reading it as its owner failed", home.root)
        return []
    try:
        pairs = json.loads(data)
    except ValueError:
        return []
    return [(str(p[0]), str(p[1])) for p in pairs if isinstance(p, list) and len(p) == 2]


def _collect(home: Home, uid: int, ce_id: str, done: set[str]) -> list[tuple[str, str]]:
    if not home.db.is_dir():
        return []
    db = Database(home)
    found = []
    for entry in db.list():
        job_id = entry.get("id", "")
        if entry.get("state") not in _TERMINAL or job_id in done:
            continue
        try:
            job = db.read(home.check_id(job_id))
        except JimError as e:
            log.warning("APEL records: %s of %s skipped: %s", job_id, home.root, e)
            continue
        found.append((job.id, "".join(r.line() for r in blah_records(job, ce_id, str(uid)))))
    return found


def _open_append(path: Path, uid: int, *, read: bool = False) -> int:
    """A file opened to append (made when missing, never through a link); it must be a regular file
    of the caller, or (as root) of ``uid``."""
    flags = (os.O_RDWR if read else os.O_WRONLY) | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid not in (os.geteuid(), uid) or st.st_mode & 0o022:
        os.close(fd)
        raise JimError(f"{path}: not a regular file of this account, or writable by others: not used")
    return fd


def _read_all(fd: int, limit: int | None = None) -> bytes:
    """The rest of ``fd`` from its start (a pipe: from where it is), at most ``limit`` bytes."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:  # (a pipe)
        pass
    parts, size = [], 0
    while (limit is None or size < limit) and (chunk := os.read(fd, 1 << 20)):
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


def _account(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
