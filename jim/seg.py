"""GRAM SEG events: in push mode, one line per grid-state change for the gatekeeper's event generator.

The gatekeeper's job manager, in SEG mode, reads ``<seg dir>/<yyyymmdd>``
files (one per UTC day) in which every line is ``001;<epoch>;<job id>;<GRAM
state number>;<exit code>``.  jim appends a line whenever a grid job's state
changes (:mod:`jim.monitor`, :mod:`jim.cancel`).  The directory is the one
the GRAM module named at submit (the record's ``meta segDir``); without one
(poll mode) nothing is written.  This module is the only writer.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from jim.record import GridJob

log = logging.getLogger("jim.seg")


def event_line(job: GridJob, at: float) -> str:
    """The SEG line for the grid job's current state."""
    state = job.state
    code = job.exit_code if state.terminal and job.exit_code is not None else 0
    return f"001;{int(at)};{job.id};{int(state)};{code}\n"


def emit(job: GridJob) -> None:
    """Append the event of the grid job's current state (push mode only)."""
    seg_dir = job.meta("segDir")
    if not seg_dir:
        return
    now = time.time()
    path = Path(seg_dir) / time.strftime("%Y%m%d", time.gmtime(now))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, event_line(job, now).encode())
        finally:
            os.close(fd)
    except OSError as e:
        log.error("cannot append SEG event for %s to %s: %s", job.id, path, e)
