"""The ``condor`` adapter on the real HTCondor test pool, beyond the conformance suite.

jim runs as the unprivileged test account, from ``/root`` (see ``support/condor_pool.py``).
What is checked here is what only a real schedd shows: the job ad's initial
directory, real exit codes and hold reasons, the history after a job left the
queue, jim's hold timeout, the number of queries the schedd really serves, and
a lost submit answer reconciled by tag against the schedd's own records.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from pathlib import Path

import pytest

from support.condor_pool import JOB_PYTHON, Account, AccountAdapter, admin, pool_account, schedd_ads
from support.jimcli import FAST_CONFIG, Jim
from support.services import HTC_ROOT, HTC_USER

pytestmark = pytest.mark.htcondor

SCHEDLOG = HTC_ROOT / "var" / "log" / "condor" / "SchedLog"


@pytest.fixture
def account():
    with pool_account() as acct:
        yield acct


def pool_jim(account: Account, extra: str = "", cache_interval: float = 1.0, monitor: str = "") -> Jim:
    """A jim of the account on the pool; ``monitor``: more lines of its ``[monitor]`` table."""
    jim = account.jim()
    account.jims.append(jim)
    jim.config.write_text(
        FAST_CONFIG.replace("idle_exit = 5.0\n", f"idle_exit = 5.0\n{monitor}\n")
        + f'\n[batch]\nadapter = "condor"\npython = "{JOB_PYTHON}"\ncache_interval = {cache_interval}\n'
        + extra
    )
    return jim


def wait_for(what: str, check, timeout: float = 120.0, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def cluster_of(batch_id: str) -> int:
    return int(batch_id.split(".")[0])


def test_initial_directory_is_the_job_directory_whatever_the_cwd(account):
    jim = pool_jim(account)
    assert jim.cwd == "/root"
    assert account.run(["ls", "/root"]).returncode != 0, "the account can read /root: the test proves nothing"
    job = jim.submit("&(executable=/bin/true)(count=2)")
    assert jim.wait(job, timeout=120)["JOB_STATE"] == "DONE", jim.run("status", job).stdout
    ids = [lj["batchId"] for lj in jim.status(job)["localJobs"]]
    ads = wait_for(
        "both jobs in the history",
        lambda: (
            (a := schedd_ads(f"ClusterId == {cluster_of(ids[0])}", "Iwd", "ProcId", history=True)) and len(a) == 2 and a
        ),
    )
    assert {ad["Iwd"] for ad in ads} == {str(jim.home / "jobs" / job)}


def test_exit_code_and_the_history(account):
    jim = pool_jim(account)
    job = jim.submit('&(executable=/bin/sh)(arguments=-c "exit 3")(count=1)')
    out = jim.wait(job, timeout=120)
    assert out["JOB_STATE"] == "FAILED" and out.get("EXIT_CODE") == "3", out
    lj = jim.status(job)["localJobs"][0]
    assert lj["state"] == "FAILED" and lj["exitCode"] == 3, lj
    bid = lj["batchId"]
    # once the job left the queue, the history says how it ended, and nothing about an unknown job
    wait_for("the job left the queue", lambda: not schedd_ads(f"ClusterId == {cluster_of(bid)}", "ClusterId"))
    acct = AccountAdapter(account, jim).accounting([bid, "99999999.0"])
    assert list(acct) == [bid]
    st = acct[bid]
    assert (st.state.value, st.exit_code, st.evidence.value, st.tag) == ("FAILED", 3, "accounting", lj["tag"]), st
    assert st.host, st


def test_a_hold_is_recorded_and_ends_after_held_timeout(account):
    timeout = 20
    jim = pool_jim(account, monitor=f"held_timeout = {timeout}")
    # retries allowed: a hold past held_timeout is still no reason for another attempt (jim cancelled it)
    jim.config.write_text(jim.config.read_text().replace("max_attempts = 1", "max_attempts = 2"))
    job = jim.submit("&(executable=/bin/sleep)(arguments=300)(count=2)")
    st = jim.wait_running(job, 2, timeout=120)
    bid = st["localJobs"][0]["batchId"]
    held = admin("condor_hold", bid, user=HTC_USER)
    assert held.returncode == 0, held.stderr
    t_held = time.monotonic()

    def state_of_first():
        jim.poll(job)
        return jim.status(job)["localJobs"][0]

    lj = wait_for("HELD recorded", lambda: (x := state_of_first())["state"] == "HELD" and x, timeout=60)
    assert "condor_hold" in lj["reason"] and "HoldReasonCode 1" in lj["reason"], lj
    assert jim.poll(job)["JOB_STATE"] in ("ACTIVE", "SUSPENDED")
    # past held_timeout jim cancels it (docs/batch-systems.md), the hold's reason kept
    lj = wait_for(
        "cancelled after held_timeout",
        lambda: (x := state_of_first())["state"] == "CANCELLED" and x,
        timeout=timeout + 60,
    )
    assert time.monotonic() - t_held >= timeout - 1
    assert "cancelled by jim" in lj["reason"] and "condor_hold" in lj["reason"], lj
    wait_for(
        "the held job left the queue",
        lambda: not schedd_ads(f"ClusterId == {cluster_of(bid)} && ProcId == 0", "ClusterId"),
        timeout=60,
    )
    lj = jim.status(job)["localJobs"][0]  # (after the removal: no other attempt was planned meanwhile)
    assert lj["state"] == "CANCELLED" and lj["attempt"] == 1 and len(lj["attempts"]) == 1, lj
    other = jim.status(job)["localJobs"][1]
    assert other["state"] == "RUNNING", other
    jim.protocol("cancel", "--job-id", job)


def schedd_queries(since: int) -> list[str]:
    """The job queries the schedd served for the test account since byte ``since`` of its log
    (the pool logs D_COMMAND: one line per QUERY_JOB_ADS, with who asked)."""
    with open(SCHEDLOG, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return [ln for ln in text.splitlines() if "(QUERY_JOB_ADS)" in ln and f"from {HTC_USER}@" in ln]


class AnswerDates(threading.Thread):
    """The dates of the status answers jim's processes share (``cache/condor-status.json`` and
    ``.at``: each query jim makes has its own date), sampled every 20 ms: jim's own count of queries."""

    def __init__(self, home: Path):
        super().__init__(daemon=True)
        self.files, self.dates, self.stop = (
            [home / "cache" / f"condor-status.{x}" for x in ("json", "at")],
            set(),
            False,
        )

    def run(self) -> None:
        while not self.stop:
            for f in self.files:
                with contextlib.suppress(OSError, ValueError, KeyError):
                    self.dates.add(json.loads(f.read_text())["at"])
            time.sleep(0.02)


