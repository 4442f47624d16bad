"""Local job states, GRAM grid states, and the aggregation of one into the other.

Two enums, one pure function.

* :class:`LocalState` is the state of one local (batch) job as jim knows it.
  Terminal states never go back (:func:`may_transition`), and each terminal
  state is entered with an :class:`Evidence`.
* :class:`GramState` carries the GRAM protocol numbers.
* :func:`aggregate` turns the states of every local job of a grid job into the
  one state the gatekeeper sees.  Its precedence table is the contract below,
  tested over every combination of local states.

Aggregation precedence (first row that applies wins)::

    previous grid state is DONE or FAILED       -> unchanged (terminal is final)
    every local job terminal, outputs gathered  -> DONE if the failure policy
                                                   holds and nobody cancelled,
                                                   else FAILED
    every local job terminal, outputs pending   -> ACTIVE   (gathering outputs)
    any local job RUNNING                       -> ACTIVE
    every non-terminal job HELD or SUSPENDED    -> SUSPENDED
    any local job terminal or SUSPENDED         -> ACTIVE   (work has started)
    otherwise (PLANNED, SUBMITTING, QUEUED,
               some HELD)                       -> PENDING
    then: PENDING after ACTIVE or SUSPENDED     -> ACTIVE   (GRAM drops
                                                   ACTIVE->PENDING and
                                                   SUSPENDED->PENDING)

The failure policy is ``failed <= max_failed_fraction * N`` where *failed*
counts FAILED, LOST and CANCELLED local jobs; the default fraction 0 means any
failed local job fails the grid job.  The grid exit code is the first non-zero
local exit code in local-job order, 0 for DONE, and 1 for a FAILED grid job
whose failures carry no exit code (LOST, cancelled before it ran).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


class LocalState(enum.Enum):
    """State of one local job."""

    PLANNED = "PLANNED"
    """In the plan; no submission attempted yet."""
    SUBMITTING = "SUBMITTING"
    """Submission intended (journaled); outcome not yet recorded.  On restart
    such jobs are reconciled by tag before any retry."""
    QUEUED = "QUEUED"
    """Accepted by the batch system, not yet running."""
    RUNNING = "RUNNING"
    """Running on a worker node."""
    HELD = "HELD"
    """Held by the batch system or an admin; will not start until released."""
    SUSPENDED = "SUSPENDED"
    """Started, then suspended by the batch system."""
    DONE = "DONE"
    """Ended with exit code 0."""
    FAILED = "FAILED"
    """Ended with a non-zero exit code, or was refused at creation."""
    CANCELLED = "CANCELLED"
    """Stopped by a cancel (jim's, or the batch system's)."""
    LOST = "LOST"
    """Gone from the batch system with no evidence of how it ended."""

    @property
    def terminal(self) -> bool:
        return self._value_ in _TERMINAL_VALUES

    @property
    def failure(self) -> bool:
        return self._value_ in _FAILURE_VALUES


# value sets (str hashing is C-level; these run once per local job on hot paths)
_TERMINAL_VALUES = frozenset({"DONE", "FAILED", "CANCELLED", "LOST"})
_FAILURE_VALUES = frozenset({"FAILED", "CANCELLED", "LOST"})

#: Rank used to order non-terminal states: an update to a lower rank is
#: ignored except where listed in _BACKWARDS_OK (held/suspended jobs resume).
_RANK = {
    LocalState.PLANNED: 0,
    LocalState.SUBMITTING: 1,
    LocalState.QUEUED: 2,
    LocalState.HELD: 3,
    LocalState.RUNNING: 4,
    LocalState.SUSPENDED: 5,
}
_BACKWARDS_OK = {
    (LocalState.HELD, LocalState.QUEUED),  # released
    (LocalState.SUSPENDED, LocalState.RUNNING),  # resumed
    (LocalState.RUNNING, LocalState.QUEUED),  # requeued by the batch system
    (LocalState.RUNNING, LocalState.HELD),  # requeued and held
    (LocalState.SUSPENDED, LocalState.QUEUED),
    (LocalState.SUSPENDED, LocalState.HELD),
}


def may_transition(old: LocalState, new: LocalState) -> bool:
    """True when a report of ``new`` may replace ``old``.

    Terminal states are final; otherwise states move forward, except the
    few documented ways back (release, resume, requeue).
    """
    return _ALLOWED[old._value_, new._value_]


def _may_transition(old: LocalState, new: LocalState) -> bool:
    if old is new:
        return False
    if old.terminal:
        return False
    if new.terminal:
        return True
    if (old, new) in _BACKWARDS_OK:
        return True
    return _RANK[new] > _RANK[old]


_ALLOWED = {(a.value, b.value): _may_transition(a, b) for a in LocalState for b in LocalState}


class Evidence(str, enum.Enum):
    """Why a local job was declared terminal."""

    BATCH = "batch"  # the batch system reported the end state
    ACCOUNTING = "accounting"  # found in the accounting records
    WRAPPER_EXIT_FILE = "wrapper-exit-file"  # jim's wrapper wrote the exit code
    ABSENT_AFTER_GRACE = "absent-after-grace"  # vanished, no record, grace expired
    CANCEL = "cancel"  # jim cancelled it
    CREATION = "creation"  # refused when the plan was made


class EndCause(str, enum.Enum):
    """Why the batch system says a local job ended, when it says: the site's fault or the job's own.

    Carried by a terminal batch status (:class:`jim.adapters.base.BatchStatus`) and written
    into the local job's reason; it never changes the state the job ends in.  Each adapter maps
    its own codes to these (Slurm states and reasons, Grid Engine ``failed`` codes, PBS negative
    exit statuses); a code that says nothing clear gives no cause.  The last two come from jim's
    own evidence (the wrapper's files), not from a batch system.
    """

    NODE_FAIL = "NODE_FAIL"
    """The node it ran on failed (or its batch daemon was lost)."""
    PREEMPTED = "PREEMPTED"
    """Stopped to make room for other work."""
    BOOT_FAIL = "BOOT_FAIL"
    """Its node could not be booted or readied."""
    LAUNCH_FAILED = "LAUNCH_FAILED"
    """The batch system could not start it on the node (prolog, shepherd, daemon failure)."""
    TIMEOUT = "TIMEOUT"
    """It reached its wall-time limit (the job's own)."""
    DEADLINE = "DEADLINE"
    """Its deadline passed (the job's own)."""
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    """It used more memory than it was given (the job's own)."""
    WRAPPER_FAILED = "WRAPPER_FAILED"
    """jim's wrapper failed before it ran the job's command (the sandbox could not be unpacked on
    the node, the node's disk was full): the wrapper's exit-code file says so."""
    NOT_STARTED = "NOT_STARTED"
    """The batch system says it failed, and jim's wrapper never started on the node."""

    @property
    def words(self) -> str:
        """A few words for a person: ``node failure``."""
        return _CAUSE_WORDS[self._value_]

    def describe(self) -> str:
        """``node failure (NODE_FAIL)``: what the local job's reason gets."""
        return f"{self.words} ({self._value_})"


_CAUSE_WORDS = {
    "NODE_FAIL": "node failure",
    "PREEMPTED": "preempted",
    "BOOT_FAIL": "node boot failure",
    "LAUNCH_FAILED": "launch failure",
    "TIMEOUT": "wall-time limit reached",
    "DEADLINE": "deadline passed",
    "OUT_OF_MEMORY": "out of memory",
    "WRAPPER_FAILED": "the wrapper failed before running the command",
    "NOT_STARTED": "the wrapper never started",
}
_SITE_FAULTS = frozenset({"NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "LAUNCH_FAILED", "WRAPPER_FAILED", "NOT_STARTED"})


def site_fault(cause: EndCause | str | None) -> bool:
    """True when a local job that ended for ``cause`` ended through no fault of its own (the
    node, the batch system or another job's priority): a cause worth another try.  False for the
    job's own causes (time, deadline, memory), for no cause, and for a string that names none."""
    if cause is None:
        return False
    return (cause.value if isinstance(cause, EndCause) else str(cause)) in _SITE_FAULTS


class GramState(enum.IntEnum):
    """GRAM job states with their protocol numbers (globus_gram_protocol_constants.h)."""

    PENDING = 1
    ACTIVE = 2
    FAILED = 4
    DONE = 8
    SUSPENDED = 16
    UNSUBMITTED = 32
    STAGE_IN = 64
    STAGE_OUT = 128

    @property
    def terminal(self) -> bool:
        return self in (GramState.DONE, GramState.FAILED)


@dataclass(frozen=True)
class FailurePolicy:
    """How many of a grid job's local jobs may fail and it still ends DONE (``[site]
    max_failed_fraction``; see the module docstring)."""

    max_failed_fraction: float = 0.0


def aggregate(
    states: Iterable[LocalState],
    *,
    previous: GramState | None = None,
    outputs_gathered: bool = False,
    cancelled: bool = False,
    max_failed_fraction: float = 0.0,
) -> GramState:
    """The grid state for these local states; see the module docstring."""
    return aggregate_counts(
        Counter(states),
        previous=previous,
        outputs_gathered=outputs_gathered,
        cancelled=cancelled,
        max_failed_fraction=max_failed_fraction,
    )


def aggregate_counts(
    counts: Mapping[LocalState, int],
    *,
    previous: GramState | None = None,
    outputs_gathered: bool = False,
    cancelled: bool = False,
    max_failed_fraction: float = 0.0,
) -> GramState:
    """:func:`aggregate` from the number of local jobs in each state: the module docstring's table,
    row by row."""
    if previous is not None and previous.terminal:
        return previous
    tally = _Tally.of(counts)
    if tally.total == 0:
        return _no_backwards(GramState.FAILED if cancelled and outputs_gathered else GramState.UNSUBMITTED, previous)
    if tally.terminal == tally.total:
        return _all_ended(tally, outputs_gathered, cancelled, max_failed_fraction)
    if tally.running:
        return GramState.ACTIVE
    if tally.held + tally.suspended == tally.total - tally.terminal:
        return GramState.SUSPENDED
    if tally.terminal or tally.suspended:
        return GramState.ACTIVE
    return _no_backwards(GramState.PENDING, previous)


@dataclass(frozen=True)
class _Tally:
    """The numbers of local jobs the table reads."""

    total: int
    terminal: int
    failed: int
    running: int
    held: int
    suspended: int

    @classmethod
    def of(cls, counts: Mapping[LocalState, int]) -> _Tally:
        items = counts.items()
        return cls(
            total=sum(n for _, n in items),
            terminal=sum(n for s, n in items if s.terminal),
            failed=sum(n for s, n in items if s.failure),
            running=counts.get(LocalState.RUNNING, 0),
            held=counts.get(LocalState.HELD, 0),
            suspended=counts.get(LocalState.SUSPENDED, 0),
        )


def _all_ended(tally: _Tally, outputs_gathered: bool, cancelled: bool, max_failed_fraction: float) -> GramState:
    """Every local job terminal: ACTIVE until the outputs are gathered, then DONE or FAILED."""
    if not outputs_gathered:
        return GramState.ACTIVE
    if cancelled or tally.failed > max_failed_fraction * tally.total:
        return GramState.FAILED
    return GramState.DONE


def _no_backwards(result: GramState, previous: GramState | None) -> GramState:
    if result is GramState.PENDING and previous in (GramState.ACTIVE, GramState.SUSPENDED):
        return GramState.ACTIVE
    return result


def grid_exit_code(states_and_codes: Iterable[tuple[LocalState, int | None]], grid: GramState) -> int | None:
    """Exit code reported with a terminal grid state; None while not terminal."""
    if not grid.terminal:
        return None
    if grid is GramState.DONE:
        return 0
    for _state, code in states_and_codes:
        if code:
            return code
    return 1


def parse_gram_state(value: str | int) -> GramState:
    """A GramState from a name (any case) or a number."""
    if isinstance(value, int) or str(value).isdigit():
        return GramState(int(value))
    return GramState[str(value).strip().upper()]
