"""jim as a BLAH backend, without a pool: blahpd's submit options as a description, BLAH's states,
the status answer, the local submit attributes hook and ``jim blah-install``."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from jim.blah import hook, install, status, submitargs
from jim.blah.steps import known_attributes
from jim.errors import DescriptionError, GramError
from jim.jobdesc import JIM_ATTRIBUTES

KNOWN = set(JIM_ATTRIBUTES)


def describe(*argv: str, site: list[tuple[str, str]] | None = None):
    return submitargs.to_description(submitargs.read(list(argv)), known=KNOWN, site_attributes=site or [])


# what blahpd 23 passes for a Condor-G job (GridmanagerLog), with ConvertArgs' quoting
CONDOR_G = [
    "-x", "/tmp/w/proxy", "-u", "/DC=org/CN=Jim User", "-r", "no",
    "-c", "/tmp/w/mc.sh", "-T", "/tmp/condor_g_scratch.1", "-i", "/dev/null",
    "-o", "/tmp/w/out", "-e", "/tmp/w/err", "-w", "/tmp/w", "-q", "short",
    "-n", "4", "-m", "2048", "-t", "3601", "-D", "home_bl_x",
    "-V", '"JIM_JOBTYPE=montecarlo" "JIM_EVENTS=20" "GREETING=hello world"',
    "--", '"a" "b c" "say \\"hi\\""',
]  # fmt: skip


def test_condor_g_options_map_to_jim_attributes():
    desc = describe(*CONDOR_G)
    assert desc.executable == "/tmp/w/mc.sh"
    assert desc.get("directory") == "/tmp/w"
    assert desc.attrs["arguments"] == ["a", "b c", 'say "hi"']
    assert desc.get("stdout") == "/tmp/w/out" and desc.get("stderr") == "/tmp/w/err"
    assert desc.get("stdin") == "/dev/null" and desc.get("queue") == "short"
    assert desc.get("cores") == "4" and desc.get("maxmemory") == "2048"
    assert desc.get("maxwalltime") == "61"  # minutes, rounded up
    assert desc.jimtype == "montecarlo" and desc.get("events") == "20"
    env = dict(desc.environment())
    assert env["GREETING"] == "hello world" and env["X509_USER_PROXY"] == "/tmp/w/proxy"
    assert desc.get("x509userproxy") == "/tmp/w/proxy"
    assert desc.get("outputtar") == submitargs.DEFAULT_OUTPUT_TAR
    assert desc.source_format == "blah" and "/DC=org/CN=Jim User" in desc.source_text


def test_blahpds_wordexp_escapes_are_taken_off():
    """Condor-G's ``arguments = "a(b) 'c&d e'"`` reaches the script as ``"a\\(b\\)" "c\\&d e"`` (measured)."""
    desc = describe("-c", "/bin/true", "-w", "/tmp", "--", '"a\\(b\\)" "c\\&d e"')
    assert desc.attrs["arguments"] == ["a(b)", "c&d e"]


def test_site_attributes_win_over_the_jobs_environment():
    desc = describe("-c", "/bin/true", "-w", "/tmp", "-V", '"JIM_EVENTS=5"', site=[("JIM_EVENTS", "7")])
    assert desc.get("events") == "7"


def test_old_environment_syntax():
    desc = describe("-c", "/bin/true", "-w", "/tmp", "-v", "A=1;B=two words")
    assert dict(desc.environment()) == {"A": "1", "B": "two words"}


