#!/usr/bin/env python3
"""A toy Monte Carlo job driver in the style of D0's mc_runjob, for jim's demo.

Runs the phases generation, d0gstar (simulation) and reconstruction over the
local job's events (JIM_FIRST_EVENT .. JIM_LAST_EVENT, set by jim) and reports
progress as it goes, so that ``jim status`` and the web view show live
progress ("d0gstar: 117 of 250 events").  Writes one output file per phase.

    mc_driver.py [--seconds-per-event S] [--fail-at EVENT]

Stdlib only, like everything that runs on a worker node.
"""

import argparse
import os
import random
import subprocess
import sys
import time

PHASES = ("generation", "d0gstar", "reconstruction")


def report(phase, done, total):
    """Tell jim how far we are (the jim-progress command appends to $JIM_PROGRESS_FILE)."""
    path = os.environ.get("JIM_PROGRESS_FILE")
    if path:
        with open(path, "a") as f:
            f.write("%s %d %d\n" % (phase, done, total))
    elif os.environ.get("JIM_OUTDIR"):
        subprocess.call(["jim-progress", phase, str(done), str(total)])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds-per-event", type=float, default=0.005)
    p.add_argument("--fail-at", type=int, default=None, help="exit with code 3 at this event (for tests)")
    args = p.parse_args()
    first = int(os.environ.get("JIM_FIRST_EVENT", "1"))
    last = int(os.environ.get("JIM_LAST_EVENT", str(first + 99)))
    total = last - first + 1
    rng = random.Random(first)
    print("mc_driver: events %d..%d (%d) on %s" % (first, last, total, os.uname()[1]))
    step = max(1, total // 20)
    for phase in PHASES:
        report(phase, 0, total)
        with open("%s.dat" % phase, "w") as out:
            for k, event in enumerate(range(first, last + 1), 1):
                if args.fail_at == event:
                    print("mc_driver: simulated failure at event %d" % event, file=sys.stderr)
                    return 3
                out.write("%d %.6f\n" % (event, rng.random()))
                time.sleep(args.seconds_per_event / len(PHASES))
                if k % step == 0 or k == total:
                    report(phase, k, total)
        print("mc_driver: %s done (%d events)" % (phase, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
