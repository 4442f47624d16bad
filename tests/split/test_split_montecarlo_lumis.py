"""The montecarlo job type passes ``eventsperlumi`` / ``firstlumi`` to the event splitter."""

from __future__ import annotations

import pytest

from jim.config import SiteLimits
from jim.errors import InvalidAttribute
from jim.handlers.montecarlo import MonteCarloHandler
from jim.jobdesc import parse_rsl

SITE = SiteLimits(recommended_cpu_per_job=3600, max_cpu_per_job=36000, max_local_jobs=100, default_events_per_job=250)
RSL = "&(executable=/bin/mc)(jimtype=montecarlo)(events=250)(eventsperjob=100)"


def plan(extra: str, **opts):
    return MonteCarloHandler(SITE, {"balanced": False, **opts}).getNumSubmissionTimes(parse_rsl(RSL + extra))


def test_montecarlo_numbers_lumis_with_eventsperlumi():
    p = plan("(eventsperlumi=30)(firstlumi=5)")
    assert [(s.attrs["firstLumi"], s.attrs["lastLumi"]) for s in p.slices] == [(5, 8), (9, 12), (13, 14)]
    assert [(s.env["JIM_FIRST_LUMI"], s.env["JIM_LAST_LUMI"]) for s in p.slices] == [
        ("5", "8"),
        ("9", "12"),
        ("13", "14"),
    ]
    assert p.attrs["eventsPerLumi"] == 30


def test_montecarlo_without_eventsperlumi_has_no_lumis():
    p = plan("")
    assert all("firstLumi" not in s.attrs and "JIM_FIRST_LUMI" not in s.env for s in p.slices)


@pytest.mark.parametrize("extra", ["(eventsperlumi=0)", "(eventsperlumi=x)", "(eventsperlumi=10)(firstlumi=0)"])
def test_montecarlo_bad_eventsperlumi_is_a_gram_error(extra):
    with pytest.raises(InvalidAttribute):
        plan(extra)
