"""A job description: canonical attribute name -> list of values, and what it means to jim.

:class:`JobDescription` is what every reader makes (RSL :mod:`jim.jobdesc.rsl`,
the GRAM module's JSON :mod:`jim.jobdesc.gram_json`, JDL :mod:`jim.jobdesc.jdl`,
ARC's grami :mod:`jim.arc.grami`), as GRAM's job manager hands a description to
a job-manager module: attribute names canonical (:func:`jim.jobdesc.vocabulary.canonical`),
each with a list of values, a value a string or, for nested RSL sequences such
as ``environment`` pairs, a list of values.  A reader builds it only from
attributes that passed :func:`jim.jobdesc.limits.bounded`.

It answers what jim reads of a description: one value or a list of words, an
integer or a number (at most :data:`~jim.jobdesc.limits.MAX_NUMBER_DIGITS`
digits), the environment, the resource limits of each local job in jim's
units (:meth:`JobDescription.resource_limits`, the one place GRAM's units are
converted).  Its checks refuse what GRAM's job manager refuses, with GRAM's
own error numbers: unknown attributes (:meth:`JobDescription.check_known`) and
the shapes and ranges every job type shares (:meth:`JobDescription.check_common`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, overload

from jim.errors import DescriptionError, GramError, InvalidAttribute, InvalidCount, UnknownAttribute
from jim.jobdesc.limits import (
    MAX_CPU_MINUTES,
    MAX_HOST_COUNT,
    MAX_MEMORY_MB,
    MAX_NUMBER_DIGITS,
    MAX_PROJECT_CHARS,
    PROJECT_NAME,
    Value,
    shown,
)
from jim.jobdesc.vocabulary import (
    GRAM_ATTRIBUTES,
    GRAM_INTERNAL_ATTRIBUTES,
    GRAM_JOBTYPES,
    JDL_RECORDED,
    JIM_ATTRIBUTES,
    canonical,
)


def _rsl_form(values: list[Value], limit: int = 200) -> str:
    """An attribute's values written as RSL sequences for a message, at most about ``limit`` characters."""
    out: list[str] = []
    size = 0

    def walk(vals: list[Value]) -> None:
        nonlocal size
        for i, v in enumerate(vals):
            if size > limit:
                return
            if i:
                out.append(" ")
            if isinstance(v, str):
                out.append(v[:limit])
                size += min(len(v), limit) + 1
            else:
                out.append("(")
                walk(v)
                out.append(")")
                size += 2

    walk(values)
    return "".join(out)[:limit]


