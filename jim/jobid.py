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


# ---------------------------------------------------------------------------
# batch job names: how a tag travels through a batch system
# ---------------------------------------------------------------------------

#: Every batch job jim submits is named ``jim.<grid job id>.<offset>`` (``.<offset>.<attempt>``
#: for a later attempt): jim's tag, by which a job is known (never by its batch id alone, which
#: batch systems hand out again).
NAME_PREFIX = "jim."


def tag_name(grid_id: str, offset: int, attempt: int = 1) -> str:
    """The batch job name of the array (or job) whose first task is local job ``offset``, for
    attempt ``attempt`` of its local jobs (every task of an array is the same attempt)."""
    return NAME_PREFIX + local_tag(grid_id, offset, attempt)


class TagName:
    """A batch job name made by :func:`tag_name`, parsed.  (A plain class: a dataclass or a
    NamedTuple would import modules ``jim poll`` does without.)"""

    __slots__ = ("attempt", "grid_id", "offset")

    def __init__(self, grid_id: str, offset: int, attempt: int = 1):
        self.grid_id, self.offset, self.attempt = grid_id, offset, attempt

    def _key(self) -> tuple[str, int, int]:
        return (self.grid_id, self.offset, self.attempt)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TagName) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"TagName({self.grid_id!r}, {self.offset}, {self.attempt})"

    def tag(self, task: int = 0) -> str:
        """jim's tag of the local job that is task ``task`` (counted from 0) of this array."""
        return local_tag(self.grid_id, self.offset + task, self.attempt)


def parse_tag_name(name: str | None) -> TagName | None:
    """The parts of a job name made by :func:`tag_name`, else None."""
    if not name or not name.startswith(NAME_PREFIX):
        return None
    grid, *nums = name[len(NAME_PREFIX) :].split(".")
    if not grid or len(nums) not in (1, 2) or not all(n.isascii() and n.isdigit() and len(n) <= 9 for n in nums):
        return None
    attempt = int(nums[1]) if len(nums) == 2 else 1
    return TagName(grid, int(nums[0]), attempt) if attempt >= 1 and (len(nums) == 1 or attempt >= 2) else None
