"""Caps on the real Slurm (tests/services/slurm; docs/caps.md).

A grid job of 200 local jobs under a per-user cap of 20 never has more than 20 in ``squeue``, sampled
at every poll, and all 200 end DONE.  Two real accounts (tests/support/users.py) on the same Slurm,
with a per-user cap and a site-wide cap counted through a shared directory: the second account's
local jobs go straight in while the first's are held at its cap.

``squeue`` is counted in the states a local job waits or runs in (PENDING, RUNNING, SUSPENDED,
CONFIGURING); a task COMPLETING has ended (its wrapper's exit-code file says so, which is what jim
goes by) and Slurm is releasing it: those are counted apart and reported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from jim.db import Database
from jim.paths import Home

from support import users as unix
from support.env import require_service
from support.jimcli import FAST_CONFIG, Jim
from support.services import cluster_lock, slurm_env

pytestmark = pytest.mark.slurm

IN_BATCH = {"SUBMITTING", "QUEUED", "RUNNING", "HELD", "SUSPENDED"}
WAITING = ("PENDING", "RUNNING", "SUSPENDED", "CONFIGURING")
SLURM = """
[batch]
adapter = "slurm"
partition = "debug"
cache_interval = 1.0
python = "{python}"
command_timeout = 20
"""


@pytest.fixture(scope="module")
def slurm():
    env = slurm_env()
    require_service(env is not None, "the test Slurm cluster (tests/services/slurm/start.sh)")
    if os.geteuid() != 0:
        pytest.skip("the test cluster's control commands need root")
    with cluster_lock():
        yield env


def squeue(env: dict[str, str]) -> list[tuple[str, str, str]]:
    """(job name, state, user) of every task in squeue, one row per array task."""
    p = subprocess.run(["squeue", "-h", "-r", "-o", "%j|%T|%u"], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return [tuple(line.split("|", 2)) for line in p.stdout.splitlines()]  # type: ignore[misc]


def counted(rows: list[tuple[str, str, str]], grid_id: str) -> tuple[int, int]:
    """(tasks of the grid job waiting or running, those COMPLETING)."""
    mine = [state for name, state, _user in rows if name.startswith(f"jim.{grid_id}.")]
    return sum(s in WAITING for s in mine), sum(s == "COMPLETING" for s in mine)


def in_batch(home: Path, grid_id: str) -> int:
    return sum(lj.state.value in IN_BATCH for lj in Database(Home(home)).read(grid_id).local_jobs())


def owners_of(directory: Path) -> set[int]:
    """The owners of the counts in the shared directory now."""
    out = set()
    for f in directory.iterdir():
        try:
            if not f.name.startswith("."):
                out.add(f.lstat().st_uid)
        except FileNotFoundError:  # (removed meanwhile: its home has nothing in the batch system)
            continue
    return out


def cancel_leftovers(env: dict[str, str], grid_ids: list[str]) -> None:
    names = {name for name, _s, _u in squeue(env) if any(name.startswith(f"jim.{g}.") for g in grid_ids)}
    if names:
        subprocess.run(["scancel", "-n", ",".join(sorted(names))], env=env, capture_output=True, timeout=60)


def test_200_local_jobs_never_more_than_20_in_squeue(jim_env: Jim, slurm):
    jim_env.env["SLURM_CONF"] = slurm["SLURM_CONF"]
    jim_env.config.write_text(
        FAST_CONFIG.replace("lost_grace = 5.0", "lost_grace = 120.0")
        + SLURM.format(python=sys.executable)
        + "\n[caps]\nmax_local_jobs_per_user = 20\n"
    )
    job = jim_env.submit("&(executable=/bin/sleep)(arguments=2)(count=200)")
    try:
        most = most_recorded = completing = polls = 0
        held_seen = False
        deadline = time.monotonic() + 900
        while True:
            out = jim_env.poll(job)  # (at every poll: squeue and the record)
            n, ending = counted(squeue(slurm), job)
            recorded = in_batch(jim_env.home, job)
            assert n <= 20, f"{n} local jobs of the grid job in squeue after poll {polls}"
            assert recorded <= 20, f"{recorded} local jobs in the batch system in the record after poll {polls}"
            most, most_recorded = max(most, n), max(most_recorded, recorded)
            completing = max(completing, n + ending)
            polls += 1
            if not held_seen and polls % 10 == 1:
                st = jim_env.status(job)
                held_seen = any(
                    (lj.get("waiting") or "").startswith("waiting for a slot: at most 20") for lj in st["localJobs"]
                )
            if out.get("JOB_STATE") in ("DONE", "FAILED"):
                break
            assert time.monotonic() < deadline, f"not ended after {polls} polls: {out}"
        assert out["JOB_STATE"] == "DONE", jim_env.run("status", job).stdout
        st = jim_env.status(job)
        assert st["counts"] == {"DONE": 200} and len({lj["batchId"] for lj in st["localJobs"]}) == 200
        assert most >= 15 and held_seen  # (the cap was what held them: it was reached, and shown)
        assert polls > 20
        print(f"\n{polls} polls; at most {most} in squeue ({completing} with COMPLETING), {most_recorded} recorded")
    finally:
        cancel_leftovers(slurm, [job])


@pytest.fixture
def shared_dir():
    """A shared directory for the site-wide cap that every account can reach, as root makes it (1777)."""
    path = Path("/var/tmp") / f"jim-test-caps-{uuid.uuid4().hex[:8]}"
    path.mkdir(mode=0o755)
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.users
def test_a_second_user_is_not_held_back_by_the_first(unix_users, slurm, shared_dir):
    alice, bob = unix_users.alice, unix_users.bob
    config = (
        unix.CONFIG.replace("lost_grace = 5.0", "lost_grace = 120.0")
        + SLURM.format(python="/usr/bin/python3")
        + f'\n[caps]\nmax_local_jobs_per_user = 20\nmax_local_jobs_site = 40\nshared_dir = "{shared_dir}"\n'
    )
    env = {"SLURM_CONF": slurm["SLURM_CONF"]}
    homes, configs = {}, {}
    for user in (alice, bob):
        configs[user.name] = user.write("jim-caps.toml", config, 0o644)
        homes[user.name] = user.home / "jimhome-caps"
    ids: dict[str, str] = {}

    def submit(user: unix.UnixUser, rsl: str) -> str:
        p = user.jim("submit", "--rsl", rsl, home=homes[user.name], config=configs[user.name], env=env)
        assert p.returncode == 0 and "JOB_ID=" in p.stdout, p.stdout + p.stderr
        return p.stdout.split("JOB_ID=", 1)[1].split()[0]

    def poll(user: unix.UnixUser) -> str:
        p = user.jim("poll", "--job-id", ids[user.name], home=homes[user.name], config=configs[user.name], env=env)
        return p.stdout.split("JOB_STATE=", 1)[1].split()[0] if "JOB_STATE=" in p.stdout else p.stdout + p.stderr

    try:
        ids[alice.name] = submit(alice, "&(executable=/bin/sleep)(arguments=3)(count=60)")
        deadline = time.monotonic() + 120
        while counted(squeue(slurm), ids[alice.name])[0] < 20:  # alice at her cap
            assert time.monotonic() < deadline, "alice's local jobs never reached her cap"
            time.sleep(0.5)
        ids[bob.name] = submit(bob, "&(executable=/bin/sleep)(arguments=10)(count=10)")
        bob_most, alice_most, polls = 0, 0, 0
        owners: set[int] = set()
        states = {}
        deadline = time.monotonic() + 600
        while True:
            states = {user.name: poll(user) for user in (alice, bob)}
            rows = squeue(slurm)
            a, b = counted(rows, ids[alice.name])[0], counted(rows, ids[bob.name])[0]
            assert a <= 20 and a + b <= 40, (a, b)
            alice_most, bob_most, polls = max(alice_most, a), max(bob_most, b), polls + 1
            owners |= owners_of(shared_dir)
            if all(s in ("DONE", "FAILED") for s in states.values()):
                break
            assert time.monotonic() < deadline, f"not ended after {polls} polls: {states}"
        shown = {
            u.name: u.jim("status", ids[u.name], home=homes[u.name], config=configs[u.name]).stdout
            for u in (alice, bob)
        }
        assert states == {alice.name: "DONE", bob.name: "DONE"}, shown
        assert bob_most == 10, f"bob's local jobs were held back: at most {bob_most} of 10 in squeue at once"
        assert alice_most == 20
        for user, n in ((alice, 60), (bob, 10)):
            p = user.jim("status", ids[user.name], "--json", home=homes[user.name], config=configs[user.name])
            assert json.loads(p.stdout)["counts"] == {"DONE": n}, p.stdout[-500:] + p.stderr
        # each home's count was in the shared directory, its owner's, and is gone now nothing is in
        assert owners == {alice.uid, bob.uid}, owners
        assert not [f for f in shared_dir.iterdir() if not f.name.startswith(".")]
        bob_log = (homes[bob.name] / "log" / "jim.log").read_text()
        assert "waiting for a slot" not in bob_log
    finally:
        cancel_leftovers(slurm, list(ids.values()))
        for user in (alice, bob):
            user.kill_all()
