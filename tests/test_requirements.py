"""Tests for jim.requirements: resource tree, matching, ClassAd expressions, selection, cache."""

from __future__ import annotations

import datetime
import inspect
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jim.errors import ConfigError, GramError, InvalidAttribute, PlanError
from jim.requirements import (
    InvalidRequirement,
    NoEligibleQueue,
    QueueCache,
    ResourceConfigError,
    choose_queue,
    parse_resources,
    requirements_of_description,
)
from jim.requirements.choice import QueueChoice, StatedRequirements
from jim.requirements.matching import JobRequirements, matching_queues, preferred
from jim.requirements.resources import Queue, ResourceTree, digest

DATA = Path(__file__).parent / "data" / "requirements"


def load_site() -> dict:
    with open(DATA / "site.toml", "rb") as fh:
        return tomllib.load(fh)


SITE = load_site()["resources"]


def resources(text: str) -> ResourceTree:
    return parse_resources(tomllib.loads(text).get("resources"))


@pytest.fixture(scope="module")
def tree() -> ResourceTree:
    return parse_resources(load_site()["resources"])


def names(queues) -> list[str]:
    return [q.name for q in queues]


def eligible(reqs, tree: ResourceTree) -> tuple[Queue, ...]:
    """The queues of ``tree`` that satisfy ``reqs`` (any form JobRequirements.of takes), () if none does."""
    normal = JobRequirements.of(reqs)
    try:
        return matching_queues(normal, tree)
    except NoEligibleQueue:
        return ()


def select(reqs, tree: ResourceTree, **prefer) -> Queue:
    """The queue a job with ``reqs`` goes to, as choose_queue selects it (typed values allowed)."""
    return preferred(matching_queues(JobRequirements.of(reqs), tree), **prefer)


def choose(table, *values, cache: QueueCache | None = None) -> QueueChoice:
    """choose_queue for the description values ``values`` (as RSL gives them)."""
    return choose_queue(table, requirements_of_description(list(values)), cache=cache)


def key(reqs) -> str:
    """The process-stable hash of the normal form of ``reqs``."""
    return digest(JobRequirements.of(reqs).canonical())


def as_description(reqs) -> list:
    """A mapping or an expression as description values (strings, as RSL gives them)."""
    if isinstance(reqs, str):
        return [reqs]
    return [[k, *v] if isinstance(v, list) else f"{k}={v}" for k, v in reqs.items()]


# ---------------------------------------------------------------- the tree


class TestInheritance:
    def test_queues_in_config_order(self, tree):
        assert [q.qualified_name for q in tree] == ["localhost/short", "localhost/long", "gpuce/gpu"]

    def test_site_values_reach_every_queue(self, tree):
        assert {q.get("Site") for q in tree} == {"JIM.TEST.site"}

    def test_ce_overrides_site(self, tree):
        assert tree.find("short").get("MaxCPUTime") == 86400
        assert tree.find("gpu").get("Platform") == ("x86_64-el8", "x86_64-el9")
        assert tree.find("long").get("Platform") == ("x86_64-el9",)

    def test_queue_overrides_ce(self, tree):
        assert tree.find("long").get("MaxCPUTime") == 604800
        assert tree.find("gpu").get("WholeNode") is True
        assert tree.find("short").get("WholeNode") is False

    def test_site_value_kept_when_ce_does_not_override(self, tree):
        assert tree.find("gpu").get("MaxCPUTime") == 3600

    def test_ce_parameter_inherited_by_its_queues_only(self, tree):
        assert tree.find("gpu").get("NumberOfProcessors") == 8
        assert "NumberOfProcessors" not in tree.find("short")

    def test_tags_are_unioned_down_the_tree(self, tree):
        assert tree.find("short").get("Tag") == ("cvmfs",)
        assert tree.find("long").get("Tag") == ("cvmfs", "bigmem")
        assert tree.find("gpu").get("Tag") == ("cvmfs", "gpu")

    def test_union_does_not_duplicate(self):
        t = resources("""
            [resources]
            Tag = ["a", "b"]
            RequiredTag = "x"
            [resources.ce.c]
            Tag = ["b", "c", "c"]
            [resources.ce.c.queue.q]
            Tag = ["a", "d"]
            RequiredTag = ["y", "x"]
        """)
        q = t.find("q")
        assert q.get("Tag") == ("a", "b", "c", "d")
        assert q.get("RequiredTag") == ("x", "y")

    def test_ce_and_queue_names_are_parameters(self, tree):
        q = tree.find("long")
        assert (q.get("CE"), q.get("Queue")) == ("localhost", "long")

    def test_override_ignores_name_case_and_keeps_lower_level_spelling(self):
        t = resources("""
            [resources]
            maxram = 1000
            [resources.ce.c]
            [resources.ce.c.queue.q]
            MAXRAM = 2000
        """)
        q = t.find("q")
        assert q.get("MaxRAM") == 2000
        assert dict(q.params) == {"CE": "c", "Queue": "q", "MAXRAM": 2000}

    def test_params_are_read_only(self, tree):
        with pytest.raises(TypeError):
            tree.find("short").params["MaxRAM"] = 1  # type: ignore[index]

    def test_same_queue_name_on_two_ces(self):
        t = resources("""
            [resources.ce.a.queue.batch]
            WallTimeLimit = 10
            [resources.ce.b.queue.batch]
            WallTimeLimit = 20
            [resources.ce.b.queue.other]
        """)
        assert [t.label(q) for q in t] == ["a/batch", "b/batch", "other"]
        assert t.find("b/batch").get("WallTimeLimit") == 20
        with pytest.raises(KeyError):
            t.find("batch")

    def test_quoted_ce_name(self):
        t = resources("""
            [resources.ce."ce01.example.org".queue."all.q"]
        """)
        assert t.find("ce01.example.org/all.q").ce == "ce01.example.org"

    def test_fingerprint_is_stable_and_sensitive(self):
        a, b = parse_resources(load_site()["resources"]), parse_resources(load_site()["resources"])
        assert a.fingerprint == b.fingerprint and len(a.fingerprint) == 64
        changed = load_site()
        changed["resources"]["ce"]["localhost"]["queue"]["short"]["WallTimeLimit"] = 3601
        assert parse_resources(changed["resources"]).fingerprint != a.fingerprint


