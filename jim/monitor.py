"""The per-user monitor: follows every active local job of this user.

One monitor per user (a :class:`SingleInstance` lock), started on demand by
``submit`` and ``poll`` and exiting after ``idle_exit`` seconds with nothing
active.  Every ``interval`` seconds it:

1. asks the batch system about *all* active local jobs of *all* this user's
   grid jobs in one query (:meth:`Adapter.query`);
2. for each local job, applies what is known, in order of evidence:

   * the query failed: **no news**, no state changes at all (the adapter is
     marked degraded, so no new submissions either);
   * the job is in the queue: its state (QUEUED, RUNNING, HELD ...); a
     terminal state from the batch system takes its exit code from the
     wrapper's exit-code file when there is one;
   * the job is absent: the wrapper's exit-code file, else the accounting
     records, else (after ``lost_grace`` seconds absent) LOST;

3. merges what the wrappers report (progress phases, heartbeat, host);
4. aggregates the grid state, gathers the outputs of grid jobs whose local
   jobs have all ended, and in push mode appends a GRAM SEG event for every
   grid state change;
5. restarts the worker of a grid job that still has unsubmitted local jobs
   and no worker (a killed worker resumes without duplicates).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from jim.config import Config
from jim.db import Database, GridJob, LocalJob, now_iso, parse_iso
from jim.errors import JimError
from jim.locks import SingleInstance
from jim.log import for_job
from jim.outputs import finalize, read_exit_file
from jim.paths import Home
from jim.states import Evidence, GramState, LocalState

log = logging.getLogger("jim.monitor")

MAX_PROGRESS_BYTES = 64 * 1024


def read_progress(path: Path) -> dict[str, tuple[int, int]]:
    """Latest ``done/total`` per phase from a progress file (``<phase> <done> <total>`` lines)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - MAX_PROGRESS_BYTES))
            data = f.read().decode(errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return {}
    phases: dict[str, tuple[int, int]] = {}
    for line in data.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        name, done, total = parts
        if not (done.isdigit() and total.isdigit()) or len(name) > 64:
            continue
        phases[name] = (int(done), int(total))
    return phases


def _terminal_from_exit_file(lj: LocalJob, ec: tuple[int, dict[str, str]], cancelled: bool) -> None:
    code, info = ec
    if code == 0 and "terminated_by" not in info:
        lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0)
    elif cancelled:
        # the grid job is being cancelled: however the batch system stopped this local job
        # (a signal to the wrapper, or to the job's processes directly), it was cancelled
        lj.set_state(LocalState.CANCELLED, evidence=Evidence.CANCEL, exit_code=code, reason="cancelled")
    else:
        reason = info.get("error") or info.get("wrapper_error") or (
            f"killed by signal {info['signal']}" if "signal" in info else f"exit code {code}")
        lj.set_state(LocalState.FAILED, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=code or 1, reason=reason)


def apply_local(lj: LocalJob, local_dir: Path, result, accounting: dict, *, now: float,
                lost_grace: float, cancelled: bool, accounting_slack: float = 300.0,
                files: bool = True) -> None:
    """Bring one local job up to date (see the module docstring for the order of evidence).

    ``files=False`` says the wrapper has not started (no directory): no files to read.
    """
    if files:
        phases = read_progress(local_dir / "progress")
        if phases:
            lj.set_progress(phases, at=now)
        try:
            hb = int((local_dir / "heartbeat").read_text().strip() or 0)
            if hb:
                lj.set("heartbeat", now_iso(hb))
        except (OSError, ValueError):
            pass
    if lj.state.terminal or not lj.batch_id or not result.ok:
        return
    status = result.lookup(lj.batch_id)
    if status is not None and status.tag and status.tag != lj.tag:
        status = None  # the id now belongs to another job: ours is absent
    ec = read_exit_file(local_dir / "exit_code") if files else None
    if status is None and ec is None and result.at < (lj.entered(LocalState.QUEUED) or 0):
        return  # the (cached) answer predates this job's submission: it says nothing about it
    acct = _own_record(lj, accounting.get(lj.batch_id), accounting_slack)
    if status is not None:
        lj.el.attrib.pop("absentSince", None)
        if status.host:
            lj.set("host", status.host)
        if status.state.terminal:
            if ec is not None:
                _terminal_from_exit_file(lj, ec, cancelled)
            elif acct is not None:
                _terminal_from_record(lj, acct)
            else:
                _terminal_from_record(lj, status)
        else:
            if ec is not None and status.state is LocalState.RUNNING:
                # the wrapper has finished; the batch system has not noticed yet
                return
            lj.set_state(status.state, reason=status.reason)
        return
    # absent from the batch system
    if ec is not None:
        _terminal_from_exit_file(lj, ec, cancelled)
        return
    if acct is not None:
        _terminal_from_record(lj, acct)
        return
    since = parse_iso(lj.get("absentSince"))
    if since is None:
        lj.set("absentSince", now_iso(now))
    elif now - since >= lost_grace:
        lj.set_state(LocalState.LOST, evidence=Evidence.ABSENT_AFTER_GRACE,
                     reason=f"gone from the batch system for {now - since:.0f} s with no exit-code file "
                            f"and no accounting record")


