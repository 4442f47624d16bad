"""One monitoring pass (:func:`jim.monitor.refresh`), in process, against an in-memory batch system.

The rules of evidence per local job are tested in test_monitor.py; here, what
the pass does for all of them: one query for every grid job, accounting asked
in bulk, no news from a failed query, the grid state and its SEG events, the
outputs gathered at the end, skipped work for unchanged grid jobs, holds
cancelled, the worker restarted.
"""

from __future__ import annotations

import os
import time

import pytest

from jim import background, summary, worker
from jim.config import parse
from jim.db import Database
from jim.jobdesc import parse_rsl
from jim.memo import Memo
from jim.monitor import refresh
from jim.paths import Home
from jim.site import Site
from jim.states import GramState, LocalState
from jim.submit import submit

from support.fake_adapter import FakeAdapter, SameAnswerAdapter, ended


class _Shared(SameAnswerAdapter):
    """Answers through the status cache, asked again every pass, as a command adapter's: a new answer
    shares each unchanged job's status object with the last one (what lets a pass skip that job)."""

    user_wide_query = True


@pytest.fixture(params=["fresh statuses", "shared statuses"])
def site(request, tmp_path, monkeypatch):
    """A config, a database, a fake batch system (its every answer new, or through the status cache with
    unchanged statuses shared); every background process start is recorded, not made."""
    config = parse(
        {"monitor": {"interval": 0.01, "lost_grace": 60.0, "held_timeout": 600.0}, "retry": {"max_attempts": 1}},
        env={"JIM_HOME": str(tmp_path / "home")},
    )
    home = Home(config.home)
    started: list[tuple[str, ...]] = []
    monkeypatch.setattr(background, "start_monitor", lambda home: started.append(("monitor",)))
    monkeypatch.setattr(background, "start_worker", lambda home, job_id: started.append(("worker", job_id)))

    class Bench:
        pass

    s = Bench()
    s.config, s.db, s.fake, s.started, s.seg = (
        config,
        Database(home.ensure()),
        FakeAdapter(home) if request.param == "fresh statuses" else _Shared(home, cache_interval=1e-6),
        started,
        tmp_path / "seg",
    )
    s.seg.mkdir()

    def grid_job(n=3, submitted=True):
        job_id = submit(
            Site(config),
            parse_rsl(f"&(executable=/bin/true)(count={n})"),
            start_background=False,
            env={"JIM_SEG_DIR": str(s.seg)},
        )
        if submitted:
            worker.submit_pending(Site(config, db=s.db, adapter=s.fake), job_id)
        return job_id

    s.grid_job = grid_job
    s.refresh = lambda **kw: refresh(Site(config, db=s.db, adapter=s.fake), **kw)
    return s


def states(db, job_id):
    return [lj.state for lj in db.read(job_id).local_jobs()]


def seg_states(site, job_id):
    return [
        int(line.split(";")[3])
        for f in sorted(site.seg.iterdir())
        for line in f.read_text().splitlines()
        if line.split(";")[2] == job_id
    ]


def test_one_query_for_every_grid_job_and_the_grid_state_follows(site):
    a, b = site.grid_job(3), site.grid_job(2)
    site.fake.set_state(f"{a}.1", LocalState.RUNNING)
    assert site.refresh() == 2
    queries = [c for k, c in site.fake.calls if k == "query"]
    assert len(queries) == 1 and len(queries[0]) == 5
    assert states(site.db, a) == [LocalState.QUEUED, LocalState.RUNNING, LocalState.QUEUED]
    assert site.db.read(a).state is GramState.ACTIVE and site.db.read(b).state is GramState.PENDING
    assert seg_states(site, a) == [int(GramState.ACTIVE)] and seg_states(site, b) == []
    assert summary.read(site.db.home.summary(a))["JOB_STATE"] == "ACTIVE"


