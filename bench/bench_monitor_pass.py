#!/usr/bin/env python3
"""What one pass of the per-user monitor costs, in process, at L = G x K local jobs.

    python bench/bench_monitor_pass.py [--grid-jobs 1000] [--local-jobs 100] [--passes 3] [--profile] [--json]

G records of K local jobs each are made in process (as ``bench_attempts.py`` makes one: every local job
QUEUED then RUNNING, its status in the tests' in-memory batch system, ``tests/support/fake_adapter.py``,
here made user-wide so that its answer goes through the shared status cache as Slurm's, Grid Engine's, PBS's
and HTCondor's do, with ``cache_interval`` 0.5 s: every timed pass below asks the batch system again; an
unchanged answer is the same object, as an unchanged ``squeue`` output is parsed once). Then
:func:`jim.monitor.refresh` is timed, with one long-lived memo (:class:`jim.memo.Memo`), as the monitor
runs it:

* **first pass**: every record read and applied (the monitor has just started);
* **nothing changed, answer cached**: passes within ``cache_interval`` (most of a real monitor's passes:
  one every ``interval``, 2 s, against one answer per 30 s), p50 / max of ``--passes``;
* **nothing changed, asked again**: the batch system answers the same again (p50 / max);
* **10 % finishing**: before the pass, a tenth of the local jobs (spread over every grid job) end DONE
  in the batch system;
* **next, nothing changed**: the pass after that;
* where this jim keeps grid jobs' credentials (:mod:`jim.credentials`), every grid job has one (a copy
  of its own front-end file, as GRAM's job manager keeps one per job), and **10 % of credentials
  refreshed**: before the pass, the front-end files of a tenth of the grid jobs are replaced by a longer
  one (each pass looks at every front-end file: one ``lstat`` per grid job).

The in-memory batch system's own query (building its answer) is part of each pass, as ``squeue`` would
be.  Wall time in seconds, and the process's peak RSS.  ``--profile`` runs the 10 % pass under cProfile
and prints the top 25 functions by own time (and the top 15 of one more pass that asked again with
nothing changed).  The figures are also written to ``bench/results/bench_monitor_pass.json``; to
compare with another commit, ``bench/compare.py --before REF bench_monitor_pass.py --json``.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import json
import os
import pstats
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(1, str(HERE.parent / "tests"))
sys.path.insert(1, str(HERE))

from jim.config import parse  # noqa: E402
from jim.db import Database  # noqa: E402
from jim.jobid import new_job_id  # noqa: E402
from jim.memo import Memo  # noqa: E402
from jim.monitor import refresh  # noqa: E402
from jim.paths import Home  # noqa: E402
from jim.record import NewJob, new_record  # noqa: E402
from jim.site import Site  # noqa: E402
from jim.states import LocalState  # noqa: E402

from support.fake_adapter import FakeJob, SameAnswerAdapter  # noqa: E402

try:  # (a jim that keeps credentials: every grid job gets one)
    from jim import credentials as creds
except ImportError:  # pragma: no cover - an earlier jim, in bench/compare.py
    creds = None  # type: ignore[assignment]


def proxy_pem(hours: float) -> bytes:
    """A certificate and its private key (what jim checks of a proxy), valid for ``hours``."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jim bench user")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=hours)).sign(key, hashes.SHA256())
    )  # fmt: skip
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM) + pem_key


def give_credentials(db: Database, sources: Path, pem: bytes) -> list[Path]:
    """Every grid job's front-end file (its own) and jim's copy of it."""
    sources.mkdir(exist_ok=True)
    files = []
    for job_id in db.active_ids():
        src = sources / f"{job_id}.pem"
        src.write_bytes(pem)
        src.chmod(0o600)
        db.home.job_dir(job_id).mkdir(mode=0o700, exist_ok=True)
        creds.install(db.home.job_dir(job_id), [creds.inspect(creds.Handed("x509", str(src)))])
        files.append(src)
    return files


class UserWide(SameAnswerAdapter):
    """The in-memory batch system, its answer shared through the status cache like a real batch system's;
    an answer that says what the last one said is the last one."""

    user_wide_query = True