@dataclass
class JobDescription:
    """A job description: canonical attribute name -> list of values."""

    attrs: dict[str, list[Value]]
    source_format: str = "json"
    source_text: str = ""
    extra_known: frozenset[str] = field(default_factory=frozenset)

    # -- access ---------------------------------------------------------
    def has(self, name: str) -> bool:
        return bool(self.attrs.get(canonical(name)))

    def values(self, name: str) -> list[str]:
        """All values of a flat attribute (nested sequences are an error)."""
        words: list[str] = []
        for v in self.attrs.get(canonical(name), []):
            if not isinstance(v, str):
                raise InvalidAttribute(f"attribute {name} must be a list of words, not a nested list")
            words.append(v)
        return words

    def get(
        self, name: str, default: str | None = None, *, error: type[DescriptionError] = InvalidAttribute
    ) -> str | None:
        """The single value of ``name``; more than one value is an error (``error``)."""
        vals = self.values(name)
        if not vals:
            return default
        if len(vals) > 1:
            raise error(f"attribute {name} takes one value, got {len(vals)}: {shown(' '.join(vals))}")
        return vals[0]

    @overload
    def get_int(
        self, name: str, default: int, *, minimum: int | None = None, error: type[DescriptionError] = InvalidAttribute
    ) -> int: ...

    @overload
    def get_int(
        self,
        name: str,
        default: None = None,
        *,
        minimum: int | None = None,
        error: type[DescriptionError] = InvalidAttribute,
    ) -> int | None: ...

    def get_int(
        self,
        name: str,
        default: int | None = None,
        *,
        minimum: int | None = None,
        error: type[DescriptionError] = InvalidAttribute,
    ) -> int | None:
        raw = self.get(name, error=error)
        if raw is None:
            return default
        if len(raw.strip()) > MAX_NUMBER_DIGITS:
            raise error(f"{name} must be an integer of at most {MAX_NUMBER_DIGITS} digits, got {shown(raw)}")
        try:
            value = int(raw.strip(), 10)
        except ValueError:
            raise error(f"{name} must be an integer, got {shown(raw)}") from None
        if minimum is not None and value < minimum:
            raise error(f"{name} must be at least {minimum}, got {value}")
        return value

    def get_float(self, name: str, default: float | None = None, *, positive: bool = False) -> float | None:
        raw = self.get(name)
        if raw is None:
            return default
        if len(raw.strip()) > MAX_NUMBER_DIGITS:
            raise InvalidAttribute(f"{name} must be a number of at most {MAX_NUMBER_DIGITS} digits, got {shown(raw)}")
        try:
            value = float(raw)
        except ValueError:
            raise InvalidAttribute(f"{name} must be a number, got {shown(raw)}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidAttribute(f"{name} must be a finite number, got {shown(raw)}")
        if positive and value <= 0:
            raise InvalidAttribute(f"{name} must be positive, got {shown(raw)}")
        return value

    def _check_gram_values(self) -> None:
        """The shapes GRAM gives its own attributes, each refused with GRAM's own number: ``arguments``
        a list of words (50), ``directory`` (52), ``executable`` (55) and ``stdin`` (64) one word each."""
        for name, code in (
            ("directory", GramError.RSL_DIRECTORY),
            ("executable", GramError.RSL_EXECUTABLE),
            ("stdin", GramError.RSL_STDIN),
        ):
            vals = self.attrs.get(name)
            if vals is not None and (len(vals) != 1 or not isinstance(vals[0], str)):
                raise InvalidAttribute(f"{name} must be a single string, got {shown(_rsl_form(vals))}", gram_error=code)
        if any(not isinstance(v, str) for v in self.attrs.get("arguments", [])):
            raise InvalidAttribute(
                f"arguments must be a list of strings, got {shown(_rsl_form(self.attrs['arguments']))}",
                gram_error=GramError.RSL_ARGUMENTS,
            )

    def environment(self) -> list[tuple[str, str]]:
        """``environment`` as (name, value) pairs."""
        pairs = []
        for item in self.attrs.get("environment", []):
            if isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item):
                pairs.append((item[0], item[1]))
            else:
                raise InvalidAttribute(
                    f"environment entries must be (NAME value) pairs, got {shown(_rsl_form([item]))}",
                    gram_error=GramError.RSL_ENVIRONMENT,
                )
        return pairs

    @property
    def jimtype(self) -> str:
        return (self.get("jimtype") or "generic").strip().lower()

    @property
    def executable(self) -> str | None:
        return self.get("executable")

    @property
    def arguments(self) -> list[str]:
        return self.values("arguments")

    def to_json(self) -> dict[str, list[Value]]:
        return {k: list(v) for k, v in self.attrs.items()}

    # -- validation ---------------------------------------------------------
    def check_known(self, extra: Iterable[str] = ()) -> None:
        """Refuse attributes that neither GRAM, jim, nor the handler declare."""
        known = GRAM_ATTRIBUTES | GRAM_INTERNAL_ATTRIBUTES | set(JIM_ATTRIBUTES) | set(extra)
        if self.source_format == "jdl":
            known |= set(JDL_RECORDED)
        unknown = sorted(set(self.attrs) - known)
        if unknown:
            others = ", ".join(shown(u) for u in unknown[1:4])
            others += f" and {len(unknown) - 4} more" if unknown[4:] else ""
            nor = f" (nor {others})" if others else ""
            raise UnknownAttribute(f"the RSL attribute {shown(unknown[0])} is not supported by jim{nor}")

    def wall_seconds(self) -> int | None:
        """The wall-time limit of each local job, in seconds, from GRAM's ``maxwalltime`` (else
        ``maxtime``), in minutes; None when neither is given."""
        for name, bad in (("maxwalltime", 101), ("maxtime", 13)):
            raw = self.get(name)
            if raw is None:
                continue
            try:
                if len(raw.strip()) > MAX_NUMBER_DIGITS:
                    raise ValueError(raw)
                minutes = int(raw.strip(), 10)
            except ValueError:
                raise InvalidAttribute(
                    f"{name} must be a whole number of minutes, got {shown(raw)}", gram_error=bad
                ) from None
            if minutes < 1:
                raise InvalidAttribute(
                    f"{name} must be at least 1 minute, got {minutes}", gram_error=102 if name == "maxwalltime" else bad
                )
            return minutes * 60
        return None

    def _gram_amount(self, name: str, unit: str, shape: int, bad: int, maximum: int) -> int | None:
        """GRAM attribute ``name``: a whole number of ``unit`` from 1 to ``maximum``; None when not given.
        A value that is not one word is refused with GRAM's number ``shape`` (its RSL_* error), a word
        that is not such a number with ``bad`` (its INVALID_* error), as GRAM's job manager does."""
        vals = self.attrs.get(name)
        if not vals:
            return None
        if len(vals) != 1 or not isinstance(vals[0], str):
            raise InvalidAttribute(
                f"{name} must be one number of {unit}, got {shown(_rsl_form(vals))}", gram_error=shape
            )
        raw = vals[0].strip()
        if len(raw) > MAX_NUMBER_DIGITS or not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= maximum:
            raise InvalidAttribute(
                f"{name} must be a whole number of {unit} from 1 to {maximum}, got {shown(vals[0])}", gram_error=bad
            )
        return int(raw)

    def project(self) -> str | None:
        """GRAM's ``project``: the batch system's account to charge, a short name (see ``PROJECT_NAME``);
        None when not given.  Refused with GRAM's RSL_PROJECT (61) when not one word, INVALID_PROJECT (38)
        when not such a name."""
        vals = self.attrs.get("project")
        if not vals:
            return None
        if len(vals) != 1 or not isinstance(vals[0], str):
            raise InvalidAttribute(
                f"project must be one name, got {shown(_rsl_form(vals))}", gram_error=GramError.RSL_PROJECT
            )
        name = vals[0]
        if len(name) > MAX_PROJECT_CHARS or not PROJECT_NAME.fullmatch(name):
            raise InvalidAttribute(
                f"project must be a name of at most {MAX_PROJECT_CHARS} letters, digits and . _ - "
                f"(not beginning with - or .), got {shown(name)}",
                gram_error=GramError.INVALID_PROJECT,
            )
        return name

    def resource_limits(self) -> dict[str, Any]:
        """What each local job may use and who pays, in jim's units, from GRAM's attributes in GRAM's
        units: the one place they are converted (the worker hands this to the batch adapter as
        :attr:`jim.adapters.base.SubmitChunk.limits`).  Keys, only those given: ``wall_seconds``
        (:meth:`wall_seconds`), ``cpu_seconds`` (``maxcputime``, minutes), ``memory_mb`` (``maxmemory``,
        MB), ``min_memory_mb`` (``minmemory``, MB), ``project``.  Each value is refused with GRAM's own
        number (RSL_* when not one word, INVALID_* when out of range); ``hostcount`` is checked too
        (each local job runs on one host: it is not passed on)."""
        limits: dict[str, Any] = {}
        wall = self.wall_seconds()
        if wall:
            limits["wall_seconds"] = wall
        cpu = self._gram_amount(
            "maxcputime", "minutes", GramError.RSL_MAX_CPU_TIME, GramError.INVALID_MAX_CPU_TIME, MAX_CPU_MINUTES
        )
        if cpu is not None:
            limits["cpu_seconds"] = cpu * 60
        memory = self._gram_amount(
            "maxmemory", "MB", GramError.RSL_MAX_MEMORY, GramError.INVALID_MAX_MEMORY, MAX_MEMORY_MB
        )
        least = self._gram_amount(
            "minmemory", "MB", GramError.RSL_MIN_MEMORY, GramError.INVALID_MIN_MEMORY, MAX_MEMORY_MB
        )
        if memory is not None and least is not None and least > memory:
            raise InvalidAttribute(
                f"minmemory ({least} MB) must not be above maxmemory ({memory} MB)",
                gram_error=GramError.INVALID_MIN_MEMORY,
            )
        if memory is not None:
            limits["memory_mb"] = memory
        if least is not None:
            limits["min_memory_mb"] = least
        project = self.project()
        if project is not None:
            limits["project"] = project
        self._gram_amount("hostcount", "hosts", GramError.RSL_HOST_COUNT, GramError.INVALID_HOST_COUNT, MAX_HOST_COUNT)
        return limits

    def check_common(self) -> None:
        """Checks every job type shares: count, jobtype, executable, environment, the resource limits."""
        self.get_int("count", 1, minimum=1, error=InvalidCount)
        self.get("jobname")  # (one word: refused here, before anything is recorded)
        self.resource_limits()
        jobtype = self.get("jobtype")
        if jobtype is not None and jobtype.lower() not in GRAM_JOBTYPES:
            raise InvalidAttribute(
                f"jobtype must be one of {', '.join(GRAM_JOBTYPES)}, got {shown(jobtype)}", gram_error=19
            )
        self._check_gram_values()
        exe = self.get("executable")
        if exe is not None and (not exe or "\0" in exe):
            raise InvalidAttribute("executable must be a non-empty path", gram_error=GramError.RSL_EXECUTABLE)
        self.environment()
        for name, _value in self.environment():
            if not name or "=" in name or "\0" in name:
                raise InvalidAttribute(f"bad environment variable name {shown(name)}", gram_error=40)
