"""The per-user monitor: follows every active local job of this user.

One monitor per jim home (its lock: see :mod:`jim.background`), started on
demand by the worker and by ``jim poll``, exiting after ``idle_exit`` seconds
with nothing active.  Every ``interval`` seconds it makes one pass
(:func:`refresh`):

1. **collect**: the batch ids of every active local job of every active grid
   job (a grid job whose record has not changed costs no parse);
2. **query**: one status query for all of them (:meth:`Adapter.query_cached`);
   a failed query marks the adapter degraded (no new submissions) and is
   **no news**: no state changes at all;
3. **accounting**: jobs absent from the queue (or ended there) whose wrapper
   left no exit-code file are looked up in the accounting records, at most
   once per status answer;
4. **apply**, per grid job whose inputs changed: each local job whose status
   or wrapper directory changed (every one after the record changed, and in
   the periodic look) is brought up to date in order of evidence (:func:`apply_local`): in the queue, its state
   (a terminal one takes its exit code from the wrapper's file, else the
   accounting, else the batch system); absent, the wrapper's exit-code file,
   else the accounting record, else, after ``lost_grace`` seconds, LOST.  The
   wrappers' reports (progress phases, heartbeat) are merged; local jobs held
   too long are cancelled; the grid state is aggregated;
5. **follow up**: a GRAM SEG event for a grid state change (push mode), the
   output tar once every local job has ended, and the worker restarted for a
   grid job that still has unsubmitted local jobs and no worker.

Whatever goes wrong while one grid job is handled (a record jim cannot read,
an output tar that cannot be written) stays with that grid job: it is logged
once with its cause, tried again on the next pass, and after :data:`MAX_TRIES`
passes in a row the grid job ends FAILED with the cause as its reason (its
local jobs still in the batch system cancelled); every other grid job goes on,
and the monitor still exits when nothing is left to follow.
"""

from __future__ import annotations

import logging
import math
import os
import time
import typing
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from jim import background, localfiles, retry, seg
from jim.adapters import get_adapter
from jim.adapters.base import Adapter
from jim.adapters.model import BatchStatus, QueryResult
from jim.config import Config
from jim.db import Database
from jim.errors import JimError, JobNotFound
from jim.jobid import local_dir_name
from jim.locks import SingleInstance
from jim.log import for_job
from jim.outputs import finalize
from jim.paths import Home
from jim.record import GridJob, LocalJob
from jim.safeio import disk_key
from jim.states import EndCause, Evidence, LocalState
from jim.timestamps import now_iso, parse_iso

log = logging.getLogger("jim.monitor")

_UNSUBMITTED = (LocalState.PLANNED, LocalState.SUBMITTING)


def run(config: Config, *, once: bool = False) -> int:
    """Entry point of ``jim _monitor`` (detached)."""
    home = Home(config.home).ensure()
    lock = SingleInstance(background.monitor_lock(home.root))
    if not lock.acquire():
        return 0
    db = Database(home, config.deadlines.lock)
    adapter = get_adapter(config, home)
    memo = Memo()
    log.info("monitor started (pid %d, adapter %s, interval %g s)", os.getpid(), adapter.name, config.monitor.interval)
    idle_since: float | None = None
    failing = _PassFailures()
    try:
        while True:
            started = time.monotonic()
            try:
                active = refresh(config, db, adapter, memo=memo)
                failing.ok()
            except Exception as e:  # a whole pass that fails is no news; the next pass tries again
                failing.failed(e)
                active = 1
            if once:
                return 0
            if active:
                idle_since = None
            else:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since >= config.monitor.idle_exit:
                    log.info("monitor exiting: nothing active for %g s", config.monitor.idle_exit)
                    return 0
            time.sleep(max(0.05, config.monitor.interval - (time.monotonic() - started)))
    finally:
        lock.release()


class _PassFailures:
    """A pass that fails as a whole (say, an accounting command that raises) is logged with its
    traceback once per cause, then once every :data:`REPEAT_LOG` seconds while it goes on, and once
    more when a pass works again: the log never fills with the same traceback."""

    REPEAT_LOG = 600.0

    def __init__(self) -> None:
        self.cause = ""
        self.count = 0
        self.logged = 0.0

    def failed(self, error: Exception) -> None:
        cause = _cause(error)
        self.count += 1
        if cause != self.cause:
            self.cause, self.logged = cause, time.monotonic()
            log.error("monitor pass failed: %s", cause, exc_info=error)
        elif time.monotonic() - self.logged >= self.REPEAT_LOG:
            self.logged = time.monotonic()
            log.error("monitor passes still failing (%d in a row): %s", self.count, cause)

    def ok(self) -> None:
        if self.count:
            log.info("monitor passes work again after %d failed", self.count)
        self.cause, self.count = "", 0


