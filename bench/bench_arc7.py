#!/usr/bin/env python3
"""B13: N ARC jobs the usual way against one ARC job jim splits into N, on the ARC 7 test CE (as root).

    python bench/bench_arc7.py [--n 20 100] [--sleep 90] [--passes 3]

Needs tests/services/arc7 (its stop.sh and start.sh are run here to switch
modes). For each N, side by side in one run:

- **fork**: N jobs (``/bin/sh -c 'sleep S; : MARKER'``) in ONE ``arcsub`` to
  A-REX 7's own fork LRMS;
- **jim**: ONE Monte Carlo job of N events, one per local job, to A-REX 7
  with ``lrms=jim`` on jim's fork backend (its core slots raised to N, so
  that N local jobs may run at once, as A-REX's fork LRMS runs them).

Measured: seconds from the start of ``arcsub`` until N payload processes run
(the mapped account's ``sh`` processes whose command line holds the marker,
from ``/proc``), and until ``arcstat`` shows every job Finished; A-REX's CPU
over that time (user + system of its ``arched`` processes and the children
they reaped: the LRMS scripts and the info provider); and, while all N run,
``--passes`` runs of the LRMS's scan step by hand as A-REX runs it (root,
the runtime configuration, the control directory), each one's CPU (children's
rusage) and, for jim, the jim calls its log line counts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from support import arc as arc_ce  # noqa: E402

SERVICE = HERE.parent / "tests" / "services" / "arc7"
FORK_JOB = (
    '&(executable="/bin/sh")(arguments="-c" "sleep {sleep}; : {marker}")(jobname="b13-{i}")(walltime="30 minutes")'
)
JIM_JOB = (
    '&(executable="/bin/sh")(arguments="-c" "sleep {sleep}; : {marker}")(jobname="b13-jim")(walltime="30 minutes")'
    '(runtimeenvironment="ENV/JIM/MONTECARLO" "events={n}" "eventsperjob=1")'
)
TICK = os.sysconf("SC_CLK_TCK")


def restart(mode: str, cores: int) -> arc_ce.ArcCE:
    """The ARC 7 CE in ``mode``, restarted (jim's fork backend with ``cores`` core slots)."""
    subprocess.run([str(SERVICE / "stop.sh"), "--keep-mounts"], check=True, capture_output=True, timeout=300)
    env = {**os.environ, "JIM_TEST_ARC7_FORK_CORES": str(cores)}
    p = subprocess.run([str(SERVICE / "start.sh"), mode], env=env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"start.sh {mode} failed:\n{p.stdout}{p.stderr}")
    return arc_ce.connect("arc7", mode)


def arex_cpu(root: Path) -> float:
    """CPU seconds of the arched processes running in ``root`` and of the children they reaped."""
    total = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.readlink(d / "exe") != "/usr/sbin/arched" and not os.readlink(d / "exe").endswith("/sbin/arched"):
                continue
            if Path(os.readlink(d / "root")).resolve() != root.resolve():
                continue
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(fields[k]) for k in (11, 12, 13, 14))  # utime stime cutime cstime
    return total / TICK


def payloads(ce: arc_ce.ArcCE, marker: str) -> int:
    """The payload processes running: the mapped account's ``sh`` whose command line holds ``marker``."""
    n = 0
    for pid in ce.processes(marker):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "sh":
                n += 1
        except OSError:
            continue
    return n


def runtime_config(ce: arc_ce.ArcCE) -> str:
    for p in (ce.state / "run" / "arex.cfg", Path("/run/arc/arex.cfg")):
        if ce.host(p).is_file():
            return str(p)
    raise SystemExit("A-REX's runtime configuration not found")


