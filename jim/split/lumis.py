"""Lumi-based splitting (WMCore ``LumiBased``): whole luminosity sections per job.

Input is a sequence of :class:`LumiFile` (a file name, the ``(run, lumi)``
pairs it holds, and its event count); output is a list of :class:`LumiSlice`,
each listing the ``(file, run, lumi)`` units one local job processes plus an
event estimate (a lumi counts for its file's average events per lumi, as in
WMCore) from which the caller derives an estimated time.

Parameters (WMCore names in brackets)
-------------------------------------
* ``lumis_per_job`` [``lumis_per_job``]: at most this many lumis per job; > 0.
* ``total_lumis`` [``total_lumis``]: stop after this many lumis (counted after
  the mask).  ``None`` or ``0`` = no limit (``0`` is WMCore's default and means
  the same there).

and the :class:`LumiOptions`, the same for :mod:`jim.split.eventaware`:

* ``split_on_run`` [``splitOnRun``, default true]: a new job starts when the
  run changes between two consecutive lumis.
* ``halt_on_file_boundaries`` [``halt_job_on_file_boundaries``, default false]:
  a new job starts at each new file.
* ``lumi_mask`` [``runs`` + ``lumis``]: good ranges in the CMS JSON form
  ``{run: [[first, last], ...]}`` (inclusive; run keys may be ``int`` or
  decimal ``str``).  A run missing from the mask is entirely excluded.
* ``run_whitelist`` [``runWhitelist``]: only these runs.
* ``max_jobs`` [``job_limit``]: more jobs than this is a ``ValueError``.

Edge cases (decided)
--------------------
* **Order**: the caller's order of files, and of lumis inside a file, is kept.
  WMCore sorts files by lowest run (and lumis inside a file); sort before
  calling if that is wanted.  With unsorted input and ``split_on_run``, every
  change of run still starts a new job.
* **The unit** is one *occurrence* of a lumi in a file.  A lumi that appears in
  two files is processed once per file (WMCore's default; its
  ``applyLumiCorrection`` is not offered).  The same lumi twice in one file is
  a ``ValueError``.
* A file with no lumis is ignored (as in WMCore); so is a lumi that the mask or
  the whitelist excludes.  If nothing is left at all, ``ValueError``
  ("nothing to process") rather than a grid job with no local job.
* Events are estimated, not known per lumi: a file's ``events`` divided by the
  number of lumis it holds (all of them, masked or not), rounded to an integer
  as WMCore does (``int(round(events / lumis))``, halves to even: 151 events in
  3 lumis count 50 per lumi, 200 in 3 count 67).  A file with ``events == 0``
  gives 0-event lumis; they are still processed.
* No slice is empty; a file listed twice is a ``ValueError``.
* **Locations** (WMCore groups files by their exact set of locations and
  makes one job group per set): a :class:`LumiFile` may carry a ``location``
  (a name or a set of names; empty = none known).  Files are taken location
  set by location set, in the order each set first appears (inside a set the
  caller's order is kept), and a job never mixes two location sets; each slice
  records its ``location``.  Totals (``total_lumis``) count across all sets in
  that order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from jim.split._check import (
    file_name,
    flag,
    group_by_location,
    is_int,
    job_count,
    location_set,
    no_string,
    non_negative_int,
    optional_positive_int,
    positive_int,
    total_limit,
    unique_names,
)

__all__ = ["LumiFile", "LumiMask", "LumiOptions", "LumiSlice", "compact_lumis", "split_lumis"]

LumiMask = Mapping[int | str, Sequence[Sequence[int]]]
"""CMS JSON lumi mask: run -> list of inclusive ``[first, last]`` lumi ranges."""


@dataclass(frozen=True)
class LumiFile:
    """An input file: its ``(run, lumi)`` pairs in order, and its total event count."""

    name: str
    lumis: tuple[tuple[int, int], ...]
    events: int = 0
    location: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        file_name(self.name)
        object.__setattr__(self, "location", location_set(f"file {self.name!r}", self.location))
        no_string(f"lumis of file {self.name!r}", self.lumis)
        if not isinstance(self.lumis, Iterable):
            raise ValueError(f"lumis of file {self.name!r} must be a sequence of (run, lumi) pairs")
        pairs = tuple(_run_lumi(self.name, item) for item in self.lumis)
        if len(set(pairs)) != len(pairs):
            dup = next(p for i, p in enumerate(pairs) if p in pairs[:i])
            raise ValueError(f"file {self.name!r} lists run {dup[0]} lumi {dup[1]} more than once")
        object.__setattr__(self, "lumis", pairs)
        non_negative_int(f"events of file {self.name!r}", self.events)

    @property
    def events_per_lumi(self) -> Fraction:
        """Average events per lumi, rounded to an integer as WMCore does; 0 for a file without lumis."""
        return Fraction(round(Fraction(self.events, len(self.lumis)))) if self.lumis else Fraction(0)


@dataclass(frozen=True)
class LumiSlice:
    """The ``(file, run, lumi)`` units of one local job, in processing order.

    ``estimated_events`` is the sum of each unit's file average.  A slice whose
    ``failed_on_creation`` is set (only :mod:`jim.split.eventaware` makes them)
    must be recorded as failed with that reason and never submitted.
    """

    lumis: tuple[tuple[str, int, int], ...]
    estimated_events: float
    failed_on_creation: str | None = field(default=None)
    location: frozenset[str] = field(default=frozenset())

    @property
    def count(self) -> int:
        """Number of lumis in the slice."""
        return len(self.lumis)

    @property
    def files(self) -> tuple[str, ...]:
        """The input files the slice reads, in order of first use."""
        return tuple(dict.fromkeys(f for f, _, _ in self.lumis))

    @property
    def runs(self) -> tuple[int, ...]:
        """The runs the slice touches, in order of first use."""
        return tuple(dict.fromkeys(r for _, r, _ in self.lumis))

    def mask(self) -> dict[int, list[list[int]]]:
        """The slice's lumis as a CMS JSON lumi mask (see :func:`compact_lumis`)."""
        return compact_lumis((r, lumi) for _, r, lumi in self.lumis)


