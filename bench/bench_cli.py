#!/usr/bin/env python3
"""Wall time of ``jim submit`` and ``jim poll`` with 1,000 local jobs, as ratios to ``python3 -c pass``.

    python bench/bench_cli.py [--runs 30] [--local-jobs 1000] [--json]

Everything is measured in this run, on this machine, side by side:

* baseline: ``python3 -c pass`` (the interpreter's own start-up);
* jim runs from a wheel install, as at a site (see ``_site_install.py``);
* ``jim submit`` of a generic grid job with N local jobs (validation, plan,
  the XML record, starting the detached worker), each in a fresh JIM_HOME;
  the worker is held back (adapter marked degraded) so that the N local
  jobs do not run meanwhile and load the machine;
* ``jim poll`` of a grid job with N local jobs recorded, while it is active
  (the path that checks the worker and monitor are alive) and once DONE.

Reported: medians and p90 in milliseconds, and each median as a ratio to the
baseline median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(argv, env=None, n=30, cwd="/"):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, cwd=cwd)
        out.append((time.perf_counter() - t) * 1000)
    return out


def summary(samples):
    s = sorted(samples)
    return {"median_ms": round(statistics.median(s), 2), "p90_ms": round(s[int(0.9 * (len(s) - 1))], 2), "n": len(s)}


def hold_back_submission(home: Path) -> None:
    """Mark the fork adapter degraded: the worker then waits instead of starting N processes.

    The benchmark measures ``jim submit`` itself; the fan-out to the batch
    system happens afterwards in the background and would only add noise.
    """
    from jim.paths import Home

    h = Home(home).ensure()
    (h.cache / "fork.degraded").write_text(json.dumps({"since": time.time(), "reason": "benchmark"}))


def kill_background(home: Path) -> None:
    import psutil

    procs = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("JIM_HOME") == str(home):
                procs.append(p)
                p.kill()
        except (psutil.Error, OSError):
            continue
    psutil.wait_procs(procs, timeout=5)


def make_active_record(home: Path, n: int) -> str:
    """A grid job with n RUNNING local jobs, recorded directly (nothing runs)."""
    from jim.db import Database
    from jim.jobid import new_job_id
    from jim.paths import Home
    from jim.record import NewJob, new_record
    from jim.states import LocalState

    db = Database(Home(home).ensure())
    job_id = new_job_id()
    rec = new_record(
        job_id,
        NewJob(
            jobtype="generic",
            name="bench",
            owner="bench",
            adapter="fork",
            description={"executable": ["/bin/true"]},
            source_format="rsl",
            source_text="",
            plan={"localJobs": n, "binding": "count"},
            explanation="bench",
            slices=[{} for _ in range(n)],
        ),
    )
    for lj in rec.local_jobs():
        lj.set_state(LocalState.SUBMITTING)
        lj.batch_id = f"{100000 + lj.index}:1.0"
        lj.set_state(LocalState.RUNNING)
    rec.recompute()
    db.create(rec)
    return job_id


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--local-jobs", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n = args.local_jobs
    tmp = Path(tempfile.mkdtemp(prefix="jim-bench-"))
    sys.path.insert(0, str(HERE))
    from _site_install import jim_command

    jim = jim_command(tmp)
    cfg = tmp / "jim.toml"
    cfg.write_text(f"[site]\nmax_local_jobs = {max(n, 10000)}\n[monitor]\nidle_exit = 2.0\n")
    base_env = {**os.environ, "JIM_CONFIG": str(cfg)}

    # the baseline runs in the same environment as jim (the wheel install's venv)
    baseline = timed([jim[0], "-c", "pass"], n=args.runs)

    from jim.background import monitor_lock
    from jim.locks import SingleInstance
    from jim.paths import Home

    submit = []
    runs = max(5, args.runs // 3)
    for k in range(runs):
        home = tmp / f"submit{k}"
        env = {**base_env, "JIM_HOME": str(home)}
        hold_back_submission(home)
        monitor = SingleInstance(monitor_lock(home))  # no monitor: nobody clears the degraded mark
        assert monitor.acquire()
        t = time.perf_counter()
        p = subprocess.run(
            jim + ["submit", "--rsl", f"&(executable=/bin/true)(count={n})"],
            env=env,
            capture_output=True,
            text=True,
            cwd="/",
        )
        submit.append((time.perf_counter() - t) * 1000)
        assert "JOB_ID=" in p.stdout, p.stdout + p.stderr
        kill_background(home)
        monitor.release()

    # poll of an active grid job: hold the monitor lock ourselves so poll finds it alive and starts nothing
    home = tmp / "poll"
    env = {**base_env, "JIM_HOME": str(home)}
    job_id = make_active_record(home, n)
    from jim.background import monitor_lock
    from jim.locks import SingleInstance
    from jim.states import Evidence, LocalState

    mon = SingleInstance(monitor_lock(home))
    assert mon.acquire()
    poll_active = timed(jim + ["poll", "--job-id", job_id], env=env, n=args.runs)
    mon.release()
    # poll of a finished grid job
    from jim.db import Database

    with Database(Home(home)).update(job_id) as rec:
        for lj in rec.local_jobs():
            lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0)
        rec.set_outputs(home / "x.tar.gz")
        rec.recompute()
    poll_done = timed(jim + ["poll", "--job-id", job_id], env=env, n=args.runs)

    b = statistics.median(baseline)
    res = {
        "machine": os.uname().nodename,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "local_jobs": n,
        "baseline python3 -c pass": summary(baseline),
        "jim submit": {**summary(submit), "ratio": round(statistics.median(submit) / b, 2)},
        "jim poll (active)": {**summary(poll_active), "ratio": round(statistics.median(poll_active) / b, 2)},
        "jim poll (done)": {**summary(poll_done), "ratio": round(statistics.median(poll_done) / b, 2)},
    }
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "bench_cli.json").write_text(json.dumps(res, indent=2))
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"N = {n} local jobs, {res['cpus']} CPUs, Python {res['python']}")
        for k, v in res.items():
            if isinstance(v, dict):
                ratio = f"  ratio {v['ratio']:>5}x" if "ratio" in v else ""
                print(f"{k:<28} median {v['median_ms']:8.1f} ms  p90 {v['p90_ms']:8.1f} ms{ratio}")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
