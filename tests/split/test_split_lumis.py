"""Lumi-based splitting: properties and edge cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jim.split.lumis import LumiFile, LumiOptions, LumiSlice, compact_lumis, split_lumis

SETTINGS = settings(max_examples=200, deadline=None)

run_lumis = st.lists(st.tuples(st.integers(1, 3), st.integers(1, 12)), unique=True, max_size=14)
lumi_files = st.lists(st.tuples(run_lumis, st.integers(0, 500)), min_size=1, max_size=8).map(
    lambda specs: [LumiFile(f"f{i}", tuple(lumis), events) for i, (lumis, events) in enumerate(specs)]
)
masks = st.one_of(
    st.none(),
    st.dictionaries(
        st.integers(1, 3),
        st.lists(st.tuples(st.integers(1, 12), st.integers(0, 4)).map(lambda t: [t[0], t[0] + t[1]]), max_size=3),
        max_size=3,
    ),
)
whitelists = st.one_of(st.none(), st.sets(st.integers(1, 3)))


def selected(files, mask, whitelist):
    """The (file, run, lumi) units a mask and whitelist keep, in input order (reference model)."""
    out = []
    for f in files:
        for run, lumi in f.lumis:
            if whitelist is not None and run not in whitelist:
                continue
            if mask is not None and not any(a <= lumi <= b for a, b in mask.get(run, [])):
                continue
            out.append((f.name, run, lumi))
    return out


def breaks(a, b, split_on_run, halt):
    return (split_on_run and a[1] != b[1]) or (halt and a[0] != b[0])


@SETTINGS
@given(
    files=lumi_files,
    per_job=st.integers(1, 8),
    split_on_run=st.booleans(),
    halt=st.booleans(),
    mask=masks,
    whitelist=whitelists,
    total=st.one_of(st.none(), st.integers(1, 40)),
)
def test_every_selected_lumi_once_in_order_limits_hold(files, per_job, split_on_run, halt, mask, whitelist, total):
    expected = selected(files, mask, whitelist)
    if total is not None:
        expected = expected[:total]
    options = LumiOptions(
        split_on_run=split_on_run, halt_on_file_boundaries=halt, lumi_mask=mask, run_whitelist=whitelist
    )
    if not expected:
        with pytest.raises(ValueError, match="nothing to process"):
            split_lumis(files, per_job, options, total_lumis=total)
        return
    slices = split_lumis(files, per_job, options, total_lumis=total)
    assert [u for s in slices for u in s.lumis] == expected
    avg = {f.name: f.events_per_lumi for f in files}
    for s in slices:
        assert 1 <= s.count <= per_job
        assert s.failed_on_creation is None
        if split_on_run:
            assert len(s.runs) == 1
        if halt:
            assert len(s.files) == 1
        assert s.estimated_events == pytest.approx(float(sum(avg[f] for f, _, _ in s.lumis)))
    # a job is only closed when it is full or the next lumi crosses a boundary
    for a, b in zip(slices, slices[1:]):
        assert a.count == per_job or breaks(a.lumis[-1], b.lumis[0], split_on_run, halt)


def test_lumis_per_job_and_run_boundaries():
    files = [
        LumiFile("a", [(1, 1), (1, 2), (1, 3), (2, 1)], events=400),
        LumiFile("b", [(2, 2), (2, 3), (2, 4)], events=30),
    ]
    slices = split_lumis(files, 2)
    assert [s.lumis for s in slices] == [
        (("a", 1, 1), ("a", 1, 2)),
        (("a", 1, 3),),  # run changes: closed short
        (("a", 2, 1), ("b", 2, 2)),  # a job may span files by default
        (("b", 2, 3), ("b", 2, 4)),
    ]
    assert [s.estimated_events for s in slices] == [200, 100, 110, 20]
    assert slices[2].files == ("a", "b")
    assert slices[2].mask() == {2: [[1, 2]]}


def test_split_on_run_false_and_halt_on_file_boundaries():
    files = [LumiFile("a", [(1, 1), (2, 1)]), LumiFile("b", [(2, 2)])]
    assert [s.lumis for s in split_lumis(files, 5, LumiOptions(split_on_run=False))] == [
        (("a", 1, 1), ("a", 2, 1), ("b", 2, 2))
    ]
    assert [s.lumis for s in split_lumis(files, 5, LumiOptions(split_on_run=False, halt_on_file_boundaries=True))] == [
        (("a", 1, 1), ("a", 2, 1)),
        (("b", 2, 2),),
    ]


def test_lumi_mask_and_whitelist():
    f = LumiFile("a", [(1, lumi) for lumi in range(1, 11)] + [(2, 1), (3, 1)], events=120)
    slices = split_lumis([f], 100, LumiOptions(lumi_mask={"1": [[2, 3], [7, 8]], 2: [[1, 1]]}))
    assert [s.lumis for s in slices] == [
        (("a", 1, 2), ("a", 1, 3), ("a", 1, 7), ("a", 1, 8)),
        (("a", 2, 1),),  # run 3 is not in the mask at all
    ]
    # the average counts every lumi of the file, masked or not: 120 / 12
    assert slices[0].estimated_events == 40
    assert slices[0].mask() == {1: [[2, 3], [7, 8]]}
    assert [s.runs for s in split_lumis([f], 100, LumiOptions(run_whitelist={2, 3}))] == [(2,), (3,)]


def test_total_lumis_caps_the_task():
    f = LumiFile("a", [(1, lumi) for lumi in range(1, 11)])
    assert [s.count for s in split_lumis([f], 3, total_lumis=7)] == [3, 3, 1]
    assert [s.count for s in split_lumis([f], 3, total_lumis=0)] == [3, 3, 3, 1]  # 0: no limit, as WMCore
    with pytest.raises(ValueError, match="total_lumis must be a positive integer"):
        split_lumis([f], 3, total_lumis=-1)


def test_files_without_lumis_are_ignored_but_not_all_of_them():
    assert [s.lumis for s in split_lumis([LumiFile("a", []), LumiFile("b", [(1, 1)])], 1)] == [(("b", 1, 1),)]
    with pytest.raises(ValueError, match="nothing to process: no input file has any lumi"):
        split_lumis([LumiFile("a", [])], 1)
    with pytest.raises(ValueError, match="passes the lumi mask"):
        split_lumis([LumiFile("a", [(1, 1)])], 1, LumiOptions(lumi_mask={2: [[1, 5]]}))


def test_same_lumi_in_two_files_is_processed_in_each():
    files = [LumiFile("a", [(1, 1)]), LumiFile("b", [(1, 1)])]
    assert [s.lumis for s in split_lumis(files, 1)] == [(("a", 1, 1),), (("b", 1, 1),)]


@pytest.mark.parametrize("per_job", [0, -1, 1.5, True])
def test_bad_lumis_per_job_rejected(per_job):
    with pytest.raises(ValueError, match="lumis per job must be a positive integer"):
        split_lumis([LumiFile("a", [(1, 1)])], per_job)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: LumiFile("a", [(1, 1), (1, 1)]), "lists run 1 lumi 1 more than once"),
        (lambda: LumiFile("a", [(1,)]), "must be \\(run, lumi\\) pairs"),
        (lambda: LumiFile("a", [(1, -1)]), "non-negative integers"),
        (lambda: LumiFile("a", "1:1"), "not a single string"),
        (lambda: LumiFile("a", [(1, 1)], events=-3), "events of file 'a'"),
        (lambda: split_lumis([LumiFile("a", [(1, 1)]), LumiFile("a", [(1, 2)])], 1), "listed more than once"),
        (lambda: split_lumis([LumiFile("a", [(1, 1)])], 1, LumiOptions(lumi_mask={1: [[5, 2]]})), "bad range"),
        (lambda: split_lumis([LumiFile("a", [(1, 1)])], 1, LumiOptions(lumi_mask={"x": [[1, 2]]})), "lumi_mask run"),
        (lambda: split_lumis([LumiFile("a", [(1, 1)])], 1, LumiOptions(lumi_mask=[[1, 2]])), "lumi_mask must map"),
        (
            lambda: split_lumis([LumiFile("a", [(1, 1)])], 1, LumiOptions(split_on_run="no")),
            "split_on_run must be true",
        ),
        (
            lambda: split_lumis([LumiFile("a", [(1, i) for i in range(1, 6)])], 1, LumiOptions(max_jobs=4)),
            "needs 5 jobs",
        ),
    ],
)
def test_input_errors(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_compact_lumis():
    assert compact_lumis([(2, 5), (1, 3), (1, 1), (1, 2), (2, 7)]) == {1: [[1, 3]], 2: [[5, 5], [7, 7]]}
    assert LumiFile("a", [(1, 1), (1, 2), (1, 3)], 10).events_per_lumi == 3  # rounded as WMCore


def test_slice_is_a_plain_frozen_dataclass():
    s = LumiSlice((("a", 1, 1),), 3.0)
    with pytest.raises(AttributeError):
        s.estimated_events = 4.0


def test_options_are_checked_when_made_keywords_and_frozen():
    with pytest.raises(ValueError, match="split_on_run must be true or false"):
        LumiOptions(split_on_run=1)
    with pytest.raises(ValueError, match="halt_on_file_boundaries must be true or false"):
        LumiOptions(halt_on_file_boundaries=None)
    with pytest.raises(ValueError, match="max_jobs must be a positive integer"):
        LumiOptions(max_jobs=0)
    with pytest.raises(TypeError):
        LumiOptions(False)
    with pytest.raises(AttributeError):
        LumiOptions().max_jobs = 3
    assert LumiOptions() == LumiOptions(split_on_run=True, halt_on_file_boundaries=False)
