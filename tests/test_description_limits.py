"""Hostile job descriptions: bounded before any work, refused with a GRAM error, nothing recorded.

Every case runs the real ``jim`` command (``jim submit``, or ``jim plan --dry-run``)
under resource limits, so that a regression ends in a failed test instead of
a machine out of memory: whatever the input, stdout carries ``ERROR=`` and
``MESSAGE=`` lines only (printable, one line each) and no grid job is recorded.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from jim import jobdesc
from jim.errors import DescriptionError, InvalidCount, UnknownAttribute
from jim.jobdesc import parse_jdl, parse_json, parse_rsl, split_words

MEMORY = 3 << 30  # address space of one jim run (the ClassAd bindings map a lot)
CPU_SECONDS = 20


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


def run_jim(jim, *args: str | bytes, timeout: float = 30) -> subprocess.CompletedProcess:
    """``jim ARGS`` (arguments may be bytes: what a gatekeeper may hand over) under memory and CPU limits."""
    return subprocess.run(
        [sys.executable.encode(), b"-m", b"jim", *(a if isinstance(a, bytes) else a.encode() for a in args)],
        capture_output=True,
        env=jim.env,
        timeout=timeout,
        preexec_fn=_limits,
    )


def refused(jim, *args: str | bytes, errors: tuple[int, ...] = (48,)) -> str:
    """Run a protocol command that must be refused; returns its MESSAGE."""
    proc = run_jim(jim, *args)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    lines = proc.stdout.decode("ascii").splitlines()  # (escaped: printable ASCII only)
    assert [line.split("=", 1)[0] for line in lines] == ["ERROR", "MESSAGE"], lines
    assert all(line.isprintable() for line in lines), lines
    assert int(lines[0].split("=", 1)[1]) in errors, lines
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")[-2000:]
    assert_nothing_recorded(jim.home)
    return lines[1].split("=", 1)[1]


def assert_nothing_recorded(home: Path) -> None:
    recorded = [p.name for d in ("db", "jobs") if (home / d).is_dir() for p in (home / d).iterdir()]
    recorded = [n for n in recorded if not n.startswith(".") and n not in ("index.xml", "index.json")]
    assert not recorded, recorded


def write(tmp_path: Path, name: str, data: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return str(path)


# ------------------------------------------------------------------- JDL (ClassAd)


@pytest.mark.parametrize(
    "value,word",
    [("NumJobs", "NumJobs"), ("undefined", "undefined"), ("error", "error"), ("1/0", "error"), ('"a" + 1', "error")],
)
def test_jdl_undefined_or_error_value_is_refused_naming_the_attribute(jim_env, tmp_path, value, word):
    path = write(tmp_path, "job.jdl", f'[ Executable = "/bin/true"; Count = {value} ]')
    message = refused(jim_env, "submit", "--jdl", path, errors=(48, 134))
    assert "Count" in message and word in message


def test_jdl_constant_expressions_still_evaluate():
    d = parse_jdl('[ Executable = "/bin/true"; MaxWallTime = 2 * 60; Count = -(-3); Arguments = {"a", 1, true} ]')
    assert d.get("maxwalltime") == "120" and d.get("count") == "3" and d.arguments == ["a", "1", "yes"]


def test_jdl_expression_of_100000_terms_is_refused_before_the_classad_library_sees_it(jim_env, tmp_path):
    path = write(
        tmp_path, "job.jdl", '[ Executable = "/bin/true"; Requirements = ' + " + ".join(["1"] * 100_000) + " ]"
    )
    message = refused(jim_env, "submit", "--jdl", path)
    assert "operators" in message


@pytest.mark.parametrize(
    "expr,fragment",
    [
        ("(" * 200 + "1" + ")" * 200, "nested"),
        ("{" + ", ".join(["1"] * 20_000) + "}", "elements"),
        ("1" * 5000, "digits"),
        ("-" * 5000 + "1", "operators"),
    ],
)
def test_jdl_bounds(expr, fragment):
    with pytest.raises(DescriptionError, match=fragment):
        parse_jdl(f'[ Executable = "/bin/true"; InputFiles = {expr} ]')


def test_requirement_expression_of_rsl_is_bounded_too(jim_env):
    """An RSL requirement is handed to the ClassAd library as well."""
    rsl = '&(executable=/bin/true)(requirements="' + "+".join(["1"] * 30_000) + '")'
    message = refused(jim_env, "submit", "--rsl", rsl, errors=(48, 134))
    assert "operators" in message


def test_jdl_unknown_names_are_refused_before_anything_is_evaluated():
    text = '[ Executable = "/bin/true"; Foo = strcat("a", "b"); Bar = 1/0 ]'
    with pytest.raises(UnknownAttribute, match="'bar'.*'foo'"):
        parse_jdl(text, extra_known=())
    with pytest.raises(DescriptionError, match="'Bar' is error"):  # (without the check: the value is refused)
        parse_jdl(text)


def test_jdl_unknown_names_refused_by_submit(jim_env, tmp_path):
    big = '"' + "x" * 4000 + '"'
    attrs = "; ".join(f"Unknown{i} = strcat({big}, {big})" for i in range(120))
    path = write(tmp_path, "job.jdl", f'[ Executable = "/bin/true"; {attrs} ]')
    message = refused(jim_env, "submit", "--jdl", path, errors=(1,))
    assert "'unknown0'" in message and "more" in message


def test_jdl_arguments_split_like_a_shell_in_linear_time():
    d = parse_jdl('[ Executable = "/bin/true"; Arguments = "a \'b c\' \\"d \\\\\\" e\\" f\\\\ g" ]')
    assert d.arguments == ["a", "b c", 'd " e', "f g"]
    # 4 MB of one word: shlex.split takes minutes (it grows the word one character at a time)
    code = "from jim.jobdesc import split_words; w = split_words('x' * 4_000_000 + ' y'); assert len(w) == 2"
    proc = subprocess.run([sys.executable, "-c", code], preexec_fn=_limits, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "text",
    ["", "a", "a b", "'a b' c", '"a \\" b"', "a\\ b", "'' \"\"", "a''b", '"\\x"', "a\\\nb", "\t a \r\n b "],
)
def test_split_words_is_shlex_split(text):
    import shlex  # (lazy: the reference only)

    assert split_words(text) == shlex.split(text)


@pytest.mark.parametrize("text", ["'a", '"a', "a\\", '"a\\"'])
def test_split_words_errors_like_shlex(text):
    import shlex  # (lazy: the reference only)

    with pytest.raises(ValueError) as mine:
        split_words(text)
    with pytest.raises(ValueError) as theirs:
        shlex.split(text)
    assert str(mine.value) == str(theirs.value)


# ------------------------------------------------------------------- files that are not descriptions


def test_description_from_a_device_is_refused(jim_env):
    message = refused(jim_env, "submit", "--description", "/dev/zero")
    assert "not a regular file" in message


@pytest.mark.parametrize("option", ["--description", "--jdl"])
def test_description_from_a_fifo_does_not_block(jim_env, tmp_path, option):
    fifo = tmp_path / "desc.fifo"
    os.mkfifo(fifo)
    message = refused(jim_env, "submit", option, str(fifo))
    assert "not a regular file" in message


def test_description_larger_than_the_limit_is_refused(jim_env, tmp_path):
    path = write(tmp_path, "big.json", '{"executable": ["/bin/true"], "x": ["' + "a" * (2 << 20) + '"]}')
    message = refused(jim_env, "submit", "--description", path)
    assert str(jobdesc.MAX_DESCRIPTION_BYTES) in message


def test_description_through_a_symlink_to_a_regular_file_is_read(jim_env, tmp_path):
    real = write(tmp_path, "real.json", json.dumps({"executable": ["/bin/true"]}))
    link = tmp_path / "link.json"
    link.symlink_to(real)
    proc = run_jim(jim_env, "plan", "--dry-run", "--description", str(link))
    assert proc.returncode == 0, proc.stderr


def test_description_not_utf8_is_refused(jim_env, tmp_path):
    path = write(tmp_path, "job.json", b'{"executable": ["/bin/\xff"]}')
    message = refused(jim_env, "submit", "--description", path)
    assert "not UTF-8" in message and "0xff" in message


# ------------------------------------------------------------------- undecodable and hostile text


def test_rsl_with_a_byte_that_is_not_utf8(jim_env):
    message = refused(jim_env, "submit", "--rsl", b"&(executable=/bin/true)(jobtype=\xff)")
    assert "0xff" in message


def test_rsl_with_a_byte_that_is_not_utf8_in_an_echoed_path(jim_env):
    message = refused(jim_env, "submit", "--description", b"/nonexistent/\xff\x1b.json")
    assert "\\xff\\x1b" in message


def test_json_with_a_lone_surrogate(jim_env, tmp_path):
    path = write(tmp_path, "job.json", '{"executable": ["/bin/true"], "jobtype": ["\\ud800"]}')
    message = refused(jim_env, "submit", "--description", path)
    assert "surrogate" in message


def test_control_characters_are_escaped_in_the_message(jim_env):
    message = refused(jim_env, "submit", "--rsl", "&(executable=/bin/true)(jobtype=\x1b[31mred\x07)", errors=(19,))
    assert "\\x1b[31mred\\x07" in message


@pytest.mark.parametrize(
    "text,fragment",
    [
        ('{"executable": ["/bin/true"], "a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested"),
        ('{"executable": ["/bin/true"], "count": [' + "9" * 5000 + "]}", "digits"),
        ('{"executable": ["/bin/true"], "count": [1e' + "9" * 5000 + "]}", "digits"),
        ('{"executable": ["/bin/true"], "count": [NaN]}', "not JSON"),
        ('{"executable": ["/bin/true"], "a": ["' + "x" * 200_000 + '"]}', "longer than"),
        ("{" + ", ".join(f'"a{i}": ["x"]' for i in range(300)) + "}", "attributes"),
        ('{"executable": ["/bin/true"], "a": ["x\\u0000y"]}', "NUL"),
    ],
)
def test_json_bounds(jim_env, tmp_path, text, fragment):
    path = write(tmp_path, "job.json", text)
    assert fragment in refused(jim_env, "submit", "--description", path)


@pytest.mark.parametrize(
    "rsl,fragment",
    [
        ("&(executable=/bin/true)(a=" + "(" * 50_000 + ")" * 50_000 + ")", "nested"),
        ("&(executable=/bin/true)" + "".join(f"(a{i}=x)" for i in range(300)), "attributes"),
        ("&(rsl_substitution=(A " + "x" * 60_000 + "))(arguments=" + "$(A)" * 20 + ")", "longer than"),
        ("&(rsl_substitution=(A " + "x" * 60_000 + "))(arguments=" + " $(A)" * 20 + ")", "in all"),
        ("&(executable=/bin/true)(a=" + " x" * 20_000 + ")", "values"),
    ],
)
def test_rsl_bounds(jim_env, rsl, fragment):
    assert fragment in refused(jim_env, "submit", "--rsl", rsl)


def test_count_with_two_values_is_an_invalid_count(jim_env):
    message = refused(jim_env, "submit", "--rsl", "&(executable=/bin/true)(count=3 4)", errors=(14,))
    assert "count" in message


def test_count_of_5000_digits_is_an_invalid_count():
    with pytest.raises(InvalidCount, match="digits"):
        parse_rsl("&(executable=/bin/true)(count=" + "9" * 5000 + ")").check_common()


def test_limits_are_in_one_place():
    assert jobdesc.MAX_DESCRIPTION_BYTES >= 64 * 1024 and jobdesc.MAX_DEPTH >= 4
    assert parse_json('{"executable": ["/bin/true"], "env": [[["a"]]]}').attrs["env"] == [[["a"]]]
