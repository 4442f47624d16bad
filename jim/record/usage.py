"""What every attempt of every local job used: :class:`Usage`, one ``<usage>`` element per attempt.

The API others build on (the ARC diag, APEL records, ``jim accounting``; see docs/accounting.md):

* :class:`Usage` -- one attempt's measure: ``cpu_user``, ``cpu_system`` (seconds, the payload and
  the descendants it waited for), ``max_rss_kb`` (peak resident set, KiB), ``wall`` (seconds),
  ``cores`` (allocated), ``node`` and ``source`` (:class:`Source`: who measured it).  A field is
  None when it is unknown -- never guessed, never zero for "not measured".  ``rejected`` names the
  fields a wrapper or an accounting record gave that were malformed or absurd (counted unknown).
  ``cpu`` (user + system) and ``core_seconds`` (wall x cores) are None unless both parts are known.
* :meth:`jim.record.LocalJob.usage` ``(attempt=None)`` -- the usage of one attempt (the current one
  by default), None when none was recorded; :meth:`jim.record.LocalJob.usages` -- ``(attempt,
  Usage | None)`` of every attempt, oldest first; :meth:`jim.record.LocalJob.set_usage` records the
  current attempt's (the monitor and ``jim cancel`` do, through :mod:`jim.evidence`).
* :meth:`jim.record.GridJob.usage_totals` -- :class:`Totals` over every attempt of every local job
  (an attempt that failed used its resources too): sums of what was measured, the largest peak RSS,
  the nodes, and how many ended attempts have no (or an incomplete) measure.
* :func:`checked` -- a measure from untrusted text (a wrapper's exit file, an accounting command's
  output) validated: numbers only, non-negative, CPU at most wall x cores x :data:`CPU_MARGIN`
  (+ :data:`CPU_SLACK` s), peak RSS at most :data:`MAX_RSS_KB`, wall at most :data:`MAX_WALL`.

In the record (``jim/schema/jim.rng``): ``<usage source="wrapper" cpuUser="1.013" cpuSystem="0.021"
maxRssKb="215040" wall="1.094" cores="1" node="cn1"/>`` as the last child of a ``<localjob>`` (the
current attempt) or inside an ``<attempt>`` (an earlier one), every attribute but ``source`` optional.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from lxml import etree

from jim.record.elements import clean

#: CPU may exceed wall x cores by this factor (threads start before the wall clock, clock ticks) ...
CPU_MARGIN = 1.25
#: ... plus these seconds (a job of a second measured in 10 ms ticks).
CPU_SLACK = 2.0
#: The largest peak RSS believed: 64 TiB in KiB.
MAX_RSS_KB = 64 * 1024**3
#: The longest wall time believed: a year.
MAX_WALL = 366 * 86400.0
#: The most cores of one local job believed.
MAX_CORES = 100_000
MAX_NODE = 255

_NUMBER = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,9})?", re.ASCII)
_INTEGER = re.compile(r"[0-9]{1,18}", re.ASCII)
#: A host name, or a batch system's list of them (``cn[1-3],gpu7``).
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,\[\]-]{0,254}", re.ASCII)


class Source(enum.Enum):
    """Who measured an attempt."""

    WRAPPER = "wrapper"  # jim's wrapper: os.wait4 of the payload (its exit file)
    SACCT = "sacct"  # Slurm's accounting
    QACCT = "qacct"  # Grid Engine's accounting
    CONDOR = "condor"  # HTCondor's history


#: The record's attribute name of each field.
_ATTRS = {
    "cpu_user": "cpuUser",
    "cpu_system": "cpuSystem",
    "max_rss_kb": "maxRssKb",
    "wall": "wall",
    "cores": "cores",
    "node": "node",
}


@dataclass(frozen=True)
class Usage:
    """One attempt's measure; None: unknown (see the module docstring)."""

    source: Source
    cpu_user: float | None = None
    cpu_system: float | None = None
    max_rss_kb: int | None = None
    wall: float | None = None
    cores: int | None = None
    node: str | None = None
    rejected: tuple[str, ...] = ()
    """The fields given but not trusted (malformed or absurd), by their names here."""

    @property
    def cpu(self) -> float | None:
        """User + system CPU seconds, when both are known."""
        if self.cpu_user is None or self.cpu_system is None:
            return None
        return self.cpu_user + self.cpu_system

    @property
    def core_seconds(self) -> float | None:
        """Wall x cores: what the attempt held, when both are known."""
        return self.wall * self.cores if self.wall is not None and self.cores is not None else None

    @property
    def complete(self) -> bool:
        """Every measure known (the node aside)."""
        return None not in (self.cpu_user, self.cpu_system, self.max_rss_kb, self.wall, self.cores)

    def to_json(self) -> dict[str, object]:
        """The measure as ``jim status --json`` shows it."""
        return {
            "source": self.source.value,
            "cpuUser": self.cpu_user,
            "cpuSystem": self.cpu_system,
            "maxRssKb": self.max_rss_kb,
            "wall": self.wall,
            "cores": self.cores,
            "node": self.node,
            "coreSeconds": self.core_seconds,
            "rejected": list(self.rejected),
        }

    # -- the record's <usage> ------------------------------------------------------------------
    def element(self) -> etree._Element:
        el = etree.Element("usage", source=self.source.value)
        for name, attr in _ATTRS.items():
            value = getattr(self, name)
            if value is not None:
                el.set(attr, clean(_text(value))[:MAX_NODE])
        if self.rejected:
            el.set("rejected", " ".join(_ATTRS[n] for n in self.rejected if n in _ATTRS))
        return el

    @classmethod
    def of_element(cls, el: etree._Element) -> Usage:
        """The measure a ``<usage>`` element holds (jim wrote it: checked again all the same)."""
        fields = {name: value for name, attr in _ATTRS.items() if (value := el.get(attr)) is not None}
        back = {attr: name for name, attr in _ATTRS.items()}
        rejected = tuple(back[a] for a in (el.get("rejected") or "").split() if a in back)
        try:
            source = Source(el.get("source"))
        except ValueError:
            source = Source.WRAPPER
        found = checked(source, fields)
        return replace(found, rejected=tuple(dict.fromkeys(rejected + found.rejected)))


