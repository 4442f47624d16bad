#!/usr/bin/env python3
"""Grid Engine benchmarks, side by side in one run.

    python bench/bench_sge.py [--n 1000] [--repeat 3] [--queued 4000] [--refreshes 20]

Needs the test cell (tests/services/sge/start.sh; run as root).

S1  submit of N local jobs until all are queued: ``jim submit`` (until every
    local job has its batch id in jim's database: the worker's one
    ``qsub -t 1-N`` plus jim's bookkeeping) vs one bare ``qsub -terse -t 1-N``
    of the same kind of job script, and vs separate ``qsub`` calls (timed for
    100, as the per-job cost).  Every job is submitted held (``-h``) so that
    nothing runs, and deleted afterwards (``qdel``).
S2  the cost of one status refresh with 4,000 local jobs queued (jim's own:
    4 grid jobs of 1,000 held local jobs): the adapter's query (one
    ``qstat -u USER -xml -g d`` + lxml parse), split into command and parse,
    next to a bare ``qstat`` (text) of the same queue; and one whole monitor
    pass over the 4 grid jobs (query, compare, nothing changed; and the first
    pass, which reads every record).

jim runs from a wheel install, as at a site (see _site_install.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _site_install import site_python  # noqa: E402

STATE = Path(os.environ.get("JIM_TEST_SGE_STATE", "/var/tmp/jim-test-sge"))
USER = os.environ.get("USER") or __import__("getpass").getuser()


def sge_env() -> dict[str, str]:
    env_sh = STATE / "env.sh"
    if not env_sh.exists():
        sys.exit("the test cell is not running: tests/services/sge/start.sh")
    p = subprocess.run(["bash", "-c", f'. "{env_sh}" && env -0'], capture_output=True, check=True)
    env = dict(line.split("=", 1) for line in p.stdout.decode().split("\0") if "=" in line)
    return {
        **os.environ,
        **{
            k: env[k]
            for k in ("SGE_ROOT", "SGE_CELL", "SGE_QMASTER_PORT", "SGE_EXECD_PORT", "SGE_ARCH", "PATH")
            if k in env
        },
    }


def ms(samples: list[float]) -> dict:
    s = sorted(samples)
    return {
        "median ms": round(statistics.median(s) * 1000, 1),
        "min ms": round(s[0] * 1000, 1),
        "max ms": round(s[-1] * 1000, 1),
        "n": len(s),
    }


#: grid job ids this run submitted (their array jobs are named jim.<grid id>.<offset>)
GRIDS: list[str] = []


def _ours(name: str) -> bool:
    return name.startswith("bench-") or any(name.startswith(f"jim.{g}.") for g in GRIDS)


def bench_jobs(env) -> list[str]:
    """Job ids of this run's jobs in qstat (other jobs in the cell are never touched)."""
    from lxml import etree

    p = subprocess.run(["qstat", "-u", USER, "-xml"], env=env, capture_output=True, check=True)
    return sorted(
        {
            jl.findtext("JB_job_number")
            for jl in etree.fromstring(p.stdout).iter("job_list")
            if _ours(jl.findtext("JB_name") or "")
        },
        key=int,
    )


