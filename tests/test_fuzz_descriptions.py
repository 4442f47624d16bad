"""Property-based fuzzing of the three description forms: RSL, JSON, JDL.

Whatever the input (well-formed descriptions, near misses, raw bytes, hostile
fragments: huge numbers, deep nesting, surrogates, NULs, control characters,
values over the limits), a description ends either in a plan or in a jim
error with a one-line message that the protocol prints as printable text:

* in process, for many inputs: what ``jim submit`` and ``jim plan --dry-run``
  do before recording anything (read the file, parse, validate, choose the
  queue, split), on a site with queues so that requirements are matched;
* through the real ``jim submit`` under memory and CPU limits, for fewer
  inputs: an accepted job (``/bin/true``, one local job on the fork backend)
  or ``ERROR=``/``MESSAGE=`` lines only, nothing recorded, no traceback.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from jim.config import load
from jim.errors import JimError
from jim.jobdesc import (
    MAX_DEPTH,
    MAX_NUMBER_DIGITS,
    MAX_VALUE_CHARS,
    parse_jdl,
    parse_json,
    parse_rsl,
    read_description_file,
    split_words,
)
from jim.plan import make_plan
from jim.protocol import printable

from support.jimcli import FAST_CONFIG, Jim, kill_all

HERE = Path(__file__).parent
SITE = (HERE / "data" / "requirements" / "site.toml").read_text()
#: GRAM errors a description may end in (see README.md "Command line").
DESCRIPTION_ERRORS = {1, 4, 5, 11, 13, 14, 19, 40, 48, 50, 52, 54, 55, 64, 72, 81, 101, 102, 134, 135, 148}

# ------------------------------------------------------------------- strategies

NAMES = [
    "executable",
    "arguments",
    "count",
    "jobtype",
    "environment",
    "maxwalltime",
    "jimtype",
    "events",
    "eventsperjob",
    "cpuperevent",
    "maxlocaljobs",
    "jobname",
    "requirements",
    "queue",
    "parameters",
    "stdout",
    "lumimask",
    "Max_Wall_Time",
]
HOSTILE = st.one_of(
    st.builds(lambda n: "9" * n, st.sampled_from([MAX_NUMBER_DIGITS, MAX_NUMBER_DIGITS + 1, 5000])),
    st.builds(lambda n: "(" * n, st.sampled_from([MAX_DEPTH, MAX_DEPTH + 1, 5000])),
    st.builds(lambda n: "[" * n + "]" * n, st.sampled_from([MAX_DEPTH, MAX_DEPTH + 1, 5000])),
    st.builds(lambda n: "{" * n, st.sampled_from([MAX_DEPTH + 1, 3000])),
    st.builds(lambda n: "x" * n, st.sampled_from([MAX_VALUE_CHARS, MAX_VALUE_CHARS + 1])),
    st.builds(lambda n: " + ".join(["1"] * n), st.sampled_from([10, 2000])),
    st.sampled_from(
        ["\0", "\ud800", "\udcff", "\x1b[2J", "\r\n", "\x7f", "\u2028", "\ufeff", '"', "'", "\\", "$(", "(*", "^"]
    ),
    st.sampled_from(["undefined", "error", "1/0", "NaN", "Infinity", "-0", "1e999", "0x1F", "true"]),
)
WORD = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\0"), max_size=12),
    st.sampled_from(["/bin/true", "1", "0", "-3", "3 4", "2.5", "single", "multiple", "montecarlo", "a=b"]),
    st.integers(-(10**30), 10**30).map(str),
)
REQUIREMENT = st.sampled_from(
    [
        "WallTimeLimit >= 7200",
        'member("bigmem", Tag)',
        "GPU > 0 && MaxRAM >= 8000",
        '[ Tag = {"gpu"}; MaxRAM = 8000 ]',
        "Tag=bigmem",
        "WallTimeLimit=",
        "other.Foo =?= undefined",
        "(((WallTimeLimit)))",
    ]
)


def _insert(text: str, fragment: str, where: float) -> str:
    i = int(len(text) * where)
    return text[:i] + fragment + text[i:]


def hostile(base: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``base``, sometimes with hostile fragments inserted at random places."""
    return st.builds(
        lambda text, frags: _apply(text, frags),
        base,
        st.lists(st.tuples(HOSTILE, st.floats(0, 1)), max_size=2),
    )


def _apply(text: str, frags: list[tuple[str, float]]) -> str:
    for fragment, where in frags:
        text = _insert(text, fragment, where)
    return text


