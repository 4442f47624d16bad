"""Event-based splitting: inclusive first/last event per local job.

Two entry points, both pure:

* :func:`split_events` -- generated events (Monte Carlo: no input file).
  ``total`` events numbered from ``first`` are cut into windows of at most
  ``per_job`` events.
* :func:`split_event_files` -- real input files with known event counts
  (WMCore ``EventBased``).  Each file is cut on its own; no slice ever spans
  two files.

Both return :class:`EventSlice` objects: ``first`` and ``last`` are *inclusive*
(``count = last - first + 1``), as WMCore's ``FirstEvent``/``LastEvent``.

Shapes
------
``balanced=False`` (default, WMCore): full windows of ``per_job`` events and a
shorter tail.  ``balanced=True``: the *same number* of windows,
``ceil(total / per_job)``, with sizes that differ by at most one, larger ones
first (``10`` by ``4`` gives ``4, 3, 3`` instead of ``4, 4, 2``).  Balancing
never raises the number of jobs and never exceeds ``per_job``.

Edge cases (decided)
--------------------
* ``per_job <= 0`` (or not an int): ``ValueError``.
* ``split_events`` with ``total == 0``: ``ValueError``.  Nothing to generate is
  a mistake in the request, not a job.  ``total < 0`` likewise.  An empty file
  list for :func:`split_event_files` is refused the same way.
* ``total < per_job``: one short job.  ``total == k * per_job``: ``k`` full
  jobs, no empty tail.  ``total == k * per_job + 1``: ``k`` full jobs and a
  tail of one event (balanced: ``k + 1`` jobs of nearly equal size).
* **0-event input file**: as in WMCore it still gets exactly one slice, whose
  ``first`` is the file's first event and whose ``last`` is ``None`` ("no last
  event"; ``count == 0``; ``is_open`` is true).  The job is run once over the
  file (e.g. to produce an empty output or metadata) rather than silently
  dropped.  This is the only way an :class:`EventSlice` can be empty.
* **32-bit event numbers**: generated event numbers are unsigned 32-bit in the
  field's generators.  WMCore restarts the counter at 1 when it would pass
  ``2**32 - 1``; jim **rejects** instead (``ValueError``), because a wrap
  silently repeats event numbers (and seeds derived from them) inside one grid
  job.  The limit is :data:`MAX_EVENT_NUMBER` and applies to
  :func:`split_events` only; give ``EventOptions(max_event=None)`` for a
  generator with 64-bit event numbers.  Positions inside input files are not
  event numbers and are not limited.
* ``max_jobs``: when given, more slices than that is a ``ValueError`` raised
  before any slice is built.

Lumi sections of generated events (WMCore ``events_per_lumi``)
---------------------------------------------------------------
With ``EventOptions(events_per_lumi=...)``, :func:`split_events` also numbers
each job's events in luminosity sections of that size, as WMCore's EventBased
does for production: a job of ``count`` events gets
``ceil(count / events_per_lumi)`` lumis (its last one may be short), numbered
on from the previous job's last lumi, starting at ``first_lumi`` (default 1).
A job never shares a lumi with another.  Without ``events_per_lumi`` no lumis
are assigned (``first_lumi`` and ``last_lumi`` of the slices are ``None``);
WMCore's default (one lumi per job) is ``events_per_lumi = per_job``.  Lumi
numbers obey the same 32-bit limit as event numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from jim.split._check import (
    file_name,
    flag,
    is_int,
    job_count,
    no_string,
    non_negative_int,
    optional_positive_int,
    positive_int,
    unique_names,
)

__all__ = [
    "MAX_EVENT_NUMBER",
    "EventFile",
    "EventOptions",
    "EventSlice",
    "count_event_jobs",
    "split_event_files",
    "split_events",
]

MAX_EVENT_NUMBER = 2**32 - 1
"""Largest event number an unsigned 32-bit counter holds (WMCore wraps here; jim refuses)."""


@dataclass(frozen=True)
class EventSlice:
    """Events ``first`` .. ``last`` inclusive, optionally inside input ``file``.

    ``last is None`` marks the slice of a 0-event input file: it has a first
    event but no last one, and ``count == 0``.  ``first_lumi`` .. ``last_lumi``
    (inclusive) are the lumi sections of a generated slice made with
    ``events_per_lumi``, else ``None``.
    """

    first: int
    last: int | None
    file: str | None = None
    first_lumi: int | None = None
    last_lumi: int | None = None

    def __post_init__(self) -> None:
        if not is_int(self.first):
            raise ValueError(f"first event must be an integer, got {self.first!r}")
        if self.last is not None and (not is_int(self.last) or self.last < self.first):
            raise ValueError(f"last event must be an integer >= first ({self.first}), got {self.last!r}")

    @property
    def count(self) -> int:
        """Number of events in the slice (0 for a 0-event file's slice)."""
        return 0 if self.last is None else self.last - self.first + 1

    @property
    def is_open(self) -> bool:
        """True for the slice of a 0-event file (first event, no last event)."""
        return self.last is None


@dataclass(frozen=True)
class EventFile:
    """An input file with ``events`` events numbered from ``first_event``.

    ``first_event`` defaults to 1, like :func:`split_events`; pass 0 for
    WMCore's 0-based numbering.
    """

    name: str
    events: int
    first_event: int = 1

    def __post_init__(self) -> None:
        file_name(self.name)
        non_negative_int(f"events of file {self.name!r}", self.events)
        non_negative_int(f"first event of file {self.name!r}", self.first_event)


def count_event_jobs(total: int, per_job: int) -> int:
    """Number of slices :func:`split_events` makes for ``total`` events (either shape)."""
    return -(-total // per_job)


@dataclass(frozen=True, kw_only=True)
class EventOptions:
    """The options of :func:`split_events`: the lumi sections of the generated events
    (``events_per_lumi`` events each, numbered from ``first_lumi``; ``None``: no lumis), the
    largest event and lumi number (``max_event``; ``None``: no limit) and the most slices
    (``max_jobs``; ``None``: no limit).  A bad value is a ``ValueError`` when they are made.
    """

    events_per_lumi: int | None = None
    first_lumi: int = 1
    max_event: int | None = MAX_EVENT_NUMBER
    max_jobs: int | None = None

    def __post_init__(self) -> None:
        optional_positive_int("events_per_lumi", self.events_per_lumi)
        positive_int("first lumi", self.first_lumi)
        optional_positive_int("max_event", self.max_event)
        optional_positive_int("max_jobs", self.max_jobs)


_DEFAULTS = EventOptions()


def split_events(
    total: int, per_job: int, first: int = 1, balanced: bool = False, options: EventOptions = _DEFAULTS
) -> list[EventSlice]:
    """Cut ``total`` generated events, numbered from ``first``, into slices of at most ``per_job``.

    Contract: the slices are contiguous and ordered, cover ``first`` ..
    ``first + total - 1`` exactly once, each holds between 1 and ``per_job``
    events, and there are ``ceil(total / per_job)`` of them.  Raises
    ``ValueError`` for ``total <= 0``, ``per_job <= 0``, ``first < 0``, a last
    event above ``options.max_event`` (no wrap, see the module docstring) or
    more than ``options.max_jobs`` slices.  With ``options.events_per_lumi``,
    each slice also gets its lumi sections (see the module docstring).
    """
    positive_int("total events", total)
    positive_int("events per job", per_job)
    non_negative_int("first event", first)
    flag("balanced", balanced)
    _below_limit(
        "event",
        first,
        total,
        options.max_event,
        "jim does not wrap event numbers (choose a lower first event or fewer events)",
    )
    job_count(count_event_jobs(total, per_job), options.max_jobs)
    windows = list(_windows(first, total, per_job, balanced))
    if options.events_per_lumi is None:
        return [EventSlice(a, b) for a, b in windows]
    return _with_lumis(windows, options.events_per_lumi, options.first_lumi, options.max_event)


def _below_limit(what: str, first: int, count: int, limit: int | None, advice: str) -> None:
    """Refuse ``what`` numbers ``first`` .. ``first + count - 1`` that pass ``limit`` (None: no limit)."""
    last = first + count - 1
    if limit is not None and last > limit:
        raise ValueError(f"{what}s {first}..{last} pass the {what} number limit {limit}; {advice}")


def _with_lumis(
    windows: Sequence[tuple[int, int]], events_per_lumi: int, first_lumi: int, max_event: int | None
) -> list[EventSlice]:
    """The slices of ``windows``, each with its own lumis of ``events_per_lumi`` events, numbered on from
    ``first_lumi``."""
    counts = [count_event_jobs(b - a + 1, events_per_lumi) for a, b in windows]
    _below_limit("lumi", first_lumi, sum(counts), max_event, "choose a lower first lumi or more events per lumi")
    slices = []
    lumi = first_lumi
    for (a, b), n in zip(windows, counts, strict=True):
        slices.append(EventSlice(a, b, None, lumi, lumi + n - 1))
        lumi += n
    return slices


def split_event_files(
    files: Iterable[EventFile],
    per_job: int,
    *,
    balanced: bool = False,
    max_jobs: int | None = None,
) -> list[EventSlice]:
    """Cut each input file into slices of at most ``per_job`` events; no slice spans files.

    Contract: files keep their order and each file's slices are contiguous and
    ordered, covering all its events exactly once; a 0-event file gets one
    open slice (``last=None``).  ``balanced`` applies per file.  Raises
    ``ValueError`` for ``per_job <= 0``, no files, a file listed twice or more
    than ``max_jobs`` slices.
    """
    positive_int("events per job", per_job)
    flag("balanced", balanced)
    optional_positive_int("max_jobs", max_jobs)
    file_list = _as_event_files(files)
    if not file_list:
        raise ValueError("nothing to process: no input files")
    unique_names(f.name for f in file_list)
    job_count(sum(max(1, count_event_jobs(f.events, per_job)) for f in file_list), max_jobs)
    slices: list[EventSlice] = []
    for f in file_list:
        if f.events == 0:
            slices.append(EventSlice(f.first_event, None, f.name))
            continue
        windows = _windows(f.first_event, f.events, per_job, balanced)
        slices.extend(EventSlice(a, b, f.name) for a, b in windows)
    return slices


def _windows(first: int, total: int, per_job: int, balanced: bool) -> Iterator[tuple[int, int]]:
    """Inclusive ``(first, last)`` windows over ``total > 0`` events starting at ``first``."""
    n = count_event_jobs(total, per_job)
    if balanced:
        base, extra = divmod(total, n)
        sizes: Iterable[int] = (base + (1 if k < extra else 0) for k in range(n))
    else:
        sizes = (min(per_job, total - k * per_job) for k in range(n))
    start = first
    for size in sizes:
        yield start, start + size - 1
        start += size


def _as_event_files(files: Iterable[EventFile]) -> Sequence[EventFile]:
    no_string("files", files)
    file_list = list(files)
    for f in file_list:
        if not isinstance(f, EventFile):
            raise ValueError(f"files must be EventFile objects, got {f!r}")
    return file_list