class TestDefaultTree:
    @pytest.mark.parametrize("config", [{}, {"resources": {}}, {"batch": {"adapter": "fork"}}])
    def test_no_resources_gives_one_default_queue(self, config):
        t = parse_resources(config.get("resources"))
        assert t == parse_resources(None)
        assert [(q.ce, q.name) for q in t] == [("default", "default")]

    def test_parse_none(self):
        assert parse_resources(None) is parse_resources({})  # one default tree

    @pytest.mark.parametrize("reqs", [None, {}, "", "   "])
    def test_no_requirements_always_match(self, reqs):
        assert select(reqs, parse_resources(None)).name == "default"
        assert select(reqs, parse_resources(None), prefer=()).name == "default"

    def test_the_default_queue_has_no_limits(self):
        with pytest.raises(NoEligibleQueue, match="^no queue has parameter WallTimeLimit$"):
            select({"WallTimeLimit": 60}, parse_resources(None))
        # without [resources], choose_queue matches such a job against the default tree
        with pytest.raises(NoEligibleQueue, match="^no queue has parameter WallTimeLimit$"):
            choose(None, "WallTimeLimit=60")


class TestValidation:
    @pytest.mark.parametrize(
        "text, message",
        [
            ("resources = 3", "resources: expected a table, got an integer"),
            ("[resources]\nSite = 'x'", "resources: no computing element; add [resources.ce.<name>.queue.<queue>]"),
            ("[resources]\nce = 'x'", "resources.ce: expected a table of tables ([resources.ce.<name>]), got a string"),
            ("[resources.ce]", "resources.ce: no computing element; add [resources.ce.<name>]"),
            ("[resources.ce.c]\nA = 1", "resources.ce.c: no queue; add [resources.ce.c.queue.<name>]"),
            ("[resources.ce]\nc = 1", "resources.ce.c: expected a table, got an integer"),
            ("[resources.ce.c.queue]", "resources.ce.c.queue: no queue; add [resources.ce.c.queue.<name>]"),
            (
                "[resources.ce.c.queue.q.Limits]\nA = 1",
                "resources.ce.c.queue.q.Limits: expected a string, number, boolean or list of strings, got a table",
            ),
            (
                "[resources.ce.c.queue.q]\nWhen = 1979-05-27",
                "resources.ce.c.queue.q.When: expected a string, number, boolean or list of strings, got a date/time",
            ),
            ("[resources.ce.c.queue.q]\nL = [1, 2]", "resources.ce.c.queue.q.L: a list value must hold only strings"),
            (
                "[resources.ce.c.queue.q]\nTag = [1]",
                "resources.ce.c.queue.q.Tag: expected a string or a list of strings, got a list",
            ),
            ("[resources.ce.c.queue.q]\nX = nan", "resources.ce.c.queue.q.X: nan is not a usable value"),
            ("[resources.ce.c.queue.q]\nX = 9223372036854775807\nY = 0", None),
            (
                "[resources.ce.c.queue.q]\nMax-RAM = 1",
                "resources.ce.c.queue.q.Max-RAM: invalid parameter name "
                "(letters, digits and '_', not starting with a digit)",
            ),
            (
                "[resources.ce.c.queue.q]\nmaxram = 1\nMaxRAM = 2",
                "resources.ce.c.queue.q: parameters 'maxram' and 'MaxRAM' differ only in case",
            ),
            (
                "[resources]\nQueue = 'x'\n[resources.ce.c.queue.q]",
                "resources.Queue: 'Queue' is reserved (jim sets Queue to the queue's name)",
            ),
            (
                "[resources.ce.c]\nCE = 'x'\n[resources.ce.c.queue.q]",
                "resources.ce.c.CE: 'CE' is reserved (jim sets CE to the computing element's name)",
            ),
            (
                "[resources.queue.q]\n[resources.ce.c.queue.q]",
                "resources.queue: queues belong under [resources.ce.<ce>.queue.<name>]",
            ),
            (
                "[resources.ce.c.queue.q.queue.x]",
                "resources.ce.c.queue.q.queue: queues belong under [resources.ce.<ce>.queue.<name>]",
            ),
            (
                "[resources.ce.c.ce.d]\n[resources.ce.c.queue.q]",
                "resources.ce.c.ce: computing elements belong under [resources.ce.<name>]",
            ),
            (
                '[resources.ce."a b".queue.q]',
                "resources.ce: invalid computing element name 'a b' (no white space, no '/')",
            ),
            ('[resources.ce.c.queue."x/y"]', "resources.ce.c.queue: invalid queue name 'x/y' (no white space, no '/')"),
        ],
    )
    def test_bad_shapes(self, text, message):
        if message is None:
            resources(text)  # accepted
            return
        with pytest.raises(ResourceConfigError) as info:
            resources(text)
        assert str(info.value) == message
        assert "\n" not in str(info.value)

    def test_integer_out_of_range(self):
        with pytest.raises(ValueError, match="does not fit in 64 bits"):
            parse_resources({"ce": {"c": {"queue": {"q": {"X": 2**63}}}}})

    def test_errors_are_value_errors_and_config_errors(self):
        with pytest.raises(ValueError) as info:
            parse_resources({"ce": {}})
        assert isinstance(info.value, ConfigError)
        assert info.value.gram_error == GramError.GATEKEEPER_MISCONFIGURED

    def test_non_string_value_in_python_dict(self):
        with pytest.raises(ResourceConfigError, match="got a date/time"):
            parse_resources({"X": datetime.date(2020, 1, 1), "ce": {"c": {"queue": {"q": {}}}}})


