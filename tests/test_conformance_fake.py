"""The adapter conformance suite on the fake batch system (tests/fake_sched): jim's real
SlurmAdapter against fake sbatch/squeue/sacct/scancel/scontrol, with no fault injected.

The faults themselves are exercised in test_fake_sched_faults.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from fake_sched import FakeSched
from support.conformance import AdapterConformance

pytestmark = pytest.mark.slow  # (whole grid jobs through the fake batch system: seconds each)


class TestFakeSchedConformance(AdapterConformance):
    __test__ = True
    adapter = "slurm"
    query_command = "squeue"
    query_failure_text = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    turnaround = 20.0

    @pytest.fixture(autouse=True)
    def _fake(self, tmp_path):
        self.fake = FakeSched(tmp_path / "fake-sched")
        yield self.fake

    def service_env(self):
        return self.fake.env()

    def batch_options(self):
        return f'partition = "debug"\ncache_interval = 0.5\npython = "{sys.executable}"\ncommand_timeout = 10\n'

    def kill_outside_jim(self, batch_id, env):
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


OTHER_GRID = "19991231-235959-0ther0ld"


class TestFakeSchedConformanceWithFaults(TestFakeSchedConformance):
    """The same suite with the faults a correct jim must shrug off, all at once, in every test:

    * every first ``sbatch`` goes through but answers only after jim's command timeout;
    * every ``squeue`` prints each row twice, shuffles rows, and every other one shows tasks
      that have ended in their previous state (COMPLETED, then RUNNING again);
    * job ids are handed out again: jim's first array gets the id of another grid job's
      finished array, whose accounting records ``sacct`` still lists (after jim's own).

    Query failures and vanishing jobs change the outcome by design; test_fake_sched_faults.py
    covers them.
    """

    @pytest.fixture(autouse=True)
    def _fake(self, tmp_path):
        import os
        import time

        self.fake = FakeSched(tmp_path / "fake-sched")
        self.fake.set_faults(min_job_age=0.5)
        # another grid job's finished array, purged from the queue, still in accounting
        env = {**os.environ, **self.fake.env()}
        script = tmp_path / "other.sh"
        script.write_text("#!/bin/sh\nexit 0\n")
        script.chmod(0o755)
        subprocess.run(
            [
                "sbatch",
                "--parsable",
                "--array=0-29",
                f"--job-name=jim.{OTHER_GRID}.0",
                "-D",
                str(tmp_path),
                "-o",
                "/dev/null",
                str(script),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            subprocess.run(["fake-sched", "tick"], env=env, check=True)
            if not self.fake.state()["jobs"]:
                break
            time.sleep(0.2)
        assert not self.fake.state()["jobs"], "the other grid job never finished"
        self.fake.set_faults(
            min_job_age=10, slow_submit={"seconds": 8, "count": 1}, duplicate=-1, out_of_order=-1, reuse_ids=1
        )
        yield self.fake

    def batch_options(self):
        return super().batch_options().replace("command_timeout = 10", "command_timeout = 3")

    def test_faults_fired(self, cjim):
        """Guard: the faults of this class really happen (a fault that never fires tests nothing)."""
        job = cjim.submit("&(executable=/bin/true)(count=3)")
        out = cjim.wait(job, timeout=60)
        assert out["JOB_STATE"] == "DONE", cjim.run("status", job).stdout
        assert self.fake.fired("slow_submit") == 1
        assert any("reused_id" in e for e in self.fake.events())
        assert self.fake.fired("duplicate") > 0 and self.fake.fired("out_of_order") > 0
        assert self.fake.tasks_started(f"jim.{job}.") == 3
