#!/usr/bin/env python3
"""Utilisation of the multi-node test Slurm: the same Monte Carlo work as 1-core and as 8-core local jobs.

    python bench/bench_shape_slurm.py [--core-hours 2] [--scale 0.2] [--job-cpu 150]

Needs the multi-node test cluster (tests/services/slurm-cluster/start.sh, as root): 3 nodes of 8
declared CPUs, 24 in all.

The same grid job runs twice through jim, one run after the other in one invocation: a Monte
Carlo job (``jimtype=montecarlo``) of ``--core-hours`` core-hours (events of 1 CPU second each,
``cpuperevent=1``), planned by jim against ``[resources]`` (``CoresPerNode = 8``) and the site's
recommended ``--job-cpu`` seconds per local job,

* as **1-core** local jobs (no ``cores``), and
* as **8-core** local jobs (``cores=8``: the splitter sizes each by its wall time, so 8x the events).

The VM has 2 real cores, so the payload does not compute: it sleeps its wall time, events x CPU per
event / cores, times ``--scale`` (printed; 0.2 makes the 2 core-hours 24 minutes of declared CPUs, a
60 s ideal makespan).  From sacct's records of each run (Submit, Start, End, AllocCPUS):

* **makespan**: the first submission to the last end;
* **idle core-seconds while work was pending**: from the first submission to the last start (some
  local job still waiting), the declared CPUs no local job of the run held, second by second;
* **utilisation**: the core-seconds allocated over (CPUs x makespan).

Results: ``bench/results/bench_shape_slurm.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _site_install import site_python  # noqa: E402

STATE = Path(os.environ.get("JIM_TEST_SLURM_CLUSTER_STATE", "/var/tmp/jim-test-slurm-cluster"))
FIELDS = ["JobName", "State", "Submit", "Start", "End", "AllocCPUS", "NodeList"]


def epoch(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S").timestamp()


def records(env: dict[str, str], job_id: str, n: int, timeout: float = 120.0) -> list[dict[str, str]]:
    """sacct's final allocation records of the grid job's ``n`` local jobs."""
    deadline = time.monotonic() + timeout
    rows: list[dict[str, str]] = []
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-S", "now-3hours", "-o", ",".join(FIELDS)],
            env=env,
            capture_output=True,
            text=True,
        ).stdout
        rows = [dict(zip(FIELDS, line.split("|"))) for line in out.splitlines() if line.count("|") == len(FIELDS) - 1]
        rows = [r for r in rows if r["JobName"].startswith(f"jim.{job_id}.")]
        if len(rows) == n and all(r["End"] not in ("", "Unknown") for r in rows):
            return rows
        time.sleep(1)
    raise SystemExit(f"sacct has {len(rows)} of {n} final records of {job_id}")


def measure(rows: list[dict[str, str]], cpus: int) -> dict[str, float]:
    """Makespan, idle core-seconds while work was pending, utilisation (see the module docstring)."""
    spans = [(epoch(r["Start"]), epoch(r["End"]), int(r["AllocCPUS"])) for r in rows]
    first = min(epoch(r["Submit"]) for r in rows)
    last_start = max(s for s, _e, _c in spans)
    last_end = max(e for _s, e, _c in spans)
    idle = 0
    t = first
    while t < last_start:
        held = sum(c for s, e, c in spans if s <= t < e)
        idle += max(0, cpus - held)
        t += 1
    makespan = last_end - first
    used = sum((e - s) * c for s, e, c in spans)
    return {
        "makespan s": round(makespan, 1),
        "idle core-s while pending": idle,
        "pending span s": round(last_start - first, 1),
        "core-s allocated": used,
        "utilisation": round(used / (cpus * makespan), 3) if makespan else 0.0,
    }


def run_one(py: str, env: dict[str, str], rsl: str, timeout: float) -> tuple[str, int, str]:
    """Submit ``rsl`` through jim and wait until it ends; (grid id, local jobs, final state)."""
    p = subprocess.run([py, "-m", "jim", "submit", "--rsl", rsl], env=env, capture_output=True, text=True, cwd="/")
    if "JOB_ID=" not in p.stdout:
        raise SystemExit(f"jim submit failed: {p.stdout} {p.stderr}")
    job_id = p.stdout.split("JOB_ID=")[1].split()[0]
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        out = subprocess.run(
            [py, "-m", "jim", "poll", "--job-id", job_id], env=env, capture_output=True, text=True, cwd="/"
        )
        state = out.stdout.split("JOB_STATE=")[1].split()[0] if "JOB_STATE=" in out.stdout else ""
        if state in ("DONE", "FAILED"):
            break
        time.sleep(2)
    status = [py, "-m", "jim", "status", job_id, "--json"]
    st = json.loads(subprocess.run(status, env=env, capture_output=True, cwd="/").stdout)
    return job_id, len(st["localJobs"]), state


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core-hours", type=float, default=2.0)
    ap.add_argument("--scale", type=float, default=0.2, help="real seconds per declared CPU second")
    ap.add_argument("--job-cpu", type=int, default=150, help="the site's recommended CPU seconds per local job")
    args = ap.parse_args()
    if not (STATE / "run" / "slurmctld.pid").exists():
        sys.exit("the multi-node test cluster is not running: tests/services/slurm-cluster/start.sh")
    env = {**os.environ, "SLURM_CONF": str(STATE / "slurm.conf")}
    cpus = sum(
        int(n)
        for n in subprocess.run(
            ["sinfo", "-h", "-N", "-p", "normal", "-o", "%c"], env=env, capture_output=True, text=True
        ).stdout.split()
    )
    tmp = Path(tempfile.mkdtemp(prefix="jim-bench-shape-"))
    py = site_python(tmp)
    events = int(args.core_hours * 3600)  # 1 CPU second each
    payload = tmp / "mc.sh"
    payload.write_text(
        "#!/bin/sh\n# wall = events x 1 s / cores, scaled\n"
        f'sleep "$(awk -v e="$JIM_EVENTS" -v c="${{JIM_CORES:-1}}" \'BEGIN {{ print e * {args.scale} / c }}\')"\n'
    )
    payload.chmod(0o755)
    results: dict = {
        "machine": os.uname().nodename,
        "cpus declared": cpus,
        "work core-hours": args.core_hours,
        "events (1 CPU s each)": events,
        "scale (real s per declared CPU s)": args.scale,
        "recommended CPU s per local job": args.job_cpu,
        "ideal makespan s": round(events * args.scale / cpus, 1),
    }
    print(
        f"scaled by {args.scale}: {args.core_hours} core-hours = {events * args.scale:.0f} CPU-s of sleep", flush=True
    )
    for name, cores in (("1-core local jobs", ""), ("8-core local jobs", "(cores=8)")):
        home = tmp / name.split()[0]
        cfg = tmp / f"{name.split()[0]}.toml"
        cfg.write_text(f"""
[site]
recommended_cpu_per_job = {args.job_cpu}
max_cpu_per_job = {args.job_cpu * 8}
max_local_jobs = 5000
[batch]
adapter = "slurm"
partition = "normal"
cache_interval = 2.0
python = "{py}"
[monitor]
interval = 1.0
idle_exit = 30
[resources.ce.batch.queue.normal]
WallTimeLimit = 86400
CoresPerNode = 8
NumberOfProcessors = {cpus}
""")
        jenv = {**env, "JIM_HOME": str(home), "JIM_CONFIG": str(cfg)}
        rsl = f"&(executable={payload})(jimtype=montecarlo)(events={events})(cpuperevent=1){cores}"
        t0 = time.monotonic()
        job_id, n, state = run_one(py, jenv, rsl, timeout=events * args.scale * 4 + 300)
        row = {"local jobs": n, "grid state": state, "jim wall s": round(time.monotonic() - t0, 1)}
        row.update(measure(records(env, job_id, n), cpus))
        results[name] = row
        print(f"{name}: {row}", flush=True)
    one, eight = results["1-core local jobs"], results["8-core local jobs"]
    results["8-core / 1-core makespan"] = round(eight["makespan s"] / one["makespan s"], 3)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_shape_slurm.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
