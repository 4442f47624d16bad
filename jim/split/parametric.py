r"""Parametric splitting with DIRAC's semantics and ``$name`` substitution.

A job description (attribute name -> list of strings; nested lists occur, e.g.
environment pairs) becomes N child descriptions, one per parameter value.

Sequences (DIRAC ``ParametricJob``)
-----------------------------------
* The unnamed sequence: ``Parameters`` with optional ``ParameterStart``,
  ``ParameterStep`` and ``ParameterFactor``.  Named sequences:
  ``Parameters.<name>``, ``ParameterStart.<name>`` and so on.
* ``Parameters`` is an explicit list of values, used as written, or an integer
  count N.  A count is allowed on the unnamed ``Parameters`` only.
* Generated values follow DIRAC's rule exactly: ``p[0] = Start`` and
  ``p[i] = p[i-1] * Factor + Step``, with defaults Start 1, Step 0, Factor 1 --
  so ``Parameters = 3; ParameterStart = 5`` gives ``5, 5, 5`` and Start 1, Step
  1, Factor 2 gives ``1, 3, 7``.  (This is *not* ``start * factor**k + step *
  k``: the step is multiplied by later factors too.)
* Typing, as DIRAC (``Start * type(Factor)(1) + type(Step)(0)``): if Start, Step
  or Factor is *written* as a float (``2.0``, ``0.5``, ``1e3``) the whole
  sequence is float, else it is integer.
* Arithmetic is exact (:class:`decimal.Decimal` on the values as written), so
  no binary noise reaches a string: Start 0.1, Step 0.2 gives ``0.1, 0.3, 0.5``
  (never ``0.30000000000000004``), and DIRAC RFC #15's Step 1, Factor 1.3 gives
  ``1.0, 2.3, 3.99``.  An integer sequence prints as integers (``7``, never
  ``7.0``); a float sequence prints in plain decimal notation with at least one
  fractional digit and no trailing zeros (``7.0``, ``3.99``,
  ``10000000000000000.0`` where Python would print ``1e+16``).  Values beyond
  :data:`MAX_DIGITS` digits are refused.
* All ``Parameters*`` attributes must agree on N ("different length of
  parameter vectors"); N <= 0 is illegal; no ``Parameters*`` attribute at all
  means a normal single job.

What each child carries
-----------------------
The ``Parameters*`` attributes are removed and these are added (as one-string
lists): ``Parameter`` (the unnamed value, when there is an unnamed sequence),
``Parameter.<name>`` per named sequence, ``ParameterNumber`` (0-based index),
``SplitID`` (the index zero-padded to the width of N, as DIRAC RFC #15's
splitter shows it: N=1 gives ``0``, N=9 gives ``0``..``8``, N=10 gives
``00``..``09`` -- the RFC's ``SplitID = 02`` -- and N=100 gives ``000``..``099``)
and
``SplitSourceJob`` (the grid job id passed in).  A description that already
sets one of these is refused.

Substitution (``$name``, ``${name}``, and DIRAC's ``%s``, ``%n``, ``%(name)s`` in a
JDL description): every string in every attribute is expanded once by the rules
of :mod:`jim.split.placeholders`, among the values above plus any ``variables``
the caller adds; an unresolvable placeholder is a ValueError naming it and its
attribute.

Attribute names are matched the GRAM way: case-insensitively and ignoring
``_`` (``parameter_start`` is ``ParameterStart``); the part after the dot is a
sequence name, kept as written (two names differing only in case are refused).
An unnamed ``Parameters`` given one value is a count when it is an integer and
an error otherwise: JSON/RSL cannot tell ``5`` from ``{"5"}``, and this is how
DIRAC's 2013 splitter read a one-element list.  A named sequence given one
value is a one-value list.  ``ParameterStart``/``Step``/``Factor`` next to an
explicit list are refused (DIRAC ignores them silently).  More than
``max_jobs`` children (DIRAC's ``MaxParametricJobs``, default 100) rejects the
whole description, before any value is generated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, Inexact, InvalidOperation, Overflow, localcontext

from jim.split._check import is_int, positive_int
from jim.split.placeholders import DIRAC_N, VAR_NAME, Expanded, Value, expand, substitute

__all__ = [
    "DEFAULT_MAX_PARAMETRIC_JOBS",
    "MAX_DIGITS",
    "Description",
    "ParameterSequence",
    "ParametricJob",
    "expand_jobs",
    "parse_parameters",
    "sequence_values",
    "split_parametric",
    "substitute",
]

DEFAULT_MAX_PARAMETRIC_JOBS = 100
"""DIRAC's shipped ``MaxParametricJobs``."""