# ---------------------------------------------------------------- matching


class TestMatching:
    def test_missing_parameter_never_matches(self, tree):
        assert names(eligible({"GPU": 1}, tree)) == ["gpu"]
        assert eligible({"NoSuchThing": "x"}, tree) == ()

    @pytest.mark.parametrize(
        "reqs, expected",
        [
            ({"Queue": ["long", "gpu"]}, ["long", "gpu"]),  # any of, against a scalar value
            ({"Platform": ["x86_64-el8", "x86_64-el9"]}, ["short", "long", "gpu"]),  # any of, against list values
            ({"Platform": ["x86_64-el8"]}, ["gpu"]),
            ({"GPU": [1, 2]}, ["gpu"]),  # numbers in a list compare equal
            ({"GPU": [1, 3]}, []),
            ({"GPU": ["2"]}, ["gpu"]),  # numeric string vs number: equality in a list
        ],
    )
    def test_lists_mean_any_of(self, tree, reqs, expected):
        assert names(eligible(reqs, tree)) == expected

    @pytest.mark.parametrize(
        "reqs, expected",
        [
            ({"WallTimeLimit": 3600}, ["short", "long", "gpu"]),  # equal is enough
            ({"WallTimeLimit": 3601}, ["long", "gpu"]),
            ({"WallTimeLimit": 86400.0}, ["long", "gpu"]),
            ({"WallTimeLimit": 86400.5}, ["long"]),
            ({"WallTimeLimit": 172801}, []),
            ({"MaxRAM": 8000, "WallTimeLimit": 100000}, ["long"]),
            ({"MaxRAM": "8000"}, ["long", "gpu"]),  # RSL strings are capacities too
            ({"MaxRAM": " 8e3 "}, ["long", "gpu"]),
            ({"MaxRAM": "lots"}, []),
            ({"GPU": 0}, ["gpu"]),
        ],
    )
    def test_numbers_mean_capacity(self, tree, reqs, expected):
        assert names(eligible(reqs, tree)) == expected

    @pytest.mark.parametrize(
        "reqs, expected",
        [
            ({"Site": "JIM.TEST.site"}, ["short", "long", "gpu"]),
            ({"Site": "jim.test.site"}, []),  # values are case-sensitive
            ({"Tag": "bigmem"}, ["long"]),  # contained in the queue's list
            ({"Tag": "BIGMEM"}, []),
            ({"Queue": "short"}, ["short"]),
            ({"CE": "gpuce"}, ["gpu"]),
            ({"WholeNode": True}, ["gpu"]),
            ({"WholeNode": False}, ["short", "long"]),
            ({"WholeNode": "TRUE"}, ["gpu"]),  # RSL string vs boolean
            ({"WholeNode": "yes"}, []),
            ({"WholeNode": 1}, []),  # a number is not a boolean
            ({"Site": 1}, []),
        ],
    )
    def test_strings_and_booleans(self, tree, reqs, expected):
        assert names(eligible(reqs, tree)) == expected

    @pytest.mark.parametrize(
        "reqs",
        [
            {"walltimelimit": 7200, "TAG": "cvmfs"},
            {"WALLTIMELIMIT": 7200, "tag": ["cvmfs"]},
            {"WallTimeLimit": 7200, "Tag": "cvmfs"},
        ],
    )
    def test_names_are_case_insensitive(self, tree, reqs):
        assert names(eligible(reqs, tree)) == ["long", "gpu"]

    def test_all_requirements_must_hold(self, tree):
        assert names(eligible({"Tag": "gpu", "WallTimeLimit": 100000}, tree)) == []
        assert names(eligible({"Tag": "gpu", "WallTimeLimit": 80000}, tree)) == ["gpu"]

    def test_one_queue_matches(self, tree):
        assert eligible({"Tag": "gpu"}, ResourceTree((tree.find("gpu"),)))
        assert not eligible({"Tag": "gpu"}, ResourceTree((tree.find("short"),)))

    @pytest.mark.parametrize(
        "reqs, message",
        [
            ({"Max-RAM": 1}, "invalid requirement name 'Max-RAM'"),
            ({"Tag": "a", "tag": "b"}, "requirements 'Tag' and 'tag' differ only in case"),
            ({"Tag": []}, "requirement Tag: an empty list can never be satisfied"),
            ({"Tag": [True]}, "requirement Tag: list elements must be strings or numbers"),
            ({"X": {"a": 1}}, "requirement X: expected a string, number, boolean or list, got a table"),
            ({"X": float("nan")}, "requirement X: nan is not a usable value"),
            ({"X": None}, "requirement X: expected"),
            (42, "requirements must be a mapping or a ClassAd expression, got an integer"),
        ],
    )
    def test_bad_requirements(self, tree, reqs, message):
        with pytest.raises(InvalidRequirement) as info:
            eligible(reqs, tree)
        assert str(info.value).startswith(message)
        assert isinstance(info.value, ValueError) and isinstance(info.value, InvalidAttribute)


