"""A shared gatekeeper host: jim's home is its user's alone, and nothing in it runs as code.

Single-account tests run as whoever runs the suite; the ``users`` tests use
the two real test accounts (tests/support/users.py) and, as root, act on one
of them.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import users as unix
from support.jimcli import Jim

RSL = "&(executable=/bin/echo)(arguments=hello)(count=2)"


def _private_tree(root: Path) -> list[str]:
    """Everything under ``root`` that a group or other account could read, write or enter."""
    loose = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            mode = p.lstat().st_mode
            if stat.S_ISLNK(mode):
                continue
            if mode & 0o077:
                loose.append(f"{p.relative_to(root)} {stat.S_IMODE(mode):04o}")
    return loose


def _protocol(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    out = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition("=")
        assert sep and key.isupper(), f"non-protocol line {line!r}; stderr: {proc.stderr}"
        out[key] = value
    return out


def test_home_and_everything_in_it_private_whatever_the_umask(jim_env: Jim):
    """A loose umask (0002) does not reach the home, jim's log, the database or a job's work area."""
    proc = subprocess.run(
        [sys.executable, "-m", "jim", "submit", "--rsl", RSL],
        env=jim_env.env,
        capture_output=True,
        text=True,
        umask=0o002,
        timeout=60,
    )
    job = _protocol(proc)["JOB_ID"]
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    assert stat.S_IMODE(jim_env.home.stat().st_mode) == 0o700
    assert stat.S_IMODE((jim_env.home / "log" / "jim.log").stat().st_mode) == 0o600
    assert _private_tree(jim_env.home) == []


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o720], ids=oct)
def test_home_writable_by_others_refused(jim_env: Jim, mode: int):
    jim_env.home.mkdir(mode=0o700)
    os.chmod(jim_env.home, mode)
    for args in (("submit", "--rsl", RSL), ("poll", "--job-id", "20260101-000000-00000000"), ("list",)):
        proc = jim_env.run(*args)
        assert proc.returncode == 1, proc
        if args[0] != "list":
            out = _protocol(proc)
            assert out["ERROR"] == "47", out
            assert "can be written by other accounts" in out["MESSAGE"]
            assert len(out) == 2
        else:
            assert "can be written by other accounts" in proc.stderr
    assert sorted(p.name for p in jim_env.home.iterdir()) == []  # nothing recorded, not even a log


def test_a_jim_package_in_the_home_is_never_imported(jim_env: Jim, tmp_path: Path):
    """Neither the worker nor the monitor (started from the home before) imports code found in the home."""
    marker = tmp_path / "imported"
    jim_env.home.mkdir(mode=0o700)
    for pkg in ("jim", "adapters", "handlers"):
        (jim_env.home / pkg).mkdir()
        (jim_env.home / pkg / "__init__.py").write_text(
            f"open({str(marker)!r}, 'a').write({pkg!r} + '\\n')\nraise SystemExit(3)\n"
        )
        (jim_env.home / pkg / "__main__.py").write_text((jim_env.home / pkg / "__init__.py").read_text())
    job = jim_env.submit(RSL)
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    # the monitor is started again by a poll when the first one has gone: give it a start too
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (jim_env.home / "locks" / "monitor.lock").exists():
        out = jim_env.run("poll", "--job-id", job)
        assert "JOB_STATE=DONE" in out.stdout
        time.sleep(0.5)
        break
    assert not marker.exists(), marker.read_text()


def test_background_processes_run_isolated_from_the_home(jim_env: Jim):
    """The monitor: ``python -I``, working directory /, no relative or home directory on its PATH."""
    import psutil

    env = dict(jim_env.env, PATH=f".:{jim_env.home}:{os.environ['PATH']}")
    job = jim_env.submit("&(executable=/bin/sleep)(arguments=3)", env=env)
    monitor = None
    deadline = time.monotonic() + 15
    while monitor is None and time.monotonic() < deadline:
        for p in psutil.process_iter(["cmdline", "environ"]):
            cmd = p.info["cmdline"] or []
            if (p.info["environ"] or {}).get("JIM_HOME") == str(jim_env.home) and "_monitor" in cmd:
                monitor = p
        time.sleep(0.1)
    assert monitor is not None, "no monitor started"
    assert monitor.cmdline()[1:4] == ["-I", "-m", "jim"]
    assert monitor.cwd() == "/"
    path = monitor.environ()["PATH"].split(":")
    assert "." not in path and str(jim_env.home) not in path and "" not in path
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"


# ---------------------------------------------------------------------------
# two real accounts
# ---------------------------------------------------------------------------


@pytest.mark.users
def test_another_accounts_package_in_a_group_writable_home_does_not_run(unix_users, request):
    """bob drops a ``jim/`` package into alice's group-writable home: alice's jim refuses the home."""
    alice, bob = unix_users.alice, unix_users.bob
    made = alice.run(["/bin/mktemp", "-d", "/tmp/jimtest-shared-XXXXXX"])
    assert made.returncode == 0, made.stderr
    shared = Path(made.stdout.strip())
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    home = shared / "jimhome"
    assert alice.run(["/bin/chmod", "0755", str(shared)]).returncode == 0
    assert alice.run(["/bin/mkdir", "-m", "0777", str(home)]).returncode == 0
    marker = shared / "pwned"
    planted = bob.run(
        [
            "/usr/bin/python3",
            "-c",
            "import os, sys; d = os.path.join(sys.argv[1], 'jim'); os.mkdir(d); "
            "open(os.path.join(d, '__init__.py'), 'w').write('open(%r, \"a\").write(\"x\")' % sys.argv[2])",
            str(home),
            str(marker),
        ]
    )
    assert planted.returncode == 0, planted.stderr
    out = _protocol(alice.jim("submit", "--rsl", RSL, home=home))
    assert out["ERROR"] == "47" and "can be written by other accounts" in out["MESSAGE"], out
    time.sleep(1)
    assert not marker.exists()
    assert not (home / "db").exists()


@pytest.mark.users
def test_another_accounts_home_refused(unix_users):
    alice, bob = unix_users.alice, unix_users.bob
    home = alice.home / ".jim"
    job = _protocol(alice.jim("submit", "--rsl", RSL, home=home))["JOB_ID"]
    os.chmod(alice.home, 0o755)  # (bob can look in: only the owner check stands in the way)
    try:
        for args in (("poll", "--job-id", job), ("cancel", "--job-id", job), ("status", job)):
            proc = bob.jim(*args, home=home)
            assert proc.returncode == 1
            text = proc.stdout + proc.stderr
            assert "belongs to jimtest-alice, not jimtest-bob" in text, text
    finally:
        os.chmod(alice.home, 0o700)


@pytest.mark.users
def test_root_acts_on_a_users_job_only_as_its_owner(unix_users, tmp_path: Path):
    """``JIM_HOME=~alice/.jim jim cancel`` as root: refused; with JIM_AS_OWNER=1, done as alice,
    and nothing root-owned is left in her home or where her job's outputs go."""
    alice = unix_users.alice
    home = alice.home / ".jim"
    outdir = alice.mkdir("out")
    rsl = f"&(executable=/bin/sleep)(arguments=60)(count=2)(stdout={outdir}/job.out)(stderr={outdir}/job.err)"
    job = _protocol(alice.jim("submit", "--rsl", rsl, home=home))["JOB_ID"]
    deadline = time.monotonic() + 30
    while "ACTIVE" not in alice.jim("poll", "--job-id", job, home=home).stdout and time.monotonic() < deadline:
        time.sleep(0.3)

    env = dict(os.environ, JIM_HOME=str(home), JIM_CONFIG=str(alice.config()))
    env.pop("JIM_AS_OWNER", None)
    root_jim = [str(unix.VENV / "bin" / "jim")]  # (one every account can read: root becomes alice midway)
    refused = subprocess.run([*root_jim, "cancel", "--job-id", job], env=env, capture_output=True, text=True)
    out = _protocol(refused)
    assert out["ERROR"] == "47" and "belongs to jimtest-alice, not root" in out["MESSAGE"], out

    env["JIM_AS_OWNER"] = "1"
    done = subprocess.run([*root_jim, "cancel", "--job-id", job], env=env, capture_output=True, text=True, timeout=60)
    assert _protocol(done) == {"JOB_STATE": "FAILED"}, done.stderr
    root_owned = [str(p) for base in (home, outdir) for p in [base, *base.rglob("*")] if p.lstat().st_uid != alice.uid]
    assert root_owned == []
    assert (outdir / "job.out").exists()
    assert alice.jim("poll", "--job-id", job, home=home).stdout.startswith("JOB_STATE=FAILED")


