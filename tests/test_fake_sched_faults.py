"""Every fault of the fake batch system (tests/fake_sched), through the real jim CLI and
jim's real SlurmAdapter: no local job submitted twice, no state going back, no false DONE,
degraded (and nothing changed, nothing submitted) while the status queries fail.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jim.states import LocalState

from fake_sched import FakeSched
from support.jimcli import FAST_CONFIG

pytestmark = pytest.mark.slow  # (whole grid jobs through the fake batch system: seconds each)

TERMINAL = {s.value for s in LocalState if s.terminal}


@pytest.fixture
def fake(tmp_path):
    return FakeSched(tmp_path / "fake-sched")


def config(lost_grace=5.0, command_timeout=10, extra=""):
    return (
        FAST_CONFIG.replace("lost_grace = 5.0", f"lost_grace = {lost_grace}")
        + f"""
[batch]
adapter = "slurm"
partition = "debug"
cache_interval = 0.3
python = "{sys.executable}"
command_timeout = {command_timeout}
{extra}
"""
    )


@pytest.fixture
def fjim(jim_env, fake):
    jim_env.env.update(fake.env(jim_env.env))
    jim_env.config.write_text(config())
    return jim_env


class Watch:
    """Polls a grid job until it ends, recording every grid state and every local job's states
    as seen over time: what the no-regression checks look at."""

    def __init__(self, jim, job):
        self.jim, self.job = jim, job
        self.grid: list[str] = []
        self.local: dict[int, list[str]] = {}

    def sample(self):
        out = self.jim.poll(self.job)
        if not self.grid or self.grid[-1] != out["JOB_STATE"]:
            self.grid.append(out["JOB_STATE"])
        st = self.jim.status(self.job)
        for lj in st["localJobs"]:
            seq = self.local.setdefault(lj["index"], [])
            if not seq or seq[-1] != lj["state"]:
                seq.append(lj["state"])
        return out, st

    def until_end(self, timeout=120.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out, st = self.sample()
            if out["JOB_STATE"] in ("DONE", "FAILED"):
                return out, st
            time.sleep(0.2)
        raise AssertionError(f"not ended: {self.grid}, {st['counts']}")

    def assert_no_regressions(self):
        # the grid job never goes back to PENDING once ACTIVE, and ends once
        if "ACTIVE" in self.grid:
            assert "PENDING" not in self.grid[self.grid.index("ACTIVE") :], self.grid
        assert sum(s in ("DONE", "FAILED") for s in self.grid) <= 1, self.grid
        for k, seq in self.local.items():
            ended = [i for i, s in enumerate(seq) if s in TERMINAL]
            assert not ended or ended[0] == len(seq) - 1, f"local job {k} left a terminal state: {seq}"


def test_query_errors_degrade_change_nothing_and_submit_nothing(fjim, fake):
    job = fjim.submit('&(executable=/bin/sh)(arguments=-c "sleep 4; exit 0")(count=4)')
    before = fjim.wait_running(job, 4)
    fake.set_faults(fail={"squeue": -1, "sacct": -1})
    degraded = Path(fjim.home) / "cache" / "slurm.degraded"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not degraded.exists():
        time.sleep(0.2)
    assert degraded.exists(), "a failing squeue did not mark the adapter degraded"
    # a second grid job while degraded: planned, not submitted
    job2 = fjim.submit("&(executable=/bin/true)(count=3)")
    t_end = time.monotonic() + 8  # the local jobs of the first one end meanwhile: nobody may say so
    while time.monotonic() < t_end:
        assert fjim.poll(job)["JOB_STATE"] == "ACTIVE"
        st = fjim.status(job)
        assert [lj["state"] for lj in st["localJobs"]] == [lj["state"] for lj in before["localJobs"]]
        time.sleep(0.5)
    assert not fake.submissions(f"jim.{job2}."), "submitted while the batch system was degraded"
    assert all(lj["state"] == "PLANNED" for lj in fjim.status(job2)["localJobs"])
    assert fake.fired("fail.squeue") >= 3
    fake.set_faults()  # the controller is back
    assert fjim.wait(job, timeout=60)["JOB_STATE"] == "DONE"
    assert fjim.wait(job2, timeout=60)["JOB_STATE"] == "DONE"
    assert not degraded.exists()
    st = fjim.status(job)
    assert all(lj["evidence"] == "wrapper-exit-file" and lj["exitCode"] == 0 for lj in st["localJobs"])
    assert fake.tasks_started(f"jim.{job}.") == 4 and fake.tasks_started(f"jim.{job2}.") == 3


def test_a_few_query_errors_heal_by_themselves(fjim, fake):
    fake.set_faults(fail={"squeue": 4})
    job = fjim.submit('&(executable=/bin/sh)(arguments=-c "exit $((JIM_INDEX % 3))")(count=6)')
    w = Watch(fjim, job)
    out, st = w.until_end()
    assert out["JOB_STATE"] == "FAILED" and out["EXIT_CODE"] == "1"
    assert [lj["exitCode"] for lj in st["localJobs"]] == [0, 1, 2, 0, 1, 2]
    assert fake.fired("fail.squeue") == 4
    assert not (Path(fjim.home) / "cache" / "slurm.degraded").exists()
    w.assert_no_regressions()


def test_slow_submit_that_went_through_is_not_submitted_again(fjim, fake):
    fjim.config.write_text(config(command_timeout=3))
    fake.set_faults(slow_submit={"seconds": 10, "count": 1})
    ledger = fjim.home.parent / "ledger"
    ledger.write_text("")
    job = fjim.submit(f'&(executable=/bin/sh)(arguments=-c "echo $JIM_INDEX >> {ledger}")(count=12)')
    w = Watch(fjim, job)
    out, st = w.until_end(timeout=60)
    assert out["JOB_STATE"] == "DONE", fjim.run("status", job).stdout
    assert fake.fired("slow_submit") == 1
    assert len(fake.submissions(f"jim.{job}.")) == 1, "the array was submitted twice"
    assert fake.tasks_started(f"jim.{job}.") == 12
    assert sorted(int(x) for x in ledger.read_text().split()) == list(range(12))
    log = (Path(fjim.home) / "jobs" / job / "jim.log").read_text()
    assert "did not answer within 3 s" in log and "reconciling by tag" in log
    w.assert_no_regressions()


def test_submit_reconciled_while_the_jobs_are_known_to_neither_queue_nor_accounting(fjim, fake):
    """sbatch times out, the short tasks run and leave squeue at once, and slurmdbd is behind:
    reconciling finds them by their wrappers' ``started`` files, never submits them again."""
    fjim.config.write_text(config(command_timeout=3))
    fake.set_faults(slow_submit={"seconds": 10, "count": 1}, min_job_age=0, accounting_lag=3600)
    ledger = fjim.home.parent / "ledger"
    ledger.write_text("")
    job = fjim.submit(f'&(executable=/bin/sh)(arguments=-c "echo $JIM_INDEX >> {ledger}")(count=6)')
    w = Watch(fjim, job)
    out, st = w.until_end(timeout=60)
    assert out["JOB_STATE"] == "DONE", fjim.run("status", job).stdout
    assert len(fake.submissions(f"jim.{job}.")) == 1, "the array was submitted twice"
    assert sorted(int(x) for x in ledger.read_text().split()) == list(range(6))
    assert {lj["batchId"] for lj in st["localJobs"]} == {
        f"{fake.submissions(f'jim.{job}.')[0]['submitted']}_{k}" for k in range(6)
    }
    assert {lj["evidence"] for lj in st["localJobs"]} == {"wrapper-exit-file"}

    fake.set_faults(duplicate=-1)
    job = fjim.submit('&(executable=/bin/sh)(arguments=-c "sleep 1; exit $((JIM_INDEX == 2 ? 5 : 0))")(count=5)')
    w = Watch(fjim, job)
    out, st = w.until_end()
    assert out["JOB_STATE"] == "FAILED" and out["EXIT_CODE"] == "5"
    assert [lj["state"] for lj in st["localJobs"]] == ["DONE", "DONE", "FAILED", "DONE", "DONE"]
    assert fake.fired("duplicate") > 0
    assert fake.tasks_started(f"jim.{job}.") == 5
    w.assert_no_regressions()


