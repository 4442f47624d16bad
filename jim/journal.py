"""The intent journal of a grid job: ``jobs/<id>/submit.intent``, which local jobs are being submitted.

Before the worker submits a chunk of local jobs it appends one line,
``<epoch> <index ranges>`` (e.g. ``1763800000.123 0-99``), or ``<epoch>
<index ranges> <attempt>`` for a later attempt of those local jobs (e.g.
``1763800100.456 3,7 2``), fsync'd, under the record's lock (:func:`append`).
After the batch system answers, the batch ids go into the record.  A local job named in the journal but still without a
batch id in the record has an unknown outcome (the worker may have died
between the two): :func:`in_flight` names those, and they are looked up by tag
(:meth:`jim.adapters.base.Adapter.reconcile`) before anything is submitted
again.  The worker and ``jim cancel`` are its only users; the worker its only
writer.

A line torn by a crash does not parse and is ignored: its local jobs were
never submitted, since the fsync comes before the batch command.

The pending mark: ``locks/<id>.submit``
---------------------------------------
``jim submit`` can be killed at any moment (the gatekeeper kills its process
group when it runs out of time).  A grid job whose ``JOB_ID`` line was never
written must not run: nobody would ever collect it.  So ``jim submit`` makes
the pending mark of a grid job before anything else of it (:class:`Pending`:
the file appears already locked, by a rename) and holds its lock while it
writes the plan and the record and answers ``JOB_ID``; only once that answer
is written (and flushed) does it remove the mark (:meth:`Pending.confirm`).
A grid job is **confirmed** when it has no pending mark and a record
(checked in that order: see :func:`await_confirmation`); no worker submits a
local job of a grid job before that.  A pending mark whose lock nobody holds
was left by a killed submit: :func:`recover` (every worker runs it when it
ends) and :func:`await_confirmation` (a worker started for such a grid job)
remove what that submit left: the plan, the record, the work area, the index
line, and write a poll summary in its place that answers ``JOB_STATE=FAILED``
with the reason, for the rare caller who did read the ``JOB_ID``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

from jim import summary
from jim.db import Database
from jim.jobid import valid_job_id
from jim.locks import locked
from jim.ranges import array_spec, parse_array_spec
from jim.record import GridJob
from jim.safeio import atomic_write
from jim.states import LocalState

INTENT_FILE = "submit.intent"


class Intents(dict[int, float]):
    """local job index -> when its (last) submission was journaled; ``attempts``: which attempt
    of it that was (1 when the line names none)."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts: dict[int, int] = {}

    def note(self, indices: list[int], at: float, attempt: int = 1) -> None:
        for k in indices:
            self[k] = at
            self.attempts[k] = attempt


