"""What a batch system has, read from its own bulk query: cores, free cores, memory, GPUs.

Each batch system answers with ONE command (or one collector query) that lists
its nodes; the parsers here turn that answer into per-node figures
(:class:`Node`) and :func:`combine` sums them into a
:class:`jim.adapters.model.Capacity` (cores in all, cores of the largest node,
free cores now, memory of the largest node, GPUs in all and on one node):

==========  ===============================================  ==========================================
system      command                                          per node
==========  ===============================================  ==========================================
Slurm       ``sinfo -h -N -o '%N|%C|%m|%G'`` [``-p P``]      CPUs A/I/O/T (free: idle), memory, GRES gpu
Grid Engin  ``qhost -q -F gpu``                              a queue instance's slots (free: total -
                                                             used - reserved, none in an unusable
                                                             state), MEMTOT, ``gpu`` complex
PBS         ``pbsnodes -a``                                  ``np`` / ``resources_available.ncpus``,
                                                             ``jobs`` / ``resources_assigned.ncpus``
                                                             (neither, and not ``free``: free unknown),
                                                             memory, ``gpus`` / ``ngpus``
HTCondor    the collector's startd ads                       ``TotalCpus``, free: the ``Cpus`` of
                                                             partitionable and idle slots
==========  ===============================================  ==========================================

A node listed twice (Slurm lists a node once per partition) counts once.  An
answer that lists no node is no answer (None): unknown stays unknown, never a
guess.  Values only: nothing here runs a command.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from jim.adapters.model import Capacity
from jim.errors import QueryError

if TYPE_CHECKING:
    from jim.adapters.base import Adapter

log = logging.getLogger("jim.adapters")

#: Most nodes one answer may list (a larger answer is cut there: the figures say "at least").
MAX_NODES = 200_000
#: Largest figure believed of one node (cores, GPUs) or its memory in MB: beyond is a parse error.
MAX_FIGURE = 1 << 40

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


@dataclass(frozen=True)
class Node:
    """One node's figures (None: the batch system does not say)."""

    name: str
    cores: int
    free: int | None = None
    memory_mb: int | None = None
    gpus: int = 0


def combine(nodes: Iterable[Node]) -> Capacity | None:
    """The :class:`Capacity` of these nodes (each name once, the first time it is listed); None for none."""
    seen: dict[str, Node] = {}
    for node in nodes:
        if len(seen) >= MAX_NODES:
            break
        seen.setdefault(node.name, node)
    if not seen:
        return None
    ns = list(seen.values())
    frees = [n.free for n in ns]
    memories = [n.memory_mb for n in ns if n.memory_mb is not None]
    return Capacity(
        cores=sum(n.cores for n in ns),
        node_cores=max(n.cores for n in ns),
        free_cores=None if None in frees else sum(f for f in frees if f is not None),
        memory_mb=max(memories) if memories else None,
        gpus=sum(n.gpus for n in ns),
        node_gpus=max(n.gpus for n in ns),
    )


def ask(adapter: Adapter, argv: list[str], parse: Callable[[str], Capacity | None]) -> Capacity | None:
    """Run ``argv`` (one bulk query, through the adapter's command seam) and parse it; None when the
    command fails or its output is not what ``parse`` reads."""
    try:
        return parse(adapter.run(argv, error=QueryError).stdout)
    except (QueryError, ValueError) as e:
        log.warning("%s: capacity unknown: %s", adapter.name, e)
        return None


# -- the cache's form -------------------------------------------------------------------------


def to_json(capacity: Capacity | None) -> dict[str, Any] | None:
    """A capacity as the JSON object a site fact keeps (None stays None)."""
    return None if capacity is None else asdict(capacity)


def from_json(value: Any) -> Capacity | None:
    """A capacity from :func:`to_json`'s object; None for anything else (a damaged cache file)."""
    if not isinstance(value, dict) or set(value) != {f.name for f in fields(Capacity)}:
        return None
    if not all(v is None or (type(v) is int and 0 <= v <= MAX_FIGURE) for v in value.values()):
        return None
    if value["cores"] is None or value["gpus"] is None or value["node_gpus"] is None:
        return None
    return Capacity(**value)


