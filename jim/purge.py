"""Housekeeping: what ``[retention]`` says has expired of finished grid jobs goes (``jim purge``, and the monitor).

A grid job is **finished** when its state is DONE or FAILED (a cancelled one
ends FAILED), every local job of it has ended, and its outputs are gathered (or
jim itself ended it FAILED, which never gathers them: its ``failReason``); its
worker does not run and no submit holds its pending mark.  Nothing of any other
grid job is ever touched.  Its **age** is counted from its end
(its last grid state, or the gathering of its outputs, whichever came last).

What goes, by ``[retention]`` (:class:`jim.config.RetentionConfig`) and its age:

* ``work_area``: ``jobs/<id>/`` but the output tar (sandbox, the local jobs'
  directories, credentials' copies, jim's log of the grid job); the record then
  says so (``<meta workAreaRemoved>``);
* ``output_tar``: ``jobs/<id>/<id>.tar.gz``, when that is where the record says the
  tar is (``<meta outputTarRemoved>``).  A tar the description put elsewhere is the
  user's, never touched;
* ``record``: the grid job is forgotten: its work area and tar, then
  :meth:`jim.db.Database.forget` (index lines, one rewrite of the index for up to
  :attr:`_Purge.BATCH` grid jobs; record, poll summary), then its lock files.
  ``jim poll`` of it answers "no grid job" (156) from then on.
  ``--older-than D`` forgets so every finished grid job that ended more than D ago.

Only jim's own names in the home are ever removed (``db/<id>.xml``,
``db/<id>.state``, ``jobs/<id>/``, ``locks/<id>.*``); the batch system is never
asked anything.  The trees go through :mod:`jim.removal` (directory descriptors,
never a symbolic link followed: a link planted in a work area is removed, its
target is not), under the grid job's outputs lock (what :func:`jim.outputs.finalize`
and ``jim resubmit`` hold), with the record read again there.  A poll summary left
without a record (an abandoned submit's answer) goes once it is older than
``record``.

The monitor applies the retention itself (:class:`Housekeeping`): at most once
per :data:`INTERVAL` per home (``cache/retention.stamp``), at most
:data:`MONITOR_BUDGET` seconds at a time between its passes.  Which grid jobs
to look at comes from the index (state, last update) and one look at
``jobs/<id>``: a record is parsed only when something of it is due.

As root, :func:`all_users` does the same for every account's home, in a child
process switched to the account (groups, gid, uid) before it opens anything
there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jim import accounts, background, durations, journal, removal
from jim.config import Config, RetentionConfig
from jim.db import Database
from jim.errors import DatabaseError, JimError, JobNotFound, LockTimeout
from jim.jobid import valid_job_id
from jim.locks import locked
from jim.log import reopen
from jim.paths import Home
from jim.record import GridJob
from jim.safeio import atomic_write
from jim.summary import TERMINAL_STATES
from jim.timestamps import now_iso, parse_iso

log = logging.getLogger("jim.purge")

#: The monitor applies the retention at most this often per home (seconds).
INTERVAL = 3600.0
#: The most seconds of removal the monitor does between two of its passes (a backlog takes several,
#: each going on where the last stopped).
MONITOR_BUDGET = 1.0
#: In ``cache/``: when the monitor last applied the retention whole (its modification time).
STAMP = "retention.stamp"
#: Seconds a purge waits for a grid job's outputs lock before it leaves that grid job for next time.
LOCK_WAIT = 2.0
#: The parts of a grid job, as lines name them.
RECORD, WORK_AREA, OUTPUT_TAR = "record", "work area", "output tar"


@dataclass(frozen=True)
class Rules:
    """How old (seconds since its end) a finished grid job's parts may get; None: kept for ever."""

    work_area: float | None
    output_tar: float | None
    record: float | None
    older_than: float | None = None
    """``--older-than``: every finished grid job older than this is forgotten whole."""

    @classmethod
    def of(cls, retention: RetentionConfig, older_than: float | None = None) -> Rules:
        return cls(
            retention.seconds("work_area"), retention.seconds("output_tar"), retention.seconds("record"), older_than
        )

    def soonest(self) -> float | None:
        """The youngest age at which anything goes (None: nothing ever does)."""
        found = [s for s in (self.work_area, self.output_tar, self.record, self.older_than) if s is not None]
        return min(found) if found else None

    def forget(self, age: float) -> bool:
        return any(limit is not None and age >= limit for limit in (self.record, self.older_than))

    def due(self, limit: float | None, age: float) -> bool:
        return limit is not None and age >= limit


