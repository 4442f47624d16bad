"""``reprocessing``: process existing input files, split by files, events or lumi sections.

The files come from ``inputdata`` (see :mod:`jim.handlers.inputdata`):
``NAME`` or ``(NAME EVENTS [RUN:LUMIS ...])``.  ``splitting`` (or the option
of the same name, default ``files``) picks the splitter from :mod:`jim.split`:

``files`` (:func:`jim.split.files.split_files`, WMCore FileBased)
    ``filesperjob`` files per local job (binding ``user-files-per-job``), else
    the option ``files_per_job`` (``default-files-per-job``).  When that makes
    more local jobs than allowed and the user did not insist, the jobs grow to
    ``ceil(files / cap)`` files (``max-local-jobs``).
``events`` (:func:`jim.split.events.split_event_files`, WMCore EventBased)
    every file needs its EVENTS; no local job spans two files.  Events per job
    as for montecarlo (:meth:`Handler.event_budget`: ``eventsperjob``, else
    ``cpuperevent`` against the site's and the queue's limits, else the
    default).  ``JIM_FIRST_EVENT``/``JIM_LAST_EVENT`` are 1-based positions in
    the file, inclusive; a file with 0 events still gets one local job, with
    ``JIM_LAST_EVENT`` empty.
``lumis`` (:func:`jim.split.lumis.split_lumis`, WMCore LumiBased)
    ``lumisperjob`` lumi sections per job (else the option ``lumis_per_job``);
    files need their RUN:LUMIS.
``eventaware`` (:func:`jim.split.eventaware.split_event_aware`)
    whole lumi sections, about ``eventsperjob`` events per job (or what fits the
    time limit with ``cpuperevent``); a lumi section whose estimate alone is
    over the time limit becomes a local job **failed on creation** with the
    reason, never submitted.

Files may name their location (``@PLACE`` columns of ``inputdata``): the
``files``, ``lumis`` and ``eventaware`` modes group files by location set and
never mix two sets in one local job (WMCore's job groups); a slice records its
``location`` (space-separated names).

``lumimask`` (CMS JSON ``{"run": [[first, last], ...]}``) and ``runwhitelist``
select lumi sections in the two lumi modes.  Options ``split_on_run`` (default
true) and ``halt_on_file_boundaries`` (default false) shape them.

Each local job gets ``JIM_INPUT_FILES`` (space-separated), ``JIM_INPUT_FILE_LIST``
(a file in its working directory, one name per line) and, per mode,
``JIM_FIRST_EVENT``/``JIM_LAST_EVENT``/``JIM_EVENTS`` or ``JIM_LUMI_MASK``
(CMS JSON of its lumi sections) and ``JIM_RUNS``.  With ``files_as_arguments =
true`` the files are also appended to its arguments.  With ``cpuperevent`` and
known event counts every slice records ``estSeconds`` and the plan
``timeLimit``/``timeLimitBy``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from jim.errors import InvalidAttribute, PlanError
from jim.handlers import inputdata
from jim.handlers.base import EventBudget, Handler, LocalSlice, Plan
from jim.jobdesc import JobDescription
from jim.split.eventaware import split_event_aware
from jim.split.events import EventFile, EventSlice, split_event_files
from jim.split.files import FileSlice, split_files
from jim.split.lumis import LumiFile, LumiMask, LumiOptions, LumiSlice, split_lumis

MODES = ("files", "events", "lumis", "eventaware")


@dataclass(frozen=True)
class ReprocessingOptions(inputdata.InputDataOptions):
    """``[handlers.reprocessing]``: the default splitting and its sizes, and the lumi splitter's rules."""

    splitting: str = "files"
    files_per_job: int = 10
    lumis_per_job: int = 10
    default_events_per_job: int = 0
    balanced: bool = True
    split_on_run: bool = True
    halt_on_file_boundaries: bool = False


