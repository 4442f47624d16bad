"""The adapter conformance suite on the HTCondor adapter, against the fake schedd.

HTCondor's daemons cannot be installed here: the schedd is the scripted fake
of ``tests/condor_fake.py`` (real local processes for the jobs, real
``htcondor2.Submit`` parsing and macro expansion, constraints evaluated with
classad2).  It is not a real service, so this suite always runs.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

import condor_fake
from support.conformance import AdapterConformance


class TestCondorConformance(AdapterConformance):
    __test__ = True
    adapter = "condor"
    query_command = None  # a failing query is scripted in the fake (see the override below)
    turnaround = 30.0

    @pytest.fixture(autouse=True)
    def _fake(self, tmp_path):
        self.fake_dir = tmp_path / "condor-fake"
        self.fake_dir.mkdir()
        yield
        condor_fake.FakeSchedd(self.fake_dir).kill_everything()

    def service_env(self):
        env = condor_fake.enable({"PYTHONPATH": os.environ.get("PYTHONPATH", "")}, self.fake_dir)
        return {k: env[k] for k in ("JIM_CONDOR_FAKE", condor_fake.DIR_ENV, "PYTHONPATH")}

    def batch_options(self):
        return f'python = "{sys.executable}"\ncache_interval = 1.0\n'

    def kill_outside_jim(self, batch_id, env):
        # condor_rm -forcex by an admin: the job is SIGKILLed, HTCondor records it as removed
        condor_fake.FakeSchedd(env["JIM_CONDOR_FAKE_DIR"]).admin_remove(batch_id, force=True)

    def render_for_golden(self, adapter, chunk):
        return str(adapter.submit_description(chunk, 0))

    def test_query_failure_is_no_news_and_degrades(self, cjim):
        """As the base test, with the failure scripted in the fake schedd instead of a broken command."""
        job = cjim.submit("&(executable=/bin/sleep)(arguments=60)(count=2)")
        self._running(cjim, job, 2, self.turnaround)
        before = cjim.status(job)["localJobs"]
        condor_fake.set_scenario(self.fake_dir, query_error="Failed to fetch ads from schedd: connection refused")
        cache = Path(cjim.home) / "cache"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (cache / "condor.degraded").exists():
            time.sleep(0.3)
        assert (cache / "condor.degraded").exists()
        assert "connection refused" in (cache / "condor.degraded").read_text()
        time.sleep(2)
        after = cjim.status(job)["localJobs"]
        assert [lj["state"] for lj in after] == [lj["state"] for lj in before]
        assert cjim.poll(job)["JOB_STATE"] == "ACTIVE"
        condor_fake.set_scenario(self.fake_dir, query_error=None)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (cache / "condor.degraded").exists():
            time.sleep(0.3)
        assert not (cache / "condor.degraded").exists(), "a working query must clear the degraded flag"
        cjim.protocol("cancel", "--job-id", job)
