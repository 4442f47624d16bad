#!/usr/bin/env python3
"""Slurm benchmarks B1-B3 (../shared/reference/benchmarks.md), side by side in one run.

    python bench/bench_slurm.py [--sizes 1000,10000] [--separate 1000] [--poll-minutes 2]

Needs the test cluster (tests/services/slurm/start.sh; run as root).

B1  submit of N local jobs until all are queued: ``jim submit`` (until every
    local job has its batch id in jim's database) vs one bare
    ``sbatch --array=0-(N-1)`` of the same wrapper vs N separate ``sbatch``
    calls.  Every job is submitted held (``--hold``) so nothing runs, and is
    cancelled afterwards.
B2  Slurm commands per minute while 50 grid jobs of 100 local jobs each are
    polled every 10 s (``jim poll`` of every grid job, as 50 GRAM job managers
    would), counted by a PATH shim that logs every Slurm command jim runs.
B3  ``jim poll`` p50/p99 with 10,000 local jobs recorded, as a ratio to
    ``python3 -c pass``.

jim runs from a wheel install, as at a site (see _site_install.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _site_install import jim_command, site_python  # noqa: E402

STATE = Path(os.environ.get("JIM_TEST_SLURM_STATE", "/var/tmp/jim-test-slurm"))
SLURM_CMDS = ("sbatch", "squeue", "sacct", "scancel", "scontrol")


def make_shim(d: Path, log: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for cmd in SLURM_CMDS:
        real = shutil.which(cmd)
        (d / cmd).write_text(f'#!/bin/sh\nprintf "%s %s\\n" "$(date +%s.%N)" "{cmd} $*" >> {log}\nexec {real} "$@"\n')
        (d / cmd).chmod(0o755)
    return d


def pct(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def all_queued(py, env, job_id, timeout=600):
    """True once every local job has its batch id (jim's poll summary says none awaits submission).

    Reads the one-line summary file directly: watching must not load the machine it measures.
    """
    summary = Path(env["JIM_HOME"]) / "db" / f"{job_id}.state"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "#UNSUBMITTED=0\n" in summary.read_text():
                return True
        except OSError:
            pass
        time.sleep(0.005)
    return False


def scancel_user(env):
    subprocess.run(["scancel", "-u", os.environ.get("USER", "root")], env=env, capture_output=True)
    time.sleep(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--separate", default="1000", help="sizes at which N separate sbatch calls are timed")
    ap.add_argument("--poll-minutes", type=float, default=2.0)
    ap.add_argument("--cache-interval", type=float, default=30.0)
    args = ap.parse_args()
    if not (STATE / "slurm.conf").exists():
        sys.exit("the test cluster is not running: tests/services/slurm/start.sh")
    tmp = Path(tempfile.mkdtemp(prefix="jim-bench-slurm-"))
    py = site_python(tmp)
    log = tmp / "slurm-commands.log"
    shim = make_shim(tmp / "shim", log)
    env = {**os.environ, "SLURM_CONF": str(STATE / "slurm.conf"), "PATH": f"{shim}:{os.environ['PATH']}"}
    cfg = tmp / "jim.toml"
    cfg.write_text(f"""
[site]
max_local_jobs = 20000
[batch]
adapter = "slurm"
partition = "debug"
sbatch_options = ["--hold"]
cache_interval = {args.cache_interval}
chunk_size = 10000
[monitor]
interval = 2.0
idle_exit = 600
""")
    results: dict = {
        "machine": os.uname().nodename,
        "cpus": os.cpu_count(),
        "slurm": subprocess.run(["sinfo", "--version"], env=env, capture_output=True, text=True).stdout.strip(),
    }
    wrapper_dir = tmp / "bare"
    wrapper_dir.mkdir()
    script = wrapper_dir / "job.sh"
    script.write_text("#!/bin/sh\nexec python3 /dev/null\n")
    script.chmod(0o755)

    # ---- B1 -------------------------------------------------------------
    b1 = {}
    for n in [int(x) for x in args.sizes.split(",") if x]:
        row = {}
        scancel_user(env)
        t = time.perf_counter()
        p = subprocess.run(
            [
                "sbatch",
                "--parsable",
                "--hold",
                f"--array=0-{n - 1}",
                "-o",
                "/dev/null",
                "-D",
                str(wrapper_dir),
                str(script),
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        row["bare sbatch --array s"] = round(time.perf_counter() - t, 3)
        assert p.returncode == 0, p.stderr
        scancel_user(env)
        home = tmp / f"b1-{n}"
        jenv = {**env, "JIM_HOME": str(home), "JIM_CONFIG": str(cfg)}
        t = time.perf_counter()
        p = subprocess.run(
            [py, "-m", "jim", "submit", "--rsl", f"&(executable=/bin/true)(count={n})"],
            env=jenv,
            capture_output=True,
            text=True,
            cwd="/",
        )
        job_id = p.stdout.split("JOB_ID=")[1].split()[0]
        row["jim submit returns s"] = round(time.perf_counter() - t, 3)
        assert all_queued(py, jenv, job_id)
        row["jim until all queued s"] = round(time.perf_counter() - t, 3)
        row["jim overhead over bare array s"] = round(row["jim until all queued s"] - row["bare sbatch --array s"], 3)
        time.sleep(2)  # the worker starts the monitor once it has recorded the batch ids: let it, then stop it
        subprocess.run(["pkill", "-f", "jim _monitor"], capture_output=True)
        scancel_user(env)
        if str(n) in args.separate.split(","):
            t = time.perf_counter()
            for _ in range(n):
                subprocess.run(
                    ["sbatch", "--parsable", "--hold", "-o", "/dev/null", "-D", str(wrapper_dir), str(script)],
                    env=env,
                    capture_output=True,
                )
            row["N separate sbatch s"] = round(time.perf_counter() - t, 3)
            row["separate / jim"] = round(row["N separate sbatch s"] / row["jim until all queued s"], 1)
            scancel_user(env)
        b1[f"N={n}"] = row
        print(f"B1 N={n}: {row}", flush=True)
    results["B1 submit until queued"] = b1

    # ---- B2 -------------------------------------------------------------
    scancel_user(env)
    home = tmp / "b2"
    jenv = {**env, "JIM_HOME": str(home), "JIM_CONFIG": str(cfg)}
    ids = []
    for _ in range(50):
        p = subprocess.run(
            [py, "-m", "jim", "submit", "--rsl", "&(executable=/bin/true)(count=100)"],
            env=jenv,
            capture_output=True,
            text=True,
            cwd="/",
        )
        ids.append(p.stdout.split("JOB_ID=")[1].split()[0])
    for job_id in ids:
        assert all_queued(py, jenv, job_id)
    time.sleep(args.cache_interval + 1)
    start_lines = len(log.read_text().splitlines())
    t0 = time.time()
    polls = 0
    while time.time() - t0 < args.poll_minutes * 60:
        cycle = time.time()
        for job_id in ids:
            subprocess.run([py, "-m", "jim", "poll", "--job-id", job_id], env=jenv, capture_output=True, cwd="/")
            polls += 1
        time.sleep(max(0.0, 10 - (time.time() - cycle)))
    minutes = (time.time() - t0) / 60
    cmds = log.read_text().splitlines()[start_lines:]
    by_cmd = {}
    for line in cmds:
        c = line.split()[1]
        by_cmd[c] = by_cmd.get(c, 0) + 1
    results["B2 commands while polling"] = {
        "grid jobs": 50,
        "local jobs each": 100,
        "poll period s": 10,
        "polls": polls,
        "minutes": round(minutes, 2),
        "slurm commands": len(cmds),
        "per minute": round(len(cmds) / minutes, 2),
        "by command": by_cmd,
        "cache_interval s": args.cache_interval,
        "GRAM-Perl style (one scontrol per local job per poll) per minute": 50 * 100 * 6,
        "commands (first 5, as run)": [line.split(" ", 1)[1][:160] for line in cmds[:5]],
    }
    print(f"B2: {results['B2 commands while polling']}", flush=True)
    subprocess.run(["pkill", "-f", "jim _monitor"], capture_output=True)
    scancel_user(env)

    # ---- B3 -------------------------------------------------------------
    from bench_cli import make_active_record, timed  # same helpers as the fork benchmark

    home = tmp / "b3"
    job_id = make_active_record(home, 10000)
    from jim.background import monitor_lock
    from jim.locks import SingleInstance

    mon = SingleInstance(monitor_lock(home))
    assert mon.acquire()
    polls = timed(
        [*jim_command(tmp), "poll", "--job-id", job_id],
        env={**env, "JIM_HOME": str(home), "JIM_CONFIG": str(cfg)},
        n=100,
    )
    mon.release()
    base = timed([py, "-c", "pass"], n=100)  # same environment as jim
    results["B3 poll with 10000 local jobs"] = {
        "p50 ms": round(statistics.median(polls), 1),
        "p99 ms": round(pct(polls, 0.99), 1),
        "python3 -c pass p50 ms": round(statistics.median(base), 1),
        "p50 ratio": round(statistics.median(polls) / statistics.median(base), 2),
        "p99 ratio": round(pct(polls, 0.99) / statistics.median(base), 2),
    }
    print(f"B3: {results['B3 poll with 10000 local jobs']}", flush=True)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_slurm.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
