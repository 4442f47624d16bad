#!/usr/bin/env python3
"""A toy Monte Carlo job driver in the style of D0's mc_runjob, for jim's demo.

Runs the phases generation, d0gstar (the detector simulation) and
reconstruction over the local job's events (JIM_FIRST_EVENT .. JIM_LAST_EVENT,
set by jim) and reports its progress as it goes, so that ``jim status``, the
XML page and ``jim serve`` show live progress ("d0gstar: 117 of 250").
Writes one output file per phase (``<phase>.dat``).

    mc_driver.py [--seconds-per-event S] [--events N] [--fail-at EVENT [--fail-phase PHASE]]

``--seconds-per-event`` is the wall time one event takes through all phases;
as in real Monte Carlo production the simulation takes most of it (generation
10 %, d0gstar 70 %, reconstruction 20 %).

Progress goes where jim looks for it: one ``PHASE DONE TOTAL`` line appended
to ``$JIM_PROGRESS_FILE`` (what the sandbox's ``jim-progress`` command does).
Every phase is announced as ``0 of TOTAL`` at the start, so the totals jim
adds up do not grow while the job runs; after that a line is written every
5 % of the events and at least every second.  Outside jim (no
``$JIM_PROGRESS_FILE``) progress goes to stderr.

Stdlib only, Python >= 3.6, like everything that runs on a worker node.
"""

import argparse
import os
import random
import signal
import sys
import time

PHASES = (("generation", 0.1), ("d0gstar", 0.7), ("reconstruction", 0.2))
REPORT_EVERY_S = 1.0


class Progress:
    """Appends ``PHASE DONE TOTAL`` lines for jim, at most one per phase per second (plus milestones)."""

    def __init__(self, path):
        self.path = path
        self.last = {}

    def report(self, phase, done, total, force=False):
        now = time.monotonic()
        step = max(1, total // 20)
        if not (force or done == total or done % step == 0 or now - self.last.get(phase, 0.0) >= REPORT_EVERY_S):
            return
        self.last[phase] = now
        line = "%s %d %d\n" % (phase, done, total)
        if self.path:
            # one short append per line: the monitor reads whole lines only
            with open(self.path, "a") as f:
                f.write(line)
        else:
            sys.stderr.write("progress: " + line)
            sys.stderr.flush()


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--seconds-per-event",
        type=float,
        default=0.005,
        help="wall seconds per event through all phases (default 0.005)",
    )
    p.add_argument(
        "--events",
        type=int,
        default=100,
        help="events to run when jim sets no JIM_FIRST_EVENT/JIM_LAST_EVENT (default 100)",
    )
    p.add_argument(
        "--fail-at",
        type=int,
        default=None,
        metavar="EVENT",
        help="exit with code 3 when this event is reached (for tests)",
    )
    p.add_argument(
        "--fail-phase",
        default="d0gstar",
        choices=[name for name, _ in PHASES],
        help="the phase in which --fail-at fails (default d0gstar)",
    )
    args = p.parse_args(argv)
    if args.seconds_per_event < 0 or args.events < 1:
        p.error("--seconds-per-event must be >= 0 and --events >= 1")
    signal.signal(signal.SIGTERM, _terminated)  # cancelled: close the outputs, exit 143

    first = int(os.environ.get("JIM_FIRST_EVENT", "1"))
    last = int(os.environ.get("JIM_LAST_EVENT", str(first + args.events - 1)))
    total = last - first + 1
    if total < 1:
        print("mc_driver: no events to run (%d..%d)" % (first, last), file=sys.stderr)
        return 2
    rng = random.Random(first)
    progress = Progress(os.environ.get("JIM_PROGRESS_FILE"))
    print(
        "mc_driver: events %d..%d (%d) on %s, local job %s"
        % (first, last, total, os.uname()[1], os.environ.get("JIM_INDEX", "-"))
    )
    sys.stdout.flush()
    for name, _ in PHASES:
        progress.report(name, 0, total, force=True)
    for name, weight in PHASES:
        pause = args.seconds_per_event * weight
        started = time.monotonic()
        with open("%s.dat" % name, "w") as out:
            for k, event in enumerate(range(first, last + 1), 1):
                if args.fail_at == event and args.fail_phase == name:
                    progress.report(name, k - 1, total, force=True)
                    print("mc_driver: simulated failure in %s at event %d" % (name, event), file=sys.stderr)
                    return 3
                out.write("%d %.6f\n" % (event, rng.random()))
                if pause:
                    time.sleep(pause)
                progress.report(name, k, total)
        print("mc_driver: %s done (%d events, %.1f s)" % (name, total, time.monotonic() - started))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
