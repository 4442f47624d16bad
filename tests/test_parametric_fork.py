"""A parametric grid job end to end on fork, and the herd fields that tie local jobs to it.

Real processes (worker, monitor, wrappers, local jobs) through the real CLI.
"""

from __future__ import annotations

import json
import tarfile

from lxml import etree

from jim.db import Database
from jim.paths import Home
from jim.record import NewJob, new_record

# sh gets: -c SCRIPT job <value>; $0/$1 are the shell's (a $ before a digit is not a placeholder),
# $$JIM_PARAM_Parameter reaches the shell as $JIM_PARAM_Parameter.
PARAMETRIC = (
    "&(executable=/bin/sh)"
    '(arguments=-c "echo $1 > result.p$1.txt; echo arg=$1 env=$$JIM_PARAM_Parameter" job "${Parameter}")'
    "(parameters=4)(parameterstart=0.1)(parameterstep=0.2)"
    '(outputs="result.p$Parameter.txt")(jobname="scan $Parameter")'
)
VALUES = ["0.1", "0.3", "0.5", "0.7"]


def tar_members(path: str) -> dict[str, bytes]:
    with tarfile.open(path) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def test_parametric_grid_job_on_fork(jim_env):
    job = jim_env.submit(PARAMETRIC)
    out = jim_env.wait(job)
    assert out["JOB_STATE"] == "DONE", out
    st = jim_env.status(job)
    assert st["jobtype"] == "parametric"
    assert st["plan"]["localJobs"] == "4" and st["plan"]["binding"] == "parameters"
    local = sorted(st["localJobs"], key=lambda lj: lj["index"])
    assert [lj["slice"]["Parameter"] for lj in local] == VALUES
    assert [lj["slice"]["jobname"] for lj in local] == [f"scan {v}" for v in VALUES]
    assert all(lj["state"] == "DONE" for lj in local)

    files = tar_members(st["outputTar"])
    manifest = json.loads(files[f"{job}/MANIFEST.json"])
    by_index = {lj["index"]: lj for lj in manifest["local_jobs"]}
    for k, value in enumerate(VALUES):
        bid = local[k]["batchId"].replace(":", "_")
        # its argv carried the value: the wrapper logged it, the job printed it
        log = files[f"{job}/wrapper.{k}.{bid}.log"].decode()
        assert f"'job', '{value}']" in log, log
        assert files[f"{job}/stdout.{k}.{bid}"] == f"arg={value} env={value}\n".encode()
        # its output's name carries the value (the wrapper adds index and batch id)
        (output,) = [f for f in by_index[k]["files"] if f.startswith("outputs/")]
        assert output.startswith(f"outputs/result.{k}.") and output.endswith(f".p{value}.txt"), output
        assert files[f"{job}/{output}"] == f"{value}\n".encode()
        assert by_index[k]["slice"]["Parameter"] == value

    # the herd: every local job names its grid job, its split id, and is Splitted once it exists
    assert all(lj["MasterJobID"] == job and lj["HerdState"] == "Splitted" for lj in local)
    assert [lj["SplitID"] for lj in local] == ["0", "1", "2", "3"]
    assert st["HerdState"] == "Splitted"
    # from one local job's record (found by its batch id alone) to its whole herd
    herd = herd_of_batch_id(jim_env.home, local[2]["batchId"])
    assert herd == [(job, str(k), local[k]["batchId"]) for k in range(4)]


def herd_of_batch_id(home, batch_id: str) -> list[tuple[str, str, str]]:
    """What an operator does with a batch id: find its local job, follow MasterJobID, list the herd."""
    for path in sorted((home / "db").glob("*.xml")):
        if path.name == "index.xml":
            continue
        found = etree.parse(str(path)).xpath("//localjob[@batchId=$b]", b=batch_id)
        if found:
            master = found[0].get("MasterJobID")
            record = etree.parse(str(home / "db" / f"{master}.xml"))
            return [(lj.get("MasterJobID"), lj.get("SplitID"), lj.get("batchId")) for lj in record.xpath("//localjob")]
    raise AssertionError(f"no local job with batch id {batch_id}")


def test_herd_fields_before_and_after_submission(tmp_path):
    home = Home(tmp_path / "home").ensure()
    db = Database(home)
    job_id = "20260101-000000-abcdef"
    rec = new_record(
        job_id,
        NewJob(
            jobtype="parametric",
            name="scan",
            owner="me",
            adapter="fork",
            description={"executable": ["/bin/true"]},
            source_format="json",
            source_text="{}",
            plan={"localJobs": 3, "binding": "parameters"},
            explanation="3 values",
            slices=[{"params": {"Parameter": str(v)}} for v in (1, 2, 3)]
            + [{"params": {}, "failed_on_creation": "too big"}],
        ),
    )
    rec.recompute()
    db.create(rec)
    job = db.read(job_id)
    assert job.get("MasterJobID") == job_id and job.get("HerdState") == "WillSplit"
    assert [(lj.get("MasterJobID"), lj.get("SplitID"), lj.get("HerdState")) for lj in job.local_jobs()] == [
        (job_id, str(k), "WillSplit") for k in range(4)
    ]
    assert job.local(3).state.value == "FAILED" and job.local(3).evidence == "creation"
    with db.update(job_id) as rec:
        for k in range(3):
            rec.local(k).batch_id = f"b{k}"
        rec.recompute()
    job = db.read(job_id)
    assert [lj.get("HerdState") for lj in job.local_jobs()] == ["Splitted"] * 3 + ["WillSplit"]
    assert job.get("HerdState") == "Splitted"  # the failed-on-creation one will never split
    assert herd_of_batch_id(home.root, "b1") == [
        (job_id, "0", "b0"),
        (job_id, "1", "b1"),
        (job_id, "2", "b2"),
        (job_id, "3", None),
    ]
