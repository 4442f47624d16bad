"""Files jim writes where the user says: relative paths against the grid job's directory, never into
jim's own home, and always through a new temporary file renamed into place (never through a link)."""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

import psutil
import pytest

from jim.db import Database
from jim.paths import Home

from support.jimcli import processes_of


def described(jim_env, job: str) -> dict:
    """The description as recorded."""
    return Database(Home(jim_env.home)).read(job).description()


def test_relative_stdout_stderr_outputtar_resolve_against_directory(jim_env, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    job = jim_env.submit(
        f'&(executable=/bin/sh)(arguments=-c "echo out $JIM_INDEX; echo err >&2")(count=2)'
        f"(directory={work})(stdout=out.txt)(stderr=sub/../err.txt)(outputtar=all.tar.gz)"
    )
    desc = described(jim_env, job)
    assert desc["stdout"] == [str(work / "out.txt")] and desc["stderr"] == [str(work / "err.txt")]
    assert desc["outputtar"] == [str(work / "all.tar.gz")]
    out = jim_env.wait(job)
    assert out["JOB_STATE"] == "DONE", out
    assert (work / "out.txt").read_text() == "out 0\nout 1\n"
    assert (work / "err.txt").read_text() == "err\nerr\n"
    assert (work / "all.tar.gz").is_file()
    assert stat.S_IMODE((work / "out.txt").stat().st_mode) == 0o600


def test_directory_defaults_to_the_submitters_home(jim_env, tmp_path):
    home = tmp_path / "userhome"
    (home / "rel").mkdir(parents=True)
    job = jim_env.submit("&(executable=/bin/echo)(arguments=hi)(stdout=out.txt)", env={"HOME": str(home)})
    assert described(jim_env, job)["stdout"] == [str(home / "out.txt")]
    job2 = jim_env.submit("&(executable=/bin/echo)(arguments=hi)(directory=rel)(stdout=o)", env={"HOME": str(home)})
    assert described(jim_env, job2)["stdout"] == [str(home / "rel" / "o")]
    for j in (job, job2):
        assert jim_env.wait(j)["JOB_STATE"] == "DONE"
    assert (home / "out.txt").read_text() == "hi\n" and (home / "rel" / "o").read_text() == "hi\n"


def _into_home(jim_env, tmp_path):
    other = jim_env.submit("&(executable=/bin/echo)(arguments=x)")
    jim_env.wait(other)
    link = tmp_path / "innocent"
    link.symlink_to(jim_env.home)
    state = f"db/{other}.state"
    return other, [
        f"(directory={jim_env.home})(stdout={state})",
        f"(stdout={jim_env.home}/{state})",
        f"(directory={tmp_path})(stderr=innocent/{state})",
        f"(stdout={tmp_path}/innocent/../innocent/jobs/x)",
        f"(directory={link}/jobs/{other})(outputtar=x.tar.gz)",
        f"(stdout={jim_env.home})",
    ]


def test_paths_into_jims_home_are_refused_at_submit(jim_env, tmp_path):
    other, cases = _into_home(jim_env, tmp_path)
    before = (jim_env.home / "db" / f"{other}.state").read_bytes()
    jobs = jim_env.job_ids()
    for case in cases:
        out = jim_env.protocol("submit", "--rsl", f"&(executable=/bin/echo)(arguments=x){case}")
        assert out.get("ERROR") == "134", (case, out)
        assert "jim's own directory" in out["MESSAGE"] and "\n" not in out["MESSAGE"], out
        assert "Traceback" not in out["_stderr"]
    assert jim_env.job_ids() == jobs  # nothing recorded
    assert (jim_env.home / "db" / f"{other}.state").read_bytes() == before


def _monitor_pid(home, timeout=30.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in processes_of(home):
            try:
                if "_monitor" in p.cmdline():
                    return p.pid
            except psutil.Error:
                continue
        time.sleep(0.1)
    raise AssertionError("no monitor started")


def test_planted_symlinks_never_redirect_a_write(jim_env, tmp_path):
    """Links at the temporary names jim once used (``.<name>.<pid>.tmp``), and at the targets
    themselves, pointing at the owner's other files: those files are unchanged after the job ends."""
    shared = tmp_path / "shared"
    shared.mkdir()
    victims = {n: tmp_path / f"victim.{n}" for n in ("out", "err", "tar", "target")}
    for v in victims.values():
        v.write_text("precious\n")
    go = tmp_path / "go"
    gated = tmp_path / "gated.sh"
    gated.write_text(f'while [ ! -e "{go}" ]; do sleep 0.1; done\necho out\necho err >&2\n')
    job = jim_env.submit(
        f"&(executable=/bin/sh)(arguments={gated})(directory={shared})"
        f"(stdout=out.txt)(stderr=err.txt)(outputtar=o.tar.gz)"
    )
    pid = _monitor_pid(jim_env.home)
    for name, victim in (("out.txt", "out"), ("err.txt", "err"), ("o.tar.gz", "tar")):
        for p in (pid, os.getpid()):
            (shared / f".{name}.{p}.tmp").symlink_to(victims[victim])
    (shared / "out.txt").symlink_to(victims["target"])
    go.touch()
    out = jim_env.wait(job)
    assert out["JOB_STATE"] == "DONE", out
    assert all(v.read_text() == "precious\n" for v in victims.values())
    assert not (shared / "out.txt").is_symlink() and (shared / "out.txt").read_text() == "out\n"
    assert (shared / "err.txt").read_text() == "err\n"
    assert (shared / "o.tar.gz").is_file() and not (shared / "o.tar.gz").is_symlink()
    leftovers = sorted(p.name for p in shared.iterdir() if p.name.endswith(".tmp") and not p.is_symlink())
    assert leftovers == []


@pytest.mark.parametrize("value", ["/dev/null", "gsiftp://host/x"])
def test_stdout_not_a_local_file_is_left_alone(jim_env, value):
    job = jim_env.submit(f"&(executable=/bin/echo)(arguments=x)(stdout={value})")
    assert described(jim_env, job)["stdout"] == [value]


def _parse(proc) -> dict[str, str]:
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


@pytest.mark.users
@pytest.mark.slow  # (installs jim for the test accounts when the sources changed)
def test_another_accounts_links_in_a_shared_directory_redirect_nothing(unix_users, request):
    """bob plants links in a directory both can write to, at jim's old temporary names and at the
    output names themselves, pointing at alice's own files: alice's grid job ends DONE, her files
    are unchanged, and her outputs are her own regular files."""
    alice, bob = unix_users.alice, unix_users.bob
    made = alice.run(["/bin/mktemp", "-d", "/tmp/jimtest-shared-XXXXXX"])
    assert made.returncode == 0, made.stderr
    shared = Path(made.stdout.strip())
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    assert alice.run(["/bin/chmod", "0777", str(shared)]).returncode == 0  # (no sticky bit: a group area)
    victims = {n: alice.write(f"victim.{n}", "precious\n") for n in ("out", "err", "tar", "target")}
    go = shared / "go"
    gated = alice.write("gated.sh", f'while [ ! -e "{go}" ]; do sleep 0.1; done\necho out\necho err >&2\n')
    home = alice.home / ".jim"
    rsl = (
        f"&(executable=/bin/sh)(arguments={gated})(directory={shared})"
        f"(stdout=out.txt)(stderr=err.txt)(outputtar=o.tar.gz)"
    )
    out = _parse(alice.jim("submit", "--rsl", rsl, home=home))
    assert "JOB_ID" in out, out
    job = out["JOB_ID"]
    deadline = time.monotonic() + 30
    monitors: list[int] = []
    while not monitors and time.monotonic() < deadline:
        monitors = [p for p in alice.processes() if b"_monitor" in Path(f"/proc/{p}/cmdline").read_bytes()]
        time.sleep(0.1)
    assert monitors, "alice's monitor never started"
    for name, victim in (("out.txt", "out"), ("err.txt", "err"), ("o.tar.gz", "tar")):
        for pid in monitors:
            link = bob.run(["/bin/ln", "-s", str(victims[victim]), str(shared / f".{name}.{pid}.tmp")])
            assert link.returncode == 0, link.stderr
    assert bob.run(["/bin/ln", "-s", str(victims["target"]), str(shared / "out.txt")]).returncode == 0
    assert bob.run(["/bin/touch", str(go)]).returncode == 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = _parse(alice.jim("poll", "--job-id", job, home=home)).get("JOB_STATE")
        if state in ("DONE", "FAILED"):
            break
        time.sleep(0.3)
    assert state == "DONE"
    assert all(v.read_text() == "precious\n" for v in victims.values())
    for name, text in (("out.txt", "out\n"), ("err.txt", "err\n")):
        path = shared / name
        assert not path.is_symlink() and path.read_text() == text
        assert (path.stat().st_uid, stat.S_IMODE(path.stat().st_mode)) == (alice.uid, 0o600)
    assert (shared / "o.tar.gz").stat().st_uid == alice.uid and not (shared / "o.tar.gz").is_symlink()


@pytest.mark.parametrize("value", ['""', "(a.tar.gz b.tar.gz)", "a.tar.gz b.tar.gz", "(a.tar.gz)"])
def test_an_outputtar_that_is_not_one_path_is_refused(jim_env, value):
    """Empty, a list, or two values: refused with 134 and a one-line reason; nothing recorded."""
    jobs = jim_env.job_ids()
    out = jim_env.protocol("submit", "--rsl", f"&(executable=/bin/true)(outputtar={value})")
    assert out.get("ERROR") == "134", out
    assert "outputtar takes one path" in out["MESSAGE"] and "\n" not in out["MESSAGE"]
    assert jim_env.job_ids() == jobs
    dry = jim_env.run("plan", "--dry-run", "--rsl", f"&(executable=/bin/true)(outputtar={value})")
    assert dry.returncode == 1 and "outputtar takes one path" in dry.stderr
