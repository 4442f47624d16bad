"""``concat``: concatenate (merge) files into fewer, bigger ones, grouped by size.

The files come from ``inputdata`` (see :mod:`jim.handlers.inputdata`): ``NAME``
or ``(NAME SIZE [EVENTS])``.  Without SIZE the file is looked up on the
gatekeeper host (a relative name against ``directory``) and its size read;
give SIZE when the gatekeeper cannot see the files (or for a URL).

Groups are made by :func:`jim.split.merge.split_merge_by_size` (WMCore
ParentlessMergeBySize): in input order, a group grows until the next file would
take it above ``maxmergesize`` bytes or ``maxmergeevents`` events (defaults:
the options ``max_merge_size`` 1 GB, ``max_merge_events`` 10^8).  A file
alone above a maximum is merged alone (slice ``oversize``); a group below
``minmergesize`` (option ``min_merge_size``, 1 MiB) is still merged, marked
``forced`` -- all inputs are known at submit, so nothing waits.

The binding constraint is what closed most groups: ``max-merge-size``,
``max-merge-events`` or ``oversize-input``; ``single-merge`` when everything
fits one local job.  Each local job gets ``JIM_INPUT_FILES``,
``JIM_INPUT_FILE_LIST``, ``JIM_MERGE_SIZE`` and ``JIM_MERGE_EVENTS``
(``files_as_arguments = true`` also appends the files to its arguments), and
an estimated duration, WMCore's ``overhead + passes x size / rate`` (options
``merge_overhead`` 300 s, ``merge_passes`` 4, ``merge_rate`` 5 MB/s), recorded
as ``estSeconds`` next to the plan's ``timeLimit``.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jim.errors import InvalidAttribute, PlanError
from jim.handlers import inputdata
from jim.handlers.base import Handler, LocalSlice, Plan
from jim.jobdesc import JobDescription
from jim.split.merge import MergeFile, MergeSlice, split_merge_by_size


@dataclass(frozen=True)
class ConcatOptions(inputdata.InputDataOptions):
    """``[handlers.concat]``: how merge groups are sized (bytes, events) and how long a merge is estimated to take
    (``merge_overhead + merge_passes x size / merge_rate`` seconds)."""

    max_merge_size: int = 1_000_000_000
    min_merge_size: int = 1_048_576
    max_merge_events: int = 100_000_000
    merge_overhead: float = 300.0
    merge_passes: int = 4
    merge_rate: float = 5_000_000.0


@dataclass(frozen=True)
class _Bounds:
    """The bounds of one merge group: the user's, else the options'."""

    max_size: int
    min_size: int
    max_events: int

    @classmethod
    def of(cls, desc: JobDescription, options: ConcatOptions) -> _Bounds:
        max_size = desc.get_int("maxmergesize", None, minimum=1) or int(options.max_merge_size)
        min_size = desc.get_int("minmergesize", None, minimum=0)
        if min_size is None:
            min_size = min(int(options.min_merge_size), max_size)
        max_events = desc.get_int("maxmergeevents", None, minimum=1) or int(options.max_merge_events)
        return cls(max_size, min_size, max_events)


class ConcatHandler(inputdata.InputDataWorkArea, Handler):
    """Concatenation of files into bigger ones, grouped by size (merge by size)."""

    name = "concat"
    output_merge = "concat"  # (one stream of results, in local-job order)
    attributes = {
        "inputdata": "files to concatenate: NAME (size read from the file), or (NAME SIZE [EVENTS])",
        "maxmergesize": "most bytes one local job merges",
        "minmergesize": "groups below this many bytes are marked forced",
        "maxmergeevents": "most events one local job merges",
    }
    Options = ConcatOptions
    options: ConcatOptions

    def getNumSubmissionTimes(self, desc: JobDescription) -> Plan:
        """See :mod:`jim.handlers.base`; how files are grouped is in the module docstring."""
        self.executable_argv(desc)
        files = [_merge_file(e) for e in inputdata.entries(desc)]
        bounds = _Bounds.of(desc, self.options)
        cap, cap_why = self.max_local_jobs(desc)
        groups = _groups(files, bounds, cap, cap_why)
        limit = self.time_limit(float(self.options.safety))
        slices = [self._slice(k, g) for k, g in enumerate(groups)]
        binding = _binding(files, groups, bounds.max_size)
        longest = max(self._estimate(g.size) for g in groups)
        expl = (
            f"{len(files)} files, {sum(f.size for f in files)} bytes, merged into {len(groups)} local jobs "
            f"of at most {bounds.max_size} bytes and {bounds.max_events} events (binding: "
            f"{binding.replace('-', ' ')}); longest about {longest:.0f} s against {limit.describe()}"
        )
        if longest > limit.seconds:
            expl += " -- OVER the limit"
        return Plan(
            slices,
            binding,
            expl,
            attrs={
                "unit": "bytes",
                "total": sum(f.size for f in files),
                "inputFiles": len(files),
                "maxMergeSize": bounds.max_size,
                "maxMergeEvents": bounds.max_events,
                "minMergeSize": bounds.min_size,
                "estSecondsPerJob": f"{longest:.0f}",
                **limit.record(),
            },
        )

    def _slice(self, k: int, group: MergeSlice) -> LocalSlice:
        """Local job ``k``, merging ``group``: its files, size, events and estimated seconds."""
        attrs: dict[str, Any] = {
            "files": group.count,
            "inputFiles": " ".join(group.files),
            "size": group.size,
            "events": group.events,
            "estSeconds": f"{self._estimate(group.size):.0f}",
        }
        if group.oversize:
            attrs["oversize"] = "true"
        if group.forced:
            attrs["forced"] = "true"
        env = {
            **inputdata.slice_env(group.files),
            "JIM_INPUT_FILE_LIST": inputdata.list_name(k),
            "JIM_MERGE_SIZE": str(group.size),
            "JIM_MERGE_EVENTS": str(group.events),
        }
        return LocalSlice(attrs=attrs, env=env)

    def _estimate(self, size: int) -> float:
        """The seconds a merge of ``size`` bytes is estimated to take."""
        return float(self.options.merge_overhead) + int(self.options.merge_passes) * size / float(
            self.options.merge_rate
        )


def _merge_file(entry: inputdata.InputEntry) -> MergeFile:
    """A file to merge: ``(NAME SIZE [EVENTS])``, the size read from the file when not given."""
    size = inputdata.count(entry, 0, "size")
    events = inputdata.count(entry, 1, "events") or 0
    if len(entry.columns) > 2:
        raise InvalidAttribute(f"inputdata {entry.name}: concat takes (NAME SIZE [EVENTS])")
    if size is None:
        try:
            size = os.stat(entry.name).st_size  # made absolute against directory already
        except OSError as e:
            raise InvalidAttribute(
                f"inputdata {entry.name}: cannot read its size ({e.strerror}); give it as (NAME SIZE)",
                gram_error=135,
            ) from None
    return MergeFile(entry.name, size, events)


def _groups(files: list[MergeFile], bounds: _Bounds, cap: int, cap_why: str) -> list[MergeSlice]:
    """The merge groups; more than ``cap`` is a :class:`PlanError` that says why."""
    try:
        return split_merge_by_size(
            files,
            max_merge_size=bounds.max_size,
            max_merge_events=bounds.max_events,
            min_merge_size=bounds.min_size,
            max_jobs=cap,
        )
    except ValueError as e:
        if "more than the limit" in str(e):
            raise PlanError(f"{e} ({cap_why.replace('-', ' ')})") from None
        raise InvalidAttribute(f"concat: {e}") from None


def _binding(files: Sequence[MergeFile], groups: Sequence[MergeSlice], max_size: int) -> str:
    """What closed most groups: an oversize input, the size bound or the events bound (one group: none)."""
    if len(groups) == 1:
        return "single-merge"
    size_of = {f.name: f for f in files}
    causes: Counter[str] = Counter()
    for a, b in zip(groups, groups[1:]):
        if a.oversize or b.oversize:
            causes["oversize-input"] += 1
        elif a.size + size_of[b.files[0]].size > max_size:
            causes["max-merge-size"] += 1
        else:
            causes["max-merge-events"] += 1
    return causes.most_common(1)[0][0]
