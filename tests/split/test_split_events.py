"""Event-based splitting: properties and the documented edge cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jim.split.events import (
    MAX_EVENT_NUMBER,
    EventFile,
    EventOptions,
    EventSlice,
    count_event_jobs,
    split_event_files,
    split_events,
)

SETTINGS = settings(max_examples=200, deadline=None)


# --- properties ---------------------------------------------------------------------------


@SETTINGS
@given(
    total=st.integers(1, 5000),
    per_job=st.integers(1, 700),
    first=st.integers(0, 10**6),
    balanced=st.booleans(),
)
def test_split_events_covers_every_event_once_within_limits(total, per_job, first, balanced):
    slices = split_events(total, per_job, first, balanced)
    assert len(slices) == count_event_jobs(total, per_job) == -(-total // per_job)
    # contiguous, ordered, exact cover of first .. first + total - 1
    assert slices[0].first == first
    assert slices[-1].last == first + total - 1
    for a, b in zip(slices, slices[1:]):
        assert b.first == a.last + 1
    assert sum(s.count for s in slices) == total
    assert all(1 <= s.count <= per_job for s in slices)
    assert all(s.file is None for s in slices)
    sizes = [s.count for s in slices]
    if balanced:
        assert max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True)
    else:
        assert all(c == per_job for c in sizes[:-1])


@SETTINGS
@given(
    last_offset=st.integers(-50, 50),
    total=st.integers(1, 100),
    per_job=st.integers(1, 30),
)
def test_split_events_never_passes_the_32_bit_limit(last_offset, total, per_job):
    first = MAX_EVENT_NUMBER + last_offset - total + 1
    if first < 0:
        return
    if last_offset > 0:
        with pytest.raises(ValueError, match="event number limit"):
            split_events(total, per_job, first)
    else:
        slices = split_events(total, per_job, first)
        assert max(s.last for s in slices) <= MAX_EVENT_NUMBER


event_files = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3)), min_size=1, max_size=12).map(
    lambda specs: [EventFile(f"f{i}", n, first) for i, (n, first) in enumerate(specs)]
)


@SETTINGS
@given(files=event_files, per_job=st.integers(1, 25), balanced=st.booleans())
def test_split_event_files_no_job_spans_files(files, per_job, balanced):
    slices = split_event_files(files, per_job, balanced=balanced)
    # order preserved: the file sequence of the slices is the input order
    by_file: dict[str, list[EventSlice]] = {}
    order: list[str] = []
    for s in slices:
        if s.file not in by_file:
            order.append(s.file)
        by_file.setdefault(s.file, []).append(s)
    assert order == [f.name for f in files]
    for f in files:
        mine = by_file[f.name]
        if f.events == 0:
            # the only empty slice: first event, no last event
            assert mine == [EventSlice(f.first_event, None, f.name)]
            assert mine[0].count == 0 and mine[0].is_open
            continue
        assert mine[0].first == f.first_event
        assert mine[-1].last == f.first_event + f.events - 1
        for a, b in zip(mine, mine[1:]):
            assert b.first == a.last + 1
        assert all(1 <= s.count <= per_job for s in mine)
        assert len(mine) == -(-f.events // per_job)
        if balanced:
            assert max(s.count for s in mine) - min(s.count for s in mine) <= 1


# --- edge cases (reference 4.13) ----------------------------------------------------------


@pytest.mark.parametrize(
    "total, per_job, balanced, expected",
    [
        (3, 10, False, [(1, 3)]),  # N < per_job: one short job
        (3, 10, True, [(1, 3)]),
        (12, 4, False, [(1, 4), (5, 8), (9, 12)]),  # exact division: no empty tail
        (12, 4, True, [(1, 4), (5, 8), (9, 12)]),
        (13, 4, False, [(1, 4), (5, 8), (9, 12), (13, 13)]),  # N = k*E + 1: tail of one
        (13, 4, True, [(1, 4), (5, 7), (8, 10), (11, 13)]),
        (10, 4, True, [(1, 4), (5, 7), (8, 10)]),  # balanced: same job count, sizes 4, 3, 3
        (1, 1, False, [(1, 1)]),
    ],
)
def test_split_events_table(total, per_job, balanced, expected):
    assert [(s.first, s.last) for s in split_events(total, per_job, balanced=balanced)] == expected


@pytest.mark.parametrize("total", [0, -1])
def test_zero_or_negative_events_rejected(total):
    with pytest.raises(ValueError, match="total events must be a positive integer"):
        split_events(total, 10)


@pytest.mark.parametrize("per_job", [0, -5, 2.5, True, "10", None])
def test_bad_events_per_job_rejected(per_job):
    with pytest.raises(ValueError, match="events per job must be a positive integer"):
        split_events(100, per_job)
    with pytest.raises(ValueError, match="events per job must be a positive integer"):
        split_event_files([EventFile("a", 10)], per_job)


@pytest.mark.parametrize("first", [-1, 1.0, "1"])
def test_bad_first_event_rejected(first):
    with pytest.raises(ValueError, match="first event"):
        split_events(10, 5, first)


def test_first_event_zero_allowed():
    assert split_events(3, 2, 0) == [EventSlice(0, 1), EventSlice(2, 2)]


def test_32_bit_wrap_is_refused_not_wrapped():
    top = MAX_EVENT_NUMBER
    assert split_events(10, 4, top - 9)[-1] == EventSlice(top - 1, top)
    with pytest.raises(ValueError, match="does not wrap"):
        split_events(11, 4, top - 9)
    with pytest.raises(ValueError, match="event number limit 4294967295"):
        split_events(2**32, 2**31)


def test_64_bit_generator_may_lift_the_limit():
    assert split_events(2, 1, MAX_EVENT_NUMBER, options=EventOptions(max_event=None)) == [
        EventSlice(MAX_EVENT_NUMBER, MAX_EVENT_NUMBER),
        EventSlice(MAX_EVENT_NUMBER + 1, MAX_EVENT_NUMBER + 1),
    ]


def test_more_jobs_than_the_cap_refused_before_building():
    assert len(split_events(100, 10, options=EventOptions(max_jobs=10))) == 10
    with pytest.raises(ValueError, match="needs 11 jobs, more than the limit of 10"):
        split_events(101, 10, options=EventOptions(max_jobs=10))
    # would be a billion slices: must fail fast, not allocate
    with pytest.raises(ValueError, match="more than the limit"):
        split_events(10**9, 1, options=EventOptions(max_jobs=1000))
    with pytest.raises(ValueError, match="more than the limit of 2"):
        split_event_files([EventFile("a", 0), EventFile("b", 0), EventFile("c", 0)], 5, max_jobs=2)


def test_positional_signature_kept_for_the_montecarlo_handler():
    assert split_events(10, 4, 1, True) == split_events(10, 4, first=1, balanced=True)
    lumis = EventOptions(events_per_lumi=3, first_lumi=5)
    assert split_events(10, 4, 1, True, lumis) == split_events(10, 4, first=1, balanced=True, options=lumis)
    assert EventSlice(5, 9).count == 5


def test_zero_event_file_gets_one_open_job():
    slices = split_event_files([EventFile("a.root", 5), EventFile("empty.root", 0, first_event=0)], 2)
    assert slices == [
        EventSlice(1, 2, "a.root"),
        EventSlice(3, 4, "a.root"),
        EventSlice(5, 5, "a.root"),
        EventSlice(0, None, "empty.root"),
    ]
    assert slices[-1].count == 0


def test_event_files_input_errors():
    with pytest.raises(ValueError, match="nothing to process"):
        split_event_files([], 10)
    with pytest.raises(ValueError, match="listed more than once"):
        split_event_files([EventFile("a", 1), EventFile("a", 2)], 10)
    with pytest.raises(ValueError, match="not a single string"):
        split_event_files("a.root", 10)
    with pytest.raises(ValueError, match="EventFile objects"):
        split_event_files([("a", 10)], 10)
    with pytest.raises(ValueError, match="events of file 'a'"):
        EventFile("a", -1)
    with pytest.raises(ValueError, match="file name"):
        EventFile("", 1)


def test_event_slice_validates_itself():
    with pytest.raises(ValueError, match="last event"):
        EventSlice(5, 4)
    with pytest.raises(ValueError, match="first event"):
        EventSlice(1.5, 4)


def test_balanced_must_be_a_bool():
    with pytest.raises(ValueError, match="balanced must be true or false"):
        split_events(10, 3, balanced="yes")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"events_per_lumi": 0}, "events_per_lumi must be a positive integer"),
        ({"first_lumi": 0}, "first lumi must be a positive integer"),
        ({"max_event": 0}, "max_event must be a positive integer"),
        ({"max_event": True}, "max_event must be a positive integer"),
        ({"max_jobs": -1}, "max_jobs must be a positive integer"),
    ],
)
def test_options_are_checked_when_made(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EventOptions(**kwargs)


def test_options_are_keywords_and_frozen():
    with pytest.raises(TypeError):
        EventOptions(10)
    with pytest.raises(AttributeError):
        EventOptions().max_jobs = 3
