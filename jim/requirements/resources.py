"""Site resources: the ``[resources]`` table as a flat tree of queues.

:func:`parse_resources` validates the table and applies inheritance site → CE → queue (a lower
level overrides a parameter, except ``Tag`` and ``RequiredTag``, which are unioned), giving a
:class:`ResourceTree` of :class:`Queue` objects.  The rules are in ``docs/requirements.md``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeAlias

from jim.errors import ConfigError

__all__ = [
    "KEY_VERSION",
    "NAME_RE",
    "ParamValue",
    "Queue",
    "ResourceConfigError",
    "ResourceTree",
    "digest",
    "fits_int64",
    "parse_resources",
    "type_name",
]

#: An effective queue parameter value (lists are stored as tuples).
ParamValue: TypeAlias = str | int | float | bool | tuple[str, ...]

#: Version of every hashed normal form (tree fingerprints, requirement and cache keys).
KEY_VERSION = 1
#: A parameter or requirement name: a ClassAd attribute name.
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: Parameters whose values are unioned down the tree instead of overridden.
_UNION_PARAMETERS = frozenset({"tag", "requiredtag"})
#: The parameters jim sets on every queue (lower-case name → spelling).
_RESERVED_PARAMETERS = MappingProxyType({"ce": "CE", "queue": "Queue"})
_NODE_NAME_RE = re.compile(r"[^\s/]+\Z")
_BARE_KEY_RE = re.compile(r"[A-Za-z0-9_-]+\Z")


class ResourceConfigError(ConfigError, ValueError):
    """The ``[resources]`` table is malformed (one line, starting with the TOML path)."""


def digest(obj: Any) -> str:
    """sha256 (hex) of the canonical JSON of ``obj``: stable across processes."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fits_int64(value: int) -> bool:
    """Does ``value`` fit in a 64-bit signed integer (as ClassAd integers do)?"""
    return -(2**63) <= value < 2**63


def type_name(value: object) -> str:
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
        merged: dict[str, Any] = {"CE": self.ce, "Queue": self.name}
        merged.update({k: v for k, v in self.params.items() if k.lower() not in _RESERVED_PARAMETERS})
        for key, value in merged.items():
            low = key.lower()
            if low in names:
                raise ValueError(
                    f"queue {self.ce}/{self.name}: parameters {names[low]!r} and {key!r} differ only in case"
                )
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

    def _canonical(self) -> dict[str, Any]:
        """JSON-ready form with lower-cased names (for fingerprints)."""
        params: dict[str, Any] = {k.lower(): list(v) if isinstance(v, tuple) else v for k, v in self.params.items()}
        return {"ce": self.ce, "queue": self.name, "params": params}


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
        fingerprint = digest({"v": KEY_VERSION, "queues": [q._canonical() for q in queues]})
        object.__setattr__(self, "fingerprint", fingerprint)

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


#: The tree without ``[resources]``: queue ``default`` on CE ``default``, no limits.
_DEFAULT_TREE = ResourceTree((Queue("default", "default"),))


# ---------------------------------------------------------------- parsing [resources]

_Params: TypeAlias = dict[str, tuple[str, ParamValue]]  # lower name → (spelling, value)


def _config_value(value: object, where: str, union: bool) -> ParamValue:
    """Validate one TOML parameter value (of a union parameter: :func:`_union_value`); lists become tuples."""
    if union:
        return _union_value(value, where)
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return _config_number(value, where)
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ResourceConfigError(f"{where}: a list value must hold only strings")
    raise ResourceConfigError(f"{where}: expected a string, number, boolean or list of strings, got {type_name(value)}")