def test_a_grid_job_that_ended_has_its_outputs_gathered_and_stops_being_active(site):
    job = site.grid_job(2)
    for k in range(2):
        site.fake.set_state(f"{job}.{k}", LocalState.DONE, exit_code=0)
    assert site.refresh() == 0
    final = site.db.read(job)
    assert final.state is GramState.DONE and final.exit_code == 0 and final.outputs_gathered
    assert {lj.evidence for lj in final.local_jobs()} == {"batch"}
    # every local job ended: ACTIVE while the outputs are gathered, then DONE (see jim.states)
    assert seg_states(site, job) == [int(GramState.ACTIVE), int(GramState.DONE)]
    assert site.db.active_ids() == []


def test_a_failed_query_is_no_news_and_degrades_the_adapter(site):
    job = site.grid_job(2)
    site.fake.set_state(f"{job}.0", LocalState.DONE, exit_code=0)
    site.fake.faults.query_down = True
    before = site.db.read(job).tostring()
    assert site.refresh() == 1
    assert site.db.read(job).tostring() == before
    assert site.fake.cache.degraded()["reason"] == "the batch system does not answer"
    site.fake.faults.query_down = False
    site.refresh()
    assert site.fake.cache.degraded() is None
    assert states(site.db, job)[0] is LocalState.DONE


def test_jobs_gone_from_the_queue_are_looked_up_in_the_accounting_in_one_call(site):
    job = site.grid_job(3)
    site.fake.vanish(f"{job}.0", ended(LocalState.FAILED, 7, f"{job}.0"))
    site.fake.vanish(f"{job}.2", ended(LocalState.DONE, 0, f"{job}.2"))
    site.refresh()
    assert [c for k, c in site.fake.calls if k == "accounting"] == [["100", "102"]]
    lj = site.db.read(job).local_jobs()
    assert (lj[0].state, lj[0].exit_code, lj[0].evidence) == (LocalState.FAILED, 7, "accounting")
    assert (lj[2].state, lj[2].exit_code, lj[2].evidence) == (LocalState.DONE, 0, "accounting")
    assert lj[1].state is LocalState.QUEUED


def test_a_job_gone_without_evidence_is_lost_only_after_the_grace_period(site):
    job = site.grid_job(1)
    site.fake.vanish(f"{job}.0")
    memo = Memo()
    t0 = site.db.read(job).local(0).entered(LocalState.QUEUED) + 1
    site.refresh(now=t0, memo=memo)
    assert states(site.db, job) == [LocalState.QUEUED]
    site.refresh(now=t0 + 59, memo=memo)
    assert states(site.db, job) == [LocalState.QUEUED]
    # (a job absent without evidence is looked at every lost_grace / 4 seconds, not every pass)
    site.refresh(now=t0 + 60 + 15, memo=memo)
    lj = site.db.read(job).local(0)
    assert (lj.state, lj.evidence) == (LocalState.LOST, "absent-after-grace")


def test_the_wrapper_exit_file_beats_the_batch_system(site):
    job = site.grid_job(1)
    local = site.db.home.local_dir(job, 0)
    local.mkdir(parents=True)
    (local / "exit_code").write_text("3\nerror=segfault in d0gstar\n")
    site.fake.set_state(f"{job}.0", LocalState.DONE, exit_code=0)
    site.refresh()
    lj = site.db.read(job).local(0)
    assert (lj.state, lj.exit_code, lj.evidence, lj.get("reason")) == (
        LocalState.FAILED,
        3,
        "wrapper-exit-file",
        "segfault in d0gstar",
    )


def test_progress_reported_by_the_wrapper_reaches_the_record(site):
    job = site.grid_job(1)
    local = site.db.home.local_dir(job, 0)
    local.mkdir(parents=True)
    (local / "progress").write_text("d0gstar 10 250\nd0gstar 117 250\n")
    site.fake.set_state(f"{job}.0", LocalState.RUNNING)
    site.refresh()
    assert site.db.read(job).local(0).progress == [("d0gstar", 117, 250)]


def test_an_unchanged_grid_job_costs_no_parse_and_no_write(site, monkeypatch):
    job = site.grid_job(2)
    memo = Memo()
    site.refresh(memo=memo)
    mtime = site.db.home.record(job).stat().st_mtime_ns
    reads = []
    real_read = site.db.read
    monkeypatch.setattr(site.db, "read", lambda job_id: reads.append(job_id) or real_read(job_id))
    assert site.refresh(memo=memo) == 1
    assert reads == [] and site.db.home.record(job).stat().st_mtime_ns == mtime
    site.fake.set_state(f"{job}.1", LocalState.RUNNING)  # news: the job is looked at again
    site.refresh(memo=memo)
    assert states(site.db, job)[1] is LocalState.RUNNING


