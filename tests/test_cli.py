"""The command line: its help, its exit statuses, the protocol commands' error envelope, and
``jim poll``'s own argument reader and light path.

Grid jobs here are poll summaries written by hand (``db/<id>.state``): ``jim poll`` reads nothing else.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jim.arguments import COMMANDS
from jim.background import MONITOR_COMMAND, WORKER_COMMAND, monitor_lock
from jim.errors import JobNotFound
from jim.locks import SingleInstance
from jim.poll import read_args
from jim.protocol import Answer

DONE = "20260101-000000-abcdef01"
ACTIVE = "20260101-000000-abcdef02"
BROKEN = "20260101-000000-abcdef03"  # (its summary is a directory: reading it fails as nothing jim expects)


def _home(jim_env) -> Path:
    """The test's home with a DONE, an ACTIVE and a broken grid job."""
    db = jim_env.home / "db"
    db.mkdir(parents=True)
    jim_env.home.chmod(0o700)
    (db / f"{DONE}.state").write_text("JOB_STATE=DONE\nEXIT_CODE=0\n#UNSUBMITTED=0\n#CANCEL=0\n")
    (db / f"{ACTIVE}.state").write_text("JOB_STATE=ACTIVE\n#UNSUBMITTED=0\n#CANCEL=0\n")
    (db / f"{BROKEN}.state").mkdir()
    (jim_env.home / "locks").mkdir()
    return jim_env.home


# ---- jim poll's arguments


@pytest.mark.parametrize(
    "args, ids, unknown",
    [
        (["--job-id", "A"], ["A"], []),
        (["-j", "A", "--job-id=B", "--job-id", "C"], ["A", "B", "C"], []),
        (["--job-id", "A", "--description", "/x/desc.json"], ["A"], []),  # (the GRAM module hands it again)
        (["--rsl", "--job-id", "A"], [], ["A"]),  # (the value of --rsl, whatever it looks like)
        (["--job-id"], [], ["--job-id"]),
        (["--job-id", "A", "--bogus"], ["A"], ["--bogus"]),
    ],
)
def test_the_single_poll_reads_ids_and_skips_a_description(args, ids, unknown):
    found = read_args(args)
    assert (found.as_json, found.ids, found.unknown, found.active) == (False, ids, unknown, False)


def test_the_json_poll_reads_ids_and_active_and_skips_nothing():
    found = read_args(["--json", "--active", "-j", "A", "--description", "x", "--job-id=B"])
    assert (found.as_json, found.ids, found.unknown, found.active) == (True, ["A", "B"], ["--description", "x"], True)


def test_the_answers_of_poll_and_their_exit_statuses(jim_env):
    _home(jim_env)
    done = jim_env.protocol("poll", "--job-id", DONE, "--description", "/x")
    assert (done["JOB_STATE"], done["EXIT_CODE"], done["_rc"], len(done)) == ("DONE", "0", "0", 4)
    for argv, code in (
        (["poll"], "46"),
        (["poll", "--job-id", "x"], "156"),
        (["poll", "--job-id", BROKEN[:-1]], "156"),
    ):
        out = jim_env.protocol(*argv)
        assert (out["ERROR"], out["_rc"]) == (code, "1"), (argv, out)
    bulk = jim_env.run("poll", "--json", "--job-id", DONE, "--bogus")
    assert bulk.returncode == 1 and json.loads(bulk.stdout) == {
        "ERROR": 46,
        "MESSAGE": "unknown argument '--bogus' to jim poll --json",
    }


# ---- the help and the exit statuses


def test_help_lists_every_command_and_the_environment(jim_env):
    proc = jim_env.run("--help")
    assert proc.returncode == 0, proc.stderr
    listed = [c for c in COMMANDS if c not in (WORKER_COMMAND, MONITOR_COMMAND)]
    assert {"arc-install", "arc-backend", "gram-install", "submit", "poll", "cancel", "serve"} <= set(listed)
    for command in listed:
        assert f"\n    {command} " in proc.stdout or f"\n    {command}\n" in proc.stdout, command
    assert WORKER_COMMAND not in proc.stdout and MONITOR_COMMAND not in proc.stdout
    for note in ("JIM_HOME", "JIM_CONFIG", "--as-owner", "JIM_AS_OWNER=1", "ERROR=47", "KEY=VALUE"):
        assert note in proc.stdout, note
    for argv in ([], ["-v"]):  # no command: the same help, exit status 2
        bare = jim_env.run(*argv)
        assert (bare.returncode, bare.stdout) == (2, proc.stdout)
    assert jim_env.run("help").stdout == proc.stdout
    assert jim_env.run("--version").stdout.startswith("jim ")