def _union_value(value: object, where: str) -> tuple[str, ...]:
    """A ``Tag`` or ``RequiredTag`` value: a string or a list of strings, as a tuple."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ResourceConfigError(f"{where}: expected a string or a list of strings, got {type_name(value)}")


def _config_number(value: int | float, where: str) -> int | float:
    """A number a ClassAd can hold: an integer of 64 bits, a float that is not nan."""
    if isinstance(value, int) and not fits_int64(value):
        raise ResourceConfigError(f"{where}: integer {value} does not fit in 64 bits")
    if isinstance(value, float) and math.isnan(value):
        raise ResourceConfigError(f"{where}: nan is not a usable value")
    return value


def _level(table: object, keys: tuple[str, ...], child: str | None) -> tuple[_Params, Mapping[str, Any] | None]:
    """Split one level's table into its parameters and its ``child`` sub-table."""
    where = _path(*keys)
    if not isinstance(table, Mapping):
        raise ResourceConfigError(f"{where}: expected a table, got {type_name(table)}")
    params: _Params = {}
    sub: Mapping[str, Any] | None = None
    for key, value in table.items():
        if not isinstance(key, str):
            raise ResourceConfigError(f"{where}: parameter names must be strings, got {key!r}")
        if child is not None and key == child:
            sub = _sub_tables(value, keys, child)
            continue
        low = _parameter_name(key, value, keys)
        if low in params:
            raise ResourceConfigError(f"{where}: parameters {params[low][0]!r} and {key!r} differ only in case")
        params[low] = (key, _config_value(value, _path(*keys, key), low in _UNION_PARAMETERS))
    return params, sub


def _sub_tables(value: object, keys: tuple[str, ...], child: str) -> Mapping[str, Any]:
    """The ``child`` sub-table of a level (``ce`` of the site, ``queue`` of a CE): a table of tables."""
    if not isinstance(value, Mapping):
        where = _path(*keys, child)
        raise ResourceConfigError(f"{where}: expected a table of tables ([{where}.<name>]), got {type_name(value)}")
    return value


def _parameter_name(key: str, value: object, keys: tuple[str, ...]) -> str:
    """The lower-case name of parameter ``key`` of the level at ``keys``; refuses a CE or queue table
    out of place, the names jim sets and a name that is not a ClassAd attribute name."""
    kwhere = _path(*keys, key)
    low = key.lower()
    if key == "ce" and isinstance(value, Mapping):
        raise ResourceConfigError(f"{kwhere}: computing elements belong under [resources.ce.<name>]")
    if key == "queue" and isinstance(value, Mapping):
        raise ResourceConfigError(f"{kwhere}: queues belong under [resources.ce.<ce>.queue.<name>]")
    if low in _RESERVED_PARAMETERS:
        owner = "computing element" if low == "ce" else "queue"
        raise ResourceConfigError(
            f"{kwhere}: {key!r} is reserved (jim sets {_RESERVED_PARAMETERS[low]} to the {owner}'s name)"
        )
    if not NAME_RE.match(key):
        raise ResourceConfigError(
            f"{kwhere}: invalid parameter name (letters, digits and '_', not starting with a digit)"
        )
    return low


def _inherit(parent: _Params, child: _Params) -> _Params:
    """Child overrides parent, except union parameters, whose values are merged."""
    merged = dict(parent)
    for low, (key, value) in child.items():
        if low in _UNION_PARAMETERS:
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
            raise ResourceConfigError(f"{_path(*keys)}: invalid {what} name {name!r} (no white space, no '/')")
        yield name, value


def parse_resources(table: Mapping[str, Any] | None, *, path: str = "resources") -> ResourceTree:
    """Build the flattened queue tree from the ``[resources]`` table (as parsed by tomllib).

    ``None`` or an empty table gives the default tree: one queue ``default`` on
    CE ``default``, with no parameters (always the same object).  Raises
    :class:`ResourceConfigError` (a ``ValueError``) with a one-line message
    naming the TOML path at fault.  ``path`` is the table's own path, used in
    messages only.
    """
    if table is None or (isinstance(table, Mapping) and not table):
        return _DEFAULT_TREE
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
            queues.append(Queue(q_name, ce_name, dict(effective.values())))
    return ResourceTree(tuple(queues))