class TestClassAd:
    @pytest.mark.parametrize(
        "expr, expected",
        [
            ('WallTimeLimit >= 7200 && member("cvmfs", Tag)', ["long", "gpu"]),
            ("TARGET.WallTimeLimit >= 7200", ["long", "gpu"]),  # HTCondor's TARGET scope
            ("MY.MaxRAM > 10000", ["long", "gpu"]),
            ('member("gpu", Tag) || Queue == "short"', ["short", "gpu"]),
            ("walltimelimit < 10000", ["short"]),  # ClassAd names ignore case
            ('Site == "jim.test.site"', ["short", "long", "gpu"]),  # ClassAd == ignores string case
            ('Site =?= "jim.test.site"', []),  # =?= does not
            ("WholeNode", ["gpu"]),
            ("GPU >= 1", ["gpu"]),
            ("WallTimeLimit >= 1000000", []),
        ],
    )
    def test_expressions(self, tree, expr, expected):
        assert names(eligible(expr, tree)) == expected

    @pytest.mark.parametrize(
        "expr",
        [
            "NoSuchParam > 0",  # undefined
            "GPU",  # 2 on gpu: a number, not true
            "1",
            '"yes"',
            "undefined",
            "error",
            "WallTimeLimit / 0 > 1",  # error
        ],
    )
    def test_only_exactly_true_matches(self, tree, expr):
        assert eligible(expr, tree) == ()

    @pytest.mark.parametrize("expr", ["WallTimeLimit >= ", "a &&& b", "(", '"unterminated', "x y"])
    def test_parse_errors(self, tree, expr):
        with pytest.raises(InvalidRequirement, match="^requirement expression does not parse: "):
            eligible(expr, tree)
        with pytest.raises(ValueError, match="^requirement expression does not parse: "):
            JobRequirements.of(expr)
        with pytest.raises(InvalidRequirement, match="^requirement expression does not parse: "):
            choose(SITE, expr)

    def test_record_is_read_as_a_mapping(self, tree):
        record = '[ Tag = {"bigmem", "gpu"}; MaxRAM = 8000; Site = "JIM.TEST.site"; N = 2 * 3 ]'
        normal = JobRequirements.of(record)
        assert normal == JobRequirements.of({"Tag": ["gpu", "bigmem"], "MaxRAM": 8000, "Site": "JIM.TEST.site", "N": 6})
        assert names(eligible(dict(Tag=["bigmem", "cvmfs"], MaxRAM=8000), tree)) == ["long"]

    def test_record_with_undefined_value(self):
        with pytest.raises(InvalidRequirement, match="requirement X: value does not evaluate"):
            JobRequirements.of("[ X = undefined ]")

    def test_mapping_and_expression_together(self, tree):
        reqs = JobRequirements.combine({"Tag": "cvmfs"}, "MaxRAM < 20000", None, {"tag": "cvmfs"})
        assert reqs == JobRequirements(JobRequirements.of({"Tag": "cvmfs"}).params, "MaxRAM < 20000")
        assert names(eligible(reqs, tree)) == ["short", "long"]
        both = JobRequirements.combine(reqs, "WallTimeLimit > 3600", {"WallTimeLimit": 1})
        assert both.expression == "(MaxRAM < 20000) && (WallTimeLimit > 3600)"
        assert names(eligible(both, tree)) == ["long"]
        with pytest.raises(InvalidRequirement, match="^requirement tag is given twice with different values$"):
            JobRequirements.combine({"Tag": "a"}, {"tag": "b"})

    @given(st.integers(min_value=0, max_value=300000))
    @settings(max_examples=60, deadline=None)
    def test_expression_agrees_with_mapping(self, limit):
        t = parse_resources(load_site()["resources"])
        assert eligible(f"WallTimeLimit >= {limit}", t) == eligible({"WallTimeLimit": limit}, t)


# ---------------------------------------------------------------- tags (DIRAC's Tag and RequiredTag)

#: Three queues: one with tags a and b, one with a, b and c, one that takes only jobs asking for "mp".
TAGGED = """
    [resources]
    Tag = "a"
    [resources.ce.ce1.queue.ab]
    WallTimeLimit = 100
    Tag = "b"
    [resources.ce.ce1.queue.abc]
    WallTimeLimit = 200
    Tag = ["b", "c"]
    [resources.ce.mpce]
    RequiredTag = "mp"
    [resources.ce.mpce.queue.mp]
    WallTimeLimit = 50
    Tag = ["b", "mp"]
"""


@pytest.fixture(scope="module")
def tagged() -> ResourceTree:
    return resources(TAGGED)


