"""The per-user monitor: follows every active local job of this user.

One monitor per jim home (its lock: see :mod:`jim.background`), started on
demand by the worker and by ``jim poll``, exiting after ``idle_exit`` seconds
with nothing active.  Every ``interval`` seconds it makes one pass
(:func:`refresh`, a :class:`Pass`):

1. **collect**: the batch ids of every active local job of every active grid
   job (a grid job whose record has not changed costs no parse);
2. **query**: one status query for all of them (:meth:`Adapter.query_cached`);
   a failed query marks the adapter degraded (no new submissions) and is
   **no news**: no state changes at all;
3. **accounting**: jobs absent from the queue (or ended there) whose wrapper
   left no exit-code file are looked up in the accounting records, at most
   once per status answer;
4. **apply**, per grid job whose inputs changed (see :mod:`jim.memo`): each
   local job whose status or wrapper directory changed (every one after the
   record changed, and in the periodic look) is brought up to date by the
   rules of evidence (:mod:`jim.evidence`), the wrappers' reports (progress
   phases, heartbeat, node) merged; local jobs held too long are cancelled;
   a local job that ended through no fault of its own gets another attempt
   (:mod:`jim.retry`); the grid state is aggregated;
5. **follow up**: a GRAM SEG event for a grid state change (push mode), the
   output tar once every local job has ended, and the worker started for a
   grid job that needs one (:func:`jim.summary.worker_needed`).

Between passes, at most once an hour per home, it applies ``[retention]`` (:class:`jim.purge.Housekeeping`).

Whatever goes wrong while one grid job is handled (a record jim cannot read,
an output tar that cannot be written) stays with that grid job: it is logged
once with its cause, tried again on the next pass, and after :data:`MAX_TRIES`
passes in a row the grid job ends FAILED with the cause as its reason (its
local jobs still in the batch system cancelled); every other grid job goes on,
and the monitor still exits when nothing is left to follow.  A record a newer
jim wrote (:class:`~jim.errors.RecordTooNew`) is no failure of its grid job:
it is logged once and left alone, neither written nor ended, by this monitor.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from jim import background, caps, evidence, localfiles, retry, seg, summary
from jim import credentials as creds
from jim.adapters.base import Adapter
from jim.adapters.model import BatchStatus, QueryResult
from jim.errors import JimError, JobNotFound, RecordTooNew
from jim.evidence import Facts, Rules
from jim.jobid import local_dir_name
from jim.locks import SingleInstance
from jim.log import for_job
from jim.memo import (
    Dirs,
    Inputs,
    Key,
    Memo,
    Quiet,
    RecordKey,
    Seen,
    TimeRules,
    inputs_of,
    rules_of_time,
    settled,
    status_key,
    which,
)
from jim.memo import home_key as memo_home_key
from jim.monitorpass import PassStamp
from jim.outputs import finalize
from jim.purge import Housekeeping
from jim.record import GridJob, LocalJob
from jim.safeio import disk_key
from jim.site import Site
from jim.states import Evidence, LocalState
from jim.timestamps import now_iso

log = logging.getLogger("jim.monitor")

JobLog = logging.LoggerAdapter[logging.Logger]

#: Passes in a row that may fail on one grid job before it ends FAILED.
MAX_TRIES = 3


def run(site: Site, *, once: bool = False) -> int:
    """Entry point of ``jim _monitor`` (detached)."""
    home = site.ensure().home
    lock = SingleInstance(background.monitor_lock(home.root))
    if not lock.acquire():
        return 0
    memo = Memo()
    mon = site.config.monitor
    log.info("monitor started (pid %d, adapter %s, interval %g s)", os.getpid(), site.adapter.name, mon.interval)
    idle_since: float | None = None
    failing = _PassFailures()
    count = caps.Publisher(site.config.caps, home)  # (the site-wide cap: this home's count, when it changed)
    stamp = PassStamp(home.root)  # (jim metrics: the last pass, written at most every 10 s)
    housekeeping = Housekeeping(site.db, site.config.retention)  # ([retention]: at most hourly, between passes)
    try:
        while True:
            started = time.monotonic()
            try:
                active = refresh(site, memo=memo)
                failing.ok()
            except Exception as e:  # a whole pass that fails is no news; the next pass tries again
                failing.failed(e)
                active = 1
            count.after_pass()
            stamp.passed(time.monotonic() - started, ok=not failing.count)
            if once:
                return 0
            if active:
                idle_since = None
            else:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since >= mon.idle_exit:
                    log.info("monitor exiting: nothing active for %g s", mon.idle_exit)
                    return 0
            housekeeping.maybe()
            time.sleep(max(0.05, mon.interval - (time.monotonic() - started)))
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


def refresh(site: Site, *, now: float | None = None, memo: Memo | None = None) -> int:
    """One monitoring pass over every active grid job (see the module docstring); returns how many
    remain active.  ``memo`` (kept by the long-lived monitor) makes a pass cost what changed since the
    last one (see :mod:`jim.memo`); a one-off pass starts with an empty one."""
    return Pass(site, Memo() if memo is None else memo, time.time() if now is None else now).run()


class Pass:
    """One monitoring pass: what every step of it shares."""

    def __init__(self, site: Site, memo: Memo, now: float) -> None:
        self.site, self.memo, self.now = site, memo, now
        self.db = site.db
        self.adapter = site.adapter
        self.mon = site.config.monitor
        self.rules = Rules(now, self.mon.lost_grace, self.mon.accounting_slack)
        self.time_rules = TimeRules(now, self.mon.lost_grace)
        self.result = QueryResult(ok=False, error="not asked yet")
        self.accounting: dict[str, BatchStatus] = {}

    # -- the pass ---------------------------------------------------------------------------
    def run(self) -> int:
        memo = self.memo
        self.refresh_credentials()  # (every pass, quiet or not: a refresh must reach queued local jobs)
        key = memo_home_key(self.db.home)
        if self._still_quiet(key):
            return memo.quiet.active if memo.quiet is not None else 0
        memo.quiet = None
        versions = self.collect()
        batch_ids = [b for job_id in versions for b in memo.seen[job_id].batch_ids]
        self.result = self.query(batch_ids)
        inputs = {job_id: self._inputs(job_id) for job_id in versions}
        changed = [
            job_id
            for job_id, version in versions.items()
            if memo.seen[job_id].inputs != inputs[job_id] or memo.seen[job_id].version != version
        ]
        self._start_due_retries(versions)
        if self.result.ok and changed:
            self.accounting = self.ask_accounting(changed)
        active = (len(versions) - len(changed)) + sum(self.refresh_job(job_id, inputs[job_id]) for job_id in changed)
        self._maybe_quiet(key, batch_ids, active)
        return active

    def refresh_credentials(self) -> None:
        """Replace the copy of every credential whose front end's file changed (one ``lstat`` each);
        record what it is now.  A grid job's failure here is its own (logged, tried next pass)."""
        watched, lstat = self.memo.credentials, os.lstat
        for job_id in list(self.memo.seen):
            files = watched.get(job_id)
            if files is None:
                files = watched[job_id] = creds.watched(self.db.home.job_dir(job_id))
            for path, version in files:  # (the hot path: one lstat per front-end file, nothing else)
                try:
                    st = lstat(path)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != version:
                    break
            else:
                continue
            job_dir = self.db.home.job_dir(job_id)
            del watched[job_id]
            try:
                replaced = creds.refresh(job_dir, self.now)
                if replaced:
                    with self.db.update(job_id) as rec:
                        rec.set_credentials(creds.credentials(job_dir))
            except Exception as e:
                for_job("jim.monitor", job_id).warning("grid job %s: its credential was not refreshed: %s", job_id, e)
                continue
            for cred in replaced:
                for_job("jim.monitor", job_id).info("grid job %s: %s", job_id, creds.refreshed(cred, self.now))

    def _still_quiet(self, key: Key | None) -> bool:
        """The last pass left everything up to date, and nothing it depends on moved since."""
        quiet, memo = self.memo.quiet, self.memo
        if quiet is None or quiet.key != key or self.now >= quiet.until or memo.failures:
            return False
        result = self.query(quiet.batch_ids)
        return result.ok and result.generation == quiet.generation

    def _maybe_quiet(self, key: Key | None, batch_ids: list[str], active: int) -> None:
        """Quiet from here on while nothing moves: what this pass applied is in every grid job's inputs,
        and a record it wrote moved ``db/`` past ``key`` (taken before the pass, settled: a later change
        shows)."""
        memo = self.memo
        if (
            key is not None
            and self.result.ok
            and not memo.failures
            and settled(key)
            and all(seen.inputs is not None for seen in memo.seen.values())
        ):
            until = min((seen.next_look for seen in memo.seen.values()), default=float("inf"))
            memo.quiet = Quiet(key, until, batch_ids, self.result.generation, active)

    def _inputs(self, job_id: str) -> Inputs:
        local_root = self.db.home.job_dir(job_id) / "local"
        return inputs_of(self.memo.seen[job_id], job_id, local_root, self.result, self.time_rules)

    def _start_due_retries(self, versions: dict[str, RecordKey]) -> None:
        """A retry came due: its worker (started once; it submits every due one)."""
        for job_id in versions:
            seen = self.memo.seen[job_id]
            if seen.retry_at is not None and summary.worker_needed(seen.waiting, seen.retry_at, seen.cancel, self.now):
                seen.retry_at = None
                background.start_worker(self.db.home.root, job_id)

    # -- 1. collect ----------------------------------------------------------------------------
    def collect(self) -> dict[str, RecordKey]:
        """The active grid jobs and their record file's identity; the memo brought up to date for
        changed records."""
        memo, db = self.memo, self.db
        ids = [job_id for job_id in db.active_ids() if job_id not in memo.given_up]
        memo.forget_others(ids)
        versions: dict[str, RecordKey] = {}
        for job_id in ids:
            try:
                version = disk_key(db.home.record(job_id))
            except FileNotFoundError:
                continue
            except OSError as e:
                self.contain(job_id, e)
                continue
            if version is None:  # pragma: no cover - only with missing=True
                continue
            seen = memo.seen.get(job_id)
            if seen is None or seen.version != version:
                try:
                    fresh = Seen.of(version, db.read(job_id), self.mon.held_timeout)
                except JobNotFound:
                    continue
                except Exception as e:  # a record jim cannot read is that grid job's problem alone
                    self.contain(job_id, e)
                    continue
                fresh.keep_files(seen)
                memo.seen[job_id] = fresh
            versions[job_id] = version
        return versions

    # -- 2. query ---------------------------------------------------------------------------------
    def query(self, batch_ids: list[str]) -> QueryResult:
        """One status query for all of them; a failed one marks the adapter degraded."""
        result = self.adapter.query_cached(batch_ids) if batch_ids else QueryResult(ok=True, generation=0)
        if result.ok:
            self.adapter.cache.mark_healthy()
        else:
            self.adapter.cache.mark_degraded(result.error)
        return result

    # -- 3. accounting ------------------------------------------------------------------------------
    def ask_accounting(self, changed: list[str]) -> dict[str, BatchStatus]:
        """Accounting records of the jobs absent from the queue (or ended there) without an exit-code
        file, of the grid jobs this pass looks at, asked at most once per status answer.

        Jobs whose records do not say they ended (a record not written yet, or
        one that says nothing of them) stay absent until their grace period runs
        out: asking again before the queue itself was asked again cannot tell
        more, and would run one accounting command per pass all that time.
        """
        result, memo = self.result, self.memo
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
        wanted = absent - too_new - self._told_by_exit_files(seen_jobs, absent) if absent else set()
        if not wanted:
            return {}
        last = memo.accounting
        if last is not None and last[0] == result.at and wanted <= last[1]:
            return last[2]
        try:
            answer = self.adapter.accounting(sorted(wanted))
        except JimError as e:
            log.warning("accounting lookup failed: %s", e)
            answer = {}
        memo.accounting = (result.at, frozenset(wanted), answer)
        return answer

    def _told_by_exit_files(self, seen_jobs: dict[str, Seen], absent: set[str]) -> set[str]:
        """Those of ``absent`` whose wrapper wrote an exit-code file that tells all (no accounting needed
        for them).  A job stopped by a signal it did not ask for still needs the accounting: it says
        whether a preemption or a node failure sent it."""
        out = set()
        for job_id, seen in seen_jobs.items():
            for bid, key in seen.batch_ids.items():
                if bid in absent and key in seen.dirs:
                    d = self.db.home.local_dir(job_id, *key)
                    if localfiles.has_exit(d) and not _signalled(d):
                        out.add(bid)
        return out

    # -- 4. apply ------------------------------------------------------------------------------------
    def refresh_job(self, job_id: str, inputs: Inputs) -> int:
        """Bring one grid job up to date; 1 while it stays active, else 0."""
        jlog = for_job("jim.monitor", job_id)
        seen = self.memo.seen[job_id]
        dirs = seen.dirs
        todo = which(seen, inputs, self.result)
        try:
            with self.db.update(job_id) as rec:
                if rec.disk_key != seen.version:
                    todo = None  # (written since it was collected, say by the worker: every local job)
                before = rec.state
                self.apply(rec, dirs, jlog, todo)
            if rec.state is not before:
                jlog.info("grid job %s: %s -> %s", job_id, before.name, rec.state.name)
                seg.emit(rec)
            active = self.follow_up(rec, inputs, dirs, jlog)
        except Exception as e:  # whatever goes wrong with one grid job stays with that grid job
            return self.contain(job_id, e)
        if self.memo.failures.pop(job_id, None):
            jlog.info("monitoring of grid job %s works again", job_id)
        return active

    def apply(self, rec: GridJob, dirs: Dirs, jlog: JobLog, todo: set[Key] | None) -> None:
        """Apply the pass to the local jobs of a record (under its lock): every one, or those of ``todo``
        (see :func:`jim.memo.which`); give the local jobs that ended through no fault of their own another
        attempt, cancel overdue holds, aggregate."""
        local_root = self.db.home.job_dir(rec.id) / "local"
        if todo is None:
            local_jobs = rec.local_jobs()
        else:
            local_jobs = [lj for lj in map(rec.local, sorted({i for i, _attempt in todo})) if lj.dir_key in todo]
        for lj in local_jobs:
            was_terminal = lj.state.terminal
            key = lj.dir_key
            local_dir = local_root / local_dir_name(*key) if key in dirs else None  # (None: no files to read)
            apply_local(lj, local_dir, self.result, self.accounting, self.rules, cancelled=rec.cancel_requested)
            if not was_terminal and lj.state.terminal:
                self._ended(rec, lj, jlog)
        timeout = self.mon.held_timeout
        overdue = evidence.overdue_holds(rec, self.now, timeout) if todo is None else []  # (else none is due)
        if overdue:
            self._cancel_overdue(overdue, timeout, jlog)
        rec.recompute(self.site.policy)

    def _ended(self, rec: GridJob, lj: LocalJob, jlog: JobLog) -> None:
        """An attempt of a local job has just ended: another one if the retry rule says so."""
        if self.memo.rule is None:
            self.memo.rule = retry.Rule(self.site.config)
        now = self.now
        ended = (lj.attempt, lj.state.value, lj.batch_id, lj.get("reason"))
        why = self.memo.rule.consider(rec, lj, now)
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

    def _cancel_overdue(self, overdue: list[LocalJob], timeout: float, jlog: JobLog) -> None:
        try:
            self.adapter.cancel([lj.batch_id for lj in overdue if lj.batch_id], 0.0)
        except JimError as e:
            jlog.error("could not cancel local jobs held too long (%s); will try again", e)
            return
        for lj in overdue:
            evidence.held_too_long(lj, timeout)
            jlog.warning("local job %d: %s", lj.index, lj.get("reason"))

    # -- 5. follow up ------------------------------------------------------------------------------
    def follow_up(self, rec: GridJob, inputs: Inputs | None, dirs: Dirs, jlog: JobLog) -> int:
        """After a grid job was updated: gather its outputs once all its local jobs ended, start its
        worker if it needs one; 1 while it stays active."""
        job_id = rec.id
        if all(lj.state.terminal for lj in rec.local_jobs()) and not rec.outputs_gathered:
            if finalize(self.site, job_id):
                final = self.db.read(job_id)
                if final.outputs_gathered:
                    jlog.info(
                        "grid job %s: outputs gathered in %s; %s exit code %s",
                        job_id,
                        final.output_tar,
                        final.state.name,
                        final.exit_code,
                    )
                seg.emit(final)
                self.memo.seen.pop(job_id, None)
                return 0
            inputs = None  # not gathered yet: tried again on the next pass
        fresh = self._remember(rec, inputs, dirs)
        if rec.state.terminal:
            return 0
        retry_at = rec.retry_at(fresh.waiting) if fresh.waiting else None
        if summary.worker_needed(fresh.waiting, retry_at, rec.cancel_requested, self.now):
            background.start_worker(self.db.home.root, job_id)
        return 1

    def _remember(self, rec: GridJob, inputs: Inputs | None, dirs: Dirs) -> Seen:
        """What this pass applied, as the next pass will see it if nothing changes: the record file as
        this pass read or wrote it (unknown: read again), the statuses of the local jobs still active
        from the same answer, and the rules of time as they stand now (and when one next concerns it:
        a quiet run ends then).  ``inputs`` None: nothing remembered, every local job applied next."""
        fresh = Seen.of(rec.disk_key, rec, self.mon.held_timeout)
        fresh.keep_files(self.memo.seen.get(rec.id))
        if inputs is not None:
            statuses = status_key(fresh, self.result) if inputs.statuses is not None else None
            tick, due = rules_of_time(fresh, rec.id, statuses, self.time_rules)
            fresh.inputs = Inputs(statuses, inputs.files, tick, due)
            fresh.applied, fresh.applied_generation = dirs, self.result.generation
        self.memo.seen[rec.id] = fresh
        return fresh

    # -- containment ----------------------------------------------------------------------------------
    def contain(self, job_id: str, error: Exception) -> int:
        """One grid job's pass failed: logged once with its cause, tried again on the next pass, and after
        :data:`MAX_TRIES` passes in a row the grid job ends FAILED (its local jobs cancelled) with the
        cause as its reason; 1 while it is still tried."""
        memo = self.memo
        jlog = for_job("jim.monitor", job_id)
        memo.seen.pop(job_id, None)
        if isinstance(error, RecordTooNew):  # (not the grid job's fault, and not this jim's record to write)
            jlog.error("grid job %s is left alone: %s", job_id, error.message)
            memo.failures.pop(job_id, None)
            memo.given_up.add(job_id)
            return 0
        tries = memo.failures[job_id] = memo.failures.get(job_id, 0) + 1
        cause = _cause(error)
        if tries == 1:
            jlog.error("monitoring of grid job %s failed: %s; will try again", job_id, cause)
            jlog.debug("the failure in detail", exc_info=error)
        if tries < MAX_TRIES:
            return 1
        reason = f"jim could not follow this grid job: {cause}"
        try:
            give_up(self.site, job_id, reason, self.adapter)
        except Exception as e:
            jlog.error("grid job %s could not be marked FAILED (%s): no longer followed", job_id, _cause(e))
            memo.given_up.add(job_id)
            return 0
        jlog.error("grid job %s FAILED after %d failed tries: %s", job_id, tries, cause)
        memo.failures.pop(job_id, None)
        return 0


