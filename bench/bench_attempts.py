#!/usr/bin/env python3
"""What the attempts on record cost: one grid job of 10,000 local jobs, every local job with 1 attempt
vs 3 (two ended attempts as ``<attempt>`` elements, then the current one).

    python bench/bench_attempts.py [--local-jobs 10000] [--runs 30] [--passes 7] [--json]

Both records are made in process and side by side in this run (:func:`jim.record.new_record`, then per
local job: submitted, running, and for 3 attempts twice ended by a node failure and given another
attempt by :meth:`jim.record.LocalJob.new_attempt`, as the retry rule does); every current attempt is
RUNNING.  For each:

* ``jim poll --job-id ID``: wall time of the command (a subprocess, jim from a wheel install as at a
  site, see ``_site_install.py``), p50 and p99, and the p50 as a ratio to ``python3 -c pass``; the
  monitor lock is held meanwhile, so that poll finds the monitor alive and starts nothing;
* one monitoring pass, :func:`jim.monitor.refresh` in process (this checkout), against the
  in-memory batch system of the tests (``tests/support/fake_adapter.py``), with an empty memo (a
  pass that reads and applies the whole record, as after a monitor start and once a minute):
  with nothing changed, and with 10 % of the local jobs ended (DONE) in the batch system since;
  the record is put back as it was before each pass; and, for scale, a pass of the long-lived
  monitor, whose memo of the last pass lets it skip a grid job in which nothing changed;
* ``jim status ID --json``: wall time of the command, p50 and p99;
* the record's size in bytes (``db/<id>.xml``) and the poll summary's (``db/<id>.state``).

Reported: milliseconds, and each figure of 3 attempts as a ratio to the same figure of 1 attempt.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))  # the in-memory batch system of the tests
sys.path.insert(0, str(HERE))

from bench_cli import timed  # noqa: E402

from jim.background import monitor_lock  # noqa: E402
from jim.config import Config, parse  # noqa: E402
from jim.db import Database  # noqa: E402
from jim.jobid import new_job_id  # noqa: E402
from jim.locks import SingleInstance  # noqa: E402
from jim.memo import Memo  # noqa: E402
from jim.monitor import refresh  # noqa: E402
from jim.paths import Home  # noqa: E402
from jim.record import NewJob, new_record  # noqa: E402
from jim.safeio import atomic_write  # noqa: E402
from jim.site import Site  # noqa: E402
from jim.states import EndCause, Evidence, GramState, LocalState  # noqa: E402

from support.fake_adapter import FakeAdapter, FakeJob  # noqa: E402


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary(samples: list[float]) -> dict:
    return {
        "p50 ms": round(statistics.median(samples), 1),
        "p99 ms": round(pct(samples, 0.99), 1),
        "n": len(samples),
    }


def make_record(home: Path, n: int, attempts: int) -> tuple[Database, str, FakeAdapter]:
    """A grid job of ``n`` local jobs, each on its attempt ``attempts`` and RUNNING, the earlier ones
    ended by a node failure; the in-memory batch system shows every current attempt running."""
    db = Database(Home(home).ensure())
    fake = FakeAdapter(db.home)
    job_id = new_job_id()
    rec = new_record(
        job_id,
        NewJob(
            jobtype="generic",
            name="bench",
            owner="bench",
            adapter="fake",
            description={"executable": ["/bin/true"], "count": [str(n)]},
            source_format="rsl",
            source_text=f"&(executable=/bin/true)(count={n})",
            plan={"localJobs": n, "binding": "count"},
            explanation="bench",
            slices=[{} for _ in range(n)],
        ),
    )
    t0 = time.time() - 3600.0
    bid = 100000
    for lj in rec.local_jobs():
        for a in range(1, attempts + 1):
            at = t0 + 600.0 * (a - 1)
            lj.set_state(LocalState.SUBMITTING, at=at)
            lj.batch_id = str(bid)
            lj.set_state(LocalState.QUEUED, at=at + 1)
            lj.set("host", f"node{lj.index % 97:02d}")
            lj.set_state(LocalState.RUNNING, at=at + 10)
            if a < attempts:
                lj.set_state(
                    LocalState.FAILED,
                    evidence=Evidence.BATCH,
                    reason="NODE_FAIL (NodeDown); node failure (NODE_FAIL)",
                    at=at + 300,
                )
                lj.set("cause", EndCause.NODE_FAIL.value)
                lj.new_attempt(EndCause.NODE_FAIL.describe(), retry_after=at + 310, at=at + 300)
            else:
                fake.jobs[str(bid)] = FakeJob(lj.tag, LocalState.RUNNING)
            bid += 1
    rec.recompute()
    assert rec.state is GramState.ACTIVE and rec.retries() == n * (attempts - 1)
    db.create(rec)
    return db, job_id, fake


def monitor_pass(config: Config, db: Database, job_id: str, fake: FakeAdapter, original: bytes, ended: int) -> float:
    """One pass (ms) over the record as it was made, with ``ended`` local jobs DONE in the batch system."""
    atomic_write(db.home.record(job_id), original)
    bids = sorted(fake.jobs)
    for k, b in enumerate(bids):
        fake.jobs[b].state, fake.jobs[b].exit_code = LocalState.RUNNING, None
        if k < ended:
            fake.jobs[b].state, fake.jobs[b].exit_code = LocalState.DONE, 0
    fake.calls.clear()
    t = time.perf_counter()
    refresh(Site(config, db=db, adapter=fake))
    ms = (time.perf_counter() - t) * 1000
    counts = db.read(job_id).counts()
    assert counts.get("DONE", 0) == ended and counts.get("RUNNING", 0) == len(bids) - ended, counts
    return ms


def remembered(config: Config, db: Database, job_id: str, fake: FakeAdapter, original: bytes) -> Callable[[], float]:
    """A pass (ms) of the long-lived monitor, which remembers the last one (:class:`jim.monitor.Memo`):
    with nothing changed it skips the grid job without reading its record."""
    monitor_pass(config, db, job_id, fake, original, 0)
    memo, now = Memo(), time.time()
    refresh(Site(config, db=db, adapter=fake), memo=memo, now=now)

    def one() -> float:
        t = time.perf_counter()
        refresh(Site(config, db=db, adapter=fake), memo=memo, now=now)
        return (time.perf_counter() - t) * 1000

    return one


def _pass_args(site: tuple) -> tuple[Config, Database, str, FakeAdapter, bytes]:
    db, job_id, fake, config, _env, original, _mon = site
    return config, db, job_id, fake, original


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--local-jobs", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=30, help="runs of each command")
    ap.add_argument("--passes", type=int, default=7, help="monitoring passes of each kind")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n = args.local_jobs
    tmp = Path(tempfile.mkdtemp(prefix="jim-bench-"))
    from _site_install import jim_command

    jim = jim_command(tmp)
    cfg = tmp / "jim.toml"
    cfg.write_text(f"[site]\nmax_local_jobs = {max(n, 10000)}\n[retry]\nmax_attempts = 3\n")
    base = timed([jim[0], "-c", "pass"], n=args.runs)

    res: dict = {
        "machine": os.uname().nodename,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "local_jobs": n,
        "baseline python3 -c pass": summary(base),
    }
    names = {1: "1 attempt", 3: "3 attempts"}
    sites = {}
    for attempts in names:
        home = tmp / f"attempts{attempts}"
        db, job_id, fake = make_record(home, n, attempts)
        config = parse(
            {"site": {"max_local_jobs": max(n, 10000)}, "retry": {"max_attempts": 3}},
            env={"JIM_HOME": str(home)},
        )
        env = {**os.environ, "JIM_HOME": str(home), "JIM_CONFIG": str(cfg)}
        mon = SingleInstance(monitor_lock(home))  # poll finds the monitor alive; no local job awaits a worker:
        assert mon.acquire()  # nothing starts in the background
        sites[attempts] = (db, job_id, fake, config, env, db.home.record(job_id).read_bytes(), mon)
        timed([*jim, "status", job_id, "--json"], env=env, n=1)  # (warm-up: the page cache, lazy imports)
    # the two records take turns, run by run (and which goes first alternates): both see the same machine
    got: dict[int, dict[str, list[float]]] = {a: {} for a in names}

    def take(metric: str, rounds: int, measure) -> None:
        for r in range(rounds):
            for a in (1, 3) if r % 2 == 0 else (3, 1):
                got[a].setdefault(metric, []).append(measure(a))

    def command(*argv: str):
        return lambda a: timed([*jim, *(sites[a][1] if x == "ID" else x for x in argv)], env=sites[a][4], n=1)[0]

    take("jim poll", args.runs, command("poll", "--job-id", "ID"))
    take("jim status --json", args.runs, command("status", "ID", "--json"))
    take("monitor pass, nothing changed", args.passes, lambda a: monitor_pass(*_pass_args(sites[a]), 0))
    take("monitor pass, 10% ended", args.passes, lambda a: monitor_pass(*_pass_args(sites[a]), n // 10))
    kept = {a: remembered(*_pass_args(sites[a])) for a in names}
    take("monitor pass, nothing changed, memo kept", args.passes, lambda a: kept[a]())
    for a, name in names.items():
        db, job_id, *_rest, mon = sites[a]
        mon.release()
        res[name] = {metric: summary(samples) for metric, samples in got[a].items()}
        res[name]["jim poll"]["p50 ratio to python3 -c pass"] = round(
            statistics.median(got[a]["jim poll"]) / statistics.median(base), 2
        )
        res[name]["record bytes"] = len(sites[a][5])
        res[name]["summary bytes"] = db.home.summary(job_id).stat().st_size
    one, three = res["1 attempt"], res["3 attempts"]
    res["3 attempts / 1 attempt"] = {
        k: round(three[k]["p50 ms"] / one[k]["p50 ms"], 2) if isinstance(one[k], dict) else round(three[k] / one[k], 2)
        for k in one
    }
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_attempts.json").write_text(json.dumps(res, indent=2))
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(
            f"N = {n} local jobs, {res['cpus']} CPUs, Python {res['python']}; python3 -c pass p50 "
            f"{res['baseline python3 -c pass']['p50 ms']} ms"
        )
        print(f"{'':<54}{'1 attempt':>22}{'3 attempts':>22}{'ratio (p50)':>13}")
        for k in one:
            if isinstance(one[k], dict):
                cells = [f"{v['p50 ms']:>9.1f} / {v['p99 ms']:>8.1f} ms" for v in (one[k], three[k])]
                print(f"{k + ' (p50 / p99)':<54}{cells[0]:>22}{cells[1]:>22}{res['3 attempts / 1 attempt'][k]:>12}x")
            else:
                print(f"{k:<54}{one[k]:>22,}{three[k]:>22,}{res['3 attempts / 1 attempt'][k]:>12}x")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
