"""The adapter conformance suite on the real test Slurm."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.conformance import AdapterConformance
from support.services import SLURM_STATE, cluster_lock, slurm_env

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module", autouse=True)
def _exclusive_cluster():
    if slurm_env() is None:
        yield
        return
    with cluster_lock():
        yield


class TestSlurmConformance(AdapterConformance):
    __test__ = True
    adapter = "slurm"
    query_command = "squeue"
    query_failure_text = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    turnaround = 60.0

    def service_available(self):
        return slurm_env() is not None

    def service_env(self):
        return {"SLURM_CONF": str(SLURM_STATE / "slurm.conf")}

    def batch_options(self):
        return f'partition = "debug"\ncache_interval = 1.0\npython = "{sys.executable}"\n'

    def kill_outside_jim(self, batch_id, env):
        # an admin's scancel: Slurm records CANCELLED; the wrapper's SIGTERM may write an exit file
        subprocess.run(["scancel", "--signal=KILL", "--full", batch_id], env=env, check=True)

    def render_for_golden(self, adapter, chunk):
        return adapter.render(
            "slurm.sh",
            grid_id=chunk.grid_id,
            offset=0,
            python="python3",
            wrapper=chunk.wrapper,
            sandbox=chunk.sandbox,
            outroot=chunk.outroot,
            attempt=chunk.attempt,
        )
