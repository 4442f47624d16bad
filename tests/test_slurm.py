"""jim on a real Slurm (the single-node cluster of tests/services/slurm).

Start it with ``tests/services/slurm/start.sh`` (as root; scripts/test.sh does).
In CI a missing cluster fails these tests; elsewhere they are skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jim.background import monitor_lock
from jim.locks import SingleInstance
from jim.paths import Home

from support.env import require_service
from support.jimcli import FAST_CONFIG
from support.services import SLURM_SERVICE, cluster_lock, slurm_env

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def slurm():
    env = slurm_env()
    require_service(env is not None, "the test Slurm cluster (tests/services/slurm/start.sh)")
    if os.geteuid() != 0:
        pytest.skip("the test cluster's control commands need root")
    with cluster_lock():
        yield env


@pytest.fixture
def sjim(jim_env, slurm):
    jim_env.env["SLURM_CONF"] = slurm["SLURM_CONF"]
    jim_env.config.write_text(
        FAST_CONFIG.replace("lost_grace = 5.0", "lost_grace = 120.0")
        + f"""
[batch]
adapter = "slurm"
partition = "debug"
cache_interval = 1.0
python = "{sys.executable}"
command_timeout = 20
"""
    )
    yield jim_env
    # leave nothing of this test in the queue
    for job in jim_env.job_ids():
        subprocess.run(["scancel", "-n", ",".join(_names(slurm, job)) or "none"], env=slurm, capture_output=True)


def squeue_rows(env, *extra) -> list[list[str]]:
    p = subprocess.run(
        ["squeue", "-h", "-r", *extra, "-o", "%i|%T|%j"], env=env, capture_output=True, text=True, timeout=30
    )
    assert p.returncode == 0, p.stderr
    return [line.split("|") for line in p.stdout.splitlines()]


def _names(env, grid_id) -> list[str]:
    return sorted({r[2] for r in squeue_rows(env, "-t", "all") if r[2].startswith(f"jim.{grid_id}.")})


def sacct_tasks(env, grid_id, expected: int, timeout=30.0) -> list[list[str]]:
    """Array tasks of this grid job in accounting (records arrive a second or two after the end;
    waits until ``expected`` are there and none is still pending or running)."""
    deadline = time.monotonic() + timeout
    rows = []
    while time.monotonic() < deadline:
        p = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-o", "JobID,State,ExitCode,JobName", "-S", "now-1hour", "-u", "root"],
            env=env,
            capture_output=True,
            text=True,
        )
        rows = [line.split("|") for line in p.stdout.splitlines() if f"|jim.{grid_id}." in line]
        if len(rows) >= expected and all(r[1].split()[0] not in ("PENDING", "RUNNING") for r in rows):
            return rows
        time.sleep(1)
    return rows


def test_200_local_jobs_to_done(sjim, slurm):
    job = sjim.submit('&(executable=/bin/sh)(arguments=-c "echo task $JIM_INDEX")(count=200)')
    out = sjim.wait(job, timeout=300)
    assert out["JOB_STATE"] == "DONE", sjim.run("status", job).stdout
    st = sjim.status(job)
    assert len(st["localJobs"]) == 200 and st["counts"] == {"DONE": 200}
    tasks = sacct_tasks(slurm, job, 200)
    assert len(tasks) == 200, f"{len(tasks)} array tasks in sacct"
    assert len({r[0].split("_")[0] for r in tasks}) == 1, "one array for 200 local jobs"
    assert all(r[1] == "COMPLETED" for r in tasks)
    assert len({lj["batchId"] for lj in st["localJobs"]}) == 200


def test_failing_local_job_fails_grid_job_with_its_exit_code(sjim):
    job = sjim.submit('&(executable=/bin/sh)(arguments=-c "[ $JIM_INDEX = 3 ] && exit 7; exit 0")(count=5)')
    out = sjim.wait(job, timeout=120)
    assert out["JOB_STATE"] == "FAILED" and out["EXIT_CODE"] == "7"
    by_index = {lj["index"]: lj for lj in sjim.status(job)["localJobs"]}
    assert by_index[3]["state"] == "FAILED" and by_index[3]["exitCode"] == 7
    assert all(by_index[k]["state"] == "DONE" for k in (0, 1, 2, 4))


def test_cancel_mid_run(sjim, slurm):
    job = sjim.submit("&(executable=/bin/sleep)(arguments=600)(count=40)")
    sjim.wait_running(job, 10)
    out = sjim.protocol("cancel", "--job-id", job)
    assert out["JOB_STATE"] == "FAILED", out
    active = [r for r in squeue_rows(slurm) if r[2].startswith(f"jim.{job}.")]
    assert not active, f"tasks of the grid job still queued or running: {active}"
    st = sjim.status(job)
    assert st["state"] == "FAILED" and os.path.exists(st["outputTar"])
    assert all(lj["state"] in ("CANCELLED", "DONE") for lj in st["localJobs"])


def test_gram_maxwalltime_is_every_local_jobs_time_limit(sjim, slurm):
    job = sjim.submit("&(executable=/bin/sleep)(arguments=600)(count=3)(maxwalltime=7)")
    sjim.wait_running(job, 1)
    try:
        p = subprocess.run(["squeue", "-h", "-r", "-o", "%j|%l"], env=slurm, capture_output=True, text=True, timeout=30)
        limits = {line.split("|")[1] for line in p.stdout.splitlines() if line.startswith(f"jim.{job}.")}
        assert limits == {"7:00"}, p.stdout
    finally:
        assert sjim.protocol("cancel", "--job-id", job)["JOB_STATE"] == "FAILED"


def test_controller_outage_changes_nothing(sjim, slurm):
    job = sjim.submit('&(executable=/bin/sh)(arguments=-c "sleep 20; exit $((JIM_INDEX % 2 * 5))")(count=6)')
    before = sjim.wait_running(job, 6)
    ctl = str(SLURM_SERVICE / "ctl.sh")
    subprocess.run([ctl, "stop-ctld"], env=slurm, check=True, capture_output=True, timeout=60)
    try:
        t_end = time.monotonic() + 60
        slowest = 0.0
        while time.monotonic() < t_end:
            t = time.monotonic()
            out = sjim.poll(job)
            slowest = max(slowest, time.monotonic() - t)
            assert out["JOB_STATE"] == "ACTIVE", out
            st = sjim.status(job)
            assert not any(lj["state"] in ("DONE", "FAILED", "CANCELLED", "LOST") for lj in st["localJobs"]), st[
                "counts"
            ]
            time.sleep(2)
        assert slowest < 5.0, f"a poll took {slowest:.1f} s while slurmctld was down"
        assert (Path(sjim.home) / "cache" / "slurm.degraded").exists()
    finally:
        subprocess.run([ctl, "start-ctld", "--settle"], env=slurm, check=True, capture_output=True, timeout=120)
    out = sjim.wait(job, timeout=60)
    assert out["JOB_STATE"] == "FAILED" and out["EXIT_CODE"] == "5"
    st = sjim.status(job)
    assert [lj["exitCode"] for lj in st["localJobs"]] == [0, 5, 0, 5, 0, 5]
    assert [lj["batchId"] for lj in st["localJobs"]] == [lj["batchId"] for lj in before["localJobs"]]
    assert not (Path(sjim.home) / "cache" / "slurm.degraded").exists()


def test_jobs_that_left_squeue_end_with_right_exit_codes(sjim, slurm):
    """No monitor while the jobs finish and age out of squeue; their exit files are lost too:
    only accounting can tell, and it must."""
    home = Home(sjim.home)
    home.ensure()
    hold = SingleInstance(monitor_lock(home.root))
    assert hold.acquire()  # no monitor runs while we hold its lock
    try:
        job = sjim.submit('&(executable=/bin/sh)(arguments=-c "exit $((JIM_INDEX * 2))")(count=3)')
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the worker submits them
            if all(lj["batchId"] for lj in sjim.status(job)["localJobs"]):
                break
            time.sleep(0.5)
        names = _names(slurm, job)
        deadline = time.monotonic() + 150  # MinJobAge=30 s, purged a little later
        while time.monotonic() < deadline and any(r[2] in names for r in squeue_rows(slurm, "-t", "all")):
            time.sleep(2)
        assert not any(r[2] in names for r in squeue_rows(slurm, "-t", "all")), "jobs never left squeue"
        for k in range(3):
            (home.local_dir(job, k) / "exit_code").unlink()
    finally:
        hold.release()
    out = sjim.wait(job, timeout=60)
    assert out["JOB_STATE"] == "FAILED" and out["EXIT_CODE"] == "2"
    st = sjim.status(job)
    assert [(lj["exitCode"], lj["evidence"]) for lj in st["localJobs"]] == [
        (0, "accounting"),
        (2, "accounting"),
        (4, "accounting"),
    ]


def test_interrupted_submit_gives_exactly_one_array(sjim, slurm):
    job = sjim.submit("&(executable=/bin/true)(count=30)", env={"JIM_FAULT": "worker-after-submit"})
    out = sjim.wait(job, timeout=120)
    assert out["JOB_STATE"] == "DONE"
    tasks = sacct_tasks(slurm, job, 30)
    time.sleep(3)  # a duplicate array would have shown up by now
    tasks = sacct_tasks(slurm, job, 30)
    arrays = {r[0].split("_")[0] for r in tasks}
    assert len(arrays) == 1 and len(tasks) == 30, tasks
    log = (Path(sjim.home) / "jobs" / job / "jim.log").read_text()
    assert "reconciled 30 local jobs found by tag" in log


def test_held_jobs_are_suspended_then_cancelled_with_a_reason(sjim, slurm):
    sjim.config.write_text(
        sjim.config.read_text()
        .replace("command_timeout = 20", 'command_timeout = 20\nsbatch_options = ["--hold"]')
        .replace("[monitor]\n", "[monitor]\nheld_timeout = 4.0\n")
    )
    job = sjim.submit("&(executable=/bin/true)(count=3)")
    out = sjim.wait(job, states=("SUSPENDED",), timeout=60)
    assert out["JOB_STATE"] == "SUSPENDED"
    assert {lj["state"] for lj in sjim.status(job)["localJobs"]} == {"HELD"}
    out = sjim.wait(job, timeout=60)
    assert out["JOB_STATE"] == "FAILED"
    st = sjim.status(job)
    assert all(lj["state"] == "CANCELLED" and "held for more than 4 s" in lj["reason"] for lj in st["localJobs"])
    assert not [r for r in squeue_rows(slurm) if r[2].startswith(f"jim.{job}.")]
