"""The adapter conformance suite on PBS-style commands: Slurm's torque wrappers
(Debian's slurm-wlm-torque, unpacked off the system PATH by
tests/services/pbs/start.sh) over the project's test Slurm (tests/services/slurm)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.conformance import AdapterConformance
from support.services import pbs_available, pbs_env

pytestmark = [pytest.mark.slurm, pytest.mark.pbs]  # (the PBS wrappers drive the test Slurm)


class TestPbsConformance(AdapterConformance):
    __test__ = True
    adapter = "pbs"
    query_command = "qstat"
    query_failure_text = "Problem loading jobs."  # what the wrappers' qstat says with slurmctld down
    turnaround = 60.0

    bulk_submissions = None  # Slurm's wrappers have no usable arrays: one qsub per local job

    def service_available(self):
        return pbs_available()

    def service_env(self):
        return pbs_env()

    def batch_options(self):
        return f'flavour = "slurm"\nqueue = "debug"\ncache_interval = 1.0\npython = "{sys.executable}"\n'

    def kill_outside_jim(self, batch_id, env):
        # qdel lets the wrapper flush (SIGTERM first); an admin's hard kill does not: the job ends
        # with no exit-code file, and the wrappers' qstat never tells an exit status
        subprocess.run(["scancel", "--signal=KILL", "--full", batch_id], env=env, check=True)

    def render_for_golden(self, adapter, chunk):
        return adapter.render(
            "pbs.sh",
            grid_id=chunk.grid_id,
            offset=0,
            python="python3",
            flavour="torque",
            wrapper=chunk.wrapper,
            sandbox=chunk.sandbox,
            outroot=chunk.outroot,
            attempt=chunk.attempt,
            index_env="PBS_ARRAYID",
            task="",
        )
