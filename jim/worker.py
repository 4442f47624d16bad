"""The worker of one grid job: build its sandbox, submit its local jobs, journaled.

Exactly one worker acts on a grid job at a time (its lock: see
:mod:`jim.background`).  ``jim submit`` runs it in a detached fork; the
monitor and ``jim poll`` start it again (``jim _worker ID``) while local jobs
await submission and no worker runs.  Submission is journaled so that the
worker can be killed at any point and a new one resumes without submitting
any local job twice:

1. append the chunk's local jobs to the intent journal (:mod:`jim.journal`),
   under the record's lock, unless a cancel came first;
2. submit the chunk through the adapter (tagged ``<grid id>.<index>``;
   :meth:`Adapter.submit` retries an unknown outcome only after looking the
   jobs up by tag);
3. record the batch ids: local jobs SUBMITTING (at the time of the intent)
   then QUEUED, one rewrite of the record per chunk.

A local job journaled but without a batch id has an unknown outcome: a new
worker first asks the batch system about those, by tag
(:meth:`Adapter.reconcile`); those found are recorded, only the others are
submitted again.  Nothing is submitted for a grid job that its ``jim submit``
has not confirmed (:func:`jim.journal.await_confirmation`); when a worker ends,
it removes what killed submits left (:func:`jim.journal.recover`).  Fault points for tests: ``worker-after-sandbox``,
``worker-after-intent``, ``worker-after-submit``, ``worker-after-record``
(see :mod:`jim.faults`).
"""

from __future__ import annotations

import time
from typing import Any

from jim import background, caps, faults, journal, keep, retry
from jim import credentials as creds
from jim import plan as planning
from jim.adapters.model import Limits, LocalJobSpec, SubmitChunk
from jim.db import Database
from jim.errors import DescriptionError, JimError, SubmitError
from jim.handlers import get_handler_class
from jim.handlers.base import Plan
from jim.jobdesc import JobDescription
from jim.locks import SingleInstance
from jim.log import for_job
from jim.outputs import job_directory
from jim.record import GridJob, LocalJob
from jim.safeio import disk_key
from jim.sandbox import builder
from jim.site import Site
from jim.states import Evidence, LocalState

#: How long a worker waits for the submit of its grid job to confirm it (the submit still runs).
CONFIRM_WAIT = 30.0
#: How often a worker looks again for a refreshed credential while local jobs wait for one (seconds, at most).
CREDENTIAL_WAIT = 10.0


def run(site: Site, job_id: str, known: tuple[GridJob, Plan, planning.Commands] | None = None) -> int:
    """Entry point of ``jim _worker ID`` (detached); 0 when there is nothing (more) to do.

    ``known``: the record, plan and commands ``jim submit`` holds when it forks the worker; used
    while the record file is still the one submit wrote (no parse of the record or of plan.json).
    """
    home, db = site.ensure().home, site.db
    lock = SingleInstance(background.worker_lock(home.root, job_id))
    if not lock.acquire():
        return 0
    log = for_job("jim.worker", job_id)
    try:
        if not journal.await_confirmation(db, job_id, CONFIRM_WAIT):
            if db.exists(job_id):
                log.info("grid job %s: its submit has not confirmed it yet; nothing submitted", job_id)
            else:
                log.warning("grid job %s has no record (its submit was killed before it confirmed it?)", job_id)
            return 0
        if known is not None and known[0].disk_key == disk_key(home.record(job_id), missing=True):
            job, planned = known[0], (known[1], known[2])
        else:
            job, planned = db.read(job_id), None
        if job.cancel_requested or job.state.terminal:
            return 0
        _build_or_fail(site, job_id, job, planned)
        faults.point("worker-after-sandbox")
        submit_pending(site, job_id, job)
        background.start_monitor(home.root)
        return 0
    except JimError as e:
        if e.transient:  # the batch system or a lock will answer later: the next poll restarts us
            log.warning("worker of %s paused: %s", job_id, e.message)
        else:
            log.error("worker of %s stopped: %s", job_id, e.message)
            _fail_unsubmitted(site, job_id, e.message)
        background.start_monitor(home.root)
        return 1
    except Exception:
        log.exception("worker of %s crashed", job_id)
        raise
    finally:
        lock.release()
        _recover(db)


