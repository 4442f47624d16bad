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
from typing import Any

from jim.errors import InvalidAttribute, PlanError
from jim.handlers.base import Handler, HandlerOptions, LocalSlice, Plan
from jim.jobdesc import JobDescription
from jim.split.events import EventOptions, split_events


@dataclass(frozen=True)
class MonteCarloOptions(HandlerOptions):
    """``[handlers.montecarlo]``: events split evenly (``balanced``), the events per local job when the user gives
    no CPU-per-event hint (0: the site's ``default_events_per_job``), the share of a queue's time limit a
    local job may use (``safety``)."""

    balanced: bool = True
    default_events_per_job: int = 0
    safety: float = 0.8


class MonteCarloHandler(Handler):
    """Monte Carlo production: events split by the site's CPU and the queue's time limits."""

    name = "montecarlo"
    Options = MonteCarloOptions
    options: MonteCarloOptions

    def getNumSubmissionTimes(self, desc: JobDescription) -> Plan:
        raw = desc.get("events")
        if raw is None:
            raise InvalidAttribute("montecarlo jobs need events=<number of events>", gram_error=148)
        try:
            total = int(raw.strip(), 10)
        except ValueError:
            raise InvalidAttribute(f"events must be a positive integer, got {raw!r}") from None
        if total <= 0:
            raise InvalidAttribute(f"events must be a positive integer, got {raw!r}")
        first = desc.get_int("firstevent", 1, minimum=0)
        per_lumi = desc.get_int("eventsperlumi", None, minimum=1)
        first_lumi = desc.get_int("firstlumi", 1, minimum=1)
        cap, cap_why = self.max_local_jobs(desc)
        self.executable_argv(desc)
        budget = self.event_budget(
            desc,
            safety=float(self.options.safety),
            default_per_job=int(self.options.default_events_per_job) or self.site.default_events_per_job,
        )
        per_job, binding = min(budget.per_job, total), budget.binding
        n = math.ceil(total / per_job)
        if n > cap:
            wider = math.ceil(total / cap)
            if budget.fits is not None and wider <= budget.fits and not budget.user_set:
                per_job, binding = wider, "max-local-jobs"
            else:
                raise PlanError(
                    f"{total} events at {per_job} per local job need {n} local jobs, over the "
                    f"limit of {cap} ({cap_why.replace('-', ' ')})"
                )
        try:
            slices = split_events(
                total,
                per_job,
                first,
                bool(self.options.balanced),
                EventOptions(events_per_lumi=per_lumi, first_lumi=first_lumi),
            )
        except ValueError as e:
            raise InvalidAttribute(str(e)) from None
        plan_slices = []
        for s in slices:
            attrs: dict[str, Any] = {"firstEvent": s.first, "lastEvent": s.last, "events": s.count}
            env = {"JIM_FIRST_EVENT": str(s.first), "JIM_LAST_EVENT": str(s.last), "JIM_EVENTS": str(s.count)}
            if s.first_lumi is not None:
                attrs.update(firstLumi=s.first_lumi, lastLumi=s.last_lumi)
                env.update(JIM_FIRST_LUMI=str(s.first_lumi), JIM_LAST_LUMI=str(s.last_lumi))
            est = budget.estimate(s.count)
            if est is not None:
                attrs["estSeconds"] = f"{est:.0f}"
            plan_slices.append(LocalSlice(attrs=attrs, env=env))
        largest = max(s.count for s in slices)
        cpe = budget.cpu_per_event
        est = budget.estimate(largest)
        expl = (
            f"{total} events from event {first} in {len(slices)} local jobs of up to {largest} events "
            f"(binding: {binding.replace('-', ' ')}"
        )
        if cpe is not None:
            power = self.cpu_power()
            speed = f" / CPUPower {power:g}" if power != 1 else ""
            expl += (
                f"; {cpe:g} s/event{speed}, about {est:g} s per local job against the site's recommended "
                f"{self.site.recommended_cpu_per_job:g} s and {budget.limit.describe()}"
            )
        expl += ")"
        plan_attrs: dict[str, Any] = {
            "unit": "events",
            "total": total,
            "firstEvent": first,
            "perJob": per_job,
            "eventsPerLumi": per_lumi,
            "cpuPerEvent": f"{cpe:g}" if cpe is not None else None,
            "estCpuPerJob": f"{largest * cpe:g}" if cpe is not None else None,
            "estSecondsPerJob": f"{est:.0f}" if est is not None else None,
        }
        if cpe is not None:
            plan_attrs.update(budget.limit.record())
            if self.cpu_power() != 1:
                plan_attrs["cpuPower"] = f"{self.cpu_power():g}"
        return Plan(plan_slices, binding, expl, attrs=plan_attrs)

    def prepareWorkArea(self, desc, plan, area) -> None:
        self.add_input_files(desc, area)

    def getCommandAndArguments(self, desc, plan, local) -> list[str]:
        return self.executable_argv(desc)