class TestTags:
    """A job's tags must all be among a queue's ``Tag``; a queue's ``RequiredTag`` must all be among the job's."""

    @pytest.mark.parametrize(
        "reqs, expected",
        [
            ({"Tag": ["a", "b"]}, ["ab", "abc"]),
            ({"Tag": ["a", "c"]}, ["abc"]),  # "ab" has a, not c: no match
            ({"Tag": ["a", "b", "c"]}, ["abc"]),
            ({"Tag": ["c", "d"]}, []),
            ({"Tag": "c"}, ["abc"]),
            ({"Tag": ["c"]}, ["abc"]),
            ({"Tag": ["b", "a", "a"]}, ["ab", "abc"]),
            ('[ Tag = {"a", "c"} ]', ["abc"]),  # DIRAC's record: the same rule
            ({"Tag": ["a", "mp"]}, ["mp"]),  # inherits a from the site; asks for mp: taken by mp only
        ],
    )
    def test_every_tag_the_job_asks_for_must_be_offered(self, tagged, reqs, expected):
        assert names(eligible(reqs, tagged)) == expected

    def test_description_pairs_ask_for_all_tags(self, tagged):
        table = tomllib.loads(TAGGED)["resources"]
        assert choose(table, "Tag=a,c").name == "abc"
        assert choose(table, ["Tag", "c", "a"]).name == "abc"
        assert choose(table, "Tag=a,b").name == "ab"  # both ab and abc: the smaller WallTimeLimit
        assert choose(table, "Tag=a,b").eligible == 2
        assert choose(table, "Tag=c,a").described == "Tag all of [c, a]"
        with pytest.raises(NoEligibleQueue):
            choose(table, "Tag=a,d")

    def test_a_queue_with_a_required_tag_refuses_a_job_without_it(self, tagged):
        # mp has the smallest WallTimeLimit and every tag these jobs ask for, but requires "mp"
        assert select({}, tagged).name == "ab"
        assert select({"Tag": "b"}, tagged).name == "ab"
        assert names(eligible({"Tag": ["a", "b"]}, tagged)) == ["ab", "abc"]
        assert names(eligible({"WallTimeLimit": 50}, tagged)) == ["ab", "abc"]
        assert select({"Tag": ["mp", "b"]}, tagged).name == "mp"

    def test_a_tag_in_an_expression_is_not_asked_for(self, tagged):
        # a ClassAd expression tests the queue's Tag but names no tag of the job's: RequiredTag refuses it
        assert names(eligible('member("mp", Tag)', tagged)) == []

    def test_required_tags_are_unioned_down_the_tree(self):
        t = resources("""
            [resources]
            RequiredTag = "x"
            Tag = ["x", "y"]
            [resources.ce.c.queue.q]
            RequiredTag = "y"
        """)
        assert names(eligible({"Tag": "x"}, t)) == []
        assert names(eligible({"Tag": "y"}, t)) == []
        assert names(eligible({"Tag": ["x", "y"]}, t)) == ["q"]

    def test_no_queue_left_by_required_tags_is_the_clear_error(self):
        t = resources("""
            [resources.ce.c.queue.mp]
            RequiredTag = "mp"
            Tag = ["mp", "gpu"]
            [resources.ce.c.queue.gpu]
            RequiredTag = ["gpu", "nvidia"]
            Tag = ["gpu", "nvidia"]
        """)
        table = {"ce": {"c": {"queue": {"mp": {"RequiredTag": "mp", "Tag": ["mp", "gpu"]}}}}}
        for reqs, asked in (({}, "without tags"), ({"Tag": "gpu"}, 'with Tag ["gpu"]')):
            with pytest.raises(NoEligibleQueue) as info:
                select(reqs, t)
            assert str(info.value) == (
                f"no queue takes a job {asked}: each has a RequiredTag the job does not ask for "
                '(mp: ["mp"], gpu: ["gpu", "nvidia"])'
            )
            assert info.value.unmet == "RequiredTag"
        with pytest.raises(NoEligibleQueue, match=r'^no queue takes a job without tags: .*\(mp: \["mp"\]\)$') as info:
            choose(table)
        assert isinstance(info.value, PlanError) and info.value.gram_error == 134
        assert names(eligible({"Tag": ["gpu", "nvidia"]}, t)) == ["gpu"]

    def test_closest_queue_names_the_required_tag(self, tagged):
        t = resources("""
            [resources.ce.c.queue.q1]
            RequiredTag = "x"
            Tag = "x"
            WallTimeLimit = 500
            MaxRAM = 20
            [resources.ce.c.queue.q2]
            WallTimeLimit = 100
            MaxRAM = 5
        """)
        with pytest.raises(NoEligibleQueue) as info:
            select({"WallTimeLimit": 300, "MaxRAM": 10}, t)
        assert str(info.value) == 'no single queue satisfies all requirements (closest: q1, unmet: RequiredTag ["x"])'
        with pytest.raises(NoEligibleQueue, match=r'^no queue satisfies Tag has all of \["a", "d"\] \(available: '):
            select({"Tag": ["a", "d"]}, tagged)


# ---------------------------------------------------------------- selection and messages


class TestSelection:
    def test_smallest_sufficient_wall_time(self, tree):
        assert select({}, tree).name == "short"
        assert select({"WallTimeLimit": 3601}, tree).name == "gpu"
        assert select({"WallTimeLimit": 90000}, tree).name == "long"
        assert select("WallTimeLimit > 3600 && MaxRAM < 20000", tree).name == "long"
        # what jim submit does: the same queues from the description's strings
        assert choose(SITE).name == "short"
        assert choose(SITE, "WallTimeLimit=3601").name == "gpu"
        assert choose(SITE, "WallTimeLimit=90000").name == "long"
        assert choose(SITE, "WallTimeLimit > 3600 && MaxRAM < 20000").name == "long"

    def test_queues_without_limit_come_last_then_config_order(self):
        text = """
            [resources.ce.c.queue.unlimited]
            [resources.ce.c.queue.b]
            WallTimeLimit = 100
            [resources.ce.c.queue.a]
            WallTimeLimit = 100
            [resources.ce.c.queue.odd]
            WallTimeLimit = "forever"
        """
        t = resources(text)
        assert select({}, t).name == "b"
        assert select({"Queue": ["unlimited", "odd"]}, t).name == "unlimited"
        assert select({}, t, prefer=()).name == "unlimited"
        table = tomllib.loads(text)["resources"]
        assert choose(table).name == "b"
        assert choose(table, "Queue=unlimited,odd").name == "unlimited"

    def test_prefer_other_and_descending(self, tree):
        assert select({}, tree, prefer="MaxRAM").name == "short"
        assert select({}, tree, prefer="-MaxRAM").name == "gpu"
        assert select({}, tree, prefer=("-MaxCPUTime", "WallTimeLimit")).name == "long"
        with pytest.raises(ValueError, match="prefer: invalid parameter name"):
            select({}, tree, prefer="Wall Time")

    def test_prefer_and_default_tree(self, tree):
        assert select({}, tree, prefer="-MaxRAM").name == "gpu"
        assert select({}, tree, prefer=()).name == "short"
        assert select(None, parse_resources(None)).name == "default"

    def test_default_prefer(self, tree):
        assert inspect.signature(preferred).parameters["prefer"].default == ("WallTimeLimit",)
        assert preferred(tree.queues) is preferred(tree.queues, "WallTimeLimit") is tree.find("short")


