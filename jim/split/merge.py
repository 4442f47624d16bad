"""Merge-by-size splitting for file concatenation (WMCore ``ParentlessMergeBySize``).

Input files (name, size in bytes, event count) are grouped, in order, into
merge jobs whose total size stays within ``max_merge_size`` and whose total
events stay within ``max_merge_events``.  Each :class:`MergeSlice` lists its
files and carries its total size and events, from which the caller estimates
the time (WMCore uses 300 s + 4 passes x size / 5 MB/s).

The rule
--------
Files accumulate into the current group until adding the next one would take
the group *above* ``max_merge_size`` or ``max_merge_events``; then the group is
emitted and the file starts the next one.  A group may reach a limit exactly.

Edge cases (decided)
--------------------
* **Order**: the caller's order is kept -- for concatenation the output order
  is the input order.  (WMCore sorts by run, lumi and first event; merging
  across runs is always allowed here, WMCore's ``merge_across_runs=True``.)
* **Oversize input** (alone above ``max_merge_size`` or ``max_merge_events``):
  the current group is emitted first, then the file becomes a merge job of its
  own with ``oversize=True``; it is never cut and never joined.
* **Under ``min_merge_size``**: WMCore holds a small group back for a later pass
  and force-merges it only when the input fileset is *closed*.  jim's input is
  always closed (all files are known at submit), so, like WMCore on a closed
  fileset, jim **emits** such a group as its own job -- never drops it, never
  holds it -- and marks it ``forced=True`` so the caller can report or police it.
  It is not folded into a neighbour: the greedy rule already made the neighbour
  too full to take it.  This can be the last group, a group emitted before an
  oversize file, or a group cut by the events limit.
* ``max_merge_events=None``: no events limit.  ``min_merge_size=0``: nothing is
  ever ``forced``.  ``min_merge_size > max_merge_size``: ``ValueError``.
* 0-byte and 0-event files are ordinary inputs.  No input at all:
  ``ValueError`` ("nothing to merge").  A file listed twice: ``ValueError``.
* Defaults are WMCore's: 1 GB, 1 MiB and 10^8 events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jim.split._check import (
    file_name,
    job_count,
    no_string,
    non_negative_int,
    optional_positive_int,
    positive_int,
    unique_names,
)

__all__ = [
    "DEFAULT_MAX_MERGE_EVENTS",
    "DEFAULT_MAX_MERGE_SIZE",
    "DEFAULT_MIN_MERGE_SIZE",
    "MergeFile",
    "MergeSlice",
    "split_merge_by_size",
]

DEFAULT_MAX_MERGE_SIZE = 1_000_000_000
DEFAULT_MIN_MERGE_SIZE = 1_048_576
DEFAULT_MAX_MERGE_EVENTS = 100_000_000


@dataclass(frozen=True)
class MergeFile:
    """An input to merge: its name, size in bytes and event count."""

    name: str
    size: int
    events: int = 0

    def __post_init__(self) -> None:
        file_name(self.name)
        non_negative_int(f"size of file {self.name!r}", self.size)
        non_negative_int(f"events of file {self.name!r}", self.events)


@dataclass(frozen=True)
class MergeSlice:
    """The files one merge job concatenates, in order, with their total size and events.

    ``oversize``: a single input above a maximum, merged alone.
    ``forced``: total size below ``min_merge_size``, emitted only because the
    input is closed.
    """

    files: tuple[str, ...]
    size: int
    events: int
    oversize: bool = False
    forced: bool = False

    @property
    def count(self) -> int:
        """Number of files in the slice."""
        return len(self.files)


def split_merge_by_size(
    files: Iterable[MergeFile],
    *,
    max_merge_size: int = DEFAULT_MAX_MERGE_SIZE,
    max_merge_events: int | None = DEFAULT_MAX_MERGE_EVENTS,
    min_merge_size: int = DEFAULT_MIN_MERGE_SIZE,
    max_jobs: int | None = None,
) -> list[MergeSlice]:
    """Group ``files`` into merge jobs bounded by size and events (see the module docstring).

    Contract: concatenating the slices' files gives back the input in order;
    every slice that is not ``oversize`` has ``size <= max_merge_size`` and
    ``events <= max_merge_events``; an ``oversize`` slice holds exactly one
    file; ``forced`` is set exactly when ``size < min_merge_size``.  Raises
    ``ValueError`` on bad parameters, no or duplicate input, or more than
    ``max_jobs`` slices.
    """
    positive_int("max_merge_size", max_merge_size)
    optional_positive_int("max_merge_events", max_merge_events)
    non_negative_int("min_merge_size", min_merge_size)
    optional_positive_int("max_jobs", max_jobs)
    if min_merge_size > max_merge_size:
        raise ValueError(f"min_merge_size ({min_merge_size}) is above max_merge_size ({max_merge_size})")
    file_list = _merge_files(files)
    max_events = max_merge_events if max_merge_events is not None else float("inf")

    slices: list[MergeSlice] = []
    group: list[MergeFile] = []

    def emit(members: list[MergeFile], oversize: bool = False) -> None:
        if not members:
            return
        job_count(len(slices) + 1, max_jobs)
        size = sum(f.size for f in members)
        events = sum(f.events for f in members)
        slices.append(MergeSlice(tuple(f.name for f in members), size, events, oversize, forced=size < min_merge_size))

    size = events = 0
    for f in file_list:
        if f.size > max_merge_size or f.events > max_events:
            emit(group)
            group, size, events = [], 0, 0
            emit([f], oversize=True)
            continue
        if group and (size + f.size > max_merge_size or events + f.events > max_events):
            emit(group)
            group, size, events = [], 0, 0
        group.append(f)
        size += f.size
        events += f.events
    emit(group)
    return slices


def _merge_files(files: Iterable[MergeFile]) -> list[MergeFile]:
    no_string("files", files)
    file_list = list(files)
    for f in file_list:
        if not isinstance(f, MergeFile):
            raise ValueError(f"files must be MergeFile objects, got {f!r}")
    if not file_list:
        raise ValueError("nothing to merge: no input files")
    unique_names(f.name for f in file_list)
    return file_list