class ReprocessingHandler(inputdata.InputDataWorkArea, Handler):
    """Reprocessing of input files: split by files, events or lumi sections."""

    name = "reprocessing"
    output_merge = "indexed"  # (each local job's file kept apart: <stem>.<k><suffix>)
    attributes = {
        "inputdata": "files to process: NAME, or (NAME EVENTS [RUN:LUMIS ...])",
        "splitting": "how to split: files (default), events, lumis or eventaware",
        "filesperjob": "input files per local job (splitting=files)",
        "lumisperjob": "lumi sections per local job (splitting=lumis)",
        "lumimask": 'good lumi sections as CMS JSON: {"run": [[first, last], ...]}',
        "runwhitelist": "only these runs (lumi splitting)",
    }
    Options = ReprocessingOptions
    options: ReprocessingOptions

    def getNumSubmissionTimes(self, desc: JobDescription) -> Plan:
        """See :mod:`jim.handlers.base`; the modes are in the module docstring."""
        self.executable_argv(desc)
        mode = (desc.get("splitting") or str(self.options.splitting)).strip().lower()
        if mode not in MODES:
            raise InvalidAttribute(f"splitting must be one of {', '.join(MODES)}, got {mode!r}")
        entries = inputdata.entries(desc)
        cap, cap_why = self.max_local_jobs(desc)
        cpe = desc.get_float("cpuperevent", None, positive=True)
        seconds = cpe / self.speed() if cpe is not None else None
        plan = self._split(desc, entries, mode, cap, cap_why)
        for k, s in enumerate(plan.slices):
            s.env["JIM_INPUT_FILE_LIST"] = inputdata.list_name(k)
            _estimate(s, seconds)
        plan.attrs.update({"unit": mode, "inputFiles": len(entries)})
        if seconds is not None:
            self._against_time_limit(plan)
        return plan

    def _split(
        self, desc: JobDescription, entries: list[inputdata.InputEntry], mode: str, cap: int, cap_why: str
    ) -> Plan:
        """The plan of ``mode``; more than ``cap`` local jobs is a :class:`PlanError` that says why."""
        try:
            if mode == "files":
                return self._by_files(desc, entries, cap)
            if mode == "events":
                return self._by_events(desc, entries, cap)
            return self._by_lumis(desc, entries, cap, mode)
        except ValueError as e:
            if "more than the limit" in str(e):
                raise PlanError(f"{e} ({cap_why.replace('-', ' ')})") from None
            raise InvalidAttribute(f"{mode} splitting: {e}") from None

    def _against_time_limit(self, plan: Plan) -> None:
        """Record the time limit, and the longest local job's estimate against it."""
        limit = self.time_limit(float(self.options.safety))
        plan.attrs.update(limit.record())
        estimates = [
            float(s.attrs["estSeconds"]) for s in plan.slices if "estSeconds" in s.attrs and not s.failed_on_creation
        ]
        if estimates:
            longest = max(estimates)
            plan.attrs["estSecondsPerJob"] = f"{longest:.0f}"
            over = " -- OVER the limit" if longest > limit.seconds else ""
            plan.explanation += f"; longest local job about {longest:.0f} s against {limit.describe()}{over}"

    # -- the four modes ----------------------------------------------------------------
    def _by_files(self, desc: JobDescription, entries: list[inputdata.InputEntry], cap: int) -> Plan:
        names = [e.name for e in entries]
        user = desc.get_int("filesperjob", None, minimum=1)
        per_job, binding = (
            (user, "user-files-per-job") if user else (int(self.options.files_per_job), "default-files-per-job")
        )
        if math.ceil(len(names) / per_job) > cap and user is None:
            per_job, binding = math.ceil(len(names) / cap), "max-local-jobs"
        events = {e.name: inputdata.count(e, 0, "events") for e in entries}
        where = {e.name: e.location for e in entries if e.location}
        pieces = split_files(names, per_job, balanced=bool(self.options.balanced), max_jobs=cap, locations=where)
        slices = [_file_slice(p, events) for p in pieces]
        return Plan(
            slices,
            binding,
            f"{len(names)} input files in {len(slices)} local jobs of up to {max(p.count for p in pieces)} "
            f"files (binding: {binding.replace('-', ' ')})",
            attrs={"total": len(names), "perJob": per_job},
        )

    def _by_events(self, desc: JobDescription, entries: list[inputdata.InputEntry], cap: int) -> Plan:
        files = [_event_file(e) for e in entries]
        where = {e.name: " ".join(sorted(e.location)) for e in entries if e.location}
        budget = self.event_budget(desc, safety=float(self.options.safety), default_per_job=self._default_events())
        pieces = split_event_files(files, budget.per_job, balanced=bool(self.options.balanced), max_jobs=cap)
        slices = [_event_slice(p, where, budget) for p in pieces]
        total = sum(f.events for f in files)
        return Plan(
            slices,
            budget.binding,
            f"{total} events in {len(files)} input files, {len(slices)} local jobs of up to "
            f"{budget.per_job} events, none spanning two files (binding: {budget.binding.replace('-', ' ')})",
            attrs={
                "total": total,
                "perJob": budget.per_job,
                "cpuPerEvent": f"{budget.cpu_per_event:g}" if budget.cpu_per_event else None,
            },
        )

    def _by_lumis(self, desc: JobDescription, entries: list[inputdata.InputEntry], cap: int, mode: str) -> Plan:
        files = [
            LumiFile(e.name, inputdata.lumis(e, 1), inputdata.count(e, 0, "events") or 0, e.location) for e in entries
        ]
        if not any(f.lumis for f in files):
            raise InvalidAttribute(f"splitting={mode} needs the files' lumi sections: (NAME EVENTS RUN:LUMIS ...)")
        options = LumiOptions(
            split_on_run=bool(self.options.split_on_run),
            halt_on_file_boundaries=bool(self.options.halt_on_file_boundaries),
            lumi_mask=_lumi_mask(desc),
            run_whitelist=_run_whitelist(desc),
            max_jobs=cap,
        )
        if mode == "lumis":
            user = desc.get_int("lumisperjob", None, minimum=1)
            per_job, binding = (
                (user, "user-lumis-per-job") if user else (int(self.options.lumis_per_job), "default-lumis-per-job")
            )
            pieces = split_lumis(files, per_job, options)
            what = f"up to {per_job} lumi sections"
        else:
            budget = self.event_budget(desc, safety=float(self.options.safety), default_per_job=self._default_events())
            per_job, binding = budget.per_job, budget.binding
            pieces = split_event_aware(
                files,
                per_job,
                options,
                time_per_event=budget.seconds_per_event or 0.0,
                job_time_limit=budget.limit.seconds if budget.seconds_per_event else None,
            )
            what = f"about {per_job} events of whole lumi sections"
        return _lumi_plan(pieces, len(files), what, per_job, binding)

    # -- the sizes ------------------------------------------------------------------------
    def _default_events(self) -> int:
        """The events per local job without a hint: the option's, else the site's."""
        return int(self.options.default_events_per_job) or self.site.default_events_per_job