@dataclass
class Outcome:
    """What happened (or would) to one grid job's parts."""

    job_id: str
    state: str
    ended: str
    removed: list[str] = field(default_factory=list)
    freed: int = 0
    error: str = ""
    user: str = ""

    def line(self, dry_run: bool) -> str:
        who = f"{self.user}  " if self.user else ""
        head = f"{who}{self.job_id}  {self.state:<9} ended {self.ended[:19].replace('T', ' ') or '?'}"
        if self.error:
            done = f"; {', '.join(self.removed)} removed before" if self.removed else ""
            return f"{head}  kept: {self.error}{done}"
        if RECORD in self.removed:
            what = f"{'would forget' if dry_run else 'forgotten'} ({', '.join(self.removed)})"
        else:
            what = f"{'would remove' if dry_run else 'removed'} {', '.join(self.removed)}"
        return f"{head}  {what}  {_size(self.freed)}"


@dataclass
class Report:
    """One purge: its grid jobs' outcomes, the homes it left alone, whether it went through them all."""

    outcomes: list[Outcome] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    finished: bool = True
    dry_run: bool = False

    @property
    def freed(self) -> int:
        return sum(o.freed for o in self.outcomes)

    def lines(self) -> list[str]:
        return [o.line(self.dry_run) for o in self.outcomes] + [f"skipped {why}" for why in self.skipped]

    def total(self) -> str:
        forget = sum(RECORD in o.removed and not o.error for o in self.outcomes)
        parts = sum(bool(o.removed) and RECORD not in o.removed and not o.error for o in self.outcomes)
        kept = sum(bool(o.error) for o in self.outcomes)
        more = "" if self.finished else " (stopped before the end: the rest next time)"
        size = f"{_size(self.freed)} ({self.freed} bytes)"
        if self.dry_run:
            done = f"{forget} to forget, {parts} to lose their work area or tar; would free {size}"
        else:
            done = f"{forget} forgotten, {parts} lost their work area or tar, {kept} kept (an error); freed {size}"
        return f"{len(self.outcomes)} grid job(s): {done}{more}"

    def to_json(self) -> dict[str, object]:
        return {"outcomes": [asdict(o) for o in self.outcomes], "skipped": self.skipped, "finished": self.finished}

    def add_json(self, data: object, user: str) -> None:
        """A child's :meth:`to_json` added to this report, its grid jobs marked with ``user``.  The child
        ran as the account (which may have tampered with it), so every field is checked again here:
        :class:`ValueError` for anything jim would not have written."""
        if not isinstance(data, dict) or not isinstance(data.get("outcomes"), list):
            raise ValueError("not a purge report")
        outcomes = [_checked(o, user) for o in data["outcomes"]]
        skipped = data.get("skipped")
        if not isinstance(skipped, list) or not all(isinstance(why, str) for why in skipped):
            raise ValueError("not a purge report")
        self.outcomes += outcomes
        self.skipped += [f"{user}: {_printable(why)}" for why in skipped]
        self.finished = self.finished and data.get("finished") is True


_STATES = frozenset(("DONE", "FAILED", "CANCELLED", "ABANDONED"))


def _checked(o: object, user: str) -> Outcome:
    """An outcome from a child's JSON, every field as :class:`Outcome` makes it (else :class:`ValueError`)."""
    if not isinstance(o, dict) or set(o) != set(Outcome.__dataclass_fields__):
        raise ValueError("not a purge outcome")
    job_id, state, ended, removed, freed, error = (
        o[k] for k in ("job_id", "state", "ended", "removed", "freed", "error")
    )
    if not (isinstance(job_id, str) and valid_job_id(job_id) and state in _STATES and isinstance(ended, str)):
        raise ValueError("not a purge outcome")
    if not (isinstance(removed, list) and set(removed) <= {RECORD, WORK_AREA, OUTPUT_TAR} and len(removed) <= 3):
        raise ValueError("not a purge outcome")
    if not (isinstance(freed, int) and 0 <= freed < 1 << 50 and isinstance(error, str)):
        raise ValueError("not a purge outcome")
    return Outcome(job_id, state, _printable(ended)[:40], list(removed), freed, _printable(error), user)


def _printable(text: str) -> str:
    """One line of at most 300 printable characters."""
    return "".join(c if c.isprintable() else "?" for c in " ".join(text.split()))[:300]


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# ---------------------------------------------------------------------------
# one home
# ---------------------------------------------------------------------------