@pytest.mark.parametrize(
    ("argv", "words", "code"),
    [
        (["-w", "/tmp"], "no executable", GramError.UNDEFINED_EXE),
        (["-c", "/bin/true"], "working directory", 48),
        (["-c", "/bin/true", "-w", "/tmp", "-Y", "x"], "option -Y not recognized", 48),
        (["-c", "/bin/true", "-w", "/tmp", "-h", "2"], "one host", GramError.INVALID_HOST_COUNT),
        (["-c", "/bin/true", "-w", "/tmp", "-n", "4x"], "whole number", GramError.RSL_SCHEDULER_SPECIFIC),
        (["-c", "/bin/true", "-w", "/tmp", "-m", "9999999999"], "whole number", 134),
        (["-c", "/bin/true", "-w", "/tmp", "-V", '"JIM_NOSUCH=1"'], "no attribute", GramError.RSL_SCHEDULER_SPECIFIC),
        (["-c", "/bin/true", "-w", "/tmp", "-V", '"NOVALUE"'], "NAME=value", 48),
        (["-c", "/bin/true", "-w", "/tmp", "--", '"unterminated'], "do not parse", 48),
        (["-c", "/bin/true", "-w", "/tmp", "-q", "x" * 70000], "longer than", 48),
        (["-c", "/bin/true", "-w", "/tmp", "-V", '"JIM_CORES=2"', "-n", "4"], "job's own options", 134),
    ],
)
def test_bad_options_are_refused_with_one_line(argv, words, code):
    with pytest.raises(DescriptionError) as e:
        describe(*argv)
    assert words in e.value.message and "\n" not in e.value.message
    assert e.value.gram_error == code


def test_every_installed_job_type_attribute_is_known():
    assert {"jimtype", "events", "cpuperevent"} <= known_attributes()


@pytest.mark.parametrize(
    ("row", "cancelled", "want"),
    [
        ({"JOB_STATE": "PENDING"}, False, {"JobStatus": 1}),
        ({"JOB_STATE": "STAGE_IN"}, False, {"JobStatus": 1}),
        ({"JOB_STATE": "ACTIVE"}, False, {"JobStatus": 2}),
        ({"JOB_STATE": "SUSPENDED"}, False, {"JobStatus": 2}),
        ({"JOB_STATE": "DONE", "EXIT_CODE": 0}, False, {"JobStatus": 4, "ExitCode": 0}),
        ({"JOB_STATE": "DONE"}, False, {"JobStatus": 4, "ExitCode": 0}),
        (
            {"JOB_STATE": "FAILED", "EXIT_CODE": 3, "MESSAGE": "m"},
            False,
            {"JobStatus": 4, "ExitCode": 3, "ExitReason": "m"},
        ),
        ({"JOB_STATE": "FAILED"}, False, {"JobStatus": 4, "ExitCode": 1}),
        ({"JOB_STATE": "FAILED", "EXIT_CODE": 3}, True, {"JobStatus": 3}),
        ({"ERROR": 156, "MESSAGE": "no grid job"}, False, None),
    ],
)
def test_jim_states_map_to_blah_states(row, cancelled, want):
    assert status.blah_state(row, cancelled=cancelled) == want


def test_classad_line_is_quoted():
    line = status.classad("jim/x", {"JobStatus": 4, "ExitCode": 1, "ExitReason": 'a "b" \\ c'})
    assert line == '[BatchJobId="jim/x"; JobStatus=4; ExitCode=1; ExitReason="a \\"b\\" \\\\ c"]'


def test_status_answers_every_id_in_order_and_unknown_is_no_news(tmp_path: Path):
    home = tmp_path / "home"
    (home / "db").mkdir(parents=True)
    done, running = "20260101-000000-00000001", "20260101-000000-00000002"
    (home / "db" / f"{done}.state").write_text("JOB_STATE=DONE\nEXIT_CODE=0\n#UNSUBMITTED=0\n#CANCEL=0\n")
    (home / "db" / f"{running}.state").write_text("JOB_STATE=FAILED\nEXIT_CODE=0\n#UNSUBMITTED=0\n#CANCEL=1\n")
    lines = status.answer_lines(
        [f"jim/{done}", "jim/20260101-000000-0000000f", f"jim/{running}", "jim/bad id"], str(home)
    )
    assert lines == [
        f'0[BatchJobId="jim/{done}"; JobStatus=4; ExitCode=0]',
        status.NOT_FOUND,
        f'0[BatchJobId="jim/{running}"; JobStatus=3]',
        status.NOT_FOUND,
    ]