def test_one_schedd_query_per_interval_for_all_of_a_users_jobs(account):
    """Three grid jobs, their monitor and a client polling each as fast as it can: jim asks the schedd
    at most once per ``cache_interval`` for all of them.  Counted twice: the answers' dates jim keeps,
    and the QUERY_JOB_ADS the schedd logs for the account (at least jim's; other tests of the account,
    blahpd's and the gridmanager's may add some, so that count only bounds jim's from below)."""
    interval, window = 3.0, 15.0
    jim = pool_jim(account, cache_interval=interval)
    jobs = [jim.submit("&(executable=/bin/sleep)(arguments=120)(count=2)") for _ in range(3)]
    for job in jobs:  # (queued or running: the pool has 4 CPUs, other tests may use some)
        wait_for(f"{job} in the pool", lambda j=job: all(lj["batchId"] for lj in jim.status(j)["localJobs"]))
    dates = AnswerDates(jim.home)
    dates.start()
    start, polls, t0 = SCHEDLOG.stat().st_size, 0, time.time()
    deadline = time.monotonic() + window
    while time.monotonic() < deadline:
        for job in jobs:
            assert jim.poll(job)["JOB_STATE"] in ("ACTIVE", "PENDING")
            polls += 1
    t1 = time.time()
    time.sleep(0.1)
    dates.stop = True
    dates.join()
    asked = sorted(d for d in dates.dates if t0 <= d <= t1)
    served = schedd_queries(start)
    bound = window / interval + 2
    print(
        f"{polls} polls of 3 grid jobs in {window:g} s: jim asked {len(asked)} times, the schedd served "
        f"{len(served)} job queries of the account (cache_interval {interval:g} s)"
    )
    assert polls > 2 * bound, f"only {polls} polls: the test is too slow to show anything"
    assert len(asked) <= bound, f"jim asked {len(asked)} times in {window:g} s: {asked}"
    assert all(b - a >= interval - 0.1 for a, b in zip(asked, asked[1:])), asked
    assert len(served) >= len(asked) - 1, f"jim's queries did not reach the schedd: {served}"
    for job in jobs:
        jim.protocol("cancel", "--job-id", job)


def test_a_lost_submit_answer_is_reconciled_against_the_schedd(account):
    """The worker dies right after the schedd took the cluster: the next worker finds the jobs by their
    tag in the real queue, records their batch ids, and submits nothing twice."""
    jim = pool_jim(account)
    ledger = account.mkdir("scratch") / "ledger"
    ledger.write_text("")
    ledger.chmod(0o666)
    job = jim.submit(
        f'&(executable=/bin/sh)(arguments=-c "echo $JIM_INDEX >> {ledger}")(count=6)',
        env={"JIM_FAULT": "worker-after-submit"},
    )
    assert jim.wait(job, timeout=180)["JOB_STATE"] == "DONE", jim.run("status", job).stdout
    assert sorted(int(x) for x in ledger.read_text().split()) == list(range(6))
    log = (jim.home / "log" / "jim.log").read_text()
    assert re.search(r"reconciled 6 local jobs found by tag", log), log[-3000:]
    ids = [lj["batchId"] for lj in jim.status(job)["localJobs"]]
    clusters = {cluster_of(b) for b in ids}
    assert len(clusters) == 1, ids
    # the schedd holds one cluster of this grid job, of six procs: nothing was submitted twice
    ads = wait_for(
        "the cluster in the history",
        lambda: (a := schedd_ads(f'JimGridJob == "{job}"', "ClusterId", "ProcId", history=True)) and len(a) >= 6 and a,
    )
    (cluster,) = clusters
    assert sorted((ad["ClusterId"], ad["ProcId"]) for ad in ads) == [(cluster, p) for p in range(6)]