def _own_record(lj: LocalJob, record, slack: float):
    """An accounting record, if it is this local job's: same tag, not older than our submission."""
    if record is None:
        return None
    if record.tag and record.tag != lj.tag:
        return None
    intent = lj.entered(LocalState.SUBMITTING)
    if record.submitted is not None and intent is not None and record.submitted < intent - slack:
        return None  # an older job that had the same id
    return record


def _terminal_from_record(lj: LocalJob, st) -> None:
    """A terminal state from the batch system or its accounting (no exit-code file)."""
    code = st.exit_code
    if code is None and st.state is LocalState.DONE:
        code = 0
    # a terminal native state says how it ended; a queue reason ("Resources") would mislead
    reason = st.native or st.reason
    if st.reason and st.reason not in ("None", st.native) and st.evidence is Evidence.BATCH:
        reason = f"{st.native} ({st.reason})" if st.native else st.reason
    lj.set_state(st.state, evidence=st.evidence, exit_code=code, reason=reason)


def overdue_holds(job: GridJob, now: float, timeout: float) -> list[LocalJob]:
    """Local jobs held or suspended for longer than ``timeout`` seconds."""
    out = []
    for lj in job.local_jobs():
        if lj.state in (LocalState.HELD, LocalState.SUSPENDED):
            since = lj.entered(lj.state)
            if since is not None and now - since >= timeout:
                out.append(lj)
    return out


def emit_seg_event(job: GridJob) -> None:
    """Append a GRAM SEG line for the grid job's current state (push mode only)."""
    seg_dir = job.meta("segDir")
    if not seg_dir:
        return
    state = job.state
    code = job.exit_code if state.terminal and job.exit_code is not None else 0
    line = f"001;{int(time.time())};{job.id};{int(state)};{code}\n"
    path = Path(seg_dir) / time.strftime("%Y%m%d", time.gmtime())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError as e:
        log.error("cannot append SEG event for %s to %s: %s", job.id, path, e)


def _local_dirs(home: Home, job_id: str) -> dict[int, tuple[int, int]]:
    """Local jobs whose wrapper has started: index -> (dir mtime, progress mtime).

    One ``scandir`` per grid job instead of three failed opens per local job
    that has not started yet (thousands, while a big grid job waits in the queue).
    """
    out: dict[int, tuple[int, int]] = {}
    try:
        entries = list(os.scandir(home.job_dir(job_id) / "local"))
    except FileNotFoundError:
        return out
    for e in entries:
        if not e.name.isdigit():
            continue
        try:
            d = e.stat().st_mtime_ns
            try:
                p = os.stat(os.path.join(e.path, "progress")).st_mtime_ns
            except FileNotFoundError:
                p = 0
        except FileNotFoundError:
            continue
        out[int(e.name)] = (d, p)
    return out


class _Seen:
    """What the monitor last applied to a grid job, so that an unchanged job costs no parse."""

    __slots__ = ("mtime", "batch_ids", "signature", "newest")

    def __init__(self, mtime: int, batch_ids: dict[str, int], signature: object, newest: float = 0.0):
        self.mtime, self.batch_ids, self.signature = mtime, batch_ids, signature
        self.newest = newest  # when its latest local job was submitted


def _active_batch_ids(local_jobs: list[LocalJob]) -> dict[str, int]:
    return {lj.batch_id: lj.index for lj in local_jobs if lj.batch_id and not lj.state.terminal}





def _newest(local_jobs: list[LocalJob]) -> float:
    return max((lj.entered(LocalState.QUEUED) or 0.0 for lj in local_jobs), default=0.0)