@pytest.mark.users
def test_another_account_reads_nothing_of_a_users_jobs(unix_users):
    """Alice's home is opened up (0755) so that only jim's own modes stand in the way: bob can read
    none of her log, records, sandbox, wrappers' files, merged outputs or output tar, nor list her
    jim directories, and the secret in her job's environment reaches none of his reads."""
    alice, bob = unix_users.alice, unix_users.bob
    home = alice.home / ".jim"
    outdir = alice.mkdir("out", 0o755)
    secret = "s3cret-pa55word"
    rsl = (
        f"&(executable=/bin/sh)(arguments=-c 'echo $JOBPW')(environment=(JOBPW {secret}))(count=2)"
        f"(stdout={outdir}/job.out)(stderr={outdir}/job.err)(outputtar={outdir}/job.tar.gz)"
    )
    job = _protocol(alice.jim("submit", "--rsl", rsl, home=home))["JOB_ID"]
    deadline = time.monotonic() + 60
    while not alice.jim("poll", "--job-id", job, home=home).stdout.startswith("JOB_STATE=DONE"):
        assert time.monotonic() < deadline, alice.jim("status", job, home=home).stdout
        time.sleep(0.3)
    assert secret in (outdir / "job.out").read_text()
    os.chmod(alice.home, 0o755)
    try:
        files = [p for base in (home, outdir) for p in base.rglob("*") if p.is_file() and not p.is_symlink()]
        dirs = [p for p in home.rglob("*") if p.is_dir() and not p.is_symlink()]
        assert any(p.name.startswith("sandbox") for p in files) and (outdir / "job.tar.gz") in files
        readable = []
        for p in files:
            got = bob.run(["cat", str(p)])
            if got.returncode == 0 or secret in got.stdout:
                readable.append(str(p))
        listable = [str(p) for p in [home, *dirs] if bob.run(["ls", str(p)]).returncode == 0]
        assert readable == [] and listable == []
    finally:
        os.chmod(alice.home, 0o700)
