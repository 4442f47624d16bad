"""The site's drain switch (``jim drain``, jim/drain.py, docs/operations.md) through the real ``jim``, on fork.

Each test's configuration points ``[site] drain_file`` at a file in its own directory.  A flag file
that counts is root's: the tests that need one run as root (CI does), and are skipped otherwise
(never in CI); a flag file that does not count, and ``jim drain on`` refused, are tested as anyone.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from jim import drain
from jim.config import parse
from jim.errors import ConfigError

from support import users as unix
from support.env import in_ci
from support.jimcli import FAST_CONFIG, Jim

REASON = "batch system upgrade until 14:00 UTC"
REFUSAL = f"the site is draining: {REASON}"
#: 4 local jobs that wait for the file ``{go}`` and say which they are.
WAITING = (
    '&(executable=/bin/sh)(arguments=-c "while [ ! -e {go} ]; do sleep 0.1; done; '
    'echo events $JIM_FIRST_EVENT-$JIM_LAST_EVENT")(jimtype=montecarlo)(events=4)(eventsperjob=1)(stdout={stdout})'
)
#: Local job 0 fails with exit code 3 in its first attempt (retried: [retry] exit_codes), local job 1
#: sleeps in its first (killed, then resubmitted by hand), every second attempt ends at once; local
#: job 2 waits for the file ``{go}`` (the grid job runs until the test is done with the others).
RETRIED = (
    '&(executable=/bin/sh)(arguments=-c "case $JIM_INDEX.$JIM_ATTEMPT in 0.1) exit 3;; 1.1) exec sleep 300;; '
    '2.1) while [ ! -e {go} ]; do sleep 0.1; done;; esac; echo index $JIM_INDEX attempt $JIM_ATTEMPT")(count=3)'
)


def _need_root() -> None:
    """A flag file that counts is root's: skip outside CI when not root; CI runs as root."""
    if os.geteuid() == 0:
        return
    if in_ci():
        pytest.fail("CI runs the drain tests as root (a flag file that counts is root's)")
    pytest.skip("a flag file that counts is root's: run as root")


@pytest.fixture
def site(jim_env: Jim, tmp_path: Path) -> tuple[Jim, Path]:
    """The test's jim, its flag file at ``tmp_path/etc/drain`` (not there yet), automatic retries of exit code 3."""
    flag = tmp_path / "etc" / "drain"
    text = FAST_CONFIG.replace("[site]\n", f'[site]\ndrain_file = "{flag}"\n', 1)
    text = text.replace("max_attempts = 1\n", "max_attempts = 2\ncool_off = 0.5\nexit_codes = [3]\n")
    jim_env.config.write_text(text + '\n[batch]\nadapter = "fork"\ncores = 8\n')
    return jim_env, flag


def _refused(jim: Jim, *args: str) -> dict[str, str]:
    """A submit refused because the site drains: GRAM 3 and the reason, nothing else on stdout."""
    out = jim.protocol("submit", *args)
    assert set(out) == {"ERROR", "MESSAGE", "_rc", "_stderr"}, out
    assert out["ERROR"] == "3" and out["MESSAGE"] == REFUSAL and out["_rc"] == "1", out
    return out


def _log(jim: Jim) -> str:
    path = jim.home / "log" / "jim.log"
    return path.read_text() if path.exists() else ""


