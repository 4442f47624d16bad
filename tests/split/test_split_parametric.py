"""Parametric splitting (DIRAC semantics) and $-substitution: properties and edge cases."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jim.split.parametric import (
    MAX_DIGITS,
    ParameterSequence,
    expand_jobs,
    parse_parameters,
    sequence_values,
    split_parametric,
    substitute,
)

SETTINGS = settings(max_examples=200, deadline=None)

int_text = st.integers(-50, 50).map(str)
float_text = st.decimals(min_value=-50, max_value=50, places=2, allow_nan=False, allow_infinity=False).map(
    lambda d: format(d, "f") if "." in format(d, "f") else format(d, "f") + ".0"
)
number_text = st.one_of(int_text, float_text)


# --- sequence values -----------------------------------------------------------------------


@SETTINGS
@given(n=st.integers(1, 12), start=number_text, step=number_text, factor=number_text)
def test_sequence_values_follow_dirac_recurrence_exactly(n, start, step, factor):
    values = sequence_values(n, start=start, step=step, factor=factor)
    assert len(values) == n
    integer = all("." not in t for t in (start, step, factor))
    expected = Fraction(start)
    for k, text in enumerate(values):
        if k:
            expected = expected * Fraction(factor) + Fraction(step)
        assert Fraction(Decimal(text)) == expected  # exact: no binary noise
        assert "e" not in text.lower()
        if integer:
            assert "." not in text  # integers never print as 7.0
        else:
            whole, _, frac = text.partition(".")
            assert frac and (frac == "0" or not frac.endswith("0"))


@pytest.mark.parametrize(
    "n, kwargs, expected",
    [
        (3, {"start": 5}, ("5", "5", "5")),  # count with defaults: a constant vector
        (3, {}, ("1", "1", "1")),
        (3, {"start": "1", "step": "1", "factor": "2"}, ("1", "3", "7")),  # integer factor
        # float factor: float sequence
        (3, {"start": "1", "step": "1", "factor": "2.0"}, ("1.0", "3.0", "7.0")),
        (3, {"start": "0.1", "step": "0.2"}, ("0.1", "0.3", "0.5")),  # never 0.30000000000000004
        (3, {"start": 0.1, "step": 0.2}, ("0.1", "0.3", "0.5")),  # Python floats taken by their repr
        (3, {"step": "1", "factor": "1.3"}, ("1.0", "2.3", "3.99")),  # DIRAC RFC #15's example
        (4, {"start": "2", "step": "-3", "factor": "-1"}, ("2", "-5", "2", "-5")),
        (2, {"start": "1e3"}, ("1000.0", "1000.0")),
        (2, {"start": "1", "factor": "1e16"}, ("1.0", "10000000000000000.0")),
        (2, {"start": "0.0", "step": "0"}, ("0.0", "0.0")),
        (2, {"start": Decimal("2.50"), "step": 1}, ("2.5", "3.5")),
    ],
)
def test_sequence_values_table(n, kwargs, expected):
    assert sequence_values(n, **kwargs) == expected


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"start": "abc"}, "ParameterStart must be a number"),
        ({"step": "nan"}, "ParameterStep must be a number"),
        ({"factor": float("inf")}, "ParameterFactor must be a finite number"),
        ({"start": True}, "ParameterStart must be a number"),
        ({"start": "1_000"}, "ParameterStart must be a number"),
        ({"start": "1", "factor": "10", "n": 2000}, f"more than {MAX_DIGITS} digits"),
        ({"start": "0.5", "factor": "0.5", "n": 2000}, f"more than {MAX_DIGITS} digits"),
        ({"n": 0}, "number of job parameters must be a positive integer"),
    ],
)
def test_sequence_values_rejects(kwargs, message):
    n = kwargs.pop("n", 3)
    with pytest.raises(ValueError, match=message):
        sequence_values(n, **kwargs)


# --- parsing the description -----------------------------------------------------------------


def test_named_sequences_equal_length_dirac_multi():
    desc = {
        "Arguments": ["${Parameter.A} ${Parameter.B} $Parameter"],
        "Parameters": ["3"],
        "ParameterStart.A": ["1"],
        "ParameterStep.A": ["1"],
        "ParameterFactor.A": ["2"],
        "Parameters.B": ["a", "b", "c"],
    }
    jobs = split_parametric(desc, source_job="41")
    assert [j.description["Arguments"] for j in jobs] == [["1 a 1"], ["3 b 1"], ["7 c 1"]]
    assert jobs[1].named == (("A", "3"), ("B", "b"))
    assert jobs[1].description["Parameter.A"] == ["3"] and jobs[1].description["Parameter.B"] == ["b"]
    assert not any(k.startswith("Parameters") or k.startswith("ParameterS") for k in jobs[1].description)


@pytest.mark.parametrize(
    "desc",
    [
        {"Parameters": ["3"], "Parameters.B": ["a", "b", "c", "d"]},
        {"Parameters": ["a", "b"], "Parameters.B": ["a", "b", "c"]},
        {"Parameters.A": ["1", "2"], "Parameters.B": ["x"]},
    ],
)
def test_vector_lengths_differ_rejected(desc):
    with pytest.raises(ValueError, match="different length of parameter vectors"):
        split_parametric(desc, source_job="1")


def test_vector_lengths_differ_rejected_in_expand_jobs():
    with pytest.raises(ValueError, match="different length"):
        expand_jobs({}, [ParameterSequence(None, ("1",)), ParameterSequence("A", ("1", "2"))], source_job="1")


@pytest.mark.parametrize(
    "desc, message",
    [
        ({"Parameters": ["0"]}, "illegal number of job parameters 0"),
        ({"Parameters": ["-2"]}, "illegal number of job parameters -2"),
        ({"Parameters": ["3.0"]}, "a single value must be an integer count"),
        ({"Parameters": ["3"], "ParameterStart": ["x"]}, "ParameterStart must be a number"),
        ({"Parameters": ["3"], "ParameterStart": ["1", "2"]}, "ParameterStart must have exactly one value"),
        ({"Parameters": ["a", "b"], "ParameterStep": ["1"]}, "cannot be combined with an explicit Parameters"),
        ({"ParameterStart.A": ["1"]}, "ParameterStart.A is given but no Parameters attribute"),
        ({"Parameters": ["2"], "Parameters.A": ["1", "2"], "Parameters.a": ["3", "4"]}, "differ only in case"),
        ({"Parameters": ["2"], "parameters": ["2"]}, "Parameters is given twice"),
        ({"Parameters": ["2"], "Parameters.1x": ["1", "2"]}, "must be an identifier"),
        ({"Parameters": [["a", "b"], ["c"]]}, "values must be strings"),
        ({"Parameters": "ab"}, "must be a list of strings"),
        ({"Parameters": ["2"], "SplitID": ["7"]}, "SplitID is set by the parametric splitter"),
        ({"Parameters": ["2"], "Parameter.x": ["7"]}, "Parameter.x is set by the parametric splitter"),
    ],
)
def test_bad_parameter_attributes_rejected(desc, message):
    with pytest.raises(ValueError, match=message):
        split_parametric(desc, source_job="1")


def test_gram_style_attribute_names_are_recognised():
    desc = {
        "parameters": ["2"],
        "parameter_start": ["0.5"],
        "PARAMETERSTEP.x": ["1"],
        "arguments": ["$parameter ${PARAMETER.x}"],
    }
    jobs = split_parametric(desc, source_job="9")
    assert [j.description["arguments"] for j in jobs] == [["0.5 1"], ["0.5 2"]]


def test_no_parameters_is_a_single_job():
    assert parse_parameters({"Executable": ["/bin/true"]}) is None
    (job,) = split_parametric({"JobName": ["j_$SplitID"]}, source_job="g1")
    assert (job.index, job.split_id, job.parameter) == (0, "0", None)
    assert job.description["JobName"] == ["j_0"]
    with pytest.raises(ValueError, match="unresolved placeholder \\$Parameter"):
        split_parametric({"Arguments": ["$Parameter"]}, source_job="g1")


# --- limits --------------------------------------------------------------------------------


@SETTINGS
@given(n=st.integers(1, 60), cap=st.integers(1, 60))
def test_max_jobs_rejects_the_whole_description(n, cap):
    desc = {"Parameters": [str(n)], "ParameterStep": ["1"]}
    if n > cap:
        with pytest.raises(ValueError, match=f"{n} parametric jobs requested, more than the limit of {cap}"):
            split_parametric(desc, source_job="1", max_jobs=cap)
    else:
        assert len(split_parametric(desc, source_job="1", max_jobs=cap)) == n


def test_over_the_limit_fails_fast_without_generating():
    with pytest.raises(ValueError, match="more than the limit of 100"):
        split_parametric({"Parameters": [str(10**12)]}, source_job="1")


def test_one_bad_child_rejects_all():
    # value 5 of the sequence overflows: nothing is returned, not even the good children
    desc = {"Parameters": ["10"], "ParameterFactor": ["1" + "0" * 300]}
    with pytest.raises(ValueError, match="Parameters: parameter value 4 of the sequence has more than"):
        split_parametric(desc, source_job="1")


# --- children ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, first, last",
    [(1, "0", "0"), (9, "0", "8"), (10, "00", "09"), (11, "00", "10"), (100, "000", "099"), (101, "000", "100")],
)
def test_split_id_padding(n, first, last):
    desc = {"Parameters": [str(n)], "Out": ["out_${SplitID}.txt"]}
    jobs = split_parametric(desc, source_job="7", max_jobs=200)
    assert (jobs[0].split_id, jobs[-1].split_id) == (first, last)
    assert jobs[-1].description["Out"] == [f"out_{last}.txt"]
    assert [j.index for j in jobs] == list(range(n))


def test_dirac_rfc_15_example():
    desc = {
        "Executable": ["/bin/echo"],
        "JobName": ["parametric_${SplitSourceJob}:${SplitID}"],
        "Arguments": ["$Parameter"],
        "Parameters": ["10"],
        "ParameterStep": ["1"],
        "ParameterFactor": ["1.3"],
        "StdOutput": ["StdOut_$SplitID"],
        "OutputSandbox": ["StdOut_$SplitID", "StdErr_$SplitID"],
        "Environment": [["P", "$Parameter"], ["HOME_COPY", "$$HOME"]],
    }
    job = split_parametric(desc, source_job="41")[2]
    assert job.description == {
        "Executable": ["/bin/echo"],
        "JobName": ["parametric_41:02"],
        "Arguments": ["3.99"],
        "StdOutput": ["StdOut_02"],
        "OutputSandbox": ["StdOut_02", "StdErr_02"],
        "Environment": [["P", "3.99"], ["HOME_COPY", "$HOME"]],
        "Parameter": ["3.99"],
        "ParameterNumber": ["2"],
        "SplitID": ["02"],
        "SplitSourceJob": ["41"],
    }
    assert job.variables["Parameter"] == "3.99"
    assert (job.source_job, job.parameter) == ("41", "3.99")
    # the caller's description is not modified
    assert desc["Arguments"] == ["$Parameter"]


def test_caller_variables_and_their_limits():
    jobs = split_parametric(
        {"Parameters": ["a", "b"], "Out": ["${GridJob}_$Parameter"]}, source_job="1", variables={"GridJob": "g42"}
    )
    assert [j.description["Out"] for j in jobs] == [["g42_a"], ["g42_b"]]
    with pytest.raises(ValueError, match="would shadow"):
        split_parametric({"Parameters": ["2"]}, source_job="1", variables={"splitid": "x"})
    with pytest.raises(ValueError, match="variable name"):
        split_parametric({"Parameters": ["2"]}, source_job="1", variables={"a b": "x"})


@SETTINGS
@given(
    named=st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,5}", fullmatch=True),
        st.text(min_size=0, max_size=6),
        min_size=1,
        max_size=4,
    ).filter(lambda d: len({k.lower() for k in d}) == len(d)),
    n=st.integers(1, 15),
)
def test_every_child_carries_its_values(named, n):
    desc: dict[str, list] = {f"Parameters.{name}": [f"{v}{k}" for k in range(n)] for name, v in named.items()}
    desc["Args"] = [" ".join(f"${{Parameter.{name}}}" for name in named)]
    jobs = split_parametric(desc, source_job="src")
    assert len(jobs) == n
    for k, job in enumerate(jobs):
        assert job.index == k and int(job.split_id) == k and len(job.split_id) == len(str(n))
        assert job.source_job == "src" and job.description["SplitSourceJob"] == ["src"]
        assert dict(job.named) == {name: f"{v}{k}" for name, v in named.items()}
        # values are inserted verbatim, never rescanned (a value may contain "$")
        assert job.description["Args"] == [" ".join(f"{v}{k}" for v in named.values())]


# --- substitution --------------------------------------------------------------------------


@SETTINGS
@given(text=st.text(max_size=40))
def test_dollar_dollar_escapes_any_text(text):
    assert substitute(text.replace("$", "$$"), {}) == text


@SETTINGS
@given(
    text=st.text(alphabet=st.characters(blacklist_characters="$"), max_size=40),
    value=st.text(max_size=10),
)
def test_text_without_placeholders_is_unchanged_and_values_are_inserted_verbatim(text, value):
    assert substitute(text, {"x": value}) == text
    assert substitute(text + "${x}" + text, {"X": value}) == text + value + text


@pytest.mark.parametrize(
    "text, expected",
    [
        ("$a-$b", "1-2"),
        ("${a}${b}", "12"),
        ("${A}", "1"),  # case-insensitive
        ("$$a", "$a"),
        ("$$$a", "$1"),
        ("$1 $ 5$", "$1 $ 5$"),  # a $ not starting a name is literal
        ("${p.q}", "3"),
        ("$p.q", "$p.q".replace("$p", "P")),  # bare names stop at the dot
    ],
)
def test_substitute_table(text, expected):
    assert substitute(text, {"a": "1", "b": "2", "p.q": "3", "p": "P"}) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("$nope", "unresolved placeholder \\$nope"),
        ("x ${nope.x} y", "unresolved placeholder \\$\\{nope.x\\}"),
        ("$a_b", "unresolved placeholder \\$a_b"),
        ("${a", "unterminated placeholder"),
        ("${}", "malformed placeholder"),
        ("${a b}", "malformed placeholder"),
    ],
)
def test_substitute_errors(text, message):
    with pytest.raises(ValueError, match=message):
        substitute(text, {"a": "1"})


def test_unresolved_placeholder_names_the_attribute():
    with pytest.raises(ValueError, match="attribute Environment: unresolved placeholder \\$HOME"):
        split_parametric({"Parameters": ["2"], "Environment": [["H", "$HOME"]]}, source_job="1")


def test_bad_source_job_and_values():
    with pytest.raises(ValueError, match="source job id"):
        split_parametric({"Parameters": ["2"]}, source_job="")
    assert split_parametric({"Parameters": ["2"]}, source_job=12)[0].source_job == "12"
    with pytest.raises(ValueError, match="values must be strings or lists of strings"):
        split_parametric({"Parameters": ["2"], "Count": [3]}, source_job="1")
