#!/usr/bin/env python3
"""A worker node dies under a grid job: how long until its local jobs run again, and what it costs.

    python bench/bench_node_failure.py [--jobs 12] [--cool-offs 2,30] [--steady 60]

Needs the multi-node test Slurm (tests/services/slurm-cluster; started here if it is not running,
as root).  For each cool-off: a grid job of ``--jobs`` local jobs (``sleep 600``) on partition
``normal``, no more than the nodes left after the crash can run at once (16 CPUs); once every
local job runs, the node running most of them is crashed (its slurmd and
its jobs' processes SIGKILLed).  Measured from the crash:

* Slurm's own delay: when slurmctld ends the node's jobs NODE_FAIL (SlurmdTimeout, 10 s here);
* jim's: when the monitor recorded the failed attempts (their ``ended`` time), when it submitted
  the next attempts (after the configured cool-off, ``[retry] cool_off``), when their wrappers
  started on the other nodes (their ``started`` files), and when jim's status showed them RUNNING
  (its next squeue: up to ``--cache-interval`` later; the monitor interval is 2 s, jim's default);
* the Slurm commands jim ran per minute (``--cache-interval``: how long one squeue answer is shared,
  30 s as at a site) (a PATH shim logs each), over ``--steady`` seconds before
  the crash and from the crash until every affected local job runs again.

jim runs from a wheel install, as at a site (see _site_install.py).  Results go to
bench/results/bench_node_failure.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _site_install import jim_command, site_python  # noqa: E402
from bench_slurm import make_shim  # noqa: E402

from jim.timestamps import parse_iso  # noqa: E402

from support.slurm_cluster import SlurmCluster  # noqa: E402


def status(jim, env, job):
    out = subprocess.run([*jim, "status", job, "--json"], env=env, capture_output=True, text=True, timeout=60, cwd="/")
    return json.loads(out.stdout) if out.returncode == 0 else None


def wait(what, check, timeout, every=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise SystemExit(f"timed out waiting for {what}")


def commands(log: Path, t0: float, t1: float) -> Counter:
    c: Counter = Counter()
    if log.exists():
        for line in log.read_text().splitlines():
            at, _, cmd = line.partition(" ")
            if t0 <= float(at) < t1:
                c[cmd.split()[0]] += 1
    return c


def one_run(cluster, jim, tmp: Path, py: str, n: int, cool_off: float, steady: float, cache: float) -> dict:
    home = tmp / f"home-{cool_off:g}"
    log = tmp / f"commands-{cool_off:g}.log"
    shim = make_shim(tmp / f"shim-{cool_off:g}", log)
    cfg = tmp / f"jim-{cool_off:g}.toml"
    cfg.write_text(f"""