class TestNoEligibleQueue:
    @pytest.mark.parametrize(
        "reqs, message, unmet",
        [
            (
                {"WallTimeLimit": 200000},
                "no queue satisfies WallTimeLimit >= 200000 (largest: long with 172800)",
                "WallTimeLimit >= 200000",
            ),
            (
                {"walltimelimit": "200000"},
                "no queue satisfies walltimelimit >= 200000 (largest: long with 172800)",
                "walltimelimit >= 200000",
            ),
            (
                {"GPU": 1, "WallTimeLimit": 10**9},
                "no queue satisfies WallTimeLimit >= 1000000000 (largest: long with 172800)",
                "WallTimeLimit >= 1000000000",
            ),
            ({"Tag": "cvmfs", "Memory": 4000}, "no queue has parameter Memory", "Memory"),
            (
                {"Tag": ["avx512", "fpga"]},
                'no queue satisfies Tag has all of ["avx512", "fpga"] (available: "cvmfs", "bigmem", "gpu")',
                'Tag has all of ["avx512", "fpga"]',
            ),
            (
                {"Tag": ["bigmem", "gpu"]},  # each is somewhere, never both on one queue
                'no queue satisfies Tag has all of ["bigmem", "gpu"] (closest: long, without ["gpu"])',
                'Tag has all of ["bigmem", "gpu"]',
            ),
            (
                {"Tag": "fpga"},
                'no queue satisfies "fpga" in Tag (available: "cvmfs", "bigmem", "gpu")',
                '"fpga" in Tag',
            ),
            ({"Site": "OTHER"}, 'no queue satisfies Site == "OTHER" (available: "JIM.TEST.site")', 'Site == "OTHER"'),
            ({"Site": 3}, "no queue satisfies Site >= 3 (Site is not a number on any queue)", "Site >= 3"),
            (
                {"Tag": "gpu", "MaxRAM": 100000},
                "no queue satisfies MaxRAM >= 100000 (largest: gpu with 65536)",
                "MaxRAM >= 100000",
            ),
            (
                {"Tag": "bigmem", "GPU": 1},
                "no single queue satisfies all requirements (closest: long, unmet: GPU >= 1)",
                "GPU >= 1",
            ),
            (
                'WallTimeLimit >= 200000 && member("cvmfs", Tag)',
                "no queue satisfies WallTimeLimit >= 200000 (largest: long with 172800)",
                "WallTimeLimit >= 200000",
            ),
            (
                "TARGET.WallTimeLimit < 100",
                "no queue satisfies TARGET.WallTimeLimit < 100 (smallest: short with 3600)",
                "TARGET.WallTimeLimit < 100",
            ),
            (
                'member("cvmfs", Tag) && (Scratch > 10 && WallTimeLimit > 1)',
                "no queue has parameter Scratch (needed by Scratch > 10)",
                "Scratch",
            ),
            ('Site == "x"', 'no queue satisfies Site == "x" (available: "JIM.TEST.site")', 'Site == "x"'),
            (
                'Queue == "short" && GPU > 0',
                "no single queue satisfies all requirements (closest: short, unmet: GPU > 0)",
                "GPU > 0",
            ),
            ('Queue == "short" || GPU > 5', 'no queue satisfies Queue == "short" || GPU > 5', None),
        ],
    )
    def test_message_names_the_unmet_requirement(self, tree, reqs, message, unmet):
        queries = [lambda: select(reqs, tree)]
        if reqs != {"Site": 3}:  # as a string, "3" is no capacity: Site == "3"
            queries.append(lambda: choose(SITE, *as_description(reqs)))
        for query in queries:
            if message.endswith("GPU > 5"):  # || binds looser than &&: one term, met by short alone
                assert query().name == "short"
                continue
            with pytest.raises(NoEligibleQueue) as info:
                query()
            assert str(info.value) == message
            assert info.value.unmet == unmet
            assert "\n" not in str(info.value)

    def test_is_a_value_error_and_a_plan_error(self, tree):
        for query in (lambda: select({"GPU": 100}, tree), lambda: choose(SITE, "GPU=100")):
            with pytest.raises(ValueError) as info:
                query()
            assert isinstance(info.value, NoEligibleQueue) and isinstance(info.value, PlanError)
            assert info.value.gram_error == PlanError.gram_error

    def test_many_values_are_abbreviated(self):
        queues = "\n".join(f'[resources.ce.c.queue.q{i}]\nOS = "os{i}"' for i in range(10))
        for query in (
            lambda: select({"OS": "linux"}, resources(queues)),
            lambda: choose(tomllib.loads(queues)["resources"], "OS=linux"),
        ):
            with pytest.raises(NoEligibleQueue) as info:
                query()
            assert str(info.value).endswith('"os4", "os5", ... (4 more))')

    def test_labels_qualify_duplicate_queue_names(self):
        t = resources("""
            [resources.ce.a.queue.batch]
            WallTimeLimit = 10
            [resources.ce.b.queue.batch]
            WallTimeLimit = 20
        """)
        with pytest.raises(NoEligibleQueue, match=r"\(largest: b/batch with 20\)$"):
            select({"WallTimeLimit": 30}, t)