def test_a_local_job_held_too_long_is_cancelled_with_the_reason(site):
    job = site.grid_job(2)
    site.fake.set_state(f"{job}.0", LocalState.HELD)
    site.refresh()
    held_at = site.db.read(job).local(0).entered(LocalState.HELD)
    site.refresh(now=held_at + 601)
    lj = site.db.read(job).local(0)
    assert lj.state is LocalState.CANCELLED and lj.evidence == "cancel"
    assert lj.get("reason").startswith("held for more than 600 s")
    assert ("cancel", ["100"]) in site.fake.calls


def test_the_worker_is_restarted_for_unsubmitted_local_jobs(site):
    job = site.grid_job(2, submitted=False)
    assert site.refresh() == 1
    assert ("worker", job) in site.started
    with site.db.update(job) as rec:
        rec.set("cancelRequested", "true")
    site.started.clear()
    site.refresh()
    assert ("worker", job) not in site.started  # a cancelled grid job gets no worker


def test_a_long_lived_monitor_lists_the_wrappers_directories_only_when_local_changed(site, monkeypatch):
    from jim import localfiles

    job = site.grid_job(2)
    site.fake.set_state(f"{job}.0", LocalState.RUNNING)
    local = site.db.home.local_dir(job, 0)
    local.mkdir(parents=True)
    past = time.time() - 100
    os.utime(local.parent, (past, past))  # (a directory just changed is listed again until it is 2 s old)
    memo = Memo()
    site.refresh(memo=memo)
    scans = []
    real = localfiles.started_dirs
    monkeypatch.setattr(localfiles, "started_dirs", lambda root: scans.append(root) or real(root))
    (local / "progress").write_text("d0gstar 117 250\n")  # the job wrote; the wrapper has not said so yet
    site.refresh(memo=memo)
    site.refresh(memo=memo)
    assert scans == [] and site.db.read(job).local(0).progress == []
    os.utime(local.parent)  # what the wrapper does once it sees the progress file change
    site.refresh(memo=memo)
    assert len(scans) == 1 and site.db.read(job).local(0).progress == [("d0gstar", 117, 250)]


def test_a_directory_changed_just_before_it_was_listed_is_listed_again_until_it_settles(site, monkeypatch):
    from jim import localfiles

    job = site.grid_job(1)
    site.fake.set_state(f"{job}.0", LocalState.RUNNING)
    local = site.db.home.local_dir(job, 0)
    local.mkdir(parents=True)  # local/ changed now: a touch within the same clock tick would not show
    memo = Memo()
    site.refresh(memo=memo)
    scans = []
    real = localfiles.started_dirs
    monkeypatch.setattr(localfiles, "started_dirs", lambda root: scans.append(root) or real(root))
    mtime = local.parent.stat().st_mtime_ns
    (local / "progress").write_text("d0gstar 9 250\n")
    os.utime(local.parent, ns=(mtime, mtime))  # the wrapper's touch, in the same tick as the listing
    site.refresh(memo=memo)
    assert scans and site.db.read(job).local(0).progress == [("d0gstar", 9, 250)]


def test_news_the_wrapper_did_not_announce_is_still_seen_once_in_a_long_while(site):
    from jim.memo import FULL_LOOK

    job = site.grid_job(1)
    site.fake.set_state(f"{job}.0", LocalState.RUNNING)
    local = site.db.home.local_dir(job, 0)
    local.mkdir(parents=True)
    memo, t0 = Memo(), time.time()
    past = int((t0 - 100) * 1e9)
    os.utime(local.parent, ns=(past, past))
    site.refresh(memo=memo, now=t0)
    (local / "progress").write_text("d0gstar 5 250\n")
    os.utime(local.parent, ns=(past, past))  # a change the local/ directory's mtime does not show
    site.refresh(memo=memo, now=t0 + 1)
    assert site.db.read(job).local(0).progress == []
    site.refresh(memo=memo, now=t0 + FULL_LOOK + 1)
    assert site.db.read(job).local(0).progress == [("d0gstar", 5, 250)]


