"""jim behind real NorduGrid ARC CEs, driven by the real ARC client: A-REX 6.17 and A-REX 7.0.

The services are tests/services/arc (A-REX 6.17 on this host) and tests/services/arc7 (A-REX 7.0
in the HTCondor pool's trixie chroot, with its own client, test CA and JWT issuer); scripts/test.sh
starts both (as root ``tests/services/arc/start.sh``, ``tests/services/arc7/start.sh``). A-REX
listens on loopback with the LRMS ``jim`` installed by ``jim arc-install``; the client commands run
as an unprivileged account, the grid jobs as the mapped account, whose jim runs the local jobs on
the fork backend or, for the Slurm tests (6.17 only), on the test Slurm.  jim's job type and its
options travel as an ARC runtime environment (``runtimeenvironment="ENV/JIM/MONTECARLO"
"events=1000" ...``); every job also gets the suite's default RTE ``ENV/JIMTEST/DEFAULT``.

The fork-backend jobs run on both CEs (the ``each_arc`` fixture: ``[arc6]``, ``[arc7]``), submitted
together by a module fixture; each test then checks its own job.  ARC 7 also takes a job
authenticated by a bearer token alone.  The Slurm job is followed by one ``arcstat`` loop
(:class:`support.arc.Watch`) that keeps every state the client was shown.  What the client shows
lags A-REX by up to the info provider's period (5 s here, set by start.sh).
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import time

import pytest

from support import arc as arc_ce
from support.env import require_service
from support.services import cluster_lock, slurm_env
from support.users import VENV

pytestmark = [pytest.mark.arc, pytest.mark.slow]

MC_SCRIPT = """#!/bin/sh
echo "events $JIM_FIRST_EVENT-$JIM_LAST_EVENT {marker}"
echo "stderr of $JIM_FIRST_EVENT" >&2
# $1: seconds to run, $2: the job's marker (so that its processes can be found)
i=0
while [ "$i" -lt "${1:-0}" ]; do sleep 1; i=$((i + 1)); done
"""


def mc_xrsl(name: str, events: int, per_job: int, sleep: int = 0) -> str:
    return f"""&(executable="mc.sh")(arguments="{sleep}" "{{marker}}")
 (inputfiles=("mc.sh" "{{dir}}/mc.sh"))
 (jobname="{name}")
 (stdout="out.txt")(stderr="err.txt")
 (outputfiles=("jim-output.tar.gz" ""))
 (runtimeenvironment="ENV/JIM/MONTECARLO" "events={events}" "eventsperjob={per_job}")
 (walltime="30 minutes")
