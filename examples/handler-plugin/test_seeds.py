"""Unit tests of the example job type: run with `python -m pytest test_seeds.py` where jim is installed."""

import pytest
from jim_example_handler import SeedsHandler

from jim.config import SiteLimits
from jim.errors import InvalidAttribute, InvalidCount
from jim.jobdesc import parse_rsl

SITE = SiteLimits(max_local_jobs=100)


def plan(rsl, **options):
    handler = SeedsHandler(SITE, options)
    desc = parse_rsl(rsl)
    p = handler.getNumSubmissionTimes(desc)
    return p, [handler.getCommandAndArguments(desc, p, s) for s in p.slices]


def test_one_local_job_per_seed():
    p, argvs = plan("&(executable=/bin/gen)(seeds=3)(firstseed=10)", stride=5, seed_argument="--seed")
    assert [s.params["seed"] for s in p.slices] == ["10", "15", "20"]
    assert argvs[1] == ["/bin/gen", "--seed", "15"]
    assert p.binding == "seeds"


@pytest.mark.parametrize(
    "rsl, exc",
    [
        ("&(executable=/bin/gen)", InvalidAttribute),
        ("&(executable=/bin/gen)(seeds=0)", InvalidAttribute),
        ("&(executable=/bin/gen)(seeds=101)", InvalidCount),
    ],
)
def test_refusals(rsl, exc):
    with pytest.raises(exc):
        plan(rsl)
