"""``jim accounting``: what grid jobs used, from their records, and what only jim can say about it.

Every **attempt** of every local job that ended is one row (:class:`Attempt`): its end (state,
cause, evidence, who killed it), its measured usage (:class:`jim.record.Usage`, None when nobody
measured it), and whether it **counted**:

* an attempt counts when it is the last attempt of its local job and that local job has ended: it
  gave the local job its result (DONE, or the failure that stayed);
* an attempt that another attempt followed (a retry after a node failure, a preemption, a lost job,
  a retryable exit code; a resubmission by a person) did not count.  Its core-hours are **wasted**,
  each by its cause (:data:`WASTE_CAUSES`, :func:`waste_cause`): what only jim knows, since the
  batch system's own accounting shows every attempt as an ordinary job.

Sums (:class:`Bucket`) keep unknown unknown: a figure is None when no attempt of the sum measured
it, and ``unknown`` counts the attempts whose core-hours (or CPU) are not known, so that a sum with
``unknown`` > 0 reads as "at least".  CPU efficiency is CPU / (wall x cores) over the attempts that
measured both.  Events per CPU-second: the events of the local jobs that ended DONE (their slice's
``events``: the job types that split by events record it) over the CPU of the attempts that made
them; None when the job type knows no events or a CPU is unknown.

Grouped by grid job, user, VO or day (the UTC day an attempt ended); ``--since``/``--until`` take
the attempts that ended in ``[since, until)``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from jim.db import Database
from jim.errors import JimError
from jim.record import GridJob, LocalJob, Usage
from jim.states import EndCause, Evidence, LocalState
from jim.timestamps import parse_iso

#: Why an attempt did not count, in the order they are shown.
WASTE_CAUSES = ("node_failure", "preemption", "lost", "job_failure", "cancelled", "site_failure", "other")
#: What each cause is called in text.
CAUSE_TEXT = {
    "node_failure": "node failure",
    "preemption": "preemption",
    "lost": "lost",
    "job_failure": "the job's own failure",
    "cancelled": "cancelled",
    "site_failure": "launch or wrapper failure",
    "other": "other (resubmitted after it ended)",
}
_NODE = frozenset({EndCause.NODE_FAIL.value, EndCause.BOOT_FAIL.value})
_SITE = frozenset({EndCause.LAUNCH_FAILED.value, EndCause.NOT_STARTED.value, EndCause.WRAPPER_FAILED.value})
#: What ``--by`` may group by.
GROUPS = ("grid-job", "user", "vo", "day")


@dataclass(frozen=True)
class Attempt:
    """One ended attempt of one local job (see the module docstring)."""

    grid_id: str
    index: int
    n: int
    state: str
    batch_id: str | None
    cause: str | None
    evidence: str | None
    killed_by: str | None
    queue: str | None
    submitted: float | None
    ended: float | None
    counted: bool
    usage: Usage | None
    events: int | None = None
    """The events it made: its slice's, when it counted and ended DONE."""


def waste_cause(a: Attempt) -> str:
    """Why an attempt that did not count ended, as one of :data:`WASTE_CAUSES`."""
    if a.state == LocalState.LOST.value:
        return "lost"
    if a.killed_by or a.evidence == Evidence.CANCEL.value or a.state == LocalState.CANCELLED.value:
        return "cancelled"
    if a.cause in _NODE:
        return "node_failure"
    if a.cause == EndCause.PREEMPTED.value:
        return "preemption"
    if a.cause in _SITE:
        return "site_failure"
    if a.state == LocalState.FAILED.value:
        return "job_failure"
    return "other"


def attempts(job: GridJob) -> Iterator[Attempt]:
    """Every ended attempt of every local job of ``job``, oldest first per local job."""
    for lj in job.local_jobs():
        usages = dict(lj.usages())
        for attrs in lj.past_attempts():
            n = int(attrs.get("n", "0") or 0)
            yield _attempt(job.id, lj, attrs, n, usages.get(n), counted=False)
        if lj.state.terminal and lj.evidence != Evidence.CREATION.value:
            yield _attempt(job.id, lj, lj.el.attrib, lj.attempt, usages.get(lj.attempt), counted=True)


