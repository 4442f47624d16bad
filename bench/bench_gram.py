#!/usr/bin/env python3
"""GRAM benchmarks, side by side in one run, on the project's test gatekeeper.

    python bench/bench_gram.py [--runs 5] [--minutes 10]

Needs tests/services/gram/start.sh (as root).

1. Wall time of one ``globus-job-run`` round trip (``/bin/true``) through the
   stock fork job manager, through jim in poll mode and through jim in push
   mode (medians of ``--runs``).
2. How many times the job manager calls jim per minute for a grid job that
   runs ``--minutes`` minutes, in poll mode and in push mode, both at once:
   counted from the job managers' logs, where jim's module logs every call
   (``jim: '<command>' -> exit ...``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV_FILE = Path("/var/lib/jim-gram-test/env.sh")


def site() -> dict[str, str]:
    env = {}
    for line in ENV_FILE.read_text().splitlines():
        m = re.match(r"^([A-Z_]+)='(.*)'$", line)
        if m:
            env[m.group(1)] = m.group(2)
    return env


def as_submitter(s, *argv, timeout=900):
    return subprocess.run([s["JIM_GRAM_AS_SUBMITTER"], *argv], capture_output=True, text=True, timeout=timeout)


def round_trip(s, service, runs, extra=()):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        p = as_submitter(s, "globus-job-run", service, *extra, "/bin/true")
        assert p.returncode == 0, (service, p.stdout, p.stderr)
        times.append(time.perf_counter() - t)
    return {
        "median s": round(statistics.median(times), 2),
        "min s": round(min(times), 2),
        "max s": round(max(times), 2),
        "runs": runs,
    }


def jim_calls(log: Path, since: float, until: float) -> dict[str, int]:
    """jim invocations logged by the module between two times, by command."""
    counts: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        if "msg=\"jim: '" not in line:
            continue
        ts = re.match(r"ts=(\S+)Z", line)
        if not ts:
            continue
        t = time.mktime(time.strptime(ts.group(1).split(".")[0], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        if not since <= t <= until:
            continue
        m = re.search(r"jim: '\S+ (submit|poll|cancel)", line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--minutes", type=float, default=10.0)
    args = ap.parse_args()
    if not ENV_FILE.exists():
        raise SystemExit("the GRAM test site is not running: tests/services/gram/start.sh")
    s = site()
    res = {
        "round trip /bin/true": {
            "stock fork job manager": round_trip(s, s["JIM_GRAM_FORK_SERVICE"], args.runs),
            "jim, poll mode": round_trip(s, s["JIM_GRAM_POLL_SERVICE"], args.runs),
            "jim, push mode": round_trip(s, s["JIM_GRAM_PUSH_SERVICE"], args.runs),
        }
    }
    fork_med = res["round trip /bin/true"]["stock fork job manager"]["median s"]
    for k in ("jim, poll mode", "jim, push mode"):
        res["round trip /bin/true"][k]["ratio to fork"] = round(
            res["round trip /bin/true"][k]["median s"] / fork_med, 2
        )
    print(json.dumps(res, indent=2), flush=True)

    seconds = int(args.minutes * 60)
    start = time.time()
    contacts = {}
    for mode, service in (("poll", s["JIM_GRAM_POLL_SERVICE"]), ("push", s["JIM_GRAM_PUSH_SERVICE"])):
        p = as_submitter(s, "globus-job-submit", service, "-x", "(count=2)", "/bin/sleep", str(seconds))
        contacts[mode] = p.stdout.strip().splitlines()[-1]
    done = {}
    while len(done) < 2 and time.time() - start < seconds + 600:
        time.sleep(15)
        for mode, contact in contacts.items():
            if mode in done:
                continue
            st = as_submitter(s, "globus-job-status", contact).stdout.strip()
            if st in ("DONE", "FAILED"):
                done[mode] = (time.time(), st)
    end = time.time()
    calls = {}
    for mode, log in (("poll", s["JIM_GRAM_JM_LOG_POLL"]), ("push", s["JIM_GRAM_JM_LOG_PUSH"])):
        c = jim_calls(Path(log), start - 5, done.get(mode, (end,))[0] + 5)
        minutes = (done.get(mode, (end,))[0] - start) / 60
        calls[mode] = {
            "final state": done.get(mode, (None, "unknown"))[1],
            "minutes": round(minutes, 2),
            "jim calls": c,
            "per minute": round(sum(c.values()) / minutes, 2),
        }
    res[f"jim calls for a {args.minutes:g}-minute grid job"] = calls
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_gram.json").write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
