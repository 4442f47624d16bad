"""``montecarlo``: D0/CDF-style event generation, split by the site's CPU limits.

N is decided, in order, by:

1. the events requested (``events``, a positive integer; ``firstevent``
   default 1);
2. events per local job ``E``:
   * with the user's CPU-per-event hint (``cpuperevent`` seconds):
     ``E = floor(recommended_cpu_per_job / cpuperevent)`` (binding
     ``site-recommended-cpu``), never more than
     ``floor(max_cpu_per_job / cpuperevent)``; a single event above the
     site's maximum is refused;
   * without it: the handler's ``default_events_per_job``, else the site's
     (binding ``default-events-per-job``);
   * the user's ``eventsperjob`` wins when given (binding
     ``user-events-per-job``), capped by the site's maximum CPU
     (binding ``site-max-cpu``);
3. ``N = ceil(events / E)``; when N exceeds the local-job cap, E grows to
   ``ceil(events / cap)`` if the CPU hint shows it still fits the site's
   maximum (binding ``max-local-jobs``), else the job is refused.

Each local job gets its inclusive first and last event (``JIM_FIRST_EVENT``,
``JIM_LAST_EVENT``, ``JIM_EVENTS`` in its environment).  Slices are balanced
(sizes differ by at most one) unless the option ``balanced = false`` asks for
full jobs plus a tail.
"""

from __future__ import annotations

import math

from jim.errors import InvalidAttribute, PlanError
from jim.handlers.base import Handler, LocalSlice, Plan
from jim.jobdesc import JobDescription
from jim.split.events import split_events


class MonteCarloHandler(Handler):
    """Monte Carlo production: events split by the site's CPU limits per local job."""

    name = "montecarlo"
    options = {"balanced": True, "default_events_per_job": 0}

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
        cpe = desc.get_float("cpuperevent", None, positive=True)
        user_epj = desc.get_int("eventsperjob", None, minimum=1)
        cap, cap_why = self.max_local_jobs(desc)
        self.executable_argv(desc)
        site = self.site

        e_max = None
        if cpe is not None:
            e_max = math.floor(site.max_cpu_per_job / cpe)
            if e_max < 1:
                raise PlanError(f"one event needs {cpe:g} s of CPU, more than the site's maximum of "
                                f"{site.max_cpu_per_job:g} s per local job")
            per_job = max(1, math.floor(site.recommended_cpu_per_job / cpe))
            binding = "site-recommended-cpu"
        else:
            per_job = int(self.opts["default_events_per_job"]) or site.default_events_per_job
            binding = "default-events-per-job"
        if user_epj is not None:
            per_job, binding = user_epj, "user-events-per-job"
            if e_max is not None and per_job > e_max:
                per_job, binding = e_max, "site-max-cpu"
        per_job = min(per_job, total)
        n = math.ceil(total / per_job)
        if n > cap:
            wider = math.ceil(total / cap)
            if e_max is not None and wider <= e_max and user_epj is None:
                per_job, binding = wider, "max-local-jobs"
            else:
                raise PlanError(f"{total} events at {per_job} per local job need {n} local jobs, over the "
                                f"limit of {cap} ({cap_why.replace('-', ' ')})")
        slices = split_events(total, per_job, first, balanced=bool(self.opts["balanced"]))
        plan_slices = [LocalSlice(attrs={"firstEvent": s.first, "lastEvent": s.last, "events": s.count},
                                  env={"JIM_FIRST_EVENT": str(s.first), "JIM_LAST_EVENT": str(s.last),
                                       "JIM_EVENTS": str(s.count)})
                       for s in slices]
        largest = max(s.count for s in slices)
        est = f"{largest * cpe:g}" if cpe is not None else None
        expl = (f"{total} events from event {first} in {len(slices)} local jobs of up to {largest} events "
                f"(binding: {binding.replace('-', ' ')}")
        if cpe is not None:
            expl += f"; {cpe:g} s/event, about {largest * cpe:g} s CPU per local job against the site's " \
                    f"recommended {site.recommended_cpu_per_job:g} s and maximum {site.max_cpu_per_job:g} s"
        expl += ")"
        return Plan(plan_slices, binding, expl,
                    attrs={"unit": "events", "total": total, "firstEvent": first, "perJob": per_job,
                           "cpuPerEvent": f"{cpe:g}" if cpe is not None else None, "estCpuPerJob": est})

    def prepareWorkArea(self, desc, plan, area) -> None:
        self.add_input_files(desc, area)

    def getCommandAndArguments(self, desc, plan, local) -> list[str]:
        return self.executable_argv(desc)
