"""Production jobs numbered in lumi sections (WMCore EventBased ``events_per_lumi``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jim.split.events import EventOptions, EventSlice, split_events


def test_full_jobs_and_tail_get_ceil_lumis_numbered_on():
    # WMCore: lumis_per_job = ceil(events_per_job / events_per_lumi); the tail gets ceil(rest / events_per_lumi).
    slices = split_events(250, 100, options=EventOptions(events_per_lumi=30))
    assert [(s.first, s.last, s.first_lumi, s.last_lumi) for s in slices] == [
        (1, 100, 1, 4),
        (101, 200, 5, 8),
        (201, 250, 9, 10),
    ]


def test_default_one_lumi_per_job_and_first_lumi():
    slices = split_events(30, 10, options=EventOptions(events_per_lumi=10, first_lumi=7))
    assert [(s.first_lumi, s.last_lumi) for s in slices] == [(7, 7), (8, 8), (9, 9)]


def test_without_events_per_lumi_no_lumis():
    assert split_events(10, 5) == [EventSlice(1, 5), EventSlice(6, 10)]
    assert all(s.first_lumi is None and s.last_lumi is None for s in split_events(10, 5))


@settings(max_examples=200, deadline=None)
@given(
    total=st.integers(1, 5000),
    per_job=st.integers(1, 700),
    per_lumi=st.integers(1, 300),
    first_lumi=st.integers(1, 1000),
    balanced=st.booleans(),
)
def test_lumis_are_contiguous_and_each_holds_at_most_events_per_lumi(total, per_job, per_lumi, first_lumi, balanced):
    options = EventOptions(events_per_lumi=per_lumi, first_lumi=first_lumi)
    slices = split_events(total, per_job, balanced=balanced, options=options)
    expected = first_lumi
    for s in slices:
        assert s.first_lumi == expected
        assert s.last_lumi is not None and s.first_lumi is not None
        n = s.last_lumi - s.first_lumi + 1
        assert (n - 1) * per_lumi < s.count <= n * per_lumi
        expected = s.last_lumi + 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"events_per_lumi": 0}, "events_per_lumi must be a positive integer"),
        ({"events_per_lumi": True}, "events_per_lumi must be a positive integer"),
        ({"events_per_lumi": 5, "first_lumi": 0}, "first lumi must be a positive integer"),
        ({"events_per_lumi": 1, "first_lumi": 2**32 - 5}, "pass the lumi number limit"),
    ],
)
def test_bad_lumi_parameters_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        split_events(10, 5, options=EventOptions(**kwargs))
