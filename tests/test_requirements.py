"""Tests for jim.requirements: resource tree, matching, ClassAd expressions, selection, cache."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jim.errors import ConfigError, GramError, InvalidAttribute, PlanError
from jim.requirements import (
    DEFAULT_PREFER,
    InvalidRequirement,
    JobRequirements,
    NoEligibleQueue,
    Queue,
    RequirementMatcher,
    ResourceConfigError,
    ResourceTree,
    cache_key,
    default_tree,
    eligible_queues,
    parse_resources,
    queue_matches,
    select_queue,
    tree_from_config,
)

DATA = Path(__file__).parent / "data" / "requirements"


def load_site() -> dict:
    with open(DATA / "site.toml", "rb") as fh:
        return tomllib.load(fh)


def resources(text: str) -> ResourceTree:
    return tree_from_config(tomllib.loads(text))


@pytest.fixture(scope="module")
def tree() -> ResourceTree:
    return tree_from_config(load_site())


def names(queues) -> list[str]:
    return [q.name for q in queues]


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
        a, b = tree_from_config(load_site()), tree_from_config(load_site())
        assert a.fingerprint == b.fingerprint and len(a.fingerprint) == 64
        changed = load_site()
        changed["resources"]["ce"]["localhost"]["queue"]["short"]["WallTimeLimit"] = 3601
        assert tree_from_config(changed).fingerprint != a.fingerprint


class TestDefaultTree:
    @pytest.mark.parametrize("config", [{}, {"resources": {}}, {"batch": {"adapter": "fork"}}])
    def test_no_resources_gives_one_default_queue(self, config):
        t = tree_from_config(config)
        assert t == default_tree()
        assert [(q.ce, q.name) for q in t] == [("default", "default")]

    def test_parse_none(self):
        assert parse_resources(None) is default_tree()

    @pytest.mark.parametrize("reqs", [None, {}, "", "   "])
    def test_no_requirements_always_match(self, reqs):
        assert select_queue(reqs, default_tree()).name == "default"
        assert select_queue(reqs, default_tree(), prefer=()).name == "default"

    def test_the_default_queue_has_no_limits(self):
        with pytest.raises(NoEligibleQueue, match="^no queue has parameter WallTimeLimit$"):
            select_queue({"WallTimeLimit": 60}, default_tree())


class TestValidation:
    @pytest.mark.parametrize("text, message", [
        ("resources = 3", "resources: expected a table, got an integer"),
        ("[resources]\nSite = 'x'", "resources: no computing element; add [resources.ce.<name>.queue.<queue>]"),
        ("[resources]\nce = 'x'", "resources.ce: expected a table of tables ([resources.ce.<name>]), got a string"),
        ("[resources.ce]", "resources.ce: no computing element; add [resources.ce.<name>]"),
        ("[resources.ce.c]\nA = 1", "resources.ce.c: no queue; add [resources.ce.c.queue.<name>]"),
        ("[resources.ce]\nc = 1", "resources.ce.c: expected a table, got an integer"),
        ("[resources.ce.c.queue]", "resources.ce.c.queue: no queue; add [resources.ce.c.queue.<name>]"),
        ("[resources.ce.c.queue.q.Limits]\nA = 1",
         "resources.ce.c.queue.q.Limits: expected a string, number, boolean or list of strings, got a table"),
        ("[resources.ce.c.queue.q]\nWhen = 1979-05-27",
         "resources.ce.c.queue.q.When: expected a string, number, boolean or list of strings, got a date/time"),
        ("[resources.ce.c.queue.q]\nL = [1, 2]", "resources.ce.c.queue.q.L: a list value must hold only strings"),
        ("[resources.ce.c.queue.q]\nTag = [1]",
         "resources.ce.c.queue.q.Tag: expected a string or a list of strings, got a list"),
        ("[resources.ce.c.queue.q]\nX = nan", "resources.ce.c.queue.q.X: nan is not a usable value"),
        ("[resources.ce.c.queue.q]\nX = 9223372036854775807\nY = 0", None),
        ("[resources.ce.c.queue.q]\nMax-RAM = 1",
         "resources.ce.c.queue.q.Max-RAM: invalid parameter name (letters, digits and '_', not starting with a digit)"),
        ("[resources.ce.c.queue.q]\nmaxram = 1\nMaxRAM = 2",
         "resources.ce.c.queue.q: parameters 'maxram' and 'MaxRAM' differ only in case"),
        ("[resources]\nQueue = 'x'\n[resources.ce.c.queue.q]",
         "resources.Queue: 'Queue' is reserved (jim sets Queue to the queue's name)"),
        ("[resources.ce.c]\nCE = 'x'\n[resources.ce.c.queue.q]",
         "resources.ce.c.CE: 'CE' is reserved (jim sets CE to the computing element's name)"),
        ("[resources.queue.q]\n[resources.ce.c.queue.q]",
         "resources.queue: queues belong under [resources.ce.<ce>.queue.<name>]"),
        ("[resources.ce.c.queue.q.queue.x]",
         "resources.ce.c.queue.q.queue: queues belong under [resources.ce.<ce>.queue.<name>]"),
        ("[resources.ce.c.ce.d]\n[resources.ce.c.queue.q]",
         "resources.ce.c.ce: computing elements belong under [resources.ce.<name>]"),
        ('[resources.ce."a b".queue.q]', "resources.ce: invalid computing element name 'a b' (no white space, no '/')"),
        ('[resources.ce.c.queue."x/y"]', "resources.ce.c.queue: invalid queue name 'x/y' (no white space, no '/')"),
    ])
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
        assert names(eligible_queues({"GPU": 1}, tree)) == ["gpu"]
        assert eligible_queues({"NoSuchThing": "x"}, tree) == ()

    @pytest.mark.parametrize("reqs, expected", [
        ({"Tag": ["bigmem", "gpu"]}, ["long", "gpu"]),          # any of, against list values
        ({"Tag": ["nothing", "cvmfs"]}, ["short", "long", "gpu"]),
        ({"Queue": ["long", "gpu"]}, ["long", "gpu"]),          # any of, against a scalar value
        ({"Platform": ["x86_64-el8"]}, ["gpu"]),
        ({"GPU": [1, 2]}, ["gpu"]),                             # numbers in a list compare equal
        ({"GPU": [1, 3]}, []),
        ({"GPU": ["2"]}, ["gpu"]),                              # numeric string vs number: equality in a list
    ])
    def test_lists_mean_any_of(self, tree, reqs, expected):
        assert names(eligible_queues(reqs, tree)) == expected

    @pytest.mark.parametrize("reqs, expected", [
        ({"WallTimeLimit": 3600}, ["short", "long", "gpu"]),   # equal is enough
        ({"WallTimeLimit": 3601}, ["long", "gpu"]),
        ({"WallTimeLimit": 86400.0}, ["long", "gpu"]),
        ({"WallTimeLimit": 86400.5}, ["long"]),
        ({"WallTimeLimit": 172801}, []),
        ({"MaxRAM": 8000, "WallTimeLimit": 100000}, ["long"]),
        ({"MaxRAM": "8000"}, ["long", "gpu"]),                  # RSL strings are capacities too
        ({"MaxRAM": " 8e3 "}, ["long", "gpu"]),
        ({"MaxRAM": "lots"}, []),
        ({"GPU": 0}, ["gpu"]),
    ])
    def test_numbers_mean_capacity(self, tree, reqs, expected):
        assert names(eligible_queues(reqs, tree)) == expected

    @pytest.mark.parametrize("reqs, expected", [
        ({"Site": "JIM.TEST.site"}, ["short", "long", "gpu"]),
        ({"Site": "jim.test.site"}, []),                        # values are case-sensitive
        ({"Tag": "bigmem"}, ["long"]),                          # contained in the queue's list
        ({"Tag": "BIGMEM"}, []),
        ({"Queue": "short"}, ["short"]),
        ({"CE": "gpuce"}, ["gpu"]),
        ({"WholeNode": True}, ["gpu"]),
        ({"WholeNode": False}, ["short", "long"]),
        ({"WholeNode": "TRUE"}, ["gpu"]),                       # RSL string vs boolean
        ({"WholeNode": "yes"}, []),
        ({"WholeNode": 1}, []),                                 # a number is not a boolean
        ({"Site": 1}, []),
    ])
    def test_strings_and_booleans(self, tree, reqs, expected):
        assert names(eligible_queues(reqs, tree)) == expected

    @pytest.mark.parametrize("reqs", [
        {"walltimelimit": 7200, "TAG": "cvmfs"},
        {"WALLTIMELIMIT": 7200, "tag": ["cvmfs"]},
        {"WallTimeLimit": 7200, "Tag": "cvmfs"},
    ])
    def test_names_are_case_insensitive(self, tree, reqs):
        assert names(eligible_queues(reqs, tree)) == ["long", "gpu"]

    def test_all_requirements_must_hold(self, tree):
        assert names(eligible_queues({"Tag": "gpu", "WallTimeLimit": 100000}, tree)) == []
        assert names(eligible_queues({"Tag": "gpu", "WallTimeLimit": 80000}, tree)) == ["gpu"]

    def test_queue_matches(self, tree):
        assert queue_matches({"Tag": "gpu"}, tree.find("gpu"))
        assert not queue_matches({"Tag": "gpu"}, tree.find("short"))

    @pytest.mark.parametrize("reqs, message", [
        ({"Max-RAM": 1}, "invalid requirement name 'Max-RAM'"),
        ({"Tag": "a", "tag": "b"}, "requirements 'Tag' and 'tag' differ only in case"),
        ({"Tag": []}, "requirement Tag: an empty list can never be satisfied"),
        ({"Tag": [True]}, "requirement Tag: list elements must be strings or numbers"),
        ({"X": {"a": 1}}, "requirement X: expected a string, number, boolean or list, got a table"),
        ({"X": float("nan")}, "requirement X: nan is not a usable value"),
        ({"X": None}, "requirement X: expected"),
        (42, "requirements must be a mapping or a ClassAd expression, got an integer"),
    ])
    def test_bad_requirements(self, tree, reqs, message):
        with pytest.raises(InvalidRequirement) as info:
            eligible_queues(reqs, tree)
        assert str(info.value).startswith(message)
        assert isinstance(info.value, ValueError) and isinstance(info.value, InvalidAttribute)


class TestClassAd:
    @pytest.mark.parametrize("expr, expected", [
        ('WallTimeLimit >= 7200 && member("cvmfs", Tag)', ["long", "gpu"]),
        ("TARGET.WallTimeLimit >= 7200", ["long", "gpu"]),       # HTCondor's TARGET scope
        ("MY.MaxRAM > 10000", ["long", "gpu"]),
        ('member("gpu", Tag) || Queue == "short"', ["short", "gpu"]),
        ("walltimelimit < 10000", ["short"]),                    # ClassAd names ignore case
        ('Site == "jim.test.site"', ["short", "long", "gpu"]),   # ClassAd == ignores string case
        ('Site =?= "jim.test.site"', []),                        # =?= does not
        ("WholeNode", ["gpu"]),
        ("GPU >= 1", ["gpu"]),
        ("WallTimeLimit >= 1000000", []),
    ])
    def test_expressions(self, tree, expr, expected):
        assert names(eligible_queues(expr, tree)) == expected

    @pytest.mark.parametrize("expr", [
        "NoSuchParam > 0",        # undefined
        "GPU",                    # 2 on gpu: a number, not true
        "1",
        '"yes"',
        "undefined",
        "error",
        "WallTimeLimit / 0 > 1",  # error
    ])
    def test_only_exactly_true_matches(self, tree, expr):
        assert eligible_queues(expr, tree) == ()

    @pytest.mark.parametrize("expr", ["WallTimeLimit >= ", "a &&& b", "(", '"unterminated', "x y"])
    def test_parse_errors(self, tree, expr):
        with pytest.raises(InvalidRequirement, match="^requirement expression does not parse: "):
            eligible_queues(expr, tree)
        with pytest.raises(ValueError):
            cache_key(expr)

    def test_record_is_read_as_a_mapping(self, tree):
        record = '[ Tag = {"bigmem", "gpu"}; MaxRAM = 8000; Site = "JIM.TEST.site"; N = 2 * 3 ]'
        normal = JobRequirements.of(record)
        assert normal == JobRequirements.of({"Tag": ["gpu", "bigmem"], "MaxRAM": 8000,
                                             "Site": "JIM.TEST.site", "N": 6})
        assert names(eligible_queues(dict(Tag=["bigmem", "gpu"], MaxRAM=8000), tree)) == ["long", "gpu"]

    def test_record_with_undefined_value(self):
        with pytest.raises(InvalidRequirement, match="requirement X: value does not evaluate"):
            JobRequirements.of("[ X = undefined ]")

    def test_mapping_and_expression_together(self, tree):
        reqs = JobRequirements.combine({"Tag": "cvmfs"}, "MaxRAM < 20000", None, {"tag": "cvmfs"})
        assert reqs == JobRequirements(JobRequirements.of({"Tag": "cvmfs"}).params, "MaxRAM < 20000")
        assert names(eligible_queues(reqs, tree)) == ["short", "long"]
        both = JobRequirements.combine(reqs, "WallTimeLimit > 3600", {"WallTimeLimit": 1})
        assert both.expression == "(MaxRAM < 20000) && (WallTimeLimit > 3600)"
        assert names(eligible_queues(both, tree)) == ["long"]
        with pytest.raises(InvalidRequirement, match="^requirement tag is given twice with different values$"):
            JobRequirements.combine({"Tag": "a"}, {"tag": "b"})

    @given(st.integers(min_value=0, max_value=300000))
    @settings(max_examples=60, deadline=None)
    def test_expression_agrees_with_mapping(self, limit):
        t = tree_from_config(load_site())
        assert eligible_queues(f"WallTimeLimit >= {limit}", t) == eligible_queues({"WallTimeLimit": limit}, t)


# ---------------------------------------------------------------- selection and messages


class TestSelection:
    def test_smallest_sufficient_wall_time(self, tree):
        assert select_queue({}, tree).name == "short"
        assert select_queue({"WallTimeLimit": 3601}, tree).name == "gpu"
        assert select_queue({"WallTimeLimit": 90000}, tree).name == "long"
        assert select_queue("WallTimeLimit > 3600 && MaxRAM < 20000", tree).name == "long"

    def test_queues_without_limit_come_last_then_config_order(self):
        t = resources("""
            [resources.ce.c.queue.unlimited]
            [resources.ce.c.queue.b]
            WallTimeLimit = 100
            [resources.ce.c.queue.a]
            WallTimeLimit = 100
            [resources.ce.c.queue.odd]
            WallTimeLimit = "forever"
        """)
        assert select_queue({}, t).name == "b"
        assert select_queue({"Queue": ["unlimited", "odd"]}, t).name == "unlimited"
        assert select_queue({}, t, prefer=()).name == "unlimited"

    def test_prefer_other_and_descending(self, tree):
        assert select_queue({}, tree, prefer="MaxRAM").name == "short"
        assert select_queue({}, tree, prefer="-MaxRAM").name == "gpu"
        assert select_queue({}, tree, prefer=("-MaxCPUTime", "WallTimeLimit")).name == "long"
        with pytest.raises(ValueError, match="prefer: invalid parameter name"):
            select_queue({}, tree, prefer="Wall Time")

    def test_default_prefer(self):
        assert DEFAULT_PREFER == ("WallTimeLimit",)


class TestNoEligibleQueue:
    @pytest.mark.parametrize("reqs, message, unmet", [
        ({"WallTimeLimit": 200000}, "no queue satisfies WallTimeLimit >= 200000 (largest: long with 172800)",
         "WallTimeLimit >= 200000"),
        ({"walltimelimit": "200000"}, "no queue satisfies walltimelimit >= 200000 (largest: long with 172800)",
         "walltimelimit >= 200000"),
        ({"GPU": 1, "WallTimeLimit": 10**9}, "no queue satisfies WallTimeLimit >= 1000000000 "
         "(largest: long with 172800)", "WallTimeLimit >= 1000000000"),
        ({"Tag": "cvmfs", "Memory": 4000}, "no queue has parameter Memory", "Memory"),
        ({"Tag": ["avx512", "fpga"]}, 'no queue satisfies Tag in ["avx512", "fpga"] '
         '(available: "cvmfs", "bigmem", "gpu")', 'Tag in ["avx512", "fpga"]'),
        ({"Tag": "fpga"}, 'no queue satisfies "fpga" in Tag (available: "cvmfs", "bigmem", "gpu")', '"fpga" in Tag'),
        ({"Site": "OTHER"}, 'no queue satisfies Site == "OTHER" (available: "JIM.TEST.site")', 'Site == "OTHER"'),
        ({"Site": 3}, "no queue satisfies Site >= 3 (Site is not a number on any queue)", "Site >= 3"),
        ({"Tag": "gpu", "MaxRAM": 100000}, "no queue satisfies MaxRAM >= 100000 (largest: gpu with 65536)",
         "MaxRAM >= 100000"),
        ({"Tag": "bigmem", "GPU": 1}, 'no single queue satisfies all requirements (closest: long, unmet: GPU >= 1)',
         "GPU >= 1"),
        ('WallTimeLimit >= 200000 && member("cvmfs", Tag)',
         "no queue satisfies WallTimeLimit >= 200000 (largest: long with 172800)", "WallTimeLimit >= 200000"),
        ("TARGET.WallTimeLimit < 100", "no queue satisfies TARGET.WallTimeLimit < 100 (smallest: short with 3600)",
         "TARGET.WallTimeLimit < 100"),
        ('member("cvmfs", Tag) && (Scratch > 10 && WallTimeLimit > 1)',
         "no queue has parameter Scratch (needed by Scratch > 10)", "Scratch"),
        ('Site == "x"', 'no queue satisfies Site == "x" (available: "JIM.TEST.site")', 'Site == "x"'),
        ('Queue == "short" && GPU > 0', "no single queue satisfies all requirements "
         '(closest: short, unmet: GPU > 0)', "GPU > 0"),
        ('Queue == "short" || GPU > 5', 'no queue satisfies Queue == "short" || GPU > 5', None),
    ])
    def test_message_names_the_unmet_requirement(self, tree, reqs, message, unmet):
        for query in (lambda: select_queue(reqs, tree), lambda: RequirementMatcher(tree).select(reqs)):
            if message.endswith("GPU > 5"):  # || binds looser than &&: one term, met by short alone
                assert query().name == "short"
                continue
            with pytest.raises(NoEligibleQueue) as info:
                query()
            assert str(info.value) == message
            assert info.value.unmet == unmet
            assert "\n" not in str(info.value)

    def test_is_a_value_error_and_a_plan_error(self, tree):
        with pytest.raises(ValueError) as info:
            select_queue({"GPU": 100}, tree)
        assert isinstance(info.value, NoEligibleQueue) and isinstance(info.value, PlanError)
        assert info.value.gram_error == PlanError.gram_error

    def test_many_values_are_abbreviated(self):
        queues = "\n".join(f'[resources.ce.c.queue.q{i}]\nOS = "os{i}"' for i in range(10))
        with pytest.raises(NoEligibleQueue) as info:
            select_queue({"OS": "linux"}, resources(queues))
        assert str(info.value).endswith('"os4", "os5", ... (4 more))')

    def test_labels_qualify_duplicate_queue_names(self):
        t = resources("""
            [resources.ce.a.queue.batch]
            WallTimeLimit = 10
            [resources.ce.b.queue.batch]
            WallTimeLimit = 20
        """)
        with pytest.raises(NoEligibleQueue, match=r"\(largest: b/batch with 20\)$"):
            select_queue({"WallTimeLimit": 30}, t)


# ---------------------------------------------------------------- cache


class TestCache:
    def test_permuted_requirements_share_one_key(self):
        a = {"WallTimeLimit": 7200, "Tag": ["cvmfs", "bigmem"], "Site": "JIM.TEST.site"}
        b = {"Site": "JIM.TEST.site", "tag": ["bigmem", "cvmfs", "cvmfs"], "WALLTIMELIMIT": 7200.0}
        assert cache_key(a) == cache_key(b)
        assert JobRequirements.of(a) == JobRequirements.of(b)

    @pytest.mark.parametrize("a, b", [
        ({"WallTimeLimit": 7200}, {"WallTimeLimit": 7201}),
        ({"WallTimeLimit": 7200}, {"WallTimeLimit": "7200"}),
        ({"Tag": "a"}, {"Tag": ["a", "b"]}),
        ({"Site": "a"}, {"Site": "A"}),
        ({}, {"X": True}),
        ("WallTimeLimit > 1", "WallTimeLimit >= 1"),
    ])
    def test_different_requirements_have_different_keys(self, a, b):
        assert cache_key(a) != cache_key(b)

    def test_expression_key_ignores_layout(self):
        assert cache_key("WallTimeLimit>=7200&&member( \"x\",Tag )") == \
            cache_key('WallTimeLimit >= 7200 && member("x", Tag)')

    def test_key_is_stable_across_processes(self, tree):
        reqs = {"Tag": ["b", "a"], "WallTimeLimit": 7200}
        code = ("import sys, tomllib; from jim.requirements import cache_key, tree_from_config; "
                f"t = tree_from_config(tomllib.load(open({str(DATA / 'site.toml')!r}, 'rb'))); "
                f"print(cache_key({reqs!r})); print(cache_key({reqs!r}, t)); print(t.fingerprint)")
        env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(Path(__file__).parent.parent))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.split() == [cache_key(reqs), cache_key(reqs, tree), tree.fingerprint]

    def test_key_format_is_pinned(self):
        # The caller may persist keys: changing the normal form must be deliberate
        # (bump _KEY_VERSION and update this value).
        # sha256 of {"expr":null,"params":[["tag",["a","b"]],["walltimelimit",7200]],"v":1}
        assert cache_key({"WallTimeLimit": 7200, "Tag": ["b", "a"]}) == \
            "bad9a6e23a26ca5ee2396206fa817f0a2868079fc39834e041afb4144e61a33e"

    def test_tree_key_differs_from_plain_key(self, tree):
        assert cache_key({}, tree) != cache_key({})
        assert RequirementMatcher(tree).cache_key({"Tag": "x"}) == cache_key({"tag": "x"}, tree)

    def test_identical_requirement_sets_share_one_evaluation(self, tree):
        m = RequirementMatcher(tree)
        first = m.eligible({"WallTimeLimit": 7200, "Tag": ["cvmfs", "gpu"]})
        again = m.eligible({"tag": ["gpu", "cvmfs"], "walltimelimit": 7200.0})
        assert again is first
        assert (m.hits, m.misses, len(m)) == (1, 1, 1)
        assert m.select({"TAG": ("cvmfs", "gpu"), "WallTimeLimit": 7200}).name == "gpu"
        assert (m.hits, m.misses) == (2, 1)

    def test_failures_are_cached_but_messages_use_callers_spelling(self, tree):
        m = RequirementMatcher(tree)
        with pytest.raises(NoEligibleQueue, match="^no queue has parameter gpu_model$"):
            m.select({"gpu_model": "A100"})
        with pytest.raises(NoEligibleQueue, match="^no queue has parameter GPU_Model$"):
            m.select({"GPU_Model": "A100"})
        assert (m.hits, m.misses) == (1, 1)

    def test_cache_invalidated_when_tree_changes(self, tree):
        m = RequirementMatcher(tree)
        assert m.select({"WallTimeLimit": 100000}).name == "long"
        config = load_site()
        config["resources"]["ce"]["gpuce"]["queue"]["gpu"]["WallTimeLimit"] = 100000
        m.tree = tree_from_config(config)
        assert len(m) == 0
        assert m.select({"WallTimeLimit": 100000}).name == "gpu"
        assert (m.hits, m.misses) == (0, 2)

    def test_cache_kept_when_config_is_reloaded_unchanged(self, tree):
        m = RequirementMatcher(tree)
        m.eligible({"Tag": "gpu"})
        m.tree = tree_from_config(load_site())
        assert len(m) == 1
        m.eligible({"Tag": "gpu"})
        assert (m.hits, m.misses) == (1, 1)

    def test_cache_is_bounded(self, tree):
        m = RequirementMatcher(tree, max_entries=3)
        for n in range(5):
            m.eligible({"WallTimeLimit": n})
        assert len(m) == 3
        m.eligible({"WallTimeLimit": 4})
        m.eligible({"WallTimeLimit": 0})
        assert (m.hits, m.misses) == (1, 6)

    def test_matcher_prefer_and_default_tree(self, tree):
        assert RequirementMatcher(tree, prefer="-MaxRAM").select({}).name == "gpu"
        assert RequirementMatcher(tree, prefer="-MaxRAM").select({}, prefer=()).name == "short"
        assert RequirementMatcher().select(None).name == "default"

    @given(st.permutations(["WallTimeLimit", "Tag", "MaxRAM", "Site"]),
           st.permutations(["cvmfs", "bigmem", "gpu"]),
           st.lists(st.sampled_from(["lower", "upper", "same"]), min_size=4, max_size=4))
    @settings(max_examples=100, deadline=None)
    def test_permutation_and_case_invariance(self, order, tags, cases):
        base = {"WallTimeLimit": 3600, "Tag": ["cvmfs", "bigmem", "gpu"], "MaxRAM": 4096, "Site": "JIM.TEST.site"}
        spell = {"lower": str.lower, "upper": str.upper, "same": str}
        shuffled = {spell[c](k): (tags if k == "Tag" else base[k]) for k, c in zip(order, cases)}
        assert cache_key(shuffled) == cache_key(base)
        t = tree_from_config(load_site())
        assert eligible_queues(shuffled, t) == eligible_queues(base, t)


@given(st.dictionaries(
    st.sampled_from(["WallTimeLimit", "MaxRAM", "GPU", "Tag", "Site", "Queue", "WholeNode"]),
    st.one_of(st.integers(min_value=0, max_value=200000),
              st.sampled_from(["cvmfs", "gpu", "short", "JIM.TEST.site", "true"]),
              st.lists(st.sampled_from(["cvmfs", "bigmem", "gpu", "long"]), min_size=1, max_size=3)),
    max_size=4))
@settings(max_examples=200, deadline=None)
def test_select_is_eligible_and_errors_are_one_line(reqs):
    t = tree_from_config(load_site())
    m = RequirementMatcher(t)
    eligible = eligible_queues(reqs, t)
    assert m.eligible(reqs) == eligible
    try:
        chosen = m.select(reqs)
    except NoEligibleQueue as exc:
        assert eligible == ()
        assert str(exc).startswith("no ") and "\n" not in str(exc) and exc.unmet
    else:
        assert chosen in eligible
        assert chosen == select_queue(reqs, t)
