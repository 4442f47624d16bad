#!/usr/bin/env python3
"""``jim serve`` with 2,000 grid jobs recorded: time to the first index page, against a static file.

    python bench/bench_web.py [--grid-jobs 2000] [--local-jobs 5] [--runs 30]

Everything is measured in this run, on this machine, side by side:

* 2,000 grid jobs are recorded with the database API (``Database.create``,
  so ``db/index.xml`` is the one jim maintains), created a second apart, in
  a mix of states;
* the real ``jim serve`` runs from a wheel install (as at a site; this also
  proves the templates are shipped as package data) in its own process, on a
  free loopback port; the client here speaks HTTP/1.1 over a new connection
  per request, as a browser opening the page would;
* baseline: ``GET /static/jim.css`` from the same server (a request that does
  no work: the cost of the HTTP round trip itself);
* ``GET /`` (the first index page, 50 grid jobs, newest first), both with
  the parsed index cached (index.xml unchanged since the last request) and
  uncached (index.xml touched before every request, as when jobs change
  state all the time: the index is re-read and re-sorted);
* ``GET /?state=DONE&page=10``, ``GET /api/jobs?per_page=50``, and the page
  of one grid job ``GET /jobs/<id>``.

Reported: medians and p90 in milliseconds, each median as a ratio to the
baseline, and whether the uncached first page answers in under a second.
Results go to stdout and ``bench/results/bench_web.json``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUDGET_MS = 1000.0


def record_grid_jobs(home: Path, n: int, local_jobs: int) -> list[str]:
    """n grid jobs through the database API, a second apart, in a mix of states."""
    from jim.db import Database
    from jim.jobid import new_job_id
    from jim.paths import Home
    from jim.record import NewJob, new_record
    from jim.states import Evidence, LocalState

    db = Database(Home(home).ensure())
    t0 = time.time() - n
    ids = []
    for k in range(n):
        created = t0 + k
        job_id = new_job_id(created)
        rec = new_record(
            job_id,
            NewJob(
                jobtype="montecarlo",
                name=f"D0 MC request {4000 + k} <bench> & co",
                owner="d0mc",
                adapter="fork",
                description={"executable": ["/opt/d0/mc_runjob"], "arguments": ["--request", str(k)]},
                source_format="rsl",
                source_text="&(executable=/opt/d0/mc_runjob)",
                plan={"localJobs": local_jobs, "binding": "site-recommended-cpu"},
                explanation=f"{250 * local_jobs} events",
                slices=[
                    {"firstEvent": 250 * j + 1, "lastEvent": 250 * j + 250, "events": 250} for j in range(local_jobs)
                ],
            ),
            created=created,
        )
        kind = k % 4  # 0 DONE, 1 ACTIVE, 2 FAILED, 3 PENDING
        for lj in rec.local_jobs():
            if kind == 3:
                break
            lj.set_state(LocalState.SUBMITTING, at=created)
            lj.batch_id = f"{10000 + lj.index}:{created}"
            lj.set_state(LocalState.RUNNING, at=created)
            lj.set_progress({"generation": (250, 250), "d0gstar": (117, 250)}, at=created)
            if kind == 0 or (kind == 2 and lj.index):
                lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0, at=created)
            elif kind == 2:
                lj.set_state(LocalState.FAILED, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=3, at=created)
        if kind in (0, 2):
            rec.set_outputs(home / f"{job_id}.tar.gz")
        rec.recompute(at=created)
        db.create(rec)
        ids.append(job_id)
    return ids


AUTH: dict[str, str] = {}  # the token of the jim serve being measured


def get(port: int, path: str) -> tuple[float, int, int]:
    """One GET over a fresh connection: (milliseconds, status, body bytes)."""
    t = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}", **AUTH})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return (time.perf_counter() - t) * 1000, resp.status, len(body)


def summary(samples: list[float], baseline: float | None = None) -> dict:
    s = sorted(samples)
    out = {
        "median_ms": round(statistics.median(s), 2),
        "p90_ms": round(s[int(0.9 * (len(s) - 1))], 2),
        "min_ms": round(s[0], 2),
        "n": len(s),
    }
    if baseline:
        out["ratio_to_baseline"] = round(out["median_ms"] / baseline, 1)
    return out


def timed(port: int, path: str, runs: int, before=None) -> tuple[list[float], int]:
    samples, size = [], 0
    for _ in range(runs):
        if before:
            before()
        ms, status, size = get(port, path)
        assert status == 200, (path, status)
        samples.append(ms)
    return samples, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid-jobs", type=int, default=2000)
    ap.add_argument("--local-jobs", type=int, default=5, help="local jobs per grid job (default 5)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--keep", action="store_true", help="keep the temporary jim home")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="jim-bench-web-"))
    home = tmp / "home"
    sys.path.insert(0, str(HERE))
    from _site_install import site_python

    t = time.perf_counter()
    ids = record_grid_jobs(home, args.grid_jobs, args.local_jobs)
    record_s = time.perf_counter() - t
    index_kb = (home / "db" / "index.xml").stat().st_size / 1024
    print(
        f"recorded {len(ids)} grid jobs x {args.local_jobs} local jobs in {record_s:.1f} s "
        f"(index.xml {index_kb:.0f} KiB)"
    )

    py = site_python(tmp)
    cfg = tmp / "jim.toml"
    cfg.write_text("")
    env = {**os.environ, "JIM_HOME": str(home), "JIM_CONFIG": str(cfg)}
    server = subprocess.Popen(
        [py, "-m", "jim", "serve", "--port", "0"],
        env=env,
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=(\S+)", line)
        if not m:
            raise SystemExit(f"jim serve did not start: {line!r} {server.stderr.read()}")
        port = int(m.group(1))
        AUTH["Authorization"] = f"token {m.group(2)}"
        index = home / "db" / "index.xml"

        def touch_index():
            os.utime(index)  # a changed index: the next request re-reads and re-sorts it

        first_ms, status, first_size = get(port, "/")  # the very first request of the process
        assert status == 200
        baseline, _ = timed(port, "/static/jim.css", args.runs)
        base = statistics.median(baseline)
        results = {
            "baseline_static_css": summary(baseline),
            "index_first_request_of_the_process_ms": round(first_ms, 2),
        }
        cases = [
            ("index_page1_cached", "/", None),
            ("index_page1_uncached", "/", touch_index),
            ("index_state_DONE_page10_uncached", "/?state=DONE&page=10", touch_index),
            ("api_jobs_per_page50_uncached", "/api/jobs?per_page=50", touch_index),
            ("job_page", f"/jobs/{ids[-1]}", None),
        ]
        for name, path, before in cases:
            samples, size = timed(port, path, args.runs, before)
            results[name] = {**summary(samples, base), "bytes": size, "path": path}
    finally:
        server.terminate()
        try:
            server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    worst = max(results["index_page1_uncached"]["p90_ms"], results["index_first_request_of_the_process_ms"])
    out = {
        "benchmark": "bench_web",
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "grid_jobs": args.grid_jobs,
        "local_jobs_per_grid_job": args.local_jobs,
        "runs": args.runs,
        "index_xml_kib": round(index_kb),
        "record_seconds": round(record_s, 1),
        "budget_ms": BUDGET_MS,
        "within_budget": worst < BUDGET_MS,
        "results": results,
    }
    print(f"\n{'request':<36} {'median ms':>10} {'p90 ms':>8} {'x baseline':>11}")
    print(
        f"{'GET /static/jim.css (baseline)':<36} {results['baseline_static_css']['median_ms']:>10.2f} "
        f"{results['baseline_static_css']['p90_ms']:>8.2f} {'1.0':>11}"
    )
    for name, _, _ in cases:
        r = results[name]
        print(f"{name:<36} {r['median_ms']:>10.2f} {r['p90_ms']:>8.2f} {r['ratio_to_baseline']:>11.1f}")
    print(f"{'first request of the process':<36} {first_ms:>10.2f}")
    verdict = "under" if out["within_budget"] else "OVER"
    print(
        f"\nfirst index page with {args.grid_jobs} grid jobs: {verdict} the {BUDGET_MS:.0f} ms budget "
        f"(worst of p90 uncached and first request: {worst:.1f} ms)"
    )
    results_dir = HERE / "results"
    results_dir.mkdir(exist_ok=True)
    (results_dir / "bench_web.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {results_dir / 'bench_web.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
