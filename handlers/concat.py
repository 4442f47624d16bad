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
from dataclasses import dataclass

from jim.errors import InvalidAttribute, PlanError
from jim.handlers import inputdata
from jim.handlers.base import Handler, LocalSlice, Plan
from jim.jobdesc import JobDescription
from jim.split.merge import MergeFile, split_merge_by_size


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


class ConcatHandler(inputdata.InputDataWorkArea, Handler):
    """Concatenation of files into bigger ones, grouped by size (merge by size)."""

    name = "concat"
    attributes = {
        "inputdata": "files to concatenate: NAME (size read from the file), or (NAME SIZE [EVENTS])",
        "maxmergesize": "most bytes one local job merges",
        "minmergesize": "groups below this many bytes are marked forced",
        "maxmergeevents": "most events one local job merges",
    }
    Options = ConcatOptions
    options: ConcatOptions

    def getNumSubmissionTimes(self, desc: JobDescription) -> Plan:
        self.executable_argv(desc)
        files = [self._merge_file(desc, e, MergeFile) for e in inputdata.entries(desc)]
        max_size = desc.get_int("maxmergesize", None, minimum=1) or int(self.options.max_merge_size)
        min_size = desc.get_int("minmergesize", None, minimum=0)
        if min_size is None:
            min_size = min(int(self.options.min_merge_size), max_size)
        max_events = desc.get_int("maxmergeevents", None, minimum=1) or int(self.options.max_merge_events)
        cap, cap_why = self.max_local_jobs(desc)
        try:
            groups = split_merge_by_size(
                files, max_merge_size=max_size, max_merge_events=max_events, min_merge_size=min_size, max_jobs=cap
            )
        except ValueError as e:
            if "more than the limit" in str(e):
                raise PlanError(f"{e} ({cap_why.replace('-', ' ')})") from None
            raise InvalidAttribute(f"concat: {e}") from None
        limit = self.time_limit(float(self.options.safety))
        slices = []
        for k, g in enumerate(groups):
            est = self._estimate(g.size)
            attrs = {
                "files": g.count,
                "inputFiles": " ".join(g.files),
                "size": g.size,
                "events": g.events,
                "estSeconds": f"{est:.0f}",
            }
            if g.oversize:
                attrs["oversize"] = "true"
            if g.forced:
                attrs["forced"] = "true"
            env = {
                **inputdata.slice_env(g.files),
                "JIM_INPUT_FILE_LIST": inputdata.list_name(k),
                "JIM_MERGE_SIZE": str(g.size),
                "JIM_MERGE_EVENTS": str(g.events),
            }
            slices.append(LocalSlice(attrs=attrs, env=env))
        binding = self._binding(files, groups, max_size, max_events)
        longest = max(self._estimate(g.size) for g in groups)
        expl = (
            f"{len(files)} files, {sum(f.size for f in files)} bytes, merged into {len(groups)} local jobs "
            f"of at most {max_size} bytes and {max_events} events (binding: {binding.replace('-', ' ')}); "
            f"longest about {longest:.0f} s against {limit.describe()}"
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
                "maxMergeSize": max_size,
                "maxMergeEvents": max_events,
                "minMergeSize": min_size,
                "estSecondsPerJob": f"{longest:.0f}",
                **limit.record(),
            },
        )

    def _merge_file(self, desc, entry, MergeFile):
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

    def _estimate(self, size: int) -> float:
        return float(self.options.merge_overhead) + int(self.options.merge_passes) * size / float(
            self.options.merge_rate
        )

    @staticmethod
    def _binding(files, groups, max_size, max_events) -> str:
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