def _recover(db: Database) -> None:
    """Remove what killed submits left in this home (see :mod:`jim.journal`)."""
    try:
        for gone in journal.recover(db):
            for_job("jim.worker", gone).warning(
                "grid job %s removed: its submit was killed before it confirmed the job id", gone
            )
    except Exception:
        for_job("jim.worker", "-").exception("recovery of killed submits failed")


def _build_or_fail(site: Site, job_id: str, job: GridJob, planned: tuple[Plan, planning.Commands] | None) -> None:
    """:func:`build_sandbox`; whatever stops it (a job type's plug-in raising anything, an input file
    that changed since the submit) is a :class:`JimError`: permanent, so that the grid job ends
    FAILED with the reason instead of every new worker failing again, unless the disk is full."""
    try:
        build_sandbox(site, job_id, job, planned)
    except JimError as e:
        raise JimError(f"the sandbox could not be built: {e.message}", transient=e.transient) from e
    except Exception as e:
        for_job("jim.worker", job_id).exception("building the sandbox of %s failed", job_id)
        raise JimError(
            f"the sandbox could not be built: {type(e).__name__}: {e}", transient=builder.transient(e)
        ) from e


def build_sandbox(
    site: Site, job_id: str, job: GridJob | None = None, planned: tuple[Plan, planning.Commands] | None = None
) -> None:
    """Write the grid job's sandbox and wrapper (once).  ``planned``: (plan, commands) when the
    caller has them, else they are read from plan.json."""
    config, db = site.config, site.db
    job_dir = db.home.job_dir(job_id)
    if (job_dir / builder.SANDBOX_NAME).exists() and (job_dir / builder.WRAPPER_NAME).exists():
        return
    job = job if job is not None else db.read(job_id)
    desc = JobDescription(job.description(), source_format=job.source_format)
    handler = get_handler_class(job.jobtype)(config.site, config.handler_options(job.jobtype))
    plan, commands = planned or planning.load(job_dir)
    area = builder.WorkArea()
    handler.prepareWorkArea(desc, plan, area)
    manifest = {
        "version": 1,
        "grid_job": job_id,
        "jobtype": job.jobtype,
        "environment": [list(p) for p in planning.environment(job_dir) or desc.environment()],
        "outputs": desc.values("outputs"),
        **keep.manifest_entries(desc, str(job_directory(desc.get("directory")))),  # (directory view, keepfiles)
        "stdin": plan.stdin,
        "credentials": creds.environment(job_dir, [c.kind for c in creds.credentials(job_dir)]),
        "heartbeat": 30,
        "reserved_exit_codes": list(site.adapter.reserved_exit_codes),
        "jobs": [
            {
                "index": k,
                "tag": f"{job_id}.{k}",
                "argv": commands[k],
                "env": {**plan.slices[k].env, **{f"JIM_PARAM_{n}": str(v) for n, v in plan.slices[k].params.items()}},
            }
            for k in range(plan.n)
        ],
    }
    builder.build(job_dir, manifest, area, max_input_bytes=config.site.max_input_bytes)


def submit_pending(site: Site, job_id: str, job: GridJob | None = None) -> None:
    """Submit every local job not yet submitted, chunk by chunk, journaled (see the module docstring)."""
    _Submission(site, job_id, job if job is not None else site.db.read(job_id)).run()


def _recorded_shape(plan: dict[str, str]) -> dict[str, Any]:
    """The cores, GPUs and whole node of each local job, as the plan recorded them (a plan recorded
    without them: one core, no GPU, a shared node)."""

    def number(name: str, default: int) -> int:
        value = plan.get(name, "")
        return int(value) if value.isdigit() else default

    return {"cores": number("cores", 1), "gpus": number("gpus", 0), "whole_node": plan.get("wholeNode") == "true"}