# ---------------------------------------------------------------------------
# one pass
# ---------------------------------------------------------------------------


#: Seconds after which a grid job in which nothing changed is looked at again all the same (each grid job
#: at its own moment within the period): a safety net, not the way news arrives.
FULL_LOOK = 1800.0
#: The grid jobs' periodic looks fall in this many moments of the period, spread by grid job: at most one
#: pass in FULL_LOOK / LOOK_SLOTS seconds ends a quiet run for them, however many grid jobs there are.
LOOK_SLOTS = 30
#: Seconds a ``local/`` directory's mtime must be old, when it is listed, to be trusted to show the next
#: change (file times move in clock ticks, and a shared file system's clock may differ a little).
SETTLE = 2.0


@dataclass
class _Seen:
    """What the monitor last applied to a grid job, so that an unchanged job costs no parse."""

    version: object
    """Its record file's identity when read (inode, size, mtime: :func:`jim.safeio.disk_key`)."""
    batch_ids: dict[str, tuple[int, int]]
    """Batch id -> (local job index, attempt), of its active local jobs."""
    signature: object = None
    newest: float = 0.0
    """When its latest local job was queued."""
    retry_at: float | None = None
    """When the first retry in its cool-off is due, if every unsubmitted local job waits for one."""
    wake_at: float | None = None
    """When a rule of time (a hold that lasts too long) may change it with no other news."""
    answer: dict[str, BatchStatus] | None = None
    statuses: tuple[object, ...] | None = None
    """The statuses of ``batch_ids`` in ``answer`` (the status answer they were taken from)."""
    root: int = -1
    dirs: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    """The wrappers' directories as found when its ``local/`` directory had the mtime ``root``."""
    settled: bool = False
    """``root`` was older than :data:`SETTLE` seconds when the directory was listed."""
    next_look: float = math.inf
    """When a rule of time next concerns it, with no other news (see :func:`_inputs`)."""
    waiting: int = 0
    """How many of its local jobs await submission."""
    applied: dict[tuple[int, int], tuple[int, int]] | None = None
    """The wrappers' directories the last pass applied (``dirs`` then): which of them changed since."""

    @classmethod
    def of(cls, version: object, job: GridJob, held_timeout: float, signature: object = None) -> _Seen:
        active = {}
        waiting = 0
        held = None
        for lj, state, batch_id, key in job.local_keys():
            if state in _UNSUBMITTED:
                waiting += 1
                continue
            if batch_id and not state.terminal:
                active[batch_id] = key
                if state in (LocalState.HELD, LocalState.SUSPENDED):
                    since = lj.entered(state)
                    if since is not None:
                        held = since if held is None else min(held, since)
        return cls(
            version,
            active,
            signature,
            job.last_entered(LocalState.QUEUED) or 0.0,
            job.retry_at(waiting) if waiting else None,
            held + held_timeout if held is not None else None,
            waiting=waiting,
        )

    def keep_inputs(self, before: _Seen | None) -> None:
        """Carry over what was read of the batch answer and the wrappers' files before the record changed."""
        if before is not None:
            self.answer, self.statuses, self.root, self.dirs = before.answer, None, before.root, before.dirs
            self.settled = before.settled


@dataclass
class Memo:
    """What the long-lived monitor remembers between passes (a one-off pass starts empty)."""

    seen: dict[str, _Seen] = field(default_factory=dict)
    accounting: tuple[float, frozenset[str], dict[str, BatchStatus]] | None = None
    """The last accounting answer: (status answer's time, ids asked, answer)."""
    failures: dict[str, int] = field(default_factory=dict)
    """Grid job -> passes in a row that failed on it (see :func:`_contain`)."""
    given_up: set[str] = field(default_factory=set)
    """Grid jobs that could not even be marked FAILED: no longer looked at by this monitor."""
    rule: retry.Rule | None = None
    """The retry rule (its job types' hooks looked up once)."""
    quiet: _Quiet | None = None
    """The last pass, when it left every grid job up to date: the next skips everything while nothing it
    depends on moved."""


