"""``parametric``: one local job per parameter value, DIRAC style, with ``$name`` substitution.

The sequences and the substitution are :mod:`jim.split.parametric`'s:

* ``parameters`` -- a count N, or an explicit list of values;
  ``parameterstart``/``parameterstep``/``parameterfactor`` generate
  ``p[0] = start``, ``p[i] = p[i-1] * factor + step`` (defaults 1, 0, 1), exact
  decimal arithmetic: ``(parameters=4)(parameterstart=0.1)(parameterstep=0.2)``
  gives 0.1, 0.3, 0.5, 0.7;
* named sequences ``parameters.<name>`` (lists, or a count from the unnamed
  one with ``parameterstart.<name>`` ...) of the same length run alongside.

Every attribute is expanded per local job: ``$Parameter``/``${Parameter}``
(the unnamed value), ``${Parameter.<name>}``, ``$ParameterNumber`` (0-based
index), ``$SplitID`` (the index zero-padded to the width of N) and
``$SplitSourceJob`` (the grid job id).  ``$$`` is a literal ``$``: write
``$$HOME`` to hand ``$HOME`` to a shell.  An unresolved placeholder is an
error at submit.

What varies per local job: ``executable``, ``arguments`` (its argv),
``environment`` (its environment), ``jobname`` (recorded on its slice),
``outputs`` and ``inputfiles`` (the grid job records the union of the
expanded values: each local job's own files carry its value in their names,
and the wrapper adds the local job's index), ``stdout`` and ``stderr`` (when
they differ between local jobs, as DIRAC's ``StdOutput = "StdOut_$SplitID"``,
each names the local job's own file, a plain name in its work directory: its
command runs with that stream redirected there, the file is gathered as an
output, and the grid job has no merged stream; the same for every local job,
they are the grid job's merged stream as GRAM's).  DIRAC's own ``%s``,
``%(name)s`` and ``%n`` are expanded too in a JDL description.  Every other attribute must
expand to the same value for all local jobs (it belongs to the grid job);
the recorded description holds that expanded value.

Each slice records ``parameterNumber`` and ``splitId``; its parameters
(``Parameter`` and each named value) are recorded as ``<param>`` and reach the
local job as ``$JIM_PARAM_Parameter``, ``$JIM_PARAM_<name>``.  N is bounded by
the option ``max_jobs`` (default 100, DIRAC's MaxParametricJobs), the user's
``maxlocaljobs`` and the site's ``max_local_jobs``; ``count`` must be 1.
The binding constraint is ``parameters``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jim.errors import InvalidAttribute, PlanError
from jim.handlers.base import Handler, HandlerOptions, LocalSlice, Plan
from jim.jobdesc import JobDescription
from jim.split.parametric import ParameterSequence, ParametricJob, parse_parameters, split_parametric
from jim.split.placeholders import Expanded

if TYPE_CHECKING:
    from jim.sandbox.builder import WorkArea

_SEQUENCE_ATTRS = ("parameters", "parameterstart", "parameterstep", "parameterfactor")
#: Attributes that may differ between the local jobs of one grid job.
PER_JOB = frozenset({"executable", "arguments", "environment", "jobname", "outputs", "inputfiles", "stdout", "stderr"})
#: Streams that, when they differ between local jobs, name each local job's own file (DIRAC's ``StdOutput``).
STREAMS = ("stdout", "stderr")
#: Runs a command with its stdout ($1) and stderr ($2) in the named new files of its work directory (an empty
#: name: the stream is left alone); a constant script, the names and the command are its arguments.
STDIO_SCRIPT = (
    'o=$1 e=$2; shift 2; set -C; if [ -n "$e" ]; then exec 2>"$e"; fi; if [ -n "$o" ]; then exec >"$o"; fi; exec "$@"'
)
MAX_STREAM_NAME = 255
#: Attributes whose expanded values are united into the grid job's description.
UNITED = ("outputs", "inputfiles")
DRY_RUN_ID = "DRYRUN"
#: The attributes the splitter adds to every child (not the grid job's).
_GENERATED = frozenset({"Parameter", "ParameterNumber", "SplitID", "SplitSourceJob"})
#: Parameter values the plan's explanation lists.
_SHOWN = 8

#: A child's description.
_Child = Mapping[str, list[Expanded]]


@dataclass(frozen=True)
class ParametricOptions(HandlerOptions):
    """``[handlers.parametric]``: the most local jobs one parametric grid job may become (DIRAC's own limit is
    100)."""

    max_jobs: int = 100


class ParametricHandler(Handler):
    """Parametric jobs: one local job per parameter value, $Parameter substituted everywhere."""

    name = "parametric"
    output_merge = "indexed"  # (each local job's file kept apart: <stem>.<k><suffix>)
    attributes = {
        "parameters": "parametric jobs: a count or a list of values",
        "parameterstart": "parametric jobs: first value",
        "parameterstep": "parametric jobs: step between values",
        "parameterfactor": "parametric jobs: factor between values",
    }
    Options = ParametricOptions
    options: ParametricOptions

    @classmethod
    def accepted_attributes(cls, desc: JobDescription) -> set[str]:
        named = {a for a in desc.attrs if "." in a and a.partition(".")[0] in _SEQUENCE_ATTRS}
        return set(cls.attributes) | named

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._argv: dict[int, list[str]] = {}
        self._streams: tuple[str, ...] = ()  # the streams each local job writes to its own file

    def getNumSubmissionTimes(self, desc: JobDescription) -> Plan:
        """See :mod:`jim.handlers.base`; what each local job gets is in the module docstring."""
        _check_parametric(desc)
        sequences = self._sequences(desc)
        n = len(sequences[0].values) if sequences else 0
        children = self._children(desc)
        self._unite(desc, children)
        slices = [self._slice(desc, child) for child in children]
        return Plan(
            slices,
            "parameters",
            f"{n} local jobs, one per parameter value ({_values_shown(children, n)})",
            attrs={
                "unit": "parameters",
                "total": n,
                "sequences": " ".join(s.name or "Parameter" for s in sequences or ()),
            },
        )

    def _limit(self, desc: JobDescription) -> tuple[int, str]:
        """The most local jobs allowed, and why: the option, the user's or the site's cap."""
        cap, cap_why = self.max_local_jobs(desc)
        option_max = int(self.options.max_jobs)
        if option_max < cap:
            return max(option_max, 1), "the site's max_jobs for parametric jobs"
        return cap, cap_why.replace("-", " ")

    def _sequences(self, desc: JobDescription) -> tuple[ParameterSequence, ...] | None:
        """The parameter sequences; more values than :meth:`_limit` allows is a :class:`PlanError`."""
        limit, why = self._limit(desc)
        try:
            return parse_parameters(desc.attrs, max_jobs=limit)
        except ValueError as e:
            if "more than the limit" in str(e):
                raise PlanError(f"{e} ({why})") from None
            raise InvalidAttribute(f"parametric job: {e}") from None

    def _children(self, desc: JobDescription) -> list[ParametricJob]:
        try:
            return split_parametric(
                desc.attrs,
                source_job=self.grid_job_id or DRY_RUN_ID,
                max_jobs=self._limit(desc)[0],
                percent=desc.source_format == "jdl",  # (DIRAC's %s, %n, %(name)s in DIRAC's language)
            )
        except ValueError as e:
            raise InvalidAttribute(f"parametric job: {e}") from None

    def _unite(self, desc: JobDescription, children: Sequence[ParametricJob]) -> None:
        """Grid-wide attributes must not vary; record their expanded value, and unite ``outputs``/``inputfiles``.

        ``stdout``/``stderr`` that are the same for every local job are the grid job's merged stream, as
        GRAM's; ones that vary (DIRAC's ``StdOutput = "StdOut_$SplitID"``) name each local job's own file
        in its work directory, gathered like an output: the grid job then has no merged stream of its own."""
        first = children[0].description
        self._streams = tuple(a for a in STREAMS if any(c.description.get(a) != first.get(a) for c in children[1:]))
        for stream in self._streams:
            _gather_own_files(desc, children, stream)
        for attr, value in first.items():
            if attr in _GENERATED or attr.startswith("Parameter.") or attr in self._streams:
                continue
            if attr in STREAMS:
                desc.attrs[attr] = value
            elif attr in UNITED:
                desc.attrs[attr] = _union(children, attr)
            elif attr not in PER_JOB:
                desc.attrs[attr] = _grid_wide(children, attr, value)

    def _slice(self, desc: JobDescription, child: ParametricJob) -> LocalSlice:
        """Local job ``child``'s slice (its command kept for :meth:`getCommandAndArguments`)."""
        d = child.description
        self._argv[child.index] = _argv_of(d, desc, {st: _stream_name(d, st) for st in self._streams})
        attrs: dict[str, Any] = {"parameterNumber": child.index, "splitId": child.split_id}
        if d.get("jobname") != desc.attrs.get("jobname"):
            attrs["jobname"] = " ".join(v for v in d["jobname"] if isinstance(v, str))
        for stream in self._streams:
            attrs[stream] = _stream_name(d, stream)
        return LocalSlice(attrs=attrs, params=_parameters(child), env=_environment(d))

    def prepareWorkArea(self, desc: JobDescription, plan: Plan, area: WorkArea) -> None:
        """See :mod:`jim.handlers.base`: the job's ``inputfiles``."""
        self.add_input_files(desc, area)

    def getCommandAndArguments(self, desc: JobDescription, plan: Plan, local: LocalSlice) -> list[str]:
        """See :mod:`jim.handlers.base`: the local job's expanded command."""
        index = int(local.attrs["parameterNumber"])
        if index not in self._argv:  # a fresh handler: expand again (deterministic)
            # (the recorded description has no per-job stream any more: each slice names its own files)
            slices = {int(s.attrs["parameterNumber"]): s for s in plan.slices}
            for child in self._children(desc):
                own = slices[child.index].attrs if child.index in slices else local.attrs
                streams = {st: str(own[st]) for st in STREAMS if st in own}
                self._argv[child.index] = _argv_of(child.description, desc, streams)
        return list(self._argv[index])