MAX_DIGITS = 1000
"""Most significant digits (and largest decimal exponent) a generated value may have."""

Description = Mapping[str, Sequence[Value]]
"""Attribute name -> list of values; a value is a string or a (nested) list of strings."""
"""A value of a child's description: a string or a (nested) list of them."""

Number = str | int | float | Decimal

_KEYS = {
    "parameters": "Parameters",
    "parameterstart": "ParameterStart",
    "parameterstep": "ParameterStep",
    "parameterfactor": "ParameterFactor",
}
_RESERVED = ("Parameter", "ParameterNumber", "SplitID", "SplitSourceJob")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")


@dataclass(frozen=True)
class ParameterSequence:
    """One parameter sequence: ``name`` is ``None`` for the unnamed ``Parameters``."""

    name: str | None
    values: tuple[str, ...]


@dataclass(frozen=True)
class ParametricJob:
    """One generated child: its index, ids, parameter values and expanded description."""

    index: int
    split_id: str
    source_job: str
    parameter: str | None
    named: tuple[tuple[str, str], ...] = ()
    description: dict[str, list[Expanded]] = field(default_factory=dict, hash=False)

    @property
    def variables(self) -> dict[str, str]:
        """The names ``$...`` placeholders could use for this child (besides caller extras)."""
        return _job_variables(self.index, self.split_id, self.source_job, self.parameter, self.named)


def sequence_values(count: int, *, start: Number = 1, step: Number = 0, factor: Number = 1) -> tuple[str, ...]:
    """The ``count`` values ``p[0] = start``, ``p[i] = p[i-1] * factor + step``, as strings.

    Numbers may be given as written (``"0.1"``), or as ``int``/``Decimal``; a
    ``float`` is taken by its shortest repr.  Integer-typed unless one of the
    three is float-typed (see the module docstring).  Raises ``ValueError`` for
    ``count <= 0``, a non-numeric value, or a value beyond :data:`MAX_DIGITS`.
    """
    positive_int("number of job parameters", count)
    s0, start_int = _number("ParameterStart", start)
    ds, step_int = _number("ParameterStep", step)
    df, factor_int = _number("ParameterFactor", factor)
    integer = start_int and step_int and factor_int
    values = []
    with localcontext() as ctx:
        ctx.prec = MAX_DIGITS
        ctx.Emax = MAX_DIGITS
        ctx.Emin = -MAX_DIGITS
        ctx.traps[Inexact] = ctx.traps[Overflow] = ctx.traps[InvalidOperation] = True
        value = s0
        for k in range(count):
            try:
                if k:
                    value = value * df + ds
                values.append(_format(value, integer))
            except (Inexact, Overflow, InvalidOperation, ValueError):
                raise ValueError(f"parameter value {k} of the sequence has more than {MAX_DIGITS} digits") from None
    return tuple(values)


def parse_parameters(
    description: Description, *, max_jobs: int = DEFAULT_MAX_PARAMETRIC_JOBS
) -> tuple[ParameterSequence, ...] | None:
    """Read the ``Parameters*`` attributes into sequences (unnamed first, then named in order).

    Returns ``None`` when the description has no ``Parameters*`` attribute (a
    normal single job).  Raises ``ValueError`` for inconsistent or illegal
    attributes, or more than ``max_jobs`` values, before generating any value.
    """
    positive_int("max_jobs", max_jobs)
    specs = _collect(description)
    counts = _lengths(specs)
    if not counts:
        if specs:
            name, spec = next(iter(specs.items()))
            given = _attr(next(iter(spec)), name)
            raise ValueError(f"{given} is given but no Parameters attribute sets the number of jobs")
        return None
    n = next(iter(counts.values()))
    for attr, m in counts.items():
        if m != n:
            first = next(iter(counts))
            raise ValueError(f"different length of parameter vectors: {first} has {n}, {attr} has {m}")
    if n <= 0:
        raise ValueError(f"illegal number of job parameters {n}")
    if n > max_jobs:
        raise ValueError(f"{n} parametric jobs requested, more than the limit of {max_jobs}")
    return tuple(_sequence(name, spec, n) for name, spec in specs.items())


