"""An in-memory batch system behind jim's real adapter base, for in-process tests of the worker and the monitor.

:class:`FakeAdapter` implements the adapter contract over a dict of jobs and
lets a test stage what a real batch system does only by accident: a submit
that goes through but reports failure (an unknown outcome), a refused submit,
a status query that fails, a job that leaves the queue, accounting records.
Everything around it (grouping, retries, reconcile by tag, the status cache,
the degraded flag) is :class:`jim.adapters.base.Adapter`'s own code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jim.adapters.base import Adapter
from jim.adapters.model import BatchStatus, QueryResult, SubmitChunk
from jim.errors import QueryError, SubmitError
from jim.paths import Home
from jim.states import EndCause, Evidence, LocalState


@dataclass
class FakeJob:
    tag: str
    state: LocalState = LocalState.QUEUED
    exit_code: int | None = None
    cause: EndCause | None = None


@dataclass
class Faults:
    """What goes wrong next (each counter counts down as it fires)."""

    lost_submits: int = 0
    """Submissions that go through but raise a transient error (the outcome looks unknown)."""
    transient_submits: int = 0
    """Submissions refused with a transient error (nothing went in)."""
    refuse: str | None = None
    """Refuse every submission for good, with this message."""
    query_down: bool = False
    find_down: bool = False


class FakeAdapter(Adapter):
    """See the module docstring.  ``jobs``: batch id -> job; ``calls``: every call, in order."""

    name = "fake"
    max_chunk_size = 4

    def __init__(self, home: Home, **options: Any):
        super().__init__(home, {"retries": 3, **options})
        self.jobs: dict[str, FakeJob] = {}
        self.accounting_records: dict[str, BatchStatus] = {}
        self.faults = Faults()
        self.calls: list[tuple[str, Any]] = []
        self.next_id = 100

    # -- the contract ------------------------------------------------------------
    def submit_group(self, chunk: SubmitChunk, group: list[int]) -> dict[int, str]:
        self.calls.append(("submit", list(group)))
        if self.faults.refuse:
            raise SubmitError(self.faults.refuse)
        if self.faults.transient_submits:
            self.faults.transient_submits -= 1
            raise SubmitError("the batch system is busy", transient=True)
        tags = {s.index: s.tag for s in chunk.jobs}
        ids = {index: self.add(tags[index]) for index in group}
        if self.faults.lost_submits:
            self.faults.lost_submits -= 1
            raise SubmitError("the submit command timed out", transient=True)
        return ids

    def query(self, batch_ids: list[str]) -> QueryResult:
        self.calls.append(("query", sorted(batch_ids)))
        if self.faults.query_down:
            return QueryResult(ok=False, error="the batch system does not answer")
        return QueryResult(
            ok=True,
            statuses={
                bid: BatchStatus(j.state, exit_code=j.exit_code, native=j.state.value, tag=j.tag, cause=j.cause)
                for bid, j in self.jobs.items()
            },
        )

    def find_by_tag(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        self.calls.append(("find_by_tag", sorted(tags)))
        if self.faults.find_down:
            raise QueryError("cannot ask the batch system", transient=True)
        return {j.tag: bid for bid, j in self.jobs.items() if j.tag in tags}

    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        self.calls.append(("accounting", sorted(batch_ids)))
        return {b: s for b, s in self.accounting_records.items() if b in batch_ids}

    def cancel_units(self, batch_ids: list[str]) -> Sequence[str]:
        return batch_ids

    def cancel_batch(self, units: Sequence[str], grace: float) -> None:
        self.calls.append(("cancel", list(units)))
        for bid in units:
            if bid in self.jobs and not self.jobs[bid].state.terminal:
                self.jobs[bid].state = LocalState.CANCELLED

    # -- what tests do to it -------------------------------------------------------
    def add(self, tag: str, state: LocalState = LocalState.QUEUED) -> str:
        """A job of this tag in the queue (as if submitted); its batch id."""
        bid = str(self.next_id)
        self.next_id += 1
        self.jobs[bid] = FakeJob(tag, state)
        return bid

    def submitted_tags(self) -> list[str]:
        """Every tag submitted, once per submission (a duplicate shows twice)."""
        return sorted(j.tag for j in self.jobs.values())

    def set_state(
        self, tag: str, state: LocalState, exit_code: int | None = None, cause: EndCause | None = None
    ) -> str:
        bid = next(b for b, j in self.jobs.items() if j.tag == tag)
        self.jobs[bid].state, self.jobs[bid].exit_code, self.jobs[bid].cause = state, exit_code, cause
        return bid

    def vanish(self, tag: str, record: BatchStatus | None = None) -> str:
        """The job leaves the queue; ``record``: what the accounting then says of it."""
        bid = next(b for b, j in self.jobs.items() if j.tag == tag)
        del self.jobs[bid]
        if record is not None:
            self.accounting_records[bid] = record
        return bid

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.calls if k == kind)


class SameAnswerAdapter(FakeAdapter):
    """Answers with the very same statuses while nothing changed, as a command adapter whose status
    command printed the same again (:meth:`jim.adapters.base.CommandAdapter.query`)."""

    def query(self, batch_ids: list[str]) -> QueryResult:
        said = tuple((b, j.tag, j.state, j.exit_code, j.cause) for b, j in self.jobs.items())
        last = getattr(self, "_parsed", None)  # (None too in a jim before the parse memo: see bench_monitor_pass)
        if last is not None and last[0] == said:
            return QueryResult(ok=True, statuses=last[1])
        result = super().query(batch_ids)
        if result.ok:  # (a failed command's output is not an answer to remember)
            self._parsed = (said, result.statuses)  # type: ignore[assignment]
        return result

    def interned(self, before: dict[str, BatchStatus], after: dict[str, BatchStatus]) -> None:
        """As a command adapter: the same output again answers the statuses the cache kept."""
        last = getattr(self, "_parsed", None)
        if last is not None and last[1] is before:
            self._parsed = (last[0], after)  # type: ignore[assignment]


def ended(state: LocalState, exit_code: int | None, tag: str) -> BatchStatus:
    """An accounting record of a job that ended."""
    return BatchStatus(state, exit_code=exit_code, native=state.value, evidence=Evidence.ACCOUNTING, tag=tag)
