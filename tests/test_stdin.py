"""A grid job's ``stdin`` is the standard input of every one of its local jobs, as GRAM's job managers do.

Through the real jim command on the fork backend (real worker, monitor, wrappers and local jobs): the
file's bytes reach every local job (relative to ``directory``), a symbolic link, a FIFO or a device is
refused at submit with GRAM's 11, and a job without ``stdin`` (or with GRAM's default ``/dev/null``)
reads end of file at once.  Then the wrapper on hand-made sandboxes: a stdin file that is gone, has
become a FIFO or a link by the time the local job runs fails that local job with a line in its stderr,
as the job's own failure (never retried), without running its command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from jim.errors import GramError
from jim.localfiles import read_exit
from jim.sandbox import builder

#: Known bytes, not all UTF-8 (and a NUL), with no final newline.
DATA = b"first line\n\xff\xfe\x80 not UTF-8 \xc3\x28\x00\n" + bytes(range(256)) + b"\nlast line, no newline"

WRAPPER = Path(builder.__file__).with_name("wrapper.py")


def _local_dir(jim_env, job: str, k: int) -> Path:
    return jim_env.home / "jobs" / job / "local" / str(k)


def _refused(jim_env, rsl: str, code: int = GramError.STDIN_NOT_FOUND) -> dict:
    jobs = jim_env.job_ids()
    out = jim_env.protocol("submit", "--rsl", rsl, timeout=30)  # (a FIFO must not hang the submit)
    assert out.get("ERROR") == str(int(code)), (rsl, out)
    assert set(out) == {"ERROR", "MESSAGE", "_rc", "_stderr"}, out
    assert out["_rc"] == "1" and "Traceback" not in out["_stderr"]
    assert jim_env.job_ids() == jobs  # nothing recorded
    return out


# -- end to end, on fork ---------------------------------------------------------------------


def test_every_local_job_reads_the_stdin_file(jim_env, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "in.bin").write_bytes(DATA)
    job = jim_env.submit(f"&(executable=/bin/cat)(directory={work})(stdin=in.bin)(parameters=3)")
    out = jim_env.wait(job)
    assert out["JOB_STATE"] == "DONE", (out, jim_env.run("status", job).stdout)
    assert jim_env.status(job)["plan"]["localJobs"] == "3"
    for k in range(3):
        assert (_local_dir(jim_env, job, k) / "stdout").read_bytes() == DATA, f"local job {k}"


def test_cat_of_stdin_is_the_grid_jobs_stdout(jim_env, tmp_path):
    """GRAM's conformance case: ``executable=/bin/cat`` with ``stdin=file``: stdout is the file."""
    src = tmp_path / "in.bin"
    src.write_bytes(DATA)
    dest = tmp_path / "out.bin"
    job = jim_env.submit(f"&(executable=/bin/cat)(stdin={src})(stdout={dest})")
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    assert dest.read_bytes() == DATA


def test_a_stdin_that_is_a_symbolic_link_is_refused_at_submit(jim_env, tmp_path):
    target = tmp_path / "secret.txt"
    target.write_bytes(DATA)
    (tmp_path / "link").symlink_to(target)
    out = _refused(jim_env, f"&(executable=/bin/cat)(stdin={tmp_path / 'link'})")
    assert "symbolic link" in out["MESSAGE"], out