def refresh(
    config: Config, db: Database, adapter: Adapter, *, now: float | None = None, memo: Memo | None = None
) -> int:
    """One monitoring pass over every active grid job (see the module docstring); returns how many
    remain active.

    ``memo`` (kept by the long-lived monitor) makes a pass cost what changed since the last one: a grid
    job whose record, batch statuses (the same answer, or the same status objects in a new one: see
    :meth:`Adapter.cached_answer`) and ``local/`` directory (its mtime: the wrapper touches it whenever it
    writes something the monitor reads) did not change, and that no rule of time concerns, is neither
    read nor written, and its wrappers' directories are not listed; in a grid job that changed, only the
    local jobs whose status or directory changed are applied (see :func:`_which`).
    """
    now = time.time() if now is None else now
    memo = Memo() if memo is None else memo
    home_key = _home_key(db)
    quiet = memo.quiet
    if quiet is not None and quiet.key == home_key and now < quiet.until and not memo.failures:
        result = _query(adapter, quiet.batch_ids)
        if result.ok and result.statuses is quiet.answer:
            return quiet.active  # no record, no wrapper, no status and no rule of time changed anything
    memo.quiet = None
    versions = _collect(db, adapter, memo, config.monitor.held_timeout)
    batch_ids = [b for job_id in versions for b in memo.seen[job_id].batch_ids]
    result = _query(adapter, batch_ids)
    inputs = {job_id: _inputs(config, db, memo.seen[job_id], job_id, result, now) for job_id in versions}
    changed = {
        job_id: version
        for job_id, version in versions.items()
        if memo.seen[job_id].signature != inputs[job_id] or memo.seen[job_id].version != version
    }
    for job_id in versions:
        seen = memo.seen[job_id]
        if seen.retry_at is not None and now >= seen.retry_at:
            seen.retry_at = None  # a retry is due: its worker (started once; it submits every due one)
            background.start_worker(db.home.root, job_id)
    accounting = _accounting(adapter, db, memo, result, changed) if result.ok and changed else {}
    active = (len(versions) - len(changed)) + sum(
        _refresh_job(config, db, adapter, memo, job_id, result, accounting, memo.seen[job_id].dirs, now, inputs[job_id])
        for job_id in changed
    )
    # quiet from here on while nothing moves: what this pass applied is in every grid job's signature, and
    # a record it wrote moved db/ past home_key (taken before the pass, settled: a later change shows)
    if (
        home_key is not None
        and result.ok
        and not memo.failures
        and _settled(home_key)
        and all(seen.signature is not None for seen in memo.seen.values())
    ):
        until = min((seen.next_look for seen in memo.seen.values()), default=math.inf)
        memo.quiet = _Quiet(home_key, until, batch_ids, result.statuses, active)
    return active


@dataclass
class _Quiet:
    """A pass that left every grid job up to date, and what must stay as it was for the next to have
    nothing to do."""

    key: tuple[int, int]
    """The mtimes of the home's ``db`` directory (every record and summary is replaced there) and ``jobs``
    directory (every wrapper touches it when it writes something the monitor reads)."""
    until: float
    """The earliest time a rule of time (a grace period, a hold, a retry, the periodic look) is due."""
    batch_ids: list[str]
    answer: dict[str, BatchStatus]
    active: int


def _home_key(db: Database) -> tuple[int, int] | None:
    try:
        return (os.stat(db.home.db).st_mtime_ns, os.stat(db.home.jobs).st_mtime_ns)
    except OSError:
        return None


def _settled(key: tuple[int, int]) -> bool:
    """Both directories changed at least :data:`SETTLE` seconds ago (a later change shows in their mtimes)."""
    return time.time() - max(key) / 1e9 >= SETTLE


def _collect(db: Database, adapter: Adapter, memo: Memo, held_timeout: float) -> dict[str, object]:
    """The active grid jobs and their record file's identity; ``memo`` brought up to date for changed
    records."""
    ids = [job_id for job_id in db.active_ids() if job_id not in memo.given_up]
    for gone in set(memo.seen) - set(ids):
        del memo.seen[gone]
    for gone in set(memo.failures) - set(ids):
        del memo.failures[gone]
    versions: dict[str, object] = {}
    for job_id in ids:
        try:
            version = disk_key(db.home.record(job_id))
        except FileNotFoundError:
            continue
        except OSError as e:
            _contain(db, adapter, memo, job_id, e)
            continue
        seen = memo.seen.get(job_id)
        if seen is None or seen.version != version:
            try:
                fresh = _Seen.of(version, db.read(job_id), held_timeout)
            except JobNotFound:
                continue
            except Exception as e:  # a record jim cannot read is that grid job's problem alone
                _contain(db, adapter, memo, job_id, e)
                continue
            fresh.keep_inputs(seen)
            memo.seen[job_id] = fresh
        versions[job_id] = version
    return versions


