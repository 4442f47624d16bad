"""Job requirements → local queue (DIRAC RFC #7 matching, plus ClassAd expressions).

A pure module: it reads only what it is given (the parsed ``[resources]`` table,
the job's requirements) and does no I/O, except through the persistent
:class:`QueueCache` a caller may pass (see the last section).  The ``classad2`` module (from the
``htcondor`` wheel; ``classad`` as a fallback) is imported lazily, and only when
a ClassAd expression or record has to be parsed or evaluated.

Site resources (TOML)
=====================

The site describes its resources as a tree: the site (the ``[resources]`` table
itself), its computing elements (``[resources.ce.<ce>]``) and their queues
(``[resources.ce.<ce>.queue.<queue>]``).  Every level holds arbitrary
parameters::

    [resources]                          # site level
    Site = "JIM.TEST.site"
    Platform = ["x86_64-el9"]
    Tag = ["cvmfs"]

    [resources.ce.localhost]             # computing element "localhost"
    MaxCPUTime = 86400

    [resources.ce.localhost.queue.short] # queue "short" of CE "localhost"
    WallTimeLimit = 3600
    MaxRAM = 4096

    [resources.ce.localhost.queue.long]
    WallTimeLimit = 172800
    MaxCPUTime = 604800                  # overrides the CE's value
    Tag = ["bigmem"]                     # effective Tag: ["cvmfs", "bigmem"]

Rules:

* A parameter name is a ClassAd attribute name (``[A-Za-z_][A-Za-z0-9_]*``).
  Names are case-insensitive: they are compared after ``str.lower()``; the
  spelling of the level that set the effective value is kept for display and
  for the ClassAd.  Two names in one table that differ only in case are an error.
* A value is a string, an integer (64-bit), a float (``inf`` allowed, ``nan``
  not), a boolean, or a list of strings.  Tables, dates and other lists are
  errors.
* Inheritance is site → CE → queue.  A lower level **overrides** a parameter,
  except ``Tag`` and ``RequiredTag``, which are **unioned** (parent values
  first, then new ones; a single string counts as a one-element list), as
  DIRAC does for tags (``reference/splitting-semantics.md`` §4.11).
* ``CE`` and ``Queue`` are reserved: jim sets them on every queue to the CE's
  and the queue's name, so a job may ask for ``Queue = ["short", "long"]`` (for
  example from the RSL ``queue`` attribute).  ``ce`` at site level and
  ``queue`` at CE level must be tables of tables; they are the only tables.
* CE and queue names are non-empty and contain no white space and no ``/``.
  Every CE has at least one queue, and the site at least one CE.  Queue names
  may repeat across CEs (the pair is unique); the tree's order is the file's
  order (``tomllib`` keeps it), CE by CE.
* No ``[resources]`` table (or an empty one) gives :func:`default_tree`: one
  queue ``default`` on CE ``default`` with no limits, so a job without
  requirements always matches (and a job *with* requirements does not, by the
  missing-parameter rule).

Every configuration error is a :class:`ResourceConfigError` (a ``ValueError``
and a :class:`jim.errors.ConfigError`) with a one-line message that starts with
the TOML path of the culprit, e.g.
``resources.ce.localhost.queue.short.MaxRAM: expected a string, number,
boolean or list of strings, got a table``.

Job requirements
================

A job states its requirements in one of these forms (see
:meth:`JobRequirements.of`):

* a mapping name → value (the RSL extension, the JDL ``Requirements = [ ... ]``
  section, or the JSON description), values being a string, a number, a
  boolean, or a list of strings/numbers;
* a ClassAd record text ``"[ Tag = {"a"}; MaxRAM = 4000 ]"`` (DIRAC's JDL
  form), read into such a mapping;
* a ClassAd expression in HTCondor syntax, e.g.
  ``WallTimeLimit >= 7200 && member("cvmfs", Tag)``;
* ``None``, ``{}`` or a blank string: no requirements.

:meth:`JobRequirements.combine` merges several of these.  Names are matched
literally (case aside): mapping a job's ``CPUTime`` onto a queue's
``MaxCPUTime``, say, is the caller's business.

A queue matches a mapping when **every** required parameter exists among the
queue's effective parameters and its value satisfies the requirement:

=====================  ====================================================
requirement value      queue value must
=====================  ====================================================
list ("any of")        share at least one element with the queue's value
                       (a scalar counts as a one-element list); elements
                       compare by equality
number                 be a number ``>=`` the requirement (capacity)
string                 equal the queue's string, or be an element of the
                       queue's list; case-sensitive
boolean                be the same boolean
=====================  ====================================================

RSL and the GRAM JSON description carry only strings, so a string also
compares with a typed queue value: with a number it is parsed as a decimal
number and used as a capacity (``"4000"`` vs ``MaxRAM = 4096`` matches), with
a boolean ``"true"``/``"false"`` (any case) compare as booleans.  A string
that does not parse never matches a number.

A ClassAd expression is evaluated against each queue: the queue's effective
parameters become a ClassAd that is both the scope of the expression and its
``TARGET``, so ``WallTimeLimit``, ``MY.WallTimeLimit`` and
``TARGET.WallTimeLimit`` all name the queue's parameter.  Only the queue's
parameters are visible (put job values in the expression literally).  The
queue matches only when the result is exactly ``true``: ``undefined`` (e.g. a
missing parameter), ``error``, numbers and strings do not match.  ClassAd
semantics apply: ``==`` and ``member()`` ignore case for strings, ``=?=`` and
``identicalMember()`` do not.  An expression that does not parse raises
:class:`InvalidRequirement`.  A :class:`JobRequirements` may carry a mapping
and an expression at once; both must hold.

Selection
=========

:func:`select_queue` returns, among the eligible queues, the one that sorts
first by the ``prefer`` parameters, then by config order.  The default
``prefer=("WallTimeLimit",)`` means: the smallest sufficient
``WallTimeLimit``; queues without a numeric ``WallTimeLimit`` (no limit) come
after those with one; ties go to the queue listed first.  A ``-`` before a
name (``"-MaxRAM"``) sorts that parameter in descending order.

When no queue is eligible, :class:`NoEligibleQueue` (a ``ValueError`` and a
:class:`jim.errors.PlanError`) says which requirement is unmet, checking the
requirements in order of their lower-cased names, then the expression's
top-level ``&&`` terms in order:

* ``no queue has parameter GPU``
* ``no queue satisfies WallTimeLimit >= 200000 (largest: long with 172800)``
* ``no queue satisfies Tag in ["gpu"] (available: "cvmfs", "bigmem")``
* ``no queue satisfies TARGET.WallTimeLimit >= 200000 (largest: long with 172800)``
* ``no single queue satisfies all requirements (closest: short, unmet: WallTimeLimit >= 7200)``

A queue is named by its name alone when that is unique in the tree, otherwise
as ``<ce>/<queue>``.

Cache
=====

Identical requirement sets share one evaluation (DIRAC's SubmitPool idea).
:func:`cache_key` hashes the normalised requirements: names lower-cased and
sorted, list values sorted and de-duplicated, integral floats written as
integers, the expression re-printed by the ClassAd parser.  It is the sha256
of canonical JSON, so it is stable across processes and may be persisted.
With ``tree=...`` the key also covers :attr:`ResourceTree.fingerprint` (sha256
of the tree's canonical JSON), so a persisted key goes stale when the
configuration changes.  :class:`RequirementMatcher` keeps the eligible queues
per ``(tree fingerprint, requirements key)`` in a dict; giving it a different
tree drops the cache.

A job's requirements, from its description
==========================================

:func:`requirements_of_description` reads the values of a job description's
``requirements`` attribute (strings, or lists of strings for nested RSL
sequences) and its GRAM ``queue`` attribute into :class:`StatedRequirements`:

* ``"Name=value"`` -- one requirement, e.g. RSL
  ``(requirements="WallTimeLimit=7200" "Tag=cvmfs")``.  The value may be
  quoted (``Site="A B"``); an unquoted value with commas is a list, i.e. any of
  its elements (``"Tag=cvmfs,gpu"``).  ``=`` followed by ``=``, ``?`` or ``!``
  is a ClassAd operator, not a pair.
* a nested sequence ``(Name v1 v2 ...)`` -- one requirement, e.g. RSL
  ``(requirements=(Tag cvmfs gpu)(WallTimeLimit 7200))``; two or more values
  are a list.
* ``"[ ... ]"`` -- a ClassAd record (DIRAC's JDL ``Requirements = [ ... ]``).
* anything else -- a ClassAd expression, e.g. ``"WallTimeLimit >= 7200"`` or
  a JDL ``Requirements = other.WallTimeLimit >= 7200``; several are joined
  with ``&&``.
* GRAM ``(queue=long)`` -- the requirement ``Queue = "long"``.

One name given twice is an :class:`InvalidRequirement` (write a list, or an
expression).  Values stay strings, as RSL gives them: the matching rules above
compare them with typed queue values.

Choosing a job's queue, and the persistent cache
================================================

:func:`choose_queue` is what ``jim submit`` and ``jim plan`` call.  Without a
``[resources]`` table the site describes no queues: a job without
requirements goes to the batch system's default queue (``name`` is ``None``),
a GRAM ``queue`` is passed through unchecked, and any other requirement is
matched against :func:`default_tree` (so it fails, naming the parameter no
queue has).  With ``[resources]``, the eligible queues are computed (or read
from the cache) and one is selected as :func:`select_queue` does.

jim runs once per submit, so an in-process cache would never be hit.
:class:`QueueCache` keeps the eligible queues of each requirement set in one
small JSON file (``$JIM_HOME/cache/requirements.json``), keyed by
:attr:`StatedRequirements.key` combined with the tree's fingerprint: sha256
of the requirement *as stated* (pairs normalised as :func:`cache_key` does --
names lower-cased and sorted, lists sorted -- expressions and records as
written), so that a hit needs neither the ClassAd parser nor its import (about
40 ms).  A changed configuration changes the fingerprint, hence the key: stale
entries are never used, and the oldest are dropped beyond ``max_entries``.  The
file is replaced atomically (temporary file + ``os.replace``); a missing,
unreadable or corrupt file is an empty cache, never an error, and a file that
cannot be written is skipped.  Failures (no eligible queue) are not cached:
their message is built from a fresh evaluation.  This section is the only
place in the module that does I/O, and only through a :class:`QueueCache` the
caller passes.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType, ModuleType
from typing import Any, Union

from jim.errors import ConfigError, InvalidAttribute, PlanError

__all__ = [
    "DEFAULT_PREFER",
    "UNION_PARAMETERS",
    "InvalidRequirement",
    "JobRequirements",
    "NoEligibleQueue",
    "ParamValue",
    "Queue",
    "Requirement",
    "RequirementMatcher",
    "RequirementsLike",
    "ResourceConfigError",
    "ResourceTree",
    "QueueCache",
    "QueueChoice",
    "StatedRequirements",
    "cache_key",
    "choose_queue",
    "default_tree",
    "eligible_queues",
    "parse_resources",
    "queue_matches",
    "requirements_of_description",
    "select_queue",
    "tree_from_config",
]

#: An effective queue parameter value (lists are stored as tuples).
ParamValue = Union[str, int, float, bool, tuple[str, ...]]
#: A normalised requirement value (lists are sorted, de-duplicated tuples).
ReqValue = Union[str, int, float, bool, tuple[Union[str, int, float], ...]]

#: Parameters whose values are unioned down the tree instead of overridden.
UNION_PARAMETERS = frozenset({"tag", "requiredtag"})
#: The parameters jim sets on every queue (lower-case name → spelling).
RESERVED_PARAMETERS = MappingProxyType({"ce": "CE", "queue": "Queue"})
#: Default selection order: smallest sufficient WallTimeLimit first.
DEFAULT_PREFER: tuple[str, ...] = ("WallTimeLimit",)

_KEY_VERSION = 1
_INT64 = 2**63
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NODE_NAME_RE = re.compile(r"[^\s/]+\Z")
_BARE_KEY_RE = re.compile(r"[A-Za-z0-9_-]+\Z")
_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\Z")
_EXPR_ATTR = "_jim_requirement"
_MAX_LISTED = 6


# ---------------------------------------------------------------- errors


class ResourceConfigError(ConfigError, ValueError):
    """The ``[resources]`` table is malformed (one line, starting with the TOML path)."""


class InvalidRequirement(InvalidAttribute, ValueError):
    """A job's requirements are malformed (bad name, value or ClassAd expression)."""