# -- the parsers ------------------------------------------------------------------------------


def figure(text: str) -> int:
    """A non-negative integer figure of one node (ValueError otherwise)."""
    value = int(text.strip())
    if not 0 <= value <= MAX_FIGURE:
        raise ValueError(f"figure out of range: {text!r}")
    return value


def memory_mb(text: str) -> int | None:
    """A memory with an optional unit (``23.5G``, ``1000mb``, ``16384kb``; bare: MB unless ``bytes``)
    in MB; None for ``-`` or nothing."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgtp]?)(i?b)?\s*", text, re.I)
    if not m:
        if text.strip() in ("", "-", "(null)", "N/A"):
            return None
        raise ValueError(f"not a memory: {text!r}")
    unit = m.group(2).lower() or ("" if m.group(3) else "m")
    mb = int(float(m.group(1)) * _UNITS[unit]) >> 20
    if mb > MAX_FIGURE:
        raise ValueError(f"memory out of range: {text!r}")
    return mb


def slurm_gpus(gres: str) -> int:
    """GPUs in a Slurm GRES list (``gpu:2``, ``gpu:a100:4(S:0-1),shard:8``, ``(null)``)."""
    total = 0
    for item in re.sub(r"\([^)]*\)", "", gres).split(","):
        parts = item.strip().split(":")
        if parts[0] == "gpu" and len(parts) > 1:
            total += figure(parts[-1]) if parts[-1].isdigit() else 0
    return total


def parse_sinfo(text: str) -> Capacity | None:
    """``sinfo -h -N -o '%N|%C|%m|%G'``: one line per node and partition."""
    nodes = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != 4:
            raise ValueError(f"not a line of sinfo's node list: {line!r}")
        name, cpus, memory, gres = parts
        states = cpus.split("/")
        if len(states) != 4:
            raise ValueError(f"not sinfo's CPU states (A/I/O/T): {cpus!r}")
        nodes.append(Node(name.strip(), figure(states[3]), figure(states[1]), memory_mb(memory), slurm_gpus(gres)))
    return combine(nodes)


#: Letters of a Grid Engine queue instance's states that make its slots unusable now
#: (alarm, suspended, disabled, error, unknown, calendar-suspended/disabled, orphaned).
_SGE_UNUSABLE = set("aAsSdDEuCco")


def parse_qhost(text: str, queue: str | None = None) -> Capacity | None:
    """``qhost -q -F gpu``: each host's line (NCPU, MEMTOT ...), then its queue instances
    (``name type resv/used/total [states]``) and resources (``hc:gpu=2.000000``).

    A host's cores are the slots Grid Engine hands out there: its largest queue instance (of
    ``queue`` when one is named; a host without one is left out); free: that instance's total
    less used and reserved, 0 when its state makes it unusable."""
    nodes: list[Node] = []
    host: dict[str, Any] | None = None

    def close() -> None:
        if host is not None and host["slots"] is not None:
            nodes.append(Node(host["name"], host["slots"], host["free"], host["memory"], host["gpus"]))

    lines = text.splitlines()
    if not lines or not lines[0].startswith("HOSTNAME"):
        raise ValueError("not qhost's output")
    for line in lines[1:]:
        if not line.strip() or line.startswith("-"):
            continue
        f = line.split()
        if not line[0].isspace():
            close()
            host = None if f[0] == "global" or len(f) < 8 else {"name": f[0], "slots": None, "free": 0}
            if host is not None:
                host.update(memory=memory_mb(f[7]), gpus=0)
        elif host is not None and "=" in f[0] and f[0].split(":", 1)[-1].startswith("gpu="):
            host["gpus"] = figure(f[0].split("=", 1)[1].split(".")[0])
        elif host is not None and len(f) >= 3 and (queue is None or f[0] == queue):
            resv, used, total = (figure(x) for x in f[2].split("/"))
            free = 0 if _SGE_UNUSABLE & set("".join(f[3:])) else max(0, total - used - resv)
            if host["slots"] is None or total > host["slots"]:
                host["slots"], host["free"] = total, free
    close()
    return combine(nodes)


#: PBS node states whose cores are not free now (Torque's and PBS Pro's words).
_PBS_BUSY = ("down", "offline", "unknown", "job-exclusive", "busy", "job-busy", "stale", "state-unknown", "resv")


def _pbs_node(name: str, attrs: Mapping[str, str]) -> Node | None:
    """One node of ``pbsnodes -a`` (Torque: ``np``, ``jobs``, ``status`` availmem/physmem, ``gpus``;
    PBS Pro: ``resources_available.*``, ``resources_assigned.ncpus``)."""
    cores_text = attrs.get("resources_available.ncpus") or attrs.get("np")
    if cores_text is None:
        return None
    cores = figure(cores_text)
    status = dict(kv.split("=", 1) for kv in attrs.get("status", "").split(",") if "=" in kv)
    memory_text = attrs.get("resources_available.mem") or status.get("physmem") or status.get("availmem") or ""
    state = attrs.get("state", "")
    used: int | None = None
    if "resources_assigned.ncpus" in attrs:
        used = figure(attrs["resources_assigned.ncpus"])
    elif "jobs" in attrs:  # (Torque: one "core/job id" per core a job holds)
        used = len([j for j in attrs["jobs"].split(",") if j.strip()])
    elif state == "free":  # (no job listed, and free: none runs)
        used = 0
    if any(word in state for word in _PBS_BUSY):
        free: int | None = 0
    else:  # (a state the node list does not count its jobs in, e.g. Slurm's wrapper's "mixed": unknown)
        free = None if used is None else max(0, cores - used)
    gpus = figure(attrs.get("resources_available.ngpus") or attrs.get("gpus") or "0")
    return Node(name, cores, free, memory_mb(memory_text), gpus)


def parse_pbsnodes(text: str) -> Capacity | None:
    """``pbsnodes -a``: blocks of ``name`` then indented ``key = value`` lines."""
    nodes: list[Node] = []
    name: str | None = None
    attrs: dict[str, str] = {}

    def close() -> None:
        if name is not None:
            node = _pbs_node(name, attrs)
            if node is not None:
                nodes.append(node)

    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            close()
            name, attrs = line.strip(), {}
        elif name is not None and "=" in line:
            key, _, value = line.partition("=")
            attrs[key.strip()] = value.strip()
    close()
    return combine(nodes)


#: What the collector is asked of each slot (see :func:`from_slots`).
CONDOR_PROJECTION = [
    "Machine",
    "Name",
    "Cpus",
    "TotalCpus",
    "TotalMemory",
    "TotalGPUs",
    "SlotType",
    "State",
    "Activity",
]


def from_slots(slots: Iterable[Mapping[str, Any]]) -> Capacity | None:
    """HTCondor's slots (startd ads as dicts): a machine's cores, memory and GPUs are its
    ``Total*`` figures; free: the ``Cpus`` of its partitionable slots (what they have not handed
    out) and of its static slots that are unclaimed and idle."""
    machines: dict[str, dict[str, int | None]] = {}
    for ad in slots:
        name = str(ad.get("Machine") or str(ad.get("Name", "")).partition("@")[2] or ad.get("Name", ""))
        m = machines.setdefault(name, {"cores": 0, "free": 0, "memory": None, "gpus": 0})
        cpus = _int(ad.get("Cpus"))
        m["cores"] = max(m["cores"] or 0, _int(ad.get("TotalCpus")))
        if ad.get("TotalMemory") is not None:
            m["memory"] = _int(ad.get("TotalMemory"))
        m["gpus"] = max(m["gpus"] or 0, _int(ad.get("TotalGPUs")))
        idle = ad.get("State") == "Unclaimed" and ad.get("Activity") == "Idle"
        if ad.get("SlotType") == "Partitionable" or (ad.get("SlotType") != "Dynamic" and idle):
            m["free"] = (m["free"] or 0) + cpus
    return combine(Node(name, m["cores"] or 0, m["free"], m["memory"], m["gpus"] or 0) for name, m in machines.items())


def _int(value: Any) -> int:
    """An integer figure of a ClassAd (0 when missing or not a number)."""
    try:
        return figure(str(int(value))) if value is not None else 0
    except (TypeError, ValueError):
        return 0
