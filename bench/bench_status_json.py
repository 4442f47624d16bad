#!/usr/bin/env python3
"""``jim status --json`` of a big grid job: jim's JSON writer (``jim.status.dump``) vs the standard library.

    python bench/bench_status_json.py [--sizes 1000,10000] [--runs 5]

``jim status --json`` prints ``json.dumps(status_json(job), indent=2)``, byte for byte.  The standard
library's indenting encoder is pure Python; ``jim.status.dump`` writes the same bytes with json's own C
string encoder.  For N local jobs (running, with progress in three phases; one in ten tried twice), side
by side in this run, in process (no interpreter start):

* **serialize**: ``dump(data)`` vs ``json.dumps(data, indent=2)`` (the same bytes: checked);
* **command**: what the command does after parsing its arguments, ``Database.read`` + ``status_json`` +
  the serializer, with each serializer.

Reported: best of ``--runs`` in milliseconds, and each of jim's figures as a ratio to the standard
library's.  Results in ``bench/results/bench_status_json.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from jim.db import Database  # noqa: E402
from jim.jobid import new_job_id  # noqa: E402
from jim.paths import Home  # noqa: E402
from jim.record import GridJob, NewJob, new_record  # noqa: E402
from jim.states import Evidence, LocalState  # noqa: E402
from jim.status import dump, status_json  # noqa: E402


def record(n: int) -> GridJob:
    rec = new_record(
        new_job_id(),
        NewJob(
            jobtype="montecarlo",
            name="bench",
            owner="u",
            adapter="fork",
            description={"executable": ["/bin/mc"]},
            source_format="rsl",
            source_text="&(executable=/bin/mc)",
            plan={"localJobs": n, "binding": "count"},
            explanation=f"{n} local jobs",
            slices=[{"firstEvent": 250 * k + 1, "lastEvent": 250 * k + 250, "events": 250} for k in range(n)],
        ),
    )
    at = time.time() - 3600
    for lj in rec.local_jobs():
        if lj.index % 10 == 0:  # an earlier attempt that ended on a node failure
            lj.set_state(LocalState.SUBMITTING, at=at)
            lj.batch_id = f"{100000 + lj.index}"
            lj.set_state(LocalState.RUNNING, at=at + 5)
            lj.set_state(LocalState.FAILED, evidence=Evidence.BATCH, reason="NODE_FAIL", at=at + 60)
            lj.new_attempt("node failure", at=at + 70)
        lj.set_state(LocalState.SUBMITTING, at=at + 100)
        lj.batch_id = f"{200000 + lj.index}"
        lj.set_state(LocalState.RUNNING, at=at + 110)
        lj.set_progress({"generation": (250, 250), "d0gstar": (lj.index % 250, 250), "reco": (0, 250)}, at=at + 200)
    rec.recompute()
    return rec


def best(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="jim-bench-status-") as tmp:
        db = Database(Home(Path(tmp) / "home").ensure())
        for n in (int(x) for x in a.sizes.split(",")):
            rec = record(n)
            db.create(rec)
            data = status_json(db.read(rec.id))
            assert dump(data) == json.dumps(data, indent=2), "dump must write json.dumps(indent=2)'s bytes"

            def stdlib(data: Any = data) -> str:
                return json.dumps(data, indent=2)

            def jims(data: Any = data) -> str:
                return dump(data)

            def command(serialize: Callable[[Any], str], job_id: str = rec.id) -> str:
                return serialize(status_json(db.read(job_id)))

            row = {
                "serialize ms (json.dumps indent=2)": best(stdlib, a.runs),
                "serialize ms (jim.status.dump)": best(jims, a.runs),
                "command ms (json.dumps indent=2)": best(lambda: command(lambda d: json.dumps(d, indent=2)), a.runs),
                "command ms (jim.status.dump)": best(lambda: command(dump), a.runs),
                "MB": len(jims()) / 1e6,
            }
            row["serialize dump/stdlib"] = (
                row["serialize ms (jim.status.dump)"] / row["serialize ms (json.dumps indent=2)"]
            )
            row["command dump/stdlib"] = row["command ms (jim.status.dump)"] / row["command ms (json.dumps indent=2)"]
            results[f"{n} local jobs"] = row
            print(f"{n} local jobs: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items()), flush=True)
    out = HERE / "results" / "bench_status_json.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
