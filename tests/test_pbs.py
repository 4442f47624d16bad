"""jim on PBS-style commands: Slurm's torque wrappers (qsub/qstat/qdel) over the test Slurm.

The wrappers come from tests/services/pbs/start.sh (Debian's slurm-wlm-torque,
unpacked off the system PATH: it conflicts with Grid Engine's client), the
cluster from tests/services/slurm/start.sh.  In CI a missing one fails these
tests; elsewhere they are skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.env import require_service
from support.jimcli import FAST_CONFIG
from support.services import PBS_BIN, pbs_available, pbs_env

pytestmark = [pytest.mark.slurm, pytest.mark.pbs]  # (the PBS wrappers drive the test Slurm)


@pytest.fixture(scope="module")
def pbs():
    require_service(
        pbs_available(),
        "the PBS wrappers over the test Slurm (tests/services/pbs/start.sh, tests/services/slurm/start.sh)",
    )
    return {**os.environ, **pbs_env()}


def pbs_config(extra: str = "") -> str:
    return (
        FAST_CONFIG.replace("lost_grace = 5.0", "lost_grace = 60.0")
        + f"""
[batch]
adapter = "pbs"
flavour = "slurm"
queue = "debug"
cache_interval = 1.0
python = "{sys.executable}"
command_timeout = 20
{extra}"""
    )


@pytest.fixture
def pjim(jim_env, pbs):
    jim_env.env.update(pbs_env())
    jim_env.config.write_text(pbs_config())
    yield jim_env
    for job in jim_env.job_ids():  # leave nothing of this test in the queue
        ids = [lj["batchId"] for lj in jim_env.status(job)["localJobs"] if lj["batchId"]]
        if ids:
            subprocess.run(["qdel", *ids], env=pbs, capture_output=True)


def qstat_full(env) -> str:
    p = subprocess.run(["qstat", "-f"], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode in (0, 153), p.stderr
    return p.stdout


def test_grid_job_end_to_end_to_done(pjim, pbs):
    """A grid job through qsub/qstat/qdel only: every local job its own PBS job, named by its tag."""
    job = pjim.submit("&(executable=/bin/sh)(arguments=-c 'echo pbs $JIM_INDEX; test -n \"$JIM_TAG\"')(count=6)")
    out = pjim.wait(job, timeout=120)
    assert out["JOB_STATE"] == "DONE" and out["EXIT_CODE"] == "0", pjim.run("status", job).stdout
    st = pjim.status(job)
    ids = [lj["batchId"] for lj in st["localJobs"]]
    assert len(set(ids)) == 6 and all(i.isdigit() for i in ids), ids
    assert all(lj["state"] == "DONE" and lj["evidence"] == "wrapper-exit-file" for lj in st["localJobs"])
    from jim.adapters.pbs import FLAVOURS, jim_records

    names = {tag: bid for bid, tag, _ in jim_records(qstat_full(pbs), FLAVOURS["slurm"])}
    for lj in st["localJobs"]:  # still listed (MinJobAge), under jim's tag
        assert names.get(lj["tag"]) in (lj["batchId"], None)
    assert os.path.exists(st["outputTar"])
    import tarfile

    with tarfile.open(st["outputTar"]) as t:
        outs = [m for m in t.getnames() if "/stdout." in m or m.startswith("stdout.")]
    assert len(outs) == 6, t.getnames()[:20]


def test_failing_local_job_gives_its_exit_code(pjim):
    job = pjim.submit('&(executable=/bin/sh)(arguments=-c "[ $JIM_INDEX = 2 ] && exit 9; exit 0")(count=4)')
    out = pjim.wait(job, timeout=120)
    assert out["JOB_STATE"] == "FAILED" and out["EXIT_CODE"] == "9"
    by_index = {lj["index"]: lj for lj in pjim.status(job)["localJobs"]}
    assert by_index[2]["state"] == "FAILED" and by_index[2]["exitCode"] == 9
    assert all(by_index[k]["state"] == "DONE" for k in (0, 1, 3))


def test_cancel_through_qdel(pjim, pbs):
    job = pjim.submit("&(executable=/bin/sleep)(arguments=600)(count=5)")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if sum(lj["state"] == "RUNNING" for lj in pjim.status(job)["localJobs"]) >= 3:
            break
        time.sleep(0.5)
    out = pjim.protocol("cancel", "--job-id", job)
    assert out["JOB_STATE"] == "FAILED", out
    st = pjim.status(job)
    assert all(lj["state"] in ("CANCELLED", "DONE") for lj in st["localJobs"]), st["counts"]
    from jim.adapters.pbs import FLAVOURS, parse_qstat

    live = parse_qstat(qstat_full(pbs), FLAVOURS["slurm"])
    ours = {lj["batchId"] for lj in st["localJobs"]}
    assert not [b for b, s in live.items() if b in ours and not s.state.terminal]
    # qdel let the wrappers flush: they recorded the termination
    assert any(
        "terminated_by" in (Path(pjim.home) / "jobs" / job / "local" / str(lj["index"]) / "exit_code").read_text()
        for lj in st["localJobs"]
        if (Path(pjim.home) / "jobs" / job / "local" / str(lj["index"]) / "exit_code").exists()
    )


def test_flavour_auto_detects_the_slurm_wrappers(tmp_path, pbs):
    from jim.adapters.pbs import PbsAdapter
    from jim.paths import Home

    a = PbsAdapter(Home(tmp_path).ensure(), {"bin_dir": str(PBS_BIN)})
    assert a.flavour.name == "slurm"
    assert (tmp_path / "cache" / "pbs-flavour.json").exists()


def test_a_local_job_of_four_cores_gets_four_cpus(pjim, pbs):
    """cores=4 as -l nodes=1:ppn=4: the wrappers' qstat -f shows the job's 4 CPUs (from Slurm), and
    its wall time (the same -l list: their qsub keeps only its last -l)."""
    from jim.adapters.pbs import FLAVOURS, jim_records

    job = pjim.submit("&(executable=/bin/sleep)(arguments=300)(cores=4)(maxmemory=400)(maxwalltime=30)")
    deadline, rec = time.monotonic() + 90, None
    while time.monotonic() < deadline and rec is None:
        ids = {lj["batchId"] for lj in pjim.status(job)["localJobs"] if lj["state"] == "RUNNING"}
        recs = [r for bid, _tag, r in jim_records(qstat_full(pbs), FLAVOURS["slurm"]) if bid in ids]
        rec = recs[0] if recs else None
        time.sleep(0.5)
    assert rec is not None, qstat_full(pbs)[-2000:]
    assert rec.get("Resource_List.ncpus") == "4" and rec.get("Resource_List.walltime") == "00:30:00", rec
    assert pjim.protocol("cancel", "--job-id", job)["JOB_STATE"] == "FAILED"
