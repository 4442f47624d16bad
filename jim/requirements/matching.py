"""A job's requirements, and the queues that satisfy them.

:class:`JobRequirements` is the normal form of a job's requirements (``name = value`` pairs and a
ClassAd expression); :func:`matching_queues` finds the queues of a tree that satisfy them, or
raises :class:`NoEligibleQueue` naming the unmet requirement; :func:`preferred` picks one of them.
Tags follow DIRAC: a ``Tag`` list asks for all of its tags, and a queue's ``RequiredTag`` takes only
jobs that ask for every one of its tags.  The matching rules are in ``docs/requirements.md``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeGuard

from jim.errors import PlanError
from jim.requirements.expressions import InvalidRequirement, QueueAds, canonical_expression, classad_record
from jim.requirements.resources import KEY_VERSION, NAME_RE, ParamValue, Queue, ResourceTree, fits_int64, type_name

__all__ = ["JobRequirements", "NoEligibleQueue", "Requirement", "RequirementsLike", "matching_queues", "preferred"]

#: A normalised requirement value (lists are sorted, de-duplicated tuples).
ReqValue: TypeAlias = str | int | float | bool | tuple[str | int | float, ...]

_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\Z")
_MAX_LISTED = 6
#: The requirement whose list means "all of" (the job's tags), and the queue parameter naming the tags a
#: queue requires of every job it takes (both lower-case; DIRAC's ``Tag`` and ``RequiredTag``).
TAG = "tag"
REQUIRED_TAG = "requiredtag"


class NoEligibleQueue(PlanError, ValueError):
    """No queue satisfies the job's requirements; the message names the unmet one.

    ``unmet`` holds that requirement as text (e.g. ``"WallTimeLimit >= 200000"``
    or ``"GPU"`` for a parameter no queue has).
    """

    def __init__(self, message: str, *, unmet: str = ""):
        super().__init__(message)
        self.unmet = unmet


# ---------------------------------------------------------------- values


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _parse_number(text: str) -> int | float | None:
    """A decimal number written as text, or None (no ``inf``/``nan``/hex)."""
    text = text.strip()
    if not _NUMBER_RE.match(text):
        return None
    try:
        return int(text)
    except ValueError:
        return float(text)


def _parse_bool(text: str) -> bool | None:
    low = text.strip().lower()
    return True if low == "true" else False if low == "false" else None


def _canonical_number(value: int | float) -> int | float:
    """Integral floats become ints, so that 7200 and 7200.0 hash alike."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _fmt(value: Any) -> str:
    """A value as it appears in messages (JSON-like)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float):
        value = _canonical_number(value)
        return str(value) if isinstance(value, int) else repr(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def _satisfies_scalar(want: str | int | float | bool, have: str | int | float | bool) -> bool:
    """Equality of one required element with one queue element (typed by the queue)."""
    if isinstance(have, bool):
        if isinstance(want, bool):
            return want == have
        return isinstance(want, str) and _parse_bool(want) is have
    if _is_number(have):
        if _is_number(want):
            return want == have
        return isinstance(want, str) and _parse_number(want) == have
    return isinstance(want, str) and want == have


def _satisfies(want: ReqValue, have: ParamValue) -> bool:
    """Does a queue value satisfy one requirement value (see the table in docs/requirements.md)?"""
    if isinstance(want, tuple):
        haves = have if isinstance(have, tuple) else (have,)
        return any(_satisfies_scalar(w, h) for w in want for h in haves)
    if _is_number(want):
        return _is_number(have) and have >= want
    if isinstance(have, tuple):
        return not isinstance(want, bool) and any(_satisfies_scalar(want, h) for h in have)
    if isinstance(want, str) and _is_number(have):
        needed = _parse_number(want)
        return needed is not None and have >= needed
    return _satisfies_scalar(want, have)


def _requirement_value(name: str, value: object) -> ReqValue:
    """Validate and normalise one requirement value."""
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):  # not a bool: see above
        return _requirement_number(name, value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return _requirement_list(name, value)
    raise InvalidRequirement(f"requirement {name}: expected a string, number, boolean or list, got {type_name(value)}")


def _requirement_number(name: str, value: int | float) -> int | float:
    """A number a ClassAd can hold (not nan, an integer of 64 bits), integral floats as ints."""
    if isinstance(value, float) and math.isnan(value):
        raise InvalidRequirement(f"requirement {name}: nan is not a usable value")
    if isinstance(value, int) and not fits_int64(value):
        raise InvalidRequirement(f"requirement {name}: integer {value} does not fit in 64 bits")
    return _canonical_number(value)


def _requirement_list(name: str, value: Iterable[object]) -> tuple[str | int | float, ...]:
    """A non-empty list of strings and numbers, sorted (numbers first) and without duplicates."""
    items = [_list_element(name, item) for item in value]
    if not items:
        raise InvalidRequirement(f"requirement {name}: an empty list can never be satisfied")
    unique = dict.fromkeys(items)  # 1 and 1.0 are one key
    return tuple(sorted(unique, key=lambda v: (1, v, "") if isinstance(v, str) else (0, "", v)))


def _list_element(name: str, item: object) -> str | int | float:
    if isinstance(item, str):
        return item
    if _is_number(item) and not (isinstance(item, float) and math.isnan(item)):
        return _canonical_number(item)
    raise InvalidRequirement(f"requirement {name}: list elements must be strings or numbers, got {item!r}")


# ---------------------------------------------------------------- requirements


@dataclass(frozen=True)
class Requirement:
    """One ``name = value`` requirement; ``name`` keeps the job's spelling."""

    name: str
    value: ReqValue

    @property
    def key(self) -> str:
        """The normalised (lower-case) name."""
        return self.name.lower()

    @property
    def all_of(self) -> bool:
        """A list that means "all of": the job's tags (``Tag``), which a queue must all offer."""
        return self.key == TAG and isinstance(self.value, tuple)

    def satisfied_by(self, queue: Queue) -> bool:
        """True when ``queue`` has the parameter and its value satisfies this requirement."""
        have = queue.get(self.name)
        if have is None:
            return False
        if self.all_of and isinstance(self.value, tuple):
            return not _lacking(self.value, have)
        return _satisfies(self.value, have)

    def is_capacity(self, queues: Iterable[Queue] = ()) -> bool:
        """A ``>=`` requirement: a number, or a numeric string where queues hold numbers."""
        if _is_number(self.value):
            return True
        return (
            isinstance(self.value, str)
            and _parse_number(self.value) is not None
            and any(_is_number(q.get(self.name)) for q in queues)
        )

    def describe(self, queues: Iterable[Queue] = ()) -> str:
        """The requirement as text: ``WallTimeLimit >= 7200``, ``Queue in ["short", "long"]``,
        ``Tag has all of ["cvmfs", "gpu"]``, ``"cvmfs" in Tag`` (list-valued on ``queues``) or ``Site == "X"``."""
        if self.all_of:
            return f"{self.name} has all of {_fmt(self.value)}"
        if isinstance(self.value, tuple):
            return f"{self.name} in {_fmt(self.value)}"
        queues = tuple(queues)
        if self.is_capacity(queues):
            shown = _parse_number(self.value) if isinstance(self.value, str) else self.value
            return f"{self.name} >= {_fmt(shown)}"
        if any(isinstance(q.get(self.name), tuple) for q in queues):
            return f"{_fmt(self.value)} in {self.name}"
        return f"{self.name} == {_fmt(self.value)}"


