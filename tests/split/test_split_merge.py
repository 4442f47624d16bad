"""Merge-by-size splitting: properties and edge cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jim.split.merge import (
    DEFAULT_MAX_MERGE_EVENTS,
    DEFAULT_MAX_MERGE_SIZE,
    DEFAULT_MIN_MERGE_SIZE,
    MergeFile,
    MergeSlice,
    split_merge_by_size,
)

SETTINGS = settings(max_examples=200, deadline=None)

merge_files = st.lists(st.tuples(st.integers(0, 150), st.integers(0, 60)), min_size=1, max_size=40).map(
    lambda specs: [MergeFile(f"out_{i}.root", size, events) for i, (size, events) in enumerate(specs)]
)


@SETTINGS
@given(
    files=merge_files,
    max_size=st.integers(1, 200),
    max_events=st.one_of(st.none(), st.integers(1, 80)),
    min_fraction=st.floats(0, 1),
)
def test_merge_every_file_once_in_order_limits_hold(files, max_size, max_events, min_fraction):
    min_size = int(max_size * min_fraction)
    slices = split_merge_by_size(files, max_merge_size=max_size, max_merge_events=max_events, min_merge_size=min_size)
    by_name = {f.name: f for f in files}
    assert [n for s in slices for n in s.files] == [f.name for f in files]
    ev_limit = max_events if max_events is not None else float("inf")
    for s in slices:
        assert s.count >= 1
        assert s.size == sum(by_name[n].size for n in s.files)
        assert s.events == sum(by_name[n].events for n in s.files)
        assert s.forced == (s.size < min_size)
        if s.oversize:
            (only,) = s.files
            assert by_name[only].size > max_size or by_name[only].events > ev_limit
        else:
            assert s.size <= max_size and s.events <= ev_limit
    # an oversize file always goes alone
    for f in files:
        if f.size > max_size or f.events > ev_limit:
            assert MergeSlice((f.name,), f.size, f.events, True, f.size < min_size) in slices
    # greedy: a group is only closed when its next file would break a limit
    for a, b in zip(slices, slices[1:]):
        if not a.oversize and not b.oversize:
            nxt = by_name[b.files[0]]
            assert a.size + nxt.size > max_size or a.events + nxt.events > ev_limit


def test_merge_table():
    files = [MergeFile(name, size) for name, size in [("a", 40), ("b", 40), ("c", 30), ("d", 250), ("e", 5)]]
    assert split_merge_by_size(files, max_merge_size=100, min_merge_size=10) == [
        MergeSlice(("a", "b"), 80, 0),  # adding c would make 110 > 100
        MergeSlice(("c",), 30, 0),  # emitted before the oversize file
        MergeSlice(("d",), 250, 0, oversize=True),  # alone, never cut
        MergeSlice(("e",), 5, 0, forced=True),  # remainder under min: still emitted, marked
    ]


def test_group_may_reach_the_limit_exactly():
    files = [MergeFile("a", 50, 5), MergeFile("b", 50, 5), MergeFile("c", 1, 0)]
    assert split_merge_by_size(files, max_merge_size=100, max_merge_events=10, min_merge_size=0) == [
        MergeSlice(("a", "b"), 100, 10),
        MergeSlice(("c",), 1, 0),
    ]


def test_events_limit_cuts_and_isolates():
    files = [MergeFile("a", 1, 6), MergeFile("b", 1, 6), MergeFile("c", 1, 20)]
    slices = split_merge_by_size(files, max_merge_size=100, max_merge_events=10, min_merge_size=0)
    assert slices == [
        MergeSlice(("a",), 1, 6),
        MergeSlice(("b",), 1, 6),
        MergeSlice(("c",), 1, 20, oversize=True),
    ]


def test_defaults_are_wmcore_s():
    assert (DEFAULT_MAX_MERGE_SIZE, DEFAULT_MIN_MERGE_SIZE, DEFAULT_MAX_MERGE_EVENTS) == (
        1_000_000_000,
        1_048_576,
        100_000_000,
    )
    assert split_merge_by_size([MergeFile("a", 2_000_000)]) == [MergeSlice(("a",), 2_000_000, 0)]
    assert split_merge_by_size([MergeFile("a", 10)])[0].forced


def test_zero_size_files_are_ordinary():
    files = [MergeFile("a", 0), MergeFile("b", 0)]
    assert split_merge_by_size(files, max_merge_size=1, min_merge_size=0) == [MergeSlice(("a", "b"), 0, 0)]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_merge_size": 0}, "max_merge_size must be a positive integer"),
        ({"max_merge_size": -1}, "max_merge_size must be a positive integer"),
        ({"max_merge_events": 0}, "max_merge_events must be a positive integer"),
        ({"min_merge_size": -1}, "min_merge_size must be a non-negative integer"),
        ({"max_merge_size": 10, "min_merge_size": 11}, "min_merge_size \\(11\\) is above max_merge_size"),
        ({"max_jobs": 0}, "max_jobs must be a positive integer"),
    ],
)
def test_bad_parameters_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        split_merge_by_size([MergeFile("a", 1)], **kwargs)


def test_input_errors():
    with pytest.raises(ValueError, match="nothing to merge"):
        split_merge_by_size([])
    with pytest.raises(ValueError, match="listed more than once"):
        split_merge_by_size([MergeFile("a", 1), MergeFile("a", 1)])
    with pytest.raises(ValueError, match="MergeFile objects"):
        split_merge_by_size(["a"])
    with pytest.raises(ValueError, match="size of file 'a'"):
        MergeFile("a", -1)


def test_max_jobs():
    files = [MergeFile(f"f{i}", 60) for i in range(4)]
    assert len(split_merge_by_size(files, max_merge_size=100, min_merge_size=0, max_jobs=4)) == 4
    with pytest.raises(ValueError, match="needs 4 jobs, more than the limit of 3"):
        split_merge_by_size(files, max_merge_size=100, min_merge_size=0, max_jobs=3)
