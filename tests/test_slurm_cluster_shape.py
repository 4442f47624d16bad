"""jim on the multi-node test Slurm (tests/services/slurm-cluster, 3 nodes of 8 CPUs, memory
consumable and enforced): each local job gets the shape its grid job asks for, as Slurm's own
accounting shows it; a local job over its memory is killed by Slurm and ends OUT_OF_MEMORY, the
job's own fault, not retried, while its neighbours end DONE.

Run as root: ``.venv/bin/python -m pytest -p no:cacheprovider -m slurm_cluster
tests/test_slurm_cluster_shape.py`` (the fixture starts the cluster and stops it after the session;
``JIM_TEST_SLURM_CLUSTER_KEEP=1`` keeps it).
"""

from __future__ import annotations

import datetime as dt
import tarfile
import time
from collections.abc import Callable

import pytest
from test_slurm_cluster_retry import _config, _script, cjim  # noqa: F401  (cjim: the fixture, reused)

pytestmark = [pytest.mark.slurm_cluster, pytest.mark.slow]

#: The cluster's partition as jim's [resources] describes it: 3 nodes of 8 cores.
RESOURCES = """
[resources.ce.batch.queue.normal]
WallTimeLimit = 3600
CoresPerNode = 8
NumberOfProcessors = 24
"""
SACCT = ["JobID", "JobName", "State", "ExitCode", "AllocCPUS", "NodeList", "Start", "End", "ReqMem"]


@pytest.fixture
def sjim(cjim):  # noqa: F811
    """jim on the cluster (``cjim``: retries on, 3 attempts) with the partition described."""
    cjim.config.write_text(_config() + RESOURCES)
    return cjim


def _records(c, match: Callable[[dict[str, str]], bool]) -> list[dict[str, str]]:
    """sacct's allocation records of the last hour that ``match``."""
    out = c.run(["sacct", "-n", "-X", "-P", "-S", "now-1hour", "-o", ",".join(SACCT)]).stdout
    rows = [dict(zip(SACCT, line.split("|"))) for line in out.splitlines() if line.count("|") == len(SACCT) - 1]
    return [r for r in rows if match(r)]


def _of(job: str) -> Callable[[dict[str, str]], bool]:
    return lambda r: r["JobName"].startswith(f"jim.{job}.")


def _final(c, match: Callable[[dict[str, str]], bool], n: int) -> list[dict[str, str]]:
    """The ``n`` final records that ``match``, once sacct has them all (it lags a little)."""

    def ended():
        rows = _records(c, match)
        return rows if len(rows) == n and all(r["End"] not in ("", "Unknown") for r in rows) else None

    return c.wait_for(f"{n} final sacct records", ended, timeout=60)