# ---------------------------------------------------------------- keys and the cache

# The stated key of the requirements "Tag=gpu,bigmem" "WallTimeLimit=7200", the cache file's key for
# "Tag=gpu,cvmfs" "WallTimeLimit=7200" on tests/data/requirements/site.toml, and the site's fingerprint:
# pinned so that a change of the file format is deliberate (bump KEY_VERSION and these values).
SITE_FINGERPRINT = "6dc8e20da783158a8a31926d10034ac2bdb70e4d48d7892e1b3609991ac25928"
STATED_KEY = "47208badcc1e9bb81c02f7fa4304385b8f262c51f05f0432e0ab00ab10014422"
FILE_KEY = "5892c4401078346855c3bc9ea8ae1f6ea5e9bcd88f996e1d80aa52b2c5b3bd59"
FILE_KEY_NO_REQUIREMENTS = "3cadb365ebf5f7554a7615bec27cbb294ae7facc262e5eef704417211338099b"


def cache_entries(directory: Path) -> dict:
    return json.loads((directory / QueueCache.FILE).read_text())["entries"]


class TestKeys:
    def test_permuted_requirements_share_one_key(self):
        a = {"WallTimeLimit": 7200, "Tag": ["cvmfs", "bigmem"], "Site": "JIM.TEST.site"}
        b = {"Site": "JIM.TEST.site", "tag": ["bigmem", "cvmfs", "cvmfs"], "WALLTIMELIMIT": 7200.0}
        assert key(a) == key(b)
        assert JobRequirements.of(a) == JobRequirements.of(b)
        # the description's form: the key of the cache file
        stated_a = requirements_of_description(["WallTimeLimit=7200", "Tag=cvmfs,bigmem", "Site=JIM.TEST.site"])
        stated_b = requirements_of_description(
            [["Site", "JIM.TEST.site"], ["tag", "bigmem", "cvmfs", "cvmfs"], "WALLTIMELIMIT=7200"]
        )
        assert stated_a.key == stated_b.key

    @pytest.mark.parametrize(
        "a, b",
        [
            ({"WallTimeLimit": 7200}, {"WallTimeLimit": 7201}),
            ({"WallTimeLimit": 7200}, {"WallTimeLimit": "7200"}),
            ({"Tag": "a"}, {"Tag": ["a", "b"]}),
            ({"Site": "a"}, {"Site": "A"}),
            ({}, {"X": True}),
            ("WallTimeLimit > 1", "WallTimeLimit >= 1"),
        ],
    )
    def test_different_requirements_have_different_keys(self, a, b):
        assert key(a) != key(b)
        assert JobRequirements.of(a) != JobRequirements.of(b)

    def test_expression_key_ignores_layout(self):
        assert key('WallTimeLimit>=7200&&member( "x",Tag )') == key('WallTimeLimit >= 7200 && member("x", Tag)')

    def test_key_is_stable_across_processes(self, tree, tmp_path):
        reqs = {"Tag": ["b", "a"], "WallTimeLimit": 7200}
        values = ["Tag=gpu,cvmfs", "WallTimeLimit=7200"]
        code = (
            "import json, tomllib\n"
            "from jim.requirements import QueueCache, choose_queue, parse_resources, requirements_of_description\n"
            "from jim.requirements.matching import JobRequirements\n"
            "from jim.requirements.resources import digest\n"
            f"site = tomllib.load(open({str(DATA / 'site.toml')!r}, 'rb'))['resources']\n"
            f"print(digest(JobRequirements.of({reqs!r}).canonical()))\n"
            f"stated = requirements_of_description({values!r})\n"
            f"choose_queue(site, stated, cache=QueueCache({str(tmp_path / 'child')!r}))\n"
            f"print(stated.key, *json.load(open({str(tmp_path / 'child' / QueueCache.FILE)!r}))['entries'])\n"
            "print(parse_resources(site).fingerprint)\n"
        )
        env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(Path(__file__).parent.parent))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        choose(SITE, *values, cache=QueueCache(tmp_path / "parent"))
        stated_key = requirements_of_description(values).key
        assert out.stdout.split() == [key(reqs), stated_key, *cache_entries(tmp_path / "parent"), tree.fingerprint]

    def test_key_format_is_pinned(self, tree, tmp_path):
        # The cache persists keys: changing the normal form must be deliberate
        # (bump KEY_VERSION and update these values).
        # sha256 of {"expr":null,"params":[["tag",["a","b"]],["walltimelimit",7200]],"v":1}
        assert (
            key({"WallTimeLimit": 7200, "Tag": ["b", "a"]})
            == "bad9a6e23a26ca5ee2396206fa817f0a2868079fc39834e041afb4144e61a33e"
        )
        assert tree.fingerprint == SITE_FINGERPRINT
        assert requirements_of_description(["Tag=gpu,bigmem", "WallTimeLimit=7200"]).key == STATED_KEY
        choose(SITE, "Tag=gpu,cvmfs", "WallTimeLimit=7200", cache=QueueCache(tmp_path))
        assert cache_entries(tmp_path) == {
            FILE_KEY: {"queues": ["gpuce/gpu"], "at": cache_entries(tmp_path)[FILE_KEY]["at"]}
        }
        assert json.loads((tmp_path / QueueCache.FILE).read_text())["v"] == 2

    def test_tree_key_differs_from_plain_key(self, tmp_path):
        choose(SITE, cache=QueueCache(tmp_path))
        assert list(cache_entries(tmp_path)) == [FILE_KEY_NO_REQUIREMENTS]
        assert FILE_KEY_NO_REQUIREMENTS not in (StatedRequirements().key, key({}))
        # the name's case does not matter
        cache = QueueCache(tmp_path / "case")
        assert [choose(SITE, r, cache=cache).cached for r in ("Tag=gpu", "tag=gpu")] == [False, True]
        assert len(cache_entries(tmp_path / "case")) == 1

    @given(
        st.permutations(["WallTimeLimit", "Tag", "MaxRAM", "Site"]),
        st.permutations(["cvmfs", "bigmem", "gpu"]),
        st.lists(st.sampled_from(["lower", "upper", "same"]), min_size=4, max_size=4),
    )
    @settings(max_examples=100, deadline=None)
    def test_permutation_and_case_invariance(self, order, tags, cases):
        base = {"WallTimeLimit": 3600, "Tag": ["cvmfs", "bigmem", "gpu"], "MaxRAM": 4096, "Site": "JIM.TEST.site"}
        spell = {"lower": str.lower, "upper": str.upper, "same": str}
        shuffled = {spell[c](k): (tags if k == "Tag" else base[k]) for k, c in zip(order, cases, strict=True)}
        assert key(shuffled) == key(base)
        assert (
            requirements_of_description(as_description(shuffled)).key
            == requirements_of_description(as_description(base)).key
        )
        t = parse_resources(load_site()["resources"])
        assert eligible(shuffled, t) == eligible(base, t)