def test_out_of_order_events_never_regress_a_state_or_fake_a_done(fjim, fake):
    fake.set_faults(out_of_order=-1, duplicate=-1)
    # local jobs end at different times, some failing: many COMPLETED/FAILED -> RUNNING flips
    job = fjim.submit(
        '&(executable=/bin/sh)(arguments=-c "sleep $((JIM_INDEX % 4)); exit $((JIM_INDEX % 3 == 1 ? 3 : 0))")(count=8)'
    )
    w = Watch(fjim, job)
    out, st = w.until_end()
    assert out["JOB_STATE"] == "FAILED" and out["EXIT_CODE"] == "3"
    expect = ["FAILED" if k % 3 == 1 else "DONE" for k in range(8)]
    assert [lj["state"] for lj in st["localJobs"]] == expect
    assert all(lj["evidence"] == "wrapper-exit-file" for lj in st["localJobs"])
    assert fake.fired("out_of_order") > 2
    w.assert_no_regressions()


def _finish_other_grid_job(fake, tmp_path, grid="19991231-235959-0ther0ld", n=4):
    """Another grid job's array ends and is purged from the queue (its accounting stays)."""
    env = {**os.environ, **fake.env()}
    script = tmp_path / "other.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    old = subprocess.run(
        [
            "sbatch",
            "--parsable",
            f"--array=0-{n - 1}",
            f"--job-name=jim.{grid}.0",
            "-D",
            str(tmp_path),
            "-o",
            "/dev/null",
            str(script),
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and fake.state()["jobs"]:
        subprocess.run(["fake-sched", "tick"], env=env, check=True)
        time.sleep(0.2)
    assert not fake.state()["jobs"]
    return old, env


def test_reused_id_never_takes_the_old_jobs_accounting(fjim, fake, tmp_path):
    """The new array gets the id of another grid job's finished array; one of the new tasks
    then vanishes (no exit file, no record of its own): sacct still has the OLD task's
    COMPLETED record under that id.  It is not ours: LOST, never DONE."""
    fake.set_faults(min_job_age=0.5)
    old, env = _finish_other_grid_job(fake, tmp_path)
    fake.set_faults(min_job_age=0.5, reuse_ids=1)
    job = fjim.submit("&(executable=/bin/sleep)(arguments=3)(count=3)")
    st = fjim.wait_running(job, 3)
    assert {lj["batchId"].split("_")[0] for lj in st["localJobs"]} == {old}, "the id was not reused"
    victim = st["localJobs"][1]["batchId"]
    subprocess.run(["fake-sched", "vanish", victim], env=env, check=True)
    sacct = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "JobID,State,JobName", "-j", old],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"{victim}|COMPLETED|jim.19991231-235959-0ther0ld.0" in sacct  # the trap is set
    w = Watch(fjim, job)
    out, st = w.until_end(timeout=60)
    assert out["JOB_STATE"] == "FAILED"
    lost = st["localJobs"][1]
    assert lost["state"] == "LOST" and lost["evidence"] == "absent-after-grace", lost
    assert [lj["state"] for lj in st["localJobs"]][::2] == ["DONE", "DONE"]
    w.assert_no_regressions()


