"""``montecarlo``: D0/CDF-style event generation, split by the site's and the queue's limits.

N is decided, in order, by:

1. the events requested (``events``, a positive integer; ``firstevent``
   default 1);
2. events per local job ``E`` (:meth:`Handler.event_budget`):
   * with the user's CPU-per-event hint (``cpuperevent`` seconds on the
     reference CPU; ``t = cpuperevent / CPUPower`` seconds on the chosen
     queue): ``E = floor(recommended_cpu_per_job / t)`` (binding
     ``site-recommended-cpu``), never more than what fits the tightest time
     limit ``L`` -- the site's ``max_cpu_per_job`` (``site-max-cpu``), or
     ``safety`` x the queue's ``WallTimeLimit`` (``queue-wall-time``) or
     ``MaxCPUTime`` (``queue-cpu-time``): ``E <= floor(L / t)``, and that
     limit is then the binding one.  A single event above ``L`` is refused;
   * without it: the handler's ``default_events_per_job``, else the site's
     (binding ``default-events-per-job``);
   * the user's ``eventsperjob`` wins when given (binding
     ``user-events-per-job``), capped by ``floor(L / t)`` when the hint allows
     checking it;
3. ``N = ceil(events / E)``; when N exceeds the local-job cap, E grows to
   ``ceil(events / cap)`` if the CPU hint shows it still fits ``L`` (binding
   ``max-local-jobs``), else the job is refused.

Each local job gets its inclusive first and last event (``JIM_FIRST_EVENT``,
``JIM_LAST_EVENT``, ``JIM_EVENTS`` in its environment) and, with a CPU hint,
its estimated seconds (slice ``estSeconds``).  Slices are balanced (sizes
differ by at most one) unless the option ``balanced = false`` asks for full
jobs plus a tail.  With ``eventsperlumi`` (WMCore's ``events_per_lumi``) each
local job's events are numbered in lumi sections of that size, numbered on
from ``firstlumi`` (default 1) across the local jobs: ``JIM_FIRST_LUMI`` and
``JIM_LAST_LUMI`` in its environment, slice ``firstLumi``/``lastLumi``.
The plan records ``perJob``, ``estSecondsPerJob``, ``timeLimit`` (usable
seconds) and ``timeLimitBy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jim.errors import InvalidAttribute, PlanError
from jim.handlers.base import EventBudget, Handler, HandlerOptions, LocalSlice, Plan
from jim.jobdesc import JobDescription
from jim.split.events import EventOptions, EventSlice, split_events

if TYPE_CHECKING:
    from jim.sandbox.builder import WorkArea


@dataclass(frozen=True)
class MonteCarloOptions(HandlerOptions):
    """``[handlers.montecarlo]``: events split evenly (``balanced``), the events per local job when the user gives
    no CPU-per-event hint (0: the site's ``default_events_per_job``), the share of a queue's time limit a
    local job may use (``safety``)."""

    balanced: bool = True
    default_events_per_job: int = 0
    safety: float = 0.8


@dataclass(frozen=True)
class _Events:
    """The events a montecarlo job asks for: ``events`` from ``firstevent``, numbered in lumi sections of
    ``eventsperlumi`` (None: no lumis) from ``firstlumi``."""

    total: int
    first: int
    per_lumi: int | None
    first_lumi: int

    @classmethod
    def of(cls, desc: JobDescription) -> _Events:
        raw = desc.get("events")
        if raw is None:
            raise InvalidAttribute("montecarlo jobs need events=<number of events>", gram_error=148)
        try:
            total = int(raw.strip(), 10)
        except ValueError:
            raise InvalidAttribute(f"events must be a positive integer, got {raw!r}") from None
        if total <= 0:
            raise InvalidAttribute(f"events must be a positive integer, got {raw!r}")
        return cls(
            total,
            desc.get_int("firstevent", 1, minimum=0),
            desc.get_int("eventsperlumi", None, minimum=1),
            desc.get_int("firstlumi", 1, minimum=1),
        )


@dataclass(frozen=True)
class _Split:
    """How the events are split: ``per_job`` events per local job, decided by ``binding``."""

    events: _Events
    budget: EventBudget
    per_job: int
    binding: str
    slices: list[EventSlice]

    @property
    def largest(self) -> int:
        """The events of the largest local job."""
        return max(s.count for s in self.slices)


class MonteCarloHandler(Handler):
    """Monte Carlo production: events split by the site's CPU and the queue's time limits."""

    name = "montecarlo"
    output_merge = "indexed"  # (each local job's file kept apart: <stem>.<k><suffix>)
    Options = MonteCarloOptions
    options: MonteCarloOptions

    def getNumSubmissionTimes(self, desc: JobDescription) -> Plan:
        """See :mod:`jim.handlers.base`; how N is decided is in the module docstring."""
        events = _Events.of(desc)
        cap, cap_why = self.max_local_jobs(desc)
        self.executable_argv(desc)
        budget = self.event_budget(
            desc,
            safety=float(self.options.safety),
            default_per_job=int(self.options.default_events_per_job) or self.site.default_events_per_job,
        )
        per_job, binding = _events_per_job(events.total, budget, cap, cap_why)
        split = _Split(events, budget, per_job, binding, self._split(events, per_job))
        slices = [_local_slice(s, budget) for s in split.slices]
        return Plan(slices, binding, self._explanation(split), attrs=self._plan_attrs(split))

    def _split(self, events: _Events, per_job: int) -> list[EventSlice]:
        """The events in slices of at most ``per_job`` (balanced unless the option says not)."""
        try:
            lumis = EventOptions(events_per_lumi=events.per_lumi, first_lumi=events.first_lumi)
            return split_events(events.total, per_job, events.first, bool(self.options.balanced), lumis)
        except ValueError as e:
            raise InvalidAttribute(str(e)) from None

    def _explanation(self, split: _Split) -> str:
        """The plan's explanation: the events, the local jobs, the binding and, with a CPU hint, the limits."""
        events, budget = split.events, split.budget
        expl = (
            f"{events.total} events from event {events.first} in {len(split.slices)} local jobs of up to "
            f"{split.largest} events (binding: {split.binding.replace('-', ' ')}"
        )
        if budget.cpu_per_event is not None:
            speed = self.speed_text()
            expl += (
                f"; {budget.cpu_per_event:g} s/event{speed}, about {budget.estimate(split.largest):g} s per local "
                f"job against the site's recommended {self.site.recommended_cpu_per_job:g} s and "
                f"{budget.limit.describe()}"
            )
        return expl + ")"

    def _plan_attrs(self, split: _Split) -> dict[str, Any]:
        """The facts recorded with the plan (with a CPU hint, the estimates and the time limit)."""
        cpe = split.budget.cpu_per_event
        est = split.budget.estimate(split.largest)
        attrs: dict[str, Any] = {
            "unit": "events",
            "total": split.events.total,
            "firstEvent": split.events.first,
            "perJob": split.per_job,
            "eventsPerLumi": split.events.per_lumi,
            "cpuPerEvent": f"{cpe:g}" if cpe is not None else None,
            "estCpuPerJob": f"{split.largest * cpe:g}" if cpe is not None else None,
            "estSecondsPerJob": f"{est:.0f}" if est is not None else None,
        }
        if cpe is not None:
            attrs.update(split.budget.limit.record())
            if self.cpu_power() != 1:
                attrs["cpuPower"] = f"{self.cpu_power():g}"
        return attrs

    def prepareWorkArea(self, desc: JobDescription, plan: Plan, area: WorkArea) -> None:
        """See :mod:`jim.handlers.base`: the job's ``inputfiles``."""
        self.add_input_files(desc, area)

    def getCommandAndArguments(self, desc: JobDescription, plan: Plan, local: LocalSlice) -> list[str]:
        """See :mod:`jim.handlers.base`: the job's executable and arguments, the same for every local job."""
        return self.executable_argv(desc)


def _events_per_job(total: int, budget: EventBudget, cap: int, cap_why: str) -> tuple[int, str]:
    """Events per local job, and what decided it: the budget's, or wider to stay within ``cap`` local
    jobs when the CPU hint shows a wider job still fits the time limit (and the user did not ask for a
    size); a :class:`PlanError` otherwise."""
    per_job = min(budget.per_job, total)
    n = math.ceil(total / per_job)
    if n <= cap:
        return per_job, budget.binding
    wider = math.ceil(total / cap)
    if budget.fits is not None and wider <= budget.fits and not budget.user_set:
        return wider, "max-local-jobs"
    raise PlanError(
        f"{total} events at {per_job} per local job need {n} local jobs, over the "
        f"limit of {cap} ({cap_why.replace('-', ' ')})"
    )


def _local_slice(s: EventSlice, budget: EventBudget) -> LocalSlice:
    """A local job's first and last event (and lumis), in its slice and its environment, and its estimate."""
    attrs: dict[str, Any] = {"firstEvent": s.first, "lastEvent": s.last, "events": s.count}
    env = {"JIM_FIRST_EVENT": str(s.first), "JIM_LAST_EVENT": str(s.last), "JIM_EVENTS": str(s.count)}
    if s.first_lumi is not None:
        attrs.update(firstLumi=s.first_lumi, lastLumi=s.last_lumi)
        env.update(JIM_FIRST_LUMI=str(s.first_lumi), JIM_LAST_LUMI=str(s.last_lumi))
    est = budget.estimate(s.count)
    if est is not None:
        attrs["estSeconds"] = f"{est:.0f}"
    return LocalSlice(attrs=attrs, env=env)
