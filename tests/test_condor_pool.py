"""The adapter conformance suite on the ``condor`` adapter, against the real HTCondor test pool.

jim runs as the unprivileged test account (HTCondor runs no job of root's):
the installed jim, a private home under ``/tmp`` (the jobs run in the pool's
chroot, where ``/tmp`` is bound), the chroot's ``/usr/bin/python3`` for the
wrapper, started from ``/root`` (see ``support/condor_pool.py``).
"""

from __future__ import annotations

import pytest

from support.condor_pool import JOB_PYTHON, AccountAdapter, admin_remove, pool_account, pool_env
from support.conformance import AdapterConformance

pytestmark = pytest.mark.htcondor


class TestCondorPoolConformance(AdapterConformance):
    __test__ = True
    adapter = "condor"
    turnaround = 90.0

    @pytest.fixture(autouse=True)
    def _account(self):
        with pool_account() as self.account:
            self.jims = self.account.jims
            yield

    def make_jim(self, jim_env):
        jim = self.account.jim()
        self.jims.append(jim)
        return jim

    def scratch(self, cjim, tmp_path):
        return self.account.mkdir("scratch")

    def service_available(self):
        return pool_env() is not None

    def batch_options(self):
        return f'python = "{JOB_PYTHON}"\ncache_interval = 1.0\n'

    def adapter_instance(self, jim):
        return AccountAdapter(self.account, jim)

    def kill_outside_jim(self, batch_id, env):
        # an admin's removal (root in the chroot is one): condor_rm, and -forcex for what is
        # still in the queue once the removal had its time (see admin_remove)
        cluster, proc = batch_id.split(".")
        admin_remove(f"ClusterId == {cluster} && ProcId == {proc}", timeout=15.0)

    def break_query(self, cjim, scratch):
        """The monitor's client configuration names a collector on a port nothing listens on."""
        dead = scratch / "condor_config.dead"
        dead.write_text(
            "CONDOR_HOST = 127.0.0.1\nCOLLECTOR_HOST = 127.0.0.1:9\nSEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS\n"
        )
        self.account.own(dead, 0o644)
        cjim.env["CONDOR_CONFIG"] = str(dead)

    def render_for_golden(self, adapter, chunk):
        return str(adapter.submit_description(chunk, 0))
