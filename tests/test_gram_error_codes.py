"""GRAM's own error numbers at submit, as the stock job manager's failure tests expect them: a
malformed ``arguments``, ``directory``, ``environment``, ``executable`` or ``stdin`` value, and a
``directory``, ``executable`` or ``stdin`` that the gatekeeper host cannot find."""

from __future__ import annotations

import json

import pytest

from jim.errors import DescriptionError, GramError
from jim.jobdesc import parse_rsl

#: The stock failure tests' descriptions (gram/jobmanager/source/test/jobmanager/failure_test), each
#: with the number the stock job manager answers.
MALFORMED = [
    ("&(executable=/bin/sh)(arguments=(incorrect format (for arguments)))", GramError.RSL_ARGUMENTS),
    ('&(executable=/bin/sh)(directory=("can\'t parse this"))', GramError.RSL_DIRECTORY),
    ("&(executable=/bin/sh)(environment=(balanced pair) (unbalanced pair here))", GramError.RSL_ENVIRONMENT),
    ("&(executable=/bin/sh)(environment=just_a_scalar)", GramError.RSL_ENVIRONMENT),
    ("&(executable=(/bin/sh))", GramError.RSL_EXECUTABLE),
    ("&(executable=/bin/sh)(stdin = a sequence)", GramError.RSL_STDIN),
    ("&(executable=/bin/sh)(directory=a b)", GramError.RSL_DIRECTORY),
    ('&(executable="")', GramError.RSL_EXECUTABLE),
]

MISSING = [
    ("&(executable=/bin/sh)(directory=/etc/no/such/directory)", GramError.BAD_DIRECTORY),
    ("&(executable=/no/such/executable)", GramError.EXECUTABLE_NOT_FOUND),
    ("&(executable=/etc/passwd)", GramError.EXECUTABLE_PERMISSIONS),
    ("&(executable=/bin/sh)(stdin=/etc/no/such/file)", GramError.STDIN_NOT_FOUND),
]


def test_the_numbers_are_grams():
    """globus_gram_protocol_constants.h's values."""
    assert (GramError.BAD_DIRECTORY, GramError.EXECUTABLE_NOT_FOUND, GramError.STDIN_NOT_FOUND) == (4, 5, 11)
    assert (GramError.RSL_ARGUMENTS, GramError.RSL_DIRECTORY, GramError.RSL_ENVIRONMENT) == (50, 52, 54)
    assert (GramError.RSL_EXECUTABLE, GramError.RSL_STDIN, GramError.EXECUTABLE_PERMISSIONS) == (55, 64, 72)


@pytest.mark.parametrize("rsl,code", MALFORMED)
def test_malformed_gram_values_in_process(rsl, code):
    with pytest.raises(DescriptionError) as e:
        parse_rsl(rsl).check_common()
    assert e.value.gram_error == code, e.value.message
    assert "\n" not in e.value.message


def _refused(jim_env, rsl: str, code: int, **kw) -> dict:
    jobs = jim_env.job_ids()
    out = jim_env.protocol("submit", "--rsl", rsl, **kw)
    assert out.get("ERROR") == str(code), (rsl, out)
    assert set(out) == {"ERROR", "MESSAGE", "_rc", "_stderr"}, out
    assert out["MESSAGE"] and out["_rc"] == "1" and "Traceback" not in out["_stderr"]
    assert jim_env.job_ids() == jobs  # nothing recorded
    return out


@pytest.mark.parametrize("rsl,code", MALFORMED)
def test_malformed_gram_values_through_submit(jim_env, rsl, code):
    _refused(jim_env, rsl, code)


@pytest.mark.parametrize("rsl,code", MISSING)
def test_paths_not_found_through_submit(jim_env, rsl, code):
    _refused(jim_env, rsl, code)


def test_relative_paths_are_checked_against_directory_and_home(jim_env, tmp_path):
    home = tmp_path / "userhome"
    work = home / "work"
    work.mkdir(parents=True)
    (work / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (work / "run.sh").chmod(0o755)
    (work / "plain.txt").write_text("x\n")
    (work / "in.txt").write_text("from stdin\n")
    env = {"HOME": str(home)}
    _refused(jim_env, "&(executable=/bin/true)(directory=nowhere)", GramError.BAD_DIRECTORY, env=env)
    _refused(jim_env, "&(executable=/bin/true)(directory=work/plain.txt)", GramError.BAD_DIRECTORY, env=env)
    _refused(jim_env, "&(executable=./run.sh)", GramError.EXECUTABLE_NOT_FOUND, env=env)  # (home, not work)
    _refused(jim_env, "&(executable=./plain.txt)(directory=work)", GramError.EXECUTABLE_PERMISSIONS, env=env)
    _refused(jim_env, f"&(executable={work})", GramError.EXECUTABLE_PERMISSIONS, env=env)
    _refused(jim_env, "&(executable=/bin/cat)(stdin=in.txt)", GramError.STDIN_NOT_FOUND, env=env)  # (home)
    out = tmp_path / "out.txt"
    job = jim_env.submit(f"&(executable=./run.sh)(directory=work)(stdin=in.txt)(stdout={out})", env=env)
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    assert out.read_text() == "ran\n"


def test_json_descriptions_answer_the_same_numbers(jim_env, tmp_path):
    cases = [
        ({"executable": [["/bin/sh"]]}, GramError.RSL_EXECUTABLE),
        ({"executable": "/bin/sh", "arguments": ["a", ["b"]]}, GramError.RSL_ARGUMENTS),
        ({"executable": "/bin/sh", "environment": ["A"]}, GramError.RSL_ENVIRONMENT),
        ({"executable": "/bin/sh", "stdin": ["a", "b"]}, GramError.RSL_STDIN),
        ({"executable": "/no/such/executable"}, GramError.EXECUTABLE_NOT_FOUND),
    ]
    for i, (data, code) in enumerate(cases):
        f = tmp_path / f"d{i}.json"
        f.write_text(json.dumps(data))
        jobs = jim_env.job_ids()
        out = jim_env.protocol("submit", "--description", str(f))
        assert out.get("ERROR") == str(code), (data, out)
        assert "\n" not in out["MESSAGE"] and "Traceback" not in out["_stderr"]
        assert jim_env.job_ids() == jobs
