"""Local jobs that end through no fault of their own get another attempt (jim.retry), every attempt
on record; people resubmit one local job (``jim resubmit ID.k``, ``ID --failed``).

In process against the in-memory batch system (the rule of evidence, the cool-off, the tags of
each attempt, reconcile by tag, no duplicate), then through the real jim command on the fork
backend (real processes: an exit code named retryable, kill and resubmit, the output tar).
The node-failure and preemption cases on a real multi-node Slurm are in test_slurm_cluster_retry.py.
"""

from __future__ import annotations

import dataclasses
import json
import tarfile
import time

import pytest

from jim import background, faults, retry, summary, worker
from jim.config import parse
from jim.db import Database, validate
from jim.jobdesc import parse_rsl
from jim.jobid import local_tag
from jim.memo import Memo
from jim.monitor import refresh
from jim.paths import Home
from jim.site import Site
from jim.states import EndCause, Evidence, GramState, LocalState
from jim.submit import submit

from support.fake_adapter import FakeAdapter, ended
from support.jimcli import FAST_CONFIG

# -- the rule, from the record alone ---------------------------------------------------


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A config with 3 attempts and a cool-off of 10 s (growing x2), a database, a fake batch system."""
    config = parse(
        {
            "monitor": {"interval": 0.01, "lost_grace": 60.0},
            "retry": {"max_attempts": 3, "cool_off": 10.0, "cool_off_factor": 2.0, "max_cool_off": 15.0},
        },
        env={"JIM_HOME": str(tmp_path / "home")},
    )
    home = Home(config.home)
    monkeypatch.setattr(background, "start_monitor", lambda home: None)
    monkeypatch.setattr(background, "start_worker", lambda home, job_id: None)

    class Bench:
        pass

    s = Bench()
    s.config, s.db, s.fake = config, Database(home.ensure()), FakeAdapter(home)

    def grid_job(n=2):
        job_id = submit(Site(config), parse_rsl(f"&(executable=/bin/true)(count={n})"), start_background=False)
        worker.submit_pending(Site(config, db=s.db, adapter=s.fake), job_id)
        return job_id

    s.grid_job = grid_job
    s.refresh = lambda **kw: refresh(Site(config, db=s.db, adapter=s.fake), **kw)
    s.submit_due = lambda job_id: worker.submit_pending(Site(config, db=s.db, adapter=s.fake), job_id)
    return s


def _local(site, job_id, k=0):
    return site.db.read(job_id).local(k)


def test_cool_off_grows_and_is_capped():
    policy = parse({"retry": {"cool_off": 60.0, "cool_off_factor": 2.0, "max_cool_off": 200.0}}).retry
    assert [retry.cool_off(policy, n) for n in (1, 2, 3, 4)] == [60.0, 120.0, 200.0, 200.0]


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"max_attempts": 0}, "at least 1"),
        ({"exit_codes": [0]}, "exit codes 1-255"),
        ({"exit_codes": "3"}, "exit_codes: expected a list of whole numbers"),
        ({"cool_off_factor": 0.5}, "at least 1"),
        ({"cooloff": 1.0}, "unknown key"),
    ],
)
def test_retry_configuration_is_checked(table, problem):
    from jim.errors import ConfigError

    with pytest.raises(ConfigError, match=problem):
        parse({"retry": table})


def test_a_node_failure_gets_another_attempt_after_its_cool_off_with_its_own_tag(site):
    job = site.grid_job(2)
    t0 = time.time()
    site.fake.set_state(f"{job}.0", LocalState.FAILED, cause=EndCause.NODE_FAIL)
    site.fake.set_state(f"{job}.1", LocalState.RUNNING)
    site.refresh(now=t0)
    rec = site.db.read(job)
    lj = rec.local(0)
    assert (lj.state, lj.attempt, lj.tag) == (LocalState.PLANNED, 2, local_tag(job, 0, 2))
    assert lj.retry_after == pytest.approx(t0 + 10.0, abs=0.01)
    (first,) = lj.past_attempts()
    assert first["state"] == "FAILED" and first["cause"] == "NODE_FAIL" and first["batchId"] == "100"
    assert first["tag"] == f"{job}.0" and first["retryReason"] == "node failure (NODE_FAIL)"
    assert rec.state is GramState.ACTIVE and rec.retries() == 1  # a retry pending is not a failure
    assert validate(site.db.home.record(job)) == []
    submits = site.fake.count("submit")
    _due(site, job)
    site.submit_due(job)
    assert site.fake.count("submit") == submits + 1
    assert site.fake.submitted_tags().count(local_tag(job, 0, 2)) == 1
    lj = _local(site, job)
    assert lj.state is LocalState.QUEUED and lj.batch_id == "102" and "retryAfter" not in lj.el.attrib
    site.fake.set_state(local_tag(job, 0, 2), LocalState.DONE, exit_code=0)
    site.fake.set_state(f"{job}.1", LocalState.DONE, exit_code=0)
    site.refresh()
    rec = site.db.read(job)
    assert rec.state is GramState.DONE and rec.exit_code == 0
    assert validate(site.db.home.record(job)) == []


def test_an_attempt_whose_submission_went_in_is_found_by_its_tag_not_submitted_twice(site, monkeypatch):
    """The worker dies after the batch system took attempt 2 and before the record says so: the
    next worker finds attempt 2 by its tag and records it, and submits nothing."""
    job = site.grid_job(1)
    site.fake.set_state(f"{job}.0", LocalState.FAILED, cause=EndCause.PREEMPTED)
    site.refresh()
    _due(site, job)

    class Killed(Exception):
        pass

    def point(name):
        if name == "worker-after-submit":
            raise Killed

    monkeypatch.setattr(faults, "point", point)
    with pytest.raises(Killed):
        site.submit_due(job)
    monkeypatch.setattr(faults, "point", lambda name: None)
    lj = _local(site, job)
    assert lj.state is LocalState.PLANNED and lj.batch_id is None  # the outcome is unknown
    site.submit_due(job)
    tag = local_tag(job, 0, 2)
    assert site.fake.submitted_tags().count(tag) == 1
    assert ("find_by_tag", [tag]) in site.fake.calls
    assert _local(site, job).batch_id == next(b for b, j in site.fake.jobs.items() if j.tag == tag)


def test_an_earlier_attempts_journal_line_does_not_make_the_next_one_unsure(site):
    """Attempt 1 was journaled; attempt 2 is submitted without asking the batch system first."""
    job = site.grid_job(1)
    site.fake.set_state(f"{job}.0", LocalState.FAILED, cause=EndCause.NODE_FAIL)
    site.refresh()
    _due(site, job)
    site.submit_due(job)
    assert site.fake.count("find_by_tag") == 0


def _due(site, job_id):
    """End the cool-off of every local job waiting for one (as if it had passed)."""
    with site.db.update(job_id) as r:
        for lj in r.local_jobs():
            if lj.retry_after is not None:
                lj.set("retryAfter", "2000-01-01T00:00:00.000Z")


@pytest.mark.parametrize(
    ("end", "again"),
    [
        (dict(state=LocalState.FAILED, cause=EndCause.NODE_FAIL), True),
        (dict(state=LocalState.FAILED, cause=EndCause.PREEMPTED), True),
        (dict(state=LocalState.CANCELLED, cause=EndCause.PREEMPTED), True),
        (dict(state=LocalState.FAILED, cause=EndCause.BOOT_FAIL), True),
        (dict(state=LocalState.FAILED, cause=EndCause.LAUNCH_FAILED), True),
        (dict(state=LocalState.FAILED, cause=EndCause.TIMEOUT), False),
        (dict(state=LocalState.FAILED, cause=EndCause.OUT_OF_MEMORY), False),
        (dict(state=LocalState.FAILED, cause=EndCause.DEADLINE), False),
        (dict(state=LocalState.CANCELLED), False),
        (dict(state=LocalState.DONE, exit_code=0), False),
    ],
)
def test_batch_ends_and_their_evidence(site, end, again):
    job = site.grid_job(1)
    (tmp := site.db.home.local_dir(job, 0)).mkdir(parents=True)  # the wrapper started: no NOT_STARTED
    (tmp / "started").write_text('{"host": "cn1"}')
    site.fake.set_state(f"{job}.0", **end)
    site.refresh()
    lj = _local(site, job)
    assert (lj.attempt == 2) is again, lj.el.attrib
    assert lj.state is (LocalState.PLANNED if again else end["state"])


def test_a_failure_before_the_wrapper_started_is_the_nodes(site):
    job = site.grid_job(1)
    site.fake.set_state(f"{job}.0", LocalState.FAILED, exit_code=1)
    site.refresh()
    (first,) = _local(site, job).past_attempts()
    assert first["cause"] == "NOT_STARTED" and "the wrapper never started" in first["retryReason"]


def test_lost_gets_another_attempt(site):
    job = site.grid_job(1)
    site.fake.vanish(f"{job}.0")
    memo = Memo()
    t0 = _local(site, job).entered(LocalState.QUEUED) + 1
    site.refresh(now=t0, memo=memo)
    site.refresh(now=t0 + 80, memo=memo)
    lj = _local(site, job)
    (first,) = lj.past_attempts()
    assert first["state"] == "LOST" and first["evidence"] == "absent-after-grace"
    assert lj.attempt == 2 and first["retryReason"].startswith("lost: gone from the batch system")


def test_attempts_run_out_and_the_grid_job_fails_with_the_reason(site):
    job = site.grid_job(1)
    for n in (1, 2, 3):
        site.fake.set_state(local_tag(job, 0, n), LocalState.FAILED, cause=EndCause.NODE_FAIL)
        site.refresh()
        if n < 3:
            _due(site, job)
            site.submit_due(job)
    rec = site.db.read(job)
    lj = rec.local(0)
    assert lj.state is LocalState.FAILED and lj.attempt == 3 and len(lj.past_attempts()) == 2
    assert lj.get("reason").endswith("no attempts left (3 of 3)")
    assert rec.state is GramState.FAILED and rec.exit_code == 1
    assert sorted(site.fake.submitted_tags()) == sorted(local_tag(job, 0, n) for n in (1, 2, 3))
    assert validate(site.db.home.record(job)) == []


def test_the_second_cool_off_is_longer(site):
    job = site.grid_job(1)
    t0 = time.time()
    site.fake.set_state(local_tag(job, 0, 1), LocalState.FAILED, cause=EndCause.NODE_FAIL)
    site.refresh(now=t0)
    assert _local(site, job).retry_after == pytest.approx(t0 + 10, abs=0.01)
    _due(site, job)
    site.submit_due(job)
    site.fake.set_state(local_tag(job, 0, 2), LocalState.FAILED, cause=EndCause.NODE_FAIL)
    site.refresh(now=t0 + 1)
    assert _local(site, job).retry_after == pytest.approx(t0 + 1 + 15, abs=0.01)  # 20, capped at 15


def test_exit_codes_from_the_site_and_from_the_job_types_hook(site, monkeypatch):
    from jim.handlers.generic import GenericHandler

    config = parse({"retry": {"exit_codes": [3]}}, env={"JIM_HOME": str(site.db.home.root)})
    rule = retry.Rule(config)
    assert rule.retryable_code("generic", 3) and not rule.retryable_code("generic", 4)
    monkeypatch.setattr(GenericHandler, "retryable_exit_code", lambda self, code: code == 4)
    rule = retry.Rule(config)
    assert rule.retryable_code("generic", 4) and not rule.retryable_code("generic", 5)
    assert not rule.retryable_code("no-such-type", 4)  # an uninstalled plug-in: only the site's codes


def test_a_cancel_is_never_retried(site):
    job = site.grid_job(1)
    with site.db.update(job) as r:
        r.set("cancelRequested", "true")
    site.fake.set_state(f"{job}.0", LocalState.FAILED, cause=EndCause.NODE_FAIL)
    site.refresh()
    assert _local(site, job).attempt == 1


def test_accounting_gives_the_cause_of_a_job_gone_from_the_queue(site):
    job = site.grid_job(1)
    record = dataclasses.replace(ended(LocalState.FAILED, 0, f"{job}.0"), cause=EndCause.NODE_FAIL)
    site.fake.vanish(f"{job}.0", record)
    site.refresh()
    (first,) = _local(site, job).past_attempts()
    assert first["evidence"] == Evidence.ACCOUNTING.value and first["cause"] == "NODE_FAIL"


# -- through jim, on the fork backend (real processes) ---------------------------------------

RETRY_CONFIG = FAST_CONFIG.replace("max_attempts = 1", "max_attempts = 3\ncool_off = 0.3\nexit_codes = [3]")


@pytest.fixture
def rjim(jim_env):
    jim_env.config.write_text(RETRY_CONFIG)
    return jim_env


def _script(tmp_path, body):
    s = tmp_path / "job.sh"
    s.write_text("#!/bin/sh\n" + body)
    s.chmod(0o755)
    return s


def test_a_retryable_exit_code_is_retried_up_to_the_limit_then_fails_the_grid_job(rjim, tmp_path):
    s = _script(tmp_path, 'echo "attempt $JIM_ATTEMPT $JIM_TAG"\n[ "$JIM_INDEX" = 1 ] && exit 3\nexit 0\n')
    job = rjim.submit(f"&(executable={s})(count=2)")
    out = rjim.wait(job, timeout=60)
    assert (out["JOB_STATE"], out["EXIT_CODE"]) == ("FAILED", "3")
    assert "no attempts left (3 of 3)" in out["MESSAGE"]
    lj = rjim.status(job)["localJobs"][1]
    assert [a["n"] for a in lj["attempts"]] == [1, 2, 3] and lj["attempt"] == 3
    assert [a["tag"] for a in lj["attempts"]] == [f"{job}.1", f"{job}.1.2", f"{job}.1.3"]
    assert all(a["exitCode"] == 3 and a["state"] == "FAILED" for a in lj["attempts"])
    assert [a["retryReason"] for a in lj["attempts"]] == ["exit code 3 is retryable"] * 2 + [None]
    assert rjim.status(job)["retries"] == 2
    local = rjim.home / "jobs" / job / "local"
    for name, n in (("1", 1), ("1.2", 2), ("1.3", 3)):
        assert (local / name / "stdout").read_text() == f"attempt {n} {local_tag(job, 1, n)}\n"
    # the output tar lists every attempt, and which one counted; earlier attempts' logs apart
    with tarfile.open(rjim.home / "jobs" / job / f"{job}.tar.gz") as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile(f"{job}/MANIFEST.json"))
    m1 = manifest["local_jobs"][1]
    assert [(a["n"], a["counted"]) for a in m1["attempts"]] == [(1, False), (2, False), (3, True)]
    assert sum(n.startswith(f"{job}/attempts/stdout.1.") for n in names) == 2


def test_exit_code_3_is_not_retried_unless_named(jim_env, tmp_path):
    jim_env.config.write_text(FAST_CONFIG.replace("max_attempts = 1", "max_attempts = 3\ncool_off = 0.3"))
    s = _script(tmp_path, "exit 3\n")
    job = jim_env.submit(f"&(executable={s})(count=1)")
    out = jim_env.wait(job, timeout=30)
    assert (out["JOB_STATE"], out["EXIT_CODE"]) == ("FAILED", "3")
    (lj,) = jim_env.status(job)["localJobs"]
    assert lj["attempt"] == 1 and len(lj["attempts"]) == 1


def test_kill_then_resubmit_one_local_job_with_the_history_in_the_record(rjim, tmp_path):
    flag = tmp_path / "release"
    s = _script(
        tmp_path,
        f'[ "$JIM_INDEX" = 1 ] && [ "$JIM_ATTEMPT" = 1 ] && sleep 60\nwhile [ ! -e {flag} ]; do sleep 0.1; done\n',
    )
    rjim.config.write_text(RETRY_CONFIG + '\n[batch]\nadapter = "fork"\ncores = 8\n')  # (3 at once)
    job = rjim.submit(f"&(executable={s})(count=3)")
    rjim.wait_running(job, 3)
    assert rjim.run("kill", f"{job}.1").stdout.strip() == f"{job}.1 CANCELLED"
    # resubmitting a running one is refused, with the way out
    refused = rjim.run("resubmit", f"{job}.0")
    assert refused.returncode != 0 and f"kill it first (jim kill {job}.0)" in refused.stderr
    assert rjim.run("resubmit", f"{job}.1").stdout.strip() == f"{job}.1 attempt 2 PLANNED"
    flag.touch()
    out = rjim.wait(job, timeout=60)
    assert out["JOB_STATE"] == "DONE"
    lj = rjim.status(job)["localJobs"][1]
    first, second = lj["attempts"]
    assert first["state"] == "CANCELLED" and first["killedBy"] and first["retryBy"] == first["killedBy"]
    assert first["retryReason"] == f"resubmitted by {first['killedBy']}"
    assert second["state"] == "DONE" and second["tag"] == f"{job}.1.2"
    # the grid job has ended: no more resubmissions
    late = rjim.run("resubmit", f"{job}.1")
    assert late.returncode != 0 and "can no longer be resubmitted" in late.stderr


def test_resubmit_failed_and_its_refusals(rjim, tmp_path):
    flag = tmp_path / "release"
    s = _script(
        tmp_path,
        f'[ "$JIM_INDEX" = 0 ] && [ "$JIM_ATTEMPT" = 1 ] && exit 5\nwhile [ ! -e {flag} ]; do sleep 0.1; done\n',
    )
    job = rjim.submit(f"&(executable={s})(count=2)")
    deadline = time.monotonic() + 30
    while rjim.status(job)["localJobs"][0]["state"] != "FAILED":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    bad = rjim.run("resubmit", job)
    assert bad.returncode != 0 and "give --failed" in bad.stderr
    assert rjim.run("resubmit", f"{job}.7").stderr.strip().endswith("(its local jobs are 0-1)")
    assert rjim.run("resubmit", job, "--failed").stdout.strip() == f"{job}.0 attempt 2 PLANNED"
    flag.touch()
    assert rjim.wait(job, timeout=60)["JOB_STATE"] == "DONE"


def test_jim_resubmit_usage(jim_env):
    proc = jim_env.run("resubmit", "--help")
    assert proc.returncode == 0 and "--failed" in proc.stdout
    bad = jim_env.run("resubmit", "20261125-000000-abcdef01.x")
    assert bad.returncode != 0 and "does not name local jobs" in bad.stderr


def test_a_long_cool_off_keeps_no_process_waiting_and_the_monitor_starts_a_worker_when_due(site, monkeypatch):
    started = []
    monkeypatch.setattr(background, "start_worker", lambda home, job_id: started.append(job_id))
    monkeypatch.setattr(retry, "WORKER_WAIT", 5.0)  # (the cool-off here is 10 s)
    job = site.grid_job(1)
    site.fake.set_state(f"{job}.0", LocalState.FAILED, cause=EndCause.NODE_FAIL)
    memo = Memo()
    t0 = time.time()
    site.refresh(now=t0, memo=memo)
    assert started == []  # not due for a while: no worker started
    found = summary.read(site.db.home.summary(job))
    assert found["UNSUBMITTED"] == "1" and found["RETRY_AT"] == str(int(t0 + 10))
    assert not summary.unsubmitted(found, t0 + 1) and summary.unsubmitted(found, t0 + 11)  # what poll asks
    submits = site.fake.count("submit")
    site.submit_due(job)  # a worker started anyway exits: nothing due within WORKER_WAIT
    assert site.fake.count("submit") == submits
    site.refresh(now=t0 + 6, memo=memo)
    assert started == []
    site.refresh(now=t0 + 11, memo=memo)
    assert started == [job]
