"""jim on a real Grid Engine (the single-host cell of tests/services/sge).

Start it with ``tests/services/sge/start.sh`` (as root; scripts/test.sh does).
In CI a missing cell fails these tests; elsewhere they are skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from jim.adapters.sge import SgeAdapter
from jim.background import monitor_lock
from jim.locks import SingleInstance
from jim.paths import Home

from support.env import REPO, require_service
from support.jimcli import FAST_CONFIG
from support.services import SGE_SERVICE, sge_env, sge_service_env

pytestmark = pytest.mark.sge


@pytest.fixture(scope="module")
def sge():
    env = sge_env()
    require_service(env is not None, "the test Grid Engine cell (tests/services/sge/start.sh)")
    return env


@pytest.fixture
def gjim(jim_env, sge):
    jim_env.env.update({k: sge[k] for k in sge_service_env()})
    jim_env.config.write_text(
        FAST_CONFIG.replace("lost_grace = 5.0", "lost_grace = 120.0")
        + f"""
[batch]
adapter = "sge"
cache_interval = 1.0
python = "{sys.executable}"
command_timeout = 20
"""
    )
    yield jim_env
    # leave nothing of this test in the queue
    for job in jim_env.job_ids():
        subprocess.run(["qdel", f"jim.{job}.*"], env=sge, capture_output=True)


def qstat_rows(env, user: str = "*") -> list[list[str]]:
    """[job id, state, task, name] per task in qstat (the name from qstat -xml: the text one truncates it)."""
    from lxml import etree

    p = subprocess.run(["qstat", "-u", user, "-xml", "-g", "d"], env=env, capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    rows = []
    for jl in etree.fromstring(p.stdout).iter("job_list"):
        rows.append(
            [jl.findtext("JB_job_number"), jl.findtext("state"), jl.findtext("tasks") or "", jl.findtext("JB_name")]
        )
    return rows


def of_grid_job(rows, job):
    return [r for r in rows if r[3].startswith(f"jim.{job}.")]


def qacct_records(env, job: str, expected: int, timeout: float = 30.0) -> list[dict[str, str]]:
    """The accounting records of grid job ``job`` (waits until ``expected`` are there)."""
    deadline = time.monotonic() + timeout
    recs: list[dict[str, str]] = []
    while time.monotonic() < deadline:
        p = subprocess.run(["qacct", "-j", f"jim.{job}.*"], env=env, capture_output=True, text=True)
        recs = []
        for block in p.stdout.split("=" * 62):
            f = dict((ln.split(None, 1) + [""])[:2] for ln in block.splitlines() if ln.strip())
            if f.get("jobname", "").startswith(f"jim.{job}."):
                recs.append({k: v.strip() for k, v in f.items()})
        if len(recs) >= expected:
            return recs
        time.sleep(0.5)
    return recs


def test_montecarlo_grid_job_to_done(gjim, sge):
    """A Monte Carlo grid job (the demo's driver) split into 8 local jobs of one array job, to DONE."""
    driver = REPO / "examples" / "mc_driver.py"
    job = gjim.submit(
        f"&(executable={sys.executable})(arguments={driver} --seconds-per-event 0.002)"
        "(jimtype=montecarlo)(events=2000)(eventsperjob=250)(outputs=*.dat)(jobname=sge-mc)"
    )
    out = gjim.wait(job, timeout=180)
    assert out["JOB_STATE"] == "DONE" and out["EXIT_CODE"] == "0", gjim.run("status", job).stdout
    st = gjim.status(job)
    assert st["counts"] == {"DONE": 8}
    assert all(lj["evidence"] == "wrapper-exit-file" for lj in st["localJobs"])
    ids = [lj["batchId"] for lj in st["localJobs"]]
    assert len({i.split(".")[0] for i in ids}) == 1, "one array job for the 8 local jobs"
    assert [int(i.split(".")[1]) for i in ids] == list(range(1, 9))  # task k+1 is local job k
    ranges = sorted((int(lj["slice"]["firstEvent"]), int(lj["slice"]["lastEvent"])) for lj in st["localJobs"])
    assert ranges[0] == (1, 250) and ranges[-1] == (1751, 2000)
    # the driver's progress went through jim: every phase complete in every local job
    assert all(
        {p["name"] for p in lj["progress"]} >= {"generation", "d0gstar", "reconstruction"}
        and all(p["done"] == p["total"] for p in lj["progress"])
        for lj in st["localJobs"]
    )
    with tarfile.open(st["outputTar"]) as t:
        names = t.getnames()
    assert sum(n.split("/")[-1].startswith("stdout.") for n in names) == 8
    assert any(".dat" in n for n in names) and f"{job}/MANIFEST.json" in names
    recs = qacct_records(sge, job, 8)
    assert len(recs) == 8 and all(r["failed"] == "0" and r["exit_status"] == "0" for r in recs)
    assert not of_grid_job(qstat_rows(sge), job)


def test_exit_100_and_99_reach_the_grid_without_eqw_or_requeue(gjim, sge):
    """Grid Engine puts a job that exits 100 into Eqw and requeues one that exits 99 forever:
    jim's wrapper exits 1 instead, and the grid still gets the true code."""
    rsl = '&(executable=/bin/sh)(arguments=-c "sleep 2; [ $JIM_INDEX = 1 ] && exit {code}; exit 0")(count=3)'
    j100 = gjim.submit(rsl.format(code=100))
    j99 = gjim.submit(rsl.format(code=99))
    seen: set[str] = set()
    deadline = time.monotonic() + 120
    outs = {}
    while time.monotonic() < deadline and len(outs) < 2:
        seen |= {r[1] for r in of_grid_job(qstat_rows(sge), j100) + of_grid_job(qstat_rows(sge), j99)}
        for j in (j100, j99):
            if j not in outs:
                o = gjim.poll(j)
                if o["JOB_STATE"] in ("DONE", "FAILED"):
                    outs[j] = o
        time.sleep(0.3)
    assert set(outs) == {j100, j99}, outs
    assert outs[j100]["JOB_STATE"] == "FAILED" and outs[j100]["EXIT_CODE"] == "100", outs[j100]
    assert outs[j99]["JOB_STATE"] == "FAILED" and outs[j99]["EXIT_CODE"] == "99", outs[j99]
    assert not any("E" in s or s.startswith("R") for s in seen), f"Grid Engine states seen: {seen}"
    for j, code in ((j100, 100), (j99, 99)):
        st = gjim.status(j)
        by_index = {lj["index"]: lj for lj in st["localJobs"]}
        assert by_index[1]["state"] == "FAILED" and by_index[1]["exitCode"] == code
        assert by_index[1]["evidence"] == "wrapper-exit-file"
        assert by_index[0]["state"] == by_index[2]["state"] == "DONE"
        # Grid Engine saw exit 1, once: no error state (failed 30), no requeue (failed 25)
        recs = qacct_records(sge, j, 3)
        assert len(recs) == 3, recs
        task2 = [r for r in recs if r["taskid"] == "2"]
        assert [(r["failed"], r["exit_status"].split()[0]) for r in task2] == [("0", "1")]
    assert not of_grid_job(qstat_rows(sge), j100) + of_grid_job(qstat_rows(sge), j99)


def test_cancel_mid_run_leaves_nothing_in_qstat(gjim, sge):
    job = gjim.submit("&(executable=/bin/sleep)(arguments=600)(count=40)")
    gjim.wait_running(job, 10)
    t = time.monotonic()
    out = gjim.protocol("cancel", "--job-id", job)
    took = time.monotonic() - t
    assert out["JOB_STATE"] == "FAILED", out
    # qdel'd running tasks stay in deletion (dr) for a second or so
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and of_grid_job(qstat_rows(sge), job):
        time.sleep(0.3)
    assert not of_grid_job(qstat_rows(sge), job), "tasks of the grid job still in qstat"
    st = gjim.status(job)
    assert st["state"] == "FAILED" and os.path.exists(st["outputTar"])
    assert all(lj["state"] in ("CANCELLED", "DONE") for lj in st["localJobs"])
    assert took < 30, f"cancel took {took:.1f} s"


def test_gram_maxwalltime_is_every_local_jobs_h_rt(gjim, sge):
    job = gjim.submit("&(executable=/bin/sleep)(arguments=600)(count=2)(maxwalltime=7)")
    st = gjim.wait_running(job, 1)
    try:
        sge_job = next(lj["batchId"] for lj in gjim.status(job)["localJobs"] if lj["batchId"]).split(".")[0]
        p = subprocess.run(["qstat", "-j", sge_job], env=sge, capture_output=True, text=True, timeout=30)
        assert "h_rt=420" in p.stdout, p.stdout + p.stderr
    finally:
        assert gjim.protocol("cancel", "--job-id", job)["JOB_STATE"] == "FAILED", st


def test_jobs_that_left_qstat_end_with_right_exit_codes(gjim, sge):
    """No monitor while the jobs run and leave qstat; their exit files are lost too:
    only the accounting file can tell, and it must."""
    home = Home(gjim.home)
    home.ensure()
    hold = SingleInstance(monitor_lock(home.root))
    assert hold.acquire()  # no monitor runs while we hold its lock
    try:
        job = gjim.submit('&(executable=/bin/sh)(arguments=-c "exit $((JIM_INDEX * 2))")(count=3)')
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the worker submits them
            if all(lj["batchId"] for lj in gjim.status(job)["localJobs"]):
                break
            time.sleep(0.3)
        assert len(qacct_records(sge, job, 3)) == 3
        assert not of_grid_job(qstat_rows(sge), job)
        for k in range(3):
            (home.local_dir(job, k) / "exit_code").unlink()
    finally:
        hold.release()
    out = gjim.wait(job, timeout=60)
    assert out["JOB_STATE"] == "FAILED" and out["EXIT_CODE"] == "2"
    st = gjim.status(job)
    assert [(lj["exitCode"], lj["evidence"]) for lj in st["localJobs"]] == [
        (0, "accounting"),
        (2, "accounting"),
        (4, "accounting"),
    ]


def test_held_jobs_are_suspended_then_cancelled_with_a_reason(gjim, sge):
    gjim.config.write_text(
        gjim.config.read_text()
        .replace("command_timeout = 20", 'command_timeout = 20\nqsub_options = ["-h"]')
        .replace("[monitor]\n", "[monitor]\nheld_timeout = 4.0\n")
    )
    job = gjim.submit("&(executable=/bin/true)(count=3)")
    out = gjim.wait(job, states=("SUSPENDED",), timeout=60)
    assert out["JOB_STATE"] == "SUSPENDED"
    assert {lj["state"] for lj in gjim.status(job)["localJobs"]} == {"HELD"}
    out = gjim.wait(job, timeout=120)  # the monitor looks at an unchanged grid job once a minute
    assert out["JOB_STATE"] == "FAILED"
    st = gjim.status(job)
    assert all(
        lj["state"] == "CANCELLED" and "held for more than 4 s" in lj["reason"] and "hqw" in lj["reason"]
        for lj in st["localJobs"]
    )
    assert not of_grid_job(qstat_rows(sge), job)


@pytest.mark.slow
def test_qmaster_outage_changes_nothing(gjim, sge):
    """sge_qmaster stopped while local jobs run and end: polls stay fast and ACTIVE, nothing
    changes; once it is back every local job gets its true exit code, with the same batch ids."""
    if os.geteuid() != 0:
        pytest.skip("stopping the test cell's qmaster needs root")
    job = gjim.submit('&(executable=/bin/sh)(arguments=-c "sleep 12; exit $((JIM_INDEX % 2 * 5))")(count=4)')
    before = gjim.wait_running(job, 4)
    ctl = str(SGE_SERVICE / "ctl.sh")
    subprocess.run([ctl, "stop-qmaster"], env=sge, check=True, capture_output=True, timeout=60)
    try:
        t_end = time.monotonic() + 20
        slowest = 0.0
        while time.monotonic() < t_end:
            t = time.monotonic()
            out = gjim.poll(job)
            slowest = max(slowest, time.monotonic() - t)
            assert out["JOB_STATE"] == "ACTIVE", out
            time.sleep(1)
        assert slowest < 5.0, f"a poll took {slowest:.1f} s while sge_qmaster was down"
        assert (Path(gjim.home) / "cache" / "sge.degraded").exists()
        # the wrappers have ended meanwhile (their exit files are there), but with the query failing
        # that is no news: the batch system has not confirmed it
    finally:
        subprocess.run([ctl, "start-qmaster"], env=sge, check=True, capture_output=True, timeout=120)
    out = gjim.wait(job, timeout=90)
    assert out["JOB_STATE"] == "FAILED" and out["EXIT_CODE"] == "5"
    st = gjim.status(job)
    assert [lj["exitCode"] for lj in st["localJobs"]] == [0, 5, 0, 5]
    assert [lj["batchId"] for lj in st["localJobs"]] == [lj["batchId"] for lj in before["localJobs"]]
    assert not (Path(gjim.home) / "cache" / "sge.degraded").exists()


def test_free_slots_on_the_test_cell(sge, tmp_path, monkeypatch):
    for k in sge_service_env():
        monkeypatch.setenv(k, sge[k])
    free = SgeAdapter(Home(tmp_path).ensure(), {"queue": "all.q"}).free_slots()
    assert isinstance(free, int) and 0 <= free <= 32  # the cell's one queue has 32 slots
    assert SgeAdapter(Home(tmp_path).ensure(), {"queue": "nosuchqueue"}).free_slots() is None


def test_a_local_job_of_four_cores_gets_four_slots(gjim, sge):
    """cores=4 through the site's parallel environment (smp, $pe_slots): Grid Engine grants the job
    4 slots on one host, and its memory per slot is the whole job's over 4."""
    gjim.config.write_text(gjim.config.read_text() + 'parallel_environment = "smp"\nmemory_resources = ["h_vmem"]\n')
    job = gjim.submit("&(executable=/bin/sh)(arguments=-c 'echo cores=$JIM_CORES')(cores=4)(maxmemory=2000)(count=2)")
    out = gjim.wait(job, timeout=180)
    assert out["JOB_STATE"] == "DONE", gjim.run("status", job).stdout
    recs = qacct_records(sge, job, 2)
    assert len(recs) == 2 and all(r["slots"] == "4" and r["granted_pe"] == "smp" for r in recs), recs
    assert all(r["category"] == "-l h_vmem=500M -pe smp 4" for r in recs), recs  # 2000 MB over 4 slots
    with tarfile.open(gjim.status(job)["outputTar"]) as t:
        texts = [t.extractfile(m).read() for m in t.getmembers() if "stdout." in m.name]  # type: ignore[union-attr]
    assert texts and all(b"cores=4" in x for x in texts)


def test_cores_without_a_parallel_environment_are_refused(gjim):
    """A site that names no parallel environment: the local jobs fail at submit, saying which option."""
    job = gjim.submit("&(executable=/bin/true)(cores=2)")
    out = gjim.wait(job, timeout=120)
    assert out["JOB_STATE"] == "FAILED", out
    reasons = [lj.get("reason") or "" for lj in gjim.status(job)["localJobs"]]
    assert all("parallel_environment" in r for r in reasons), reasons
