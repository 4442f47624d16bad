"""jim on the multi-node test Slurm (tests/services/slurm-cluster): a grid job survives a node that
dies under it and a partition that preempts it, every attempt on record; a job's own failure is
not retried unless its exit code is named; people kill and resubmit one local job.

Run as root: ``.venv/bin/python -m pytest -p no:cacheprovider -m slurm_cluster
tests/test_slurm_cluster_retry.py`` (the fixture starts the cluster and stops it after the session;
``JIM_TEST_SLURM_CLUSTER_KEEP=1`` keeps it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import time
from collections import Counter

import pytest
from lxml import etree

from support.jimcli import FAST_CONFIG, kill_all

pytestmark = [pytest.mark.slurm_cluster, pytest.mark.slow]


def _config(retry: str = "max_attempts = 3\ncool_off = 2.0") -> str:
    return FAST_CONFIG.replace("lost_grace = 5.0", "lost_grace = 120.0").replace("max_attempts = 1", retry) + (
        f"""
[batch]
adapter = "slurm"
partition = "normal"
cache_interval = 1.0
python = "{sys.executable}"
command_timeout = 20
"""
    )


@pytest.fixture
def cjim(jim_env, slurm_cluster):
    jim_env.env["SLURM_CONF"] = str(slurm_cluster.conf)
    jim_env.config.write_text(_config())
    jim_env.cluster = slurm_cluster
    yield jim_env
    for job in jim_env.job_ids():  # leave nothing of this test in the queue
        subprocess.run(
            ["scancel", "-u", "root", "-n", ",".join(_names(jim_env, job)) or "none"],
            env=slurm_cluster.env,
            capture_output=True,
        )


def _names(jim, job):
    out = jim.cluster.run(["squeue", "-h", "-t", "all", "-o", "%j"]).stdout.split()
    return sorted({n for n in out if job in n})


def _script(tmp_path, body: str):
    s = tmp_path / "job.sh"
    s.write_text("#!/bin/sh\n" + body)
    s.chmod(0o755)
    return s


def _wait_local(jim, job, check, what, timeout=120.0):
    deadline = time.monotonic() + timeout
    st = None
    while time.monotonic() < deadline:
        st = jim.status(job)
        if check(st["localJobs"]):
            return st
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: {st and st['counts']}")


def _record(jim, job):
    return etree.parse(str(jim.home / "db" / f"{job}.xml")).getroot()


def test_a_node_dies_under_20_local_jobs_and_the_grid_job_still_succeeds(cjim, tmp_path):
    c = cjim.cluster
    s = _script(tmp_path, 'hostname > result.txt\necho "$JIM_INDEX $JIM_ATTEMPT" >> result.txt\nsleep 25\n')
    job = cjim.submit(f"&(executable={s})(count=20)(outputs=result.txt)")
    st = _wait_local(
        cjim, job, lambda ljs: all(lj["state"] == "RUNNING" and lj["node"] for lj in ljs), "20 running", 120
    )
    by_node = Counter(lj["node"] for lj in st["localJobs"])
    assert len(by_node) >= 2, by_node  # spread over the nodes
    victim = by_node.most_common(1)[0][0]
    on_victim = sorted(lj["index"] for lj in st["localJobs"] if lj["node"] == victim)
    c.kill_node(victim)
    out = cjim.wait(job, timeout=240)
    assert (out["JOB_STATE"], out["EXIT_CODE"]) == ("DONE", "0"), out
    final = cjim.status(job)
    assert final["retries"] == len(on_victim)
    for lj in final["localJobs"]:
        attempts = lj["attempts"]
        if lj["index"] in on_victim:
            first, second = attempts
            assert first["state"] == "FAILED" and first["cause"] == "NODE_FAIL", first
            assert first["node"] == victim and first["retryReason"] == "node failure (NODE_FAIL)"
            assert second["state"] == "DONE" and second["node"] != victim and second["tag"] == f"{job}.{lj['index']}.2"
        else:
            assert [a["state"] for a in attempts] == ["DONE"]
    # exactly 20 successful completions, one output per local job, none twice
    with tarfile.open(cjim.home / "jobs" / job / f"{job}.tar.gz") as tar:
        outputs = [n for n in tar.getnames() if n.startswith(f"{job}/outputs/result.")]
        manifest = json.load(tar.extractfile(f"{job}/MANIFEST.json"))
        seen = sorted(tuple(map(int, tar.extractfile(n).read().decode().split()[1:3])) for n in outputs)
    assert len(outputs) == 20
    assert [k for k, _n in seen] == list(range(20))  # one each
    assert {n for k, n in seen if k in on_victim} <= {2} and {n for k, n in seen if k not in on_victim} == {1}
    assert all([a["counted"] for a in m["attempts"]][-1] for m in manifest["local_jobs"])

    # and the batch system's accounting agrees: 20 array tasks of this grid job COMPLETED
    def completed():
        rows = c.run(["sacct", "-n", "-X", "-P", "-o", "JobID,JobName,State", "-S", "now-1hour"]).stdout
        return [r for r in rows.splitlines() if f"|jim.{job}." in r and r.endswith("|COMPLETED")]

    done = c.wait_for("sacct's records", lambda: len(completed()) >= 20 and completed(), timeout=60)
    assert len(done) == 20, done


def test_preempted_local_jobs_are_retried_and_the_grid_job_ends_done(cjim, tmp_path):
    c = cjim.cluster
    s = _script(tmp_path, "sleep 20\n")
    job = cjim.submit(f"&(executable={s})(count=4)")
    st = _wait_local(
        cjim, job, lambda ljs: all(lj["state"] == "RUNNING" and lj["node"] for lj in ljs), "4 running", 120
    )
    victim = st["localJobs"][0]["node"]
    preempted = sorted(lj["index"] for lj in st["localJobs"] if lj["node"] == victim)
    cpus = c.run(["sinfo", "-h", "-n", victim, "-o", "%c"]).stdout.split()[0]
    # a high-priority job that needs every CPU of that node
    c.sbatch("-J", f"high-{job}", "-p", "high", "-w", victim, "-c", cpus, "-o", "/dev/null", "--wrap", "sleep 3")
    out = cjim.wait(job, timeout=240)
    assert out["JOB_STATE"] == "DONE", out
    for lj in cjim.status(job)["localJobs"]:
        if lj["index"] in preempted:
            first, *later = lj["attempts"]
            assert first["cause"] == "PREEMPTED" and first["retryReason"] == "preempted (PREEMPTED)", first
            assert later[-1]["state"] == "DONE"
        else:
            assert len(lj["attempts"]) == 1


def test_exit_code_3_fails_the_grid_job_unless_named_retryable(cjim, tmp_path):
    s = _script(tmp_path, '[ "$JIM_INDEX" = 1 ] && exit 3\nexit 0\n')
    job = cjim.submit(f"&(executable={s})(count=2)")
    out = cjim.wait(job, timeout=120)
    assert (out["JOB_STATE"], out["EXIT_CODE"]) == ("FAILED", "3")
    assert [len(lj["attempts"]) for lj in cjim.status(job)["localJobs"]] == [1, 1]

    cjim.config.write_text(_config("max_attempts = 3\ncool_off = 1.0\nexit_codes = [3]"))
    kill_all(cjim.home)  # the monitor reads the configuration when it starts: the next one reads this
    job = cjim.submit(f"&(executable={s})(count=2)")
    out = cjim.wait(job, timeout=180)
    assert (out["JOB_STATE"], out["EXIT_CODE"]) == ("FAILED", "3")
    lj = cjim.status(job)["localJobs"][1]
    assert [(a["n"], a["state"], a["exitCode"]) for a in lj["attempts"]] == [(n, "FAILED", 3) for n in (1, 2, 3)]
    assert lj["reason"].endswith("no attempts left (3 of 3)")
    batch_ids = {a["batchId"] for a in lj["attempts"]}
    assert len(batch_ids) == 3  # three submissions, three batch jobs


def test_kill_and_resubmit_one_local_job_with_its_history_in_the_xml(cjim, tmp_path):
    flag = tmp_path / "release"
    s = _script(
        tmp_path,
        f'[ "$JIM_INDEX" = 2 ] && [ "$JIM_ATTEMPT" = 1 ] && sleep 300\nwhile [ ! -e {flag} ]; do sleep 0.5; done\n',
    )
    job = cjim.submit(f"&(executable={s})(count=3)")
    _wait_local(cjim, job, lambda ljs: all(lj["state"] == "RUNNING" for lj in ljs), "3 running")
    killed = cjim.run("kill", f"{job}.2")
    assert killed.returncode == 0 and killed.stdout.strip() == f"{job}.2 CANCELLED", killed.stderr
    resub = cjim.run("resubmit", f"{job}.2")
    assert resub.returncode == 0 and resub.stdout.strip() == f"{job}.2 attempt 2 PLANNED", resub.stderr
    _wait_local(cjim, job, lambda ljs: ljs[2]["state"] == "RUNNING" and ljs[2]["attempt"] == 2, "attempt 2 runs")
    flag.touch()
    assert cjim.wait(job, timeout=120)["JOB_STATE"] == "DONE"
    lj = _record(cjim, job).find("localjobs/localjob[@index='2']")
    assert lj.get("attempt") == "2" and lj.get("state") == "DONE" and lj.get("tag") == f"{job}.2.2"
    (first,) = lj.findall("attempts/attempt")
    assert first.get("n") == "1" and first.get("state") == "CANCELLED" and first.get("killedBy") == "root"
    assert first.get("retryBy") == "root" and first.get("retryReason") == "resubmitted by root"
    assert first.get("batchId") != lj.get("batchId")