[batch]
adapter = "slurm"
partition = "normal"
cache_interval = {cache}
python = "{py}"
[monitor]
interval = 2.0
lost_grace = 120.0
idle_exit = 600
[retry]
max_attempts = 3
cool_off = {cool_off}
""")
    env = {
        **cluster.env,
        "JIM_HOME": str(home),
        "JIM_CONFIG": str(cfg),
        "PATH": f"{shim}:{os.environ['PATH']}",
    }
    script = tmp / "job.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    script.chmod(0o755)
    out = subprocess.run(
        [*jim, "submit", "--rsl", f"&(executable={script})(count={n})"],
        env=env,
        capture_output=True,
        text=True,
        cwd="/",  # (python -c puts the cwd first on the import path: never this checkout's jim/)
    )
    answer = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    if "JOB_ID" not in answer:
        raise SystemExit(f"jim submit failed: {out.stdout} {out.stderr}")
    job = answer["JOB_ID"]

    def all_running():
        st = status(jim, env, job)
        ljs = st["localJobs"] if st else []
        return ljs if ljs and all(lj["state"] == "RUNNING" and lj["node"] for lj in ljs) else None

    ljs = wait("every local job running", all_running, 300)
    time.sleep(steady)  # the steady state: jim's commands while nothing changes
    by_node = Counter(lj["node"] for lj in ljs)
    victim = by_node.most_common(1)[0][0]
    affected = sorted(lj["index"] for lj in ljs if lj["node"] == victim)
    t_crash = time.time()
    cluster.kill_node(victim)

    slurm_failed: dict[str, float] = {}

    def rerun():
        st = status(jim, env, job)
        now = time.time()
        ids = [lj["attempts"][0]["batchId"] for lj in st["localJobs"] if lj["index"] in affected]
        if len(slurm_failed) < len(ids):
            q = cluster.run(["squeue", "-h", "-t", "all", "-j", ",".join(i.split("_")[0] for i in ids), "-o", "%i|%T"])
            for line in q.stdout.splitlines():
                bid, _, state = line.partition("|")
                if bid in ids and state == "NODE_FAIL":
                    slurm_failed.setdefault(bid, now)
        again = [lj for lj in st["localJobs"] if lj["index"] in affected and lj["attempt"] >= 2]
        return st if len(again) == len(affected) and all(lj["state"] == "RUNNING" for lj in again) else None

    st = wait("jim shows every affected local job running again", rerun, 600, every=0.25)
    t_all = time.time()
    mine = [lj for lj in st["localJobs"] if lj["index"] in affected]
    recorded = [parse_iso(lj["attempts"][0]["ended"]) or t_all for lj in mine]
    submitted = [parse_iso(lj["attempts"][1]["submitted"]) or t_all for lj in mine]
    # when the next attempts' wrappers really started on their nodes (their own "started" files)
    local = home / "jobs" / job / "local"
    started = [float(json.loads((local / f"{k}.2" / "started").read_text())["time"]) for k in affected]
    subprocess.run([*jim, "cancel", "--job-id", job], env=env, capture_output=True, timeout=120, cwd="/")
    cluster.revive_node(victim)
    steady_cmds = commands(log, t_crash - steady, t_crash)
    failure_cmds = commands(log, t_crash, t_all)
    span = max(t_all - t_crash, 1e-9)
    return {
        "local_jobs": n,
        "cache_interval_s": cache,
        "cool_off_s": cool_off,
        "victim": victim,
        "affected": len(affected),
        "slurm_node_fail_after_s": round(min(slurm_failed.values()) - t_crash, 1) if slurm_failed else None,
        "jim_recorded_after_s": round(max(recorded) - t_crash, 1),
        "resubmitted_after_s": round(max(submitted) - t_crash, 1),
        "running_again_after_s": round(max(started) - t_crash, 1),
        "jim_shows_running_after_s": round(t_all - t_crash, 1),
        "commands_per_min_steady": round(sum(steady_cmds.values()) * 60 / steady, 1),
        "commands_steady": dict(steady_cmds),
        "commands_per_min_failure": round(sum(failure_cmds.values()) * 60 / span, 1),
        "commands_failure": dict(failure_cmds),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=12, help="at most what two of the three nodes can run at once")
    ap.add_argument("--cool-offs", default="2,30")
    ap.add_argument("--steady", type=float, default=60.0)
    ap.add_argument("--cache-interval", type=float, default=30.0, help="[batch] cache_interval (a site's: 30 s)")
    args = ap.parse_args()
    cluster = SlurmCluster()
    if not cluster.is_up():
        cluster.start()
    tmp = Path(tempfile.mkdtemp(prefix="jim-bench-nodefail-", dir="/var/tmp"))
    py = site_python(tmp)
    jim = jim_command(tmp)
    cool_offs = [float(c) for c in args.cool_offs.split(",")]
    runs = [one_run(cluster, jim, tmp, py, args.jobs, c, args.steady, args.cache_interval) for c in cool_offs]
    print(
        f"{'cool-off':>8} {'affected':>8} {'Slurm NODE_FAIL':>15} {'jim recorded':>12} {'resubmitted':>11} "
        f"{'running again':>13} {'jim shows it':>12} {'cmds/min steady':>15} {'cmds/min failure':>16}"
    )
    for r in runs:
        print(
            f"{r['cool_off_s']:>7g}s {r['affected']:>8} {r['slurm_node_fail_after_s'] or '-':>14}s "
            f"{r['jim_recorded_after_s']:>11}s {r['resubmitted_after_s']:>10}s {r['running_again_after_s']:>12}s "
            f"{r['jim_shows_running_after_s']:>11}s {r['commands_per_min_steady']:>15} "
            f"{r['commands_per_min_failure']:>16}"
        )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "bench_node_failure.json").write_text(json.dumps({"runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