def _inputs(config: Config, db: Database, seen: _Seen, job_id: str, result: QueryResult, now: float) -> object:
    """Everything outside the record a pass would apply to a grid job: when it equals the last one (and the
    record is the same), nothing can change.  The batch statuses are taken again only from a new answer,
    the wrappers' directories listed again only when the ``local/`` directory changed."""
    if not result.ok:
        statuses = None
    elif seen.statuses is not None and seen.answer is result.statuses:
        statuses = seen.statuses  # (the same answer, or a new one that says exactly the same)
    else:
        got = result.statuses.get
        statuses = tuple(got(b) for b in seen.batch_ids)
        seen.answer, seen.statuses = result.statuses, statuses
    local_root = db.home.job_dir(job_id) / "local"
    try:
        root = os.stat(local_root).st_mtime_ns
    except OSError:
        root = 0
    if root != seen.root or not seen.settled:
        scanned = time.time()
        seen.root, seen.dirs = root, localfiles.started_dirs(local_root) if root else {}
        # a wrapper's touch in the same clock tick as this scan leaves the mtime as it is: a directory
        # changed less than SETTLE seconds before the scan is listed again until it is older
        seen.settled = scanned - root / 1e9 >= SETTLE
    files = seen.root if seen.settled else tuple(sorted(seen.dirs.items()))
    tick, due = _rules_of_time(config, seen, job_id, statuses, now)
    return (statuses, files, tick, due)


