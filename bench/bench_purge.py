#!/usr/bin/env python3
"""Disk used by a jim home of N finished grid jobs, with and without retention, and what ``jim purge`` takes.

    python bench/bench_purge.py [--grid-jobs 10000] [--local-jobs 4] [--dir DIR] [--json]

N finished grid jobs are made in process (``tests/support/finished.py``, as ``bench_monitor_pass.py``
makes records), as a real run on fork leaves them: the record (every local job DONE with its exit
code, the grid job DONE, its outputs gathered, ended 40 days ago), the poll summary and index line; the
work area with what the worker and the wrappers write (``wrapper.py``, its two helpers,
``sandbox.tar.gz``, ``plan.json``, jim's log of the grid job, ``submit.intent``, per local job
``stdout``, ``stderr``, ``wrapper.log``, ``started``, ``heartbeat``, ``exit_code`` and one 4 KiB
output), and the output tar gathered from them (``jobs/<id>/<id>.tar.gz``).  Then, with the real
``jim purge`` command (a new process, ``JIM_HOME`` and ``JIM_CONFIG``):

1. **without retention**: the home's disk use (allocated blocks of every file, as ``du``);
2. ``jim purge --dry-run`` (default ``[retention]``: work areas 7 d, tars 30 d, records 90 d) timed;
3. ``jim purge`` timed: every work area and tar goes (40 days > 30 d), the records stay; disk use;
4. ``jim purge`` again, nothing due: what the monitor's hourly look costs at N (timed);
5. ``jim purge --older-than 1d`` timed: every grid job forgotten; disk use;
6. :class:`jim.purge.Housekeeping`'s look in process with nothing due (at N records kept), the
   monitor's hourly cost, on a home made again with records only.

Wall times in seconds (removing a file costs what the file system makes it cost: ``--dir`` puts the
homes on another one, e.g. ``/dev/shm``).  Also written to ``bench/results/bench_purge.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(1, str(HERE.parent / "tests"))

from jim.db import Database  # noqa: E402
from jim.paths import Home  # noqa: E402

from support.finished import Maker, write_file  # noqa: E402

DAY = 86400.0


def disk_used(root: Path) -> int:
    """Allocated bytes of every file and directory under ``root`` (as ``du``, no link followed)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total + os.lstat(root).st_blocks * 512


def jim(home: Path, config: Path, *args: str) -> tuple[float, str]:
    env = {**os.environ, "JIM_HOME": str(home), "JIM_CONFIG": str(config)}
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "jim", *args], env=env, capture_output=True, text=True)
    took = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"jim {' '.join(args)} failed: {done.stderr}")
    return took, done.stdout.splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid-jobs", type=int, default=10000)
    ap.add_argument("--local-jobs", type=int, default=4)
    ap.add_argument("--dir", help="where the homes are made (default: the system's temporary directory)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="jim-bench-purge-", dir=args.dir))
    home, config = tmp / "home", tmp / "jim.toml"
    config.write_text("[retention]\n")  # (the defaults: 7d, 30d, 90d)
    db = Database(Home(home).ensure())
    t = time.perf_counter()
    maker = Maker(db, args.local_jobs, 40 * DAY)
    maker.one()  # (the first as jim makes one: the database's stylesheet and index)
    for _ in range(args.grid_jobs - 1):
        maker.one(indexed=False)
    maker.index()
    res: dict[str, object] = {
        "grid jobs": args.grid_jobs,
        "local jobs each": args.local_jobs,
        "file system": subprocess.run(["stat", "-f", "-c", "%T", tmp], capture_output=True, text=True).stdout.strip(),
        "made in s": round(time.perf_counter() - t, 1),
    }
    res["disk used, no retention, bytes"] = disk_used(home)
    res["jim purge --dry-run s"], res["dry run says"] = jim(home, config, "purge", "--dry-run")
    res["jim purge (work areas and tars) s"], res["purge says"] = jim(home, config, "purge")
    res["disk used, after purge (records kept), bytes"] = disk_used(home)
    res["jim purge, nothing due s"], _ = jim(home, config, "purge")
    forget = jim(home, config, "purge", "--older-than", "1d")
    res["jim purge --older-than 1d (forget all) s"], res["forget says"] = forget
    res["disk used, after forgetting all, bytes"] = disk_used(home)
    res.update(housekeeping(tmp / "home2", args.grid_jobs, args.local_jobs))
    shutil.rmtree(tmp, ignore_errors=True)
    out = HERE / "results" / "bench_purge.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        for k, v in res.items():
            print(f"{k:<48} {v}")


def housekeeping(root: Path, grid_jobs: int, local_jobs: int) -> dict[str, object]:
    """The monitor's hourly look, in process, at ``grid_jobs`` records 10 days old with their work areas
    gone and their tars not yet due: nothing to do, every one looked at."""
    from jim.config import RetentionConfig
    from jim.purge import Rules, purge_home

    db = Database(Home(root).ensure())
    maker = Maker(db, local_jobs, 10 * DAY)
    for n in range(grid_jobs):
        job_id = maker.one(work_area=False, indexed=n == 0)
        db.home.job_dir(job_id).mkdir(mode=0o700)
        write_file(db.home.job_dir(job_id) / f"{job_id}.tar.gz", b"x" * 2048)
    maker.index()
    rules = Rules.of(RetentionConfig())
    t = time.perf_counter()
    report = purge_home(db, rules)
    took = time.perf_counter() - t
    assert not report.outcomes, report.total()
    return {"monitor's hourly look, nothing due, in process s": round(took, 3)}


if __name__ == "__main__":
    main()
