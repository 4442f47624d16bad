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
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not psutil.Process(proc.pid).children():
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(10) == 143
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