def _check_parametric(desc: JobDescription) -> None:
    """A parametric description: ``count`` 1, and a ``parameters*`` attribute."""
    if desc.get_int("count", 1, minimum=1) != 1:
        raise InvalidAttribute("parametric jobs take the number of local jobs from parameters; count must be 1")
    if not any(a.partition(".")[0] in _SEQUENCE_ATTRS for a in desc.attrs):
        raise InvalidAttribute("parametric jobs need parameters=<count or list of values>")


def _gather_own_files(desc: JobDescription, children: Sequence[ParametricJob], stream: str) -> None:
    """``stream`` varies between local jobs: it leaves the grid job's description, and each local job's
    own file (a different one each) is one of its ``outputs``."""
    desc.attrs.pop(stream, None)
    names = [_stream_name(c.description, stream) for c in children]
    if len(set(names)) != len(names):
        raise InvalidAttribute(f"{stream} must name a different file for every local job")
    outputs = desc.attrs.setdefault("outputs", [])
    for name in names:  # (each local job's own name: it matches its own file only)
        if name not in outputs:
            outputs.append(name)


def _union(children: Sequence[ParametricJob], attr: str) -> list[Expanded]:
    """The values of ``attr`` of every local job, each once, in order."""
    union: list[Expanded] = []
    for child in children:
        for v in child.description.get(attr, []):
            if v not in union:
                union.append(v)
    return union


