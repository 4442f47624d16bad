"""reprocessing: ``@PLACE`` columns of ``inputdata`` keep each local job at one location set."""

from __future__ import annotations

import pytest

from jim.config import SiteLimits
from jim.errors import InvalidAttribute
from jim.handlers.reprocessing import ReprocessingHandler
from jim.jobdesc import parse_rsl

SITE = SiteLimits(recommended_cpu_per_job=3600, max_cpu_per_job=36000, max_local_jobs=100, default_events_per_job=250)
FILES = (
    '(inputdata=(/d/a 100 "1:1-2" @SE_A) (/d/b 100 "1:3-4" @SE_B) (/d/c 100 "1:5-6" @SE_A)'
    ' (/d/d 100 "1:7-8" @SE_A,SE_B) (/d/e 100 "1:9-10"))'
)


def plan(extra: str, **opts):
    h = ReprocessingHandler(SITE, opts)
    return h.getNumSubmissionTimes(parse_rsl(f"&(executable=/bin/reco)(jimtype=reprocessing){FILES}{extra}"))


@pytest.mark.parametrize(
    "extra",
    [
        "(splitting=files)(filesperjob=10)",
        "(splitting=lumis)(lumisperjob=100)",
        "(splitting=eventaware)(eventsperjob=1000)",
    ],
)
def test_each_mode_keeps_locations_apart(extra):
    p = plan(extra)
    got = [(s.attrs["inputFiles"], s.attrs.get("location")) for s in p.slices]
    assert got == [
        ("/d/a /d/c", "SE_A"),
        ("/d/b", "SE_B"),
        ("/d/d", "SE_A SE_B"),
        ("/d/e", None),
    ]


def test_events_mode_records_the_location():
    p = plan("(splitting=events)(eventsperjob=100)")
    assert [s.attrs.get("location") for s in p.slices] == ["SE_A", "SE_B", "SE_A", "SE_A SE_B", None]


@pytest.mark.parametrize("word", ["@", "@a b", "@SE;rm", "@" + "x" * 256, "@" + ",".join(f"s{i}" for i in range(65))])
def test_bad_location_is_a_gram_error(word):
    h = ReprocessingHandler(SITE, {})
    desc = parse_rsl(f'&(executable=/bin/reco)(jimtype=reprocessing)(inputdata=(/d/a 10 "{word}"))')
    with pytest.raises(InvalidAttribute, match="inputdata /d/a: (a location must be|more than 64 locations)"):
        h.getNumSubmissionTimes(desc)