def expand_jobs(
    description: Description,
    sequences: Sequence[ParameterSequence],
    *,
    source_job: str,
    variables: Mapping[str, str] | None = None,
    percent: bool = False,
) -> list[ParametricJob]:
    """Make one child per value of ``sequences`` (all of equal length) from ``description``.

    The ``Parameters*`` attributes are dropped, ``$`` placeholders expanded
    and the child attributes added (see the module docstring).  With no
    sequence, one child (index 0, no ``Parameter``) is made.  Raises
    ``ValueError`` for an unresolvable placeholder, a reserved attribute in the
    description, or sequences of unequal length.
    """
    children = _Children(  # (checked in this order)
        source=_source_job(source_job),
        extra=_extra_variables(variables),
        count=_count(sequences),
        sequences=tuple(sequences),
        base=_strip_parameter_attributes(description),
        percent=percent,
    )
    return [children.child(k) for k in range(children.count)]


def split_parametric(
    description: Description,
    *,
    source_job: str,
    max_jobs: int = DEFAULT_MAX_PARAMETRIC_JOBS,
    variables: Mapping[str, str] | None = None,
    percent: bool = False,
) -> list[ParametricJob]:
    """Parse the ``Parameters*`` attributes and expand one child description per value.

    ``source_job`` is the grid (master) job id, given to every child as
    ``SplitSourceJob``; ``variables`` adds placeholder names (they may not
    shadow the generated ones).  Every child is expanded before any is returned,
    so one bad child rejects the whole description.  Raises ``ValueError`` as
    :func:`parse_parameters` and :func:`expand_jobs` do.  With ``percent``, DIRAC's own placeholders
    ``%s``, ``%n`` and ``%(name)s`` are expanded too (see the module docstring).
    """
    sequences = parse_parameters(description, max_jobs=max_jobs)
    return expand_jobs(description, sequences or (), source_job=source_job, variables=variables, percent=percent)


# --- parsing the description -------------------------------------------------------------


def _collect(description: Description) -> dict[str | None, dict[str, list[Value]]]:
    """Group the ``Parameters*`` attributes by sequence name: ``{name: {key: values}}``."""
    _check_mapping(description)
    specs: dict[str | None, dict[str, list[Value]]] = {}
    folded: dict[str, str] = {}
    for attr, values in description.items():
        if not isinstance(attr, str):
            raise ValueError(f"attribute names must be strings, got {attr!r}")
        _check_not_reserved(attr)
        parsed = _parameter_attribute(attr)
        if parsed is None:
            continue
        key, name = parsed
        if name is not None:
            other = folded.setdefault(name.lower(), name)
            if other != name:
                raise ValueError(f"parameter sequence names {other!r} and {name!r} differ only in case")
        spec = specs.setdefault(name, {})
        if key in spec:
            raise ValueError(f"{_attr(key, name)} is given twice")
        if isinstance(values, str) or not isinstance(values, Sequence):
            raise ValueError(f"{attr} must be a list of strings, got {values!r}")
        if not all(isinstance(v, str) for v in values):
            raise ValueError(f"{attr} values must be strings, got {values!r}")
        spec[key] = list(values)
    if None in specs:  # unnamed first
        specs = {None: specs.pop(None), **specs}
    return specs


def _check_mapping(description: object) -> None:
    if not isinstance(description, Mapping):
        kind = type(description).__name__
        raise ValueError(f"job description must be a mapping of attribute -> values, got {kind}")


def _parameter_attribute(attr: str) -> tuple[str, str | None] | None:
    """``("ParameterStart", "A")`` for ``parameter_start.A``; ``None`` for other attributes."""
    base, dot, name = attr.partition(".")
    key = _KEYS.get(base.replace("_", "").lower())
    if key is None:
        return None
    if not dot:
        return key, None
    if not _NAME.match(name):
        raise ValueError(f"{attr}: parameter sequence name must be an identifier, got {name!r}")
    return key, name


def _check_not_reserved(attr: str) -> None:
    base, dot, name = attr.partition(".")
    canonical = base.replace("_", "").lower()
    for reserved in _RESERVED:
        if canonical == reserved.lower() and (not dot or reserved == "Parameter"):
            raise ValueError(f"attribute {attr} is set by the parametric splitter and may not be given")


