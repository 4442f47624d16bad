"""Globus::GRAM::JobManager::jim, driven exactly as globus-job-manager drives it.

No gatekeeper and no GSI: each test starts the toolkit's own script host,
``/usr/share/globus/globus-job-manager-script.pl -m <module> -c interactive``,
writes requests on its stdin in the job manager's format (command line, Perl
code setting ``%ENV`` and ``$description``, an empty line) and reads the
``GRAM_SCRIPT_<KEY>:<value>`` answers, each ended by an empty line. The jim
command is ``tests/services/gram/stub-jim``, told by environment variables to
answer, babble, hang, fail or crash.

The module under test is ``jim/gram/jim.pm``, loaded under the name
``jimtest`` from a temporary directory (the script host puts
/usr/share/perl5 first in @INC, so an installed jim.pm would shadow a copy
with the same name).

Needs the GRAM5 job manager scripts (Debian package
globus-gram-job-manager-scripts; tests/services/gram/start.sh installs
them). Without them these tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jim.gram import RSL_EXTENSIONS

from support.env import require_service

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.gram  # (the GRAM5 job manager's Perl scripts, from tests/services/gram)
MODULE = REPO / "jim" / "gram" / "jim.pm"
RVF = Path(tempfile.mkdtemp(prefix="jim-rvf-")) / "jim.rvf"
RVF.write_text(__import__("jim.gram", fromlist=["render_rvf"]).render_rvf())
STUB = REPO / "tests" / "services" / "gram" / "stub-jim"
SCRIPT = Path("/usr/share/globus/globus-job-manager-script.pl")
PERL_BASE = Path("/usr/share/perl5/Globus/GRAM/JobManager.pm")

STATE = {"PENDING": 1, "ACTIVE": 2, "FAILED": 4, "DONE": 8, "SUSPENDED": 16, "UNSUBMITTED": 32}
PROTOCOL_LINE = re.compile(r"^GRAM_SCRIPT_[A-Z0-9_]+:.*$")


def _need_toolkit() -> None:
    require_service(
        SCRIPT.is_file() and PERL_BASE.is_file(),
        f"the GRAM5 job manager scripts ({SCRIPT}; tests/services/gram/start.sh installs them)",
    )


def perl_value(value) -> str:
    """A description value as the job manager writes it: nested arrays of quoted strings."""
    if isinstance(value, (list, tuple)):
        return "[ " + ", ".join(perl_value(v) for v in value) + " ]"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


@dataclass
class Answer:
    """One reply of the script host: its GRAM_SCRIPT_ lines as a dict, and the raw lines."""

    lines: list[str]
    values: dict[str, str] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)

    def __post_init__(self):
        for line in self.lines:
            key, _, value = line.partition(":")
            key = key.removeprefix("GRAM_SCRIPT_")
            if key == "LOG":
                self.logs.append(value)
            else:
                self.values.setdefault(key, value)

    @property
    def changes(self) -> dict[str, str]:
        """What the job manager would act on (everything but LOG)."""
        return self.values


class Harness:
    """A job directory, a config and a stub jim for one test."""

    def __init__(self, tmp: Path, timeout: float = 3):
        self.tmp = tmp
        self.lib = tmp / "lib"
        target = self.lib / "Globus" / "GRAM" / "JobManager" / "jimtest.pm"
        target.parent.mkdir(parents=True)
        source = MODULE.read_text()
        assert "package Globus::GRAM::JobManager::jim;" in source
        target.write_text(
            source.replace("package Globus::GRAM::JobManager::jim;", "package Globus::GRAM::JobManager::jimtest;")
        )
        self.home = tmp / "home"
        self.home.mkdir()
        self.jobdir = self.home / ".globus" / "job" / "localhost" / "1.2"
        self.conf = tmp / "globus-jim.conf"
        self.log = tmp / "stub.log"
        self.configure(timeout=timeout)
        self.env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.home),
            "LOGNAME": "jimtest",
            "PERL5LIB": str(self.lib),
            "JIM_GRAM_CONF": str(self.conf),
            "STUB_JIM_LOG": str(self.log),
        }

    def configure(self, timeout: float = 3, **extra: str) -> None:
        lines = [f'jim_command="{STUB}"', f'jim_timeout="{timeout}"']
        lines += [f'{k}="{v}"' for k, v in extra.items()]
        self.conf.write_text("\n".join(lines) + "\n")

    def description(self, **attrs) -> dict:
        desc = {
            "executable": ["/bin/sh"],
            "arguments": ["-c", "echo event $JIM_FIRST_EVENT-$JIM_LAST_EVENT"],
            "count": ["1"],
            "jobtype": ["multiple"],
            "directory": [str(self.home)],
            "stdin": ["/dev/null"],
            "stdout": [str(self.jobdir / "stdout")],
            "stderr": [str(self.jobdir / "stderr")],
            "environment": [["HOME", str(self.home)], ["FOO", "bar baz"]],
            "jimtype": ["montecarlo"],
            "events": ["1000"],
            "eventsperjob": ["250"],
            "uniqid": ["1.2"],
            "jobdir": [str(self.jobdir)],
            "cachetag": ["https://localhost:1/1/2/"],
            "librarypath": ["/usr/lib"],
            "savejobdescription": ["no"],
            "dryrun": ["no"],
            "filestagein": [],
            "filestageout": [],
            "filestreamout": [],
        }
        desc.update(attrs)
        return desc

    def request(self, command: str, desc: dict) -> str:
        body = ",\n".join(f"    '{k}' => {perl_value(v)}" for k, v in desc.items())
        return (
            f"{command}\n"
            "$ENV{X509_USER_PROXY} = '/nonexistent/x509_user_proxy';\n"
            "$ENV{GLOBUS_GRAM_JOB_CONTACT} = 'https://localhost:1/1/2/';\n"
            f"$description =\n{{\n{body}\n}};\n\n"
        )

    def run(
        self, *calls: tuple[str, dict], env: dict | None = None, seg_module: str | None = None, timeout: float = 60
    ) -> tuple[list[Answer], str, float]:
        """Send the calls to ONE script host (as the job manager reuses it).

        With ``seg_module``, the script host's parent looks like a job manager
        started with ``-seg-module NAME``, and ``env`` is that parent's only:
        the script host itself gets the job manager's fixed environment.
        Returns the answers, the raw stdout and the wall time.
        """
        text = "".join(self.request(c, d) for c, d in calls) + "quit\n"
        argv = ["/usr/bin/perl", str(SCRIPT), "-m", "jimtest", "-c", "interactive", "-l", "/usr/lib/x86_64-linux-gnu"]
        if seg_module:
            clean = " ".join(f"-u {k}" for k in (env or {}))
            argv = [
                "/bin/sh",
                "-c",
                f"env {clean} {' '.join(argv)}; exit $?",
                "globus-job-manager",
                "-type",
                "jim",
                "-seg-module",
                seg_module,
            ]
        t0 = time.monotonic()
        proc = subprocess.run(
            argv,
            input=text,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env, **(env or {})},
            cwd=self.home,
        )
        elapsed = time.monotonic() - t0
        assert proc.returncode == 0, proc.stderr
        answers, current = [], []
        for line in proc.stdout.split("\n")[:-1]:
            if line == "":
                answers.append(Answer(current))
                current = []
            else:
                current.append(line)
        assert current == [], f"unterminated answer: {current!r}"
        assert len(answers) == len(calls), proc.stdout
        return answers, proc.stdout, elapsed

    def calls(self) -> list[str]:
        return [line_ for line_ in self.log.read_text().splitlines() if line_.startswith("CALL ")]


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    _need_toolkit()
    return Harness(tmp_path)


def only_protocol(stdout: str) -> None:
    for line in stdout.split("\n"):
        assert line == "" or PROTOCOL_LINE.match(line), f"non-protocol line on stdout: {line!r}"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# ------------------------------------------------------------------ submit


def test_submit_writes_description_and_stdio_files(h):
    desc = h.description(arguments=["it's", "a \\ b", "naïve"])
    (ans,), out, _ = h.run(("submit", desc))
    only_protocol(out)
    assert ans.changes == {"JOB_ID": "stub.1.2", "JOB_STATE": "1"}
    # stdout/stderr exist, empty, private: GRAM's stage_out needs both
    for which in ("stdout", "stderr"):
        p = h.jobdir / which
        assert p.is_file() and p.stat().st_size == 0
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    # the description jim got is the whole GRAM description, values as lists
    import json

    got = json.loads((h.tmp / "stub.log.description.json").read_text(encoding="utf-8"))
    assert got["jimtype"] == ["montecarlo"] and got["events"] == ["1000"]
    assert got["arguments"] == ["it's", "a \\ b", "naïve"]
    assert ["FOO", "bar baz"] in got["environment"]
    assert got["uniqid"] == ["1.2"] and got["filestagein"] == []
    (call,) = h.calls()
    assert f"argv=[submit --description {h.jobdir}/jim-description.json]" in call
    assert "JIM_SEG_DIR=<unset>" in call and f"JIM_GRAM_JOB_DIR={h.jobdir}" in call


def test_submit_in_push_mode_passes_the_seg_dir(h):
    # what jim's wrapper gives a "-seg-module jim" job manager (not its scripts)
    env = {"JOB_MANAGER_SEG_LOG_PATH": "/var/lib/jim/seg/u"}
    (ans,), _, _ = h.run(("submit", h.description()), env=env, seg_module="jim")
    assert ans.changes["JOB_ID"] == "stub.1.2"
    assert "JIM_SEG_DIR=/var/lib/jim/seg/u" in h.calls()[0]
    # no wrapper: the directory the SEG module reads by default
    h.log.unlink()
    h.run(("submit", h.description()), seg_module="jim")
    assert "JIM_SEG_DIR=/var/lib/globus/globus-seg-jim" in h.calls()[0]
    # poll mode: the variable alone (in the script's env) does not make push mode
    h.log.unlink()
    h.run(("submit", h.description()), env=env)
    assert "JIM_SEG_DIR=<unset>" in h.calls()[0]


def test_jim_home_and_config_are_exported(h):
    h.configure(jim_home="/var/lib/jim/home/%u", jim_config="/etc/jim/test.toml")
    h.run(("poll", h.description(jobid=["stub.1.2"])))
    (call,) = h.calls()
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    assert f"JIM_HOME=/var/lib/jim/home/{user}" in call
    assert "JIM_CONFIG=/etc/jim/test.toml" in call


def test_submit_error_maps_to_gram_error_and_message(h):
    env = {
        "STUB_JIM_MODE": "error",
        "STUB_JIM_ERROR": "134",
        "STUB_JIM_MESSAGE": "events must be a positive integer, not -5",
    }
    (ans,), out, _ = h.run(("submit", h.description(events=["-5"])), env=env)
    only_protocol(out)
    assert ans.changes == {"GT3_FAILURE_MESSAGE": "events must be a positive integer, not -5", "ERROR": "134"}
    # like slurm.pm, the reason also lands in the job's stderr file
    assert "not -5" in (h.jobdir / "stderr").read_text()


def test_submit_crash_without_error_line_is_17_with_the_last_stderr_line(h):
    (ans,), out, _ = h.run(("submit", h.description()), env={"STUB_JIM_MODE": "crash"})
    only_protocol(out)
    assert ans.changes["ERROR"] == "17"
    assert "exit status 2" in ans.changes["GT3_FAILURE_MESSAGE"]
    assert "ValueError: stub-jim crashed on purpose" in ans.changes["GT3_FAILURE_MESSAGE"]
    # jim's stderr is kept in the job dir, never on the job manager's stdout
    assert "Traceback" in (h.jobdir / "jim.stderr").read_text()


def test_missing_jim_command_fails_submit_cleanly(h):
    h.conf.write_text('jim_command="/nonexistent/jim"\njim_timeout="3"\n')
    (ans,), out, _ = h.run(("submit", h.description()))
    only_protocol(out)
    assert ans.changes["ERROR"] == "17"
    assert "exit status 127" in ans.changes["GT3_FAILURE_MESSAGE"]


def test_submit_without_job_id_fails(h):
    env = {"STUB_JIM_MODE": "ok", "STUB_JIM_MODE_SUBMIT": "junk"}
    (ans,), _, _ = h.run(("submit", h.description()), env=env)
    assert ans.changes["JOB_ID"] == "stub.1.2"  # junk around a good answer is fine
    h.conf.write_text('jim_command="/bin/true"\n')
    (ans,), _, _ = h.run(("submit", h.description()))
    assert ans.changes["ERROR"] == "17"
    assert "no usable JOB_ID" in ans.changes["GT3_FAILURE_MESSAGE"]


# ------------------------------------------------------------------ stdout hygiene


def test_junk_on_jims_stdout_never_reaches_the_job_manager(h):
    env = {"STUB_JIM_MODE": "junk", "STUB_JIM_STATE": "DONE"}
    desc = h.description(jobid=["stub.1.2"])
    answers, out, _ = h.run(("submit", h.description()), ("poll", desc), ("cancel", desc), env=env)
    only_protocol(out)
    sub, poll, cancel = answers
    assert sub.changes == {"JOB_ID": "stub.1.2", "JOB_STATE": "1"}
    assert poll.changes == {"JOB_STATE": "8"}  # not the fake JOB_STATE:8 + ERROR:99
    assert cancel.changes == {"JOB_STATE": "4"}
    assert "GRAM_SCRIPT_ERROR:99" not in out.replace("ignored stdout line: GRAM_SCRIPT_ERROR:99", "")
    assert any("ignored stdout line: GRAM_SCRIPT_JOB_STATE:8" in line_ for line_ in poll.logs)


def test_a_process_left_holding_stdout_does_not_block_the_call(h):
    (ans,), _, elapsed = h.run(("submit", h.description()), env={"STUB_JIM_MODE": "detach"})
    child = int(re.search(r"DETACH pid=\d+ child=(\d+)", h.log.read_text()).group(1))
    try:
        assert ans.changes == {"JOB_ID": "stub.1.2", "JOB_STATE": "1"}
        assert elapsed < 10, f"the module waited {elapsed:.1f} s for a leaked stdout (30 s)"
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


# ------------------------------------------------------------------ timeouts


def test_hung_poll_is_killed_and_means_no_change(h):
    h.configure(timeout=1)
    desc = h.description(jobid=["stub.1.2"])
    (ans,), out, elapsed = h.run(("poll", desc), env={"STUB_JIM_MODE": "hang"})
    only_protocol(out)
    assert ans.changes == {}  # "no news", not FAILED
    assert 1 <= elapsed < 15, elapsed  # 1 s timeout, not the 3600 s hang
    pids = re.search(r"HANG pid=(\d+) child=(\d+)", h.log.read_text()).groups()
    time.sleep(0.2)
    assert not any(alive(int(p)) for p in pids), "the hung jim's process group survived"
    assert any("killed after 1 s" in line_ for line_ in ans.logs)


def test_hung_submit_and_cancel_fail_with_a_reason(h):
    h.configure(timeout=1)
    desc = h.description(jobid=["stub.1.2"])
    (sub, can), out, _ = h.run(("submit", h.description()), ("cancel", desc), env={"STUB_JIM_MODE": "hang"})
    only_protocol(out)
    assert sub.changes["ERROR"] == "17" and "did not answer within 1 s" in sub.changes["GT3_FAILURE_MESSAGE"]
    assert can.changes["ERROR"] == "31" and "jim cancel did not answer" in can.changes["GT3_FAILURE_MESSAGE"]


# ------------------------------------------------------------------ poll


@pytest.mark.parametrize("mode", ["error", "crash"])
def test_failed_poll_means_no_change(h, mode):
    desc = h.description(jobid=["stub.1.2"])
    (ans,), out, _ = h.run(("poll", desc), env={"STUB_JIM_MODE": mode})
    only_protocol(out)
    assert ans.changes == {}
    (call,) = h.calls()
    assert "argv=[poll --job-id stub.1.2]" in call


@pytest.mark.parametrize("name", ["PENDING", "ACTIVE", "DONE", "SUSPENDED", "active", "2"])
def test_state_names_map_to_gram_numbers(h, name):
    desc = h.description(jobid=["stub.1.2"])
    (ans,), _, _ = h.run(("poll", desc), env={"STUB_JIM_STATE": name, "STUB_JIM_EXIT_CODE": "0"})
    expected = STATE.get(name.upper()) or int(name)
    assert ans.changes == {"JOB_STATE": str(expected)}


def test_unknown_state_name_means_no_change(h):
    (ans,), _, _ = h.run(("poll", h.description(jobid=["stub.1.2"])), env={"STUB_JIM_STATE": "WEIRD"})
    assert ans.changes == {}


def test_failed_grid_job_carries_a_failure_code_and_the_exit_code(h):
    desc = h.description(jobid=["stub.1.2"])
    (ans,), _, _ = h.run(("poll", desc), env={"STUB_JIM_STATE": "FAILED", "STUB_JIM_EXIT_CODE": "3"})
    # JOB_STATE:4 alone would leave GRAM's failure code at 0 ("success")
    assert ans.changes == {"GT3_FAILURE_MESSAGE": "jim grid job stub.1.2 failed, exit code 3", "ERROR": "17"}
    (ans,), _, _ = h.run(
        ("poll", desc),
        env={
            "STUB_JIM_STATE": "FAILED",
            "STUB_JIM_EXIT_CODE": "3",
            "STUB_JIM_MESSAGE_OK": "local job 2 exited with code 3",
        },
    )
    assert ans.changes["GT3_FAILURE_MESSAGE"] == "local job 2 exited with code 3"


# ------------------------------------------------------------------ cancel


def test_cancel_answers_failed(h):
    (ans,), _, _ = h.run(("cancel", h.description(jobid=["stub.1.2"])))
    assert ans.changes == {"JOB_STATE": "4"}
    assert "argv=[cancel --job-id stub.1.2]" in h.calls()[0]


def test_cancel_error_keeps_jims_code_and_reason(h):
    env = {"STUB_JIM_MODE": "error", "STUB_JIM_ERROR": "31", "STUB_JIM_MESSAGE": "scancel: 2 jobs left"}
    (ans,), _, _ = h.run(("cancel", h.description(jobid=["stub.1.2"])), env=env)
    assert ans.changes == {"GT3_FAILURE_MESSAGE": "scancel: 2 jobs left", "ERROR": "31"}
    (ans,), _, _ = h.run(("cancel", h.description(jobid=["stub.1.2"])), env={"STUB_JIM_MODE": "crash"})
    assert ans.changes["ERROR"] == "31"


# ------------------------------------------------------------------ files


def test_rvf_declares_exactly_the_rsl_extensions():
    text = RVF.read_text()
    declared = re.findall(r"^Attribute:\s*(\S+)", text, re.M)
    assert sorted(declared) == sorted(RSL_EXTENSIONS)
    assert "\nValues:" not in text  # Values is a substring test: see the file's header
    for name in RSL_EXTENSIONS:
        assert name == name.lower() and "_" not in name
    assert all(RSL_EXTENSIONS.values())


def test_rvf_passes_the_toolkits_checker():
    checker = Path("/usr/sbin/globus-rvf-check")
    if not checker.is_file():
        _need_toolkit()
        pytest.skip("globus-rvf-check not installed")
    proc = subprocess.run([str(checker), str(RVF)], capture_output=True, text=True)
    assert proc.returncode == 0 and f"ok [{len(RSL_EXTENSIONS)} records]" in proc.stdout, proc.stdout


def test_module_compiles():
    _need_toolkit()
    proc = subprocess.run(["/usr/bin/perl", "-c", str(MODULE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