def _elements(have: ParamValue | None) -> tuple[Any, ...]:
    """A queue value as a tuple: a scalar counts as one element, a missing value as none."""
    return () if have is None else have if isinstance(have, tuple) else (have,)


def _lacking(wanted: Sequence[Any], have: ParamValue | None) -> list[Any]:
    """The elements of ``wanted`` that no element of ``have`` (a scalar counts as one element) equals."""
    return [w for w in wanted if not any(_satisfies_scalar(w, h) for h in _elements(have))]


def _required_tags(queue: Queue) -> tuple[str, ...]:
    """The tags ``queue`` requires of every job it takes (its ``RequiredTag``, unioned down the tree)."""
    return tuple(str(r) for r in _elements(queue.get(REQUIRED_TAG)))


def _refused_tags(queue: Queue, tags: tuple[str | int | float | bool, ...]) -> tuple[str, ...]:
    """The tags ``queue`` requires that the job, asking for ``tags``, does not ask for."""
    return tuple(r for r in _required_tags(queue) if not any(_satisfies_scalar(t, r) for t in tags))


def _requirement_params(reqs: Mapping[Any, Any]) -> tuple[Requirement, ...]:
    seen: dict[str, Requirement] = {}
    for name, value in reqs.items():
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise InvalidRequirement(
                f"invalid requirement name {name!r} (letters, digits and '_', not starting with a digit)"
            )
        low = name.lower()
        if low in seen:
            raise InvalidRequirement(f"requirements {seen[low].name!r} and {name!r} differ only in case")
        seen[low] = Requirement(name, _requirement_value(name, value))
    return tuple(seen[k] for k in sorted(seen))