def _estimate(s: LocalSlice, seconds: float | None) -> None:
    """With a CPU hint (``seconds`` per event), a slice's estimated seconds from its (estimated) events."""
    events = s.attrs.get("events", s.attrs.get("estimatedEvents"))
    if seconds is not None and events is not None and "estSeconds" not in s.attrs:
        s.attrs["estSeconds"] = f"{float(events) * seconds:.0f}"


def _file_slice(piece: FileSlice, events: dict[str, int | None]) -> LocalSlice:
    """A local job of whole files: its files, their location and, when every file's is known, their events."""
    attrs: dict[str, object] = {"files": piece.count, "inputFiles": " ".join(piece.files)}
    if piece.location:
        attrs["location"] = " ".join(sorted(piece.location))
    known = [n for f in piece.files if (n := events[f]) is not None]
    if len(known) == len(piece.files):
        attrs["events"] = sum(known)
    return LocalSlice(attrs=attrs, env=inputdata.slice_env(piece.files))


def _event_file(entry: inputdata.InputEntry) -> EventFile:
    """A file with its event count (``splitting=events`` needs every file's)."""
    n = inputdata.count(entry, 0, "events")
    if n is None:
        raise InvalidAttribute(
            f"splitting=events needs every file's event count: (NAME EVENTS), missing for {entry.name}"
        )
    return EventFile(entry.name, n)


