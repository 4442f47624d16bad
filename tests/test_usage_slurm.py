"""What local jobs used, on a real Slurm (tests/services/slurm): measured by the wrapper within 20 %,
and taken from ``sacct`` when the wrapper wrote nothing (the wrapper and its job SIGKILLed).

The test cluster runs ``JobAcctGatherType=jobacct_gather/none``: its sacct shows 00:00:00 CPU and no
MaxRSS for every job, which jim counts unknown (not zero); ElapsedRaw, AllocCPUS and NodeList are
measured all the same.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest
from test_slurm import sjim, slurm  # noqa: F401  (the cluster's fixtures)
from test_usage import BURN, MIB_KB, _within

pytestmark = pytest.mark.slurm


def _rsl(script, n=1):
    return (
        f"&(executable={sys.executable})(arguments={script})(jimtype=montecarlo)(events={n})(eventsperjob=1)"
        "(jobname=usage-slurm)"
    )


def test_slurm_local_jobs_measured_by_the_wrapper(sjim, tmp_path):  # noqa: F811
    script = tmp_path / "burn.py"
    script.write_text(BURN.format(mb=200, cpu=1.0))
    job = sjim.submit(_rsl(script, 2))
    out = sjim.wait(job, timeout=120)
    assert out["JOB_STATE"] == "DONE", out
    st = sjim.status(job)
    for lj in st["localJobs"]:
        u = lj["usage"]
        assert u is not None and u["source"] == "wrapper", lj
        assert _within(u["cpuUser"] + u["cpuSystem"], 1.0), u
        assert _within(u["maxRssKb"], 200 * MIB_KB), u
        assert u["cores"] == 1 and u["node"]
    assert st["usage"]["measured"] == 2 and st["usage"]["unknown"] == 0


def test_slurm_accounting_when_the_wrapper_wrote_nothing(sjim, tmp_path):  # noqa: F811
    script = tmp_path / "spin.py"
    script.write_text("while True:\n    pass\n")
    job = sjim.submit(_rsl(script, 1))
    st = sjim.wait_running(job, 1, timeout=90)
    lj = st["localJobs"][0]
    started = sjim.home / "jobs" / job / "local" / "0" / "started"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (started.exists() and time.time() - started.stat().st_mtime >= 3):
        time.sleep(0.2)
    # the wrapper and its job SIGKILLed, as a node that dies would leave them: no exit-code file is ever
    # written (scancel --signal=KILL is a cancel: SIGTERM first, which the wrapper survives to write one)
    wrapper = json.loads(started.read_text())["pid"]
    group = os.getpgid(wrapper)
    assert group != os.getpgrp()  # (slurmstepd gave the batch script a group of its own)
    os.killpg(group, signal.SIGKILL)
    out = sjim.wait(job, states=("DONE", "FAILED"), timeout=120)
    assert out["JOB_STATE"] == "FAILED", out
    lj = sjim.status(job)["localJobs"][0]
    assert not (sjim.home / "jobs" / job / "local" / "0" / "exit_code").exists()
    assert lj["evidence"] == "accounting", lj
    u = lj["usage"]
    assert u is not None and u["source"] == "sacct", lj
    assert u["cores"] == 1 and u["node"] == "jimnode"
    assert 3 <= u["wall"] <= 60, u
    if u["cpuUser"] is not None:  # (a cluster that gathers CPU: measured, about the wall time)
        assert _within(u["cpuUser"] + u["cpuSystem"], u["wall"], 0.3), u
    else:  # (jobacct_gather/none: unknown, never 0)
        assert u["cpuSystem"] is None and u["maxRssKb"] is None