def test_a_hold_that_lasts_too_long_is_cancelled_by_a_long_lived_monitor_with_no_other_news(site):
    job = site.grid_job(2)
    site.fake.set_state(f"{job}.0", LocalState.HELD)
    memo = Memo()
    site.refresh(memo=memo)
    held_at = site.db.read(job).local(0).entered(LocalState.HELD)
    site.refresh(memo=memo, now=held_at + 300)
    assert site.db.read(job).local(0).state is LocalState.HELD
    site.refresh(memo=memo, now=held_at + 601)
    assert site.db.read(job).local(0).state is LocalState.CANCELLED


def test_after_a_pass_that_applied_news_the_next_pass_with_no_news_reads_nothing(site, monkeypatch):
    job = site.grid_job(3)
    memo = Memo()
    site.refresh(memo=memo)
    site.fake.set_state(f"{job}.1", LocalState.DONE, exit_code=0)
    site.refresh(memo=memo)
    assert states(site.db, job)[1] is LocalState.DONE
    reads = []
    real_read = site.db.read
    monkeypatch.setattr(site.db, "read", lambda job_id: reads.append(job_id) or real_read(job_id))
    site.refresh(memo=memo)
    assert reads == []


class _UserWide(FakeAdapter):
    user_wide_query = True


def test_a_cached_answer_is_parsed_once_and_unchanged_statuses_are_shared_with_the_next(tmp_path):
    home = Home(tmp_path / "home").ensure()
    fake = _UserWide(home, cache_interval=3600)
    a, b = fake.add("t.0", LocalState.QUEUED), fake.add("t.1", LocalState.QUEUED)
    first = fake.query_cached([a, b])
    assert fake.query_cached([a, b]) is first  # the cache file did not change: the same answer, no parse
    fake.set_state("t.1", LocalState.RUNNING)
    second = fake.query_cached([a, b], now=first.at + 7200)
    assert second is not first
    assert second.statuses[a] is first.statuses[a]  # unchanged: the very same object
    assert second.statuses[b] is not first.statuses[b] and second.statuses[b].state is LocalState.RUNNING
    # what the monitor reads: the answer's generation, and the generation in which each job last changed
    assert second.generation == first.generation + 1
    assert second.changed[a] == first.changed[a] < second.generation == second.changed[b]
    other = _UserWide(home, cache_interval=3600)  # another process reads what this one cached
    assert other.query_cached([a, b]).statuses == second.statuses


def test_an_answer_that_says_the_same_keeps_its_generation_whatever_its_objects(tmp_path):
    """The generation is the contract: two answers with equal statuses have the same one, even when the
    adapter built every status anew; a job that went or came changes it."""
    fake = FakeAdapter(Home(tmp_path / "home").ensure())  # (builds new status objects on every query)
    a, b = fake.add("t.0", LocalState.QUEUED), fake.add("t.1", LocalState.RUNNING)
    first = fake.query_cached([a, b])
    again = fake.query_cached([a, b])
    assert again.statuses is not first.statuses and again.generation == first.generation
    assert again.changed == first.changed
    fake.vanish("t.1")
    gone = fake.query_cached([a, b])
    assert gone.generation > first.generation and b not in gone.changed and gone.changed[a] == first.changed[a]
    c = fake.add("t.2", LocalState.QUEUED)
    came = fake.query_cached([a, c])
    assert came.generation > gone.generation and came.changed[c] == came.generation
    fake.faults.query_down = True
    assert fake.query_cached([a, c]).generation == -1  # a failed query: no generation, equal to none


def _age(*dirs):
    past = time.time() - 100
    for d in dirs:
        os.utime(d, (past, past))


