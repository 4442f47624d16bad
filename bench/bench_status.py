#!/usr/bin/env python3
"""What ``jim status ID`` costs for a grid job of many local jobs: the text view and ``--json``.

    python bench/bench_status.py [--local-jobs 10000] [--runs 5] [--attempts 1] [--others 0] [--json]

The record is made as ``bench_attempts.py`` makes it (:func:`bench_attempts.make_record`: every local
job RUNNING on its attempt ``--attempts``, the earlier ones ended by a node failure), then each command
runs as a subprocess (``.venv/bin/jim`` of this checkout, ``JIM_HOME`` the record's home) ``--runs``
times, and ``.venv/bin/python -c pass`` as many, with Python's bytecode cache written and read as at a site
(``PYTHONDONTWRITEBYTECODE`` dropped: the warm-up run writes it).  Reported: the minimum wall time in milliseconds and
as a ratio to ``python -c pass``, and the minimum CPU time (user + system) of the command, which a
busy machine disturbs less than the wall time.

``--others G`` puts G more grid jobs of 100 local jobs each in the same home (as
``bench_monitor_pass.py`` makes them), so that the user has L = N + 100 G local jobs, and times
``jim list`` too: ``--local-jobs 10000 --others 900`` is L = 100,000.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_attempts import make_record  # noqa: E402


def run(argv: list[str], env: dict[str, str] | None, n: int) -> tuple[float, float]:
    """The minimum wall time and the minimum CPU time (ms) of ``n`` runs of a command."""
    wall, cpu = [], []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd="/")
        wall.append((time.perf_counter() - t) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
    return min(wall), min(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--local-jobs", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--attempts", type=int, default=1, help="the attempt every local job is on")
    ap.add_argument("--others", type=int, default=0, help="more grid jobs of 100 local jobs in the home")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    venv = HERE.parent / ".venv" / "bin"
    jim, python = str(venv / "jim"), str(venv / "python")
    tmp = Path(tempfile.mkdtemp(prefix="jim-bench-status-"))
    try:
        home = tmp / "home"
        _db, job_id, _fake = make_record(home, args.local_jobs, args.attempts)
        if args.others:
            from bench_monitor_pass import make_site  # (lazy: it imports the tests' support)

            make_site(home, args.others, 100)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["JIM_HOME"] = str(home)
        commands = {
            "python -c pass": ([python, "-c", "pass"], env),
            "jim status ID": ([jim, "status", job_id], env),
            "jim status ID --json": ([jim, "status", job_id, "--json"], env),
        }
        if args.others:
            commands["jim list"] = ([jim, "list"], env)
        for argv, e in commands.values():  # (warm-up: the page cache, the bytecode cache)
            run(argv, e, 1)
        got = {name: run(argv, e, args.runs) for name, (argv, e) in commands.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = got["python -c pass"][0]
    res = {
        "local_jobs": args.local_jobs,
        "L": args.local_jobs + 100 * args.others,
        "attempts": args.attempts,
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        **{
            name: {"min wall ms": round(w, 1), "ratio to python -c pass": round(w / base, 1), "min cpu ms": round(c, 1)}
            for name, (w, c) in got.items()
        },
    }
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_status.json").write_text(json.dumps(res, indent=2))
    if args.json:
        print(json.dumps(res, indent=2))
        return
    print(
        f"N = {args.local_jobs} local jobs on attempt {args.attempts} (L = {res['L']} in the home), "
        f"{res['cpus']} CPUs, "
        f"Python {res['python']}; min of {args.runs} runs"
    )
    print(f"{'':<24}{'wall ms':>9}{'ratio':>8}{'cpu ms':>9}")
    for name in commands:
        r = res[name]
        print(f"{name:<24}{r['min wall ms']:>9.1f}{r['ratio to python -c pass']:>7.1f}x{r['min cpu ms']:>9.1f}")


if __name__ == "__main__":
    main()
