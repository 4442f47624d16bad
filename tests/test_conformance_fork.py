"""The adapter conformance suite on the fork backend."""

from __future__ import annotations

import os
import signal

from support.conformance import AdapterConformance


class TestForkConformance(AdapterConformance):
    __test__ = True
    adapter = "fork"
    query_command = None  # a local process table cannot be unreachable
    turnaround = 20.0
    bulk_submissions = None  # one process per local job: there is no batch system to submit to

    def batch_options(self):
        return "cores = 8"  # (the suite runs more sleeping local jobs at once than this host has cores)

    def kill_outside_jim(self, batch_id, env):
        os.killpg(int(batch_id.split(":")[0]), signal.SIGKILL)