def _attempt(grid_id: str, lj: LocalJob, attrs: object, n: int, usage: Usage | None, *, counted: bool) -> Attempt:
    get = attrs.get  # type: ignore[attr-defined]  # (a dict or an lxml attribute mapping)
    state = str(get("state") or "")
    events = None
    if counted and state == LocalState.DONE.value:
        text = lj.slice.get("events", "")
        events = int(text) if text.isascii() and text.isdigit() and len(text) < 16 else None
    return Attempt(
        grid_id=grid_id,
        index=lj.index,
        n=n,
        state=state,
        batch_id=get("batchId"),
        cause=get("cause"),
        evidence=get("evidence"),
        killed_by=get("killedBy"),
        queue=get("queue") or lj.get("queue"),
        submitted=parse_iso(get("submitted")),
        ended=parse_iso(get("ended")),
        counted=counted,
        usage=usage,
        events=events,
    )


@dataclass
class Bucket:
    """Sums over some attempts (see the module docstring: None is unknown, never 0)."""

    attempts: int = 0
    unknown: int = 0
    """Attempts whose core-hours or CPU are not known."""
    core_seconds: float | None = None
    cpu: float | None = None
    efficiency_cpu: float = 0.0
    efficiency_core_seconds: float = 0.0
    max_rss_kb: int | None = None

    def add(self, a: Attempt) -> None:
        self.attempts += 1
        u = a.usage
        held = u.core_seconds if u is not None else None
        cpu = u.cpu if u is not None else None
        if held is None or cpu is None:
            self.unknown += 1
        if held is not None:
            self.core_seconds = (self.core_seconds or 0.0) + held
        if cpu is not None:
            self.cpu = (self.cpu or 0.0) + cpu
        if held and cpu is not None:
            self.efficiency_cpu += cpu
            self.efficiency_core_seconds += held
        if u is not None and u.max_rss_kb is not None:
            self.max_rss_kb = max(self.max_rss_kb or 0, u.max_rss_kb)

    def merge(self, other: Bucket) -> None:
        self.attempts += other.attempts
        self.unknown += other.unknown
        if other.core_seconds is not None:
            self.core_seconds = (self.core_seconds or 0.0) + other.core_seconds
        if other.cpu is not None:
            self.cpu = (self.cpu or 0.0) + other.cpu
        self.efficiency_cpu += other.efficiency_cpu
        self.efficiency_core_seconds += other.efficiency_core_seconds
        if other.max_rss_kb is not None:
            self.max_rss_kb = max(self.max_rss_kb or 0, other.max_rss_kb)

    @property
    def core_hours(self) -> float | None:
        return None if self.core_seconds is None else self.core_seconds / 3600.0

    @property
    def efficiency(self) -> float | None:
        """CPU / (wall x cores) over the attempts that measured both."""
        return self.efficiency_cpu / self.efficiency_core_seconds if self.efficiency_core_seconds > 0 else None

    def to_json(self) -> dict[str, object]:
        return {
            "attempts": self.attempts,
            "unknown": self.unknown,
            "coreHours": _round(self.core_hours),
            "cpuSeconds": _round(self.cpu),
            "cpuEfficiency": _round(self.efficiency),
            "maxRssKb": self.max_rss_kb,
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


@dataclass
class Summary:
    """One group's figures: everything used, what counted, what was wasted by cause, events."""

    key: str
    used: Bucket = field(default_factory=Bucket)
    counted: Bucket = field(default_factory=Bucket)
    wasted: dict[str, Bucket] = field(default_factory=dict)
    events: int | None = None
    events_cpu: float | None = 0.0
    """The CPU of the attempts that made ``events`` (None: one of them unknown)."""
    grid_jobs: set[str] = field(default_factory=set)

    def add(self, a: Attempt) -> None:
        self.grid_jobs.add(a.grid_id)
        self.used.add(a)
        if a.counted:
            self.counted.add(a)
        else:
            self.wasted.setdefault(waste_cause(a), Bucket()).add(a)
        if a.events is not None:
            self.events = (self.events or 0) + a.events
            cpu = a.usage.cpu if a.usage is not None else None
            self.events_cpu = None if cpu is None or self.events_cpu is None else self.events_cpu + cpu

    @property
    def events_per_cpu_second(self) -> float | None:
        if self.events is None or not self.events_cpu:
            return None
        return self.events / self.events_cpu

    @property
    def wasted_total(self) -> Bucket:
        total = Bucket()
        for b in self.wasted.values():
            total.merge(b)
        return total

    def to_json(self) -> dict[str, object]:
        return {
            "key": self.key,
            "gridJobs": len(self.grid_jobs),
            "used": self.used.to_json(),
            "counted": self.counted.to_json(),
            "wasted": {c: self.wasted[c].to_json() for c in WASTE_CAUSES if c in self.wasted},
            "wastedTotal": self.wasted_total.to_json(),
            "events": self.events,
            "eventsPerCpuSecond": _round(self.events_per_cpu_second),
        }


def primary_vo(fqans: Iterable[str]) -> str | None:
    """The VO of the first (primary) FQAN (``/atlas/Role=production`` -> ``atlas``), as APEL reads it."""
    for fqan in fqans:
        parts = fqan.split("/")
        return parts[1] if fqan.startswith("/") and len(parts) > 1 and parts[1] else fqan or None
    return None


def identity_of(job: GridJob) -> tuple[str | None, tuple[str, ...]]:
    """(subject DN, FQANs, primary first) of the grid job's owner, as its record says; (None, ()) unknown."""
    identity = job.identity()
    return identity.subject or None, tuple(identity.fqans)


def _day(t: float | None) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%d") if t is not None else "unknown"


def _key(by: str, job: GridJob, a: Attempt) -> str:
    if by == "grid-job":
        return job.id
    if by == "user":
        return job.get("owner") or "unknown"
    if by == "vo":
        return primary_vo(identity_of(job)[1]) or "unknown"
    return _day(a.ended)


def summarize(
    jobs: Iterable[GridJob], by: str, since: float | None = None, until: float | None = None
) -> list[Summary]:
    """The figures of the attempts of ``jobs`` that ended in ``[since, until)``, grouped ``by`` one of
    :data:`GROUPS`, in key order."""
    if by not in GROUPS:
        raise JimError(f"--by {by[:40]!r}: one of {', '.join(GROUPS)}")
    out: dict[str, Summary] = {}
    for job in jobs:
        for a in attempts(job):
            if a.ended is None or (since is not None and a.ended < since) or (until is not None and a.ended >= until):
                continue
            key = _key(by, job, a)
            out.setdefault(key, Summary(key)).add(a)
    return [out[k] for k in sorted(out)]


def records(db: Database, since: float | None = None) -> Iterator[GridJob]:
    """The records of a home; those not updated since ``since`` are skipped unread (an attempt that
    ended later would have updated its record)."""
    if not db.home.db.is_dir():
        return
    for entry in db.list():
        updated = parse_iso(entry.get("updated"))
        if since is not None and updated is not None and updated < since:
            continue
        try:
            yield db.read(entry["id"])
        except JimError:
            continue  # (gone since the index was read, or damaged: jim status says which)


def parse_time(text: str | None, what: str) -> float | None:
    """``--since``/``--until``: a UTC day ``YYYY-MM-DD`` or an ISO 8601 time; None for none."""
    if not text:
        return None
    try:
        when = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise JimError(f"{what} {text[:40]!r}: expected YYYY-MM-DD or an ISO 8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return when.timestamp()


def _hours(x: float | None, unknown: int) -> str:
    if x is None:
        return "unknown"
    return f"{x:.3f}" + (f" (+{unknown} unknown)" if unknown else "")


def render(summaries: list[Summary], by: str) -> str:
    """``jim accounting``'s text."""
    if not summaries:
        return "no attempt ended in the period\n"
    lines = []
    for s in summaries:
        u = s.used
        eff = f"{u.efficiency:.1%}" if u.efficiency is not None else "unknown"
        rss = f"{u.max_rss_kb / 1024:.1f} MiB" if u.max_rss_kb is not None else "unknown"
        lines.append(f"{by} {s.key}: {len(s.grid_jobs)} grid job(s), {u.attempts} attempt(s)")
        lines.append(f"  core-hours used        {_hours(u.core_hours, u.unknown)}")
        lines.append(f"  core-hours that counted {_hours(s.counted.core_hours, s.counted.unknown)}")
        lines.append(f"  CPU efficiency         {eff}")
        lines.append(f"  peak memory            {rss}")
        if s.events is not None:
            rate = s.events_per_cpu_second
            lines.append(f"  events                 {s.events} ({f'{rate:.4g}' if rate else 'unknown'} per CPU-second)")
        for cause in WASTE_CAUSES:
            b = s.wasted.get(cause)
            if b is not None:
                lines.append(
                    f"  wasted: {CAUSE_TEXT[cause]:<22} {_hours(b.core_hours, b.unknown)} core-hours "
                    f"({b.attempts} attempt(s))"
                )
    return "\n".join(lines) + "\n"
