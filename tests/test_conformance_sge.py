"""The adapter conformance suite on the real test Grid Engine cell (tests/services/sge)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support.conformance import AdapterConformance
from support.env import DATA
from support.services import sge_env, sge_service_env

pytestmark = pytest.mark.sge

DOWN = (DATA / "sge" / "down-qstat.err").read_text().strip().splitlines()[0]


class TestSgeConformance(AdapterConformance):
    __test__ = True
    adapter = "sge"
    query_command = "qstat"
    query_failure_text = DOWN  # what qstat says while sge_qmaster is down (recorded)
    turnaround = 60.0

    @pytest.fixture(autouse=True)
    def _leave_nothing_queued(self, request):
        """Whatever happens in a test, delete its array jobs afterwards (by name)."""
        jim = request.getfixturevalue("cjim") if "cjim" in request.fixturenames else None
        yield
        if jim is not None:
            env = {**os.environ, **sge_service_env()}
            for job in jim.job_ids():
                subprocess.run(["qdel", f"jim.{job}.*"], env=env, capture_output=True)

    def service_available(self):
        return sge_env() is not None

    def service_env(self):
        return sge_service_env()

    def batch_options(self):
        return f'cache_interval = 1.0\npython = "{sys.executable}"\n'

    def kill_outside_jim(self, batch_id, env):
        # an admin's qdel of one task: Grid Engine kills it (SIGKILL, no wrapper flush);
        # the accounting says "failed 100 : assumedly after job", exit status 137
        job, _, task = batch_id.partition(".")
        subprocess.run(["qdel", job, "-t", task], env=env, check=True, capture_output=True)

    def render_for_golden(self, adapter, chunk):
        return adapter.script(chunk, [0, 1, 2])