class _Submission:
    """The worker's loop over the unsubmitted local jobs of one grid job."""

    def __init__(self, site: Site, job_id: str, job: GridJob):
        self.site, self.job_id, self.job = site, job_id, job
        self.db, self.home, self.adapter = site.db, site.home, site.adapter
        self.job_dir = site.home.job_dir(job_id)
        self.log = for_job("jim.worker", job_id)
        self.caps = caps.Gate(site.config.caps, site.home)
        desc = JobDescription(job.description())
        shape = _recorded_shape(job.plan)
        try:
            self.limits = Limits.of({**desc.resource_limits(), **shape})
        except DescriptionError as e:  # (recorded by a jim that did not check them at submit yet)
            self.log.warning("resource limits not passed to the batch system: %s", e.message)
            self.limits = Limits.of({"wall_seconds": desc.wall_seconds(), **shape})

    def run(self) -> None:
        while not self.job.cancel_requested:
            waiting = [lj for lj in self.job.local_jobs() if lj.state in (LocalState.PLANNED, LocalState.SUBMITTING)]
            if not waiting:
                return
            intents = journal.read(self.job_dir)
            now = time.time()
            due = [lj for lj in waiting if lj.state is LocalState.SUBMITTING or (lj.retry_after or 0.0) <= now]
            if self.adapter.cache.degraded():
                self.log.warning("batch system degraded: waiting before submitting %d local jobs", len(waiting))
                self._pause()
            elif self._reconciled(intents, waiting):
                continue
            elif not due:  # retries in their cool-off: wait for the first (a cancel is seen meanwhile)
                wait = min(lj.retry_after or now for lj in waiting) - now
                if wait > retry.WORKER_WAIT:  # the monitor starts a worker again when one is due
                    self.log.info("%d local jobs wait %.0f s for their retry: worker exits", len(waiting), wait)
                    return
                self._pause(wait)
            elif not (allowed := self._caps_gate(due, now)):
                self._await_slot()
            elif not (go := self._credential_gate(allowed, now)):
                self._await_credential()
            else:
                attempt = go[0].attempt  # one chunk, one attempt: its tags and directories
                chunk = [lj for lj in go if lj.attempt == attempt][: self.adapter.max_chunk]
                submitted = self._submit(chunk, intents)
                self.caps.release(self.job_id)  # (what went is in the record now: no longer a claim)
                if not submitted:
                    break
        self.log.info("cancel requested: worker stops submitting")

    def _caps_gate(self, due: list[LocalJob], now: float) -> list[LocalJob]:
        """The due local jobs the caps let go now (:class:`jim.caps.Gate`, ``[caps]``); the other PLANNED
        ones wait in jim with the cap's reason recorded (a reason another gate recorded is left as it is),
        for as long as it takes: a cap never fails a local job."""
        planned = [lj for lj in due if lj.state is LocalState.PLANNED]
        if not self.caps.on or not planned:
            return due
        wanted = min(len(planned), self.adapter.max_chunk)
        turn = self.caps.take(self.job_id, wanted, self.job.plan.get("queue") or "", now)
        go = {lj.index for lj in due if lj.state is not LocalState.PLANNED} | {lj.index for lj in planned[: turn.n]}
        held = {lj.index for lj in planned[turn.n :]} if turn.n < wanted and turn.reason else set()

        reason = {lj.index: lj.get("waiting") or "" for lj in planned}  # (the attribute: no date parsed)
        clear = [i for i in go if reason.get(i, "").startswith(caps.REASON)]
        hold = [i for i in held if reason[i] != turn.reason and (not reason[i] or reason[i].startswith(caps.REASON))]
        if not clear and not hold:
            return [lj for lj in due if lj.index in go]
        newly = sum(1 for i in hold if not reason[i])
        with self.db.update(self.job_id) as rec:
            for index, why in [*((i, None) for i in clear), *((i, turn.reason) for i in hold)]:
                local = rec.local(index)
                if local.state is LocalState.PLANNED:  # (cancelled meanwhile)
                    local.set_waiting(why, now)
        self.job = rec
        if newly:  # (once, when they start to wait)
            self.log.info("%d local jobs wait: %s", newly, turn.reason)
        return [lj for lj in self.job.local_jobs() if lj.index in go]

    def _await_slot(self) -> None:
        """Every slot the caps allow is taken: wait until a local job of this home may have ended or
        another home's count changed (:meth:`jim.caps.Gate.wait`, a few seconds at most), then read the
        record again if it changed (a cancel is seen then; it also stops this worker at once)."""
        background.start_monitor(self.home.root)
        self.caps.wait()
        if self.job.disk_key is None or disk_key(self.home.record(self.job_id), missing=True) != self.job.disk_key:
            self.job = self.db.read(self.job_id)

    def _credential_gate(self, due: list[LocalJob], now: float) -> list[LocalJob]:
        """The due local jobs whose credential lasts past their expected end (:func:`jim.credentials.shortfall`);
        the others wait for a refresh (recorded with the reason), and fail once they waited
        ``[credentials] wait_for_refresh``.  A refreshed front-end file is copied first.  Only a PLANNED
        local job is held (a SUBMITTING one may already be in the batch system: it is reconciled)."""
        replaced = creds.refresh(self.job_dir, now)
        for cred in replaced:  # (the monitor logs the same when it is first to notice)
            self.log.info("grid job %s: %s", self.job_id, creds.refreshed(cred, now))
        current = creds.credentials(self.job_dir)
        if not current:
            return due
        conf = self.site.config.credentials
        planned = [lj for lj in due if lj.state is LocalState.PLANNED]
        why: dict[int, str | None] = {lj.index: None for lj in due}
        why.update({lj.index: creds.shortfall(current, now, self._expected(lj), conf.margin) for lj in planned})
        go = {lj.index for lj in due if why[lj.index] is None}
        since = {lj.index: lj.waiting[1] if lj.waiting else now for lj in due}
        late = {i for i, reason in why.items() if reason and now - since[i] >= conf.wait_for_refresh}
        newly = [lj.index for lj in due if why[lj.index] and not lj.waiting]
        if replaced or late or any((lj.waiting or (None,))[0] != why[lj.index] for lj in due):
            with self.db.update(self.job_id) as rec:
                if replaced:
                    rec.set_credentials(current)
                for lj in planned:
                    reason = why[lj.index]
                    local = rec.local(lj.index)
                    if local.state is not LocalState.PLANNED:  # (cancelled meanwhile)
                        continue
                    local.set_waiting(reason, now)
                    if reason and lj.index in late:
                        local.set_state(
                            LocalState.FAILED,
                            evidence=Evidence.CREATION,
                            reason=f"{reason.removesuffix('; waiting for a refresh')}; no refresh came "
                            f"within {conf.wait_for_refresh:g} s",
                        )
                rec.recompute(self.site.policy)
            self.job = rec
            if newly:  # (once, when they start to wait: the reason's seconds left change on every look)
                self.log.warning("%d local jobs wait: %s", len(newly), why[newly[0]])
            if late:
                self.log.warning("%d local jobs failed: no refresh of the credential came in time", len(late))
        return [lj for lj in self.job.local_jobs() if lj.index in go]

    def _expected(self, lj: LocalJob) -> float | None:
        """How long a local job may run: its wall-time limit, else its slice's estimate (None: unknown)."""
        if self.limits.wall_seconds:
            return float(self.limits.wall_seconds)
        est = lj.slice.get("estSeconds", "")
        try:
            return float(est) if est else None
        except ValueError:
            return None

    def _reconciled(self, intents: journal.Intents, waiting: list[LocalJob]) -> bool:
        """Look up the local jobs whose submission has an unknown outcome; True when that changed
        something (or cannot be done yet), so that the loop starts over."""
        unsure = journal.in_flight(self.job, intents)
        if not unsure:
            return False
        try:
            found = self.adapter.reconcile(self.job_id, unsure)
        except JimError as e:
            if not e.transient:
                raise
            # cannot tell what the batch system has: never resubmit blind, ask again later
            self.log.warning("cannot reconcile %d local jobs by tag yet (%s); retrying", len(unsure), e.message)
            self._pause()
            return True
        if not found:
            return False
        self.log.info("reconciled %d local jobs found by tag: %s", len(found), sorted(found))
        by_tag = {lj.tag: lj.index for lj in waiting}
        self._record({by_tag[t]: b for t, b in found.items()}, intents)
        return True

    def _submit(self, jobs: list[LocalJob], intents: journal.Intents) -> bool:
        """Journal and submit one chunk, record the outcome; False when a cancel came first."""
        at = time.time()
        attempt = jobs[0].attempt
        if not journal.append(self.db, self.job_id, [lj.index for lj in jobs], at, attempt):
            return False
        intents.note([lj.index for lj in jobs], at, attempt)
        faults.point("worker-after-intent")
        chunk = SubmitChunk(
            grid_id=self.job_id,
            jobs=[LocalJobSpec(lj.index, lj.tag, lj.get("queue")) for lj in jobs],
            job_dir=self.job_dir,
            wrapper=self.job_dir / builder.WRAPPER_NAME,
            sandbox=self.job_dir / builder.SANDBOX_NAME,
            outroot=self.job_dir / "local",
            queue=self.job.plan.get("queue"),
            limits=self.limits,
            attempt=attempt,
        )
        (self.job_dir / "local").mkdir(mode=0o700, exist_ok=True)
        try:
            ids = self.adapter.submit(chunk)
        except SubmitError as e:
            self.log.error("submission of local jobs %s failed: %s", [s.index for s in chunk.jobs], e.details())
            if e.transient:
                self._pause()  # still journaled: the next round reconciles by tag first
            else:
                self._refused(chunk, e)
            return True
        faults.point("worker-after-submit")
        self._record(ids, intents)
        self.log.info("submitted local jobs %s", ", ".join(f"{k}={b}" for k, b in sorted(ids.items())))
        faults.point("worker-after-record")
        return True

    def _record(self, ids: dict[int, str], intents: dict[int, float]) -> None:
        """Record batch ids: local jobs SUBMITTING at their intent's time, then QUEUED."""
        with self.db.update(self.job_id, compare=False, known=self.job) as rec:
            rec.mark_submitted(ids, intents)
            rec.recompute(self.site.policy)
        self.job = rec

    def _refused(self, chunk: SubmitChunk, e: SubmitError) -> None:
        """The batch system refused the chunk for good: its local jobs fail, with the reason."""
        with self.db.update(self.job_id) as rec:
            for spec in chunk.jobs:
                rec.local(spec.index).set_state(
                    LocalState.FAILED, evidence=Evidence.BATCH, reason=f"submission refused: {e.message}"
                )
            rec.recompute(self.site.policy)
        self.job = rec

    def _await_credential(self) -> None:
        """Local jobs wait for a refreshed credential: look at the front end's files every second (one
        ``lstat`` each), and read the record again when one changed or after :data:`CREDENTIAL_WAIT`."""
        background.start_monitor(self.home.root)
        files = creds.watched(self.job_dir)
        until = time.monotonic() + CREDENTIAL_WAIT
        while time.monotonic() < until and not any(creds.moved(path, version) for path, version in files):
            time.sleep(1.0)
        self.job = self.db.read(self.job_id)

    def _pause(self, seconds: float | None = None) -> None:
        """Wait a monitor interval (or ``seconds``, if shorter) for the batch system or a cool-off,
        then read the record again.  The monitor must run meanwhile (it notices when the batch
        system answers again), even when no poll comes (push mode)."""
        background.start_monitor(self.home.root)
        interval = self.site.config.monitor.interval
        time.sleep(max(0.05, min(interval, seconds)) if seconds is not None else interval)
        self.job = self.db.read(self.job_id)


def _fail_unsubmitted(site: Site, job_id: str, reason: str) -> None:
    """A permanent error before submission: the never-submitted local jobs fail (with the reason)."""
    try:
        with site.db.update(job_id) as rec:
            for lj in rec.local_jobs():
                if lj.state is LocalState.PLANNED:
                    lj.set_state(LocalState.FAILED, evidence=Evidence.CREATION, reason=reason)
            rec.recompute(site.policy)
    except JimError:
        pass
