"""WMCore's own splitter cases (EventAwareLumiBased_t, LumiBased_t), with WMCore's expected results."""

from __future__ import annotations

from jim.split.eventaware import LumiFile, split_event_aware
from jim.split.lumis import LumiOptions, split_lumis


def wmcore_file(name: str, events: int, run: int, lumis: int) -> LumiFile:
    """A file as WMCore's tests build it: run ``run``, lumis ``run * lumis`` .. ``run * lumis + lumis - 1``."""
    return LumiFile(name, tuple((run, run * lumis + k) for k in range(lumis)), events)


SEVEN_FILES = [
    wmcore_file("/this/is/file1", 250, 0, 5),
    wmcore_file("/this/is/file2", 600, 1, 1),
    wmcore_file("/this/is/file3", 1200, 2, 2),
    wmcore_file("/this/is/file4", 100, 3, 1),
    wmcore_file("/this/is/file5", 30, 4, 1),
    wmcore_file("/this/is/file6", 10, 5, 1),
    wmcore_file("/this/is/file7", 151, 6, 3),
]
#: WMCore's splitOnRun = False.
ACROSS_RUNS = LumiOptions(split_on_run=False)


def test_event_aware_seven_files_gives_wmcore_seven_jobs():
    # EventAwareLumiBased_t.testD_NoFileSplitNoHardLimit: 151 events in 3 lumis count 50 per lumi
    # (int(round(151 / 3))), so the last file's 3 lumis fit one 150-event job.
    slices = split_event_aware(SEVEN_FILES, 150, LumiOptions(split_on_run=False, halt_on_file_boundaries=False))
    assert [s.mask() for s in slices] == [
        {0: [[0, 2]]},
        {0: [[3, 4]]},
        {1: [[1, 1]]},
        {2: [[4, 4]]},
        {2: [[5, 5]]},
        {3: [[3, 3]], 4: [[4, 4]], 5: [[5, 5]]},
        {6: [[18, 20]]},
    ]
    assert slices[-1].estimated_events == 150


def test_event_aware_total_events_wmcore_cases():
    # testB_NoRunNoFileSplitting: 5 files of 5 lumis and 100 events (20 per lumi), 60 events per job.
    files = [wmcore_file(f"f{i}", 100, i, 5) for i in range(5)]

    def masks(total: int) -> list[dict[int, list[list[int]]]]:
        return [s.mask() for s in split_event_aware(files, 60, ACROSS_RUNS, total_events=total)]

    assert masks(10) == [{0: [[0, 0]]}]
    first3 = [{0: [[0, 2]]}, {0: [[3, 4]], 1: [[5, 5]]}, {1: [[6, 8]]}]
    assert masks(179) == first3
    assert masks(180) == first3
    assert masks(181) == [*first3, {1: [[9, 9]]}]


def test_total_events_zero_is_no_limit_as_in_wmcore():
    files = [wmcore_file(f"f{i}", 100, i, 5) for i in range(5)]
    unlimited = split_event_aware(files, 60, ACROSS_RUNS)
    assert split_event_aware(files, 60, ACROSS_RUNS, total_events=0) == unlimited
    assert sum(s.count for s in unlimited) == 25
    assert sum(s.count for s in split_lumis(files, 2, total_lumis=0)) == 25


def test_lumi_estimates_use_wmcore_rounding():
    # 200 events in 3 lumis: WMCore counts int(round(66.67)) = 67 per lumi; halves round to even.
    f = LumiFile("a", ((1, 1), (1, 2), (1, 3)), 200)
    assert f.events_per_lumi == 67
    assert [s.estimated_events for s in split_lumis([f], 2)] == [134, 67]
    assert LumiFile("b", ((1, 1), (1, 2)), 5).events_per_lumi == 2  # round(2.5) == 2
    assert LumiFile("c", ((1, 1), (1, 2)), 7).events_per_lumi == 4  # round(3.5) == 4