def give_up(site: Site, job_id: str, reason: str, adapter: Adapter | None) -> None:
    """End a grid job FAILED for ``reason``; its local jobs still queued or running are cancelled."""
    with site.db.update(job_id) as rec:
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


# ---------------------------------------------------------------------------
# one local job: its wrapper's files, then the rules of evidence
# ---------------------------------------------------------------------------


def apply_local(
    lj: LocalJob,
    local_dir: Path | None,
    result: QueryResult,
    accounting: dict[str, BatchStatus],
    rules: Rules,
    *,
    cancelled: bool = False,
) -> None:
    """Bring one local job up to date: its wrapper's reports merged, then its state by the rules of
    evidence (:func:`jim.evidence.settle`).  ``local_dir`` None: the wrapper has not started (no
    directory), there are no files to read."""
    if local_dir is not None:
        merge_reports(lj, local_dir, rules.now)
        if "node" not in lj.el.attrib:
            _node_from_wrapper(lj, local_dir)
    if lj.state.terminal or not lj.batch_id or not result.ok:
        return
    facts = Facts(
        answered=True,
        status=result.statuses.get(lj.batch_id),
        answered_at=result.at,
        exit=localfiles.read_exit(local_dir) if local_dir is not None else None,
        record=accounting.get(lj.batch_id),
        started=local_dir is not None,
        cancelled=cancelled,
    )
    evidence.settle(lj, facts, rules)


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


def _signalled(local_dir: Path) -> bool:
    ec = localfiles.read_exit(local_dir)
    return ec is not None and ("terminated_by" in ec.info or "signal" in ec.info)


def _cause(error: BaseException) -> str:
    text = error.message if isinstance(error, JimError) else str(error)
    return " ".join(f"{type(error).__name__}: {text}".split())[:300]