def test_a_stdin_that_is_a_fifo_or_a_device_is_refused_at_submit(jim_env, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = _refused(jim_env, f"&(executable=/bin/cat)(stdin={fifo})")
    assert "FIFO" in out["MESSAGE"], out
    out = _refused(jim_env, "&(executable=/bin/cat)(stdin=/dev/zero)")
    assert "device" in out["MESSAGE"], out
    out = _refused(jim_env, f"&(executable=/bin/cat)(stdin={tmp_path})")
    assert "directory" in out["MESSAGE"], out


def test_without_stdin_or_with_dev_null_the_job_reads_end_of_file_at_once(jim_env):
    """The same as before: no ``stdin``, or GRAM's default ``/dev/null``, is an empty standard input."""
    for rsl in ("&(executable=/bin/cat)(count=2)", "&(executable=/bin/cat)(stdin=/dev/null)"):
        job = jim_env.submit(rsl)
        out = jim_env.wait(job)
        assert out["JOB_STATE"] == "DONE", (rsl, out)
        assert (_local_dir(jim_env, job, 0) / "stdout").read_bytes() == b""


def test_stdin_gone_by_the_time_the_job_runs_fails_it_once_with_the_reason(jim_env, tmp_path):
    """The file is removed after the submit, before any local job starts (the first worker dies once
    the sandbox is built; a poll starts another): the local jobs fail with the reason, as the job's own
    failure, not retried although the site allows three attempts."""
    jim_env.config.write_text(jim_env.config.read_text().replace("max_attempts = 1", "max_attempts = 3"))
    src = tmp_path / "in.bin"
    src.write_bytes(DATA)
    job = jim_env.submit(
        f"&(executable=/bin/sh)(arguments=-c 'touch {tmp_path}/ran.$JIM_INDEX')(stdin={src})(count=2)",
        env={"JIM_FAULT": "worker-after-sandbox"},
    )
    sandbox = jim_env.home / "jobs" / job / builder.SANDBOX_NAME
    deadline = time.monotonic() + 30
    while not sandbox.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox.exists()
    src.unlink()
    out = jim_env.wait(job)
    assert out["JOB_STATE"] == "FAILED", out
    assert not list(tmp_path.glob("ran.*")), "the command ran without its stdin"
    st = jim_env.status(job)
    for lj in st["localJobs"]:
        assert lj["state"] == "FAILED", lj
        assert "stdin" in lj["reason"] and "No such file" in lj["reason"], lj
        assert "WRAPPER_FAILED" not in json.dumps(lj), lj
        k = lj["index"]
        assert not (jim_env.home / "jobs" / job / "local" / f"{k}.2").exists(), "retried"
        err = (_local_dir(jim_env, job, k) / "stderr").read_bytes()
        assert b"jim wrapper: cannot open stdin" in err and str(src).encode() in err, err


# -- the wrapper, at run time ---------------------------------------------------------------


def _sandbox(tmp: Path, stdin: str | None, argv: list[str]) -> Path:
    manifest = {
        "version": 1,
        "grid_job": "20260101-000000-abcdef",
        "jobtype": "t",
        "environment": [],
        "outputs": [],
        "heartbeat": 1,
        "reserved_exit_codes": [],
        "stdin": stdin,
        "jobs": [{"index": k, "tag": f"t.{k}", "argv": argv, "env": {}} for k in range(2)],
    }
    sandbox, _wrapper = builder.build(tmp / "job", manifest, builder.WorkArea())
    return sandbox


def _wrap(tmp: Path, sandbox: Path, index: int = 0) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(WRAPPER), "--sandbox", str(sandbox), "--outroot", str(tmp / "out")]
    argv += ["--index", str(index), "--scratch", str(tmp / "scratch")]
    return subprocess.run(argv, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)


def _refused_at_run_time(tmp: Path, stdin: str, why: str) -> None:
    marker = tmp / "ran"
    sandbox = _sandbox(tmp, stdin, ["/bin/sh", "-c", f"touch {marker}; cat"])
    p = _wrap(tmp, sandbox)
    assert p.returncode == 1, p
    assert not marker.exists(), "the command ran"
    out = tmp / "out" / "0"
    ec = read_exit(out)
    assert ec is not None and ec.code == 1
    assert not ec.wrapper_failed, ec.info  # (the job's own failure: not a site fault worth a retry)
    assert "stdin" in ec.reason and why in ec.reason, ec.info
    err = (out / "stderr").read_bytes()
    assert err.startswith(b"jim wrapper: cannot open stdin") and why.encode() in err, err


def test_wrapper_feeds_every_local_job_the_same_stdin(tmp_path):
    src = tmp_path / "in \xe9.bin"
    src.write_bytes(DATA)
    sandbox = _sandbox(tmp_path, str(src), ["/bin/cat"])
    for k in range(2):
        p = _wrap(tmp_path, sandbox, k)
        assert p.returncode == 0, p
        assert (tmp_path / "out" / str(k) / "stdout").read_bytes() == DATA


def test_wrapper_refuses_a_stdin_gone_at_run_time(tmp_path):
    _refused_at_run_time(tmp_path, str(tmp_path / "gone.txt"), "No such file")


def test_wrapper_refuses_a_stdin_that_became_a_fifo_without_waiting(tmp_path):
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    _refused_at_run_time(tmp_path, str(fifo), "a FIFO")


def test_wrapper_refuses_a_stdin_that_became_a_symbolic_link(tmp_path):
    (tmp_path / "other.txt").write_bytes(DATA)
    (tmp_path / "in.txt").symlink_to(tmp_path / "other.txt")
    _refused_at_run_time(tmp_path, str(tmp_path / "in.txt"), "symbolic link")
