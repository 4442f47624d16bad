"""A dead worker node under running local jobs, on the real HTCondor test pool.

``kill -9`` of the pool's ``condor_startd`` (the master starts a new one) is what
a worker node's daemon dying looks like to HTCondor.  jim runs as the test
account (see ``support/condor_pool.py``).
"""

from __future__ import annotations

import calendar
import os
import signal
import time

import pytest

from support.condor_pool import JOB_PYTHON, pool_account, schedd_ads, startd_pids
from support.jimcli import FAST_CONFIG

pytestmark = pytest.mark.htcondor


@pytest.fixture
def account():
    with pool_account() as acct:
        yield acct
    # the pool has its startd again for the next test
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not startd_pids():
        time.sleep(1)


def test_a_startd_killed_under_running_local_jobs(account):
    """What really happens (HTCondor 23.9, measured here): the starters die with their startd, and the
    jobs with them; the schedd keeps each job Running ("disconnected") until its job lease runs out,
    then puts it back to Idle and runs it again under the same batch id.  So the truth jim must record
    is HTCondor's own re-run: attempt 1, same batch id, RUNNING (then QUEUED while it waits for a
    slot again) until the second run's exit-code file says DONE; never an end before that.

    The job lease is the site's (``job_lease_duration``, 40 minutes by default): 60 s here."""
    lease = 60
    jim = account.jim()
    account.jims.append(jim)
    jim.config.write_text(
        FAST_CONFIG.replace("lost_grace = 5.0", "lost_grace = 30.0")
        + f'\n[batch]\nadapter = "condor"\npython = "{JOB_PYTHON}"\ncache_interval = 1.0\n'
        + f"[batch.submit_commands]\njob_lease_duration = {lease}\n"
    )
    job = jim.submit("&(executable=/bin/sleep)(arguments=30)(count=3)")
    st = jim.wait_running(job, 3, timeout=120)
    ids = [lj["batchId"] for lj in st["localJobs"]]
    cluster = int(ids[0].split(".")[0])
    pids = startd_pids()
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    killed = time.time()
    trail: dict[str, list[str]] = {b: [] for b in ids}
    out: dict[str, str] = {}
    deadline = time.monotonic() + lease + 240
    while time.monotonic() < deadline:
        out = jim.poll(job)
        for lj in jim.status(job)["localJobs"]:
            seen = trail.setdefault(lj["batchId"] or "-", [])
            if not seen or seen[-1] != lj["state"]:
                seen.append(lj["state"])
        if out["JOB_STATE"] in ("DONE", "FAILED"):
            break
        time.sleep(0.5)
    assert out["JOB_STATE"] == "DONE", f"{trail}\n{jim.run('status', job).stdout}"
    assert set(trail) == set(ids), trail  # the same batch ids throughout
    for seen in trail.values():  # running, perhaps queued again, running, then the only end: DONE
        assert seen[0] == "RUNNING" and seen[-1] == "DONE" and set(seen[1:-1]) <= {"QUEUED", "RUNNING"}, trail
    final = jim.status(job)["localJobs"]
    for lj in final:
        assert lj["state"] == "DONE" and lj["attempt"] == 1 and len(lj["attempts"]) == 1, lj
        assert lj["evidence"] == "wrapper-exit-file" and lj["exitCode"] == 0, lj
    # the exit-code file is the second run's: the first died with its starter, before its 30 s
    ended = [lj["ended"] for lj in final]
    assert all(calendar.timegm(time.strptime(e[:19], "%Y-%m-%dT%H:%M:%S")) >= killed + lease - 2 for e in ended), (
        ended,
        killed,
    )
    # and the schedd says so: each job started twice (a re-run, not a second submission)
    ads = schedd_ads(f"ClusterId == {cluster}", "ProcId", "NumShadowStarts", "JobStatus", history=True)
    assert sorted(ad["ProcId"] for ad in ads) == [0, 1, 2], ads
    assert all(ad["NumShadowStarts"] >= 2 and ad["JobStatus"] == 4 for ad in ads), ads
    assert startd_pids(), "the master did not start a new startd"