def test_a_pass_after_one_that_changed_nothing_skips_every_grid_job_until_something_moves(site, monkeypatch):
    from jim import monitor

    site.fake = SameAnswerAdapter(site.db.home)
    job = site.grid_job(2)
    site.fake.set_state(f"{job}.0", LocalState.RUNNING)
    home = site.db.home
    memo = Memo()
    site.refresh(memo=memo)
    collects = []
    real = monitor.Pass.collect
    monkeypatch.setattr(monitor.Pass, "collect", lambda *a: collects.append(1) or real(*a))
    _age(home.db, home.jobs)
    assert site.refresh(memo=memo) == 1 and len(collects) == 1  # nothing changed: remembered as quiet
    assert site.refresh(memo=memo) == 1 and len(collects) == 1  # ... so this one looks at nothing
    os.utime(home.jobs)  # a wrapper wrote something: a pass looks again
    site.refresh(memo=memo)
    assert len(collects) == 2
    _age(home.db, home.jobs)
    site.refresh(memo=memo)
    site.refresh(memo=memo)
    assert len(collects) == 3
    site.fake.set_state(f"{job}.1", LocalState.RUNNING)  # the batch system's news
    site.refresh(memo=memo)
    assert len(collects) == 4 and states(site.db, job) == [LocalState.RUNNING, LocalState.RUNNING]


def test_a_quiet_monitor_still_applies_a_rule_of_time_when_it_is_due(site):
    site.fake = SameAnswerAdapter(site.db.home)
    job = site.grid_job(1)
    site.fake.set_state(f"{job}.0", LocalState.HELD)
    home = site.db.home
    memo = Memo()
    site.refresh(memo=memo)
    held_at = site.db.read(job).local(0).entered(LocalState.HELD)
    _age(home.db, home.jobs)
    site.refresh(memo=memo, now=held_at + 10)
    site.refresh(memo=memo, now=held_at + 20)
    assert memo.quiet is not None and memo.quiet.until <= held_at + 600
    site.refresh(memo=memo, now=held_at + 601)
    assert site.db.read(job).local(0).state is LocalState.CANCELLED


def test_a_pass_applies_only_the_local_jobs_whose_status_or_directory_changed(site, monkeypatch):
    from jim import monitor

    site.fake = _Shared(site.db.home, cache_interval=1e-6)
    job = site.grid_job(10)
    for k in range(10):
        site.fake.set_state(f"{job}.{k}", LocalState.RUNNING)
    local = site.db.home.local_dir(job, 4)
    local.mkdir(parents=True)
    _age(local, local.parent)
    memo = Memo()
    site.refresh(memo=memo)  # (the first pass applies every local job)
    applied: list[int] = []
    real = monitor.apply_local
    monkeypatch.setattr(monitor, "apply_local", lambda lj, *a, **kw: applied.append(lj.index) or real(lj, *a, **kw))
    site.fake.set_state(f"{job}.7", LocalState.DONE, exit_code=0)
    site.refresh(memo=memo)
    assert applied == [7]
    assert states(site.db, job) == [LocalState.RUNNING] * 7 + [LocalState.DONE] + [LocalState.RUNNING] * 2
    applied.clear()
    (local / "progress").write_text("d0gstar 117 250\n")
    os.utime(local.parent)  # (the wrapper's touch)
    site.refresh(memo=memo)
    assert applied == [4] and site.db.read(job).local(4).progress == [("d0gstar", 117, 250)]


def test_a_local_job_gone_from_the_queue_is_applied_on_every_tick_while_the_others_are_not(site, monkeypatch):
    from jim import monitor

    site.fake = _Shared(site.db.home, cache_interval=1e-6)
    job = site.grid_job(3)
    memo = Memo()
    t0 = site.db.read(job).local(0).entered(LocalState.QUEUED) + 1
    site.refresh(now=t0, memo=memo)
    applied: list[int] = []
    real = monitor.apply_local
    monkeypatch.setattr(monitor, "apply_local", lambda lj, *a, **kw: applied.append(lj.index) or real(lj, *a, **kw))
    site.fake.vanish(f"{job}.1")
    site.refresh(now=t0 + 1, memo=memo)
    site.refresh(now=t0 + 60 + 16, memo=memo)
    assert set(applied) == {1}
    assert states(site.db, job) == [LocalState.QUEUED, LocalState.LOST, LocalState.QUEUED]