class TestQueueCache:
    """The persistent cache that choose_queue reads and writes (see also tests/test_plan.py)."""

    def test_identical_requirement_sets_share_one_evaluation(self, tmp_path):
        cache = QueueCache(tmp_path)
        first = choose(SITE, "WallTimeLimit=7200", "Tag=cvmfs,gpu", cache=cache)
        again = choose(SITE, ["tag", "gpu", "cvmfs"], "walltimelimit=7200", cache=cache)
        assert (first.cached, again.cached) == (False, True)
        assert again.queue == first.queue and again.eligible == first.eligible == 1  # gpu: the one with both tags
        assert (cache.hits, cache.misses, len(cache_entries(tmp_path))) == (1, 1, 1)
        assert choose(SITE, ("TAG", "cvmfs", "gpu"), "WallTimeLimit=7200", cache=cache).name == "gpu"
        assert (cache.hits, cache.misses) == (2, 1)

    def test_failures_are_not_cached_and_messages_use_callers_spelling(self, tmp_path):
        cache = QueueCache(tmp_path)
        with pytest.raises(NoEligibleQueue, match="^no queue has parameter gpu_model$"):
            choose(SITE, "gpu_model=A100", cache=cache)
        with pytest.raises(NoEligibleQueue, match="^no queue has parameter GPU_Model$"):
            choose(SITE, "GPU_Model=A100", cache=cache)
        assert (cache.hits, cache.misses) == (0, 2)
        assert not (tmp_path / QueueCache.FILE).exists()

    def test_cache_invalidated_when_tree_changes(self, tmp_path):
        cache = QueueCache(tmp_path)
        assert choose(SITE, "WallTimeLimit=100000", cache=cache).name == "long"
        config = load_site()
        config["resources"]["ce"]["gpuce"]["queue"]["gpu"]["WallTimeLimit"] = 100000
        changed = choose(config["resources"], "WallTimeLimit=100000", cache=cache)
        assert (changed.name, changed.cached) == ("gpu", False)
        assert (cache.hits, cache.misses) == (0, 2)

    def test_cache_kept_when_config_is_reloaded_unchanged(self, tmp_path):
        cache = QueueCache(tmp_path)
        choose(SITE, "Tag=gpu", cache=cache)
        assert choose(load_site()["resources"], "Tag=gpu", cache=cache).cached
        assert (cache.hits, cache.misses) == (1, 1)
        assert len(cache_entries(tmp_path)) == 1

    def test_cache_is_bounded(self, tmp_path):
        cache = QueueCache(tmp_path, max_entries=3)
        for n in range(5):
            choose(SITE, f"WallTimeLimit={n}", cache=cache)
            time.sleep(0.002)
        assert len(cache_entries(tmp_path)) == 3
        choose(SITE, "WallTimeLimit=4", cache=cache)
        choose(SITE, "WallTimeLimit=0", cache=cache)
        assert (cache.hits, cache.misses) == (1, 6)


@given(
    st.dictionaries(
        st.sampled_from(["WallTimeLimit", "MaxRAM", "GPU", "Tag", "Site", "Queue", "WholeNode"]),
        st.one_of(
            st.integers(min_value=0, max_value=200000),
            st.sampled_from(["cvmfs", "gpu", "short", "JIM.TEST.site", "true"]),
            st.lists(st.sampled_from(["cvmfs", "bigmem", "gpu", "long"]), min_size=1, max_size=3),
        ),
        max_size=4,
    )
)
@settings(max_examples=200, deadline=None)
def test_select_is_eligible_and_errors_are_one_line(reqs):
    t = parse_resources(load_site()["resources"])
    queues = eligible(reqs, t)
    try:
        chosen = select(reqs, t)
    except NoEligibleQueue as exc:
        assert queues == ()
        assert str(exc).startswith("no ") and "\n" not in str(exc) and exc.unmet
        chosen = None
    else:
        assert chosen in queues
        assert chosen == preferred(queues)
    # the same requirements as a description states them (strings) choose the same queue
    try:
        assert choose(SITE, *as_description(reqs)).queue == chosen
    except NoEligibleQueue as exc:
        assert chosen is None
        assert str(exc).startswith("no ") and "\n" not in str(exc) and exc.unmet