def compact_lumis(pairs: Iterable[tuple[int, int]]) -> dict[int, list[list[int]]]:
    """Fold ``(run, lumi)`` pairs into ``{run: [[first, last], ...]}`` (sorted, contiguous ranges)."""
    by_run: dict[int, set[int]] = {}
    for run, lumi in pairs:
        by_run.setdefault(run, set()).add(lumi)
    result: dict[int, list[list[int]]] = {}
    for run in sorted(by_run):
        ranges: list[list[int]] = []
        for lumi in sorted(by_run[run]):
            if ranges and ranges[-1][1] == lumi - 1:
                ranges[-1][1] = lumi
            else:
                ranges.append([lumi, lumi])
        result[run] = ranges
    return result


@dataclass(frozen=True, kw_only=True)
class LumiOptions:
    """What the lumi splitters (:func:`split_lumis`, :func:`jim.split.eventaware.split_event_aware`) take
    and where they must end a job (see the module docstring); the defaults are WMCore's.

    A bad flag or ``max_jobs`` is a ``ValueError`` when the options are made; the mask and the
    whitelist are checked when a splitter reads them.
    """

    split_on_run: bool = True
    halt_on_file_boundaries: bool = False
    lumi_mask: LumiMask | None = None
    run_whitelist: Collection[int] | None = None
    max_jobs: int | None = None

    def __post_init__(self) -> None:
        flag("split_on_run", self.split_on_run)
        flag("halt_on_file_boundaries", self.halt_on_file_boundaries)
        optional_positive_int("max_jobs", self.max_jobs)


_DEFAULTS = LumiOptions()


def split_lumis(
    files: Iterable[LumiFile],
    lumis_per_job: int,
    options: LumiOptions = _DEFAULTS,
    *,
    total_lumis: int | None = None,
) -> list[LumiSlice]:
    """Group the selected lumis into jobs of at most ``lumis_per_job`` (WMCore LumiBased).

    Contract: every selected lumi occurrence lands in exactly one slice, in
    input order once grouped by location; each slice has 1 .. ``lumis_per_job``
    lumis, a single location set, a single run if ``options.split_on_run``, a
    single file if ``options.halt_on_file_boundaries``; at most
    ``total_lumis`` lumis in all.  A job is closed only when the next lumi would
    break one of those rules.  Raises ``ValueError`` on bad parameters, nothing
    to process, or more than ``options.max_jobs`` slices.
    """
    positive_int("lumis per job", lumis_per_job)
    total_lumis = total_limit("total_lumis", total_lumis)
    builder = SliceBuilder(options)
    for taken, unit in enumerate(select_lumis(files, options)):
        if total_lumis is not None and taken == total_lumis:
            break
        if builder.current and builder.current_count >= lumis_per_job:
            builder.close()
        builder.add(unit)
    return builder.finish()


@dataclass(frozen=True)
class LumiUnit:
    """One lumi occurrence on its way into a slice (internal to jim.split)."""

    file: str
    run: int
    lumi: int
    events: Fraction
    file_lumis: int
    location: frozenset[str] = frozenset()


def select_lumis(files: Iterable[LumiFile], options: LumiOptions) -> Iterator[LumiUnit]:
    """Validate the input and yield, in order, every lumi that passes the options' mask and whitelist.

    Raises ``ValueError`` for bad input, and ``ValueError("nothing to process")``
    if no lumi at all passes.
    """
    no_string("files", files)
    file_list = list(files)
    for f in file_list:
        if not isinstance(f, LumiFile):
            raise ValueError(f"files must be LumiFile objects, got {f!r}")
    unique_names(f.name for f in file_list)
    keep = _lumi_filter(options.lumi_mask, options.run_whitelist)
    any_selected = False
    for f in group_by_location(file_list, lambda f: f.location):
        per_lumi = f.events_per_lumi
        for run, lumi in f.lumis:
            if keep(run, lumi):
                any_selected = True
                yield LumiUnit(f.name, run, lumi, per_lumi, len(f.lumis), f.location)
    if not any_selected:
        if not any(f.lumis for f in file_list):
            raise ValueError("nothing to process: no input file has any lumi")
        raise ValueError("nothing to process: no lumi of the input passes the lumi mask and run whitelist")


