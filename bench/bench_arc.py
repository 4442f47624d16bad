#!/usr/bin/env python3
"""jim behind an ARC CE, side by side in one run, on the project's ARC test service (as root).

    python bench/bench_arc.py [--runs 3] [--inflight 100] [--passes 5]

Needs tests/services/arc (its start.sh is run here for each mode) and, for
jim on Slurm, the test Slurm (tests/services/slurm/start.sh).

1. One short job (``/bin/sh -c 'echo hi'``) through A-REX's own fork LRMS,
   through jim on its fork backend and through jim on Slurm, ``--runs`` each,
   submitted one after the other: A-REX's own time from ACCEPTED to FINISHED
   (the job's log in the control directory: A-REX's clock, 1 s resolution) and
   the time from arcsub's return until ``arcstat`` shows Finished (the client's
   view, asked every second; it lags by up to the info provider's period, 5 s
   in the test service). Medians.
2. The scan step with ``--inflight`` ARC jobs in flight (jim on fork, each job
   one local job sleeping): ``--passes`` passes of ``scan-jim-job`` run by hand
   as A-REX runs it (root, the runtime config, the control directory), each
   timed; the jim processes a pass started are the count its log line gives
   ("... N jim call(s)").
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from support import arc as arc_ce  # noqa: E402

HELLO = '&(executable="/bin/sh")(arguments="-c" "echo hi")(jobname="bench-{i}")(stdout="out.txt")'
SLEEPER = '&(executable="/bin/sh")(arguments="-c" "sleep {secs}; : {{marker}}")(jobname="bench-inflight-{i}")'


def arex_seconds(ce: arc_ce.ArcCE, job: arc_ce.ArcJob) -> float | None:
    """ACCEPTED -> FINISHED in A-REX's log of the job (job.<id>.errors)."""
    p = ce.control_file(job, "errors")
    if p is None:
        return None
    stamps = {}
    for line in p.read_text(errors="replace").splitlines():
        m = re.match(r"(\S+Z) Job state change \S+ -> (\S+)", line)
        if m and m.group(2) not in stamps:
            stamps[m.group(2)] = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
    if "ACCEPTED" not in stamps or "FINISHED" not in stamps:
        return None
    return (stamps["FINISHED"] - stamps["ACCEPTED"]).total_seconds()


def round_trips(mode: str, runs: int) -> dict:
    ce = arc_ce.start(mode)
    arex, client = [], []
    for i in range(runs):
        job = ce.submit(f"bench-{mode}-{i}", HELLO.format(i=i))
        t = time.monotonic()
        while True:
            st = ce.status(job).get(job.url, {}).get("State", "")
            if st.split(" ")[0] in arc_ce.TERMINAL:
                break
            if time.monotonic() - t > 300:
                raise SystemExit(f"{mode}: job {job.url} not done after 300 s")
            time.sleep(1)
        client.append(time.monotonic() - t)
        assert st.startswith("Finished"), (mode, st, ce.diagnostics(job))
        a = arex_seconds(ce, job)
        if a is not None:
            arex.append(a)
        ce.clean(job)
    return {
        "mode": mode,
        "runs": runs,
        "arex_accepted_to_finished_s": statistics.median(arex) if arex else None,
        "arcsub_to_arcstat_finished_s": round(statistics.median(client), 1),
        "arex_all": arex,
        "client_all": [round(c, 1) for c in client],
    }


def scan_passes(inflight: int, passes: int) -> dict:
    ce = arc_ce.start("jim-fork")
    secs = 600
    jobs = []
    t0 = time.monotonic()
    for i in range(inflight):
        jobs.append(ce.submit(f"bench-inflight-{i}", SLEEPER.format(i=i, secs=secs)))
    submit_s = time.monotonic() - t0
    deadline = time.monotonic() + 600
    while sum(ce.arex_state(j) == "INLRMS" for j in jobs) < inflight:
        if time.monotonic() > deadline:
            raise SystemExit("the jobs did not all reach INLRMS")
        time.sleep(2)
    cfg = arc_ce.STATE / "run" / "arex.cfg"
    control = arc_ce.STATE / "control"
    rows = []
    try:
        for _ in range(passes):
            t = time.monotonic()
            p = subprocess.run(
                ["/usr/share/arc/scan-jim-job", "--config", str(cfg), str(control)],
                capture_output=True,
                text=True,
                timeout=300,
                cwd="/",
            )
            took = time.monotonic() - t
            m = re.search(r"scan pass: (\d+) job\(s\) checked, (\d+) ended, (\d+) jim call", p.stderr)
            rows.append(
                {
                    "seconds": round(took, 2),
                    "checked": int(m.group(1)) if m else None,
                    "jim_calls": int(m.group(3)) if m else None,
                }
            )
            time.sleep(1)
    finally:
        for k in range(0, len(jobs), 50):
            ce.run("arckill", *(j.url for j in jobs[k : k + 50]), timeout=600)
        deadline = time.monotonic() + 180
        while any(ce.arex_state(j) != "FINISHED" for j in jobs) and time.monotonic() < deadline:
            time.sleep(2)
        for k in range(0, len(jobs), 50):
            ce.clean(*jobs[k : k + 50])
    return {
        "inflight": inflight,
        "submit_s": round(submit_s, 1),
        "passes": rows,
        "median_pass_s": statistics.median(r["seconds"] for r in rows),
        "jim_calls_per_pass": sorted({r["jim_calls"] for r in rows if r["jim_calls"] is not None}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--inflight", type=int, default=100)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--modes", default="fork,jim-fork,jim-slurm")
    args = ap.parse_args()
    ok, why = arc_ce.available()
    if not ok:
        raise SystemExit(why)
    result = {"round_trips": [round_trips(m, args.runs) for m in args.modes.split(",") if m]}
    if args.inflight:
        result["scan"] = scan_passes(args.inflight, args.passes)
    arc_ce.start("jim-fork")
    print(json.dumps(result, indent=1))
    out = HERE / "results" / "bench_arc.json"
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
