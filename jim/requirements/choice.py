"""What jim does at submit: read a job's requirements from its description and choose its queue.

:func:`requirements_of_description` reads the description's ``requirements`` and GRAM ``queue``
into :class:`StatedRequirements`; :func:`choose_queue` matches them against the site's
``[resources]`` and returns a :class:`QueueChoice`, using the persistent :class:`QueueCache`
(``$JIM_HOME/cache/requirements.json``) when the caller passes one.  See ``docs/requirements.md``.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jim.jobdesc.shape import Shape
from jim.requirements.expressions import InvalidRequirement
from jim.requirements.matching import TAG, JobRequirements, matching_queues, preferred
from jim.requirements.offers import fitting
from jim.requirements.resources import KEY_VERSION, NAME_RE, Queue, digest, parse_resources
from jim.safeio import atomic_write

__all__ = ["QueueCache", "QueueChoice", "StatedRequirements", "choose_queue", "requirements_of_description"]

_PAIR_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(?![=?!])(.*)\Z", re.S)
#: 2: a ``Tag`` list means all of its tags, and a queue's ``RequiredTag`` is enforced (entries of 1 are dropped).
_CACHE_VERSION = 2


# ---------------------------------------------------------------- a job's requirements, from its description


@dataclass(frozen=True)
class StatedRequirements:
    """A job's requirements as its description states them (see :func:`requirements_of_description`).

    ``params`` maps names (the job's spelling) to a string or a tuple of
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
        pairs = JobRequirements.of(self._mapping()).canonical()["params"]
        return digest(
            {
                "v": KEY_VERSION,
                "stated": 1,
                "params": pairs,
                "exprs": sorted(self.expressions),
                "records": sorted(self.records),
            }
        )

    def resolve(self) -> JobRequirements:
        """The normalised :class:`JobRequirements` (parses expressions and records)."""
        return JobRequirements.combine(self._mapping(), *self.records, *self.expressions)

    def describe(self) -> str:
        """One line for people: ``Queue in [long, short], Tag all of [cvmfs, gpu], WallTimeLimit=7200``."""
        parts = []
        for name in sorted(self.params, key=str.lower):
            value = self.params[name]
            if isinstance(value, tuple):
                parts.append(f"{name} {'all of' if name.lower() == TAG else 'in'} [{', '.join(value)}]")
            else:
                parts.append(f"{name}={value}")
        parts += [" ".join(text.split()) for text in (*self.records, *self.expressions)]
        return ", ".join(parts)


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


def requirements_of_description(values: Sequence[Any] | None, queue: str | None = None) -> StatedRequirements:
    """Read a description's ``requirements`` values and GRAM ``queue`` (see docs/requirements.md).

    Raises :class:`InvalidRequirement` for a malformed pair or a name given twice.
    """
    reader = _Reader()
    for item in values or ():
        reader.read(item)
    if queue is not None and queue.strip():
        reader.add_queue(queue.strip())
    return StatedRequirements(reader.params, tuple(reader.expressions), tuple(reader.records))


class _Reader:
    """A description's requirements, gathered value by value (:func:`requirements_of_description`)."""

    def __init__(self) -> None:
        self.params: dict[str, str | tuple[str, ...]] = {}
        self.expressions: list[str] = []
        self.records: list[str] = []
        self._seen: dict[str, str] = {}  # lower-case name -> the job's spelling

    def read(self, item: object) -> None:
        """One value: a ``(NAME value ...)`` sequence, a ``Name=value`` pair, a ClassAd record
        (``[...]``) or a ClassAd expression; a blank one says nothing."""
        if isinstance(item, (list, tuple)):
            self._read_sequence(item)
        elif isinstance(item, str):
            self._read_text(item.strip())
        else:
            raise InvalidRequirement(f"requirements: unexpected value {item!r}")

    def _read_sequence(self, item: list[Any] | tuple[Any, ...]) -> None:
        if len(item) < 2 or not all(isinstance(x, str) for x in item):
            raise InvalidRequirement(f"requirements: a nested sequence must be (NAME value ...), got {item!r}")
        name, *vals = item
        self.add(name.strip(), vals[0] if len(vals) == 1 else list(vals))

    def _read_text(self, text: str) -> None:
        if not text:
            return
        match = None if text.startswith("[") else _PAIR_RE.match(text)
        if match:
            self.add(match.group(1), _unquote(match.group(2)))
        elif text.startswith("["):
            self.records.append(text)
        else:
            self.expressions.append(text)

    def add(self, name: str, value: str | list[str]) -> None:
        """Requirement ``name = value`` (a list: any of its values, all of them for ``Tag``)."""
        if not NAME_RE.match(name):
            raise InvalidRequirement(
                f"invalid requirement name {name!r} (letters, digits and '_', not starting with a digit)"
            )
        low = name.lower()
        if low in self._seen:
            several = (
                f"for several tags write {name}=a,b: the queue must offer all of them"
                if low == TAG
                else f"for any of several values write {name}=a,b; for all of them a ClassAd expression"
            )
            raise InvalidRequirement(f"requirement {name} is given twice ({several})")
        self._seen[low] = name
        self.params[name] = tuple(value) if isinstance(value, list) else value

    def add_queue(self, queue: str) -> None:
        """GRAM's ``queue`` attribute: requirement ``Queue``, unless the requirements name one."""
        if "queue" in self._seen:
            raise InvalidRequirement("the queue is given twice: by the queue attribute and in requirements")
        self.add("Queue", queue)


# ---------------------------------------------------------------- the persistent cache


class QueueCache:
    """Eligible queues per requirement set, persisted in ``<directory>/requirements.json``.

    ``write=False`` reads but never writes (``jim plan --dry-run``).  Every
    I/O error is swallowed: a cache must never make a submit fail.
    """

    FILE = "requirements.json"

    def __init__(self, directory: str | os.PathLike[str], *, write: bool = True, max_entries: int = 512):
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
                    self._entries = {k: e for k, e in data["entries"].items() if _valid_entry(k, e)}
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
        entries = self._load()
        entries[key] = {"queues": list(queues), "at": time.time()}
        if len(entries) > self.max_entries:
            for old in sorted(entries, key=lambda k: entries[k]["at"])[: len(entries) - self.max_entries]:
                del entries[old]
        if not self.write:
            return
        try:
            self.path.parent.mkdir(mode=0o700, exist_ok=True)
            data = json.dumps({"v": _CACHE_VERSION, "entries": entries}, separators=(",", ":"))
            atomic_write(self.path, data, sync=False)
        except OSError:
            pass  # (a cache: the next choice computes it again)


def _valid_entry(key: object, entry: object) -> bool:
    """Is one entry of the cache file well-formed: ``{"queues": [names...], "at": time}``?"""
    return (
        isinstance(key, str)
        and isinstance(entry, dict)
        and isinstance(entry.get("queues"), list)
        and bool(entry["queues"])
        and all(isinstance(q, str) for q in entry["queues"])
        and isinstance(entry.get("at"), (int, float))
    )


# ---------------------------------------------------------------- choosing a job's queue


@dataclass(frozen=True)
class QueueChoice:
    """Where a job goes, and why.

    ``queue`` is the chosen queue of the site's tree (``None`` when the site
    describes no queues); ``name`` is what the batch adapter gets (the queue's
    name, a GRAM ``queue`` passed through, or ``None``: the batch system's
    default); ``how`` is ``requirements``, ``site-preference`` (no
    requirements: the preferred queue of the tree), ``gram-queue`` or
    ``batch-default``; ``eligible`` counts the eligible queues (those that
    meet the requirements and can hold the job's shape); ``cached`` tells
    whether the requirements' matches came from the :class:`QueueCache`;
    ``shape`` is the job's resource shape as the queue gives it (None: not
    asked for one).
    """

    queue: Queue | None
    name: str | None
    how: str
    requirements: StatedRequirements
    eligible: int = 1
    cached: bool = False
    shape: Shape | None = None

    @property
    def ce(self) -> str | None:
        return self.queue.ce if self.queue is not None else None

    @property
    def described(self) -> str:
        """The requirements in one line (empty without requirements)."""
        return self.requirements.describe()


def choose_queue(
    resources: Mapping[str, Any] | None,
    requirements: StatedRequirements,
    *,
    cache: QueueCache | None = None,
    shape: Shape | None = None,
) -> QueueChoice:
    """The queue of a job: the smallest sufficient ``WallTimeLimit`` among the eligible queues,
    those that meet the requirements and can hold ``shape`` (:func:`jim.requirements.offers.fitting`).

    Without ``[resources]`` (``resources`` empty or None), a GRAM ``queue`` is
    passed through and any other requirement fails as it would on the default
    tree.  Raises :class:`ResourceConfigError` for a bad ``[resources]`` table,
    :class:`InvalidRequirement` for malformed requirements and
    :class:`NoEligibleQueue` (naming the unmet requirement) when no queue fits.
    """
    if not resources:
        gram_queue = requirements.get("Queue")
        rest = requirements.without("Queue")
        if rest:  # nothing describes the queues: fails by the missing-parameter rule, naming it
            matching_queues(rest.resolve(), parse_resources(None))
        if isinstance(gram_queue, tuple):
            raise InvalidRequirement("without [resources] in the site configuration, the queue must be one name")
        how = "gram-queue" if gram_queue else "batch-default"
        return QueueChoice(None, gram_queue, how, requirements, shape=shape)
    tree = parse_resources(resources)
    key = digest({"v": KEY_VERSION, "tree": tree.fingerprint, "reqs": requirements.key})
    eligible: tuple[Queue, ...] | None = None
    names = cache.get(key) if cache is not None else None
    if names:
        try:
            eligible = tuple(tree.find(n) for n in names)
        except KeyError:  # cannot happen with a matching fingerprint, unless the file was edited
            eligible = None
    cached = eligible is not None
    if eligible is None:
        eligible = matching_queues(requirements.resolve(), tree)
        if cache is not None:
            cache.put(key, [q.qualified_name for q in eligible])
    shapes: dict[str, Shape] = {}
    if shape is not None:
        fits = fitting(shape, eligible, "meeting the requirements" if requirements else "")
        eligible = tuple(q for q, _ in fits)
        shapes = {q.qualified_name: s for q, s in fits}
    queue = preferred(eligible)
    how = "requirements" if requirements else "site-preference"
    fitted = shapes.get(queue.qualified_name)
    return QueueChoice(queue, queue.name, how, requirements, len(eligible), cached, fitted)
