"""``jim accounting`` (jim.accounting): core-hours used, what counted, what was wasted by cause, CPU
efficiency, peak memory, events per CPU-second; unknown stays unknown.

In process on records whose attempts are made by hand (a node failure, a preemption, a lost job,
a retryable exit code, each followed by an attempt that counted), then through the real command on
the fork backend, and on the multi-node Slurm where a node is killed under a local job.
"""

from __future__ import annotations

import json
import time

import pytest

from jim import accounting
from jim.config import parse
from jim.db import Database
from jim.identity import Identity
from jim.jobdesc import parse_rsl
from jim.paths import Home
from jim.record import Source, Usage
from jim.site import Site
from jim.states import EndCause, Evidence, LocalState
from jim.submit import submit


@pytest.fixture
def db(tmp_path):
    config = parse({}, env={"JIM_HOME": str(tmp_path / "home")})
    database = Database(Home(config.home).ensure())

    def grid_job(n: int, events: bool = False) -> str:
        rsl = f"&(executable=/bin/true)(count={n})"
        if events:
            rsl = f"&(jimtype=montecarlo)(executable=/bin/true)(events={n * 100})(eventsperjob=100)"
        return submit(Site(config, db=database), parse_rsl(rsl), start_background=False)

    database.grid_job = grid_job
    return database


def _run(lj, batch_id: str, t0: float, wall: float, *, cpu: float | None, cores: int = 1, rss: int = 1000):
    lj.batch_id = batch_id
    lj.set_state(LocalState.SUBMITTING, at=t0)
    lj.set_state(LocalState.QUEUED, at=t0)
    lj.set_state(LocalState.RUNNING, at=t0 + 1)
    system = 0.0 if cpu is not None else None
    lj.set_usage(Usage(Source.SACCT, cpu_user=cpu, cpu_system=system, max_rss_kb=rss, wall=wall, cores=cores))


T0 = 1_795_000_000.0


def test_wasted_core_hours_by_cause_beside_what_counted(db):
    job = db.grid_job(5)
    with db.update(job) as rec:
        ljs = rec.local_jobs()
        causes = [EndCause.NODE_FAIL, EndCause.PREEMPTED, None, None, None]
        for k, lj in enumerate(ljs):
            _run(lj, f"100_{k}", T0, 3600.0, cpu=1800.0, cores=2)
            if k == 2:
                lj.set_state(LocalState.LOST, evidence=Evidence.ABSENT_AFTER_GRACE, at=T0 + 3601)
            elif k == 3:
                lj.set_state(LocalState.FAILED, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=3, at=T0 + 3601)
            elif k == 4:
                lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0, at=T0 + 3601)
                continue  # (counted at once)
            else:
                lj.set_state(LocalState.FAILED, evidence=Evidence.BATCH, at=T0 + 3601)
                lj.set("cause", causes[k].value)
            lj.new_attempt("again", at=T0 + 3602)
            _run(lj, f"200_{k}", T0 + 4000, 7200.0, cpu=7000.0, cores=1, rss=5000)
            lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0, at=T0 + 11300)
        rec.set_identity(Identity(subject="/CN=Jane", fqans=("/atlas/Role=production",), source="test"))
        rec.set("state", "DONE")
    (s,) = accounting.summarize([db.read(job)], "grid-job")
    assert s.key == job
    assert s.used.attempts == 9 and s.counted.attempts == 5 and s.used.unknown == 0
    assert s.counted.core_hours == pytest.approx(4 * 2.0 + 2.0)  # four 2 h attempts on 1 core, one 1 h on 2
    assert {c: b.core_hours for c, b in s.wasted.items()} == {
        "node_failure": pytest.approx(2.0),
        "preemption": pytest.approx(2.0),
        "lost": pytest.approx(2.0),
        "job_failure": pytest.approx(2.0),
    }
    assert s.used.core_hours == pytest.approx(18.0)
    assert s.used.efficiency == pytest.approx((5 * 1800 + 4 * 7000) / (5 * 7200 + 4 * 7200))
    assert s.used.max_rss_kb == 5000
    assert s.events is None and s.events_per_cpu_second is None  # (generic: no events)
    data = s.to_json()
    assert data["wasted"]["node_failure"]["coreHours"] == pytest.approx(2.0)
    text = accounting.render([s], "grid-job")
    assert "node failure" in text and "preemption" in text and "the job's own failure" in text
    (vo,) = accounting.summarize([db.read(job)], "vo")
    assert vo.key == "atlas"


def test_unknown_stays_unknown(db):
    job = db.grid_job(2)
    with db.update(job) as rec:
        a, b = rec.local_jobs()
        _run(a, "1_0", T0, 100.0, cpu=None)
        a.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0, at=T0 + 100)
        b.batch_id = "1_1"
        b.set_state(LocalState.SUBMITTING, at=T0)
        b.set_state(LocalState.QUEUED, at=T0)
        b.set_state(LocalState.DONE, evidence=Evidence.BATCH, exit_code=0, at=T0 + 100)  # measured by nobody
    (s,) = accounting.summarize([db.read(job)], "grid-job")
    assert s.used.attempts == 2 and s.used.unknown == 2
    assert s.used.core_hours == pytest.approx(100 / 3600)  # what was measured; the rest is unknown, not 0
    assert s.used.cpu is None and s.used.efficiency is None
    assert s.to_json()["used"]["cpuSeconds"] is None