def _t(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S").timestamp()


def _overlaps(rows: list[dict[str, str]]) -> list[tuple[str, str]]:
    """Pairs of records that held the same node at the same time."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            if a["NodeList"] == b["NodeList"] and _t(a["Start"]) < _t(b["End"]) and _t(b["Start"]) < _t(a["End"]):
                out.append((a["JobID"], b["JobID"]))
    return out


def test_six_local_jobs_of_8_cores_each_have_a_node_to_themselves(sjim, tmp_path):
    c = sjim.cluster
    s = _script(tmp_path, 'echo "$JIM_CORES $SLURM_CPUS_PER_TASK $OMP_NUM_THREADS" > cores.txt\nsleep 6\n')
    job = sjim.submit(f"&(executable={s})(count=6)(xcount=8)(outputs=cores.txt)")
    plan = sjim.status(job)
    assert len(plan["localJobs"]) == 6
    out = sjim.wait(job, timeout=240)
    assert (out["JOB_STATE"], out["EXIT_CODE"]) == ("DONE", "0"), out
    rows = _final(c, _of(job), 6)
    assert {r["AllocCPUS"] for r in rows} == {"8"}, rows  # one task of 8 CPUs each
    assert {r["State"] for r in rows} == {"COMPLETED"}
    assert not _overlaps(rows), rows  # 8 of a node's 8 CPUs: never two on one node at once
    assert len({r["NodeList"] for r in rows}) == 3  # three at a time, one per node
    with tarfile.open(sjim.home / "jobs" / job / f"{job}.tar.gz") as tar:
        seen = {
            tuple(tar.extractfile(n).read().decode().split())
            for n in tar.getnames()
            if n.startswith(f"{job}/outputs/cores.")
        }
    assert seen == {("8", "8", "8")}  # the payload knows its cores (jim's env and Slurm's)


def test_a_whole_node_local_job_is_alone_on_its_node(sjim, tmp_path):
    c = sjim.cluster
    s = _script(tmp_path, "sleep 12\n")
    job = sjim.submit(f"&(executable={s})(wholenode=true)")
    st = sjim.wait_running(job, 1, timeout=120)
    node = st["localJobs"][0]["node"]
    # single-CPU jobs that would fit anywhere: none may share the whole-node job's node
    name = f"filler-{job}"
    fillers = [c.sbatch("-J", name, "--no-requeue", "-o", "/dev/null", "--wrap", "sleep 4") for _ in range(6)]
    assert sjim.wait(job, timeout=120)["JOB_STATE"] == "DONE"
    (whole,) = _final(c, _of(job), 1)
    assert whole["AllocCPUS"] == "8" and whole["NodeList"] == node, whole
    others = _final(c, lambda r: r["JobName"] == name, len(fillers))
    assert len({r["NodeList"] for r in others}) >= 1
    assert not [o for o in others if _overlaps([whole, o])], (whole, others)  # none beside it


def test_a_local_job_over_its_memory_ends_out_of_memory_and_is_not_retried(sjim, tmp_path):
    c = sjim.cluster
    hog = tmp_path / "hog.py"
    hog.write_text("import time\nb = bytearray(600 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\ntime.sleep(9)")
    s = _script(tmp_path, f'if [ "$JIM_INDEX" = 1 ]; then exec python3 {hog}; fi\nsleep 3\n')
    job = sjim.submit(f"&(executable={s})(count=3)(maxmemory=200)")
    out = sjim.wait(job, timeout=180)
    assert out["JOB_STATE"] == "FAILED", out
    final = sjim.status(job)
    by_index = {lj["index"]: lj for lj in final["localJobs"]}
    assert [by_index[k]["state"] for k in (0, 2)] == ["DONE", "DONE"]
    oom = by_index[1]
    assert oom["state"] == "FAILED" and oom["cause"] == "OUT_OF_MEMORY", oom
    assert "out of memory (OUT_OF_MEMORY)" in oom["reason"], oom
    assert len(oom["attempts"]) == 1 and final["retries"] == 0  # the job's own fault: no second attempt
    rows = _final(c, _of(job), 3)
    assert {r["ReqMem"] for r in rows} == {"200M"}  # maxmemory reached sbatch as --mem
    assert sorted((r["JobID"].rpartition("_")[2], r["State"], r["ExitCode"]) for r in rows) == [
        ("0", "COMPLETED", "0:0"),
        ("1", "FAILED", "0:9"),  # what Slurm 22.05 records of a job its memory watch killed
        ("2", "COMPLETED", "0:0"),
    ]
    print(f"OUT_OF_MEMORY local job: {oom['reason']}; grid job: {out}")


def test_the_memory_watch_kills_within_seconds(slurm_cluster, tmp_path):
    """The cluster's own enforcement, without jim: a job over its --mem is killed at the next sample."""
    c = slurm_cluster
    t0 = time.monotonic()
    jid = c.sbatch(
        "--no-requeue",
        "--mem=50",
        "-o",
        "/dev/null",
        "--wrap",
        "python3 -c 'b = bytearray(300 << 20); [b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; "
        "import time; time.sleep(60)'",
    )
    st = c.wait_for("the job killed", lambda: c.squeue_states([jid]).get(jid, ("", ""))[0] == "FAILED", timeout=30)
    assert st and time.monotonic() - t0 < 30
