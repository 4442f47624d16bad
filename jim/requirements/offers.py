"""What a queue can give one local job, and the queues that can hold a job's resource shape.

A queue of ``[resources]`` says what it offers with these parameters (all optional; a queue that
does not say is not checked for it, and the batch system decides):

``NumberOfProcessors``
    the most cores one local job may have in the queue (DIRAC's name);
``CoresPerNode``
    the cores of one of the queue's nodes: a whole-node job gets this many, and no job more
    (either one stands for the other when only one is given);
``MaxRAM``
    the most memory, in MB, one local job may have (DIRAC's name);
``GPUs``
    the GPUs of one of the queue's nodes: a job asking for GPUs needs a queue that says it has
    them;
``WholeNode``
    ``false``: the queue gives no node to one job alone.

:func:`fitting` keeps the queues that can hold a :class:`~jim.jobdesc.shape.Shape` and gives each
the shape it would run with (a range of cores resolved to the most the queue allows, a whole node
given the node's cores); when none can, :class:`NoEligibleQueue` names what was asked and what the
largest queue offers.  ``docs/resources.md`` has the rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jim.jobdesc.shape import Shape, truth
from jim.requirements.matching import NoEligibleQueue
from jim.requirements.resources import ParamValue, Queue

__all__ = ["Offer", "fitting"]


def _number(queue: Queue, name: str) -> int | None:
    """A whole, positive queue parameter (a float is rounded down); None when absent or not one."""
    value = queue.get(name)
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = int(float(value)) if isinstance(value, (int, float, str)) else None
    except (ValueError, OverflowError):
        return None
    return number if number is not None and number >= 0 else None


def _flag(value: ParamValue | None) -> bool | None:
    if isinstance(value, bool):
        return value
    return truth(value) if isinstance(value, str) else None


@dataclass(frozen=True)
class Offer:
    """What ``queue`` gives one local job (None: the queue does not say)."""

    queue: Queue
    cores: int | None
    cores_per_node: int | None
    memory_mb: int | None
    gpus: int | None
    whole_node: bool | None

    @classmethod
    def of(cls, queue: Queue) -> Offer:
        most = _number(queue, "NumberOfProcessors")
        node = _number(queue, "CoresPerNode")
        if node is not None and most is not None:
            most = min(most, node)
        return cls(
            queue,
            most if most is not None else node,
            node if node is not None else most,
            _number(queue, "MaxRAM"),
            _number(queue, "GPUs"),
            _flag(queue.get("WholeNode")),
        )

    def fit(self, shape: Shape) -> Shape | None:
        """The shape a local job runs with in this queue, or None when the queue cannot hold it."""
        if shape.whole_node:
            if self.whole_node is False:
                return None
            if self.cores_per_node is not None:
                if shape.min_cores > self.cores_per_node:
                    return None
                if shape.cores != self.cores_per_node and "cores" not in shape.by:
                    shape = shape.with_cores(self.cores_per_node, "whole node (CoresPerNode)")
        if self.cores is not None and shape.cores > self.cores:
            if shape.min_cores > self.cores:
                return None
            shape = shape.with_cores(self.cores, "queue (NumberOfProcessors)")
        if self.memory_mb is not None and shape.memory_mb is not None and shape.memory_mb > self.memory_mb:
            return None
        if shape.gpus and (self.gpus is None or shape.gpus > self.gpus):
            return None
        return shape


def fitting(shape: Shape, queues: Sequence[Queue], label: str = "") -> list[tuple[Queue, Shape]]:
    """The queues of ``queues`` that can hold ``shape``, in order, each with the shape it gives;
    :class:`NoEligibleQueue` naming what was asked and the most any of them offers when none can."""
    offers = [Offer.of(q) for q in queues]
    out = [(o.queue, fit) for o in offers if (fit := o.fit(shape)) is not None]
    if not out:
        raise _no_fit(shape, offers, label)
    return out


def _no_fit(shape: Shape, offers: list[Offer], label: str) -> NoEligibleQueue:
    """Why no queue holds ``shape``: the first of cores, memory, GPUs and whole node none can give."""
    where = f" {label}" if label else ""

    def largest(values: list[tuple[int | None, Queue]]) -> str:
        known = [(v, q) for v, q in values if v is not None]
        if not known:
            return "no queue says"
        value, queue = max(known, key=lambda vq: vq[0])
        return f"the largest queue{where} offers {value} ({queue.qualified_name})"

    if shape.whole_node and all(o.whole_node is False for o in offers):
        return NoEligibleQueue(f"no queue{where} gives a whole node to one job (WholeNode = false)", unmet="WholeNode")
    cores = [(o.cores_per_node if shape.whole_node else o.cores, o.queue) for o in offers]
    if all(c is not None and shape.min_cores > c for c, _ in cores):
        asked = f"{shape.min_cores} cores per local job" + (" on a whole node" if shape.whole_node else "")
        return NoEligibleQueue(f"no queue{where} can hold {asked}: {largest(cores)}", unmet="NumberOfProcessors")
    if shape.gpus:
        gpus = [(o.gpus, o.queue) for o in offers]
        if all(g is None or shape.gpus > g for g, _ in gpus):
            return NoEligibleQueue(
                f"no queue{where} has {shape.gpus} GPU(s) per node: {largest(gpus)} (parameter GPUs)", unmet="GPUs"
            )
    memory = [(o.memory_mb, o.queue) for o in offers]
    if shape.memory_mb is not None and all(m is not None and shape.memory_mb > m for m, _ in memory):
        return NoEligibleQueue(
            f"no queue{where} gives {shape.memory_mb} MB to one local job: {largest(memory)} MB (MaxRAM)",
            unmet="MaxRAM",
        )
    return NoEligibleQueue(f"no queue{where} can hold {shape.describe()} per local job in one", unmet="shape")
