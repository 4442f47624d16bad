#!/usr/bin/env python3
"""B8: the cost of one grid job's state, as jim stores it, against JSON and SQLite.

    python bench/bench_db.py [--sizes 1000,10000,100000] [--runs 7]

For N local jobs, side by side in this run and in one directory:

* **write**: the whole state to disk, durably: jim's XML record (serialize,
  atomic replace with fsync, the poll summary) vs the same records as one
  JSON document (dumps, atomic replace with fsync) vs SQLite (one
  transaction replacing every row, synchronous=FULL);
* **read and aggregate**: from the file to the grid job's state: jim's
  ``Database.read`` + ``recompute`` vs ``json.loads`` + counting vs
  ``SELECT state, count(*) ... GROUP BY state``;
* **poll**: what ``jim poll`` reads instead (the one-line summary file).

Reported: medians in milliseconds, and each as a ratio to the JSON figure of
the same N.  jim's code is imported from this checkout (the costs measured
are in-process: no interpreter start).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from jim import summary  # noqa: E402
from jim.db import Database  # noqa: E402
from jim.jobid import new_job_id  # noqa: E402
from jim.paths import Home  # noqa: E402
from jim.record import NewJob, new_record  # noqa: E402
from jim.safeio import atomic_write  # noqa: E402


def median_ms(fn, runs: int) -> float:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(out), 2)


def records(n: int) -> list[dict]:
    return [
        {
            "index": k,
            "tag": f"g.{k}",
            "state": "QUEUED",
            "batchId": f"77_{k}",
            "submitted": "2026-11-22T10:00:00Z",
            "history": [["PLANNED", "2026-11-22T10:00:00Z"], ["QUEUED", "2026-11-22T10:00:01Z"]],
        }
        for k in range(n)
    ]


def bench(n: int, runs: int, root: Path) -> dict:
    home = Home(root / f"home-{n}").ensure()
    db = Database(home)
    job_id = new_job_id()
    rec = new_record(
        job_id,
        NewJob(
            jobtype="generic",
            name="b8",
            owner="u",
            adapter="slurm",
            description={"executable": ["/bin/true"], "count": [str(n)]},
            source_format="rsl",
            source_text=f"&(executable=/bin/true)(count={n})",
            plan={"localJobs": n, "binding": "count"},
            explanation=f"{n} jobs",
            slices=[{} for _ in range(n)],
        ),
    )
    db.create(rec)
    rec.mark_submitted({k: f"77_{k}" for k in range(n)}, {})
    rec.recompute()
    size_xml = len(rec.tostring())

    rows = records(n)
    jpath = root / f"state-{n}.json"
    spath = root / f"state-{n}.sqlite"
    con = sqlite3.connect(spath)
    con.execute("PRAGMA synchronous=FULL")
    con.execute(
        "CREATE TABLE IF NOT EXISTS lj (idx INTEGER PRIMARY KEY, tag TEXT, state TEXT, batch TEXT, "
        "submitted TEXT, history TEXT)"
    )

    def xml_write():
        db._write(rec)

    def json_write():
        atomic_write(jpath, json.dumps(rows, separators=(",", ":")).encode())

    def sqlite_write():
        with con:
            con.execute("DELETE FROM lj")
            con.executemany(
                "INSERT INTO lj VALUES (?,?,?,?,?,?)",
                [
                    (r["index"], r["tag"], r["state"], r["batchId"], r["submitted"], json.dumps(r["history"]))
                    for r in rows
                ],
            )

    def xml_read():
        db.read(job_id).recompute()

    def json_read():
        counts: dict[str, int] = {}
        for r in json.loads(jpath.read_bytes()):
            counts[r["state"]] = counts.get(r["state"], 0) + 1

    def sqlite_read():
        dict(con.execute("SELECT state, count(*) FROM lj GROUP BY state").fetchall())

    def poll_read():
        summary.read(home.summary(job_id))

    out = {"local jobs": n, "xml bytes": size_xml}
    for name, w, r in (
        ("xml (jim)", xml_write, xml_read),
        ("json", json_write, json_read),
        ("sqlite", sqlite_write, sqlite_read),
    ):
        w()
        out[f"{name} write ms"] = median_ms(w, runs)
        out[f"{name} read+aggregate ms"] = median_ms(r, runs)
    out["poll summary read ms"] = median_ms(poll_read, runs)
    out["xml/json write"] = round(out["xml (jim) write ms"] / max(out["json write ms"], 1e-3), 2)
    out["xml/json read"] = round(out["xml (jim) read+aggregate ms"] / max(out["json read+aggregate ms"], 1e-3), 2)
    con.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    results = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "B8": []}
    with tempfile.TemporaryDirectory(prefix="jim-bench-db-", dir=os.environ.get("JIM_BENCH_DIR")) as tmp:
        for n in [int(x) for x in args.sizes.split(",") if x]:
            row = bench(n, args.runs, Path(tmp))
            results["B8"].append(row)
            print(json.dumps(row), flush=True)
    out = HERE / "results" / "bench_db.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