def test_hook_prints_jim_attributes_from_the_ce_requirements(tmp_path: Path):
    libexec = tmp_path / "libexec"
    libexec.mkdir()
    (libexec / hook.HOOK).write_text(install._data("local_submit_attributes.sh.in"))
    req = tmp_path / "ce-req"
    # (blahpd writes a string requirement as the ClassAd unparses it, its quotes inside the shell's)
    req.write_text("JIM_JOBTYPE='\"montecarlo\"'\nJIM_EVENTS='30'\nOther='x'\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "nohome"), hook.LIBEXEC_ENV: str(libexec), "JIM_HOME": "/x"}
    assert sorted(hook.run(str(req), env)) == [("JIM_EVENTS", "30"), ("JIM_JOBTYPE", "montecarlo")]
    assert hook.run("", {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}) == []  # no hook: nothing


@pytest.mark.parametrize(
    ("text", "value"),
    [('"montecarlo"', "montecarlo"), ("30", "30"), ('"a \\"b\\""', 'a "b"'), ('"a"b"', '"a"b"'), ('"', '"'), ("", "")],
)
def test_a_classad_string_requirement_is_its_string(text: str, value: str):
    assert hook.classad_string_value(text) == value


def test_a_failing_hook_fails_the_submit(tmp_path: Path):
    (tmp_path / hook.HOOK).write_text("echo broken >&2; exit 4\n")
    with pytest.raises(DescriptionError.__mro__[1]) as e:  # (JimError)
        hook.run("", {"PATH": "/usr/bin:/bin", hook.LIBEXEC_ENV: str(tmp_path)})
    assert "exit 4" in str(e.value) and "broken" in str(e.value)


def _install(tmp_path: Path, *extra: str) -> int:
    jim = tmp_path / "venv" / "bin" / "jim"
    jim.parent.mkdir(parents=True, exist_ok=True)
    jim.write_text("#!/bin/sh\n")
    jim.chmod(0o755)
    argv = ["--libexec", str(tmp_path / "libexec"), "--blah-config", str(tmp_path / "blah.config")]
    return install.main([*argv, "--jim-command", str(jim), *extra])


BLAH_CONFIG = "# BLAH\nsupported_lrms=pbs,condor\npbs_binpath=/usr/bin\n"


def test_install_is_idempotent_and_uninstall_removes_only_its_own(tmp_path: Path, capsys):
    config = tmp_path / "blah.config"
    config.write_text(BLAH_CONFIG)
    (tmp_path / "libexec").mkdir()
    (tmp_path / "libexec" / "condor_submit.sh").write_text("theirs\n")
    assert _install(tmp_path, "--jim-config", "/etc/jim/blah.toml") == 0
    text = config.read_text()
    assert "supported_lrms=pbs,condor,jim\n" in text
    assert f"jim_binpath={tmp_path}/venv/bin\n" in text and "jim_config=/etc/jim/blah.toml\n" in text
    names = sorted(p.name for p in (tmp_path / "libexec").iterdir())
    assert names == sorted(["condor_submit.sh", *[f"jim_{s}.sh" for s in install.STEPS], hook.HOOK])
    submit = tmp_path / "libexec" / "jim_submit.sh"
    assert stat.S_IMODE(submit.stat().st_mode) == 0o755 and 'blah-submit "$@"' in submit.read_text()
    capsys.readouterr()
    assert _install(tmp_path, "--jim-config", "/etc/jim/blah.toml") == 0
    assert "changed 0 file(s)" in capsys.readouterr().err and config.read_text() == text
    assert install.main(["--uninstall", "--libexec", str(tmp_path / "libexec"), "--blah-config", str(config)]) == 0
    assert config.read_text() == BLAH_CONFIG
    assert sorted(p.name for p in (tmp_path / "libexec").iterdir()) == ["condor_submit.sh"]


def test_install_never_overwrites_a_file_it_did_not_write_unless_forced(tmp_path: Path, capsys):
    (tmp_path / "blah.config").write_text(BLAH_CONFIG)
    (tmp_path / "libexec").mkdir()
    theirs = tmp_path / "libexec" / "jim_status.sh"
    theirs.write_text("#!/bin/sh\necho site's own\n")
    assert _install(tmp_path) == 1
    assert "not jim's" in capsys.readouterr().err and theirs.read_text().endswith("site's own\n")
    assert (
        install.main(
            ["--uninstall", "--libexec", str(tmp_path / "libexec"), "--blah-config", str(tmp_path / "blah.config")]
        )
        == 0
    )
    assert theirs.exists()  # (kept: not jim's)
    assert _install(tmp_path, "--force") == 0
    assert install.MARKER in theirs.read_text()


def test_install_refuses_what_blah_config_cannot_hold(tmp_path: Path, capsys):
    (tmp_path / "blah.config").write_text(BLAH_CONFIG)
    assert _install(tmp_path, "--jim-config", "/etc/jim/a b.toml") == 1
    assert "plain path" in capsys.readouterr().err
    assert "jim" not in (tmp_path / "blah.config").read_text()


def test_shims_run_jim_with_blahpds_words_untouched(tmp_path: Path):
    """The submit shim hands its argv to jim as they are: nothing is evaluated by a shell."""
    import subprocess

    (tmp_path / "blah.config").write_text(BLAH_CONFIG)
    assert _install(tmp_path, "--jim-config", "/etc/jim/blah.toml") == 0
    jim = tmp_path / "venv" / "bin" / "jim"
    jim.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\necho "JIM_CONFIG=$JIM_CONFIG"\n')
    libexec = tmp_path / "libexec"
    (libexec / "blah_load_config.sh").write_text(f". {tmp_path}/blah.config\n")
    words = ["-c", "/bin/echo", "--", '"$(touch pwned)" "; rm -rf /"']
    done = subprocess.run([str(libexec / "jim_submit.sh"), *words], capture_output=True, text=True, cwd=tmp_path)
    assert done.stdout.splitlines() == ["blah-submit", *words, "JIM_CONFIG=/etc/jim/blah.toml"]
    assert not (tmp_path / "pwned").exists()
    assert os.access(libexec / "jim_status.sh", os.X_OK)


@pytest.mark.parametrize("step", ["blah-hold", "blah-resume"])
def test_hold_and_resume_fail_with_one_line(step, capsys):
    from jim.blah.steps import run

    assert run(step, ["jim/20260101-000000-00000001"]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "jim cannot" in out


def test_ping_answers_once_jim_runs(capsys, monkeypatch):
    from jim.blah.steps import run

    monkeypatch.setenv("JIM_CONFIG", "/nonexistent/jim.toml")
    assert run("blah-ping", []) == 0 and capsys.readouterr().out == "0 No error\n"


def test_a_refused_submit_prints_jims_reason_and_records_nothing(tmp_path: Path, capsys, monkeypatch):
    from jim.blah.steps import run

    home = tmp_path / "home"
    config = tmp_path / "jim.toml"
    config.write_text(f'[jim]\nhome = "{home}"\n[batch]\nadapter = "fork"\n')
    monkeypatch.setenv("JIM_CONFIG", str(config))
    monkeypatch.delenv("JIM_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    argv = ["-c", "/bin/true", "-w", str(tmp_path), "-V", '"JIM_JOBTYPE=nosuchtype"']
    assert run("blah-submit", argv) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "unknown job type 'nosuchtype'" in out
    assert not list((home / "db").glob("*.xml")) if (home / "db").exists() else True
