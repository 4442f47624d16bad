"""Location-aware splitting (WMCore's job groups): no job mixes input files of different locations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jim.split.eventaware import split_event_aware
from jim.split.files import split_files, split_files_min
from jim.split.lumis import LumiFile, LumiOptions, split_lumis

SETTINGS = settings(max_examples=200, deadline=None)
PLACES = ["blenheim", "malpaquet", "T2_XX_SiteA"]

place_sets = st.lists(st.sampled_from(PLACES), max_size=2).map(frozenset)
lumi_files = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(1, 3), st.integers(1, 6)), unique=True, min_size=1, max_size=6),
        st.integers(0, 600),
        place_sets,
    ),
    min_size=1,
    max_size=8,
).map(lambda specs: [LumiFile(f"f{i}", tuple(lu), ev, loc) for i, (lu, ev, loc) in enumerate(specs)])


def wmcore_subscription(n_files: int, lumis_per_file: int, events: int) -> list[LumiFile]:
    """WMCore's createSubscription(twoSites=True): each file at blenheim, then its twin at malpaquet."""
    made = []
    for site, suffix in (("blenheim", ""), ("malpaquet", "_2")):
        for i in range(n_files):
            lumis = tuple((i, i * lumis_per_file + k) for k in range(lumis_per_file))
            made.append(LumiFile(f"file_{i}{suffix}", lumis, events, site))
    return made


def test_wmcore_two_sites_event_aware_gives_ten_jobs_per_site():
    # EventAwareLumiBased_t.testA_FileSplitting, two sites: two job groups of 10 jobs, one file each.
    made = wmcore_subscription(5, 2, 100)
    interleaved = [f for pair in zip(made[:5], made[5:], strict=True) for f in pair]  # sites alternate
    slices = split_event_aware(interleaved, 50, LumiOptions(halt_on_file_boundaries=True))
    assert [sorted(s.location) for s in slices] == [["blenheim"]] * 10 + [["malpaquet"]] * 10
    assert all(len(s.files) == 1 for s in slices)


def test_lumis_of_two_sites_never_share_a_job():
    a = LumiFile("a", ((1, 1), (1, 2)), 20, "blenheim")
    b = LumiFile("b", ((1, 3), (1, 4)), 20, "malpaquet")
    c = LumiFile("c", ((1, 5),), 10, "blenheim")
    slices = split_lumis([a, b, c], 10)
    assert [(s.files, s.location) for s in slices] == [
        (("a", "c"), frozenset({"blenheim"})),
        (("b",), frozenset({"malpaquet"})),
    ]
    # a location *set* is the unit: a file at both sites is a group of its own
    both = LumiFile("d", ((1, 6),), 10, {"blenheim", "malpaquet"})
    assert [s.files for s in split_lumis([a, both, c], 10)] == [("a", "c"), ("d",)]


def test_event_aware_carry_over_stops_at_a_location_change():
    a = LumiFile("a", ((1, 1),), 10, "x")
    b = LumiFile("b", ((1, 2),), 10, "y")
    assert [s.files for s in split_event_aware([a, b], 1000)] == [("a",), ("b",)]
    assert [s.files for s in split_event_aware([a, LumiFile("b", ((1, 2),), 10, "x")], 1000)] == [("a", "b")]


def test_file_based_groups_by_location():
    names = ["a1", "b1", "a2", "b2", "a3", "n1"]
    where = {"a1": "A", "a2": "A", "a3": "A", "b1": "B", "b2": "B"}
    slices = split_files(names, 2, locations=where)
    assert [(s.files, sorted(s.location)) for s in slices] == [
        (("a1", "a2"), ["A"]),
        (("a3",), ["A"]),
        (("b1", "b2"), ["B"]),
        (("n1",), []),
    ]
    assert [s.files for s in split_files(names, 2, locations=where, total_files=4)] == [("a1", "a2"), ("a3",), ("b1",)]
    assert [s.files for s in split_files_min(names, 2, locations=where)] == [("a1", "a2", "a3"), ("b1", "b2"), ("n1",)]
    with pytest.raises(ValueError, match="needs 4 jobs, more than the limit of 3"):
        split_files(names, 2, locations=where, max_jobs=3)


@SETTINGS
@given(files=lumi_files, per_job=st.integers(1, 4), target=st.integers(1, 400), split_on_run=st.booleans())
def test_no_slice_mixes_locations_and_each_location_is_one_run_of_slices(files, per_job, target, split_on_run):
    where = {f.name: f.location for f in files}
    for slices in (
        split_lumis(files, per_job, LumiOptions(split_on_run=split_on_run)),
        split_event_aware(files, target, LumiOptions(split_on_run=split_on_run)),
    ):
        seen: list[frozenset[str]] = []
        for s in slices:
            assert {where[f] for f in s.files} == {s.location}
            if not seen or seen[-1] != s.location:
                assert s.location not in seen  # a location's jobs come together, as WMCore's job group
                seen.append(s.location)
        units = sorted(u for s in slices for u in s.lumis)
        assert units == sorted((f.name, r, lu) for f in files for r, lu in f.lumis)


@pytest.mark.parametrize(
    "location, message",
    [
        (7, "must be a name or a set of names"),
        (["ok", ""], "printable names"),
        ("a\nb", "printable names"),
        ("x" * 256, "printable names"),
        ([f"s{i}" for i in range(65)], "more than 64 places"),
    ],
)
def test_bad_locations_rejected(location, message):
    with pytest.raises(ValueError, match=message):
        LumiFile("a", ((1, 1),), 1, location)
    with pytest.raises(ValueError, match=message):
        split_files(["a"], 1, locations={"a": location})