@dataclass(frozen=True, eq=False)
class JobRequirements:
    """A job's requirements, normalised: parameters sorted by lower-case name,
    plus an optional ClassAd expression (re-printed canonically).

    Build with :meth:`of` or :meth:`combine`.  Two instances are equal when
    their normal forms (:meth:`canonical`) are, even if the job spelled the
    names differently.
    """

    params: tuple[Requirement, ...] = ()
    expression: str | None = None

    @classmethod
    def of(cls, reqs: RequirementsLike) -> JobRequirements:
        """Normalise any accepted form (see docs/requirements.md); raises :class:`InvalidRequirement`."""
        if isinstance(reqs, JobRequirements):
            return reqs
        if reqs is None:
            return cls()
        if isinstance(reqs, str):
            text = reqs.strip()
            if not text:
                return cls()
            if text.startswith("["):
                return cls.of(classad_record(text))
            return cls(expression=canonical_expression(text))
        if isinstance(reqs, Mapping):
            return cls(params=_requirement_params(reqs))
        raise InvalidRequirement(f"requirements must be a mapping or a ClassAd expression, got {type_name(reqs)}")

    @classmethod
    def combine(cls, *parts: RequirementsLike) -> JobRequirements:
        """All of ``parts`` at once (e.g. an RSL extension plus a JDL expression).

        Mappings are merged (one name given twice with different values is an
        :class:`InvalidRequirement`); expressions are joined with ``&&``.
        """
        merged: dict[str, Requirement] = {}
        expressions: list[str] = []
        for part in map(cls.of, parts):
            for req in part.params:
                if req.key in merged and merged[req.key].value != req.value:
                    raise InvalidRequirement(f"requirement {req.name} is given twice with different values")
                merged.setdefault(req.key, req)
            if part.expression is not None and part.expression not in expressions:
                expressions.append(part.expression)
        expression = None
        if len(expressions) == 1:
            expression = expressions[0]
        elif expressions:
            expression = canonical_expression(" && ".join(f"({e})" for e in expressions))
        return cls(tuple(merged[k] for k in sorted(merged)), expression)

    @property
    def tags(self) -> tuple[str | int | float | bool, ...]:
        """The tags the job asks for: the values of its ``Tag`` requirement (not of an expression); may be empty."""
        for req in self.params:
            if req.key == TAG:
                return req.value if isinstance(req.value, tuple) else (req.value,)
        return ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JobRequirements):
            return NotImplemented
        return self.canonical() == other.canonical()

    def canonical(self) -> dict[str, Any]:
        """JSON-ready normal form (what equality compares); part of the cache key of stated pairs."""
        params = [[r.key, list(r.value) if isinstance(r.value, tuple) else r.value] for r in self.params]
        return {"v": KEY_VERSION, "params": params, "expr": self.expression}


#: Everything :meth:`JobRequirements.of` accepts.
RequirementsLike: TypeAlias = JobRequirements | Mapping[str, Any] | str | None


# ---------------------------------------------------------------- matching


