"""A grid job's files are checked at submit, and the sandbox never trusts them later.

``inputfiles`` must be regular files the caller can read, not in /proc or
/sys, within the site's ``max_input_bytes`` together; ``outputs`` patterns
relative and bounded.  Refused at submit with ERROR=134 naming the file, and
nothing recorded.  A file that changes after the submit (grows, turns into a
FIFO or a link to a sysfs file) makes the grid job FAILED with the reason,
once: the worker does not crash on every restart.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from jim.config import load
from jim.jobdesc import parse_rsl
from jim.site import Site
from jim.submit import submit

from support.jimcli import write_config

SYSFS_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"  # (st_size 4096, far less to read)


def sysfs_file() -> str:
    for candidate in (SYSFS_FILE, "/sys/kernel/uevent_seqnum", "/sys/devices/system/cpu/online"):
        if os.access(candidate, os.R_OK):
            return candidate
    pytest.skip("no readable sysfs file")


def nothing_recorded(home: Path) -> bool:
    return not list((home / "db").glob("2*")) and not list((home / "jobs").glob("*")) if home.exists() else True


def refused(jim_env, rsl: str) -> str:
    out = jim_env.protocol("submit", "--rsl", rsl)
    assert out.get("ERROR") == "134" and "JOB_ID" not in out, out
    assert "\n" not in out["MESSAGE"] and "Traceback" not in out["MESSAGE"]
    assert nothing_recorded(jim_env.home)
    return out["MESSAGE"]


def test_missing_directory_device_fifo_link_refused_naming_the_file(jim_env, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    good = tmp_path / "good.cfg"
    good.write_text("x\n")
    link = tmp_path / "link.cfg"
    link.symlink_to(good)
    cases = {
        str(tmp_path / "missing.cfg"): "does not exist",
        str(tmp_path): "is a directory",
        "/dev/null": "is a character device",
        str(fifo): "is a FIFO",
        str(link): "is a symbolic link",
    }
    for path, why in cases.items():
        message = refused(jim_env, f"&(executable=/bin/true)(inputfiles={good} {path})")
        assert repr(path) in message and why in message, message


def test_proc_and_sysfs_files_refused(jim_env, tmp_path):
    link_dir = tmp_path / "kernel"
    link_dir.symlink_to("/proc/self")  # a directory link on the way: the real path is looked at
    for path in ("/proc/self/status", sysfs_file(), str(link_dir / "status")):
        message = refused(jim_env, f"&(executable=/bin/true)(inputfiles={path})")
        assert repr(path) in message and ("/proc" in message or "/sys" in message), message


def test_sysfs_mounted_elsewhere_refused_by_its_file_system(jim_env, tmp_path, request):
    source = os.path.dirname(sysfs_file())
    where = tmp_path / "looks-like-data"
    where.mkdir()
    if subprocess.run(["mount", "--bind", source, str(where)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here (needs root and mount rights)")
    request.addfinalizer(lambda: subprocess.run(["umount", str(where)], capture_output=True))
    path = str(where / os.path.basename(sysfs_file()))
    message = refused(jim_env, f"&(executable=/bin/true)(inputfiles={path})")
    assert repr(path) in message and "sysfs file system" in message, message


def test_inputs_over_the_sites_limit_refused(jim_env, tmp_path):
    write_config(jim_env, "")
    jim_env.config.write_text(jim_env.config.read_text().replace("[site]\n", "[site]\nmax_input_bytes = 1000\n"))
    a, b = tmp_path / "a.dat", tmp_path / "b.dat"
    a.write_bytes(b"x" * 600)
    b.write_bytes(b"y" * 600)
    message = refused(jim_env, f"&(executable=/bin/true)(inputfiles={a} {b})")
    assert repr(str(b)) in message and "1000 bytes" in message, message
    job = jim_env.submit(f"&(executable=/bin/true)(inputfiles={a})")
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"


def test_two_inputs_with_one_name_refused(jim_env, tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    for d in ("one", "two"):
        (tmp_path / d / "run.cfg").write_text(d)
    message = refused(jim_env, f"&(executable=/bin/true)(inputfiles={tmp_path}/one/run.cfg {tmp_path}/two/run.cfg)")
    assert "same name" in message


@pytest.mark.users
def test_input_the_caller_cannot_read_refused(unix_users):
    alice, bob = unix_users.alice, unix_users.bob
    secret = bob.write("secret.cfg", "bob's\n", 0o600)
    os.chmod(bob.home, 0o755)  # (alice can look in, not read the file)
    try:
        proc = alice.jim("submit", "--rsl", f"&(executable=/bin/true)(inputfiles={secret})", home=alice.home / ".jim")
    finally:
        os.chmod(bob.home, 0o700)
    assert proc.stdout.startswith("ERROR=134\n"), proc.stdout + proc.stderr
    assert repr(str(secret)) in proc.stdout and "not readable" in proc.stdout


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("/etc/*", "absolute"),
        ("../*", "'..'"),
        ("out/../../x", "'..'"),
        ("a" * 2000, "longer than"),
        ("x\x01y", "control character"),
    ],
)
def test_bad_output_patterns_refused(jim_env, pattern, why):
    out = jim_env.protocol("submit", "--description", _description(jim_env, {"outputs": ["*.log", pattern]}))
    assert out.get("ERROR") == "134", out
    assert "outputs pattern" in out["MESSAGE"] and why in out["MESSAGE"], out
    assert nothing_recorded(jim_env.home)


def _description(jim_env, extra: dict) -> str:
    import json

    path = jim_env.home.parent / "desc.json"
    path.write_text(json.dumps({"executable": ["/bin/true"], **extra}))
    return str(path)


# -- after the submit: the sandbox copies what it reads, and a failure is final ----------------------


def _recorded(jim_env, rsl: str) -> str:
    """A grid job recorded by the real submit in this process, its worker not started yet."""
    env = dict(jim_env.env)
    old = dict(os.environ)
    os.environ.update(env)
    try:
        return submit(Site(load()), parse_rsl(rsl), start_background=False)
    finally:
        os.environ.clear()
        os.environ.update(old)


def _run_worker(jim_env, job_id: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jim", "_worker", job_id], env=jim_env.env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("change", ["sysfs-link", "fifo", "grown-over-limit"])
def test_input_changed_after_submit_fails_the_grid_job_once(jim_env, tmp_path, change):
    jim_env.config.write_text(jim_env.config.read_text().replace("[site]\n", "[site]\nmax_input_bytes = 1000\n"))
    data = tmp_path / "in.dat"
    data.write_bytes(b"z" * 100)
    job = _recorded(jim_env, f"&(executable=/bin/true)(count=2)(inputfiles={data})")
    data.unlink()
    if change == "sysfs-link":
        data.symlink_to(sysfs_file())
    elif change == "fifo":
        os.mkfifo(data)
    else:
        data.write_bytes(b"z" * 5000)
    first = _run_worker(jim_env, job)
    assert first.returncode == 1 and "Traceback" not in first.stderr, first.stderr
    out = jim_env.wait(job, timeout=30)
    assert out["JOB_STATE"] == "FAILED", out
    assert "the sandbox could not be built" in out["MESSAGE"] and repr(str(data)) in out["MESSAGE"], out
    again = _run_worker(jim_env, job)  # a restart finds the grid job ended: nothing tried again
    assert again.returncode == 0
    st = jim_env.status(job)
    assert [lj["state"] for lj in st["localJobs"]] == ["FAILED", "FAILED"]
    assert not (jim_env.home / "jobs" / job / "sandbox.tar.gz").exists()


def test_sandbox_holds_the_bytes_read(jim_env, tmp_path):
    data = tmp_path / "in.dat"
    data.write_bytes(b"first\n")
    job = _recorded(jim_env, f"&(executable=/bin/cat)(arguments=inputs/in.dat)(inputfiles={data})")
    data.write_bytes(b"what the file holds when the sandbox is built\n")
    assert _run_worker(jim_env, job).returncode == 0
    with tarfile.open(jim_env.home / "jobs" / job / "sandbox.tar.gz") as tar:
        member = tar.getmember("inputs/in.dat")
        assert tar.extractfile(member).read() == data.read_bytes()
        assert member.size == len(data.read_bytes())
    deadline = time.monotonic() + 30
    assert jim_env.wait(job, timeout=max(1.0, deadline - time.monotonic()))["JOB_STATE"] == "DONE"
