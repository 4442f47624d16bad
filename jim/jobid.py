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


# ---------------------------------------------------------------------------
# local jobs: their tags and work directories, per attempt
# ---------------------------------------------------------------------------


def local_tag(job_id: str, index: int, attempt: int = 1) -> str:
    """jim's tag of attempt ``attempt`` of local job ``index``: ``<id>.<index>`` for the first,
    ``<id>.<index>.<attempt>`` for the others (an id has no dot: the form cannot be ambiguous)."""
    return f"{job_id}.{int(index)}" if attempt <= 1 else f"{job_id}.{int(index)}.{int(attempt)}"


def parse_local_tag(tag: str) -> tuple[str, int, int] | None:
    """(grid job id, index, attempt) from a tag made by :func:`local_tag`, else None."""
    parts = tag.split(".")
    if len(parts) not in (2, 3) or not valid_job_id(parts[0]):
        return None
    nums = parts[1:]
    if not all(p.isascii() and p.isdigit() and len(p) <= 9 for p in nums):
        return None
    attempt = int(nums[1]) if len(nums) == 2 else 1
    if len(nums) == 2 and attempt < 2:
        return None  # the first attempt's tag never carries its number
    return parts[0], int(nums[0]), attempt


def local_dir_name(index: int, attempt: int = 1) -> str:
    """The name of an attempt's directory under ``jobs/<id>/local/``: ``<index>``, or
    ``<index>.<attempt>`` after the first, so that a late attempt never writes into the next one's."""
    return str(int(index)) if attempt <= 1 else f"{int(index)}.{int(attempt)}"


def parse_local_dir_name(name: str) -> tuple[int, int] | None:
    """(index, attempt) from a name made by :func:`local_dir_name`, else None."""
    index, dot, attempt = name.partition(".")
    if not (index.isascii() and index.isdigit()) or (dot and not (attempt.isascii() and attempt.isdigit())):
        return None
    n = int(attempt) if dot else 1
    return (int(index), n) if n >= 1 and (not dot or n >= 2) else None
