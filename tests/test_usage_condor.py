"""What local jobs used, from HTCondor's history (source ``condor``) when the wrapper wrote nothing.

Unit tests on job ads as the test pool's schedd keeps them (tests/services/htcondor, HTCondor 23.9
without cgroups: the starter samples the job's processes; ``tests/data/usage/condor-history.ads``,
``condor_history -long`` of: 45.0, a job that burnt 2 s of CPU in a child it waited for and ended
before the first sample; 45.1, a job SIGKILLed with its child from outside after a sample; 44.1,
a job run twice; 42.0 and 41.0, jobs removed while running; 30.0, a routed job; 28.0, removed
before it started), through the adapter's own history query; then, on the real pool (marker
``htcondor``), a wrapper killed with its payload: the record shows what the history says.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from jim.adapters.condor import CondorAdapter, _value
from jim.adapters.usage import CONDOR_USAGE_ATTRS, condor_usage
from jim.classads import classad_module
from jim.paths import Home
from jim.record import Source
from jim.states import LocalState

ADS = Path(__file__).parent / "data" / "usage" / "condor-history.ads"


def _ads() -> dict[str, object]:
    ads = classad_module().parseAds(ADS.read_text())
    return {f"{ad['ClusterId']}.{ad['ProcId']}": ad for ad in ads}


def _usage(ad: object):
    return condor_usage(lambda key: _value(ad, key))


class _History:
    """A schedd whose history is the recorded ads (what it was asked is kept)."""

    def __init__(self, ads):
        self.ads, self.asked = ads, []

    def history(self, constraint, projection, match):
        self.asked.append(list(projection))
        return list(self.ads)


def test_the_history_query_asks_for_the_usage_and_each_ended_job_carries_it(tmp_path):
    ads = _ads()
    adapter = CondorAdapter(Home(tmp_path).ensure(), {"python": "/usr/bin/python3"})
    adapter._schedd = schedd = _History(ads.values())
    found = adapter.accounting(["45.0", "45.1", "28.0"])
    assert len(schedd.asked) == 1 and set(CONDOR_USAGE_ATTRS) <= set(schedd.asked[0])  # (one query, as before)
    killed = found["45.1"]
    assert killed.state is LocalState.FAILED and killed.usage is not None
    u = killed.usage
    assert u.source is Source.CONDOR
    assert (u.cpu_user, u.cpu_system, u.wall, u.cores, u.node) == (3.0, 0.0, 6.0, 1, "vm")
    assert u.max_rss_kb == 101828  # ResidentSetSize_RAW: KiB (the 80 MiB the child held, and two Pythons)
    assert found["28.0"].usage is None  # (removed before it ever started)


def test_cpu_of_zero_seconds_is_unknown_and_the_rest_is_known():
    """45.0 burnt 2 s of CPU and ended before the starter's first sample: the history says 0.0 CPU
    (HTCondor counts whole seconds, of its last sample): unknown, not 0."""
    u = _usage(_ads()["45.0"])
    assert u is not None and u.cpu_user is None and u.cpu_system is None and not u.rejected
    assert (u.wall, u.cores, u.node, u.max_rss_kb) == (5.0, 1, "vm", 7440)


def test_a_job_run_twice_counts_its_last_run():
    u = _usage(_ads()["44.1"])  # RemoteWallClockTime 103 over two runs, LastRemoteWallClockTime 30
    assert u is not None and u.wall == 30.0 and u.node == "vm"


def test_removed_jobs():
    ads = _ads()
    never_sampled = _usage(ads["42.0"])  # (ResidentSetSize_RAW 0: never sampled, unknown)
    assert never_sampled is not None and never_sampled.max_rss_kb is None and never_sampled.wall == 2.0
    running = _usage(ads["41.0"])
    assert running is not None and (running.wall, running.max_rss_kb) == (11.0, 16960)
    routed = _usage(ads["30.0"])  # (no LastRemoteHost nor LastRemoteWallClockTime: one start, its wall)
    assert routed is not None and (routed.wall, routed.node, routed.cores) == (19.0, None, 1)
    assert _usage(ads["28.0"]) is None


@pytest.mark.parametrize(
    ("attrs", "rejected"),
    [
        ({"RemoteUserCpu": -5.0}, ("cpu_user",)),
        ({"RemoteUserCpu": float("inf")}, ("cpu_user",)),
        ({"RemoteUserCpu": '"3"'}, ("cpu_user",)),
        ({"RemoteUserCpu": 99999.0}, ("cpu_user", "cpu_system")),  # (more than 6 s of one core)
        ({"ResidentSetSize_RAW": 1e30}, ("max_rss_kb",)),
        ({"ResidentSetSize_RAW": "true"}, ("max_rss_kb",)),
        ({"CpusProvisioned": 1.5}, ("cores", "cpu_user", "cpu_system")),
        ({"CpusProvisioned": 0}, ("cores", "cpu_user", "cpu_system")),
        ({"LastRemoteWallClockTime": -1.0}, ("wall", "cpu_user", "cpu_system")),
        ({"LastRemoteHost": '"slot1@vm; rm -rf /"'}, ("node",)),
        ({"LastRemoteHost": '"slot1@' + "x" * 300 + '"'}, ("node",)),
    ],
)
def test_hostile_ads_are_unknown_and_named(attrs, rejected):
    ad = _ads()["45.1"]
    for key, value in attrs.items():
        ad[key] = classad_module().ExprTree(value) if isinstance(value, str) else value
    u = _usage(ad)
    assert u is not None and set(u.rejected) == set(rejected), u
    assert all(getattr(u, name) is None for name in rejected)


def test_memory_usage_in_mib_when_there_is_no_raw_resident_set():
    ad = _ads()["45.1"]
    del ad["ResidentSetSize_RAW"]
    u = _usage(ad)  # MemoryUsage = ((ResidentSetSize + 1023) / 1024): MiB, rounded up
    assert u is not None and u.max_rss_kb == (125000 + 1023) // 1024 * 1024


# -- on the real pool -----------------------------------------------------------------------------


@pytest.mark.htcondor
def test_condor_accounting_when_the_wrapper_wrote_nothing():
    from test_condor_pool_jobs import pool_jim, wait_for  # (lazy: the pool's helpers, with their imports)

    from support.condor_pool import JOB_PYTHON, pool_account, schedd_ads  # (lazy: as above)

    with pool_account() as account:
        jim = pool_jim(account)
        script = account.mkdir("scripts") / "spin.py"
        script.write_text("while True:\n    pass\n")
        account.own(script, 0o644)
        job = jim.submit(
            f"&(executable={JOB_PYTHON})(arguments={script})(jimtype=montecarlo)(events=1)(eventsperjob=1)"
            "(jobname=usage-condor)"
        )
        st = jim.wait_running(job, 1, timeout=120)
        bid = st["localJobs"][0]["batchId"]
        cluster, proc = bid.split(".")
        started = jim.home / "jobs" / job / "local" / "0" / "started"
        wait_for("the wrapper started", started.exists, timeout=60)
        # (the starter samples the job's processes STARTER_INITIAL_UPDATE_INTERVAL = 8 s after it starts, then
        # every STARTER_UPDATE_INTERVAL = 5 s, and the shadow passes on the last sample only when the job
        # ends: kill it once the payload has spun through two samples)
        wait_for("15 s of the payload spinning", lambda: time.time() - started.stat().st_mtime >= 15, timeout=60)
        wrapper = json.loads(started.read_text())["pid"]
        group = os.getpgid(wrapper)
        assert group != os.getpgrp()
        os.killpg(group, signal.SIGKILL)  # (the wrapper and its payload: no exit-code file is ever written)
        out = jim.wait(job, states=("DONE", "FAILED", "CANCELLED"), timeout=120)
        assert out["JOB_STATE"] == "FAILED", out
        lj = jim.status(job)["localJobs"][0]
        assert not (jim.home / "jobs" / job / "local" / "0" / "exit_code").exists()
        assert lj["evidence"] == "accounting", lj
        (ad,) = schedd_ads(
            f"ClusterId == {cluster} && ProcId == {proc}",
            *("RemoteUserCpu", "RemoteSysCpu", "LastRemoteWallClockTime", "ResidentSetSize_RAW", "CpusProvisioned"),
            history=True,
        )
        u = lj["usage"]
        assert u is not None and u["source"] == "condor", lj
        if ad["RemoteUserCpu"] + ad["RemoteSysCpu"] > 0:
            assert u["cpuUser"] == ad["RemoteUserCpu"] >= 1 and u["cpuSystem"] == ad["RemoteSysCpu"], (u, ad)
        else:  # (a loaded machine: no CPU sample reached the shadow before the kill; 0 is not measured, so unknown)
            assert u["cpuUser"] is None and u["cpuSystem"] is None, (u, ad)
        assert u["wall"] == ad["LastRemoteWallClockTime"] >= 1 and u["cores"] == ad["CpusProvisioned"] == 1
        assert u["maxRssKb"] == (ad["ResidentSetSize_RAW"] or None) and u["node"], (u, ad)