@dataclass
class Budget:
    """How long one purge may take, and where the last one that ran out of time stopped."""

    seconds: float
    after: str = ""
    """The last grid job a purge looked at before its time ran out: the next one goes on after it."""


def purge_home(
    db: Database, rules: Rules, *, now: float | None = None, dry_run: bool = False, budget: Budget | None = None
) -> Report:
    """What ``rules`` say has expired, of the finished grid jobs of ``db``'s home (see the module
    docstring).  ``budget``: stop once its time is used (``finished`` False), and go on from where the
    last such purge stopped."""
    now = time.time() if now is None else now
    report = Report(dry_run=dry_run)
    soonest = rules.soonest()
    home = db.home
    if soonest is None or not os.path.isdir(home.db):
        return report
    for name in ("db", "jobs", "locks"):
        if os.path.islink(home.root / name):
            raise JimError(f"{home.root / name} is a symbolic link: nothing of {home.root} is purged")
    started = time.monotonic()
    after = budget.after if budget is not None else ""
    home_fd = os.open(home.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # (the configured home, as given)
    try:
        purge = _Purge(db, rules, now, dry_run, _open_jobs(home_fd))
        try:
            for job_id, updated in _candidates(db, soonest, now):
                if budget is not None:
                    if job_id <= budget.after:
                        continue
                    if budget.after != after and time.monotonic() - started >= budget.seconds:
                        report.finished = False  # (after one grid job at least: every purge goes forward)
                        break
                    budget.after = job_id
                outcome = purge.run(job_id) if purge.wanted(job_id, updated) else None
                if outcome is not None:
                    report.outcomes.append(outcome)
                    if not dry_run:
                        log.info("%s", outcome.line(dry_run=False))
            if report.finished:
                report.outcomes += _tombstones(db, rules, now, dry_run)
                if budget is not None:
                    budget.after = ""
        finally:
            purge.flush()
            if purge.jobs_fd is not None:
                os.close(purge.jobs_fd)
    finally:
        os.close(home_fd)
    return report


def _open_jobs(home_fd: int) -> int | None:
    try:
        return removal.open_dir("jobs", dir_fd=home_fd)
    except FileNotFoundError:
        return None


def _candidates(db: Database, soonest: float, now: float) -> list[tuple[str, float | None]]:
    """(id, last update from the index) of every record that may hold something due: terminal in the
    index and not updated within ``soonest`` (its end is no later than its last update), or not in
    the index at all (read to know)."""
    index = {job.get("id", ""): job for job in db.list()}
    out = []
    for name in sorted(os.listdir(db.home.db)):
        job_id, _, ext = name.rpartition(".")
        if ext != "xml" or not valid_job_id(job_id):
            continue
        entry = index.get(job_id)
        updated = parse_iso(entry.get("updated")) if entry is not None else None
        if entry is not None and (entry.get("state") not in TERMINAL_STATES or (updated or now) > now - soonest):
            continue
        out.append((job_id, updated))
    return out


class _Purge:
    """The purge of one home's grid jobs, one at a time (see :func:`purge_home`)."""

    #: Grid jobs forgotten together: one rewrite of the index for each so many.
    BATCH = 500

    def __init__(self, db: Database, rules: Rules, now: float, dry_run: bool, jobs_fd: int | None) -> None:
        self.db, self.rules, self.now, self.dry_run, self.jobs_fd = db, rules, now, dry_run, jobs_fd
        self.doomed: list[str] = []
        """Finished grid jobs whose work areas are gone, their records to be forgotten (:meth:`flush`)."""

    def flush(self) -> None:
        """Forget the grid jobs of :attr:`doomed` (:meth:`jim.db.Database.forget`), then their lock files."""
        doomed, self.doomed = self.doomed, []
        if not doomed:
            return
        self.db.forget(doomed)
        home = self.db.home
        for job_id in doomed:
            for lock in (home.db_lock(job_id), home.final_lock(job_id), background.worker_lock(home.root, job_id)):
                _unlink(lock)

    def wanted(self, job_id: str, updated: float | None) -> bool:
        """Whether anything of the grid job may be due, from its index line and its work area's names
        alone (no record parsed): its record, or a work area or tar still there that may be."""
        age = None if updated is None else self.now - updated
        if age is None or self.rules.forget(age):
            return True
        names = self._names(job_id)
        tar = f"{job_id}.tar.gz"
        return (self.rules.due(self.rules.output_tar, age) and tar in names) or (
            self.rules.due(self.rules.work_area, age) and bool(names - {tar})
        )

    def _names(self, job_id: str) -> set[str]:
        if self.jobs_fd is None:
            return set()
        try:
            fd = removal.open_dir(job_id, dir_fd=self.jobs_fd)
        except FileNotFoundError:
            return set()
        except OSError:
            return {"?"}  # (a link or a file where the work area should be: it is the work area)
        try:
            return set(os.listdir(fd))
        finally:
            os.close(fd)

    def run(self, job_id: str) -> Outcome | None:
        """Remove what is due of the grid job; its outcome, or None when nothing was due or it is not
        finished."""
        home = self.db.home
        if self.dry_run:
            return self._apply(job_id)
        try:
            with locked(home.final_lock(job_id), LOCK_WAIT):
                return self._apply(job_id)
        except LockTimeout:
            return None  # (its outputs are being gathered, or it is resubmitted: not finished)

    def _apply(self, job_id: str) -> Outcome | None:
        try:
            job = self.db.read(job_id)
        except JobNotFound:
            return None
        except DatabaseError as e:
            log.warning("purge: grid job %s left alone: %s", job_id, e)
            return None
        if not finished(self.db, job):
            return None
        ended = ended_at(job)
        age = self.now - ended
        out = Outcome(job_id, _state_name(job), now_iso(ended))
        try:
            if self.rules.forget(age):
                self._forget(job_id, out)
            else:
                self._parts(job, age, out)
        except OSError as e:
            out.error = f"{e.strerror or e}" + (f" ({e.filename})" if getattr(e, "filename", None) else "")
        return out if out.removed or out.error else None

    def _forget(self, job_id: str, out: Outcome) -> None:
        home = self.db.home
        remover = removal.Remover(dry_run=self.dry_run)
        names = self._names(job_id)
        if self.jobs_fd is not None and remover.remove(self.jobs_fd, job_id):
            tar = f"{job_id}.tar.gz"
            out.removed += ([WORK_AREA] if names - {tar} else []) + ([OUTPUT_TAR] if tar in names else [])
        for path in (home.record(job_id), home.summary(job_id)):
            try:
                out.freed += os.lstat(path).st_blocks * 512
            except FileNotFoundError:
                pass
        out.freed += remover.freed
        out.removed.insert(0, RECORD)
        if not self.dry_run:
            self.doomed.append(job_id)
            if len(self.doomed) >= self.BATCH:
                self.flush()

    def _parts(self, job: GridJob, age: float, out: Outcome) -> None:
        """Work area and/or output tar, by their own retention; the record says what went."""
        if self.jobs_fd is None:
            return
        rules, job_id = self.rules, job.id
        try:
            fd = removal.open_dir(job_id, dir_fd=self.jobs_fd)
        except FileNotFoundError:
            return
        remover = removal.Remover(dry_run=self.dry_run)
        tar = f"{job_id}.tar.gz"
        own_tar = job.output_tar == str(self.db.home.job_dir(job_id) / tar)
        marks = []
        try:
            if rules.due(rules.work_area, age) and remover.remove_all_but(fd, frozenset({tar} if own_tar else ())):
                out.removed.append(WORK_AREA)
                marks.append("workAreaRemoved")
            if own_tar and rules.due(rules.output_tar, age) and remover.remove(fd, tar):
                out.removed.append(OUTPUT_TAR)
                marks.append("outputTarRemoved")
            left = os.listdir(fd)
        finally:
            os.close(fd)
            out.freed += remover.freed
        if not left and not self.dry_run:
            os.rmdir(job_id, dir_fd=self.jobs_fd)
        if marks and not self.dry_run:
            with self.db.update(job_id) as rec:
                for mark in marks:
                    rec.set_meta(mark, now_iso(self.now))


def finished(db: Database, job: GridJob) -> bool:
    """Whether the grid job is finished (see the module docstring): nothing of it can change any more."""
    if not job.state.terminal or not (job.outputs_gathered or job.fail_reason):
        return False
    if any(not lj.state.terminal for lj in job.local_jobs()):
        return False
    if os.path.lexists(journal.pending_path(db, job.id)):
        return False
    return not background.running(background.worker_lock(db.home.root, job.id))


def ended_at(job: GridJob) -> float:
    """When the grid job ended: its last grid state's time, or its outputs' gathering if later."""
    times = [parse_iso(el.get("at")) for el in job.root.iterfind("history/grid")]
    outputs = job.root.find("outputs")
    gathered = parse_iso(outputs.get("at")) if outputs is not None else None
    found = [t for t in (times[-1] if times else None, gathered) if t is not None]
    return max(found) if found else parse_iso(job.get("updated")) or time.time()


def _state_name(job: GridJob) -> str:
    return "CANCELLED" if job.cancel_requested and job.state.name == "FAILED" else job.state.name


def _tombstones(db: Database, rules: Rules, now: float, dry_run: bool) -> list[Outcome]:
    """Poll summaries without a record (an abandoned submit's answer) older than the record's retention."""
    limit = rules.record if rules.older_than is None else min(rules.older_than, rules.record or rules.older_than)
    if limit is None:
        return []
    out = []
    names = set(os.listdir(db.home.db))
    for name in sorted(names):
        job_id, _, ext = name.rpartition(".")
        if ext != "state" or not valid_job_id(job_id) or f"{job_id}.xml" in names:
            continue
        path = db.home.summary(job_id)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if now - st.st_mtime < limit:
            continue
        with locked(db.home.db_lock(job_id), db.lock_timeout) if not dry_run else contextlib.nullcontext():
            if db.exists(job_id):
                continue
            if not dry_run:
                _unlink(path)
                _unlink(db.home.db_lock(job_id))
        out.append(Outcome(job_id, "ABANDONED", now_iso(st.st_mtime), [RECORD], st.st_blocks * 512))
    return out


def _unlink(path: os.PathLike[str] | str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ---------------------------------------------------------------------------
# the monitor's hourly retention
# ---------------------------------------------------------------------------


class Housekeeping:
    """The retention, as the monitor applies it between its passes (see the module docstring)."""

    def __init__(self, db: Database, retention: RetentionConfig) -> None:
        self.db = db
        self.rules = Rules.of(retention)
        self.next = 0.0
        self.budget = Budget(MONITOR_BUDGET)

    def maybe(self) -> None:
        """Apply the retention if it is due (cheap when not: one comparison, and once an hour a stat)."""
        if self.rules.soonest() is None or time.monotonic() < self.next:
            return
        try:
            self._run()
        except Exception as e:  # housekeeping never stops the monitor: tried again in an hour
            log.warning("retention not applied: %s", " ".join(f"{type(e).__name__}: {e}".split())[:300])
            self.next = time.monotonic() + INTERVAL

    def _run(self) -> None:
        stamp = self.db.home.cache / STAMP
        try:
            age = time.time() - os.stat(stamp).st_mtime
        except FileNotFoundError:
            age = INTERVAL
        if 0 <= age < INTERVAL:
            self.next = time.monotonic() + INTERVAL - age
            return
        report = purge_home(self.db, self.rules, budget=self.budget)
        if report.finished:
            atomic_write(stamp, now_iso().encode() + b"\n", sync=False)
            self.next = time.monotonic() + INTERVAL
            if report.outcomes:
                log.info("retention applied: %s", report.total())


# ---------------------------------------------------------------------------
# every account's home, as root
# ---------------------------------------------------------------------------


def all_users(config: Config, rules: Rules, *, homes: str | None = None, dry_run: bool = False) -> Report:
    """:func:`purge_home` of every account's jim home (``homes``, else ``[jim] home``), each in a child
    process that is that account before it opens anything there (:mod:`jim.accounts`).  As root only."""
    if os.geteuid() != 0:
        raise JimError("--all-users is root's: an account purges its own home (jim purge)")
    report = Report(dry_run=dry_run)
    for pw, root, why in accounts.homes(homes if homes is not None else config.home_pattern):
        if why is not None:
            report.skipped.append(f"{pw.pw_name}: {why}")
            continue

        def work(root: str = root) -> accounts.Answer:
            reopen(Path(root))  # (jim's log: the account's own, in its home)
            return purge_home(Database(Home(root), config.deadlines.lock), rules, dry_run=dry_run).to_json()

        try:
            report.add_json(accounts.as_account(pw, root, work), pw.pw_name)
        except (accounts.AccountError, OSError, ValueError, TypeError) as e:
            report.skipped.append(f"{pw.pw_name}: {root} not purged: {e}")
    return report


def older_than(text: str | None) -> float | None:
    """``--older-than``'s seconds (0 allowed: every finished grid job), or None when not given."""
    return None if text is None else durations.parse(text, "--older-than", zero_ok=True)