def test_the_periodic_look_applies_every_local_job_again(site, monkeypatch):
    from jim import monitor
    from jim.memo import FULL_LOOK

    site.fake = _Shared(site.db.home, cache_interval=1e-6)
    site.grid_job(3)
    memo, t0 = Memo(), time.time()
    site.refresh(now=t0, memo=memo)
    applied: list[int] = []
    real = monitor.apply_local
    monkeypatch.setattr(monitor, "apply_local", lambda lj, *a, **kw: applied.append(lj.index) or real(lj, *a, **kw))
    site.refresh(now=t0 + 1, memo=memo)
    assert applied == []
    site.refresh(now=t0 + FULL_LOOK + 1, memo=memo)
    assert applied == [0, 1, 2]


def test_the_periodic_looks_of_many_grid_jobs_end_a_quiet_run_once_per_slot(site, monkeypatch):
    from jim import monitor
    from jim.memo import FULL_LOOK, LOOK_SLOTS

    site.fake = SameAnswerAdapter(site.db.home)
    jobs = [site.grid_job(1) for _ in range(90)]
    home = site.db.home
    memo, t0 = Memo(), time.time()
    site.refresh(memo=memo, now=t0)
    _age(home.db, home.jobs)
    collects = []
    real = monitor.Pass.collect
    monkeypatch.setattr(monitor.Pass, "collect", lambda *a: collects.append(1) or real(*a))
    slot = FULL_LOOK / LOOK_SLOTS
    for i in range(int(4 * slot / 2)):  # a pass every 2 s for four slots
        assert site.refresh(memo=memo, now=t0 + 2 * i) == len(jobs)
    assert len(collects) <= 4 + 2  # (90 grid jobs looked at one by one would end it 12 times)


def test_a_record_written_by_another_process_during_the_pass_has_every_local_job_applied(site, monkeypatch):
    from jim import monitor
    from jim.states import Evidence

    site.fake = _Shared(site.db.home, cache_interval=1e-6)
    job = site.grid_job(3)
    for k in range(3):
        site.fake.set_state(f"{job}.{k}", LocalState.RUNNING)
    memo = Memo()
    site.refresh(memo=memo)
    real = monitor.Pass.collect

    def collect_then_resubmit(*a):
        versions = real(*a)
        # meanwhile another process gives local job 2 another attempt, and the worker submits it
        with site.db.update(job) as rec:
            lj = rec.local(2)
            lj.set_state(LocalState.FAILED, evidence=Evidence.BATCH, reason="by hand")
            lj.new_attempt("resubmitted by hand")
            tag = lj.tag
        worker.submit_pending(Site(site.config, db=site.db, adapter=site.fake), job)
        site.fake.set_state(tag, LocalState.RUNNING)
        return versions

    monkeypatch.setattr(monitor.Pass, "collect", collect_then_resubmit)
    site.fake.set_state(f"{job}.1", LocalState.DONE, exit_code=0)  # (news of its own this pass)
    site.refresh(memo=memo)
    monkeypatch.setattr(monitor.Pass, "collect", real)
    site.refresh(memo=memo)
    lj = site.db.read(job).local(2)
    assert (lj.attempt, lj.state) == (2, LocalState.RUNNING)


def test_a_pass_that_applied_news_without_writing_still_ends_its_quiet_run_when_a_hold_is_due(site):
    site.fake = SameAnswerAdapter(site.db.home)
    job = site.grid_job(1)
    bid = site.fake.set_state(f"{job}.0", LocalState.HELD)
    home = site.db.home
    memo = Memo()
    site.refresh(memo=memo)
    held_at = site.db.read(job).local(0).entered(LocalState.HELD)
    _age(home.db, home.jobs)
    site.fake.jobs[bid].exit_code = 5  # a new answer that changes nothing in the record
    site.refresh(memo=memo, now=held_at + 10)
    assert memo.quiet is not None and memo.quiet.until <= held_at + 600
    site.refresh(memo=memo, now=held_at + 601)
    assert site.db.read(job).local(0).state is LocalState.CANCELLED