def _lengths(specs: Mapping[str | None, Mapping[str, list[Value]]]) -> dict[str, int]:
    """Attribute -> number of values, for every ``Parameters*`` attribute, in order."""
    counts = {}
    for name, spec in specs.items():
        values = spec.get("Parameters")
        if values is None:
            continue
        attr = _attr("Parameters", name)
        if name is None and len(values) == 1:
            text = str(values[0]).strip()
            if not _INT.match(text):
                raise ValueError(
                    f"Parameters: a single value must be an integer count, got {text!r} "
                    "(give two or more values for an explicit list)"
                )
            counts[attr] = int(text)
        else:
            counts[attr] = len(values)
    return counts


def _sequence(name: str | None, spec: Mapping[str, list[Value]], n: int) -> ParameterSequence:
    values = spec.get("Parameters")
    explicit = values is not None and (name is not None or len(values) > 1)
    if explicit:
        for key in ("ParameterStart", "ParameterStep", "ParameterFactor"):
            if key in spec:
                raise ValueError(
                    f"{_attr(key, name)} cannot be combined with an explicit {_attr('Parameters', name)} list"
                )
        return ParameterSequence(name, tuple(str(v) for v in values))  # type: ignore[union-attr]
    numbers = {
        key: _single(_attr(key, name), spec[key])
        for key in ("ParameterStart", "ParameterStep", "ParameterFactor")
        if key in spec
    }
    try:
        generated = sequence_values(
            n,
            start=numbers.get("ParameterStart", 1),
            step=numbers.get("ParameterStep", 0),
            factor=numbers.get("ParameterFactor", 1),
        )
    except ValueError as exc:
        raise ValueError(f"{_attr('Parameters', name)}: {exc}") from None
    return ParameterSequence(name, generated)


def _single(attr: str, values: list[Value]) -> str:
    if len(values) != 1:
        raise ValueError(f"{attr} must have exactly one value, got {values!r}")
    return str(values[0])


def _attr(key: str, name: str | None) -> str:
    return key if name is None else f"{key}.{name}"


# --- numbers -------------------------------------------------------------------------------


def _number(attr: str, value: Number) -> tuple[Decimal, bool]:
    """``(exact value, integer-typed?)`` for a number as written."""
    if isinstance(value, bool):
        raise ValueError(f"{attr} must be a number, got {value!r}")
    if isinstance(value, int):
        return Decimal(value), True
    if isinstance(value, float):
        return _finite(attr, Decimal(repr(value)), value), False
    if isinstance(value, Decimal):
        return _finite(attr, value, value), value.as_tuple().exponent >= 0  # type: ignore[operator]
    if isinstance(value, str):
        return _written(attr, value)
    raise ValueError(f"{attr} must be a number, got {value!r}")


def _finite(attr: str, number: Decimal, given: float | Decimal) -> Decimal:
    """``number`` (``given`` as a Decimal), refused when it is not finite."""
    if not number.is_finite():
        raise ValueError(f"{attr} must be a finite number, got {given!r}")
    return number


def _written(attr: str, text: str) -> tuple[Decimal, bool]:
    """A number written as text: an integer, or a float within :data:`MAX_DIGITS` of 10^0."""
    stripped = text.strip()
    if _INT.match(stripped):
        return Decimal(stripped), True
    if not _FLOAT.match(stripped):
        raise ValueError(f"{attr} must be a number, got {text!r}")
    number = Decimal(stripped)
    if abs(number.adjusted()) > MAX_DIGITS:
        raise ValueError(f"{attr} is out of range: {text!r}")
    return number, False


def _format(value: Decimal, integer: bool) -> str:
    """An integer-typed value as an integer; a float-typed one in plain notation, e.g. ``7.0``."""
    if abs(value.adjusted()) > MAX_DIGITS:
        raise ValueError(f"value out of range: {value}")
    if integer:
        return str(int(value))
    if value == 0:
        return "0.0"
    text = format(value.normalize(), "f")
    return text if "." in text else text + ".0"


# --- children ------------------------------------------------------------------------------


def _count(sequences: Sequence[ParameterSequence]) -> int:
    """The number of children: the sequences' common length (1 without a sequence).

    Refuses a bad sequence (:func:`_check_sequence`), sequences of different lengths and names
    equal but for case."""
    for s in sequences:
        _check_sequence(s)
    lengths = {len(s.values) for s in sequences}
    if len(lengths) > 1:
        raise ValueError(f"different length of parameter vectors: {sorted(lengths)}")
    names = [s.name for s in sequences]
    folded = [n.lower() if n is not None else None for n in names]
    if len(set(folded)) != len(folded):
        raise ValueError(f"parameter sequence names must be unique (case-insensitively): {names}")
    return lengths.pop() if lengths else 1