class NoEligibleQueue(PlanError, ValueError):
    """No queue satisfies the job's requirements; the message names the unmet one.

    ``unmet`` holds that requirement as text (e.g. ``"WallTimeLimit >= 200000"``
    or ``"GPU"`` for a parameter no queue has).
    """

    def __init__(self, message: str, *, unmet: str = ""):
        super().__init__(message)
        self.unmet = unmet


# ---------------------------------------------------------------- small helpers


def _is_number(value: object) -> bool:
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


def _type_name(value: object) -> str:
    """An article and a TOML-ish type name, for messages."""
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, (list, tuple, set, frozenset)):
        return "a list"
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string")):
        if isinstance(value, kind):
            return name
    if isinstance(value, (datetime.date, datetime.time)):
        return "a date/time"
    return "a " + type(value).__name__


def _path(*keys: str) -> str:
    """A TOML dotted path, quoting keys that are not bare."""
    return ".".join(k if _BARE_KEY_RE.match(k) else json.dumps(k, ensure_ascii=False) for k in keys)


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _sha256(obj: Any) -> str:
    return hashlib.sha256(_canonical_json(obj).encode("utf-8")).hexdigest()


def _join_limited(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    extra = len(items) - _MAX_LISTED
    return f"{shown}, ... ({extra} more)" if extra > 0 else shown


# ---------------------------------------------------------------- queues and the tree


@dataclass(frozen=True)
class Queue:
    """One local queue with its effective parameters (after inheritance).

    ``params`` maps the display spelling of each name to its value; lists are
    tuples and the mapping is read-only.  Look parameters up with :meth:`get`
    or ``in``, which ignore case.  ``CE`` and ``Queue`` are always present.
    """

    name: str
    ce: str
    params: Mapping[str, ParamValue] = field(default_factory=dict, hash=False)
    _names: Mapping[str, str] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        params: dict[str, ParamValue] = {}
        names: dict[str, str] = {}
        merged = {"CE": self.ce, "Queue": self.name}
        merged.update({k: v for k, v in self.params.items() if k.lower() not in RESERVED_PARAMETERS})
        for key, value in merged.items():
            low = key.lower()
            if low in names:
                raise ValueError(f"queue {self.ce}/{self.name}: parameters {names[low]!r} and {key!r} "
                                 f"differ only in case")
            names[low] = key
            params[key] = tuple(value) if isinstance(value, list) else value
        object.__setattr__(self, "params", MappingProxyType(params))
        object.__setattr__(self, "_names", MappingProxyType(names))

    @property
    def qualified_name(self) -> str:
        """``<ce>/<queue>``: unique in a tree."""
        return f"{self.ce}/{self.name}"

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._names

    def get(self, name: str, default: ParamValue | None = None) -> ParamValue | None:
        """The effective value of parameter ``name`` (any case), or ``default``."""
        key = self._names.get(name.lower())
        return default if key is None else self.params[key]

    def canonical(self) -> dict[str, Any]:
        """JSON-ready form with lower-cased names (for fingerprints)."""
        return {"ce": self.ce, "queue": self.name,
                "params": {k.lower(): list(v) if isinstance(v, tuple) else v for k, v in self.params.items()}}


@dataclass(frozen=True)
class ResourceTree:
    """The site's queues in config order, flattened; immutable.

    ``fingerprint`` is the sha256 of the canonical JSON of every queue's
    effective parameters, in order: it changes whenever matching or selection
    could change.
    """

    queues: tuple[Queue, ...]
    fingerprint: str = field(init=False, compare=False)
    _labels: Mapping[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        queues = tuple(self.queues)
        if not queues:
            raise ValueError("a resource tree needs at least one queue")
        seen: set[str] = set()
        for q in queues:
            if q.qualified_name in seen:
                raise ValueError(f"queue {q.qualified_name} appears twice")
            seen.add(q.qualified_name)
        counts: dict[str, int] = {}
        for q in queues:
            counts[q.name] = counts.get(q.name, 0) + 1
        labels = {q.qualified_name: q.name if counts[q.name] == 1 else q.qualified_name for q in queues}
        object.__setattr__(self, "queues", queues)
        object.__setattr__(self, "_labels", MappingProxyType(labels))
        object.__setattr__(self, "fingerprint",
                           _sha256({"v": _KEY_VERSION, "queues": [q.canonical() for q in queues]}))

    def __iter__(self) -> Iterator[Queue]:
        return iter(self.queues)

    def __len__(self) -> int:
        return len(self.queues)

    def label(self, queue: Queue) -> str:
        """The queue's name if unique in the tree, else ``<ce>/<queue>``."""
        return self._labels.get(queue.qualified_name, queue.qualified_name)

    def find(self, name: str, ce: str | None = None) -> Queue:
        """The queue called ``name`` (on ``ce`` if given; ``name`` may be ``ce/queue``)."""
        if ce is None and "/" in name:
            ce, name = name.split("/", 1)
        found = [q for q in self.queues if q.name == name and (ce is None or q.ce == ce)]
        if len(found) != 1:
            what = "no" if not found else "more than one"
            raise KeyError(f"{what} queue {name!r}" + (f" on CE {ce!r}" if ce else ""))
        return found[0]


def default_tree() -> ResourceTree:
    """The tree used without ``[resources]``: queue ``default`` on CE ``default``, no limits."""
    return _DEFAULT_TREE


_DEFAULT_TREE = ResourceTree((Queue("default", "default"),))


# ---------------------------------------------------------------- parsing [resources]

_Params = dict[str, tuple[str, ParamValue]]  # lower name → (spelling, value)


def _config_value(value: object, where: str, union: bool) -> ParamValue:
    """Validate one TOML parameter value; lists become tuples."""
    if union:
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ResourceConfigError(f"{where}: expected a string or a list of strings, got {_type_name(value)}")
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise ResourceConfigError(f"{where}: integer {value} does not fit in 64 bits")
        return value
    if isinstance(value, float):
        if math.isnan(value):
            raise ResourceConfigError(f"{where}: nan is not a usable value")
        return value
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ResourceConfigError(f"{where}: a list value must hold only strings")
    raise ResourceConfigError(f"{where}: expected a string, number, boolean or list of strings, "
                              f"got {_type_name(value)}")


def _level(table: object, keys: tuple[str, ...], child: str | None) -> tuple[_Params, Mapping[str, Any] | None]:
    """Split one level's table into its parameters and its ``child`` sub-table."""
    where = _path(*keys)
    if not isinstance(table, Mapping):
        raise ResourceConfigError(f"{where}: expected a table, got {_type_name(table)}")
    params: _Params = {}
    sub: Mapping[str, Any] | None = None
    for key, value in table.items():
        if not isinstance(key, str):
            raise ResourceConfigError(f"{where}: parameter names must be strings, got {key!r}")
        kwhere = _path(*keys, key)
        low = key.lower()
        if child is not None and key == child:
            if not isinstance(value, Mapping):
                raise ResourceConfigError(f"{kwhere}: expected a table of tables "
                                          f"([{_path(*keys, child)}.<name>]), got {_type_name(value)}")
            sub = value
            continue
        if low == "ce" and key == "ce" and isinstance(value, Mapping):
            raise ResourceConfigError(f"{kwhere}: computing elements belong under [resources.ce.<name>]")
        if low == "queue" and key == "queue" and isinstance(value, Mapping):
            raise ResourceConfigError(f"{kwhere}: queues belong under [resources.ce.<ce>.queue.<name>]")
        if low in RESERVED_PARAMETERS:
            owner = "computing element" if low == "ce" else "queue"
            raise ResourceConfigError(f"{kwhere}: {key!r} is reserved (jim sets "
                                      f"{RESERVED_PARAMETERS[low]} to the {owner}'s name)")
        if not _NAME_RE.match(key):
            raise ResourceConfigError(f"{kwhere}: invalid parameter name (letters, digits and '_', "
                                      f"not starting with a digit)")
        if low in params:
            raise ResourceConfigError(f"{where}: parameters {params[low][0]!r} and {key!r} differ only in case")
        params[low] = (key, _config_value(value, kwhere, low in UNION_PARAMETERS))
    return params, sub


def _inherit(parent: _Params, child: _Params) -> _Params:
    """Child overrides parent, except union parameters, whose values are merged."""
    merged = dict(parent)
    for low, (key, value) in child.items():
        if low in UNION_PARAMETERS:
            assert isinstance(value, tuple)
            inherited = merged[low][1] if low in merged else ()
            assert isinstance(inherited, tuple)
            value = tuple(dict.fromkeys(inherited + value))
        merged[low] = (key, value)
    return merged


def _node_names(table: Mapping[str, Any], keys: tuple[str, ...], what: str) -> Iterator[tuple[str, Any]]:
    if not table:
        raise ResourceConfigError(f"{_path(*keys)}: no {what}; add [{_path(*keys)}.<name>]")
    for name, value in table.items():
        if not isinstance(name, str) or not _NODE_NAME_RE.match(name):
            raise ResourceConfigError(f"{_path(*keys)}: invalid {what} name {name!r} "
                                      f"(no white space, no '/')")
        yield name, value


def parse_resources(table: Mapping[str, Any] | None, *, path: str = "resources") -> ResourceTree:
    """Build the flattened queue tree from the ``[resources]`` table (as parsed by tomllib).

    ``None`` or an empty table gives :func:`default_tree`.  Raises
    :class:`ResourceConfigError` (a ``ValueError``) with a one-line message
    naming the TOML path at fault.  ``path`` is the table's own path, used in
    messages only.
    """
    if table is None or (isinstance(table, Mapping) and not table):
        return default_tree()
    root = (path,)
    site, ces = _level(table, root, "ce")
    if ces is None:
        raise ResourceConfigError(f"{path}: no computing element; add [{path}.ce.<name>.queue.<queue>]")
    queues: list[Queue] = []
    for ce_name, ce_table in _node_names(ces, (*root, "ce"), "computing element"):
        ce_keys = (*root, "ce", ce_name)
        ce_params, queue_tables = _level(ce_table, ce_keys, "queue")
        if queue_tables is None:
            raise ResourceConfigError(f"{_path(*ce_keys)}: no queue; add [{_path(*ce_keys, 'queue')}.<name>]")
        ce_effective = _inherit(site, ce_params)
        for q_name, q_table in _node_names(queue_tables, (*ce_keys, "queue"), "queue"):
            q_params, _ = _level(q_table, (*ce_keys, "queue", q_name), None)
            effective = _inherit(ce_effective, q_params)
            queues.append(Queue(q_name, ce_name, {key: value for key, value in effective.values()}))
    return ResourceTree(tuple(queues))


def tree_from_config(config: Mapping[str, Any]) -> ResourceTree:
    """The tree of a whole parsed config file: its ``[resources]`` table, or the default."""
    return parse_resources(config.get("resources"))


# ---------------------------------------------------------------- requirements


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
    """Does a queue value satisfy one requirement value (see the module table)?"""
    if isinstance(want, tuple):
        haves = have if isinstance(have, tuple) else (have,)
        return any(_satisfies_scalar(w, h) for w in want for h in haves)
    if _is_number(want):
        return _is_number(have) and have >= want  # type: ignore[operator]
    if isinstance(have, tuple):
        return not isinstance(want, bool) and any(_satisfies_scalar(want, h) for h in have)
    if isinstance(want, str) and _is_number(have):
        needed = _parse_number(want)
        return needed is not None and have >= needed  # type: ignore[operator]
    return _satisfies_scalar(want, have)


def _requirement_value(name: str, value: object) -> ReqValue:
    """Validate and normalise one requirement value."""
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if _is_number(value):
        assert isinstance(value, (int, float))
        if isinstance(value, float) and math.isnan(value):
            raise InvalidRequirement(f"requirement {name}: nan is not a usable value")
        if isinstance(value, int) and not -_INT64 <= value < _INT64:
            raise InvalidRequirement(f"requirement {name}: integer {value} does not fit in 64 bits")
        return _canonical_number(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items: list[str | int | float] = []
        for item in value:
            if isinstance(item, str):
                items.append(item)
            elif _is_number(item) and not (isinstance(item, float) and math.isnan(item)):
                items.append(_canonical_number(item))  # type: ignore[arg-type]
            else:
                raise InvalidRequirement(f"requirement {name}: list elements must be strings or numbers, "
                                         f"got {item!r}")
        if not items:
            raise InvalidRequirement(f"requirement {name}: an empty list can never be satisfied")
        unique = dict.fromkeys(items)  # 1 and 1.0 are one key
        return tuple(sorted(unique, key=lambda v: (1, v, "") if isinstance(v, str) else (0, "", v)))
    raise InvalidRequirement(f"requirement {name}: expected a string, number, boolean or list, "
                             f"got {_type_name(value)}")


@dataclass(frozen=True)
class Requirement:
    """One ``name = value`` requirement; ``name`` keeps the job's spelling."""

    name: str
    value: ReqValue

    @property
    def key(self) -> str:
        """The normalised (lower-case) name."""
        return self.name.lower()

    def satisfied_by(self, queue: Queue) -> bool:
        """True when ``queue`` has the parameter and its value satisfies this requirement."""
        have = queue.get(self.name)
        return have is not None and _satisfies(self.value, have)

    def is_capacity(self, queues: Iterable[Queue] = ()) -> bool:
        """A ``>=`` requirement: a number, or a numeric string where queues hold numbers."""
        if _is_number(self.value):
            return True
        return (isinstance(self.value, str) and _parse_number(self.value) is not None
                and any(_is_number(q.get(self.name)) for q in queues))

    def describe(self, queues: Iterable[Queue] = ()) -> str:
        """The requirement as text: ``WallTimeLimit >= 7200``, ``Tag in ["gpu"]``,
        ``"cvmfs" in Tag`` (list-valued on ``queues``) or ``Site == "X"``."""
        if isinstance(self.value, tuple):
            return f"{self.name} in {_fmt(self.value)}"
        queues = tuple(queues)
        if self.is_capacity(queues):
            shown = self.value if _is_number(self.value) else _parse_number(self.value)  # type: ignore[arg-type]
            return f"{self.name} >= {_fmt(shown)}"
        if any(isinstance(q.get(self.name), tuple) for q in queues):
            return f"{_fmt(self.value)} in {self.name}"
        return f"{self.name} == {_fmt(self.value)}"


@dataclass(frozen=True, eq=False)
class JobRequirements:
    """A job's requirements, normalised: parameters sorted by lower-case name,
    plus an optional ClassAd expression (re-printed canonically).

    Build with :meth:`of`; ``key`` is the process-stable cache key.  Two
    instances are equal when their normal forms are (names compared without
    case), even if the job spelled the names differently.
    """

    params: tuple[Requirement, ...] = ()
    expression: str | None = None

    @classmethod
    def of(cls, reqs: RequirementsLike) -> JobRequirements:
        """Normalise any accepted form (see the module docstring); raises :class:`InvalidRequirement`."""
        if isinstance(reqs, JobRequirements):
            return reqs
        if reqs is None:
            return cls()
        if isinstance(reqs, str):
            text = reqs.strip()
            if not text:
                return cls()
            if text.startswith("["):
                return cls.of(_classad_record(text))
            return cls(expression=_canonical_expression(text))
        if isinstance(reqs, Mapping):
            return cls(params=_requirement_params(reqs))
        raise InvalidRequirement(f"requirements must be a mapping or a ClassAd expression, got {_type_name(reqs)}")

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
        if expressions:
            expression = expressions[0] if len(expressions) == 1 else \
                _canonical_expression(" && ".join(f"({e})" for e in expressions))
        return cls(tuple(merged[k] for k in sorted(merged)), expression)

    def __bool__(self) -> bool:
        return bool(self.params) or self.expression is not None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JobRequirements):
            return NotImplemented
        return self.canonical() == other.canonical()

    def __hash__(self) -> int:
        return hash(self.key)

    def canonical(self) -> dict[str, Any]:
        """JSON-ready normal form: what :attr:`key` hashes."""
        return {"v": _KEY_VERSION,
                "params": [[r.key, list(r.value) if isinstance(r.value, tuple) else r.value] for r in self.params],
                "expr": self.expression}

    @property
    def key(self) -> str:
        """sha256 of the canonical JSON: equal for permuted or re-cased identical requirements."""
        return _sha256(self.canonical())


#: Everything :meth:`JobRequirements.of` accepts.
RequirementsLike = Union[JobRequirements, Mapping[str, Any], str, None]


def _requirement_params(reqs: Mapping[Any, Any]) -> tuple[Requirement, ...]:
    seen: dict[str, Requirement] = {}
    for name, value in reqs.items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InvalidRequirement(f"invalid requirement name {name!r} (letters, digits and '_', "
                                     f"not starting with a digit)")
        low = name.lower()
        if low in seen:
            raise InvalidRequirement(f"requirements {seen[low].name!r} and {name!r} differ only in case")
        seen[low] = Requirement(name, _requirement_value(name, value))
    return tuple(seen[k] for k in sorted(seen))


def cache_key(reqs: RequirementsLike, tree: ResourceTree | None = None) -> str:
    """Process-stable key (sha256 hex) of the normalised requirements.

    With ``tree``, the key also covers the tree's fingerprint, so it changes
    when the configuration does.  Raises :class:`InvalidRequirement`.
    """
    key = JobRequirements.of(reqs).key
    if tree is None:
        return key
    return _sha256({"v": _KEY_VERSION, "tree": tree.fingerprint, "reqs": key})


# ---------------------------------------------------------------- ClassAd support


@lru_cache(maxsize=1)
def _classad() -> ModuleType:
    """``classad2`` (htcondor >= 24), else the older ``classad`` bindings."""
    try:
        import classad2 as module
    except ImportError:  # pragma: no cover - depends on the installed wheel
        import classad as module  # type: ignore[no-redef]
    return module


def _parse_expression(text: str) -> Any:
    try:
        return _classad().ExprTree(text)
    except Exception as exc:  # the bindings raise their own ClassAdException / SyntaxError
        raise InvalidRequirement(f"requirement expression does not parse: {' '.join(text.split())}",
                                 cause=exc) from exc


def _canonical_expression(text: str) -> str:
    return str(_parse_expression(text))


def _classad_record(text: str) -> dict[str, Any]:
    """A ClassAd record ``[ a = 1; b = {"x"} ]`` as a plain dict (evaluated values)."""
    try:
        ad = _parse_expression(text).eval()
    except InvalidRequirement:
        raise
    except Exception as exc:
        raise InvalidRequirement(f"requirement record does not evaluate: {' '.join(text.split())}",
                                 cause=exc) from exc
    if not isinstance(ad, _classad().ClassAd):
        raise InvalidRequirement(f"requirement record is not a ClassAd: {' '.join(text.split())}")
    undefined_or_error = _classad().Value  # an IntEnum: must not pass for a number
    record: dict[str, Any] = {}
    for name in ad.keys():
        value = ad.eval(name)
        items = value if isinstance(value, list) else [value]
        if any(isinstance(v, undefined_or_error) or not isinstance(v, (str, int, float, bool)) for v in items):
            raise InvalidRequirement(f"requirement {name}: value does not evaluate to a string, "
                                     f"number, boolean or list")
        record[name] = list(value) if isinstance(value, list) else value
    return record


def _ref_names(expr: Any) -> list[str]:
    """Attribute names an expression refers to, without ``MY.``/``TARGET.`` scope."""
    try:
        refs = _classad().ClassAd().externalRefs(expr)
    except Exception:  # pragma: no cover - very old bindings
        return []
    names: list[str] = []
    for ref in refs:
        parts = [p for p in str(ref).split(".") if p]
        if len(parts) > 1 and parts[0].lower() in ("my", "target"):
            parts = parts[1:]
        if parts and parts[0] not in names:
            names.append(parts[0])
    return names


def _scan_top_level(text: str) -> Iterator[tuple[int, str]]:
    """Positions and characters of ``text`` outside strings and brackets."""
    depth, quote, i = 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            if depth == 0:
                yield i, ch
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                yield i, ch
        elif depth == 0:
            yield i, ch
        i += 1


def _strip_parens(text: str) -> str:
    """``(x)`` → ``x`` when the outer parentheses enclose the whole text."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    closes = [i for i, ch in _scan_top_level(text) if ch in ")]}"]
    return text[1:-1].strip() if closes == [len(text) - 1] else text


def _conjuncts(text: str) -> list[str]:
    """The terms of a top-level ``&&`` chain (parenthesised chains flattened).

    A top-level ``||`` or ``?:`` binds looser than ``&&``, so such an
    expression is one term.
    """
    text = text.strip()
    inner = _strip_parens(text)
    if inner != text:
        return _conjuncts(inner)
    top = dict(_scan_top_level(text))
    cuts = [i for i, ch in top.items() if ch == "&" and top.get(i + 1) == "&" and top.get(i - 1) != "&"]
    looser = any((ch == "?" and not (top.get(i - 1) == "=" and top.get(i + 1) == "="))  # not =?=
                 or (ch == "|" and top.get(i + 1) == "|") for i, ch in top.items())
    if not cuts or looser:
        return [text]
    bounds = [0, *[c + 2 for c in cuts]]
    ends = [*cuts, len(text)]
    return [term for a, b in zip(bounds, ends) for term in _conjuncts(text[a:b])]


class _TreeAds:
    """Per-tree ClassAds, built once: for each queue a scope ad and a TARGET ad."""

    def __init__(self, tree: ResourceTree):
        self.tree = tree
        self._ads: list[tuple[Any, Any]] | None = None

    def _build(self) -> list[tuple[Any, Any]]:
        if self._ads is None:
            module = _classad()
            self._ads = []
            for q in self.tree.queues:
                values = {k: list(v) if isinstance(v, tuple) else v for k, v in q.params.items()}
                self._ads.append((module.ClassAd(values), module.ClassAd(values)))
        return self._ads

    def is_true(self, expr: Any, index: int) -> bool:
        """Does ``expr`` evaluate to exactly ``true`` for queue number ``index``?"""
        scope, target = self._build()[index]
        scope[_EXPR_ATTR] = expr
        try:
            bound = scope.lookup(_EXPR_ATTR)
            try:
                result = bound.eval(scope=scope, target=target)
            except TypeError:  # pragma: no cover - older bindings without target=
                result = scope.eval(_EXPR_ATTR)
        except Exception:
            return False
        finally:
            del scope[_EXPR_ATTR]
        return result is True


# ---------------------------------------------------------------- matching and selection


def _eligible(reqs: JobRequirements, ads: _TreeAds) -> tuple[Queue, ...]:
    expr = _parse_expression(reqs.expression) if reqs.expression is not None else None
    return tuple(q for i, q in enumerate(ads.tree.queues)
                 if all(r.satisfied_by(q) for r in reqs.params)
                 and (expr is None or ads.is_true(expr, i)))


def queue_matches(reqs: RequirementsLike, queue: Queue) -> bool:
    """Does one queue satisfy the requirements?"""
    return bool(_eligible(JobRequirements.of(reqs), _TreeAds(ResourceTree((queue,)))))


def eligible_queues(reqs: RequirementsLike, tree: ResourceTree) -> tuple[Queue, ...]:
    """Every queue of ``tree`` that satisfies ``reqs``, in config order (no cache)."""
    return _eligible(JobRequirements.of(reqs), _TreeAds(tree))


def _prefer_keys(prefer: str | Sequence[str]) -> tuple[tuple[str, bool], ...]:
    names = (prefer,) if isinstance(prefer, str) else tuple(prefer)
    keys = []
    for name in names:
        descending = name.startswith("-")
        bare = name[1:] if descending else name
        if not _NAME_RE.match(bare):
            raise ValueError(f"prefer: invalid parameter name {name!r}")
        keys.append((bare, descending))
    return tuple(keys)


def _choose(eligible: Sequence[Queue], prefer: str | Sequence[str]) -> Queue:
    """The first eligible queue by the ``prefer`` parameters (missing last), then config order."""
    keys = _prefer_keys(prefer)

    def order(item: tuple[int, Queue]) -> tuple[Any, ...]:
        index, queue = item
        parts: list[Any] = []
        for name, descending in keys:
            value = queue.get(name)
            if _is_number(value):
                parts.append((0, -value if descending else value))  # type: ignore[operator]
            else:
                parts.append((1, 0))
        return (*parts, index)

    return min(enumerate(eligible), key=order)[1]


def _offer(req: Requirement, holders: Sequence[Queue], tree: ResourceTree) -> str:
    """What the queues that have the parameter offer, for an error message."""
    if req.is_capacity(holders):
        numeric = [q for q in holders if _is_number(q.get(req.name))]
        if not numeric:
            return f"{req.name} is not a number on any queue"
        best = max(numeric, key=lambda q: q.get(req.name))  # type: ignore[arg-type,return-value]
        return f"largest: {tree.label(best)} with {_fmt(best.get(req.name))}"
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
    name = refs[0]
    numeric = [q for q in holders if _is_number(q.get(name))]
    if numeric and re.search(r"(?<![<>=!])>=?(?!=)", term):
        best, word = max(numeric, key=lambda q: q.get(name)), "largest"  # type: ignore[arg-type,return-value]
    elif numeric and re.search(r"<=?(?!=)", term):
        best, word = min(numeric, key=lambda q: q.get(name)), "smallest"  # type: ignore[arg-type,return-value]
    else:
        return f" ({_available(name, holders)})"
    return f" ({word}: {tree.label(best)} with {_fmt(best.get(name))})"


def _explain(reqs: JobRequirements, ads: _TreeAds) -> NoEligibleQueue:
    """Name the requirement no queue meets, or the closest queue's unmet ones."""
    tree = ads.tree
    queues = tree.queues
    failures: list[list[str]] = [[] for _ in queues]
    for req in reqs.params:
        holders = [q for q in queues if req.name in q]
        if not holders:
            return NoEligibleQueue(f"no queue has parameter {req.name}", unmet=req.name)
        text = req.describe(holders)
        met = [req.satisfied_by(q) for q in queues]
        if not any(met):
            return NoEligibleQueue(f"no queue satisfies {text} ({_offer(req, holders, tree)})", unmet=text)
        for i, ok in enumerate(met):
            if not ok:
                failures[i].append(text)
    if reqs.expression is not None:
        for term in _conjuncts(reqs.expression):
            try:
                expr = _parse_expression(term)
            except InvalidRequirement:  # a split we should not have made: judge the whole
                expr, term = _parse_expression(reqs.expression), reqs.expression
            refs = _ref_names(expr)
            met = [ads.is_true(expr, i) for i in range(len(queues))]
            if not any(met):
                absent = [name for name in refs if not any(name in q for q in queues)]
                if absent:
                    return NoEligibleQueue(f"no queue has parameter {absent[0]} (needed by {term})",
                                           unmet=absent[0])
                holders = [q for q in queues if refs and refs[0] in q]
                return NoEligibleQueue(f"no queue satisfies {term}{_offer_for_term(term, refs, holders, tree)}",
                                       unmet=term)
            for i, ok in enumerate(met):
                if not ok:
                    failures[i].append(term)
    closest = min(range(len(queues)), key=lambda i: (len(failures[i]), i))
    unmet = "; ".join(failures[closest])
    return NoEligibleQueue(f"no single queue satisfies all requirements "
                           f"(closest: {tree.label(queues[closest])}, unmet: {unmet})", unmet=unmet)


def select_queue(reqs: RequirementsLike, tree: ResourceTree, *,
                 prefer: str | Sequence[str] = DEFAULT_PREFER) -> Queue:
    """The queue a job with ``reqs`` goes to (no cache); see "Selection" above.

    ``prefer=()`` selects by config order alone.

    Raises :class:`NoEligibleQueue` naming the unmet requirement, or
    :class:`InvalidRequirement` for malformed requirements.
    """
    normal = JobRequirements.of(reqs)
    ads = _TreeAds(tree)
    eligible = _eligible(normal, ads)
    if not eligible:
        raise _explain(normal, ads)
    return _choose(eligible, prefer)


class RequirementMatcher:
    """Matching and selection with an in-process cache of eligible queues.

    Entries are keyed by ``(tree.fingerprint, requirements key)``; identical
    requirement sets (any order, any name case) share one evaluation.
    Assigning a tree with a different fingerprint to :attr:`tree` drops the
    cache.  Error messages are rebuilt per call, so they use the caller's
    spelling of the names.  Not thread-safe (jim is one process per call).
    """

    def __init__(self, tree: ResourceTree | None = None, *,
                 prefer: str | Sequence[str] = DEFAULT_PREFER, max_entries: int = 4096):
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        _prefer_keys(prefer)  # validate early
        self._prefer = prefer
        self._max_entries = max_entries
        self._cache: dict[tuple[str, str], tuple[Queue, ...]] = {}
        self.hits = 0
        self.misses = 0
        self._tree = tree if tree is not None else default_tree()
        self._ads = _TreeAds(self._tree)

    @property
    def tree(self) -> ResourceTree:
        return self._tree

    @tree.setter
    def tree(self, tree: ResourceTree) -> None:
        if tree.fingerprint != self._tree.fingerprint:
            self._cache.clear()
            self._ads = _TreeAds(tree)
        self._tree = tree

    def __len__(self) -> int:
        """The number of cached requirement sets."""
        return len(self._cache)

    def cache_key(self, reqs: RequirementsLike) -> str:
        """:func:`cache_key` of ``reqs`` against this matcher's tree."""
        return cache_key(reqs, self._tree)

    def eligible(self, reqs: RequirementsLike) -> tuple[Queue, ...]:
        """The eligible queues in config order, from the cache when possible."""
        normal = JobRequirements.of(reqs)
        key = (self._tree.fingerprint, normal.key)
        cached = self._cache.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        result = _eligible(normal, self._ads)
        if len(self._cache) >= self._max_entries:
            self._cache.pop(next(iter(self._cache)))  # oldest first
        self._cache[key] = result
        return result

    def select(self, reqs: RequirementsLike, *, prefer: str | Sequence[str] | None = None) -> Queue:
        """Like :func:`select_queue`, with the cache; ``prefer=None`` uses the matcher's."""
        normal = JobRequirements.of(reqs)
        eligible = self.eligible(normal)
        if not eligible:
            raise _explain(normal, self._ads)
        return _choose(eligible, self._prefer if prefer is None else prefer)


# ---------------------------------------------------------------- a job's requirements, from its description

_PAIR_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(?![=?!])(.*)\Z", re.S)
_CACHE_VERSION = 1


def _unquote(text: str) -> str | list[str]:
    """The value of a ``Name=value`` pair: quotes removed, or a list when unquoted with commas."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if "," in text:
        items = [item.strip() for item in text.split(",")]
        if any(not item for item in items):
            raise InvalidRequirement(f"requirement value {text!r} has an empty list element")
        return items
    return text


@dataclass(frozen=True)
class StatedRequirements:
    """A job's requirements as its description states them (see the module docstring).

    ``params`` maps names (the job's spelling) to a string or a list of
    strings; ``expressions`` and ``records`` are ClassAd texts as written.
    :attr:`key` needs no ClassAd parsing; :meth:`resolve` does the parsing.
    """

    params: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    expressions: tuple[str, ...] = ()
    records: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.params or self.expressions or self.records)

    def get(self, name: str) -> str | tuple[str, ...] | None:
        """The stated value of requirement ``name`` (any case), or None."""
        for key, value in self.params.items():
            if key.lower() == name.lower():
                return value
        return None

    def without(self, name: str) -> StatedRequirements:
        """The same requirements minus ``name`` (any case)."""
        params = {k: v for k, v in self.params.items() if k.lower() != name.lower()}
        return StatedRequirements(params, self.expressions, self.records)

    def _mapping(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.params.items()}

    @property
    def key(self) -> str:
        """sha256 of the requirements as stated (pairs normalised, texts as written); cheap."""
        pairs = JobRequirements(_requirement_params(self._mapping())).canonical()["params"]
        return _sha256({"v": _KEY_VERSION, "stated": 1, "params": pairs,
                        "exprs": sorted(self.expressions), "records": sorted(self.records)})

    def resolve(self) -> JobRequirements:
        """The normalised :class:`JobRequirements` (parses expressions and records)."""
        return JobRequirements.combine(self._mapping(), *self.records, *self.expressions)

    def describe(self) -> str:
        """One line for people: ``Queue=long, Tag in [cvmfs, gpu], WallTimeLimit >= 7200``."""
        parts = []
        for name in sorted(self.params, key=str.lower):
            value = self.params[name]
            parts.append(f"{name} in [{', '.join(value)}]" if isinstance(value, tuple) else f"{name}={value}")
        parts += [" ".join(text.split()) for text in (*self.records, *self.expressions)]
        return ", ".join(parts)


def requirements_of_description(values: Sequence[Any] | None, queue: str | None = None) -> StatedRequirements:
    """Read a description's ``requirements`` values and GRAM ``queue`` (see the module docstring).

    Raises :class:`InvalidRequirement` for a malformed pair or a name given twice.
    """
    params: dict[str, str | tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    expressions: list[str] = []
    records: list[str] = []

    def add(name: str, value: str | list[str]) -> None:
        if not _NAME_RE.match(name):
            raise InvalidRequirement(f"invalid requirement name {name!r} (letters, digits and '_', "
                                     f"not starting with a digit)")
        low = name.lower()
        if low in seen:
            raise InvalidRequirement(f"requirement {name} is given twice (for any of several values write "
                                     f"{name}=a,b; for all of them a ClassAd expression)")
        seen[low] = name
        params[name] = tuple(value) if isinstance(value, list) else value

    for item in values or ():
        if isinstance(item, (list, tuple)):
            if len(item) < 2 or not all(isinstance(x, str) for x in item):
                raise InvalidRequirement(f"requirements: a nested sequence must be (NAME value ...), got {item!r}")
            name, *vals = item
            add(name.strip(), vals[0] if len(vals) == 1 else list(vals))
            continue
        if not isinstance(item, str):
            raise InvalidRequirement(f"requirements: unexpected value {item!r}")
        text = item.strip()
        if not text:
            continue
        match = None if text.startswith("[") else _PAIR_RE.match(text)
        if match:
            add(match.group(1), _unquote(match.group(2)))
        elif text.startswith("["):
            records.append(text)
        else:
            expressions.append(text)
    if queue is not None and queue.strip():
        if "queue" in seen:
            raise InvalidRequirement("the queue is given twice: by the queue attribute and in requirements")
        add("Queue", queue.strip())
    return StatedRequirements(params, tuple(expressions), tuple(records))


# ---------------------------------------------------------------- choosing a job's queue


class QueueCache:
    """Eligible queues per requirement set, persisted in ``<directory>/requirements.json``.

    ``write=False`` reads but never writes (``jim plan --dry-run``).  Every
    I/O error is swallowed: a cache must never make a submit fail.
    """

    FILE = "requirements.json"

    def __init__(self, directory: Any, *, write: bool = True, max_entries: int = 512):
        from pathlib import Path

        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.path = Path(directory) / self.FILE
        self.write = write
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: dict[str, dict[str, Any]] | None = None

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._entries is None:
            self._entries = {}
            try:
                with open(self.path, encoding="utf-8") as f:
                    data = json.load(f)
                if isinstance(data, dict) and data.get("v") == _CACHE_VERSION and isinstance(data.get("entries"), dict):
                    self._entries = {k: e for k, e in data["entries"].items()
                                     if isinstance(k, str) and isinstance(e, dict)
                                     and isinstance(e.get("queues"), list) and e["queues"]
                                     and all(isinstance(q, str) for q in e["queues"])
                                     and isinstance(e.get("at"), (int, float))}
            except (OSError, ValueError, TypeError, AttributeError):
                self._entries = {}
        return self._entries

    def get(self, key: str) -> tuple[str, ...] | None:
        """The qualified names (``ce/queue``) of the eligible queues, or None."""
        entry = self._load().get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        return tuple(entry["queues"])

    def put(self, key: str, queues: Sequence[str]) -> None:
        """Remember ``queues`` (qualified names, non-empty) for ``key`` and save the file."""
        import os
        import time

        entries = self._load()
        entries[key] = {"queues": list(queues), "at": time.time()}
        if len(entries) > self.max_entries:
            for old in sorted(entries, key=lambda k: entries[k]["at"])[: len(entries) - self.max_entries]:
                del entries[old]
        if not self.write:
            return
        tmp = self.path.with_name(f".{self.FILE}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"v": _CACHE_VERSION, "entries": entries}, f, separators=(",", ":"))
            os.replace(tmp, self.path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


@dataclass(frozen=True)
class QueueChoice:
    """Where a job goes, and why.

    ``queue`` is the chosen queue of the site's tree (``None`` when the site
    describes no queues); ``name`` is what the batch adapter gets (the queue's
    name, a GRAM ``queue`` passed through, or ``None``: the batch system's
    default); ``how`` is ``requirements``, ``site-preference`` (no
    requirements: the preferred queue of the tree), ``gram-queue`` or
    ``batch-default``; ``eligible`` counts the eligible queues.
    """

    queue: Queue | None
    name: str | None
    how: str
    requirements: StatedRequirements
    eligible: int = 1
    cached: bool = False

    @property
    def ce(self) -> str | None:
        return self.queue.ce if self.queue is not None else None

    @property
    def described(self) -> str:
        """The requirements in one line (empty without requirements)."""
        return self.requirements.describe()


def choose_queue(resources: Mapping[str, Any] | None, requirements: StatedRequirements, *,
                 cache: QueueCache | None = None,
                 prefer: str | Sequence[str] = DEFAULT_PREFER) -> QueueChoice:
    """The queue of a job (see the module docstring).

    Raises :class:`ResourceConfigError` for a bad ``[resources]`` table,
    :class:`InvalidRequirement` for malformed requirements and
    :class:`NoEligibleQueue` (naming the unmet requirement) when no queue fits.
    """
    if not resources:
        gram_queue = requirements.get("Queue")
        rest = requirements.without("Queue")
        if rest:  # nothing describes the queues: fails by the missing-parameter rule, naming it
            normal = rest.resolve()
            ads = _TreeAds(default_tree())
            if not _eligible(normal, ads):
                raise _explain(normal, ads)
        if isinstance(gram_queue, tuple):
            raise InvalidRequirement("without [resources] in the site configuration, the queue must be one name")
        return QueueChoice(None, gram_queue, "gram-queue" if gram_queue else "batch-default", requirements)
    tree = parse_resources(resources)
    key = _sha256({"v": _KEY_VERSION, "tree": tree.fingerprint, "reqs": requirements.key})
    eligible: tuple[Queue, ...] | None = None
    names = cache.get(key) if cache is not None else None
    if names:
        try:
            eligible = tuple(tree.find(n) for n in names)
        except KeyError:  # cannot happen with a matching fingerprint, unless the file was edited
            eligible = None
    cached = eligible is not None
    if eligible is None:
        normal = requirements.resolve()
        ads = _TreeAds(tree)
        eligible = _eligible(normal, ads)
        if not eligible:
            raise _explain(normal, ads)
        if cache is not None:
            cache.put(key, [q.qualified_name for q in eligible])
    queue = _choose(eligible, prefer)
    return QueueChoice(queue, queue.name, "requirements" if requirements else "site-preference",
                       requirements, len(eligible), cached)