def test_events_per_cpu_second_where_the_job_type_knows_events(db):
    job = db.grid_job(2, events=True)
    with db.update(job) as rec:
        ljs = rec.local_jobs()
        for k, lj in enumerate(ljs):
            _run(lj, f"5_{k}", T0, 200.0, cpu=100.0)
            lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0, at=T0 + 200)
        total = sum(int(lj.slice["events"]) for lj in ljs)
    (s,) = accounting.summarize([db.read(job)], "day")
    assert s.key == "2026-11-18"
    assert s.events == total == 200
    assert s.events_per_cpu_second == pytest.approx(total / (100.0 * len(ljs)))


def test_since_and_until_take_the_attempts_that_ended_then(db):
    job = db.grid_job(1)
    with db.update(job) as rec:
        (lj,) = rec.local_jobs()
        _run(lj, "9_0", T0, 10.0, cpu=5.0)
        lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0, at=T0 + 10)
    jobs = [db.read(job)]
    assert accounting.summarize(jobs, "user", since=T0 + 11) == []
    assert accounting.summarize(jobs, "user", until=T0 + 10) == []
    (s,) = accounting.summarize(jobs, "user", since=T0, until=T0 + 11)
    assert s.used.attempts == 1
    assert accounting.parse_time("2026-11-18", "--since") == pytest.approx(1_794_960_000.0)
    with pytest.raises(Exception, match="--since"):
        accounting.parse_time("yesterday", "--since")


# -- the real command on the fork backend --------------------------------------------------------


def test_jim_accounting_json_and_text_on_a_finished_job(jim_env):
    loop = "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"
    job = jim_env.submit(f"&(executable=/bin/sh)(arguments=-c '{loop}')(count=2)")
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    out = jim_env.run("accounting", "--json")
    assert out.returncode == 0, out.stderr
    (s,) = json.loads(out.stdout)
    assert s["key"] == job and s["gridJobs"] == 1
    assert s["used"]["attempts"] == 2 and s["counted"]["attempts"] == 2 and s["wasted"] == {}
    used = s["used"]
    if used["unknown"] == 0:  # measured by the wrapper: figures, never a 0 that stands for unknown
        assert used["coreHours"] > 0 and used["cpuSeconds"] is not None
        assert 0 <= used["cpuEfficiency"] <= 1.3 and used["maxRssKb"] > 0
    else:
        assert used["cpuEfficiency"] is None or used["unknown"] < 2
    text = jim_env.run("accounting", "--by", "day")
    assert text.returncode == 0 and "core-hours used" in text.stdout
    assert time.strftime("%Y-%m-%d", time.gmtime()) in text.stdout
    assert jim_env.run("accounting", "--since", "2999-01-01").stdout == "no attempt ended in the period\n"
    bad = jim_env.run("accounting", "--since", "soon")
    assert bad.returncode == 1 and "--since" in bad.stderr


# -- a node killed under a local job on the multi-node Slurm -------------------------------------


@pytest.mark.slurm_cluster
@pytest.mark.slow
def test_a_node_killed_under_a_local_job_is_wasted_as_node_failure(jim_env, slurm_cluster, tmp_path):
    import sys

    from support.jimcli import FAST_CONFIG

    jim_env.env["SLURM_CONF"] = str(slurm_cluster.conf)
    jim_env.config.write_text(
        FAST_CONFIG.replace("lost_grace = 5.0", "lost_grace = 120.0").replace(
            "max_attempts = 1", "max_attempts = 3\ncool_off = 2.0"
        )
        + f'\n[batch]\nadapter = "slurm"\npartition = "normal"\ncache_interval = 1.0\npython = "{sys.executable}"\n'
        "command_timeout = 20\n"
    )
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nsleep 20\n")
    script.chmod(0o755)
    job = jim_env.submit(f"&(executable={script})(count=2)")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        st = jim_env.status(job)
        running = [lj for lj in st["localJobs"] if lj["state"] == "RUNNING" and lj["node"]]
        if running:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"no local job running after 120 s: {st['counts']}")
    victim = running[0]["node"]
    time.sleep(3)  # (a few seconds on the node: core-hours to waste)
    slurm_cluster.kill_node(victim)
    assert jim_env.wait(job, timeout=240)["JOB_STATE"] == "DONE"

    def figures():
        (s,) = json.loads(jim_env.run("accounting", "--json").stdout)
        return s

    s = figures()
    node = s["wasted"].get("node_failure")
    assert node is not None and node["attempts"] >= 1, s
    # the attempt on the dead node: its core-hours under "node failure", measured by sacct (the
    # NODE_FAIL task's elapsed time and cores: the wrapper on the dead node wrote nothing)
    assert node["coreHours"] is not None and node["coreHours"] > 0 and node["unknown"] == 0, node
    assert s["counted"]["attempts"] == 2
