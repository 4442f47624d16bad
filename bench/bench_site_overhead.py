#!/usr/bin/env python3
"""The monitor pass and ``jim poll`` with metrics and caps on, against off, side by side in one run.

    python bench/bench_site_overhead.py [--grid-jobs 1000] [--local-jobs 100] [--rounds 4] [--passes 5]
                                        [--poll-runs 15] [--scrape-interval 10] [--no-scraper] [--json]

**Off**: no ``[caps]``, nobody scrapes, the monitor makes its passes without the pass stamp of
:mod:`jim.monitorpass` (what ``jim metrics`` reads of the monitor).  **On**: ``[caps]`` with a
per-user cap, a site-wide cap (its shared directory in this run's temporary directory) and a queue cap,
all above what the grid jobs hold (so the gate counts, the monitor publishes the home's count, and
nothing waits); the monitor writes its pass stamp as :func:`jim.monitor.run` does; and a scraper runs
``jim metrics`` (a real process, as a Prometheus server scraping ``/metrics`` makes ``jim serve`` count)
every ``--scrape-interval`` seconds against the same home for the whole "on" block (``--no-scraper``:
caps and the stamp only, to tell what the scraper's own CPU costs the others on a small machine).

* **monitor pass**: G x K local jobs as ``bench_monitor_pass.py`` makes them (the in-memory batch system,
  user-wide, its answer through the shared status cache), the monitor's loop body timed in process
  (:func:`jim.monitor.refresh`, then the caps' publisher and the pass stamp when on): passes that ask the
  batch system again with nothing changed, and a pass in which 2 % of the local jobs end DONE;
* **jim poll**: a real ``jim poll`` process on a grid job of 1,000 RUNNING local jobs (fork adapter,
  the monitor lock held by this process so that poll starts nothing), in a home holding the same
  scraper when on.

Off and on alternate block by block, ``--rounds`` times, so that both see the same machine.  Reported:
medians (and p90 for poll) in milliseconds and on/off ratios.  Also written to
``bench/results/bench_site_overhead.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(1, str(HERE.parent / "tests"))
sys.path.insert(1, str(HERE))

from bench_cli import make_active_record  # noqa: E402
from bench_monitor_pass import make_site  # noqa: E402

from jim import caps  # noqa: E402
from jim.background import monitor_lock  # noqa: E402
from jim.config import parse  # noqa: E402
from jim.locks import SingleInstance  # noqa: E402
from jim.memo import Memo  # noqa: E402
from jim.monitor import refresh  # noqa: E402
from jim.monitorpass import PassStamp  # noqa: E402
from jim.site import Site  # noqa: E402
from jim.states import LocalState  # noqa: E402


class Scraper:
    """``jim metrics`` every ``interval`` seconds against ``home`` while on (a thread starting processes)."""

    def __init__(self, home: Path, config: Path, interval: float) -> None:
        self.env = {**os.environ, "JIM_HOME": str(home), "JIM_CONFIG": str(config)}
        self.interval = interval
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.scrapes: list[float] = []

    def __enter__(self) -> Scraper:
        self.stop.clear()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join()

    def _loop(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "jim", "metrics"], env=self.env, capture_output=True)
            assert done.returncode == 0, done.stderr
            self.scrapes.append((time.perf_counter() - t) * 1000)
            self.stop.wait(self.interval)


def caps_table(shared: Path) -> dict:
    return {
        "max_local_jobs_per_user": 500_000,
        "max_local_jobs_site": 1_000_000,
        "shared_dir": str(shared),
        "queues": {"short": 500_000},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid-jobs", type=int, default=1000)
    ap.add_argument("--local-jobs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--poll-runs", type=int, default=15)
    ap.add_argument("--poll-local-jobs", type=int, default=1000)
    ap.add_argument("--scrape-interval", type=float, default=10.0)
    ap.add_argument("--no-scraper", action="store_true", help="on: caps and the pass stamp only, nobody scrapes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="jim-bench-overhead-"))
    shared = tmp / "caps"
    shared.mkdir(mode=0o777)
    shared.chmod(0o1777)
    home = tmp / "home"
    db, fake = make_site(home, args.grid_jobs, args.local_jobs)
    env = {"JIM_HOME": str(home)}
    site_limit = {"max_local_jobs": max(args.local_jobs, args.poll_local_jobs, 10000)}
    configs = {
        "off": parse({"site": site_limit}, env=env),
        "on": parse({"site": site_limit, "caps": caps_table(shared)}, env=env),
    }
    toml = {
        "off": f"[site]\nmax_local_jobs = {site_limit['max_local_jobs']}\n",
        "on": f"[site]\nmax_local_jobs = {site_limit['max_local_jobs']}\n[caps]\nmax_local_jobs_per_user = 500000\n"
        f"max_local_jobs_site = 1000000\nshared_dir = '{shared}'\n[caps.queues]\nshort = 500000\n",
    }
    files = {}
    for mode, text in toml.items():
        files[mode] = tmp / f"{mode}.toml"
        files[mode].write_text(text)
    poll_home = tmp / "poll"
    poll_id = make_active_record(poll_home, args.poll_local_jobs)
    poll_lock = SingleInstance(monitor_lock(poll_home))
    assert poll_lock.acquire()

    memos = {"off": Memo(), "on": Memo()}
    stamps = {"on": PassStamp(home)}
    publishers = {"on": caps.Publisher(configs["on"].caps, db.home)}
    for mode in ("off", "on"):  # (the first pass reads every record: once for each memo, not timed)
        refresh(Site(configs[mode], db=db, adapter=fake), memo=memos[mode])
    running = [b for b, j in fake.jobs.items() if j.state is LocalState.RUNNING]
    random.seed(1)
    random.shuffle(running)

    def monitor_pass(mode: str) -> float:
        t = time.perf_counter()
        refresh(Site(configs[mode], db=db, adapter=fake), memo=memos[mode])
        if mode == "on":
            publishers[mode].after_pass()
            stamps[mode].passed(time.perf_counter() - t, ok=True)
        return (time.perf_counter() - t) * 1000

    steady: dict[str, list[float]] = {"off": [], "on": []}
    finishing: dict[str, list[float]] = {"off": [], "on": []}
    poll: dict[str, list[float]] = {"off": [], "on": []}
    scrapes: list[float] = []
    step = len(running) // 50  # 2 % of the local jobs end in each finishing pass
    for r in range(args.rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            scrapers = []
            if mode == "on" and not args.no_scraper:
                scrapers = [
                    Scraper(home, files[mode], args.scrape_interval),
                    Scraper(poll_home, files[mode], args.scrape_interval),
                ]
                for s in scrapers:
                    s.__enter__()
            try:
                for _ in range(args.passes):
                    time.sleep(0.6)  # (past the status cache's interval: the pass asks the batch system again)
                    steady[mode].append(monitor_pass(mode))
                for b in running[:step]:
                    fake.jobs[b].state, fake.jobs[b].exit_code = LocalState.DONE, 0
                del running[:step]
                time.sleep(0.6)
                finishing[mode].append(monitor_pass(mode))
                penv = {**os.environ, "JIM_HOME": str(poll_home), "JIM_CONFIG": str(files[mode])}
                for _ in range(args.poll_runs):
                    t = time.perf_counter()
                    done = subprocess.run(
                        [sys.executable, "-m", "jim", "poll", "--job-id", poll_id], env=penv, capture_output=True
                    )
                    poll[mode].append((time.perf_counter() - t) * 1000)
                    assert done.returncode == 0 and b"JOB_STATE=" in done.stdout, done.stdout + done.stderr
            finally:
                for s in scrapers:
                    s.__exit__()
                    scrapes.extend(s.scrapes)
    poll_lock.release()
    shutil.rmtree(tmp, ignore_errors=True)

    def med(xs: list[float]) -> float:
        return round(statistics.median(xs), 1)

    def p90(xs: list[float]) -> float:
        s = sorted(xs)
        return round(s[int(0.9 * (len(s) - 1))], 1)

    res = {
        "grid jobs x local jobs": f"{args.grid_jobs} x {args.local_jobs}",
        "poll local jobs": args.poll_local_jobs,
        "rounds": args.rounds,
        "scrape interval s": None if args.no_scraper else args.scrape_interval,
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "monitor pass, nothing changed ms (off, on, ratio)": [
            med(steady["off"]),
            med(steady["on"]),
            round(statistics.median(steady["on"]) / statistics.median(steady["off"]), 2),
        ],
        "monitor pass, 2 % finishing ms (off, on, ratio)": [
            med(finishing["off"]),
            med(finishing["on"]),
            round(statistics.median(finishing["on"]) / statistics.median(finishing["off"]), 2),
        ],
        "jim poll median ms (off, on, ratio)": [
            med(poll["off"]),
            med(poll["on"]),
            round(statistics.median(poll["on"]) / statistics.median(poll["off"]), 2),
        ],
        "jim poll p90 ms (off, on)": [p90(poll["off"]), p90(poll["on"])],
        "scrapes during on blocks": len(scrapes),
        "scrape median ms": med(scrapes) if scrapes else None,
    }
    out = HERE / "results" / "bench_site_overhead.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        for k, v in res.items():
            print(f"{k:<52} {v}")


if __name__ == "__main__":
    main()