def _eligible(reqs: JobRequirements, ads: QueueAds) -> tuple[Queue, ...]:
    holds = ads.holds(reqs.expression) if reqs.expression is not None else None
    tags = reqs.tags
    return tuple(
        q
        for i, q in enumerate(ads.tree.queues)
        if all(r.satisfied_by(q) for r in reqs.params) and (holds is None or holds[i]) and not _refused_tags(q, tags)
    )


def matching_queues(reqs: JobRequirements, tree: ResourceTree) -> tuple[Queue, ...]:
    """Every queue of ``tree`` that satisfies ``reqs``, in config order (never empty).

    Raises :class:`NoEligibleQueue`, naming the unmet requirement, when no queue does.
    """
    ads = QueueAds(tree)
    eligible = _eligible(reqs, ads)
    if not eligible:
        raise _explain(reqs, ads)
    return eligible


def preferred(queues: Sequence[Queue], prefer: str | Sequence[str] = ("WallTimeLimit",)) -> Queue:
    """The first of ``queues`` by the ``prefer`` parameters (by default the smallest WallTimeLimit), then by order.

    Queues without a numeric value for a parameter sort after those with one; a ``-`` before a
    name (``"-MaxRAM"``) sorts that parameter in descending order; ``prefer=()`` keeps the order.
    """
    keys: list[tuple[str, int]] = []
    for name in (prefer,) if isinstance(prefer, str) else prefer:
        if not NAME_RE.match(name.removeprefix("-")):
            raise ValueError(f"prefer: invalid parameter name {name!r}")
        keys.append((name.removeprefix("-"), -1 if name.startswith("-") else 1))

    def order(index: int) -> tuple[Any, ...]:
        values = [(sign, queues[index].get(name)) for name, sign in keys]
        return (*((0, sign * v) if _is_number(v) else (1, 0) for sign, v in values), index)

    return queues[min(range(len(queues)), key=order)]


# ---------------------------------------------------------------- why no queue is eligible