"""


def check_montecarlo(ce: arc_ce.ArcCE, job: arc_ce.ArcJob, local_jobs: int, per_job: int) -> None:
    fields = ce.wait(job, "Finished", timeout=300)
    assert fields.get("Exit Code") == "0", fields
    got = ce.get(job)
    out = (got / "out.txt").read_text()
    # the merged stdout: every local job's slice of the events, in local-job order
    expected = [f"events {k * per_job + 1}-{(k + 1) * per_job} {job.marker}" for k in range(local_jobs)]
    assert [line for line in out.splitlines() if line.startswith("events ")] == expected, out
    assert "stderr of 1" in (got / "err.txt").read_text()
    tars = list(got.glob("jim-output.tar*"))
    assert tars, f"no output tar among {sorted(p.name for p in got.iterdir())}"
    with tarfile.open(tars[0], "r:*") as tar:
        names = tar.getnames()
        manifest_name = next(n for n in names if n.endswith("/MANIFEST.json"))
        f = tar.extractfile(manifest_name)
        assert f is not None
        manifest = json.load(f)
    assert len(manifest["local_jobs"]) == local_jobs, manifest
    assert any(n.endswith("/MANIFEST.txt") for n in names), names


# -- jim on fork ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fork_jobs(each_arc):
    """Every fork-backend job of this module on one CE, submitted at once (each test then waits for its own)."""
    arc = each_arc
    jobs = {
        "mc": arc.submit("arc-mc", mc_xrsl("arc-mc", 1000, 250), {"mc.sh": MC_SCRIPT}),
        "exit3": arc.submit(
            "arc-exit3",
            '&(executable="/bin/sh")(arguments="-c" "echo before the end; exit 3")'
            '(jobname="arc-exit3")(stdout="out.txt")(stderr="err.txt")',
        ),
        "kill": arc.submit("arc-kill", mc_xrsl("arc-kill", 40, 10, sleep=600), {"mc.sh": MC_SCRIPT}),
        # (an ENV/JIM/<TYPE> runtime environment A-REX does not offer is refused by A-REX itself,
        # before jim sees the job: the job type travels in the JIM_* environment fallback here)
        "badtype": arc.submit(
            "arc-badtype",
            '&(executable="/bin/true")(jobname="arc-badtype")(environment=("JIM_JOBTYPE" "nosuchtype"))',
        ),
    }
    yield arc, jobs
    arc.clean(*jobs.values())


def test_montecarlo_job_on_fork_becomes_local_jobs_and_returns_merged_outputs(fork_jobs):
    ce, jobs = fork_jobs
    check_montecarlo(ce, jobs["mc"], local_jobs=4, per_job=250)


def test_local_job_exit_3_fails_the_arc_job_with_exit_code_3(fork_jobs):
    ce, jobs = fork_jobs
    fields = ce.wait(jobs["exit3"], "Failed", timeout=300)
    assert fields.get("Exit Code") == "3", fields
    got = ce.get(jobs["exit3"])
    assert "before the end" in (got / "out.txt").read_text()


def test_arckill_of_running_multi_local_job_job_leaves_no_local_job(fork_jobs):
    ce, jobs = fork_jobs
    job = jobs["kill"]
    ce.wait(job, "Running", timeout=240)
    deadline = time.monotonic() + 60
    while len(ce.processes(job.marker)) < 4 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(ce.processes(job.marker)) >= 4, "the 4 local jobs never ran together"
    ce.kill(job)
    fields = ce.wait(job, "Killed", timeout=240)
    assert fields.get("State") == "Killed", fields
    deadline = time.monotonic() + 30
    while ce.processes(job.marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ce.processes(job.marker) == [], "local jobs still run after arckill"


def test_bad_job_type_fails_at_submit_with_jims_reason(fork_jobs):
    ce, jobs = fork_jobs
    job = jobs["badtype"]
    fields = ce.wait(job, "Failed", timeout=240)
    # A-REX keeps its own "Job submission to LRMS failed" as the Job Error; the submit step's
    # stderr goes to the job's log, which the client reads with arccat -l
    log = ce.log(job)
    reason = "unknown job type 'nosuchtype'"
    assert reason in fields.get("Job Error", "") or reason in log, (fields, log)
    assert ce.jim_id(job) is None, "jim recorded a grid job for a refused description"


# -- ARC 7: a job with a bearer token and no proxy --------------------------------------------


@pytest.fixture(scope="module")
def token_job(arc7):
    job = arc7.submit("arc7-token-mc", mc_xrsl("arc7-token-mc", 600, 200), {"mc.sh": MC_SCRIPT}, token=True)
    yield arc7, job
    arc7.clean(job)


def test_token_only_job_on_arc7_runs_through_jim(token_job):
    ce, job = token_job
    check_montecarlo(ce, job, local_jobs=3, per_job=200)
    local = ce.local(job)
    # A-REX authorised it through the JWT issuer's authgroup: the job's owner is the token's subject
    assert local.get("auth") == "jimtestjwt", local
    assert local.get("subject", "").startswith(local.get("tokenclaim.iss", "?")), local
    assert ce.jim_id(job), ce.diagnostics(job)


# -- jim on Slurm -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm_jobs(arc):
    """One Monte Carlo job on the test Slurm, held in Slurm's queue until arcstat has shown it Queuing."""
    env = slurm_env()
    require_service(env is not None, "the test Slurm cluster (tests/services/slurm/start.sh)")
    assert env is not None
    with cluster_lock():
        ce = arc_ce.start("jim-slurm")
        watch = arc_ce.Watch(ce, interval=1.0)
        scontrol = ["scontrol", "update", "PartitionName=debug"]
        arc_ce.run_root([*scontrol, "State=DOWN"], env)
        try:
            job = ce.submit("arc-slurm-mc", mc_xrsl("arc-slurm-mc", 300, 100, sleep=12), {"mc.sh": MC_SCRIPT})
            watch.follow(job)
            deadline = time.monotonic() + 120
            while "Queuing" not in watch.states(job) and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            arc_ce.run_root([*scontrol, "State=UP"], env)
        try:
            yield ce, watch, job
        finally:
            watch.stop()
            ce.clean(job)
            arc_ce.start("jim-fork")


def test_montecarlo_job_on_slurm_becomes_local_jobs_and_returns_merged_outputs(slurm_jobs):
    ce, _watch, job = slurm_jobs
    check_montecarlo(ce, job, local_jobs=3, per_job=100)