def append(db: Database, job_id: str, indices: list[int], at: float, attempt: int = 1) -> bool:
    """Journal that these local jobs (attempt ``attempt`` of each) are about to be submitted; False
    when a cancel came first.

    Under the record's lock, so that a cancel either comes first (and is seen
    here, in the poll summary) or sees this journal line.
    """
    home = db.home
    with locked(home.db_lock(job_id), db.lock_timeout):
        if summary.cancel_requested(summary.read(home.summary(job_id)) or {}):
            return False
        fd = os.open(home.job_dir(job_id) / INTENT_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            tail = f" {int(attempt)}" if attempt > 1 else ""
            os.write(fd, f"{at:.3f} {array_spec(indices)}{tail}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    return True


def read(job_dir: Path) -> Intents:
    """local job index -> when its (last) submission was journaled, and which attempt it was."""
    out = Intents()
    try:
        with open(job_dir / INTENT_FILE) as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        at, _, rest = line.partition(" ")
        spec, _, attempt = rest.partition(" ")
        try:
            t = float(at)
        except ValueError:
            continue
        n = int(attempt) if attempt.isascii() and attempt.isdigit() else 1 if not attempt else 0
        if n >= 1:
            out.note(parse_array_spec(spec) or [], t, n)
    return out


def in_flight(job: GridJob, intents: Intents) -> list[str]:
    """Tags of the local jobs whose submission has an unknown outcome: journaled (or, in records
    of older versions, SUBMITTING) and without a batch id.  The journal line must be of the current
    attempt: an earlier attempt's line says nothing of this one (its tag is another)."""
    return [
        lj.tag
        for lj in job.local_jobs()
        if not lj.batch_id
        and (
            lj.state is LocalState.SUBMITTING
            or (lj.state is LocalState.PLANNED and intents.attempts.get(lj.index) == lj.attempt)
        )
    ]


# ---------------------------------------------------------------------------
# the pending mark of a grid job being submitted
# ---------------------------------------------------------------------------

PENDING_SUFFIX = ".submit"
#: What ``jim poll`` answers for a grid job whose submit was killed before it confirmed.
ABANDONED_MESSAGE = (
    "grid job abandoned: jim submit was stopped before it confirmed the job id; no local job of it was run"
)
#: A temporary pending mark (before its rename) this old was left by a killed submit.
_TMP_GRACE = 60.0


def pending_path(db: Database, job_id: str) -> Path:
    return db.home.locks / f"{db.home.check_id(job_id)}{PENDING_SUFFIX}"


class Pending:
    """The pending mark of one grid job, held by the ``jim submit`` that records it."""

    def __init__(self, db: Database, job_id: str):
        self.db, self.job_id = db, job_id
        self.path = pending_path(db, job_id)
        self.fd: int | None = None

    def take(self) -> Pending:
        """Make the mark, already locked: created under a temporary name, locked, then renamed."""
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(tmp, self.path)
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
        self.fd = fd
        return self

    def confirm(self) -> None:
        """The ``JOB_ID`` is written: remove the mark (the grid job may now run)."""
        if self.fd is not None:
            _unlink(self.path)
            os.close(self.fd)
            self.fd = None

    def abandon(self, *, tombstone: bool = False) -> None:
        """Remove everything of the grid job (this submit failed), then the mark."""
        if self.fd is not None:
            _remove(self.db, self.job_id, tombstone=tombstone)
            _unlink(self.path)
            os.close(self.fd)
            self.fd = None


def confirmed(db: Database, job_id: str) -> bool:
    """True when the grid job may run: no pending mark, then (in this order) a record.

    A mark is removed only after the record is written, or after the record
    was removed (an abandoned submit): the record looked at after the mark
    tells the two apart.
    """
    return not pending_path(db, job_id).exists() and db.exists(job_id)


def await_confirmation(db: Database, job_id: str, timeout: float) -> bool:
    """Wait (at most ``timeout`` s) until the grid job is confirmed; False when it is not: its
    submit was killed (what it left is removed here), or still runs after ``timeout``."""
    deadline = time.monotonic() + timeout
    mark = pending_path(db, job_id)
    while True:
        if not mark.exists():
            return db.exists(job_id)  # (see confirmed: no record now means abandoned and removed)
        if recover_one(db, job_id) or time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def recover_one(db: Database, job_id: str) -> bool:
    """If the submit of ``job_id`` died before it confirmed, remove what it left; True when it did."""
    path = pending_path(db, job_id)
    fd = _lock_if_free(path)
    if fd is None:
        return False
    try:
        _remove(db, job_id, tombstone=True)
        _unlink(path)
    finally:
        os.close(fd)
    return True


def recover(db: Database) -> list[str]:
    """Remove what killed submits left (see the module docstring); the grid job ids removed."""
    removed: list[str] = []
    try:
        names = os.listdir(db.home.locks)
    except FileNotFoundError:
        return removed
    now = time.time()
    for name in names:
        if name.endswith(PENDING_SUFFIX) and valid_job_id(name[: -len(PENDING_SUFFIX)]):
            job_id = name[: -len(PENDING_SUFFIX)]
            if recover_one(db, job_id):
                removed.append(job_id)
        elif name.startswith(".") and name.endswith(PENDING_SUFFIX + ".tmp"):
            path = db.home.locks / name  # killed before its rename: nothing else of it was written
            try:
                old = now - path.stat().st_mtime > _TMP_GRACE
            except FileNotFoundError:
                continue
            fd = _lock_if_free(path) if old else None
            if fd is not None:
                _unlink(path)
                os.close(fd)
    return removed


def _lock_if_free(path: Path) -> int | None:
    """A descriptor holding the lock of ``path`` when nobody else held it and the file is still
    there (not removed by whoever held it before us); else None."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
        if (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _remove(db: Database, job_id: str, *, tombstone: bool) -> None:
    """Remove the record, summary, work area and index line of a grid job that never ran; with
    ``tombstone``, a poll summary answering why (only when there was a record to answer for)."""
    had_record = db.exists(job_id)
    db.delete(job_id)
    if tombstone and had_record:
        with locked(db.home.db_lock(job_id), db.lock_timeout):
            if not db.exists(job_id):
                atomic_write(
                    db.home.summary(job_id),
                    summary.render("FAILED", exit_code=1, message=ABANDONED_MESSAGE, unsubmitted=0, cancel=False),
                )


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise
