"""The intent journal of a grid job: ``jobs/<id>/submit.intent``, which local jobs are being submitted.

Before the worker submits a chunk of local jobs it appends one line,
``<epoch> <index ranges>`` (e.g. ``1763800000.123 0-99``), fsync'd, under the
record's lock (:func:`append`).  After the batch system answers, the batch ids
go into the record.  A local job named in the journal but still without a
batch id in the record has an unknown outcome (the worker may have died
between the two): :func:`in_flight` names those, and they are looked up by tag
(:meth:`jim.adapters.base.Adapter.reconcile`) before anything is submitted
again.  The worker and ``jim cancel`` are its only users; the worker its only
writer.

A line torn by a crash does not parse and is ignored: its local jobs were
never submitted, since the fsync comes before the batch command.
"""

from __future__ import annotations

import os
from pathlib import Path

from jim import summary
from jim.db import Database, GridJob
from jim.locks import locked
from jim.ranges import array_spec, parse_array_spec
from jim.states import LocalState

INTENT_FILE = "submit.intent"


def append(db: Database, job_id: str, indices: list[int], at: float) -> bool:
    """Journal that these local jobs are about to be submitted; False when a cancel came first.

    Under the record's lock, so that a cancel either comes first (and is seen
    here, in the poll summary) or sees this journal line.
    """
    home = db.home
    with locked(home.db_lock(job_id), db.lock_timeout):
        if summary.cancel_requested(summary.read(home.summary(job_id)) or {}):
            return False
        fd = os.open(home.job_dir(job_id) / INTENT_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{at:.3f} {array_spec(indices)}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    return True


def read(job_dir: Path) -> dict[int, float]:
    """local job index -> when its (last) submission was journaled."""
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
        out.update((k, t) for k in parse_array_spec(spec) or ())
    return out


def in_flight(job: GridJob, intents: dict[int, float]) -> list[str]:
    """Tags of the local jobs whose submission has an unknown outcome: journaled (or, in records
    of older versions, SUBMITTING) and without a batch id."""
    return [
        lj.tag
        for lj in job.local_jobs()
        if not lj.batch_id
        and (lj.state is LocalState.SUBMITTING or (lj.state is LocalState.PLANNED and lj.index in intents))
    ]
