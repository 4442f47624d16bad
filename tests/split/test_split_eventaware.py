"""Event-aware lumi-based splitting: properties and edge cases."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jim.split.eventaware import LumiFile, LumiOptions, LumiSlice, split_event_aware

SETTINGS = settings(max_examples=200, deadline=None)

run_lumis = st.lists(st.tuples(st.integers(1, 3), st.integers(1, 10)), unique=True, max_size=10)
lumi_files = st.lists(st.tuples(run_lumis, st.integers(0, 2000)), min_size=1, max_size=8).map(
    lambda specs: [LumiFile(f"f{i}", tuple(lumis), events) for i, (lumis, events) in enumerate(specs)]
)


@SETTINGS
@given(
    files=lumi_files,
    target=st.integers(1, 1500),
    time_per_event=st.sampled_from([0, 0.5, 1, 2.5]),
    limit=st.one_of(st.none(), st.integers(50, 3000)),
    split_on_run=st.booleans(),
    halt=st.booleans(),
    total=st.one_of(st.none(), st.integers(1, 5000)),
)
def test_every_lumi_once_limits_hold_failures_flagged(files, target, time_per_event, limit, split_on_run, halt, total):
    avg = {f.name: f.events_per_lumi for f in files}
    units = [(f.name, r, lumi) for f in files for r, lumi in f.lumis]
    if total is not None:  # reference model: take while the events taken are below total
        kept, taken = [], Fraction(0)
        for u in units:
            if taken >= total:
                break
            kept.append(u)
            taken += avg[u[0]]
        units = kept
    options = LumiOptions(split_on_run=split_on_run, halt_on_file_boundaries=halt)
    kwargs = dict(time_per_event=time_per_event, job_time_limit=limit, total_events=total)
    if not units:
        with pytest.raises(ValueError, match="nothing to process"):
            split_event_aware(files, target, options, **kwargs)
        return
    slices = split_event_aware(files, target, options, **kwargs)
    assert [u for s in slices for u in s.lumis] == units

    tpe = Fraction(time_per_event)
    checks_time = limit is not None and time_per_event > 0

    def est(s: LumiSlice) -> Fraction:
        return sum((avg[f] for f, _, _ in s.lumis), Fraction(0))

    def too_big(events: Fraction) -> bool:
        return checks_time and events * tpe > limit

    for s in slices:
        assert s.count >= 1
        assert s.estimated_events == pytest.approx(float(est(s)))
        if s.failed_on_creation is not None:
            (unit,) = s.lumis  # a failed slice is one lumi, over the limit, with a reason
            assert too_big(avg[unit[0]])
            assert f"run {unit[1]} lumi {unit[2]}" in s.failed_on_creation
            continue
        assert not too_big(est(s))
        if s.count > 1:
            assert est(s) <= target
        if split_on_run:
            assert len(s.runs) == 1
        if halt:
            assert len(s.files) == 1
    # every over-limit lumi is failed, never submitted
    for s in slices:
        for f, _, _ in s.lumis:
            if too_big(avg[f]):
                assert s.failed_on_creation is not None
    # greedy: a job is closed only when the next lumi cannot join it
    for a, b in zip(slices, slices[1:]):
        if a.failed_on_creation or b.failed_on_creation:
            continue
        nxt = b.lumis[0]
        after = est(a) + avg[nxt[0]]
        boundary = (split_on_run and a.lumis[-1][1] != nxt[1]) or (halt and a.lumis[-1][0] != nxt[0])
        assert boundary or after > target or too_big(after)


def test_lumis_per_job_follows_each_file_average_with_carry_over():
    files = [
        LumiFile("a", [(1, i) for i in range(1, 6)], events=500),  # 100 per lumi
        LumiFile("b", [(1, i) for i in range(6, 10)], events=1000),  # 250 per lumi
    ]
    slices = split_event_aware(files, 300)
    assert [s.lumis for s in slices] == [
        (("a", 1, 1), ("a", 1, 2), ("a", 1, 3)),  # floor(300 / 100) = 3
        (("a", 1, 4), ("a", 1, 5)),  # 200 carried over: a 250-event lumi of b no longer fits
        (("b", 1, 6),),
        (("b", 1, 7),),
        (("b", 1, 8),),
        (("b", 1, 9),),
    ]
    assert [s.estimated_events for s in slices] == [300, 200, 250, 250, 250, 250]


def test_carry_over_fills_the_budget_from_the_next_file():
    files = [LumiFile("a", [(1, 1)], events=100), LumiFile("b", [(1, 2), (1, 3), (1, 4)], events=150)]
    assert [s.lumis for s in split_event_aware(files, 200)] == [
        (("a", 1, 1), ("b", 1, 2), ("b", 1, 3)),
        (("b", 1, 4),),
    ]


def test_a_lumi_heavier_than_the_target_gets_its_own_job():
    files = [LumiFile("a", [(1, 1), (1, 2)], events=1000)]
    slices = split_event_aware(files, 10)
    assert [s.count for s in slices] == [1, 1]
    assert all(s.failed_on_creation is None for s in slices)


def test_single_lumi_over_the_time_limit_is_failed_on_creation():
    files = [
        LumiFile("ok.root", [(1, 1), (1, 2)], events=20),
        LumiFile("huge.root", [(7, 42)], events=100_000),
        LumiFile("ok2.root", [(1, 3)], events=10),
    ]
    slices = split_event_aware(files, 1000, LumiOptions(split_on_run=False), time_per_event=2.0, job_time_limit=3600)
    assert [s.lumis for s in slices] == [
        (("ok.root", 1, 1), ("ok.root", 1, 2)),
        (("huge.root", 7, 42),),
        (("ok2.root", 1, 3),),
    ]
    assert [s.failed_on_creation is None for s in slices] == [True, False, True]
    reason = slices[1].failed_on_creation
    assert reason == (
        "file huge.root run 7 lumi 42: 100000 events at 2 s/event need about 200000 s, "
        "over the job time limit of 3600 s, and a lumi cannot be split"
    )
    assert "\n" not in reason


def test_heavy_lumis_of_a_multi_lumi_file_are_failed_too_and_say_it_is_an_average():
    files = [LumiFile("a", [(1, 1), (1, 2)], events=10_000)]
    slices = split_event_aware(files, 100, time_per_event=1, job_time_limit=1000)
    assert len(slices) == 2
    assert all("average of the file's 2 lumis" in s.failed_on_creation for s in slices)


def test_time_limit_also_bounds_a_job_of_several_lumis():
    files = [LumiFile("a", [(1, i) for i in range(1, 7)], events=600)]  # 100 per lumi
    # events alone would allow 5 lumis per job; 250 s at 1 s/event allows only 2
    slices = split_event_aware(files, 500, time_per_event=1, job_time_limit=250)
    assert [s.count for s in slices] == [2, 2, 2]


def test_no_time_check_without_limit_or_cost():
    files = [LumiFile("a", [(1, 1)], events=10**9)]
    assert split_event_aware(files, 10)[0].failed_on_creation is None
    assert split_event_aware(files, 10, time_per_event=0, job_time_limit=1)[0].failed_on_creation is None


def test_total_events_stops_after_reaching_it():
    files = [LumiFile("a", [(1, i) for i in range(1, 11)], events=1000)]  # 100 per lumi
    slices = split_event_aware(files, 300, total_events=450)
    assert sum(s.count for s in slices) == 5  # 400 < 450, so a fifth lumi is taken
    assert sum(s.estimated_events for s in slices) == 500


def test_zero_event_lumis_fit_any_budget():
    files = [LumiFile("a", [(1, i) for i in range(1, 50)], events=0)]
    assert [s.count for s in split_event_aware(files, 1)] == [49]


def test_job_limit():
    files = [LumiFile("a", [(1, i) for i in range(1, 5)], events=400)]
    assert len(split_event_aware(files, 100, LumiOptions(max_jobs=4))) == 4
    with pytest.raises(ValueError, match="needs 4 jobs, more than the limit of 3"):
        split_event_aware(files, 100, LumiOptions(max_jobs=3))


@pytest.mark.parametrize(
    "kwargs, options, message",
    [
        ({"events_per_job": 0}, {}, "events per job must be a positive integer"),
        ({"events_per_job": -10}, {}, "events per job must be a positive integer"),
        ({"events_per_job": 10, "time_per_event": -1}, {}, "time per event must be a non-negative number"),
        ({"events_per_job": 10, "job_time_limit": 0}, {}, "job time limit must be a positive number"),
        ({"events_per_job": 10, "job_time_limit": float("nan")}, {}, "job time limit must be a positive number"),
        ({"events_per_job": 10, "total_events": -1}, {}, "total_events must be a positive integer"),
        ({"events_per_job": 10}, {"halt_on_file_boundaries": 1}, "halt_on_file_boundaries must be true or"),
        ({"events_per_job": 10}, {"split_on_run": "no"}, "split_on_run must be true or"),
        ({"events_per_job": 10}, {"max_jobs": 0}, "max_jobs must be a positive integer"),
    ],
)
def test_bad_parameters_rejected(kwargs, options, message):
    with pytest.raises(ValueError, match=message):
        split_event_aware([LumiFile("a", [(1, 1)], 10)], options=LumiOptions(**options), **kwargs)
