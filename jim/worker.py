"""The detached worker of one grid job: build the sandbox, submit the local jobs.

Exactly one worker acts on a grid job at a time (a :class:`SingleInstance`
lock).  Submission is journaled so that the worker can be killed at any point
and a new one resumes without submitting any local job twice:

1. append the chunk's local jobs to the grid job's intent journal
   (``submit.intent``: ``<epoch> <index ranges>`` lines, fsync'd) under the
   record's lock, unless a cancel came first;
2. submit the chunk through the adapter (tagged: ``<grid id>.<index>``);
3. record the batch ids in the database: local jobs SUBMITTING (at the time
   of the intent) then QUEUED, one rewrite of the record per chunk.

A local job still PLANNED in the record but named in the journal (or, in
records of older versions, SUBMITTING) has an unknown outcome.  A new worker
first asks the batch system about those, by tag (then the wrappers'
``started`` files: :meth:`Adapter.reconcile`): those found are recorded, only
the others are submitted again.  A submit that fails with an unknown outcome
(timeout, lost connection) is reconciled the same way before it is retried.
Fault points for tests: ``worker-after-sandbox``, ``worker-after-intent``,
``worker-after-submit``, ``worker-after-record`` (see :mod:`jim.faults`).
"""

from __future__ import annotations

import json
import os
import time

from jim import faults
from jim.config import Config
from jim.db import Database, disk_key, read_summary
from jim.errors import JimError, SubmitError
from jim.jobdesc import JobDescription
from jim.locks import SingleInstance, locked
from jim.log import for_job
from jim.paths import Home
from jim.states import Evidence, LocalState


def build_sandbox(config: Config, db: Database, job_id: str, adapter, job=None, planned=None) -> None:
    """Write the grid job's sandbox and wrapper (once).  ``planned``: (plan, commands) when the
    caller has them (a worker forked by submit), else they are read from plan.json."""
    from jim.handlers import get_handler_class
    from jim.manager import PLAN_FILE, plan_from_json
    from jim.sandbox import builder

    home = db.home
    job_dir = home.job_dir(job_id)
    if (job_dir / builder.SANDBOX_NAME).exists() and (job_dir / builder.WRAPPER_NAME).exists():
        return
    job = job if job is not None else db.read(job_id)
    desc = JobDescription(job.description(), source_format=job.root.find("description").get("format"))
    cls = get_handler_class(job.jobtype)
    handler = cls(config.site, config.handler_options(job.jobtype))
    plan, commands = planned or plan_from_json(json.loads((job_dir / PLAN_FILE).read_text()))
    area = builder.WorkArea()
    handler.prepareWorkArea(desc, plan, area)
    manifest = {
        "version": 1,
        "grid_job": job_id,
        "jobtype": job.jobtype,
        "environment": [list(p) for p in desc.environment()],
        "outputs": desc.values("outputs"),
        "heartbeat": 30,
        "reserved_exit_codes": list(adapter.reserved_exit_codes),
        "jobs": [{"index": k, "tag": f"{job_id}.{k}", "argv": commands[k],
                  "env": {**plan.slices[k].env,
                          **{f"JIM_PARAM_{n}": str(v) for n, v in plan.slices[k].params.items()}}}
                 for k in range(plan.n)],
    }
    builder.build(job_dir, manifest, area)


INTENT_FILE = "submit.intent"


