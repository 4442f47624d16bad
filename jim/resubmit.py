"""``jim resubmit``: another attempt of some local jobs of a grid job, asked by a person.

Ganga's ``j.k`` ids: ``jim resubmit ID.k`` (``ID.3-7,12`` for several) or
``jim resubmit ID --failed`` (every local job that ended FAILED, LOST or
CANCELLED).  Allowed while the grid job has not ended and is not being
cancelled, for local jobs that have ended (a running one is killed first:
``jim kill ID.k``).  Each chosen local job gets a new attempt
(:meth:`jim.record.LocalJob.new_attempt`), its ended attempt recorded with
"resubmitted by <user>" and who asked; the worker submits it at once (no
cool-off), and the attempt limit of the automatic retries does not apply.

The outputs' lock is held while the record changes, so that the output tar
is never gathered around a local job that is being resubmitted: either the
tar was gathered first (the grid job has ended: refused), or the grid job
waits for the new attempt.
"""

from __future__ import annotations

import getpass

from jim import background
from jim.errors import JimError
from jim.locks import locked
from jim.log import for_job
from jim.record import LocalJob
from jim.site import Site


def resubmit(
    site: Site, job_id: str, indices: list[int] | None, *, failed: bool = False, who: str | None = None
) -> dict[int, int]:
    """Another attempt of the local jobs ``indices`` (or, with ``failed``, of every failed one);
    index -> its new attempt's number.  :class:`JimError` with a one-line reason when refused."""
    home = site.home
    who = who or getpass.getuser()
    home.check_id(job_id)
    out: dict[int, int] = {}
    with locked(home.final_lock(job_id), site.config.deadlines.lock), site.db.update(job_id) as rec:
        if rec.state.terminal or rec.cancel_requested or rec.outputs_gathered:
            why = rec.state.name if rec.state.terminal else "being cancelled"
            raise JimError(f"grid job {job_id} is {why}: its local jobs can no longer be resubmitted")
        jobs = rec.local_jobs()
        chosen = _chosen(job_id, jobs, indices, failed)
        for lj in chosen:
            out[lj.index] = lj.new_attempt(f"resubmitted by {who}", by=who)
        rec.recompute(site.policy)
    for_job("jim.resubmit", job_id).info(
        "%s resubmits local jobs %s of grid job %s", who, ",".join(f"{k} (attempt {n})" for k, n in out.items()), job_id
    )
    background.start_worker(home.root, job_id)
    background.start_monitor(home.root)
    return out


def _chosen(job_id: str, jobs: list[LocalJob], indices: list[int] | None, failed: bool) -> list[LocalJob]:
    if indices is None:
        chosen = [lj for lj in jobs if lj.state.failure] if failed else []
        if not chosen:
            raise JimError(f"grid job {job_id} has no failed local job to resubmit")
        return chosen
    missing = [k for k in indices if not 0 <= k < len(jobs)]
    if missing:
        raise JimError(f"grid job {job_id} has no local job {missing[0]} (its local jobs are 0-{len(jobs) - 1})")
    chosen = [jobs[k] for k in indices]
    if failed:
        chosen = [lj for lj in chosen if lj.state.failure]
        if not chosen:
            raise JimError(f"none of the chosen local jobs of grid job {job_id} has failed")
    running = [lj for lj in chosen if not lj.state.terminal]
    if running:
        lj = running[0]
        raise JimError(
            f"local job {job_id}.{lj.index} is {lj.state.value}, not ended: "
            f"kill it first (jim kill {job_id}.{lj.index}), then resubmit it"
        )
    return chosen