def _rules_of_time(
    config: Config, seen: _Seen, job_id: str, statuses: tuple[object, ...] | None, now: float
) -> tuple[int, bool]:
    """Time matters too: a job absent without evidence turns LOST after a grace period, a hold that lasts
    too long is cancelled, and every grid job is looked at again once in a long while.  The tick of the
    rule that concerns the grid job now and whether a hold is due; ``seen.next_look`` set to when one
    next concerns it."""
    if statuses is not None and None in statuses:
        period = min(60.0, max(0.5, config.monitor.lost_grace / 4))
        tick = int(now // period)
        next_look = (tick + 1) * period
    else:
        offset = (zlib.crc32(job_id.encode()) % LOOK_SLOTS) * (FULL_LOOK / LOOK_SLOTS)
        tick = int((now + offset) // FULL_LOOK)
        next_look = (tick + 1) * FULL_LOOK - offset
    for at in (seen.wake_at, seen.retry_at):
        if at is not None and now < at < next_look:
            next_look = at
    seen.next_look = next_look
    return tick, seen.wake_at is not None and now >= seen.wake_at


def _query(adapter: Adapter, batch_ids: list[str]) -> QueryResult:
    """One status query for all of them; a failed one marks the adapter degraded."""
    result = adapter.query_cached(batch_ids) if batch_ids else QueryResult(ok=True)
    if result.ok:
        adapter.cache.mark_healthy()
    else:
        adapter.cache.mark_degraded(result.error)
    return result


def _accounting(
    adapter: Adapter, db: Database, memo: Memo, result: QueryResult, changed: Mapping[str, object]
) -> dict[str, BatchStatus]:
    """Accounting records of the jobs absent from the queue (or ended there) without an exit-code
    file, of the grid jobs this pass looks at, asked at most once per status answer.

    Jobs whose records do not say they ended (a record not written yet, or
    one that says nothing of them) stay absent until their grace period runs
    out: asking again before the queue itself was asked again cannot tell
    more, and would run one accounting command per pass all that time.
    """
    seen_jobs = {job_id: memo.seen[job_id] for job_id in changed}
    absent: set[str] = set()
    too_new: set[str] = set()
    for seen in seen_jobs.values():
        for b in seen.batch_ids:
            st = result.statuses.get(b)
            if st is None:
                absent.add(b)
                if seen.newest > result.at:  # an answer older than the job's submission says nothing of it
                    too_new.add(b)
            elif st.state.terminal:
                absent.add(b)
    if not absent:
        return {}
    wanted = absent - too_new - _with_exit_file(db, seen_jobs, absent)
    if not wanted:
        return {}
    last = memo.accounting
    if last is not None and last[0] == result.at and wanted <= last[1]:
        return last[2]
    try:
        answer = adapter.accounting(sorted(wanted))
    except JimError as e:
        log.warning("accounting lookup failed: %s", e)
        answer = {}
    memo.accounting = (result.at, frozenset(wanted), answer)
    return answer


def _with_exit_file(db: Database, seen_jobs: Mapping[str, _Seen], absent: set[str]) -> set[str]:
    """Those of ``absent`` whose wrapper wrote an exit-code file that tells all (no accounting needed
    for them).  A job stopped by a signal it did not ask for still needs the accounting: it says
    whether a preemption or a node failure sent it."""
    out = set()
    for job_id, seen in seen_jobs.items():
        for bid, key in seen.batch_ids.items():
            if bid in absent and key in seen.dirs:
                d = db.home.local_dir(job_id, *key)
                if localfiles.has_exit(d) and not _signalled(d):
                    out.add(bid)
    return out


def _signalled(local_dir: Path) -> bool:
    ec = localfiles.read_exit(local_dir)
    return ec is not None and ("terminated_by" in ec.info or "signal" in ec.info)


def _refresh_job(
    config: Config,
    db: Database,
    adapter: Adapter,
    memo: Memo,
    job_id: str,
    result: QueryResult,
    accounting: dict[str, BatchStatus],
    dirs: dict[tuple[int, int], tuple[int, int]],
    now: float,
    signature: object,
) -> int:
    """Bring one grid job up to date; 1 while it stays active, else 0."""
    jlog = for_job("jim.monitor", job_id)
    which = _which(memo.seen[job_id], signature)
    try:
        with db.update(job_id) as rec:
            if rec.disk_key != memo.seen[job_id].version:
                which = None  # (written since it was collected, say by the worker: every local job)
            before = rec.state
            _apply_all(config, db, adapter, memo, rec, result, accounting, dirs, now, jlog, which)
        if rec.state is not before:
            jlog.info("grid job %s: %s -> %s", job_id, before.name, rec.state.name)
            seg.emit(rec)
        active = _follow_up(config, db, memo, rec, signature, dirs, now, jlog)
    except Exception as e:  # whatever goes wrong with one grid job stays with that grid job
        return _contain(db, adapter, memo, job_id, e)
    if memo.failures.pop(job_id, None):
        jlog.info("monitoring of grid job %s works again", job_id)
    return active


def _which(seen: _Seen, inputs: object) -> set[tuple[int, int]] | None:
    """The local jobs (their directory keys) a pass must apply to a grid job whose record is the one the
    last pass wrote: those whose batch status changed, is missing or is a terminal one the last pass could
    not settle, and those whose wrapper's directory changed.  None: every local job (the record changed,
    the answer failed, a hold may be overdue, or the periodic look is due).  The others' inputs are
    those the last pass applied, so applying them again would change nothing."""
    before, applied = seen.signature, seen.applied
    if before is None or applied is None:
        return None
    old, _files, old_tick, _due = typing.cast(tuple[typing.Any, object, int, bool], before)
    new, _files, tick, due = typing.cast(tuple[typing.Any, object, int, bool], inputs)
    if old is None or new is None or due or len(old) != len(new) or len(new) != len(seen.batch_ids):
        return None
    if tick != old_tick and None not in new:
        return None  # the periodic look at everything
    which = {
        key
        for key, was, got in zip(seen.batch_ids.values(), old, new)
        if got is None or got is not was or got.state.terminal
    }
    dirs = seen.dirs
    if dirs is not applied:
        which.update(key for key, times in dirs.items() if applied.get(key) != times)
        which.update(key for key in applied if key not in dirs)
    return which


#: Passes in a row that may fail on one grid job before it ends FAILED.
MAX_TRIES = 3


def _contain(db: Database, adapter: Adapter | None, memo: Memo, job_id: str, error: Exception) -> int:
    """One grid job's pass failed: logged once with its cause, tried again on the next pass, and after
    :data:`MAX_TRIES` passes in a row the grid job ends FAILED (its local jobs cancelled) with the
    cause as its reason; 1 while it is still tried."""
    jlog = for_job("jim.monitor", job_id)
    memo.seen.pop(job_id, None)
    tries = memo.failures[job_id] = memo.failures.get(job_id, 0) + 1
    cause = _cause(error)
    if tries == 1:
        jlog.error("monitoring of grid job %s failed: %s; will try again", job_id, cause)
        jlog.debug("the failure in detail", exc_info=error)
    if tries < MAX_TRIES:
        return 1
    reason = f"jim could not follow this grid job: {cause}"
    try:
        _give_up(db, adapter, job_id, reason)
    except Exception as e:
        jlog.error("grid job %s could not be marked FAILED (%s): no longer followed", job_id, _cause(e))
        memo.given_up.add(job_id)
        return 0
    jlog.error("grid job %s FAILED after %d failed tries: %s", job_id, tries, cause)
    memo.failures.pop(job_id, None)
    return 0


def _cause(error: BaseException) -> str:
    text = error.message if isinstance(error, JimError) else str(error)
    return " ".join(f"{type(error).__name__}: {text}".split())[:300]


def _give_up(db: Database, adapter: Adapter | None, job_id: str, reason: str) -> None:
    """End a grid job FAILED for ``reason``; its local jobs still queued or running are cancelled."""
    with db.update(job_id) as rec:
        active = [lj for lj in rec.local_jobs() if not lj.state.terminal]
        ids = [lj.batch_id for lj in active if lj.batch_id]
        if ids and adapter is not None:
            try:
                adapter.cancel(ids, 0.0)
            except Exception as e:  # the grid job ends all the same; the batch system's jobs end on their own
                for_job("jim.monitor", job_id).warning("cancelling local jobs of %s failed: %s", job_id, _cause(e))
        for lj in active:
            lj.set_state(LocalState.CANCELLED, evidence=Evidence.CANCEL, reason=reason)
        if rec.fail(reason):
            seg.emit(rec)


def _apply_all(
    config: Config,
    db: Database,
    adapter: Adapter,
    memo: Memo,
    rec: GridJob,
    result: QueryResult,
    accounting: dict[str, BatchStatus],
    dirs: dict[tuple[int, int], tuple[int, int]],
    now: float,
    jlog: logging.LoggerAdapter[logging.Logger],
    which: set[tuple[int, int]] | None = None,
) -> None:
    """Apply the pass to the local jobs of a record (under its lock): every one, or those of ``which``
    (see :func:`_which`); give the local jobs that ended through no fault of their own another attempt,
    cancel overdue holds, aggregate."""
    mon = config.monitor
    local_root = db.home.job_dir(rec.id) / "local"
    if which is None:
        local_jobs = rec.local_jobs()
    else:
        local_jobs = [lj for lj in map(rec.local, sorted({i for i, _attempt in which})) if lj.dir_key in which]
    for lj in local_jobs:
        was_terminal = lj.state.terminal
        key = lj.dir_key
        apply_local(
            lj,
            local_root / local_dir_name(*key) if key in dirs else local_root,  # (no files: not read)
            result,
            accounting,
            now=now,
            lost_grace=mon.lost_grace,
            cancelled=rec.cancel_requested,
            accounting_slack=mon.accounting_slack,
            files=key in dirs,
        )
        if not was_terminal and lj.state.terminal:
            _ended(config, memo, rec, lj, now, jlog)
    overdue = overdue_holds(rec, now, mon.held_timeout) if which is None else []  # (else none is due)
    if overdue:
        _cancel_overdue(adapter, overdue, mon.held_timeout, jlog)
    rec.recompute(max_failed_fraction=config.site.max_failed_fraction)


def _ended(
    config: Config, memo: Memo, rec: GridJob, lj: LocalJob, now: float, jlog: logging.LoggerAdapter[logging.Logger]
) -> None:
    """An attempt of a local job has just ended: another one if the retry rule says so."""
    if memo.rule is None:
        memo.rule = retry.Rule(config)
    ended = (lj.attempt, lj.state.value, lj.batch_id, lj.get("reason"))
    why = memo.rule.consider(rec, lj, now)
    if why is not None:
        jlog.warning(
            "local job %d attempt %d (%s, batch id %s: %s) ended through no fault of its own: "
            "attempt %d in %.0f s (%s)",
            lj.index,
            *ended,
            lj.attempt,
            (lj.retry_after or now) - now,
            why,
        )


def _follow_up(
    config: Config,
    db: Database,
    memo: Memo,
    rec: GridJob,
    signature: object,
    dirs: dict[tuple[int, int], tuple[int, int]],
    now: float,
    jlog: logging.LoggerAdapter[logging.Logger],
) -> int:
    """After a grid job was updated: gather its outputs once all its local jobs ended, restart its
    worker if it needs one; 1 while it stays active."""
    job_id = rec.id
    local_jobs = rec.local_jobs()
    if all(lj.state.terminal for lj in local_jobs) and not rec.outputs_gathered:
        if finalize(db, job_id, max_failed_fraction=config.site.max_failed_fraction):
            final = db.read(job_id)
            if final.outputs_gathered:
                jlog.info(
                    "grid job %s: outputs gathered in %s; %s exit code %s",
                    job_id,
                    final.output_tar,
                    final.state.name,
                    final.exit_code,
                )
            seg.emit(final)
            memo.seen.pop(job_id, None)
            return 0
        signature = None  # not gathered yet: tried again on the next pass
    # (the file as this pass read or wrote it; None, when it is not known, has it read again next pass)
    fresh = _Seen.of(rec.disk_key, rec, config.monitor.held_timeout)
    fresh.keep_inputs(memo.seen.get(job_id))
    if signature is not None:
        # what this pass applied, as the next pass will see it if nothing changes: the statuses of the
        # local jobs still active, from the same answer, and the rules of time as they stand now (and when
        # one next concerns it: a quiet run ends then)
        statuses, root, _tick, _due = typing.cast(tuple[typing.Any, int, int, bool], signature)
        if statuses is not None and fresh.answer is not None:
            got = fresh.answer.get
            statuses = fresh.statuses = tuple(got(b) for b in fresh.batch_ids)
        tick, due = _rules_of_time(config, fresh, job_id, statuses, now)
        fresh.signature = (statuses, root, tick, due)
        fresh.applied = dirs
    memo.seen[job_id] = fresh
    if rec.state.terminal:
        return 0
    waiting = fresh.waiting
    if not rec.cancel_requested and waiting:
        retry_at = rec.retry_at(waiting)
        if retry_at is None or retry_at - time.time() <= retry.WORKER_WAIT:
            background.start_worker(db.home.root, job_id)
    return 1


# ---------------------------------------------------------------------------
# the rules of evidence, per local job
# ---------------------------------------------------------------------------


def apply_local(
    lj: LocalJob,
    local_dir: Path,
    result: QueryResult,
    accounting: dict[str, BatchStatus],
    *,
    now: float,
    lost_grace: float,
    cancelled: bool,
    accounting_slack: float = 300.0,
    files: bool = True,
) -> None:
    """Bring one local job up to date (see the module docstring for the order of evidence).

    ``files=False`` says the wrapper has not started (no directory): no files to read.
    """
    if files:
        merge_reports(lj, local_dir, now)
        if "node" not in lj.el.attrib:
            _node_from_wrapper(lj, local_dir)
    if lj.state.terminal or not lj.batch_id or not result.ok:
        return
    cancelled = cancelled or "killedBy" in lj.el.attrib  # (jim kill ID.k: this one is being cancelled)
    status = result.lookup(lj.batch_id)
    if status is not None and status.tag and status.tag != lj.tag:
        status = None  # the id now belongs to another job: ours is absent
    ec = localfiles.read_exit(local_dir) if files else None
    if status is None and ec is None and result.at < (lj.entered(LocalState.QUEUED) or 0):
        return  # the (cached) answer predates this job's submission: it says nothing about it
    acct = _own_record(lj, accounting.get(lj.batch_id), accounting_slack)
    if status is not None:
        _in_queue(lj, status, ec, acct, cancelled, files)
    elif ec is not None:
        _terminal_from_exit_file(lj, ec, cancelled, acct.cause if acct is not None else None)
    elif acct is not None:
        _terminal_from_record(lj, acct, files)
    else:
        _absent(lj, now, lost_grace)


def merge_reports(lj: LocalJob, local_dir: Path, now: float) -> None:
    """What the wrapper reports while the job runs: progress phases and the heartbeat."""
    phases = localfiles.read_progress(local_dir)
    if phases:
        lj.set_progress(phases, at=now)
    heartbeat = localfiles.read_heartbeat(local_dir)
    if heartbeat:
        lj.set("heartbeat", now_iso(heartbeat))


def _node_from_wrapper(lj: LocalJob, local_dir: Path) -> None:
    """The worker node's host name, as the wrapper reported it when it started (read once per attempt)."""
    info = localfiles.read_started(local_dir)
    host = info.get("host") if info is not None else None
    if isinstance(host, str) and host:
        lj.set("node", host[:255])


def _in_queue(
    lj: LocalJob,
    status: BatchStatus,
    ec: localfiles.ExitFile | None,
    acct: BatchStatus | None,
    cancelled: bool,
    started: bool,
) -> None:
    """The batch system shows the job: its state; a terminal one says how it ended by the best evidence."""
    if "absentSince" in lj.el.attrib:
        del lj.el.attrib["absentSince"]
    if status.host:
        lj.set("host", status.host)
    if status.state.terminal:
        if ec is not None:
            cause = status.cause or (acct.cause if acct is not None else None)
            _terminal_from_exit_file(lj, ec, cancelled, cause)
        else:
            _terminal_from_record(lj, acct if acct is not None else status, started)
    elif not (ec is not None and status.state is LocalState.RUNNING):  # (else: the wrapper has ended, the
        lj.set_state(status.state, reason=status.reason)  # batch system has not noticed yet)


def _absent(lj: LocalJob, now: float, lost_grace: float) -> None:
    """Absent, with no evidence of how it ended: LOST once the grace period is over."""
    since = parse_iso(lj.get("absentSince"))
    if since is None:
        lj.set("absentSince", now_iso(now))
    elif now - since >= lost_grace:
        lj.set_state(
            LocalState.LOST,
            evidence=Evidence.ABSENT_AFTER_GRACE,
            reason=f"gone from the batch system for {now - since:.0f} s with no exit-code file "
            f"and no accounting record",
        )


def _terminal_from_exit_file(
    lj: LocalJob, ec: localfiles.ExitFile, cancelled: bool, cause: EndCause | None = None
) -> None:
    """The wrapper's exit-code file says how the job ended.  ``cause``: why the batch system says
    it ended (a job killed by a preemption's signal writes its file too), recorded with it."""
    if ec.wrapper_failed:
        cause = EndCause.WRAPPER_FAILED
    if ec.succeeded:
        lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0)
    elif cancelled:
        # the grid job is being cancelled: however the batch system stopped this local job
        # (a signal to the wrapper, or to the job's processes directly), it was cancelled
        killed_by = lj.el.get("killedBy")
        reason = f"killed by {killed_by}" if killed_by else "cancelled"
        lj.set_state(LocalState.CANCELLED, evidence=Evidence.CANCEL, exit_code=ec.code, reason=reason)
    else:
        reason = f"{ec.reason}; {cause.describe()}" if cause is not None else ec.reason
        if lj.set_state(LocalState.FAILED, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=ec.code or 1, reason=reason):
            if cause is not None:
                lj.set("cause", cause.value)


def _own_record(lj: LocalJob, record: BatchStatus | None, slack: float) -> BatchStatus | None:
    """An accounting record, if it is this local job's: same tag, not older than our submission."""
    if record is None:
        return None
    if record.tag and record.tag != lj.tag:
        return None
    intent = lj.entered(LocalState.SUBMITTING)
    if record.submitted is not None and intent is not None and record.submitted < intent - slack:
        return None  # an older job that had the same id
    return record


def _terminal_from_record(lj: LocalJob, st: BatchStatus, started: bool = True) -> None:
    """A terminal state from the batch system or its accounting (no exit-code file).  ``started``:
    the wrapper's directory exists (a failure before it did is the node's, not the job's)."""
    code = st.exit_code
    if code is None and st.state is LocalState.DONE:
        code = 0
    # a terminal native state says how it ended; a queue reason ("Resources") would mislead
    reason = st.native or st.reason
    if st.reason and st.reason not in ("None", st.native) and st.evidence is Evidence.BATCH:
        reason = f"{st.native} ({st.reason})" if st.native else st.reason
    cause = st.cause
    if cause is None and st.state is LocalState.FAILED and not started and "node" not in lj.el.attrib:
        cause = EndCause.NOT_STARTED
    if cause is not None:  # why it ended, when the batch system says: "...; node failure (NODE_FAIL)"
        reason = f"{reason}; {cause.describe()}" if reason else cause.describe()
    if lj.set_state(st.state, evidence=st.evidence, exit_code=code, reason=reason) and cause is not None:
        lj.set("cause", cause.value)


def overdue_holds(job: GridJob, now: float, timeout: float) -> list[LocalJob]:
    """Local jobs held or suspended for longer than ``timeout`` seconds."""
    out = []
    for lj in job.local_jobs():
        if lj.state in (LocalState.HELD, LocalState.SUSPENDED):
            since = lj.entered(lj.state)
            if since is not None and now - since >= timeout:
                out.append(lj)
    return out


def _cancel_overdue(
    adapter: Adapter, overdue: list[LocalJob], timeout: float, jlog: logging.LoggerAdapter[logging.Logger]
) -> None:
    try:
        adapter.cancel([lj.batch_id for lj in overdue if lj.batch_id], 0.0)
    except JimError as e:
        jlog.error("could not cancel local jobs held too long (%s); will try again", e)
        return
    for lj in overdue:
        why = (
            f"{lj.state.value.lower()} for more than {timeout:g} s ({lj.get('reason') or 'no reason given'}); "
            f"cancelled by jim"
        )
        lj.set_state(LocalState.CANCELLED, evidence=Evidence.CANCEL, reason=why)
        jlog.warning("local job %d: %s", lj.index, why)
