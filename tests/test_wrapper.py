"""The worker-node wrapper, run for real on hand-made sandboxes, and the fork adapter's identity rules."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import astuple
from pathlib import Path

import psutil
import pytest

from jim.adapters.fork import ForkAdapter
from jim.localfiles import read_exit
from jim.paths import Home
from jim.sandbox import builder

WRAPPER = Path(builder.__file__).with_name("wrapper.py")


def make_sandbox(tmp: Path, jobs: list[dict], **manifest) -> Path:
    area = builder.WorkArea()
    m = {
        "version": 1,
        "grid_job": "20260101-000000-abcdef",
        "jobtype": "t",
        "environment": [["GRIDVAR", "g v"]],
        "outputs": [],
        "heartbeat": 1,
        "reserved_exit_codes": [],
        "jobs": jobs,
    }
    m.update(manifest)
    sb, _w = builder.build(tmp / "job", m, area)
    return sb


def run_wrapper(tmp: Path, sandbox: Path, index: int = 0, timeout: float = 30, **popen):
    argv = [
        sys.executable,
        str(WRAPPER),
        "--sandbox",
        str(sandbox),
        "--outroot",
        str(tmp / "out"),
        "--index",
        str(index),
        "--scratch",
        str(tmp / "scratch"),
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **popen)


def job(argv, index=0, env=None):
    return {"index": index, "tag": f"t.{index}", "argv": argv, "env": env or {}}


def test_runs_command_with_slice_env_progress_and_exit_file(tmp_path):
    script = (
        'echo "slice $JIM_FIRST_EVENT $GRIDVAR $JIM_INDEX $JIM_TAG"; '
        "jim-progress d0gstar 117 250; jim-progress d0gstar 250 250; echo err >&2; exit 0"
    )
    sb = make_sandbox(tmp_path, [job(["/bin/sh", "-c", script], env={"JIM_FIRST_EVENT": "11"})])
    p = run_wrapper(tmp_path, sb)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "out" / "0"
    assert (out / "stdout").read_text() == "slice 11 g v 0 t.0\n"
    assert (out / "stderr").read_text() == "err\n"
    assert (out / "progress").read_text() == "d0gstar 117 250\nd0gstar 250 250\n"
    assert read_exit(out).code == 0
    log = (out / "wrapper.log").read_text()
    assert "host=" in log and "python=" in log and "finished with exit code 0" in log
    assert json.loads((out / "started").read_text())["pid"] > 0
    assert (out / "heartbeat").exists()
    assert not any((tmp_path / "scratch").iterdir())  # scratch cleaned


def test_exit_code_and_reserved_codes(tmp_path):
    sb = make_sandbox(
        tmp_path,
        [job(["/bin/sh", "-c", "exit 3"]), job(["/bin/sh", "-c", "exit 100"], 1)],
        reserved_exit_codes=[99, 100],
    )
    p = run_wrapper(tmp_path, sb, 0)
    assert p.returncode == 3 and read_exit(tmp_path / "out/0").code == 3
    p = run_wrapper(tmp_path, sb, 1)
    assert p.returncode == 1  # never hands a reserved code back raw
    assert read_exit(tmp_path / "out/1").code == 100  # but keeps the true one


def test_outputs_named_with_index(tmp_path):
    sb = make_sandbox(
        tmp_path, [job(["/bin/sh", "-c", "echo a > events.root; echo b > notes.txt"], 7)] * 8, outputs=["*.root"]
    )
    p = run_wrapper(tmp_path, sb, 7, env={**os.environ, "JIM_BATCH_ID": "4711_7"})
    assert p.returncode == 0, p.stderr
    outs = sorted(os.listdir(tmp_path / "out/7/outputs"))
    assert outs == ["events.7.4711_7.root"]


def test_missing_executable(tmp_path):
    sb = make_sandbox(tmp_path, [job(["/nonexistent/prog"])])
    p = run_wrapper(tmp_path, sb)
    assert p.returncode == 127
    code, info = astuple(read_exit(tmp_path / "out/0"))
    assert code == 127 and "cannot run" in info["error"]


def test_sigterm_is_passed_on_and_exit_file_written(tmp_path):
    sb = make_sandbox(tmp_path, [job(["/bin/sleep", "60"])])
    argv = [
        sys.executable,
        str(WRAPPER),
        "--sandbox",
        str(sb),
        "--outroot",
        str(tmp_path / "out"),
        "--index",
        "0",
        "--scratch",
        str(tmp_path / "scratch"),
    ]
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        # The wrapper writes its started file, then sets its signal handlers, then starts the job:
        # both mean it passes SIGTERM on (a signal before them would end it with -15, no exit file).
        # Only a stuck wrapper takes the generous deadline; a loaded machine only makes this slower.
        deadline = time.monotonic() + 300
        while not ((tmp_path / "out/0/started").exists() and psutil.Process(proc.pid).children()):
            assert proc.poll() is None, f"the wrapper ended before its job started: {proc.returncode}"
            assert time.monotonic() < deadline, "the wrapper did not start its job within 300 s"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(300) == 143
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    code, info = astuple(read_exit(tmp_path / "out/0"))
    assert code == 143 and info["terminated_by"] == "15"


def test_sandbox_escape_refused(tmp_path):
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as t:
        data = b"x"
        info = tarfile.TarInfo("../../escaped")
        info.size = 1
        t.addfile(info, io.BytesIO(data))
    p = run_wrapper(tmp_path, evil)
    assert p.returncode == 1
    code, info = astuple(read_exit(tmp_path / "out/0"))
    assert "escapes" in info["wrapper_error"]
    assert not (tmp_path / "escaped").exists() and not (tmp_path.parent / "escaped").exists()


def test_index_from_array_variable(tmp_path):
    sb = make_sandbox(tmp_path, [job(["/bin/true"], k) for k in range(12)])
    argv = [
        sys.executable,
        str(WRAPPER),
        "--sandbox",
        str(sb),
        "--outroot",
        str(tmp_path / "out"),
        "--index-env",
        "SLURM_ARRAY_TASK_ID",
        "--index-offset",
        "10",
        "--scratch",
        str(tmp_path / "s"),
    ]
    p = subprocess.run(argv, env={**os.environ, "SLURM_ARRAY_TASK_ID": "1"}, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out/11/exit_code").exists()


def test_workarea_refuses_escaping_names(tmp_path):
    from jim.errors import InvalidAttribute

    area = builder.WorkArea()
    for bad in ("../x", "/etc/passwd", "a/../../b"):
        with pytest.raises(InvalidAttribute):
            area.add_bytes(bad, b"")


def test_fork_identity_is_pid_and_start_time(tmp_path):
    adapter = ForkAdapter(Home(tmp_path).ensure())
    p = subprocess.Popen(["/bin/sleep", "30"])
    try:
        start = psutil.Process(p.pid).create_time()
        good = f"{p.pid}:{start:.3f}"
        reused = f"{p.pid}:{start - 1000:.3f}"  # same pid, another process's start time
        res = adapter.query([good, reused, "999999:1.0", "garbage"])
        assert res.ok
        assert res.lookup(good).state.value == "RUNNING"
        assert res.lookup(reused) is None and res.lookup("999999:1.0") is None
    finally:
        p.kill()
        p.wait()
    assert adapter.query([good]).lookup(good) is None


# The local root (--outroot, one directory per grid job) is touched whenever something the monitor
# reads changes in an attempt directory: `started`, the exit-code file, the progress file; never
# because of the heartbeat alone.

OLD_NS = 1_000_000_000 * 10**9  # (2001: a time no touch can leave behind)


def mtime_ns(path: Path) -> int:
    return os.stat(path).st_mtime_ns


def wait_for(what, check, timeout: float):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not seen within {timeout} s: {what}"
        time.sleep(0.05)


def start_wrapper(tmp: Path, sandbox: Path) -> subprocess.Popen:
    """The wrapper started for local job 0 into an attempt directory made beforehand (its creation
    does not touch the root) with the root's time set far back."""
    (tmp / "out" / "0").mkdir(parents=True)
    os.utime(tmp / "out", ns=(OLD_NS, OLD_NS))
    argv = [sys.executable, str(WRAPPER), "--sandbox", str(sandbox), "--outroot", str(tmp / "out")]
    argv += ["--index", "0", "--scratch", str(tmp / "scratch")]
    return subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_wrapper(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(15)
    if proc.stderr:
        proc.stderr.close()


def started_touch(root: Path) -> int:
    """The root's time once `started` is written and the root touched after it."""

    def seen():
        started = root / "0" / "started"
        if not started.exists():
            return 0
        t = mtime_ns(root)
        return t if t != OLD_NS and t >= mtime_ns(started) else 0

    return wait_for("the root touched after started", seen, 10)


def test_root_touched_after_started_and_exit_but_not_by_heartbeat(tmp_path):
    sb = make_sandbox(tmp_path, [job(["/bin/sleep", "60"])], heartbeat=1)
    proc = start_wrapper(tmp_path, sb)
    root = tmp_path / "out"
    try:
        after_start = started_touch(root)
        beat = root / "0" / "heartbeat"
        # two rewrites of the heartbeat file later, the root has not moved
        first = wait_for("the first heartbeat", lambda: beat.exists() and mtime_ns(beat), 10)
        second = wait_for("a heartbeat", lambda: mtime_ns(beat) != first and mtime_ns(beat), 10)
        wait_for("another heartbeat", lambda: mtime_ns(beat) != second, 10)
        assert mtime_ns(root) == after_start
        assert not (root / "0" / "progress").exists()
    finally:
        stop_wrapper(proc)
    assert read_exit(root / "0").code == 143
    assert mtime_ns(root) >= mtime_ns(root / "0" / "exit_code") > after_start


RESET_ROOT = "import os; r = os.path.dirname(os.environ['JIM_OUTDIR']); os.utime(r, ns=(%d, %d))" % (OLD_NS, OLD_NS)


@pytest.mark.parametrize("error", [False, True], ids=["job-exit", "wrapper-error"])
def test_root_touched_after_exit_file(tmp_path, error):
    # the job sets the root's time far back as its last act; only the wrapper's touch after
    # writing the exit-code file moves it again (also when collecting outputs fails afterwards:
    # an `outputs` that is a file, not a directory, is a wrapper error)
    code = RESET_ROOT + ("; open(os.path.join(os.environ['JIM_OUTDIR'], 'outputs'), 'w')" if error else "")
    sb = make_sandbox(tmp_path, [job([sys.executable, "-c", code])], outputs=["*.root"])
    p = run_wrapper(tmp_path, sb)
    root = tmp_path / "out"
    result = read_exit(root / "0")
    if error:
        assert p.returncode == 1 and "wrapper_error" in result.info
    else:
        assert p.returncode == 0 and result.code == 0, p.stderr
    assert mtime_ns(root) != OLD_NS
    assert mtime_ns(root) >= mtime_ns(root / "0" / "exit_code")


@pytest.mark.slow
def test_root_touched_when_job_appends_progress(tmp_path):
    # the job appends to the progress file itself (not with jim-progress); the heartbeat is 30 s,
    # the progress file is still looked at every 5 s
    gate = tmp_path / "go"
    script = f'while [ ! -e "{gate}" ]; do sleep 0.05; done; echo "events 3 10" >> "$JIM_PROGRESS_FILE"; sleep 30'
    sb = make_sandbox(tmp_path, [job(["/bin/sh", "-c", script])], heartbeat=30)
    proc = start_wrapper(tmp_path, sb)
    root = tmp_path / "out"
    try:
        started_touch(root)
        os.utime(root, ns=(OLD_NS, OLD_NS))
        gate.touch()
        progress = root / "0" / "progress"
        wait_for("the progress line", lambda: progress.exists() and progress.read_text() == "events 3 10\n", 10)
        wait_for("the root touched after the progress line", lambda: mtime_ns(root) != OLD_NS, 8)
        assert mtime_ns(root) >= mtime_ns(progress)
        assert not (root / "0" / "exit_code").exists()
    finally:
        stop_wrapper(proc)


def test_jim_progress_touches_the_root_of_its_own_progress_file(tmp_path):
    tool = Path(builder.__file__).with_name("jim-progress")
    root = tmp_path / "local"
    outdir = root / "3.2"
    outdir.mkdir(parents=True)
    os.utime(root, ns=(OLD_NS, OLD_NS))
    base = {k: v for k, v in os.environ.items() if not k.startswith("JIM_")}
    env = {**base, "JIM_OUTDIR": str(outdir), "JIM_PROGRESS_FILE": str(outdir / "progress")}
    p = subprocess.run([str(tool), "events", "5", "10"], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == ""
    assert (outdir / "progress").read_text() == "events 5 10\n"
    assert mtime_ns(root) != OLD_NS and mtime_ns(root) >= mtime_ns(outdir / "progress")
    # a progress file the wrapper did not name: its directory's parent is left alone
    other = tmp_path / "mine" / "sub"
    other.mkdir(parents=True)
    os.utime(tmp_path / "mine", ns=(OLD_NS, OLD_NS))
    for env in (
        {**base, "JIM_OUTDIR": str(outdir), "JIM_PROGRESS_FILE": str(other / "progress")},
        {**base, "JIM_PROGRESS_FILE": str(other / "progress")},
    ):
        p = subprocess.run([str(tool), "x", "1", "2"], env=env, capture_output=True, text=True)
        assert p.returncode == 0 and p.stderr == ""
        assert mtime_ns(tmp_path / "mine") == OLD_NS
    assert (other / "progress").read_text() == "x 1 2\nx 1 2\n"


def test_the_homes_jobs_directory_is_touched_with_the_local_root_and_nothing_else_is(tmp_path):
    # in jim's layout (<home>/jobs/<grid job>/local) the wrapper also touches <home>/jobs, the one
    # directory a monitor with nothing to do looks at; under any other layout it touches the root only
    sb = make_sandbox(tmp_path, [job(["/bin/true"])])
    local = tmp_path / "home" / "jobs" / "20261125-120000-0a0b0c0d" / "local"
    local.mkdir(parents=True)
    for d in (local.parent.parent, tmp_path / "home"):
        os.utime(d, ns=(OLD_NS, OLD_NS))
    argv = [sys.executable, str(WRAPPER), "--sandbox", str(sb), "--outroot", str(local), "--index", "0"]
    p = subprocess.run([*argv, "--scratch", str(tmp_path / "scratch")], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert mtime_ns(local.parent.parent) != OLD_NS  # <home>/jobs
    assert mtime_ns(local.parent.parent) >= mtime_ns(local / "0" / "exit_code")
    assert mtime_ns(tmp_path / "home") == OLD_NS
    other = tmp_path / "elsewhere" / "out"
    other.mkdir(parents=True)
    os.utime(other.parent, ns=(OLD_NS, OLD_NS))
    argv[5] = str(other)
    p = subprocess.run([*argv, "--scratch", str(tmp_path / "scratch2")], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert mtime_ns(other.parent) == OLD_NS