def _wait(what, timeout: float = 60.0, every: float = 0.2):
    """``what()`` once it is true (its value), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout:g} s: {what.__doc__ or what}")
        time.sleep(every)


# ---- refused while drained


def test_a_draining_site_refuses_new_grid_jobs_with_the_reason_and_records_nothing(site, tmp_path):
    _need_root()
    jim, flag = site
    on = jim.run("drain", "on", "--reason", REASON)
    assert on.returncode == 0 and on.stdout.startswith("draining since ") and REASON in on.stdout, on
    st = flag.lstat()
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644 and flag.read_text() == REASON + "\n"
    assert stat.S_IMODE(flag.parent.stat().st_mode) == 0o755  # (made by jim drain on: every account looks)

    description = tmp_path / "job.json"
    description.write_text(json.dumps({"executable": ["/bin/true"]}))
    _refused(jim, "--rsl", "&(executable=/bin/true)")
    _refused(jim, "--description", str(description))
    # before any planning: a description the planner would refuse (error 5) is refused as draining
    _refused(jim, "--rsl", "&(executable=/no/such/executable)")
    assert jim.job_ids() == []
    assert not (jim.home / "jobs").exists() or not list((jim.home / "jobs").iterdir())
    assert _log(jim).count(f"jim submit failed: {REFUSAL}") == 3

    status = jim.run("drain", "status")
    assert status.returncode == 0 and status.stdout.startswith("draining since ") and REASON in status.stdout
    doctor = jim.run("doctor")
    assert doctor.returncode == 0 and "drain:    draining since" in doctor.stdout and REASON in doctor.stdout


def test_the_arc_and_blah_submit_steps_refuse_with_the_reason(site, tmp_path):
    _need_root()
    jim, _flag = site
    assert jim.run("drain", "on", "--reason", REASON).returncode == 0

    # BLAH: the reason alone on stdout (the gridmanager's HoldReason), exit status 1
    blah = jim.run("blah-submit", "-c", "/bin/true", "-w", str(tmp_path), "-V", '"JIM_EVENTS=10"')
    assert blah.returncode == 1 and blah.stdout == REFUSAL + "\n", blah

    # ARC: the reason on stdout (A-REX's failure reason) and "jim: <reason>" on stderr (arccat -l),
    # before the grami is read: a grami that is not there is refused as draining too
    arex = tmp_path / "arex.cfg"
    arex.write_text(
        f"[lrms]\nlrms=jim\n[arex]\ncontroldir={tmp_path / 'control'}\n[queue:jim]\n[custom:jim]\n"
        f"jim_command={sys.executable}\njim_timeout=30\njim_home={jim.home}\njim_config={jim.config}\n"
    )
    session = tmp_path / "session" / "arcjob1"
    session.mkdir(parents=True)
    grami = tmp_path / "control" / "job.arcjob1.grami"
    grami.parent.mkdir()
    grami.write_text(f"joboption_directory='{session}'\njoboption_arg_0='/bin/true'\njoboption_gridid='arcjob1'\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}  # (A-REX's: HOME=/root, no USER)
    for path in (grami, tmp_path / "control" / "job.nosuch.grami"):
        arc = subprocess.run(
            [sys.executable, "-m", "jim", "arc-backend", "submit", "--config", str(arex), str(path)],
            capture_output=True, text=True, env=env, timeout=60, cwd="/",
        )  # fmt: skip
        assert arc.returncode == 1 and arc.stdout == REFUSAL + "\n", arc
        assert f"jim: {REFUSAL}" in arc.stderr, arc.stderr
    assert "joboption_jobid" not in grami.read_text()
    assert jim.job_ids() == []


# ---- what was there goes on


def test_grid_jobs_submitted_before_the_drain_run_poll_cancel_retry_and_return_their_outputs(site, tmp_path):
    """Drained right after three submits: their workers still submit, the monitor follows them, a
    failed local job is retried, one is killed and resubmitted by hand, one grid job is cancelled,
    and the others end DONE with their outputs, all while every new submit is refused."""
    _need_root()
    jim, flag = site
    merged, go = tmp_path / "merged.out", tmp_path / "go"
    runs = jim.submit(WAITING.format(go=go, stdout=merged))
    cancelled = jim.submit("&(executable=/bin/sleep)(arguments=300)(count=2)")
    retried = jim.submit(RETRIED.format(go=go))
    assert jim.run("drain", "on", "--reason", REASON).returncode == 0
    _refused(jim, "--rsl", "&(executable=/bin/true)")

    assert jim.poll(runs)["JOB_STATE"] in ("PENDING", "ACTIVE")
    jim.wait_running(cancelled, 2)
    out = jim.protocol("cancel", "--job-id", cancelled)
    assert out["JOB_STATE"] == "FAILED" and out["_rc"] == "0", out
    assert all(lj["state"] == "CANCELLED" for lj in jim.status(cancelled)["localJobs"])

    def retried_and_sleeping():
        """local job 0 retried after its exit code 3 and DONE; local job 1 running"""
        jobs = jim.status(retried)["localJobs"]
        return jobs[0]["state"] == "DONE" and jobs[0]["attempt"] == 2 and jobs[1]["state"] == "RUNNING"

    _wait(retried_and_sleeping)
    assert jim.run("kill", f"{retried}.1").stdout.split() == [f"{retried}.1", "CANCELLED"]
    again = jim.run("resubmit", f"{retried}.1")
    assert again.returncode == 0 and again.stdout.split() == [f"{retried}.1", "attempt", "2", "PLANNED"], again
    go.touch()

    for job in (runs, retried):
        assert jim.wait(job)["JOB_STATE"] == "DONE", jim.run("status", job).stdout
    assert sorted(merged.read_text().splitlines()) == [f"events {k}-{k}" for k in range(1, 5)]
    st = jim.status(runs)
    with tarfile.open(st["outputTar"]) as tar:
        stdouts = [n for n in tar.getnames() if n.rsplit("/", 1)[-1].startswith("stdout.")]
    assert len(stdouts) == 4
    assert [lj["attempt"] for lj in jim.status(retried)["localJobs"]] == [2, 2, 1]
    assert flag.exists() and jim.run("drain", "status").stdout.startswith("draining since ")
    _refused(jim, "--rsl", "&(executable=/bin/true)")
    assert len(jim.job_ids()) == 3


def test_drain_off_accepts_again(site):
    _need_root()
    jim, flag = site
    assert jim.run("drain", "on").returncode == 0
    out = jim.protocol("submit", "--rsl", "&(executable=/bin/true)")
    assert out["ERROR"] == "3" and out["MESSAGE"] == f"the site is draining: {drain.NO_REASON}", out
    off = jim.run("drain", "off")
    assert off.returncode == 0 and off.stdout.startswith("accepting new grid jobs (no "), off
    assert not flag.exists()
    job = jim.submit("&(executable=/bin/true)")
    assert jim.wait(job)["JOB_STATE"] == "DONE"
    assert jim.run("drain", "off").returncode == 0  # (off twice: harmless)


# ---- what does not count


def _flag_that_does_not_count(flag: Path, kind: str) -> str:
    """Something at ``flag`` that must be ignored; the words its log line carries."""
    flag.parent.mkdir(mode=0o755)
    if kind == "symlink":  # (to a file root owns, that would count: never followed)
        target = flag.parent / "target"
        target.write_text("a planted reason\n")
        flag.symlink_to(target)
        return "it is a symbolic link, not a regular file"
    if kind == "directory":
        flag.mkdir()
        return "it is a directory, not a regular file"
    flag.write_text("a planted reason\n")
    if kind == "other-owner":
        if os.geteuid() == 0:
            os.chown(flag, 65534, 65534)
        return f"it is owned by uid {flag.stat().st_uid}, not root"
    _need_root()
    if kind == "group-writable":
        flag.chmod(0o664)
        return "its group or others can write it (mode 0664)"
    os.link(flag, flag.parent / "another-name")
    return "it has 2 hard links"


@pytest.mark.parametrize("kind", ["other-owner", "symlink", "directory", "group-writable", "hard-link"])
def test_a_flag_file_root_did_not_make_is_ignored_and_logged(site, kind):
    jim, flag = site
    why = _flag_that_does_not_count(flag, kind)
    job = jim.submit("&(executable=/bin/true)")
    assert jim.wait(job)["JOB_STATE"] == "DONE"
    line = f"the drain flag file {flag} is ignored: {why}"
    assert _log(jim).count(line) == 1, _log(jim)
    assert "planted" not in _log(jim)
    status = jim.run("drain", "status")
    assert status.returncode == 0 and status.stdout == f"accepting new grid jobs: {flag} is ignored: {why}\n"
    doctor = jim.run("doctor")
    assert doctor.returncode == 1 and f"drain:    PROBLEM: accepting new grid jobs: {flag} is ignored" in doctor.stdout


def _jim_for_another_account() -> list[str]:
    """This checkout's ``jim`` for another account: the test accounts' venv (``/opt/jim-test-venv``, which the
    users service installs from this checkout and every account may run; this checkout's own venv may live
    where only root can look)."""
    return [str(unix.VENV / "bin" / "python"), "-m", "jim"]


@pytest.mark.users
def test_jim_drain_on_and_off_need_root(site, unix_users):
    jim, flag = site
    if os.geteuid() != 0:
        for action in ("on", "off"):
            proc = jim.run("drain", action)
            assert proc.returncode == 1 and proc.stderr == f"jim: error: jim drain {action} must be run as root " \
                "(only a flag file root owns drains the site)\n", proc  # fmt: skip
        return
    # another account (nobody): its own home, the flag file and the configuration where it can look
    top = Path(tempfile.mkdtemp(prefix="jim-drain-"))
    try:
        top.chmod(0o755)
        user = top / "user"
        user.mkdir(mode=0o700)
        os.chown(user, 65534, 65534)
        flag = top / "etc" / "drain"
        config = top / "jim.toml"
        config.write_text(jim.config.read_text().replace(str(site[1]), str(flag)))
        config.chmod(0o644)
        assert jim.run("drain", "on", "--reason", REASON, env={"JIM_CONFIG": str(config)}).returncode == 0
        env = {"PATH": "/usr/bin:/bin", "HOME": str(user), "JIM_HOME": str(user / "jim"), "JIM_CONFIG": str(config)}

        def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*_jim_for_another_account(), *args], capture_output=True, text=True, env=env, cwd="/", timeout=60,
                user=65534, group=65534, extra_groups=[],
            )  # fmt: skip

        for action in ("off", "on"):
            proc = as_nobody("drain", action, *(["--reason", "mine now"] if action == "on" else []))
            assert proc.returncode == 1 and f"jim drain {action} must be run as root" in proc.stderr, proc
        assert flag.read_text() == REASON + "\n"
        status = as_nobody("drain", "status")  # (anyone may ask)
        assert status.returncode == 0 and status.stdout.startswith("draining since ") and REASON in status.stdout
        refused = as_nobody("submit", "--rsl", "&(executable=/bin/true)")
        assert refused.stdout == f"ERROR=3\nMESSAGE={REFUSAL}\n", refused
        # a directory the account cannot search: it cannot see the flag file (jim doctor says so)
        (top / "etc").chmod(0o700)
        doctor = as_nobody("doctor")
        assert doctor.returncode == 1 and "is ignored: it cannot be examined: Permission denied" in doctor.stdout
    finally:
        shutil.rmtree(top, ignore_errors=True)


# ---- the reason, the setting, the cost


def test_the_reason_is_one_bounded_printable_line(site, tmp_path):
    jim, flag = site
    assert jim.run("drain", "on", "--reason", "x" * (drain.MAX_REASON + 1)).returncode == 1
    assert jim.run("drain", "on", "--reason", "two\nlines").returncode == 1
    assert jim.run("drain", "status", "--reason", REASON).returncode == 1
    _need_root()
    assert not flag.exists()
    flag.parent.mkdir(mode=0o755)
    flag.write_bytes(b"  down\x1b[31m  for\tgood " + b"y" * 5000 + b"\nsecond line\n")
    state = drain.look(str(flag))
    assert state.drained and state.reason == ("down [31m for good " + "y" * 5000)[: drain.MAX_REASON]
    flag.write_bytes(b"")
    assert drain.look(str(flag)).refusal() == f"the site is draining: {drain.NO_REASON}"
    flag.chmod(0o600)  # (an account that cannot read it is refused all the same, without the words)
    assert drain.look(str(flag)).drained


def test_drain_file_must_be_an_absolute_path():
    assert parse({}).site.drain_file == "/etc/jim/drain"
    with pytest.raises(ConfigError, match=r"\[site\].drain_file must be an absolute path"):
        parse({"site": {"drain_file": "drain"}})


def test_checking_costs_one_lstat(site, tmp_path):
    """Measured: the check on every submit, with no flag file and with a file that does not count."""
    _jim, flag = site
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        drain.check(str(flag))
    absent = (time.perf_counter() - t0) / n
    other = tmp_path / "other"
    other.symlink_to("/etc/passwd")
    t0 = time.perf_counter()
    for _ in range(n // 10):
        drain.look(str(other))
    ignored = (time.perf_counter() - t0) / (n // 10)
    print(f"drain check: {absent * 1e6:.1f} us with no flag file, {ignored * 1e6:.1f} us with one that does not count")
    assert absent < 0.001 and ignored < 0.001