def make_site(root: Path, grid_jobs: int, local_jobs: int) -> tuple[Database, UserWide]:
    db = Database(Home(root).ensure())
    fake = UserWide(db.home)
    fake.options = dataclasses.replace(fake.options, cache_interval=0.5)
    bid = 100000
    t0 = time.time() - 3600.0
    for _ in range(grid_jobs):
        rec = new_record(
            new_job_id(),
            NewJob(
                jobtype="generic",
                name="bench",
                owner="bench",
                adapter="fake",
                description={"executable": ["/bin/true"], "count": [str(local_jobs)]},
                source_format="rsl",
                source_text=f"&(executable=/bin/true)(count={local_jobs})",
                plan={"localJobs": local_jobs, "binding": "count"},
                explanation="bench",
                slices=[{} for _ in range(local_jobs)],
            ),
        )
        for lj in rec.local_jobs():
            lj.set_state(LocalState.SUBMITTING, at=t0)
            lj.batch_id = str(bid)
            lj.set_state(LocalState.QUEUED, at=t0 + 1)
            lj.set_state(LocalState.RUNNING, at=t0 + 10)
            fake.jobs[str(bid)] = FakeJob(lj.tag, LocalState.RUNNING)
            bid += 1
        rec.recompute()
        db.create(rec)
    return db, fake


def timed(config, db, fake, memo, *, ask: bool = True) -> float:
    if ask:
        time.sleep(0.6)  # (past the status cache's interval: the pass asks the batch system again)
    t = time.perf_counter()
    refresh(Site(config, db=db, adapter=fake), memo=memo)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid-jobs", type=int, default=1000)
    ap.add_argument("--local-jobs", type=int, default=100)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="jim-bench-pass-"))
    t = time.perf_counter()
    db, fake = make_site(tmp / "home", args.grid_jobs, args.local_jobs)
    sources = give_credentials(db, tmp / "proxies", proxy_pem(12)) if creds is not None else []
    built = time.perf_counter() - t
    config = parse({"site": {"max_local_jobs": max(args.local_jobs, 10000)}}, env={"JIM_HOME": str(tmp / "home")})
    memo = Memo()
    res: dict = {
        "local jobs": args.grid_jobs * args.local_jobs,
        "grid jobs x local jobs": f"{args.grid_jobs} x {args.local_jobs}",
        "jim": os.path.dirname(sys.modules["jim"].__file__ or ""),
        "cpus": os.cpu_count(),
        "made in s": round(built, 1),
    }
    res["first pass s"] = round(timed(config, db, fake, memo), 3)
    cached = [timed(config, db, fake, memo, ask=False) for _ in range(args.passes)]
    res["nothing changed, answer cached s"] = [round(statistics.median(cached), 4), round(max(cached), 4)]
    steady = [timed(config, db, fake, memo) for _ in range(args.passes)]
    prof_steady = cProfile.Profile() if args.profile else None
    if prof_steady is not None:  # one more of them, profiled (not in the figures)
        time.sleep(0.6)
        prof_steady.enable()
        refresh(Site(config, db=db, adapter=fake), memo=memo)
        prof_steady.disable()
    res["nothing changed, asked again s"] = [round(statistics.median(steady), 3), round(max(steady), 3)]
    random.seed(1)
    for b in random.sample(sorted(fake.jobs), len(fake.jobs) // 10):
        fake.jobs[b].state, fake.jobs[b].exit_code = LocalState.DONE, 0
    prof = cProfile.Profile() if args.profile else None
    if prof is not None:
        prof.enable()
    res["10 % finishing s"] = round(timed(config, db, fake, memo), 3)
    if prof is not None:
        prof.disable()
    res["next, nothing changed s"] = round(timed(config, db, fake, memo), 3)
    if sources:
        longer = proxy_pem(24)
        for src in random.sample(sources, max(1, len(sources) // 10)):
            tmp_src = src.with_suffix(".new")
            tmp_src.write_bytes(longer)
            tmp_src.chmod(0o600)
            tmp_src.rename(src)
        res["credentials"] = len(sources)
        res["10 % of credentials refreshed s"] = round(timed(config, db, fake, memo), 3)
        res["after the refresh, nothing changed s"] = round(timed(config, db, fake, memo), 3)
    res["peak RSS MB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    out = HERE / "results" / "bench_monitor_pass.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        for k, v in res.items():
            print(f"{k:<32} {v}")
    if prof_steady is not None:
        print("\n== nothing changed, asked again: top functions by own time")
        pstats.Stats(prof_steady).sort_stats("tottime").print_stats(15)
    if prof is not None:
        print("\n== 10 % finishing: top functions by own time")
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