def test_info_provider_shows_queuing_then_running(slurm_jobs):
    ce, watch, job = slurm_jobs
    ce.wait(job, "Finished", timeout=300)
    deadline = time.monotonic() + 30  # (the watch asks arcstat on its own, every second: let it see it too)
    while "Finished" not in watch.states(job) and time.monotonic() < deadline:
        time.sleep(0.5)
    seen = watch.states(job)
    assert "Queuing" in seen and "Running" in seen, seen
    assert seen.index("Queuing") < seen.index("Running") < seen.index("Finished"), seen


# -- the shape: ARC's slots are one job's cores ---------------------------------------------------

CORES_SCRIPT = """#!/bin/sh
echo "cores=$JIM_CORES index=$JIM_INDEX {marker}"
"""

CORES_ADL = """<?xml version="1.0" encoding="UTF-8"?>
<ActivityDescription xmlns="http://www.eu-emi.eu/es/2010/12/adl">
  <ActivityIdentification><Name>arc-adl-slots</Name></ActivityIdentification>
  <Application>
    <Executable><Path>cores.sh</Path></Executable>
    <Output>out.txt</Output>
    <Error>err.txt</Error>
  </Application>
  <Resources>
    <SlotRequirement><NumberOfSlots>8</NumberOfSlots><SlotsPerHost>8</SlotsPerHost></SlotRequirement>
  </Resources>
  <DataStaging>
    <InputFile><Name>cores.sh</Name><Source><URI>file://{dir}/cores.sh</URI></Source><IsExecutable>true</IsExecutable></InputFile>
    <OutputFile><Name>out.txt</Name></OutputFile>
    <OutputFile><Name>err.txt</Name></OutputFile>
  </DataStaging>
</ActivityDescription>
"""


@pytest.fixture(scope="module")
def slot_jobs(arc):
    """ARC jobs of 8 slots on the test Slurm (its node declares 32 CPUs: 8 cores fit; the fork
    backend's host has fewer), in xRSL and in ADL.  The CE publishes this host's CPUs as its
    slots, so arcsub's matchmaking is bypassed (``-b Null``)."""
    env = slurm_env()
    require_service(env is not None, "the test Slurm cluster (tests/services/slurm/start.sh)")
    with cluster_lock():
        ce = arc_ce.start("jim-slurm")
        jobs = {
            "xrsl": ce.submit(
                "arc-slots",
                '&(executable="cores.sh")(inputfiles=("cores.sh" "{dir}/cores.sh"))(jobname="arc-slots")'
                '(stdout="out.txt")(stderr="err.txt")(count=8)(memory=100)(walltime="30 minutes")',
                {"cores.sh": CORES_SCRIPT},
                broker="Null",
            ),
            "adl": ce.submit("arc-adl-slots", CORES_ADL, {"cores.sh": CORES_SCRIPT}, broker="Null"),
        }
        try:
            yield ce, jobs
        finally:
            ce.clean(*jobs.values())
            arc_ce.start("jim-fork")


def _jim_plan(ce: arc_ce.ArcCE, job: arc_ce.ArcJob) -> dict[str, str]:
    """jim's plan attributes of an ARC job, asked of jim as the mapped account."""
    jim_id = ce.jim_id(job)
    assert jim_id, ce.diagnostics(job)
    home = ce.mapped.home / ".jim-arc-slurm"
    p = ce.mapped.run([str(VENV / "bin" / "jim"), "status", jim_id, "--json"], env={"JIM_HOME": str(home)})
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)["plan"]


@pytest.mark.parametrize("form", ["xrsl", "adl"])
def test_arc_count_8_is_one_local_job_of_8_cores(slot_jobs, form):
    ce, jobs = slot_jobs
    job = jobs[form]
    fields = ce.wait(job, "Finished", timeout=300)
    assert fields.get("Exit Code") == "0", fields
    out = (ce.get(job) / "out.txt").read_text()
    assert out.splitlines() == [f"cores=8 index=0 {job.marker}"], out
    plan = _jim_plan(ce, job)
    assert plan["cores"] == "8" and plan["shapeBy"].startswith("cores=cores"), plan
    if form == "xrsl":  # (memory: MB per slot, 8 slots)
        assert plan["memoryMB"] == "800", plan


def test_service_listens_on_loopback_only(each_arc):
    port = each_arc.endpoint.split(":")[2].split("/")[0]
    p = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True)
    addresses = [line.split()[3] for line in p.stdout.splitlines()]
    assert addresses and all(a.startswith("127.0.0.1:") for a in addresses), addresses