@pytest.mark.parametrize(
    "argv",
    [["submit"], ["submit", "--rsl"], ["cancel"], ["cancel", "--job-id", DONE, "--bogus"], ["-v", "poll"]],
)
def test_bad_arguments_to_a_protocol_command_are_error_46_and_exit_status_2(jim_env, argv):
    out = jim_env.protocol(*argv)
    assert set(out) == {"ERROR", "MESSAGE", "_rc", "_stderr"}, out
    assert (out["ERROR"], out["_rc"]) == ("46", "2") and "(see jim --help)" in out["MESSAGE"]
    assert "usage: jim" in out["_stderr"]


def test_bad_arguments_to_a_command_for_people_are_exit_status_2(jim_env):
    proc = jim_env.run("status")
    assert (proc.returncode, proc.stdout) == (2, "") and "usage: jim status" in proc.stderr
    proc = jim_env.run("no-such-command")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


# ---- the error envelope


def test_an_unexpected_error_is_error_17_with_its_traceback_in_jims_log(jim_env):
    home = _home(jim_env)
    for argv in (["poll", "--job-id", BROKEN], ["-v", "poll", "--job-id", BROKEN]):
        out = jim_env.protocol(*argv)
        assert (out["ERROR"], out["_rc"]) == ("17", "1"), out
        assert out["MESSAGE"].startswith("internal error in jim poll: IsADirectoryError: ")
        assert out["MESSAGE"].endswith("(see jim's log)")
    bulk = jim_env.run("poll", "--json", "--job-id", DONE, "--job-id", BROKEN)
    answer = json.loads(bulk.stdout)
    assert bulk.returncode == 1 and set(answer) == {"ERROR", "MESSAGE"} and answer["ERROR"] == 17
    assert answer["MESSAGE"].startswith("internal error in jim poll: IsADirectoryError: ")
    log = (home / "log" / "jim.log").read_text()
    assert log.count("unexpected error in jim poll") == 3 and log.count("Traceback") == 3
    assert "IsADirectoryError" in log


def test_the_envelope_turns_a_jim_error_into_its_lines_and_drops_the_others(capfd):
    with Answer("cancel") as out:
        out.emit("JOB_STATE", "ACTIVE")
        raise JobNotFound("no grid job\nx")
    assert out.code == 1
    assert capfd.readouterr().out == "ERROR=156\nMESSAGE=no grid job x\n"


def test_the_envelope_answers_error_17_for_anything_else(capfd):
    with Answer("submit") as out:
        raise RuntimeError("boom\non two lines")
    assert out.code == 1
    assert capfd.readouterr().out == (
        "ERROR=17\nMESSAGE=internal error in jim submit: RuntimeError: boom on two lines (see jim's log)\n"
    )


def test_the_envelope_writes_the_answer_and_lets_an_interrupt_go_on(capfd):
    with pytest.raises(KeyboardInterrupt), Answer("poll") as out:
        out.emit("JOB_STATE", "DONE")
        os.write(1, b"a plug-in's chatter\n")  # (as a library in C would: file descriptor 1)
        raise KeyboardInterrupt
    captured = capfd.readouterr()
    assert captured.out == "JOB_STATE=DONE\n" and "a plug-in's chatter" in captured.err


# ---- jim poll's light path


def _loaded_by_poll(jim_env, *args: str) -> set[str]:
    code = (
        "import sys; before = set(sys.modules); from jim.cli import main; code = main(sys.argv[1:]); "
        "print(sorted(set(sys.modules) - before), file=sys.stderr); sys.exit(code)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], env=jim_env.env, capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert proc.returncode == 0, proc.stderr
    return set(ast.literal_eval(proc.stderr.strip().splitlines()[-1]))


#: What every ``jim poll`` loads: jim.cli's dispatch, the poll, its answer, the summary's reader, the home's check.
POLL_MODULES = {
    "jim",
    "jim.cli",
    "jim.poll",
    "jim.protocol",
    "jim.summary",
    "jim.background",
    "jim.jobid",
    "jim.ownership",
}


def test_poll_loads_only_what_its_answer_needs(jim_env):
    """No argparse, logging, json, configuration, error classes or lxml: a poll that answers loads
    the summary's reader and, for a grid job that has not ended, the lock probe of its background processes."""
    home = _home(jim_env)
    assert _loaded_by_poll(jim_env, "poll", "--job-id", DONE) == POLL_MODULES
    monitor = SingleInstance(monitor_lock(home))  # (running: the poll starts nothing)
    assert monitor.acquire()
    try:
        active = _loaded_by_poll(jim_env, "poll", "--job-id", ACTIVE)
        bulk = _loaded_by_poll(jim_env, "poll", "--json", "--job-id", ACTIVE, "--job-id", DONE)
    finally:
        monitor.release()
    assert active == POLL_MODULES | {"jim.locks", "fcntl"}
    assert bulk - active == {"json", "json.decoder", "json.encoder", "json.scanner", "_json"}
