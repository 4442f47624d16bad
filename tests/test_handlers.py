"""Job-type handlers: how N is chosen, which limit binds, what is refused."""

from __future__ import annotations

import pytest

from jim.config import SiteLimits
from jim.errors import ConfigError, InvalidAttribute, InvalidCount, PlanError, UnknownJobType
from jim.handlers import discover, get_handler_class
from jim.handlers.base import Handler
from jim.handlers.generic import GenericHandler
from jim.handlers.montecarlo import MonteCarloHandler
from jim.jobdesc import parse_rsl

SITE = SiteLimits(recommended_cpu_per_job=3600, max_cpu_per_job=36000, max_local_jobs=100, default_events_per_job=250)


def mc(extra: str, **opts):
    h = MonteCarloHandler(SITE, opts)
    return h.getNumSubmissionTimes(parse_rsl(f"&(executable=/bin/mc)(jimtype=montecarlo){extra}"))


def events_covered(plan):
    return [e for s in plan.slices for e in range(s.attrs["firstEvent"], s.attrs["lastEvent"] + 1)]


@pytest.mark.parametrize(
    "extra,n,binding,per_job",
    [
        ("(events=1000)", 4, "default-events-per-job", 250),
        ("(events=1001)", 5, "default-events-per-job", 250),
        ("(events=10)", 1, "default-events-per-job", 10),
        ("(events=3600)(cpuperevent=10)", 10, "site-recommended-cpu", 360),
        ("(events=100)(cpuperevent=7200)", 100, "site-recommended-cpu", 1),  # one event over the recommendation
        ("(events=1000)(eventsperjob=100)", 10, "user-events-per-job", 100),
        ("(events=1000)(eventsperjob=500)(cpuperevent=100)", 3, "site-max-cpu", 360),
        ("(events=100000)(cpuperevent=1)", 28, "site-recommended-cpu", 3600),
        ("(events=360000)(cpuperevent=10)", 100, "max-local-jobs", 3600),  # wider jobs, still under max CPU
        ("(events=1000)(maxlocaljobs=2)(cpuperevent=1)", 1, "site-recommended-cpu", 1000),
    ],
)
def test_montecarlo_plans(extra, n, binding, per_job):
    plan = mc(extra)
    assert plan.n == n
    assert plan.binding == binding
    assert plan.attrs["perJob"] == per_job
    total = plan.attrs["total"]
    assert events_covered(plan) == list(range(1, total + 1))
    assert max(s.attrs["events"] for s in plan.slices) <= per_job


def test_montecarlo_first_event_and_env():
    plan = mc("(events=10)(firstevent=101)(eventsperjob=4)", balanced=False)
    assert [(s.attrs["firstEvent"], s.attrs["lastEvent"]) for s in plan.slices] == [(101, 104), (105, 108), (109, 110)]
    assert plan.slices[2].env == {"JIM_FIRST_EVENT": "109", "JIM_LAST_EVENT": "110", "JIM_EVENTS": "2"}


def test_montecarlo_balanced_by_default():
    plan = mc("(events=10)(eventsperjob=4)")
    assert [s.attrs["events"] for s in plan.slices] == [4, 3, 3]


@pytest.mark.parametrize(
    "extra,exc,fragment",
    [
        ("", InvalidAttribute, "need events"),
        ("(events=0)", InvalidAttribute, "positive integer"),
        ("(events=-3)", InvalidAttribute, "positive integer"),
        ("(events=1.5)", InvalidAttribute, "positive integer"),
        ("(events=1000)(cpuperevent=0)", InvalidAttribute, "positive"),
        ("(events=1000)(cpuperevent=x)", InvalidAttribute, "number"),
        ("(events=10)(cpuperevent=40000)", PlanError, "more than the site's maximum"),
        ("(events=100000)", PlanError, "over the limit of 100"),  # no CPU hint: cannot widen
        ("(events=1000)(eventsperjob=5)", PlanError, "over the limit of 100"),  # the user insists
        ("(events=100)(maxlocaljobs=0)", InvalidAttribute, "at least 1"),
    ],
)
def test_montecarlo_refusals(extra, exc, fragment):
    with pytest.raises(exc) as e:
        mc(extra)
    assert fragment in e.value.message


def test_generic_count_and_limits():
    h = GenericHandler(SITE)
    assert h.getNumSubmissionTimes(parse_rsl("&(executable=/bin/true)(count=7)")).n == 7
    assert h.getNumSubmissionTimes(parse_rsl("&(executable=/bin/true)(count=7)(jobtype=single)")).n == 1
    with pytest.raises(InvalidCount):
        h.getNumSubmissionTimes(parse_rsl("&(executable=/bin/true)(count=101)"))
    desc = parse_rsl("&(executable=bin/run)(directory=/opt/x)(arguments=a b)")
    plan = h.getNumSubmissionTimes(desc)
    assert h.getCommandAndArguments(desc, plan, plan.slices[0]) == ["/opt/x/bin/run", "a", "b"]


def test_discovery_and_unknown_type():
    found = discover()
    assert found["generic"] is GenericHandler and found["montecarlo"] is MonteCarloHandler
    with pytest.raises(UnknownJobType) as e:
        get_handler_class("nosuch")
    assert "generic" in e.value.message and "montecarlo" in e.value.message


def test_missing_method_fails_at_instantiation():
    class Half(Handler):
        name = "half"

        def getNumSubmissionTimes(self, desc):
            raise NotImplementedError

    with pytest.raises(TypeError) as e:
        Half(SITE)
    assert "getCommandAndArguments" in str(e.value) and "prepareWorkArea" in str(e.value)


def test_unknown_handler_option():
    with pytest.raises(ConfigError):
        MonteCarloHandler(SITE, {"balancd": True})