def scan_passes(ce: arc_ce.ArcCE, lrms: str, passes: int) -> list[dict[str, object]]:
    """``passes`` runs of ``scan-<lrms>-job`` as A-REX runs it; CPU seconds and jim calls of each."""
    cfg = runtime_config(ce)
    argv = ["chroot", str(ce.root), "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
            f"/usr/share/arc/scan-{lrms}-job", "--config", cfg, str(ce.state / "control")]  # fmt: skip
    rows = []
    for _ in range(passes):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd="/")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        m = re.search(r"scan pass: (\d+) job\(s\) checked, (\d+) ended, (\d+) jim call", p.stderr)
        rows.append(
            {
                "seconds": round(time.monotonic() - t, 2),
                "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 3),
                "jim_calls": int(m.group(3)) if m else None,
            }
        )
    return rows


def submit_all(ce: arc_ce.ArcCE, name: str, texts: list[str]) -> list[arc_ce.ArcJob]:
    """ONE arcsub of the job descriptions; their jobs."""
    ce.proxy()
    d = ce.job_dir(name)
    paths = [str(ce.write(d, f"job{i}.xrsl", text)) for i, text in enumerate(texts)]
    p = ce.run("arcsub", "-C", ce.endpoint, "-T", "arcrest", *paths, cwd=d, timeout=3600)
    urls = re.findall(r"Job submitted with jobid: (\S+)", p.stdout)
    if len(urls) != len(texts):
        raise SystemExit(f"arcsub submitted {len(urls)} of {len(texts)}: {p.stdout[-2000:]}{p.stderr[-2000:]}")
    return [arc_ce.ArcJob(url, f"{name}-{i}", "", False) for i, url in enumerate(urls)]


def case(way: str, n: int, sleep: int, passes: int) -> dict[str, object]:
    mode = "fork" if way == "fork" else "jim-fork"
    ce = restart(mode, max(16, n))
    marker = f"b13{way}{n}x{int(time.time())}"
    if way == "fork":
        texts = [FORK_JOB.format(sleep=sleep, marker=marker, i=i) for i in range(n)]
    else:
        texts = [JIM_JOB.format(sleep=sleep, marker=marker, n=n)]
    cpu0 = arex_cpu(ce.root)
    t0 = time.monotonic()
    jobs = submit_all(ce, f"b13-{way}-{n}", texts)
    submitted = time.monotonic() - t0
    running = None
    deadline = t0 + sleep + 600
    while time.monotonic() < deadline:
        if payloads(ce, marker) >= n:
            running = time.monotonic() - t0
            break
        time.sleep(0.2)
    scans = scan_passes(ce, "fork" if way == "fork" else "jim", passes) if running is not None else []
    finished = None
    while time.monotonic() < deadline + sleep:
        states = [f.get("State", "") for f in ce.status(*jobs).values()]
        if len(states) == len(jobs) and all(s.startswith("Finished") for s in states):
            finished = time.monotonic() - t0
            break
        if any(s.split(" ")[0] in ("Failed", "Killed", "Deleted") for s in states):
            raise SystemExit(f"{way} N={n}: a job did not finish: {states}")
        time.sleep(2)
    cpu = arex_cpu(ce.root) - cpu0
    for k in range(0, len(jobs), 50):
        ce.clean(*jobs[k : k + 50])
    return {
        "way": way,
        "n": n,
        "arcsub_s": round(submitted, 1),
        "all_running_s": None if running is None else round(running, 1),
        "all_finished_s": None if finished is None else round(finished, 1),
        "arex_cpu_s": round(cpu, 1),
        "scan": scans,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[20, 100])
    ap.add_argument("--sleep", type=int, default=90, help="seconds each payload runs")
    ap.add_argument("--passes", type=int, default=3, help="scan runs timed while all N run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the bench restarts the ARC 7 test service")
    rows = [case(way, n, args.sleep, args.passes) for n in args.n for way in ("fork", "jim")]
    restart("jim-fork", 16)  # (the test service as the tests expect it)
    print(json.dumps(rows, indent=1))
    out = HERE / "results" / "bench_arc7.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