def _grid_wide(children: Sequence[ParametricJob], attr: str, value: list[Expanded]) -> list[Expanded]:
    """``value``, the first local job's ``attr``, refused unless every local job has it."""
    if any(child.description.get(attr) != value for child in children[1:]):
        raise InvalidAttribute(
            f"attribute {attr} belongs to the whole grid job and may not depend "
            f"on the parameter (only {', '.join(sorted(PER_JOB))} may)"
        )
    return value


def _stream_name(d: _Child, stream: str) -> str:
    """A local job's own ``stdout``/``stderr`` file: a plain name in its work directory."""
    vals = d.get(stream) or []
    name = vals[0] if len(vals) == 1 and isinstance(vals[0], str) else None
    if (
        name is None
        or not name
        or len(name) > MAX_STREAM_NAME
        or "/" in name
        or name in (".", "..")
        or any(c in name for c in "\0\n")
    ):
        raise InvalidAttribute(
            f"{stream} varies between local jobs, so it must be one plain file name (no '/'), got {vals!r:.80}"
        )
    return name


def _argv_of(d: _Child, desc: JobDescription, streams: Mapping[str, str]) -> list[str]:
    """A local job's command; with ``streams`` (stdout/stderr -> its own file) run by :data:`STDIO_SCRIPT`."""
    exe = d.get("executable") or []
    if len(exe) != 1 or not isinstance(exe[0], str) or not exe[0]:
        raise InvalidAttribute("the job description has no executable", gram_error=81)
    path = exe[0]
    if not os.path.isabs(path) and "/" in path:
        directory = desc.get("directory") or os.path.expanduser("~")
        path = os.path.normpath(os.path.join(directory, path))
    args = d.get("arguments", [])
    words = [a for a in args if isinstance(a, str)]
    if len(words) != len(args):
        raise InvalidAttribute("attribute arguments must be a list of words, not a nested list")
    if streams:
        names = [streams.get(st, "") for st in STREAMS]
        return ["/bin/sh", "-c", STDIO_SCRIPT, "jim-stdio", *names, path, *words]
    return [path, *words]


