"""Grid job ids: ``<yyyymmdd>-<hhmmss>-<hex>``, the UTC time of the submit and 4 random bytes.

The one owner of the format.  Ids become file names (``db/<id>.xml``,
``jobs/<id>/``) and URL paths, so every id from outside is checked here
before anything else sees it.  Only ``os`` and ``time`` are imported: ``jim
poll`` checks its id first thing.
"""

from __future__ import annotations

import os
import time

#: The id as a regular expression (for URL routes); :func:`valid_job_id` checks the same without ``re``.
JOB_ID_PATTERN = r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6,12}"

_HEX = frozenset("0123456789abcdef")


def new_job_id(t: float | None = None) -> str:
    """A fresh grid job id for a submit at time ``t`` (default: now)."""
    t = time.time() if t is None else t
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(t)) + "-" + os.urandom(4).hex()


def valid_job_id(job_id: object) -> bool:
    """True when ``job_id`` matches :data:`JOB_ID_PATTERN` exactly."""
    if not isinstance(job_id, str):
        return False
    parts = job_id.split("-")
    return (
        len(parts) == 3
        and len(parts[0]) == 8
        and parts[0].isascii()
        and parts[0].isdigit()
        and len(parts[1]) == 6
        and parts[1].isascii()
        and parts[1].isdigit()
        and 6 <= len(parts[2]) <= 12
        and _HEX.issuperset(parts[2])
    )
