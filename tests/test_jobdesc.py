"""Job descriptions: RSL, the GRAM module's JSON, JDL/ClassAd."""

from __future__ import annotations

import pytest

from jim.errors import DescriptionError, InvalidAttribute, InvalidCount, RslSyntaxError, UnknownAttribute
from jim.jobdesc import JobDescription, canonical, from_mapping, parse_jdl, parse_json, parse_rsl, to_rsl


def test_rsl_full_example():
    d = parse_rsl(
        '&(executable=/usr/bin/d0mc-run)(arguments=--events 1000 "two words")(count=5)'
        '(jobtype=single)(queue=long)(environment=(JIM_X 3)(FOO "bar baz"))(maxWallTime=120)'
        "(JIM_Type=montecarlo)(events=1000)"
    )
    assert d.get("executable") == "/usr/bin/d0mc-run"
    assert d.arguments == ["--events", "1000", "two words"]
    assert d.environment() == [("JIM_X", "3"), ("FOO", "bar baz")]
    assert d.get("maxwalltime") == "120" and d.jimtype == "montecarlo"


@pytest.mark.parametrize(
    "rsl,expected",
    [
        ('&(a="it""s")', ['it"s']),
        ("&(a='it''s')", ["it's"]),
        ("&(a=^%x\"y'z%)", ["x\"y'z"]),
        ('&(a=foo#bar#"baz qux")', ["foobarbaz qux"]),
        ("&(a=x (* a comment *) y)", ["x", "y"]),
        ("&(rsl_substitution=(A one)(B two))(a=$(A)-$(B))", ["one-two"]),
        ('&(a="$HOME stays literal in quotes")', ["$HOME stays literal in quotes"]),
        ("(a=no-ampersand)", ["no-ampersand"]),
        ("&(a=)", []),
    ],
)
def test_rsl_literals(rsl, expected):
    assert parse_rsl(rsl, env={}).attrs["a"] == expected


def test_rsl_variables_from_environment():
    assert parse_rsl("&(a=$(HOME)/x)", env={"HOME": "/home/u"}).attrs["a"] == ["/home/u/x"]


@pytest.mark.parametrize(
    "rsl,fragment",
    [
        ("", "empty RSL"),
        ("   ", "empty RSL"),
        ("&(a=b", "expected ')'"),
        ("&(a<b)", "only '='"),
        ("&(a!=b)", "only '='"),
        ("+(&(a=b))", "multi-requests"),
        ("|(a=b)(c=d)", "disjunctions"),
        ('&(a="unterminated)', "unterminated"),
        ("&(a=$(NOPE))", "undefined RSL variable"),
        ("&(a=b)(A=c)", "given twice"),
        ("&(=b)", "attribute name"),
        ("&(a=b) junk", "unexpected"),
        ("&(a=x (* open comment", "unterminated comment"),
        ("&(a=b\0)", "NUL"),
        ("&(a=$x)", "$(NAME)"),
    ],
)
def test_rsl_errors(rsl, fragment):
    with pytest.raises(RslSyntaxError) as e:
        parse_rsl(rsl, env={})
    assert fragment in e.value.message and e.value.gram_error == 48
    assert "\n" not in e.value.message


def test_canonical_names_as_gram():
    assert canonical("Max_Wall_Time") == "maxwalltime"
    d = parse_rsl("&(JIM_TYPE=generic)(Count=2)(executable=/bin/true)")
    assert d.jimtype == "generic" and d.get_int("count") == 2


def test_rsl_round_trip():
    d = parse_rsl('&(executable=/bin/echo)(arguments=a "b c" \'d"e\')(environment=(X "1 2")))'[:-1])
    assert parse_rsl(to_rsl(d), env={}).attrs == d.attrs


def test_json_as_gram_hands_it():
    d = parse_json(
        '{"executable": ["/bin/echo"], "arguments": ["a", "b c"], "environment": [["A", "1"]],'
        ' "Max_Wall_Time": ["60"], "count": 3}'
    )
    assert d.get("maxwalltime") == "60" and d.get("count") == "3"
    assert d.environment() == [("A", "1")]


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("not json", "not valid JSON"),
        ("[1,2]", "must be an object"),
        ('{"a": {"b": 1}}', "unsupported value"),
    ],
)
def test_json_errors(text, fragment):
    with pytest.raises(DescriptionError) as e:
        parse_json(text)
    assert fragment in e.value.message


