"""Cancel: stop every local job of a grid job, gather the outputs, report the grid state.

``jim cancel`` (the gatekeeper's, or a person's):

1. marks the record ``cancelRequested`` (a worker then submits nothing more:
   see :func:`jim.journal.append`), and stops the grid job's worker;
2. finds every local job that may be in the batch system: those with a batch
   id, and those whose submission was journaled with an unknown outcome
   (looked up by tag);
3. cancels them in one adapter call and gives their wrappers ``cancel_grace``
   seconds to write their exit-code files;
4. records each local job's end (DONE if it had ended well before the cancel
   reached it, else CANCELLED), gathers the outputs into the output tar, and
   appends the SEG event.

A second cancel, or one of a grid job that has ended, only makes sure its
outputs are gathered.

``jim kill ID.k`` (:func:`kill`, Ganga's ``j.k`` ids; ``ID.3-7,12`` for several)
stops some local jobs of a grid job that has not ended, the same way: the
worker is stopped first (it is started again by the next poll for the local
jobs still to submit), the chosen local jobs that may be in the batch system
are cancelled, and each ends CANCELLED, with who asked, unless its wrapper
says it had ended well.  The grid job goes on with the others; its failure
policy counts the killed ones as failed.
"""

from __future__ import annotations

import getpass
import time

from jim import background, journal, localfiles, seg
from jim.errors import JimError
from jim.evidence import ended_by_cancel
from jim.log import for_job
from jim.outputs import finalize
from jim.paths import Home
from jim.record import GridJob
from jim.site import Site
from jim.states import GramState, LocalState


def cancel(site: Site, job_id: str) -> GramState:
    """Stop every local job of ``job_id``, gather outputs; return the grid state."""
    home, db = site.home, site.db
    log = for_job("jim.cancel", job_id)
    job = db.read(job_id)
    if job.state.terminal:
        if not job.outputs_gathered:
            finalize(site, job_id)
        log.info("cancel of grid job %s: already %s", job_id, job.state.name)
        return job.state
    with db.update(job_id) as rec:
        if not rec.cancel_requested:
            rec.set("cancelRequested", "true")
            rec.set("cancelReason", "cancelled by the user")
    log.info("cancelling grid job %s", job_id)
    background.stop_worker(home.root, job_id)
    batch_ids = _stop_local_jobs(site, db.read(job_id))
    with db.update(job_id) as rec:
        _record_ends(home, rec, batch_ids)
        rec.recompute(site.policy)
    finalize(site, job_id)
    job = db.read(job_id)
    log.info("grid job %s cancelled: %s, output tar %s", job_id, job.state.name, job.output_tar)
    seg.emit(job)
    return job.state


def kill(site: Site, job_id: str, indices: list[int], who: str | None = None) -> dict[int, LocalState]:
    """Stop the local jobs ``indices`` of a grid job that has not ended; index -> each one's state after.

    Refused (:class:`JimError`) when the grid job has ended, is being cancelled, or has no such local
    job; a chosen local job that has already ended is left as it is."""
    home, db = site.home, site.db
    log = for_job("jim.cancel", job_id)
    who = who or getpass.getuser()
    job = db.read(home.check_id(job_id))
    if job.state.terminal or job.cancel_requested:
        why = job.state.name if job.state.terminal else "being cancelled"
        raise JimError(f"grid job {job_id} is {why}: its local jobs can no longer be killed")
    known = {lj.index for lj in job.local_jobs()}
    missing = [k for k in indices if k not in known]
    if missing:
        raise JimError(f"grid job {job_id} has no local job {missing[0]} (its local jobs are 0-{len(known) - 1})")
    log.info("%s kills local jobs %s of grid job %s", who, ",".join(map(str, indices)), job_id)
    chosen = set(indices)
    with db.update(job_id) as rec:  # (first: the monitor then records their ends as kills too)
        for lj in rec.local_jobs():
            if lj.index in chosen and not lj.state.terminal:
                lj.set("killedBy", who)
    background.stop_worker(home.root, job_id)
    batch_ids = _stop_local_jobs(site, db.read(job_id), only=chosen)
    with db.update(job_id) as rec:
        _record_ends(home, rec, batch_ids, only=chosen, reason=f"killed by {who}")
        rec.recompute(site.policy)
    job = db.read(job_id)
    if job.state.terminal:
        finalize(site, job_id)
        job = db.read(job_id)
        seg.emit(job)
    return {lj.index: lj.state for lj in job.local_jobs() if lj.index in chosen}


def _stop_local_jobs(site: Site, job: GridJob, only: set[int] | None = None) -> dict[int, str]:
    """Cancel every local job (of ``only``) that may be in the batch system; index -> batch id of those."""
    adapter, home = site.adapter, site.home
    local_jobs = [lj for lj in job.local_jobs() if only is None or lj.index in only]
    unsure = journal.in_flight(job, journal.read(home.job_dir(job.id)))
    if only is not None:
        mine = {lj.tag for lj in local_jobs}
        unsure = [tag for tag in unsure if tag in mine]
    found = adapter.reconcile(job.id, unsure) if unsure else {}
    batch_ids = {lj.index: lj.batch_id for lj in local_jobs if not lj.state.terminal and lj.batch_id}
    batch_ids.update((lj.index, found[lj.tag]) for lj in local_jobs if lj.tag in found)
    attempts = {lj.index: lj.attempt for lj in local_jobs}
    grace = site.config.deadlines.cancel_grace
    if not batch_ids:
        return batch_ids
    adapter.retrying(adapter.cancel, sorted(set(batch_ids.values())), grace)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:  # let the wrappers write their exit-code files
        if all(localfiles.has_exit(home.local_dir(job.id, k, attempts[k])) for k in batch_ids):
            break
        time.sleep(0.05)
    return batch_ids


def _record_ends(
    home: Home, rec: GridJob, batch_ids: dict[int, str], only: set[int] | None = None, reason: str = "cancelled"
) -> None:
    """Every local job (of ``only``) that has not ended: DONE if its wrapper says it ended well, else CANCELLED."""
    for lj in rec.local_jobs():
        if lj.state.terminal or (only is not None and lj.index not in only):
            continue
        submitted = lj.index in batch_ids
        if submitted and not lj.batch_id:
            lj.batch_id = batch_ids[lj.index]
        ec = localfiles.read_exit(home.local_dir(rec.id, lj.index, lj.attempt)) if submitted else None
        ended_by_cancel(lj, ec, reason + ("" if submitted else " before it was submitted"))