def _event_slice(piece: EventSlice, where: dict[str, str], budget: EventBudget) -> LocalSlice:
    """A local job of events of one file: its file, first and last event (empty for an empty file), estimate."""
    file = piece.file or ""
    last = "" if piece.last is None else str(piece.last)
    attrs: dict[str, Any] = {
        "inputFiles": file,
        "files": 1,
        "firstEvent": piece.first,
        "lastEvent": "" if piece.last is None else piece.last,
        "events": piece.count,
    }
    if file in where:
        attrs["location"] = where[file]
    est = budget.estimate(piece.count)
    if est is not None:
        attrs["estSeconds"] = f"{est:.0f}"
    env = {
        **inputdata.slice_env([file]),
        "JIM_FIRST_EVENT": str(piece.first),
        "JIM_LAST_EVENT": last,
        "JIM_EVENTS": str(piece.count),
    }
    return LocalSlice(attrs=attrs, env=env)


def _lumi_plan(pieces: list[LumiSlice], files: int, what: str, per_job: int, binding: str) -> Plan:
    """The plan of whole lumi sections of ``files`` input files in local jobs of ``what``; a lumi
    section too long for the time limit is a local job failed on creation."""
    slices = [_lumi_slice(p) for p in pieces]
    failed = sum(1 for s in slices if s.failed_on_creation)
    expl = (
        f"{sum(p.count for p in pieces)} lumi sections of {files} input files in {len(slices)} local jobs of "
        f"{what} (binding: {binding.replace('-', ' ')})"
    )
    if failed:
        expl += f"; {failed} lumi section(s) too long for the time limit failed on creation"
    return Plan(slices, binding, expl, attrs={"perJob": per_job, "failedOnCreation": failed or None})


def _lumi_slice(piece: LumiSlice) -> LocalSlice:
    """A local job of whole lumi sections: its files, lumis (as a CMS JSON mask), runs and estimated events."""
    mask = json.dumps({str(r): v for r, v in piece.mask().items()}, separators=(",", ":"))
    attrs: dict[str, Any] = {
        "files": len(piece.files),
        "inputFiles": " ".join(piece.files),
        "lumis": piece.count,
        "runs": " ".join(map(str, piece.runs)),
        "estimatedEvents": f"{piece.estimated_events:g}",
    }
    if piece.location:
        attrs["location"] = " ".join(sorted(piece.location))
    env = {
        **inputdata.slice_env(piece.files),
        "JIM_LUMI_MASK": mask,
        "JIM_RUNS": " ".join(map(str, piece.runs)),
    }
    return LocalSlice(attrs=attrs, env=env, failed_on_creation=piece.failed_on_creation)


def _lumi_mask(desc: JobDescription) -> LumiMask | None:
    """``lumimask``: a CMS JSON object ``{"run": [[first, last], ...]}`` (checked further by the splitter)."""
    text = desc.get("lumimask")
    if text is None:
        return None
    try:
        mask = json.loads(text)
    except ValueError as e:
        raise InvalidAttribute(f"lumimask is not JSON: {e}") from None
    if not isinstance(mask, dict):
        raise InvalidAttribute('lumimask must be a JSON object: {"run": [[first, last], ...]}')
    return mask


def _run_whitelist(desc: JobDescription) -> list[int] | None:
    """``runwhitelist``: run numbers."""
    runs = desc.values("runwhitelist")
    if not runs:
        return None
    try:
        return [int(r, 10) for r in runs]
    except ValueError:
        raise InvalidAttribute(f"runwhitelist must be run numbers, got {' '.join(runs)}") from None