def _parameters(child: ParametricJob) -> dict[str, str]:
    """A local job's named parameters: ``Parameter`` (the unnamed value) and each named one."""
    params = {}
    if child.parameter is not None:
        params["Parameter"] = child.parameter
    for name, value in child.named:
        if name.lower() == "parameter":
            raise InvalidAttribute("a named parameter sequence may not be called Parameter")
        params[name] = value
    return params


def _environment(d: _Child) -> dict[str, str]:
    """A local job's expanded ``environment``: its ``(NAME value)`` pairs."""
    return dict(_environment_pair(entry) for entry in d.get("environment", []))


def _environment_pair(entry: Expanded) -> tuple[str, str]:
    if isinstance(entry, list) and len(entry) == 2:
        name, value = entry
        if isinstance(name, str) and isinstance(value, str):
            return name, value
    raise InvalidAttribute(f"environment entries must be (NAME value) pairs, got {entry!r}")


def _values_shown(children: Sequence[ParametricJob], n: int) -> str:
    """``Parameter, Parameter.e: (1, 10), (2, 20), ...``: the sequences' names and the first values."""
    names = (["Parameter"] if children[0].parameter is not None else []) + [
        f"Parameter.{name}" for name, _ in children[0].named
    ]
    shown = [_value_shown(c) for c in children[:_SHOWN]]
    more = f", ... ({n - _SHOWN} more)" if n > _SHOWN else ""
    return f"{', '.join(names)}: {', '.join(shown)}{more}"


def _value_shown(child: ParametricJob) -> str:
    """A local job's value, or its values in parentheses when there are named sequences."""
    values = ([child.parameter] if child.parameter is not None else []) + [v for _, v in child.named]
    return values[0] if not child.named else "(" + ", ".join(values) + ")"
