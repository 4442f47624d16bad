"""The resource shape of one local job: cores, memory, GPUs, whole node, wall time.

Every front end maps its own language into jim's attributes (``cores``,
``mincores``, ``gpus``, ``wholenode``, ``maxmemory``, ``maxwalltime``, and
GRAM's ``count``, ``jobtype``, ``xcount``, ``hostcount``); :func:`stated_shape`
is the one place they become a :class:`Shape`, with where each value came
from.  The plan then fits the shape to the chosen queue
(:func:`jim.requirements.fit_shape`) and the worker hands it to the batch
adapter (:class:`jim.adapters.model.Limits`).  ``docs/resources.md`` has the
rules; ``docs/deviations.md`` says where a front end's peer reads them
differently.

Rules (GRAM's own meaning first):

* ``cores`` (jim) or ``xcount`` (cores per host, as OSG's and GRAM's own
  PBS/Slurm modules read it): the cores of each local job; both given, they
  must agree;
* ``count`` with ``jobtype=single`` or ``mpi``: the slots of one job, so the
  cores of the one local job (unless ``xcount`` says the cores per host: then
  ``count`` over ``xcount`` hosts); with ``multiple`` (the default) ``count``
  is copies (the job type decides how many local jobs);
* ``hostcount`` above 1, or a ``count`` that needs several hosts: refused
  (GRAM's INVALID_HOST_COUNT); a local job runs on one node;
* ``mincores``: the least cores the job accepts (DIRAC's
  ``MinNumberOfProcessors``); ``cores`` is then the most it can use, and the
  plan gives it what the queue holds within that range;
* ``gpus``: GPUs of each local job; ``wholenode``: each local job has its node
  to itself (``true``/``false``, ``yes``/``no``, ``1``/``0``);
* ``maxmemory``: MB of each local job (all of its cores together);
* :func:`memory_mb` reads a memory with a unit (``4GB``, ``512MiB``) for the
  front ends whose language has units (JDL's ``MaxRAM``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from jim.errors import GramError, InvalidAttribute, InvalidCount
from jim.jobdesc.limits import MAX_MEMORY_MB, MAX_NUMBER_DIGITS, shown
from jim.jobdesc.model import JobDescription

__all__ = ["MAX_CORES", "MAX_GPUS", "Shape", "memory_mb", "stated_shape", "truth"]

#: The most cores and GPUs one local job may ask for (a node of today is well below both).
MAX_CORES = 4096
MAX_GPUS = 64

_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})
#: A memory with an optional unit: ``4096``, ``4096MB``, ``4 GB``, ``512MiB``, ``1.5G``.
_MEMORY = re.compile(r"\s*([0-9]{1,15}(?:\.[0-9]{1,6})?)\s*([KMGTP]?)(I?B?)\s*\Z", re.I)
_UNIT_MB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


@dataclass(frozen=True)
class Shape:
    """What each local job of a grid job asks the batch system for.

    ``cores`` is the most cores it gets, ``min_cores`` the least it accepts
    (equal unless the description gives a range); ``memory_mb`` is the whole
    job's memory (None: not asked); ``wall_seconds`` None: not asked.  ``by``
    says where each value came from (``cores`` → ``xcount``, ...), for the
    plan's explanation and the record.
    """

    cores: int = 1
    min_cores: int = 1
    memory_mb: int | None = None
    gpus: int = 0
    whole_node: bool = False
    wall_seconds: int | None = None
    by: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by", MappingProxyType(dict(self.by)))

    def with_cores(self, cores: int, by: str) -> Shape:
        """The same shape with ``cores`` cores, chosen by ``by``."""
        least = cores if self.min_cores == self.cores else min(self.min_cores, cores)
        return replace(self, cores=cores, min_cores=least, by={**self.by, "cores": by})

    def describe(self) -> str:
        """``8 cores, 16000 MB, 1 GPU, whole node, 3600 s`` (what is asked only)."""
        parts = [f"{self.cores} core{'s' if self.cores != 1 else ''}"]
        if self.min_cores != self.cores:
            parts[0] = f"{self.min_cores}-{self.cores} cores"
        if self.memory_mb:
            parts.append(f"{self.memory_mb} MB")
        if self.gpus:
            parts.append(f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}")
        if self.whole_node:
            parts.append("whole node")
        if self.wall_seconds:
            parts.append(f"{self.wall_seconds} s")
        return ", ".join(parts)

    def record(self) -> dict[str, str]:
        """Plan attributes: ``cores``, ``memoryMB``, ``gpus``, ``wholeNode``, ``wallSeconds`` (those
        asked) and ``shapeBy`` (``cores=xcount memoryMB=maxmemory ...``)."""
        out = {"cores": str(self.cores)}
        if self.memory_mb:
            out["memoryMB"] = str(self.memory_mb)
        if self.gpus:
            out["gpus"] = str(self.gpus)
        if self.whole_node:
            out["wholeNode"] = "true"
        if self.wall_seconds:
            out["wallSeconds"] = str(self.wall_seconds)
        if self.by:
            out["shapeBy"] = " ".join(f"{k}={v}" for k, v in sorted(self.by.items()))
        return out

    def limits(self) -> dict[str, Any]:
        """The keys of :class:`jim.adapters.model.Limits` this shape sets (cores, GPUs, whole node)."""
        return {"cores": self.cores, "gpus": self.gpus, "whole_node": self.whole_node}

    def to_json(self) -> dict[str, Any]:
        return {
            "cores": self.cores,
            "minCores": self.min_cores,
            "memoryMB": self.memory_mb,
            "gpus": self.gpus,
            "wholeNode": self.whole_node,
            "wallSeconds": self.wall_seconds,
            "by": dict(self.by),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Shape:
        """What :meth:`to_json` wrote (a plan written without a shape: one core)."""
        if not data:
            return cls()
        return cls(
            cores=int(data.get("cores") or 1),
            min_cores=int(data.get("minCores") or data.get("cores") or 1),
            memory_mb=data.get("memoryMB"),
            gpus=int(data.get("gpus") or 0),
            whole_node=bool(data.get("wholeNode")),
            wall_seconds=data.get("wallSeconds"),
            by=data.get("by") or {},
        )


def memory_mb(text: str, name: str) -> int:
    """A memory given with a unit, in MB (rounded up): a bare number is MB; ``K``, ``M``, ``G``,
    ``T``, ``P`` with or without ``B`` or ``iB`` are powers of 1024.  Anything else (an unknown
    unit, a negative or empty value, more than jim's largest memory) is refused naming ``name``."""
    match = _MEMORY.match(text) if len(text) <= MAX_NUMBER_DIGITS else None
    suffix = match.group(3).upper() if match else ""
    if match is None or suffix == "I" or (suffix == "IB" and not match.group(2)):
        raise InvalidAttribute(
            f"{name} must be a memory in MB or with a unit (KB, MB, GB, TB; MiB, GiB ...), got {shown(text)}",
            gram_error=GramError.INVALID_MAX_MEMORY,
        )
    mb = float(match.group(1)) * _UNIT_MB[match.group(2).upper()]
    value = int(mb) + (0 if mb == int(mb) else 1)
    if not 1 <= value <= MAX_MEMORY_MB:
        raise InvalidAttribute(
            f"{name} must be from 1 MB to {MAX_MEMORY_MB} MB, got {shown(text)}",
            gram_error=GramError.INVALID_MAX_MEMORY,
        )
    return value


def _whole_number(desc: JobDescription, name: str, maximum: int, *, least: int = 1) -> int | None:
    """Attribute ``name``: a whole number from ``least`` to ``maximum``; None when not given."""
    value = desc.get_int(name, None, minimum=least)
    if value is not None and value > maximum:
        raise InvalidAttribute(f"{name} must be at most {maximum}, got {value}")
    return value


def truth(word: str) -> bool | None:
    """``true``/``yes``/``1`` → True, ``false``/``no``/``0`` → False (any case, blanks ignored); else None."""
    word = word.strip().lower()
    return True if word in _TRUE else False if word in _FALSE else None


def _flag(desc: JobDescription, name: str) -> bool:
    raw = desc.get(name)
    if raw is None:
        return False
    value = truth(raw)
    if value is None:
        raise InvalidAttribute(f"{name} must be true or false, got {shown(raw)}")
    return value


def stated_shape(desc: JobDescription) -> Shape:
    """The shape the description asks of each local job (see the module docstring); refuses a
    value out of range, a multi-node request and contradictory values with GRAM's numbers."""
    by: dict[str, str] = {}
    limits = desc.resource_limits()  # (GRAM's own checks and numbers first: hostcount, maxmemory ...)
    cores, min_cores = _cores(desc, by)
    gpus = _whole_number(desc, "gpus", MAX_GPUS, least=0) or 0
    if gpus:
        by["gpus"] = "gpus"
    whole = _flag(desc, "wholenode")
    if whole:
        by["wholeNode"] = "wholenode"
    memory = limits.get("memory_mb")
    if memory:
        by["memoryMB"] = "maxmemory"
    wall = limits.get("wall_seconds")
    if wall:
        by["wallSeconds"] = "maxwalltime" if desc.has("maxwalltime") else "maxtime"
    return Shape(cores, min_cores, memory, gpus, whole, wall, by)


def _cores(desc: JobDescription, by: dict[str, str]) -> tuple[int, int]:
    """(most, least) cores of each local job, and where they came from into ``by``."""
    count = desc.get_int("count", 1, minimum=1, error=InvalidCount)
    jobtype = (desc.get("jobtype") or "multiple").strip().lower()
    cores = _whole_number(desc, "cores", MAX_CORES)
    xcount = _whole_number(desc, "xcount", MAX_CORES)
    least = _whole_number(desc, "mincores", MAX_CORES)
    hosts = desc.get_int("hostcount", None, minimum=1, error=InvalidAttribute)
    if hosts is not None and hosts > 1:
        raise InvalidAttribute(
            f"hostcount={hosts}: each local job runs on one node; ask for the cores of one local job (xcount or cores)",
            gram_error=GramError.INVALID_HOST_COUNT,
        )
    if cores is not None and xcount is not None and cores != xcount:
        raise InvalidAttribute(f"cores ({cores}) and xcount ({xcount}) say different things; give one")
    exact, source = (cores, "cores") if cores is not None else (xcount, "xcount")
    if jobtype in ("single", "mpi") and count > 1:
        if exact is None:
            exact, source = count, f"count (jobtype={jobtype})"
        elif count > exact:
            raise InvalidAttribute(
                f"count={count} slots of {exact} cores per host need {-(-count // exact)} hosts: "
                "each local job runs on one node",
                gram_error=GramError.INVALID_HOST_COUNT,
            )
    if exact is None:
        if least is not None:
            raise InvalidAttribute("mincores needs cores: the most cores the job can use")
        return 1, 1
    by["cores"] = source
    if least is None:
        return exact, exact
    if least > exact:
        raise InvalidAttribute(f"mincores ({least}) must not be above cores ({exact})")
    by["minCores"] = "mincores"
    return exact, least