#: The last accounting answer, per home: (status answer's time, ids asked, answer).
_LAST_ACCOUNTING: dict[str, tuple[float, frozenset, dict]] = {}


def _accounting(adapter, home, status_at: float, ids: set[str]) -> dict:
    """Accounting records of ``ids``, asked at most once per status answer.

    Jobs absent from the queue whose records do not say they ended (a record
    not written yet, or one that says nothing of them) stay absent until their
    grace period runs out: asking again before the queue itself was asked
    again cannot tell more, and would run one accounting command per
    monitoring pass (every few seconds) all that time.
    """
    key = str(home.root)
    last = _LAST_ACCOUNTING.get(key)
    if last is not None and last[0] == status_at and ids <= last[1]:
        return last[2]
    try:
        answer = adapter.accounting(sorted(ids))
    except JimError as e:
        log.warning("accounting lookup failed: %s", e)
        answer = {}
    _LAST_ACCOUNTING[key] = (status_at, frozenset(ids), answer)
    return answer


def refresh(config: Config, db: Database, adapter, *, now: float | None = None,
            memo: dict[str, _Seen] | None = None) -> int:
    """One monitoring pass over every active grid job; returns how many remain active.

    ``memo`` (kept by the long-lived monitor between passes) lets a pass skip a
    grid job when nothing that could change it has changed: its record, its
    local jobs' statuses in the batch answer, their wrapper files; every grid
    job is still looked at once a minute (grace periods and hold timeouts).
    """
    from jim.adapters.base import QueryResult
    from jim.manager import start_worker

    now = time.time() if now is None else now
    memo = {} if memo is None else memo
    home = db.home
    ids = db.active_ids()
    for gone in set(memo) - set(ids):
        del memo[gone]
    mtimes: dict[str, int] = {}
    batch_ids: list[str] = []
    for job_id in ids:
        try:
            mtimes[job_id] = home.record(job_id).stat().st_mtime_ns
        except FileNotFoundError:
            continue
        seen = memo.get(job_id)
        if seen is None or seen.mtime != mtimes[job_id]:
            try:
                job = db.read(job_id)
            except JimError:
                continue
            locals_ = job.local_jobs()
            seen = memo[job_id] = _Seen(mtimes[job_id], _active_batch_ids(locals_), None, _newest(locals_))
        batch_ids += seen.batch_ids
    result = adapter.query_cached(batch_ids) if batch_ids else QueryResult(ok=True)
    if result.ok:
        adapter.mark_healthy()
    else:
        adapter.mark_degraded(result.error)
    dirs = {job_id: _local_dirs(home, job_id) for job_id in mtimes}
    accounting = {}
    if result.ok:
        # absent from the queue, or ended there: the accounting records say how (one sacct for all)
        absent = [b for b in batch_ids if result.lookup(b) is None or result.lookup(b).state.terminal]
        # a (cached) answer older than a grid job's latest submission says nothing of those jobs
        too_new = {b for seen in memo.values() if seen.newest > result.at for b in seen.batch_ids
                   if result.lookup(b) is None}
        absent = [b for b in absent if b not in too_new]
        if absent:
            unexplained = set(absent) - _with_exit_file(home, memo, absent)
            if unexplained:
                accounting = _accounting(adapter, home, result.at, unexplained)
    active = 0
    for job_id in mtimes:
        seen = memo[job_id]
        statuses = tuple((b, result.statuses.get(b)) for b in seen.batch_ids) if result.ok else None
        # time matters too: a job absent without evidence turns LOST after a grace period
        waiting_on_time = statuses is not None and any(st is None for _b, st in statuses)
        tick = int(now // (min(60.0, max(0.5, config.monitor.lost_grace / 4)) if waiting_on_time else 60.0))
        signature = (statuses, tuple(sorted(dirs[job_id].items())), tick,
                     tuple(b for b in seen.batch_ids if b in accounting))
        if seen.signature == signature and seen.mtime == mtimes[job_id]:
            active += 1  # nothing new: still active
            continue
        jlog = for_job("jim.monitor", job_id)
        try:
            with db.update(job_id) as rec:
                before = rec.state
                started = dirs[job_id]
                for lj in rec.local_jobs():
                    apply_local(lj, home.local_dir(job_id, lj.index), result, accounting, now=now,
                                lost_grace=config.monitor.lost_grace, cancelled=rec.cancel_requested,
                                accounting_slack=config.monitor.accounting_slack,
                                files=lj.index in started)
                overdue = overdue_holds(rec, now, config.monitor.held_timeout)
                if overdue:
                    _cancel_overdue(adapter, overdue, config.monitor.held_timeout, jlog)
                rec.recompute(max_failed_fraction=config.site.max_failed_fraction)
                after = rec.state
            if after is not before:
                jlog.info("grid job %s: %s -> %s", job_id, before.name, after.name)
                emit_seg_event(rec)
            locals_ = rec.local_jobs()
            if all(lj.state.terminal for lj in locals_) and not rec.outputs_gathered:
                if finalize(db, job_id, max_failed_fraction=config.site.max_failed_fraction):
                    final = db.read(job_id)
                    jlog.info("grid job %s: outputs gathered in %s; %s exit code %s", job_id,
                              final.output_tar, final.state.name, final.exit_code)
                    emit_seg_event(final)
                    memo.pop(job_id, None)
                    continue
            try:
                mtime = home.record(job_id).stat().st_mtime_ns
            except FileNotFoundError:
                mtime = 0
            memo[job_id] = _Seen(mtime, _active_batch_ids(locals_), signature, _newest(locals_))
            if not rec.state.terminal:
                active += 1
                if not rec.cancel_requested and any(
                        lj.state in (LocalState.PLANNED, LocalState.SUBMITTING) for lj in locals_):
                    start_worker(home, job_id)
        except JimError as e:
            jlog.error("monitoring of %s failed this round: %s", job_id, e)
            memo.pop(job_id, None)
            active += 1
    return active


def _cancel_overdue(adapter, overdue: list[LocalJob], timeout: float, jlog) -> None:
    try:
        adapter.cancel([lj.batch_id for lj in overdue if lj.batch_id], 0.0)
    except JimError as e:
        jlog.error("could not cancel local jobs held too long (%s); will try again", e)
        return
    for lj in overdue:
        why = f"{lj.state.value.lower()} for more than {timeout:g} s ({lj.get('reason') or 'no reason given'}); " \
              f"cancelled by jim"
        lj.set_state(LocalState.CANCELLED, evidence=Evidence.CANCEL, reason=why)
        jlog.warning("local job %d: %s", lj.index, why)


def _with_exit_file(home: Home, memo: dict[str, "_Seen"], absent: list[str]) -> set[str]:
    """Those of ``absent`` whose wrapper wrote an exit-code file (no accounting needed for them)."""
    wanted = set(absent)
    return {bid for job_id, seen in memo.items() for bid, index in seen.batch_ids.items()
            if bid in wanted and (home.local_dir(job_id, index) / "exit_code").exists()}


def run(config: Config, *, once: bool = False) -> int:
    """Entry point of ``jim _monitor`` (detached)."""
    from jim.adapters import get_adapter

    home = Home(config.home).ensure()
    lock = SingleInstance(home.monitor_lock)
    if not lock.acquire():
        return 0
    db = Database(home, config.deadlines.lock)
    adapter = get_adapter(config, home)
    memo: dict[str, _Seen] = {}
    log.info("monitor started (pid %d, adapter %s, interval %g s)", os.getpid(), adapter.name,
             config.monitor.interval)
    idle_since = None
    try:
        while True:
            started = time.monotonic()
            try:
                active = refresh(config, db, adapter, memo=memo)
            except Exception:
                log.exception("monitor pass failed")
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


def status_json(job: GridJob) -> dict:
    """What ``jim status --json`` prints for one grid job."""
    from jim.status import job_summary

    summary, _phases = job_summary(job)
    locals_ = []
    for lj in job.local_jobs():
        prog = [{"name": n, "done": d, "total": t} for n, d, t in lj.progress]
        locals_.append({"index": lj.index, "tag": lj.tag, "state": lj.state.value, "batchId": lj.batch_id,
                        "queue": lj.get("queue"), "submitted": lj.get("submitted"), "started": lj.get("started"),
                        "ended": lj.get("ended"), "exitCode": lj.exit_code, "evidence": lj.evidence,
                        "reason": lj.get("reason"), "host": lj.get("host"), "heartbeat": lj.get("heartbeat"),
                        "slice": lj.slice, "progress": prog,
                        "MasterJobID": lj.get("MasterJobID"), "SplitID": lj.get("SplitID"),
                        "HerdState": lj.get("HerdState")})
    return {**summary, "localJobs": locals_}


def dump(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=False)
