"""File-based and min-file-based splitting: properties and edge cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jim.split.files import FileSlice, split_files, split_files_min

SETTINGS = settings(max_examples=200, deadline=None)

names = st.integers(1, 300).map(lambda n: [f"/store/f{i:04d}.root" for i in range(n)])


def flatten(slices: list[FileSlice]) -> list[str]:
    return [f for s in slices for f in s.files]


@SETTINGS
@given(files=names, per_job=st.integers(1, 40), balanced=st.booleans())
def test_split_files_every_file_once_in_order_within_limit(files, per_job, balanced):
    slices = split_files(files, per_job, balanced=balanced)
    assert flatten(slices) == files
    assert len(slices) == -(-len(files) // per_job)
    assert all(1 <= s.count <= per_job for s in slices)
    if balanced:
        assert max(s.count for s in slices) - min(s.count for s in slices) <= 1
    else:
        assert all(s.count == per_job for s in slices[:-1])


@SETTINGS
@given(files=names, per_job=st.integers(1, 40), total=st.integers(1, 400))
def test_total_files_keeps_the_first_n(files, per_job, total):
    slices = split_files(files, per_job, total_files=total)
    assert flatten(slices) == files[:total]


@SETTINGS
@given(files=names, minimum=st.integers(1, 40))
def test_split_files_min_no_job_below_the_minimum(files, minimum):
    slices = split_files_min(files, minimum)
    assert flatten(slices) == files
    assert len(slices) == max(1, len(files) // minimum)
    sizes = [s.count for s in slices]
    assert max(sizes) - min(sizes) <= 1
    if len(files) >= minimum:
        assert all(minimum <= c <= 2 * minimum - 1 for c in sizes)
    else:
        assert sizes == [len(files)]


@pytest.mark.parametrize(
    "n, per_job, balanced, expected",
    [
        (3, 10, False, [3]),  # N < per_job
        (12, 4, False, [4, 4, 4]),  # exact division
        (13, 4, False, [4, 4, 4, 1]),  # N = k*E + 1
        (13, 4, True, [4, 3, 3, 3]),
        (1, 1, False, [1]),
    ],
)
def test_split_files_table(n, per_job, balanced, expected):
    files = [f"f{i}" for i in range(n)]
    assert [s.count for s in split_files(files, per_job, balanced=balanced)] == expected


@pytest.mark.parametrize(
    "n, minimum, expected",
    [
        (3, 10, [3]),  # fewer than the minimum: one job with everything (input is closed)
        (10, 10, [10]),
        (19, 10, [19]),  # remainder spread, never a job of 9
        (20, 10, [10, 10]),
        (21, 10, [11, 10]),  # N = k*E + 1
        (29, 4, [5, 4, 4, 4, 4, 4, 4]),
    ],
)
def test_split_files_min_table(n, minimum, expected):
    files = [f"f{i}" for i in range(n)]
    assert [s.count for s in split_files_min(files, minimum)] == expected


@pytest.mark.parametrize("per_job", [0, -1, 1.5, True, None])
def test_bad_files_per_job_rejected(per_job):
    with pytest.raises(ValueError, match="files per job must be a positive integer"):
        split_files(["a"], per_job)
    with pytest.raises(ValueError, match="minimum files per job must be a positive integer"):
        split_files_min(["a"], per_job)


def test_input_errors():
    for split in (split_files, split_files_min):
        with pytest.raises(ValueError, match="nothing to process"):
            split([], 3)
        with pytest.raises(ValueError, match="'a' is listed more than once"):
            split(["a", "b", "a"], 3)
        with pytest.raises(ValueError, match="not a single string"):
            split("abc", 3)
        with pytest.raises(ValueError, match="file name"):
            split(["a", ""], 3)
    with pytest.raises(ValueError, match="total_files"):
        split_files(["a"], 1, total_files=-1)
    assert split_files(["a", "b"], 1, total_files=0) == split_files(["a", "b"], 1)  # 0: all, as WMCore


def test_max_jobs():
    files = [f"f{i}" for i in range(10)]
    assert len(split_files(files, 1, max_jobs=10)) == 10
    with pytest.raises(ValueError, match="needs 10 jobs, more than the limit of 9"):
        split_files(files, 1, max_jobs=9)
    with pytest.raises(ValueError, match="needs 5 jobs, more than the limit of 4"):
        split_files_min(files, 2, max_jobs=4)


def test_order_is_the_callers_not_lfn_order():
    assert split_files(["z", "a", "m"], 2) == [FileSlice(("z", "a")), FileSlice(("m",))]