def _rsl_literal(word: str, how: int) -> str:
    if how == 0 and word and not any(c in word for c in "+&|()=<>!\"'^#$ \t\r\n\f\v"):
        return word
    if how == 1:
        return "'" + word.replace("'", "''") + "'"
    return '"' + word.replace('"', '""') + '"'


RSL_VALUE = st.one_of(
    st.builds(_rsl_literal, WORD, st.integers(0, 2)),
    st.builds(lambda a, b: f"({_rsl_literal(a, 2)} {_rsl_literal(b, 2)})", WORD, WORD),
    st.builds(lambda r: _rsl_literal(r, 2), REQUIREMENT),
    st.sampled_from(["$(HOME)/x", "$(A)", "$(NOPE)", "a#b", "(* c *)", "^%x%"]),
)
RSL = st.builds(
    lambda attrs, subst: (
        "&"
        + ("(rsl_substitution=(A aa))" if subst else "")
        + "".join(f"({name}={' '.join(values)})" for name, values in attrs)
    ),
    st.lists(st.tuples(st.sampled_from(NAMES), st.lists(RSL_VALUE, min_size=0, max_size=3)), max_size=6),
    st.booleans(),
).map(lambda text: "&(executable=/bin/true)" + text[1:] if "executable" not in text else text)

JSON_LEAF = st.one_of(
    WORD,
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)
JSON_VALUE = st.recursive(JSON_LEAF, lambda inner: st.lists(inner, max_size=3), max_leaves=6)
JSON_DOC = st.builds(
    lambda attrs, ascii_only: json.dumps({"executable": ["/bin/true"], **attrs}, ensure_ascii=ascii_only),
    st.dictionaries(st.sampled_from(NAMES), JSON_VALUE, max_size=6),
    st.booleans(),
)

CLASSAD_CONSTANT = st.one_of(
    st.builds(json.dumps, WORD),
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(["true", "false", "2.5", "-1", "2 * 60", '{"a", "b"}', "{1, 2}", "{}"]),
)
CLASSAD_EXPR = st.one_of(
    CLASSAD_CONSTANT,
    REQUIREMENT,
    st.sampled_from(["undefined", "error", "NumJobs", 'strcat("a", "b")', "1/0", "[ a = 1 ]", "other.X", "x ? 1 : 2"]),
)
JDL = st.builds(
    lambda attrs, new: (
        "[ " + "; ".join(f"{n} = {e}" for n, e in attrs) + " ]" if new else "\n".join(f"{n} = {e}" for n, e in attrs)
    ),
    st.lists(st.tuples(st.sampled_from(NAMES), CLASSAD_EXPR), max_size=6).map(
        lambda a: [("Executable", '"/bin/true"'), *a]
    ),
    st.booleans(),
)

RAW_TEXT = st.text(max_size=200)
RAW_BYTES = st.binary(max_size=200)


def as_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


# ------------------------------------------------------------------- in process


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    config_file = root / "jim.toml"
    config_file.write_text(FAST_CONFIG + "\n" + SITE)
    return SimpleNamespace(
        config=load({"JIM_CONFIG": str(config_file), "JIM_HOME": str(root / "home")}), root=root, home=root / "home"
    )


def judge(site, form: str, data: str | bytes) -> None:
    """What ``jim submit`` does with ``data`` before it records anything: a plan, or a jim error
    whose protocol lines are printable; never another exception, never anything written."""
    try:
        if form == "rsl":
            text = data if isinstance(data, str) else data.decode("utf-8", "surrogateescape")
            desc = parse_rsl(text, env={"HOME": "/home/u"})
        else:
            raw = data if isinstance(data, bytes) else as_bytes(data)
            fd, name = tempfile.mkstemp(dir=site.root)
            try:
                os.write(fd, raw)
                os.close(fd)
                text = read_description_file(name)
            finally:
                os.unlink(name)
            desc = parse_json(text) if form == "json" else parse_jdl(text, extra_known=())
        make_plan(site.config, desc, dry_run=True)
        event("accepted")
    except JimError as e:
        event(f"ERROR={e.gram_error}")
        assert e.gram_error in DESCRIPTION_ERRORS, (e.gram_error, e.message)
        for line in (f"ERROR={printable(e.gram_error)}\n", f"MESSAGE={printable(e.message)}\n"):
            assert line.endswith("\n") and line[:-1].isprintable() and "\n" not in line[:-1], line
            line.encode("utf-8")
    assert not site.home.exists() or not any(site.home.rglob("*.xml")), "a dry run recorded something"