class SliceBuilder:
    """Accumulates lumi units into the current job and closes jobs (internal to jim.split).

    ``add`` first closes the current job on a location change, a run change
    (``split_on_run``) or a file change (``halt_on_file_boundaries``); size
    limits are the caller's; more than ``max_jobs`` slices is a ``ValueError``.
    """

    def __init__(self, options: LumiOptions):
        self.split_on_run = options.split_on_run
        self.halt_on_file_boundaries = options.halt_on_file_boundaries
        self.max_jobs = options.max_jobs
        self.slices: list[LumiSlice] = []
        self.current: list[LumiUnit] = []
        self.current_events = Fraction(0)

    @property
    def current_count(self) -> int:
        return len(self.current)

    def breaks_boundary(self, unit: LumiUnit) -> bool:
        """True if ``unit`` may not join the current job: a location, run or file boundary."""
        if not self.current:
            return False
        last = self.current[-1]
        return (
            unit.location != last.location
            or (self.split_on_run and unit.run != last.run)
            or (self.halt_on_file_boundaries and unit.file != last.file)
        )

    def add(self, unit: LumiUnit) -> None:
        if self.breaks_boundary(unit):
            self.close()
        self.current.append(unit)
        self.current_events += unit.events

    def close(self) -> None:
        if self.current:
            units = tuple((u.file, u.run, u.lumi) for u in self.current)
            self._emit(LumiSlice(units, float(self.current_events), location=self.current[0].location))
            self.current = []
            self.current_events = Fraction(0)

    def emit_failed(self, unit: LumiUnit, reason: str) -> None:
        """Close the current job, then record ``unit`` alone as failed on creation."""
        self.close()
        self._emit(LumiSlice(((unit.file, unit.run, unit.lumi),), float(unit.events), reason, unit.location))

    def finish(self) -> list[LumiSlice]:
        self.close()
        return self.slices

    def _emit(self, s: LumiSlice) -> None:
        job_count(len(self.slices) + 1, self.max_jobs)
        self.slices.append(s)


def _run_lumi(name: str, item: object) -> tuple[int, int]:
    pair: Any = item  # whatever it is: anything but a pair of integers is refused below
    try:
        run, lumi = pair
    except (TypeError, ValueError):
        raise ValueError(f"lumis of file {name!r} must be (run, lumi) pairs, got {item!r}") from None
    if not (is_int(run) and is_int(lumi)) or run < 0 or lumi < 0:
        raise ValueError(f"file {name!r}: run and lumi must be non-negative integers, got {item!r}")
    return run, lumi


def _lumi_filter(lumi_mask: LumiMask | None, run_whitelist: Collection[int] | None) -> Callable[[int, int], bool]:
    """Return ``keep(run, lumi) -> bool`` for the mask and whitelist (validated here)."""
    runs: frozenset[int] | None = None
    if run_whitelist is not None:
        no_string("run_whitelist", run_whitelist)
        runs = frozenset(run_whitelist)
        for r in runs:
            non_negative_int("run in run_whitelist", r)
    ranges: dict[int, list[tuple[int, int]]] | None = None
    if lumi_mask is not None:
        if not isinstance(lumi_mask, Mapping):
            raise ValueError(f"lumi_mask must map run -> [[first, last], ...], got {lumi_mask!r}")
        ranges = {}
        for key, value in lumi_mask.items():
            run = _mask_run(key)
            ranges.setdefault(run, []).extend(_mask_ranges(run, value))

    def keep(run: int, lumi: int) -> bool:
        if runs is not None and run not in runs:
            return False
        if ranges is not None:
            return any(a <= lumi <= b for a, b in ranges.get(run, ()))
        return True

    return keep


def _mask_run(key: object) -> int:
    if isinstance(key, str) and key.strip().isdigit():
        return int(key)
    if is_int(key) and key >= 0:
        return key
    raise ValueError(f"lumi_mask run must be a non-negative integer, got {key!r}")


def _mask_ranges(run: int, value: object) -> list[tuple[int, int]]:
    no_string(f"lumi_mask ranges of run {run}", value)
    if not isinstance(value, Iterable):
        raise ValueError(f"lumi_mask run {run}: ranges must be a list of [first, last], got {value!r}")
    out = []
    for item in value:
        try:
            a, b = item
        except (TypeError, ValueError):
            raise ValueError(f"lumi_mask run {run}: a range must be [first, last], got {item!r}") from None
        if not (is_int(a) and is_int(b)) or a < 0 or b < a:
            raise ValueError(f"lumi_mask run {run}: bad range {item!r} (need integers 0 <= first <= last)")
        out.append((a, b))
    return out