def _text(value: float | int | str) -> str:
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") or "0"
    return str(value)


def checked(source: Source, fields: Mapping[str, str], *, cores: int | None = None) -> Usage:
    """A :class:`Usage` from untrusted text: ``fields`` by this module's names (``cpu_user``,
    ``cpu_system``, ``max_rss_kb``, ``wall``, ``cores``, ``node``; others ignored), each a decimal
    number of ASCII digits (the node a host name).  ``cores``: the allocation jim knows (the plan's
    cores per local job), which wins over one the text gives.  What is malformed or absurd is None
    and named in ``rejected``; what is missing is None."""
    rejected: list[str] = []

    def number(name: str, limit: float) -> float | None:
        text = fields.get(name)
        if text is None or text == "":
            return None
        value = float(text) if _NUMBER.fullmatch(text.strip()) else math.nan
        if not 0.0 <= value <= limit:  # (NaN too)
            rejected.append(name)
            return None
        return value

    wall = number("wall", MAX_WALL)
    rss = number("max_rss_kb", MAX_RSS_KB)
    given_cores = number("cores", MAX_CORES)
    if given_cores is not None and (given_cores < 1 or not _INTEGER.fullmatch(fields["cores"].strip())):
        rejected.append("cores")
        given_cores = None
    n_cores = cores if cores is not None and 0 < cores <= MAX_CORES else given_cores
    user, system = number("cpu_user", MAX_WALL * MAX_CORES), number("cpu_system", MAX_WALL * MAX_CORES)
    if user is not None or system is not None:
        bound = wall * n_cores * CPU_MARGIN + CPU_SLACK if wall is not None and n_cores is not None else None
        if bound is None or (user or 0.0) + (system or 0.0) > bound:  # (CPU that no wall time vouches for)
            rejected += [n for n, v in (("cpu_user", user), ("cpu_system", system)) if v is not None]
            user = system = None
    node = fields.get("node")
    if node is not None and not _NODE.fullmatch(node):
        rejected.append("node")
        node = None
    return Usage(
        source,
        cpu_user=user,
        cpu_system=system,
        max_rss_kb=int(rss) if rss is not None and rss == int(rss) else None,
        wall=wall,
        cores=int(n_cores) if n_cores is not None else None,
        node=node or None,
        rejected=tuple(rejected) + (("max_rss_kb",) if rss is not None and rss != int(rss) else ()),
    )


@dataclass(frozen=True)
class Totals:
    """One grid job's usage over every attempt of every local job (see :meth:`GridJob.usage_totals`).

    Each sum is over the attempts whose field is known (None when no attempt's is); ``measured``
    attempts have a ``<usage>``, ``unknown`` ended attempts have none or an incomplete one: a total
    with ``unknown`` > 0 is a lower bound."""

    cpu_user: float | None = None
    cpu_system: float | None = None
    wall: float | None = None
    core_seconds: float | None = None
    max_rss_kb: int | None = None
    nodes: tuple[str, ...] = ()
    measured: int = 0
    unknown: int = 0

    @property
    def cpu(self) -> float | None:
        if self.cpu_user is None and self.cpu_system is None:
            return None
        return (self.cpu_user or 0.0) + (self.cpu_system or 0.0)

    @classmethod
    def of(cls, usages: Iterable[Usage | None]) -> Totals:
        """The totals of these attempts' measures (None: an ended attempt measured by nobody)."""
        sums: dict[str, float | None] = {"cpu_user": None, "cpu_system": None, "wall": None, "core_seconds": None}
        rss: int | None = None
        nodes: dict[str, None] = {}
        measured = unknown = 0
        for u in usages:
            if u is None:
                unknown += 1
                continue
            measured += 1
            unknown += 0 if u.complete else 1
            for name in sums:
                value = getattr(u, name)
                if value is not None:
                    sums[name] = (sums[name] or 0.0) + value
            if u.max_rss_kb is not None:
                rss = u.max_rss_kb if rss is None else max(rss, u.max_rss_kb)
            if u.node:
                nodes[u.node] = None
        return cls(
            cpu_user=sums["cpu_user"],
            cpu_system=sums["cpu_system"],
            wall=sums["wall"],
            core_seconds=sums["core_seconds"],
            max_rss_kb=rss,
            nodes=tuple(sorted(nodes)),
            measured=measured,
            unknown=unknown,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "cpuUser": self.cpu_user,
            "cpuSystem": self.cpu_system,
            "cpu": self.cpu,
            "wall": self.wall,
            "coreSeconds": self.core_seconds,
            "maxRssKb": self.max_rss_kb,
            "nodes": list(self.nodes),
            "measured": self.measured,
            "unknown": self.unknown,
        }