def journal_intent(db: Database, job_id: str, indices: list[int], at: float) -> bool:
    """Journal that these local jobs are about to be submitted; False when a cancel came first.

    Under the record's lock, so that a cancel either comes first (and is seen
    here, in the poll summary) or sees this journal line.
    """
    from jim.adapters.base import array_spec

    home = db.home
    with locked(home.db_lock(job_id), db.lock_timeout):
        if read_summary(home, job_id).get("CANCEL") == "1":
            return False
        fd = os.open(home.job_dir(job_id) / INTENT_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{at:.3f} {array_spec(indices)}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    return True


def read_intents(job_dir) -> dict[int, float]:
    """local job index -> when its (last) submission was journaled."""
    from jim.adapters.base import parse_array_spec

    out: dict[int, float] = {}
    try:
        with open(job_dir / INTENT_FILE) as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        at, _, spec = line.partition(" ")
        try:
            t = float(at)
        except ValueError:
            continue
        # a line torn by a crash does not parse: its jobs were never submitted (fsync comes before sbatch)
        out.update((k, t) for k in parse_array_spec(spec) or ())
    return out


def in_flight(job, intents: dict[int, float]) -> list[str]:
    """Tags of the local jobs whose submission has an unknown outcome: journaled (or, in records
    of older versions, SUBMITTING) and without a batch id."""
    return [lj.tag for lj in job.local_jobs() if not lj.batch_id and (
        lj.state is LocalState.SUBMITTING or (lj.state is LocalState.PLANNED and lj.index in intents))]


def _record(db: Database, job_id: str, ids: dict[int, str], max_failed_fraction: float,
            intents: dict[int, float] | None = None, known=None):
    """Record batch ids (local jobs SUBMITTING at their intent's time, then QUEUED); returns the record."""
    with db.update(job_id, compare=False, known=known) as rec:
        rec.mark_submitted(ids, intents or {})
        rec.recompute(max_failed_fraction=max_failed_fraction)
    return rec


def submit_pending(config: Config, db: Database, job_id: str, adapter, job=None) -> None:
    """Submit every local job not yet submitted, chunk by chunk, journaled."""
    from jim.adapters.base import LocalJobSpec, SubmitChunk
    from jim.sandbox import builder

    log = for_job("jim.worker", job_id)
    home = db.home
    job_dir = home.job_dir(job_id)
    mff = config.site.max_failed_fraction
    job = job if job is not None else db.read(job_id)
    desc = JobDescription(job.description())
    wall = desc.wall_seconds()
    limits = {"wall_seconds": wall} if wall else {}
    while True:
        if job.cancel_requested:
            log.info("cancel requested: worker stops submitting")
            return
        waiting = [lj for lj in job.local_jobs() if lj.state in (LocalState.PLANNED, LocalState.SUBMITTING)]
        if not waiting:
            return
        intents = read_intents(job_dir)
        if adapter.degraded():
            log.warning("batch system degraded: waiting before submitting %d local jobs", len(waiting))
            _wait(config, home)
            job = db.read(job_id)
            continue
        unsure = in_flight(job, intents)
        if unsure:
            try:
                found = adapter.reconcile(job_id, unsure)
            except JimError as e:
                if not e.transient:
                    raise
                # cannot tell what the batch system has: never resubmit blind, ask again later
                log.warning("cannot reconcile %d local jobs by tag yet (%s); retrying", len(unsure), e.message)
                _wait(config, home)
                job = db.read(job_id)
                continue
            if found:
                log.info("reconciled %d local jobs found by tag: %s", len(found), sorted(found))
                by_tag = {f"{job_id}.{lj.index}": lj.index for lj in waiting}
                job = _record(db, job_id, {by_tag[t]: b for t, b in found.items()}, mff, intents, job)
                continue
        chunk_jobs = waiting[: adapter.max_chunk]
        at = time.time()
        if not journal_intent(db, job_id, [lj.index for lj in chunk_jobs], at):
            log.info("cancel requested: worker stops submitting")
            return
        intents.update((lj.index, at) for lj in chunk_jobs)
        faults.point("worker-after-intent")
        chunk = SubmitChunk(grid_id=job_id,
                            jobs=[LocalJobSpec(lj.index, lj.tag, lj.get("queue")) for lj in chunk_jobs],
                            job_dir=job_dir, wrapper=job_dir / builder.WRAPPER_NAME,
                            sandbox=job_dir / builder.SANDBOX_NAME, outroot=job_dir / "local",
                            queue=job.plan.get("queue"), limits=limits)
        (job_dir / "local").mkdir(mode=0o700, exist_ok=True)
        try:
            ids = submit_with_reconcile(adapter, chunk, log)
        except SubmitError as e:
            log.error("submission of local jobs %s failed: %s", [s.index for s in chunk.jobs],
                      e.details() if hasattr(e, "details") else e)
            if e.transient:
                _wait(config, home)
                job = db.read(job_id)
                continue  # still journaled: the next round reconciles by tag first
            with db.update(job_id) as rec:
                for spec in chunk.jobs:
                    rec.local(spec.index).set_state(LocalState.FAILED, evidence=Evidence.BATCH,
                                                    reason=f"submission refused: {e.message}")
                rec.recompute(max_failed_fraction=mff)
            job = rec
            continue
        faults.point("worker-after-submit")
        job = _record(db, job_id, ids, mff, intents, job)
        log.info("submitted local jobs %s", ", ".join(f"{k}={b}" for k, b in sorted(ids.items())))
        faults.point("worker-after-record")


def _wait(config: Config, home: Home) -> None:
    """Wait a monitor interval for the batch system; the monitor must run meanwhile (it is what
    notices that the batch system answers again), even when no poll comes (push mode)."""
    from jim.manager import start_monitor

    start_monitor(home)
    time.sleep(config.monitor.interval)


def submit_with_reconcile(adapter, chunk, log, attempts: int = 3) -> dict[int, str]:
    """Submit a chunk; after an unknown outcome, look up by tag before any retry."""
    from dataclasses import replace

    ids: dict[int, str] = {}
    remaining = list(chunk.jobs)
    delay = 0.5
    for attempt in range(1, attempts + 1):
        try:
            ids.update(adapter.submit_chunk(replace(chunk, jobs=remaining)))
            return ids
        except SubmitError as e:
            if not e.transient or attempt == attempts:
                if ids:  # part of the chunk is in: record it, report the rest
                    raise SubmitError(e.message, transient=True) from e
                raise
            log.warning("submit attempt %d failed (%s); reconciling by tag before retrying", attempt, e.message)
            time.sleep(delay)
            delay *= 2
            try:
                found = adapter.reconcile(chunk.grid_id, [s.tag for s in remaining])
            except JimError as q:
                # the outcome stays unknown: the jobs stay journaled for the next round
                raise SubmitError(f"{e.message}; reconcile failed: {q.message}", transient=True) from q
            for spec in remaining:
                if spec.tag in found:
                    ids[spec.index] = found[spec.tag]
            remaining = [s for s in remaining if s.tag not in found]
            if not remaining:
                return ids
    return ids


def run(config: Config, job_id: str, known=None) -> int:
    """Entry point of ``jim _worker ID`` (detached).

    ``known``: ``(record, plan, commands)`` from a submit that forked this
    worker: the record is used while the file is still the one written by
    submit, which saves parsing it and plan.json again.
    """
    from jim.adapters import get_adapter
    from jim.manager import start_monitor

    home = Home(config.home).ensure()
    lock = SingleInstance(home.worker_lock(job_id))
    if not lock.acquire():
        return 0
    log = for_job("jim.worker", job_id)
    db = Database(home, config.deadlines.lock)
    try:
        record, planned = (known[0], known[1:]) if known else (None, None)
        if record is not None and record.disk_key == disk_key(home.record(job_id), missing=True):
            job = record
        else:
            job, planned = db.read(job_id), None
        if job.cancel_requested or job.state.terminal:
            return 0
        adapter = get_adapter(config, home)
        build_sandbox(config, db, job_id, adapter, job, planned)
        faults.point("worker-after-sandbox")
        submit_pending(config, db, job_id, adapter, job)
        start_monitor(home)
        return 0
    except JimError as e:
        if e.transient:  # the batch system or a lock will answer later: the next poll restarts us
            log.warning("worker of %s paused: %s", job_id, e.message)
            start_monitor(home)
            return 1
        log.error("worker of %s stopped: %s", job_id, e.message)
        _fail_unsubmitted(db, job_id, e.message, config.site.max_failed_fraction)
        start_monitor(home)
        return 1
    except Exception:
        log.exception("worker of %s crashed", job_id)
        raise
    finally:
        lock.release()


def _fail_unsubmitted(db: Database, job_id: str, reason: str, mff: float) -> None:
    """A permanent error before submission: the never-submitted local jobs fail (with the reason)."""
    try:
        with db.update(job_id) as rec:
            for lj in rec.local_jobs():
                if lj.state is LocalState.PLANNED:
                    lj.set_state(LocalState.FAILED, evidence=Evidence.CREATION, reason=reason)
            rec.recompute(max_failed_fraction=mff)
    except JimError:
        pass