def test_vanished_task_becomes_lost_never_done(fjim, fake):
    fake.set_faults(vanish=1)
    job = fjim.submit("&(executable=/bin/sleep)(arguments=2)(count=4)")
    w = Watch(fjim, job)
    out, st = w.until_end(timeout=60)
    assert fake.fired("vanish") == 1
    assert out["JOB_STATE"] == "FAILED"
    states = sorted(lj["state"] for lj in st["localJobs"])
    assert states == ["DONE", "DONE", "DONE", "LOST"], st["counts"]
    lost = [lj for lj in st["localJobs"] if lj["state"] == "LOST"][0]
    assert lost["evidence"] == "absent-after-grace" and lost["exitCode"] is None
    w.assert_no_regressions()


def test_a_vanished_task_costs_one_accounting_lookup_per_status_answer(fjim, fake):
    """While a task is absent from the queue with nothing to explain it (until its grace runs
    out), the accounting is asked once per status answer, not once per monitoring pass."""
    fjim.config.write_text(config(lost_grace=8.0).replace("cache_interval = 0.3", "cache_interval = 3.0"))
    fake.set_faults(vanish=1)
    job = fjim.submit("&(executable=/bin/sleep)(arguments=2)(count=4)")
    out, st = Watch(fjim, job).until_end(timeout=90)
    assert sorted(lj["state"] for lj in st["localJobs"]) == ["DONE", "DONE", "DONE", "LOST"], st["counts"]
    cmds = [e["cmd"] for e in fake.events() if "cmd" in e]
    assert cmds.count("sacct") <= cmds.count("squeue") + 1, (cmds.count("sacct"), cmds.count("squeue"))