def _join_limited(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    extra = len(items) - _MAX_LISTED
    return f"{shown}, ... ({extra} more)" if extra > 0 else shown


def _extreme(word: str, name: str, holders: Sequence[Queue], tree: ResourceTree) -> str | None:
    """``largest: <queue> with <value>`` (or ``smallest``) of ``name`` on ``holders``; None if it is never a number."""
    numeric = [(value, q) for q in holders if _is_number(value := q.get(name))]
    if not numeric:
        return None
    value, best = (max if word == "largest" else min)(numeric, key=lambda pair: pair[0])
    return f"{word}: {tree.label(best)} with {_fmt(value)}"


def _offer(req: Requirement, holders: Sequence[Queue], tree: ResourceTree) -> str:
    """What the queues that have the parameter offer, for an error message."""
    if req.all_of and isinstance(req.value, tuple):
        offered: list[Any] = []
        for q in holders:
            offered.extend(_elements(q.get(req.name)))
        if not _lacking(req.value, tuple(offered)):  # each is offered somewhere, never all on one queue
            lacks = [_lacking(req.value, q.get(req.name)) for q in holders]
            best = min(range(len(holders)), key=lambda i: len(lacks[i]))
            return f"closest: {tree.label(holders[best])}, without {_fmt(lacks[best])}"
    if req.is_capacity(holders):
        return _extreme("largest", req.name, holders, tree) or f"{req.name} is not a number on any queue"
    return _available(req.name, holders)


def _available(name: str, holders: Sequence[Queue]) -> str:
    """``available: v1, v2, ...``: the distinct values of ``name`` on ``holders``."""
    values: list[str] = []
    for q in holders:
        have = q.get(name)
        for v in have if isinstance(have, tuple) else (have,):
            text = _fmt(v)
            if text not in values:
                values.append(text)
    return "available: " + _join_limited(values) if values else "no queue lists a value"


def _offer_for_term(term: str, refs: Sequence[str], holders: Sequence[Queue], tree: ResourceTree) -> str:
    """What the queues offer for the single parameter a failing expression term tests."""
    if len(refs) != 1 or not holders:
        return ""
    word = "largest" if re.search(r"(?<![<>=!])>=?(?!=)", term) else "smallest" if re.search(r"<=?(?!=)", term) else ""
    extreme = _extreme(word, refs[0], holders, tree) if word else None
    return f" ({extreme or _available(refs[0], holders)})"


def _explain(reqs: JobRequirements, ads: QueueAds) -> NoEligibleQueue:
    """Name the requirement no queue meets, or the closest queue's unmet ones.

    The parameters are looked at first, then the expression's terms, then the tags the queues
    require; what each queue does not meet is gathered on the way, to name the closest queue."""
    unmet: list[list[str]] = [[] for _ in ads.tree.queues]
    for step in (_parameter_met_nowhere, _term_met_nowhere, _taken_nowhere):
        refusal = step(reqs, ads, unmet)
        if refusal is not None:
            return refusal
    return _closest(ads.tree, unmet)


def _note(unmet: list[list[str]], met: Sequence[bool], text: str) -> None:
    """Add ``text`` to the unmet requirements of every queue where ``met`` is false."""
    for i, ok in enumerate(met):
        if not ok:
            unmet[i].append(text)


def _parameter_met_nowhere(reqs: JobRequirements, ads: QueueAds, unmet: list[list[str]]) -> NoEligibleQueue | None:
    """The first ``name = value`` requirement no queue has or meets, with what the queues offer."""
    tree = ads.tree
    for req in reqs.params:
        holders = [q for q in tree.queues if req.name in q]
        if not holders:
            return NoEligibleQueue(f"no queue has parameter {req.name}", unmet=req.name)
        text = req.describe(holders)
        met = [req.satisfied_by(q) for q in tree.queues]
        if not any(met):
            return NoEligibleQueue(f"no queue satisfies {text} ({_offer(req, holders, tree)})", unmet=text)
        _note(unmet, met, text)
    return None


def _term_met_nowhere(reqs: JobRequirements, ads: QueueAds, unmet: list[list[str]]) -> NoEligibleQueue | None:
    """The first term of the expression that holds on no queue: a parameter no queue has, or what
    the queues offer for the one it tests."""
    if reqs.expression is None:
        return None
    queues = ads.tree.queues
    for term, refs, met in ads.terms(reqs.expression):
        if not any(met):
            absent = [name for name in refs if not any(name in q for q in queues)]
            if absent:
                return NoEligibleQueue(f"no queue has parameter {absent[0]} (needed by {term})", unmet=absent[0])
            holders = [q for q in queues if refs and refs[0] in q]
            offer = _offer_for_term(term, refs, holders, ads.tree)
            return NoEligibleQueue(f"no queue satisfies {term}{offer}", unmet=term)
        _note(unmet, met, term)
    return None


def _taken_nowhere(reqs: JobRequirements, ads: QueueAds, unmet: list[list[str]]) -> NoEligibleQueue | None:
    """Every queue requires a tag the job does not ask for: each queue's ``RequiredTag`` named."""
    tree = ads.tree
    tags = reqs.tags
    refused = [_refused_tags(q, tags) for q in tree.queues]
    if all(refused):
        asked = f"with Tag [{_join_limited([_fmt(t) for t in tags])}]" if tags else "without tags"
        required = _join_limited([f"{tree.label(q)}: {_fmt(_required_tags(q))}" for q in tree.queues])
        return NoEligibleQueue(
            f"no queue takes a job {asked}: each has a RequiredTag the job does not ask for ({required})",
            unmet="RequiredTag",
        )
    for i, missing in enumerate(refused):
        if missing:
            unmet[i].append(f"RequiredTag {_fmt(missing)}")
    return None


def _closest(tree: ResourceTree, unmet: Sequence[Sequence[str]]) -> NoEligibleQueue:
    """The queue with the fewest unmet requirements (the first of those), and them."""
    closest = min(range(len(tree.queues)), key=lambda i: (len(unmet[i]), i))
    text = "; ".join(unmet[closest])
    return NoEligibleQueue(
        f"no single queue satisfies all requirements (closest: {tree.label(tree.queues[closest])}, unmet: {text})",
        unmet=text,
    )
