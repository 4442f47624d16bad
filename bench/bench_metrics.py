#!/usr/bin/env python3
"""What one scrape of ``jim metrics`` costs with 10,000 grid jobs recorded.

    python bench/bench_metrics.py [--grid-jobs 10000] [--local-jobs 5] [--runs 5]

Everything is measured in this run, on this machine, side by side:

* 10,000 grid jobs of 5 local jobs each are written as jim writes them (the
  records, their poll summaries, then ``db/index.xml`` built once from them),
  in a mix of states (DONE, ACTIVE, FAILED, PENDING), every fourth with a
  local job retried after a node failure;
* ``jim list --json`` (the index only): the floor a command pays to read the
  grid jobs at all;
* ``jim metrics``, a real process, **cold** (no ``cache/metrics.json``: every
  record is parsed), **warm** (nothing changed since the last scrape: each
  record is only stat'ed) and **1% changed** (100 records rewritten since the
  last scrape: those are parsed again);
* ``jim metrics --all-users`` over the same home (root's path: the home's
  census as its owner, the answer checked again);
* the census alone in this process (:func:`jim.metrics.scrape`), warm.

Reported: medians in milliseconds.  Results go to stdout and
``bench/results/bench_metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def record_grid_jobs(home: Path, n: int, local_jobs: int) -> list[str]:
    """n grid jobs written as jim writes them, the index built once at the end (see the docstring)."""
    from jim.db import Database
    from jim.jobid import new_job_id
    from jim.paths import Home
    from jim.record import NewJob, new_record
    from jim.safeio import atomic_write
    from jim.states import EndCause, Evidence, LocalState

    h = Home(home).ensure()
    db = Database(h)
    t0 = time.time() - n
    ids = []
    for k in range(n):
        created = t0 + k
        job_id = new_job_id(created)
        rec = new_record(
            job_id,
            NewJob(
                jobtype="generic",
                name=f"job {k}",
                owner="bench",
                adapter="slurm",
                description={"executable": ["/bin/true"]},
                source_format="rsl",
                source_text="&(executable=/bin/true)",
                plan={"localJobs": local_jobs, "binding": "count"},
                explanation="",
                slices=[{"queue": "short" if j % 2 else "long"} for j in range(local_jobs)],
            ),
            created=created,
        )
        kind = k % 4  # 0 DONE (one retry), 1 ACTIVE, 2 FAILED, 3 PENDING
        for lj in rec.local_jobs():
            if kind == 3:
                break
            lj.set_state(LocalState.SUBMITTING, at=created)
            lj.batch_id = f"{k}_{lj.index}"
            lj.set_state(LocalState.RUNNING, at=created)
            if kind == 0 and lj.index == 0:
                lj.set_state(LocalState.FAILED, evidence=Evidence.BATCH, reason="node", at=created)
                lj.set("cause", EndCause.NODE_FAIL.value)
                lj.new_attempt("node failure", at=created)
                lj.set_state(LocalState.SUBMITTING, at=created)
                lj.set_state(LocalState.RUNNING, at=created)
            if kind == 0 or (kind == 2 and lj.index):
                lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0, at=created)
            elif kind == 2:
                lj.set_state(LocalState.FAILED, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=3, at=created)
        rec.recompute(at=created)
        atomic_write(h.record(job_id), rec.tostring(), sync=False)
        db._write_summary(rec)
        ids.append(job_id)
    db._write_index(db.rebuild_index_root())
    return ids


def timed(argv: list[str], env: dict[str, str], runs: int, before=None) -> float:
    """Median milliseconds of ``argv`` (``before()`` run before each, not timed)."""
    samples = []
    for _ in range(runs):
        if before is not None:
            before()
        t = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        samples.append((time.perf_counter() - t) * 1000)
        assert done.returncode == 0, done.stderr
    return round(statistics.median(samples), 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid-jobs", type=int, default=10000)
    ap.add_argument("--local-jobs", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="jim-bench-metrics-") as tmp:
        home = Path(tmp) / "home"
        config = Path(tmp) / "jim.toml"
        config.write_text("[batch]\nadapter = 'fork'\n")
        t = time.perf_counter()
        ids = record_grid_jobs(home, args.grid_jobs, args.local_jobs)
        made = time.perf_counter() - t
        env = {**os.environ, "JIM_HOME": str(home), "JIM_CONFIG": str(config)}
        jim = [sys.executable, "-m", "jim"]
        cache = home / "cache" / "metrics.json"

        def cold() -> None:
            cache.unlink(missing_ok=True)

        def touch_some() -> None:
            from jim.safeio import atomic_write

            for job_id in ids[: max(1, len(ids) // 100)]:
                path = home / "db" / f"{job_id}.xml"
                atomic_write(path, path.read_bytes(), sync=False)

        results = {
            "list_json_ms": timed([*jim, "list", "--json"], env, args.runs),
            "metrics_cold_ms": timed([*jim, "metrics"], env, args.runs, before=cold),
            "metrics_warm_ms": timed([*jim, "metrics"], env, args.runs),
            "metrics_1pct_changed_ms": timed([*jim, "metrics"], env, args.runs, before=touch_some),
            "metrics_all_users_warm_ms": timed([*jim, "metrics", "--all-users", "--homes", str(home)], env, args.runs),
            "version_ms": timed([*jim, "--version"], env, args.runs),
        }
        os.environ.update(JIM_HOME=str(home), JIM_CONFIG=str(config))
        from jim.metrics import scrape
        from jim.paths import Home

        samples = []
        for _ in range(args.runs):
            t = time.perf_counter()
            text = scrape(Home(home))
            samples.append((time.perf_counter() - t) * 1000)
        results["scrape_in_process_warm_ms"] = round(statistics.median(samples), 1)
        results["exposition_bytes"] = len(text)
        results["metrics_cache_bytes"] = cache.stat().st_size
        out = {
            "grid_jobs": args.grid_jobs,
            "local_jobs_each": args.local_jobs,
            "record_seconds": round(made, 1),
            "machine": platform.platform(),
            "python": platform.python_version(),
            **results,
        }
    print(json.dumps(out, indent=2))
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "bench_metrics.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