FUZZ = settings(
    max_examples=1000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(data=st.one_of(RSL, hostile(RSL), hostile(RAW_TEXT), RAW_BYTES))
def test_rsl(site, data):
    judge(site, "rsl", data)


@FUZZ
@given(data=st.one_of(JSON_DOC, hostile(JSON_DOC), hostile(RAW_TEXT), RAW_BYTES))
def test_json(site, data):
    judge(site, "json", data)


@FUZZ
@given(data=st.one_of(JDL, hostile(JDL), hostile(RAW_TEXT), RAW_BYTES))
def test_jdl(site, data):
    judge(site, "jdl", data)


@settings(max_examples=500, deadline=None, database=None)
@given(st.text(alphabet=st.sampled_from(list("ab '\"\\\t\n")), max_size=30))
def test_split_words_is_shlex_split(text):
    try:
        expected: list[str] | str = shlex.split(text)
    except ValueError as e:
        expected = str(e)
    try:
        got: list[str] | str = split_words(text)
    except ValueError as e:
        got = str(e)
    assert got == expected


# ------------------------------------------------------------------- the real command, under limits


def _limits() -> None:
    import resource  # (lazy: only in the child)

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (20, 20))


def _cli_case(form: str, data: str | bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, config = Path(tmp) / "home", Path(tmp) / "jim.toml"
        config.write_text(FAST_CONFIG)
        jim = Jim(home, config)
        if form == "rsl":
            arg = data if isinstance(data, bytes) else as_bytes(data)
            arg = arg.replace(b"\0", b"")  # (argv cannot carry a NUL,
            assume(len(arg) < 128 * 1024)  # nor a string of 128 KiB: Linux's MAX_ARG_STRLEN)
            args = [b"--rsl", arg]
        else:
            path = Path(tmp) / f"job.{form}"
            path.write_bytes(data if isinstance(data, bytes) else as_bytes(data))
            args = [b"--description" if form == "json" else b"--jdl", bytes(path)]
        try:
            proc = subprocess.run(
                [sys.executable.encode(), b"-m", b"jim", b"submit", *args],
                capture_output=True,
                env=jim.env,
                timeout=60,
                preexec_fn=_limits,
            )
            lines = proc.stdout.decode("utf-8").splitlines()
            keys = [line.split("=", 1)[0] for line in lines]
            assert b"Traceback" not in proc.stdout and b"Traceback" not in proc.stderr, proc.stderr[-3000:]
            assert all(line.isprintable() for line in lines), lines
            event(f"{form}: " + (lines[0] if proc.returncode else "accepted"))
            if proc.returncode == 0:
                assert keys == ["JOB_ID", "JOB_STATE"], lines
            else:
                assert proc.returncode == 1 and keys == ["ERROR", "MESSAGE"], (proc.returncode, lines)
                assert int(lines[0].split("=", 1)[1]) in DESCRIPTION_ERRORS, lines
                recorded = [p for d in ("db", "jobs") if (home / d).is_dir() for p in (home / d).iterdir()]
                assert not [
                    p for p in recorded if p.name != "index.xml" and (p.suffix in (".xml", ".state") or p.is_dir())
                ], recorded
        finally:
            kill_all(home)


def _trivial(attrs: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """No count and no job type: an accepted job is one /bin/true on the fork backend."""
    return [(n, v) for n, v in attrs if n.lower() not in ("count", "jimtype", "parameters", "jobtype", "events")]


CLI_RSL = st.builds(
    lambda attrs: "&(executable=/bin/true)" + "".join(f"({n}={' '.join(v)})" for n, v in _trivial(attrs)),
    st.lists(st.tuples(st.sampled_from(NAMES), st.lists(RSL_VALUE, max_size=2)), max_size=4),
)
CLI_JSON = st.builds(
    lambda attrs: json.dumps({"executable": ["/bin/true"], **dict(_trivial(list(attrs.items())))}, ensure_ascii=False),
    st.dictionaries(st.sampled_from(NAMES), JSON_VALUE, max_size=4),
)
CLI_JDL = st.builds(
    lambda attrs: '[ Executable = "/bin/true"; ' + "; ".join(f"{n} = {e}" for n, e in _trivial(attrs)) + " ]",
    st.lists(st.tuples(st.sampled_from(NAMES), CLASSAD_EXPR), max_size=4),
)


@pytest.mark.slow
@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    case=st.one_of(
        st.tuples(st.just("rsl"), st.one_of(CLI_RSL, hostile(CLI_RSL), RAW_BYTES)),
        st.tuples(st.just("json"), st.one_of(CLI_JSON, hostile(CLI_JSON), RAW_BYTES)),
        st.tuples(st.just("jdl"), st.one_of(CLI_JDL, hostile(CLI_JDL), RAW_BYTES)),
    )
)
def test_cli_submit_under_limits(case):
    _cli_case(*case)