def _check_sequence(s: object) -> None:
    """Refuses what is not a :class:`ParameterSequence`, a name that is not an identifier, and a
    sequence without value."""
    if not isinstance(s, ParameterSequence):
        raise ValueError(f"sequences must be ParameterSequence objects, got {s!r}")
    if s.name is not None and not _NAME.match(s.name):
        raise ValueError(f"parameter sequence name must be an identifier, got {s.name!r}")
    if not s.values:
        raise ValueError(f"parameter sequence {s.name or 'Parameters'} has no value")


@dataclass(frozen=True)
class _Children:
    """What every child of one description is made from (all of it checked)."""

    base: Mapping[str, Sequence[Value]]
    """The description without its ``Parameters*`` attributes."""
    sequences: tuple[ParameterSequence, ...]
    count: int
    source: str
    extra: Mapping[str, str]
    """The caller's own placeholder names."""
    percent: bool
    """Expand DIRAC's ``%s``, ``%n`` and ``%(name)s`` too."""

    def child(self, k: int) -> ParametricJob:
        """Child ``k``: its ids and values, and the description expanded with them."""
        split_id = str(k).zfill(len(str(self.count)))
        parameter = next((s.values[k] for s in self.sequences if s.name is None), None)
        named = tuple((s.name, s.values[k]) for s in self.sequences if s.name is not None)
        own = _job_variables(k, split_id, self.source, parameter, named)
        lookup = self._lookup(k, own)
        expanded = {
            attr: [expand(attr, v, lookup, self.percent) for v in _values_of(attr, values)]
            for attr, values in self.base.items()
        }
        expanded.update((name, [value]) for name, value in own.items())
        return ParametricJob(k, split_id, self.source, parameter, named, expanded)

    def _lookup(self, k: int, own: Mapping[str, str]) -> dict[str, str]:
        """Child ``k``'s placeholder names, lower-case, with DIRAC's ``%n`` (padded to the width of the
        last index, not of N)."""
        lookup = {name.lower(): value for name, value in {**self.extra, **own}.items()}
        lookup[DIRAC_N] = str(k).zfill(len(str(max(self.count - 1, 0))))
        return lookup


def _job_variables(
    index: int, split_id: str, source: str, parameter: str | None, named: tuple[tuple[str, str], ...]
) -> dict[str, str]:
    variables = {}
    if parameter is not None:
        variables["Parameter"] = parameter
    variables.update((f"Parameter.{name}", value) for name, value in named)
    variables["ParameterNumber"] = str(index)
    variables["SplitID"] = split_id
    variables["SplitSourceJob"] = source
    return variables


def _strip_parameter_attributes(description: Description) -> dict[str, Sequence[Value]]:
    _check_mapping(description)
    base = {}
    for attr, values in description.items():
        if not isinstance(attr, str):
            raise ValueError(f"attribute names must be strings, got {attr!r}")
        _check_not_reserved(attr)
        if _parameter_attribute(attr) is None:
            base[attr] = values
    return base


def _source_job(source_job: object) -> str:
    if is_int(source_job):
        source_job = str(source_job)
    if not isinstance(source_job, str) or not source_job:
        raise ValueError(f"source job id must be a non-empty string, got {source_job!r}")
    return source_job


def _extra_variables(variables: Mapping[str, str] | None) -> dict[str, str]:
    if variables is None:
        return {}
    reserved = {r.lower() for r in _RESERVED}
    extra = {}
    for name, value in variables.items():
        if not isinstance(name, str) or not VAR_NAME.match(name):
            raise ValueError(f"variable name must be an identifier (dots allowed), got {name!r}")
        if name.split(".")[0].lower() in reserved:
            raise ValueError(f"variable {name} would shadow a value set by the parametric splitter")
        if not isinstance(value, str):
            raise ValueError(f"variable {name} must be a string, got {value!r}")
        extra[name] = value
    return extra


def _values_of(attr: str, values: object) -> Sequence[Value]:
    """An attribute's list of values (a bare string is not one)."""
    if isinstance(values, Sequence) and not isinstance(values, str):
        return values
    raise ValueError(f"attribute {attr}: values must be strings or lists of strings, got {values!r}")
