"""Properties of the job types over random sites, queues and requests (hypothesis)."""

from __future__ import annotations

import math
import tempfile

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from jim.config import SiteLimits
from jim.errors import PlanError
from jim.handlers.montecarlo import MonteCarloHandler
from jim.handlers.parametric import ParametricHandler
from jim.jobdesc import parse_rsl
from jim.requirements import (
    NoEligibleQueue,
    QueueCache,
    choose_queue,
    parse_resources,
    requirements_of_description,
)
from jim.requirements.matching import JobRequirements, matching_queues, preferred
from jim.split.parametric import sequence_values

SETTINGS = settings(max_examples=150, deadline=None)
BINDINGS = {
    "site-recommended-cpu",
    "site-max-cpu",
    "queue-wall-time",
    "queue-cpu-time",
    "default-events-per-job",
    "user-events-per-job",
    "max-local-jobs",
}


@SETTINGS
@given(
    events=st.integers(1, 200_000),
    first=st.integers(0, 1000),
    cpe=st.one_of(st.none(), st.floats(0.01, 5000)),
    user=st.one_of(st.none(), st.integers(1, 5000)),
    wall=st.one_of(st.none(), st.integers(60, 200_000)),
    cpu=st.one_of(st.none(), st.integers(60, 200_000)),
    power=st.one_of(st.none(), st.floats(0.25, 4)),
    safety=st.floats(0.5, 1.0),
    rec=st.integers(60, 20_000),
    extra=st.integers(0, 50_000),
    cap=st.integers(1, 500),
    balanced=st.booleans(),
)
def test_montecarlo_slices_fit_the_tightest_limit(
    events, first, cpe, user, wall, cpu, power, safety, rec, extra, cap, balanced
):
    params = {k: v for k, v in (("WallTimeLimit", wall), ("MaxCPUTime", cpu), ("CPUPower", power)) if v}
    queue = parse_resources({"ce": {"c": {"queue": {"q": params}}}}).find("q")
    site = SiteLimits(recommended_cpu_per_job=rec, max_cpu_per_job=rec + extra, max_local_jobs=cap)
    rsl = f"&(executable=/bin/mc)(events={events})(firstevent={first})"
    rsl += f"(cpuperevent={cpe!r})" if cpe is not None else ""
    rsl += f"(eventsperjob={user})" if user is not None else ""
    handler = MonteCarloHandler(site, {"safety": safety, "balanced": balanced}, queue=queue)
    try:
        plan = handler.getNumSubmissionTimes(parse_rsl(rsl))
    except PlanError as e:
        assert "over the limit" in e.message or "more than" in e.message
        return
    # every event exactly once, in order, from the first event
    assert plan.slices[0].attrs["firstEvent"] == first
    assert plan.slices[-1].attrs["lastEvent"] == first + events - 1
    for a, b in zip(plan.slices, plan.slices[1:]):
        assert b.attrs["firstEvent"] == a.attrs["lastEvent"] + 1
    assert sum(s.attrs["events"] for s in plan.slices) == events
    assert plan.n <= cap and plan.binding in BINDINGS
    assert max(s.attrs["events"] for s in plan.slices) <= plan.attrs["perJob"]
    if cpe is not None:
        limits = [rec + extra] + [v * safety for v in (wall, cpu) if v]
        limit = min(limits)
        assert float(plan.attrs["timeLimit"]) == min(limits) or math.isclose(
            float(plan.attrs["timeLimit"]), limit, rel_tol=1e-5
        )
        seconds = cpe / (power or 1)
        assert all(s.attrs["events"] * seconds <= limit * (1 + 1e-9) for s in plan.slices)
        if user is None and plan.binding != "max-local-jobs":
            # no bigger job would fit both the recommendation and the limit (the floors are tight)
            assert plan.attrs["perJob"] >= min(events, max(1, math.floor(min(rec, limit) / seconds) - 1))


REQUIREMENTS = st.lists(
    st.sampled_from(
        [
            "Tag=bigmem",
            "Tag=gpu,bigmem",
            "WallTimeLimit=7200",
            "WallTimeLimit=100000",
            "MaxRAM=8000",
            "GPU=1",
            "Site=JIM.TEST.site",
            "Queue=short",
            "Queue=gpu,long",
            "WholeNode=true",
        ]
    ),
    max_size=3,
    unique_by=lambda r: r.split("=")[0],
)


@SETTINGS
@given(reqs=REQUIREMENTS, expression=st.sampled_from([None, "WallTimeLimit >= 5000", "MaxRAM > 10000"]))
def test_cached_queue_choice_equals_a_fresh_evaluation(reqs, expression):
    import tomllib
    from pathlib import Path

    site = tomllib.loads((Path(__file__).parent / "data" / "requirements" / "site.toml").read_text())["resources"]
    values = reqs + ([expression] if expression else [])
    stated = requirements_of_description(values)
    mapping = {r.split("=")[0]: (r.split("=")[1].split(",") if "," in r else r.split("=")[1]) for r in reqs}
    with tempfile.TemporaryDirectory() as cache_dir:
        try:
            normal = JobRequirements.of(mapping) if not expression else stated.resolve()
            expected = preferred(matching_queues(normal, parse_resources(site)))
        except NoEligibleQueue as e:
            try:
                choose_queue(site, stated, cache=QueueCache(cache_dir))
            except NoEligibleQueue as again:
                assert again.message == e.message
                return
            raise AssertionError("choose_queue found a queue matching_queues did not")
        first = choose_queue(site, stated, cache=QueueCache(cache_dir))
        second = choose_queue(site, requirements_of_description(list(reversed(values))), cache=QueueCache(cache_dir))
    assert first.queue == expected and second.queue == expected
    assert not first.cached and (second.cached or expression is not None)


@SETTINGS
@given(
    n=st.integers(1, 30),
    start=st.sampled_from(["0", "1", "0.1", "2.5", "-3"]),
    step=st.sampled_from(["0", "1", "0.2", "1e1"]),
    factor=st.sampled_from(["1", "2", "1.5"]),
)
def test_parametric_argv_carries_exactly_the_sequence(n, start, step, factor):
    rsl = (
        f'&(executable=/bin/echo)(arguments="v=$Parameter" "$SplitID")(parameters={n})'
        f"(parameterstart={start})(parameterstep={step})(parameterfactor={factor})"
    )
    values = sequence_values(n, start=start, step=step, factor=factor)
    assume(all(len(v) < 200 for v in values))
    handler = ParametricHandler(SiteLimits(max_local_jobs=100), grid_job_id="20260101-000000-abcdef")
    desc = parse_rsl(rsl)
    plan = handler.getNumSubmissionTimes(desc)
    argvs = [handler.getCommandAndArguments(desc, plan, s) for s in plan.slices]
    assert [a[1] for a in argvs] == [f"v={v}" for v in values]
    assert [int(a[2]) for a in argvs] == list(range(n)) and len({len(a[2]) for a in argvs}) == 1
    assert [s.params["Parameter"] for s in plan.slices] == list(values)