def qdel_all(env) -> None:
    """Delete this run's jobs and wait until qstat has none of them."""
    ids = bench_jobs(env)
    if ids:
        subprocess.run(["qdel", *ids], env=env, capture_output=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not bench_jobs(env):
            return
        time.sleep(0.3)
    raise SystemExit(f"jobs still in qstat after qdel: {bench_jobs(env)}")


def all_queued(env, job_id, timeout=600) -> bool:
    """True once every local job has its batch id (jim's poll summary says none awaits submission).

    Reads the one-line summary file directly: watching must not load the machine it measures.
    """
    summary = Path(env["JIM_HOME"]) / "db" / f"{job_id}.state"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "#UNSUBMITTED=0\n" in summary.read_text():
                return True
        except OSError:
            pass
        time.sleep(0.005)
    return False


def jim_submit(py, env, n) -> tuple[str, float, float]:
    t = time.perf_counter()
    p = subprocess.run(
        [py, "-m", "jim", "submit", "--rsl", f"&(executable=/bin/true)(count={n})"],
        env=env,
        capture_output=True,
        text=True,
        cwd="/",
    )
    returned = time.perf_counter() - t
    assert "JOB_ID=" in p.stdout, p.stdout + p.stderr
    job_id = p.stdout.split("JOB_ID=")[1].split()[0]
    GRIDS.append(job_id)
    assert all_queued(env, job_id), f"grid job {job_id} not queued"
    return job_id, returned, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="local jobs per grid job in S1")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions of each S1 measurement")
    ap.add_argument("--separate", type=int, default=100, help="separate qsub calls timed in S1")
    ap.add_argument("--queued", type=int, default=4000, help="local jobs queued in S2 (multiple of 1000)")
    ap.add_argument("--refreshes", type=int, default=20, help="timed refreshes in S2")
    args = ap.parse_args()
    env = sge_env()
    from bench_cli import kill_background  # only processes carrying our own JIM_HOME

    tmp = Path(tempfile.mkdtemp(prefix="jim-bench-sge-"))
    py = site_python(tmp)
    cfg = tmp / "jim.toml"
    cfg.write_text("""
[site]
max_local_jobs = 20000
[batch]
adapter = "sge"
qsub_options = ["-h"]
cache_interval = 30.0
chunk_size = 1000
python = "python3"
[monitor]
interval = 60.0
idle_exit = 600
""")
    version = subprocess.run(["qstat", "-help"], env=env, capture_output=True, text=True).stdout.splitlines()
    results: dict = {
        "machine": os.uname().nodename,
        "cpus": os.cpu_count(),
        "grid engine": version[0].strip() if version else "?",
        "command": " ".join(["bench/bench_sge.py"] + sys.argv[1:]),
        "load average at start": [round(x, 2) for x in os.getloadavg()],
    }
    script_dir = tmp / "bare"
    script_dir.mkdir()
    script = script_dir / "job.sh"
    script.write_text("#!/bin/sh\nexec python3 /dev/null --index-env SGE_TASK_ID --index-offset -1\n")
    script.chmod(0o755)
    bare = ["qsub", "-terse", "-h", "-C", "", "-S", "/bin/sh", "-wd", str(script_dir), "-o", "/dev/null", "-j", "y"]

    # ---- S1 -------------------------------------------------------------
    n = args.n
    qdel_all(env)
    bare_t, jim_ret, jim_t = [], [], []
    for k in range(args.repeat):
        t = time.perf_counter()
        p = subprocess.run(
            bare + ["-t", f"1-{n}", "-N", f"bench-bare-{k}", str(script)], env=env, capture_output=True, text=True
        )
        bare_t.append(time.perf_counter() - t)
        assert p.returncode == 0, p.stderr
        qdel_all(env)
        home = tmp / f"s1-{k}"
        jenv = {**env, "JIM_HOME": str(home), "JIM_CONFIG": str(cfg)}
        _job, returned, queued = jim_submit(py, jenv, n)
        jim_ret.append(returned)
        jim_t.append(queued)
        kill_background(home)
        qdel_all(env)
        print(
            f"S1 run {k}: bare qsub -t 1-{n} {bare_t[-1]:.3f} s, jim until all queued {queued:.3f} s "
            f"(submit returned after {returned:.3f} s)",
            flush=True,
        )
    t = time.perf_counter()
    for k in range(args.separate):
        subprocess.run(bare + ["-N", f"bench-sep-{k}", str(script)], env=env, capture_output=True, check=True)
    sep = time.perf_counter() - t
    qdel_all(env)
    med_bare, med_jim = statistics.median(bare_t), statistics.median(jim_t)
    results[f"S1 submit of N={n} until all queued"] = {
        f"bare qsub -t 1-{n} s": round(med_bare, 3),
        "jim submit returns s": round(statistics.median(jim_ret), 3),
        "jim until all queued s": round(med_jim, 3),
        "jim overhead over bare array s": round(med_jim - med_bare, 3),
        "jim / bare": round(med_jim / med_bare, 1),
        f"{args.separate} separate qsub s": round(sep, 3),
        "separate qsub per job ms": round(sep / args.separate * 1000, 1),
        "N separate qsub (extrapolated) s": round(sep / args.separate * n, 1),
        "N separate / jim (extrapolated)": round(sep / args.separate * n / med_jim, 1),
        "samples": {"bare s": [round(x, 3) for x in bare_t], "jim s": [round(x, 3) for x in jim_t]},
    }
    print(f"S1: {results[f'S1 submit of N={n} until all queued']}", flush=True)

    # ---- S2 -------------------------------------------------------------
    grids = args.queued // 1000
    home = tmp / "s2"
    jenv = {**env, "JIM_HOME": str(home), "JIM_CONFIG": str(cfg)}
    ids = [jim_submit(py, jenv, 1000)[0] for _ in range(grids)]
    kill_background(home)  # no monitor of its own while we measure
    from jim.adapters.sge import SgeAdapter, parse_qstat
    from jim.config import load
    from jim.db import Database
    from jim.memo import Memo
    from jim.monitor import refresh
    from jim.paths import Home
    from jim.site import Site

    queued = parse_qstat(
        subprocess.run(["qstat", "-u", USER, "-xml", "-g", "d"], env=env, capture_output=True, check=True).stdout
    )
    in_queue = sum(1 for st in queued.values() if st.tag.rsplit(".", 1)[0] in ids)
    assert in_queue == args.queued, f"{in_queue} of our tasks in qstat"

    old = dict(os.environ)
    os.environ.update(env)
    try:
        adapter = SgeAdapter(Home(home).ensure(), {"cache_interval": 0})
        cmd = adapter.status_argv()
        cmd_t, parse_t, query_t, text_t = [], [], [], []
        xml = b""
        for _ in range(args.refreshes):
            t = time.perf_counter()
            xml = subprocess.run(cmd, capture_output=True, check=True).stdout
            cmd_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            statuses = parse_qstat(xml)
            parse_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            res = adapter.query([])
            query_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run(["qstat", "-u", USER, "-g", "d"], capture_output=True, check=True)
            text_t.append(time.perf_counter() - t)
        assert res.ok and len(statuses) >= args.queued
        # one whole monitor pass (cache_interval 0: a fresh qstat every pass)
        cfg2 = tmp / "jim-s2.toml"
        cfg2.write_text(cfg.read_text().replace("cache_interval = 30.0", "cache_interval = 0.0"))
        os.environ.update({"JIM_HOME": str(home), "JIM_CONFIG": str(cfg2)})
        config = load()
        db = Database(Home(home), config.deadlines.lock)
        memo = Memo()
        t = time.perf_counter()
        active = refresh(Site(config, db=db, adapter=adapter), memo=memo)
        first = time.perf_counter() - t
        assert active == grids
        passes = []
        for _ in range(args.refreshes):
            t = time.perf_counter()
            refresh(Site(config, db=db, adapter=adapter), memo=memo)
            passes.append(time.perf_counter() - t)
        st = db.read(ids[0])
        assert {lj.state.value for lj in st.local_jobs()} == {"HELD"}
    finally:
        os.environ.clear()
        os.environ.update(old)
    results[f"S2 one status refresh with {args.queued} local jobs queued"] = {
        "our tasks in qstat": in_queue,
        "jim's tasks in qstat (all)": len(queued),
        "qstat -xml bytes": len(xml),
        "qstat -u USER -xml -g d (command)": ms(cmd_t),
        "lxml parse": ms(parse_t),
        "adapter query = command + parse": ms(query_t),
        "bare qstat -u USER -g d (text), for comparison": ms(text_t),
        "monitor pass, first (reads every record)": round(first * 1000, 1),
        "monitor pass, nothing changed": ms(passes),
    }
    print(f"S2: {results[f'S2 one status refresh with {args.queued} local jobs queued']}", flush=True)
    qdel_all(env)
    results["load average at end"] = [round(x, 2) for x in os.getloadavg()]
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_sge.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
