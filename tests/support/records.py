"""Records made by hand for the tests of the rules of evidence: local jobs queued under batch ids."""

from __future__ import annotations

import time

from jim.jobid import new_job_id
from jim.record import GridJob, NewJob, new_record
from jim.states import LocalState


def queued_record(n: int = 1, *, now: float | None = None) -> GridJob:
    """A grid job of ``n`` local jobs, each submitted 100 s before ``now`` as batch id ``77_<k>`` and
    QUEUED 90 s before it (in memory: store it with ``Database.create`` where a test needs the file)."""
    now = time.time() if now is None else now
    rec = new_record(
        new_job_id(),
        NewJob(
            jobtype="generic",
            name="t",
            owner="u",
            adapter="slurm",
            description={},
            source_format="json",
            source_text="{}",
            plan={"localJobs": n, "binding": "count"},
            explanation="",
            slices=[{} for _ in range(n)],
        ),
    )
    for k in range(n):
        lj = rec.local(k)
        lj.set_state(LocalState.SUBMITTING, at=now - 100)
        lj.batch_id = f"77_{k}"
        lj.set_state(LocalState.QUEUED, at=now - 90)
    return rec