@contextlib.contextmanager
def ticking(fake, every=0.2):
    """Run the fake scheduler's clock (``fake-sched tick``) in the background, as a real
    controller's would run, even while nobody asks it anything."""
    stop = threading.Event()
    env = {**os.environ, **fake.env()}

    def loop():
        while not stop.wait(every):
            subprocess.run(["fake-sched", "tick"], env=env, capture_output=True)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(5)


def _all_submitted(jim, job, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(lj["batchId"] for lj in jim.status(job)["localJobs"]):
            return
        time.sleep(0.2)
    raise AssertionError(
        f"not all local jobs submitted:\n{jim.run('status', job).stdout}\n"
        f"{(Path(jim.home) / 'jobs' / job / 'jim.log').read_text()[-3000:]}"
    )


def test_every_fault_at_once(fjim, fake, tmp_path):
    """A slow submit that went through, duplicate and out-of-order rows, a reused id, failing
    accounting, then failing status queries, all in one grid job of three chunks: it still ends
    DONE, every local job run once.  (The query errors start once everything is submitted: while
    the worker reconciles they hit a known bug, see test_query_error_while_reconciling.)"""
    fjim.config.write_text(config(command_timeout=3, extra="chunk_size = 5"))
    fake.set_faults(min_job_age=0.5)
    _finish_other_grid_job(fake, tmp_path)
    faults = dict(
        min_job_age=15,
        fail={"sacct": 2},
        slow_submit={"seconds": 8, "count": 1},
        duplicate=-1,
        out_of_order=-1,
        reuse_ids=1,
    )
    fake.set_faults(**faults)
    ledger = tmp_path / "ledger"
    ledger.write_text("")
    job = fjim.submit(f'&(executable=/bin/sh)(arguments=-c "sleep 2; echo $JIM_INDEX >> {ledger}")(count=13)')
    w = Watch(fjim, job)
    _all_submitted(fjim, job, timeout=120)
    fake.set_faults(**{**faults, "fail": {"squeue": 3, "sacct": 2}})
    out, st = w.until_end(timeout=180)
    assert out["JOB_STATE"] == "DONE", fjim.run("status", job).stdout
    assert sorted(int(x) for x in ledger.read_text().split()) == list(range(13))
    assert fake.tasks_started(f"jim.{job}.") == 13
    assert len(fake.submissions(f"jim.{job}.")) == 3  # three chunks, each once
    for f in ("slow_submit", "fail.squeue", "duplicate", "out_of_order"):
        assert fake.fired(f) > 0, f
    assert any("reused_id" in e for e in fake.events())
    w.assert_no_regressions()


# -- bugs the fake found (fixed): reconcile under a failing query; a reused id hiding our record ------


def test_query_error_while_reconciling(fjim, fake):
    fjim.config.write_text(config(command_timeout=2, extra="chunk_size = 2"))
    fake.set_faults(min_job_age=30, slow_submit={"seconds": 5, "count": 1}, fail={"squeue": -1})
    job = fjim.submit("&(executable=/bin/true)(count=4)")
    log = Path(fjim.home) / "jobs" / job / "jim.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "worker of" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.2)  # the worker timed out on sbatch, then its reconcile query failed
    fake.set_faults(min_job_age=30)
    out = fjim.wait(job, timeout=60)
    assert out["JOB_STATE"] == "DONE", fjim.run("status", job).stdout


def test_reconcile_by_tag_with_a_reused_id(fjim, fake, tmp_path):
    fjim.config.write_text(config(command_timeout=2))
    fake.set_faults(min_job_age=0.5)
    _finish_other_grid_job(fake, tmp_path)
    fake.set_faults(min_job_age=0.5, reuse_ids=1, slow_submit={"seconds": 5, "count": 1})
    ledger = tmp_path / "ledger"
    ledger.write_text("")
    with ticking(fake):  # the fake's clock runs while sbatch hangs: the tasks end and leave squeue
        job = fjim.submit(f'&(executable=/bin/sh)(arguments=-c "echo $JIM_INDEX >> {ledger}")(count=4)')
        assert fjim.wait(job, timeout=60)["JOB_STATE"] == "DONE"
    assert sorted(int(x) for x in ledger.read_text().split()) == list(range(4))
