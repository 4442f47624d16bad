"""Cancel on the fork backend leaves no process of the local job behind.

A local job's processes may leave the wrapper's process group and session
(``setsid``) and its process tree (a double fork reparents them to init); they
still carry the job's ``JIM_TAG``, and cancel finds them by it: every process of
jim's uid whose environment holds the exact entry ``JIM_TAG=<tag>``, never a
process of another uid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest

from jim.adapters import fork
from jim.paths import Home
from jim.sandbox import builder

from support.jimcli import tagged

# The job: a setsid'd sleep, a double-forked daemon that ignores SIGTERM (only SIGKILL ends it,
# and its loop keeps starting new sleeps), and a sleep in the foreground.
JOB = """\
setsid sleep 300 &
( setsid sh -c 'trap "" TERM; while :; do sleep 1; done' & )
exec sleep 300
"""


def test_cancel_kills_setsid_and_double_forked_processes_of_the_local_job(jim_env, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(JOB)
    job = jim_env.submit(f"&(executable=/bin/sh)(arguments={script})")
    tag = f"{job}.0"
    deadline = time.monotonic() + 300  # (only a job that never starts takes it: load only makes this slower)
    while time.monotonic() < deadline:
        names = sorted(_name(p) for p in tagged(tag))
        # the wrapper, the foreground sleep, the setsid'd sleep, the daemon's shell (and its sleep)
        if names.count("sleep") >= 2 and "sh" in names:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the local job's processes never all ran: {names}")
    daemon = [p for p in tagged(tag) if _name(p) == "sh"]
    assert daemon and all(os.getsid(p.pid) == p.pid for p in daemon)
    # the processes that lead sessions of their own are no wrapper: found by tag, the wrapper is
    adapter = fork.ForkAdapter(Home(jim_env.home))
    found = adapter.find_by_tag(job, [tag])
    pid, start = found[tag].split(":")
    assert psutil.Process(int(pid)).cmdline()[1] == str(jim_env.home / "jobs" / job / builder.WRAPPER_NAME)
    assert found[tag] == jim_env.status(job)["localJobs"][0]["batchId"]

    out = jim_env.protocol("cancel", "--job-id", job, timeout=300)
    assert out["JOB_STATE"] == "FAILED", out
    # A killed process may still be exiting (in disk sleep, state D) when cancel answers: wait until the
    # set is gone.  The daemon starts a new sleep every second while it lives, so a survivor never
    # lets the set empty, and the deadline, generous for a loaded machine, ends the wait.
    deadline = time.monotonic() + 120
    left = tagged(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = tagged(tag)
    assert not left, f"processes of the local job left after cancel: {[_described(p) for p in left]}"


def _name(p: psutil.Process) -> str:
    """The process's name, "" once it has exited (the daemon's sleeps come and go every second)."""
    try:
        return p.name()
    except psutil.Error:
        return ""


def _described(p: psutil.Process) -> str:
    try:
        return f"{p.pid} {p.name()} ({p.status()})"
    except psutil.Error:
        return f"{p.pid} (gone)"


def _sleeper(env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen(["sleep", "300"], env={"PATH": "/usr/bin:/bin", **env}, **kw)


def _dead(p: subprocess.Popen) -> bool:
    try:
        p.wait(timeout=5)
        return True
    except subprocess.TimeoutExpired:
        return False


def test_scan_matches_the_exact_entry_only():
    tag = f"scan-{os.getpid()}.3"
    exact = _sleeper({"JIM_TAG": tag})
    others = [
        _sleeper({"JIM_TAG": tag + "0"}),  # a tag that starts with this one
        _sleeper({"XJIM_TAG": tag}),  # an entry that ends with it
        _sleeper({"JIM_TAGS": tag}),
        _sleeper({"OTHER": f"JIM_TAG={tag}"}),  # the entry as a value
    ]
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # (until the exec has replaced the environment)
            found = fork.tagged_processes({tag})
            pids = sorted(p.pid for p in found)
            for p in found:
                p.close()
            if pids:
                break
            time.sleep(0.02)
        assert pids == [exact.pid]
    finally:
        for p in [exact, *others]:
            p.kill()
            p.wait()


@pytest.mark.users
def test_a_process_of_another_uid_is_never_killed(unix_users):
    tag = f"uid-{os.getpid()}.0"
    alice = unix_users.alice
    theirs = _sleeper({"JIM_TAG": tag}, user=alice.uid, group=alice.gid, extra_groups=[])
    mine = _sleeper({"JIM_TAG": tag})
    try:
        time.sleep(0.2)
        assert fork._signal_tagged({tag}, signal.SIGKILL) == 1
        assert _dead(mine)
        assert theirs.poll() is None
        assert psutil.Process(theirs.pid).environ().get("JIM_TAG") == tag
    finally:
        for p in (theirs, mine):
            p.kill()
            p.wait()


def test_the_wrapper_name_is_the_builders():
    assert fork.WRAPPER_NAME == builder.WRAPPER_NAME
