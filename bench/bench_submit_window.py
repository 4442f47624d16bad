#!/usr/bin/env python3
"""The window of a killed submit: from the end of the ``JOB_ID`` write to the grid job's confirmation.

    python bench/bench_submit_window.py [--runs 300]

A ``jim submit`` killed inside this window leaves a caller with a ``JOB_ID``
whose grid job is then removed (a poll answers FAILED and says why); killed
anywhere else, either no ``JOB_ID`` was written and nothing runs, or the grid
job is confirmed and runs (see ``jim/submit.py``).  Each run is an in-process
submit of a two-job grid job on the fork backend, without its worker, in a
fresh home; the window is measured from the return of the answer's write to
the return of :meth:`jim.journal.Pending.confirm`.  Reported: median, p90 and
maximum in microseconds, and the whole submit's median for scale.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from jim import journal  # noqa: E402
from jim.config import parse  # noqa: E402
from jim.jobdesc import parse_rsl  # noqa: E402
from jim.submit import submit  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    marks: dict[str, float] = {}
    confirm = journal.Pending.confirm

    def timed_confirm(self: journal.Pending) -> None:
        confirm(self)
        marks["confirmed"] = time.perf_counter()

    journal.Pending.confirm = timed_confirm  # type: ignore[method-assign]
    windows, totals = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.runs):
            config = parse({"jim": {"home": f"{tmp}/h{k}"}})
            desc = parse_rsl("&(executable=/bin/true)(count=2)")
            start = time.perf_counter()
            submit(
                config,
                desc,
                start_background=False,
                announce=lambda _id: marks.__setitem__("answered", time.perf_counter()),
            )
            totals.append(time.perf_counter() - start)
            windows.append(marks["confirmed"] - marks["answered"])
    us = sorted(w * 1e6 for w in windows)
    result = {
        "runs": a.runs,
        "window_median_us": round(statistics.median(us), 1),
        "window_p90_us": round(us[int(0.9 * (len(us) - 1))], 1),
        "window_max_us": round(us[-1], 1),
        "submit_median_ms": round(statistics.median(totals) * 1000, 2),
    }
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_submit_window.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result) if a.json else "\n".join(f"{k:22s} {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
