"""What crosses the adapter boundary: the local jobs handed to an adapter, and what it answers.

* :class:`SubmitChunk` -- local jobs of one grid job submitted together, with
  their wrapper, sandbox, queue and :class:`Limits`;
* :class:`BatchStatus` -- what the batch system says of one local job;
* :class:`Capacity` -- what the batch system has: cores, free cores, memory, GPUs;
* :class:`QueryResult` -- one status answer, three-valued: a local job is
  *known* (with a state), *absent* (the query worked and the job is not in
  it), or the query *failed* (nothing can be said: "no news").  An answer
  handed out by :meth:`jim.adapters.base.Adapter.query_cached` carries a
  **generation**: two answers of the same adapter object with the same
  generation say the same, and :attr:`QueryResult.changed` says in which
  generation each job's status last changed, so a caller that remembers the
  generation it applied knows which jobs have news without comparing them.

Values only: nothing here runs a command or touches a file.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jim.states import EndCause, Evidence, LocalState

if TYPE_CHECKING:  # (the record's package loads lxml, which loading the configuration must not)
    from jim.record.usage import Usage

#: The generation of an answer that was not stamped (a failed query, or one not asked through the cache).
UNSTAMPED = -1


@dataclass(frozen=True)
class BatchStatus:
    """What the batch system says about one local job."""

    state: LocalState
    exit_code: int | None = None
    reason: str | None = None
    native: str = ""
    evidence: Evidence = Evidence.BATCH
    host: str | None = None
    tag: str | None = None
    """jim's tag of the job this status belongs to, when the batch system shows it:
    a status whose tag differs from the local job's is someone else's (a reused id)."""
    submitted: float | None = None
    """When the batch system says the job was submitted (epoch), if it says."""
    cause: EndCause | None = None
    """Why it ended, when the batch system says so clearly (a node failure, a preemption, its
    wall-time limit...; see :class:`jim.states.EndCause`); None otherwise.  Only ever set with a
    terminal (or, for a launch failure, held) state, and never changes the state."""
    usage: Usage | None = None
    """What the job used, from an accounting record (already checked: :func:`jim.record.usage.checked`);
    None otherwise.  Not kept in the shared status answer (:meth:`to_json`): a status has none."""

    def to_json(self) -> list[Any]:
        # (``_value_``: the members' values without the enum property's cost; a status answer has
        # one of these per job of the user, 100,000 at a busy site)
        return [
            self.state._value_,
            self.exit_code,
            self.reason,
            self.native,
            self.evidence._value_,
            self.host,
            self.tag,
            self.submitted,
            self.cause._value_ if self.cause is not None else None,
        ]

    @classmethod
    def from_json(cls, v: list[Any]) -> BatchStatus:
        # (an answer cached before causes were recorded has eight fields)
        cause = EndCause(v[8]) if len(v) > 8 and v[8] is not None else None
        return cls(LocalState(v[0]), v[1], v[2], v[3], Evidence(v[4]), v[5], v[6], v[7], cause)


@dataclass
class QueryResult:
    """The answer of one status query: known jobs, or a failed query."""

    ok: bool
    statuses: dict[str, BatchStatus] = field(default_factory=dict)
    error: str = ""
    at: float = field(default_factory=time.time)
    """When the batch system was asked (a job submitted after it may be missing from it)."""
    generation: int = UNSTAMPED
    """Equal for two answers of one adapter object that say the same (see the module docstring)."""
    changed: Mapping[str, int] = field(default_factory=dict)
    """Batch id -> the generation in which its status last changed (only in a stamped answer)."""

    def lookup(self, batch_id: str) -> BatchStatus | None:
        """The status, or None when the job is absent.  Only call when ``ok``."""
        if not self.ok:
            raise RuntimeError("a failed query says nothing about any job")
        return self.statuses.get(batch_id)


@dataclass(frozen=True)
class LocalJobSpec:
    index: int
    tag: str
    queue: str | None = None


@dataclass(frozen=True)
class Limits:
    """What each local job of a chunk may use, as the grid job asked (None: not asked)."""

    wall_seconds: int | None = None
    """The wall-time limit."""
    cpu_seconds: int | None = None
    """The CPU-time limit (GRAM's ``maxcputime``)."""
    memory_mb: int | None = None
    """The memory limit in MB (GRAM's ``maxmemory``)."""
    min_memory_mb: int | None = None
    """The memory in MB each local job needs at least (GRAM's ``minmemory``)."""
    cores: int = 1
    """The cores of each local job (its resource shape, :class:`jim.jobdesc.shape.Shape`)."""
    gpus: int = 0
    """The GPUs of each local job."""
    whole_node: bool = False
    """Each local job has its node to itself (exclusive)."""
    project: str | None = None
    """The batch system's account the local jobs are charged to (GRAM's ``project``): it wins over
    the adapter's own default account (the stock GRAM modules pass it unconditionally)."""

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Limits:
        """Limits from a description's resource limits (:meth:`jim.jobdesc.JobDescription.resource_limits`);
        a zero or empty value is "not asked"."""
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown resource limit(s): {', '.join(sorted(unknown))}")

        def number(key: str) -> int | None:
            value = values.get(key)
            return int(value) if value else None

        project = values.get("project")
        return cls(
            wall_seconds=number("wall_seconds"),
            cpu_seconds=number("cpu_seconds"),
            memory_mb=number("memory_mb"),
            min_memory_mb=number("min_memory_mb"),
            cores=int(values.get("cores") or 1),
            gpus=int(values.get("gpus") or 0),
            whole_node=bool(values.get("whole_node")),
            project=str(project) if project else None,
        )


@dataclass(frozen=True)
class Capacity:
    """What the batch system has (None: it does not say): cores in all and on its largest node, free
    cores now, memory of its largest node (MB), GPUs in all and on one node."""

    cores: int
    node_cores: int | None = None
    free_cores: int | None = None
    memory_mb: int | None = None
    gpus: int = 0
    node_gpus: int = 0


@dataclass
class SubmitChunk:
    """Local jobs of one grid job to submit together."""

    grid_id: str
    jobs: list[LocalJobSpec]
    job_dir: Path
    wrapper: Path
    sandbox: Path
    outroot: Path
    queue: str | None = None
    limits: Limits = Limits()
    attempt: int = 1
    """The attempt every local job of the chunk is (see :meth:`jim.record.LocalJob.new_attempt`)."""

    def wrapper_argv(
        self, python: str, index: int | None = None, index_env: str | None = None, index_offset: int = 0
    ) -> list[str]:
        argv = [python, str(self.wrapper), "--sandbox", str(self.sandbox), "--outroot", str(self.outroot)]
        if self.attempt > 1:
            argv += ["--attempt", str(self.attempt)]
        if index is not None:
            argv += ["--index", str(index)]
        else:
            argv += ["--index-env", str(index_env), "--index-offset", str(index_offset)]
        return argv