def test_jdl_with_classad():
    d = parse_jdl(
        '[ Executable = "/bin/echo"; Arguments = "a \'b c\'"; Events = 1000; CPUPerEvent = 2.5;'
        ' JimType = "montecarlo"; Environment = {"A=1", "B=x y"}; InputFiles = {"f1", "f2"};'
        ' Requirements = WallTimeLimit > 3600 && member("cvmfs", Tag) ]'
    )
    assert d.arguments == ["a", "b c"]
    assert d.get("events") == "1000" and d.get("cpuperevent") == "2.5"
    assert d.environment() == [("A", "1"), ("B", "x y")]
    assert d.values("inputfiles") == ["f1", "f2"]
    assert "WallTimeLimit > 3600" in d.get("requirements")


def test_jdl_old_syntax_and_errors():
    d = parse_jdl('Executable = "/bin/true"\nJimType = "generic"\n')
    assert d.get("executable") == "/bin/true"
    with pytest.raises(DescriptionError):
        parse_jdl("[ this is ] not a classad ;;; [")


def test_unknown_attribute_refused_unless_declared():
    d = parse_rsl("&(executable=/bin/true)(lumimask=x)")
    with pytest.raises(UnknownAttribute) as e:
        d.check_known()
    assert e.value.gram_error == 1 and "'lumimask'" in e.value.message
    d.check_known(extra={"lumimask"})


def test_gram_internal_attributes_are_known():
    d = from_mapping(
        {
            "executable": ["/bin/true"],
            "uniqid": ["1.2"],
            "jobdir": ["/x"],
            "statefile": ["/y"],
            "filestreamout": [],
            "savejobdescription": ["yes"],
            "cachetag": ["z"],
        }
    )
    d.check_known()


@pytest.mark.parametrize(
    "attrs,exc,code",
    [
        ({"count": ["0"]}, InvalidCount, 14),
        ({"count": ["two"]}, InvalidCount, 14),
        ({"jobtype": ["weird"]}, InvalidAttribute, 19),
        ({"environment": [["A"]]}, InvalidAttribute, 54),  # RSL_ENVIRONMENT
        ({"environment": [["A=B", "x"]]}, InvalidAttribute, 40),
    ],
)
def test_common_checks(attrs, exc, code):
    d = JobDescription({"executable": ["/bin/true"], **attrs})
    with pytest.raises(exc) as e:
        d.check_common()
    assert e.value.gram_error == code


def test_single_value_accessors():
    d = JobDescription({"events": ["1", "2"], "x": [["a", "b"]]})
    with pytest.raises(InvalidAttribute):
        d.get("events")
    with pytest.raises(InvalidAttribute):
        d.values("x")
    with pytest.raises(InvalidAttribute):
        JobDescription({"f": ["nan"]}).get_float("f")


@pytest.mark.parametrize(
    "rsl,seconds,error",
    [
        ("&(executable=/bin/true)", None, None),
        ("&(executable=/bin/true)(maxwalltime=90)", 5400, None),
        ("&(executable=/bin/true)(maxtime=2)", 120, None),
        ("&(executable=/bin/true)(maxwalltime=10)(maxtime=2)", 600, None),  # maxwalltime wins
        ("&(executable=/bin/true)(maxwalltime=1.5)", None, 101),
        ("&(executable=/bin/true)(maxwalltime=soon)", None, 101),
        ("&(executable=/bin/true)(maxwalltime=0)", None, 102),
        ("&(executable=/bin/true)(maxwalltime=-5)", None, 102),
        ("&(executable=/bin/true)(maxtime=x)", None, 13),
    ],
)
def test_wall_time_from_gram_minutes(rsl, seconds, error):
    desc = parse_rsl(rsl)
    if error is None:
        desc.check_common()
        assert desc.wall_seconds() == seconds
    else:
        with pytest.raises(InvalidAttribute) as e:
            desc.check_common()
        assert e.value.gram_error == error
