#!/usr/bin/env python3
"""HTCondor benchmarks B1-B2 on the real test pool, as the unprivileged test account.

    python bench/bench_condor.py [--sizes 100,1000] [--poll-minutes 1] [--cache-interval 30]

Needs the HTCondor test pool (tests/services/htcondor/start.sh; run as root: the
benchmark switches to the test account, whose jim is the installed one,
``$JIM_TEST_HTC_PYTHON`` or ``/opt/jim-test-venv/bin/python``).

B1  submit of N local jobs until all are queued: ``jim submit`` (until every
    local job has its batch id in jim's database: the worker's one
    ``Schedd.submit(count=N)`` plus jim's bookkeeping) vs one bare
    ``Schedd.submit(count=N)`` through the same bindings, as the same account.
    Every job is submitted held (``hold = true``) so nothing runs, and removed
    afterwards.
B2  job queries the schedd serves per minute while 10 grid jobs of 100 held
    local jobs each are polled every 10 s (``jim poll`` of every grid job, as
    10 GRAM job managers would), counted in the schedd's own log (the pool logs
    every QUERY_JOB_ADS command with who asked; another user of the test
    account at the same time adds to the count).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = Path(os.environ.get("JIM_TEST_HTC_ROOT", "/var/lib/jim-htcondor/root"))
STATE = Path(os.environ.get("JIM_TEST_HTC_STATE", "/var/lib/jim-htcondor/state"))
USER = os.environ.get("JIM_TEST_HTC_USER", "jimtest-condor")
PYTHON = os.environ.get("JIM_TEST_HTC_PYTHON", "/opt/jim-test-venv/bin/python")
SCHEDLOG = ROOT / "var" / "log" / "condor" / "SchedLog"

BARE = """
import sys, time, htcondor2
n, iwd = int(sys.argv[1]), sys.argv[2]
sub = htcondor2.Submit({"universe": "vanilla", "executable": "/bin/true", "transfer_executable": "false",
                        "initialdir": iwd, "hold": "true", "should_transfer_files": "NO", "output": "/dev/null",
                        "error": "/dev/null", "My.JimBench": '"bare"'})
t = time.perf_counter()
htcondor2.Schedd().submit(sub, count=n)
print(time.perf_counter() - t)
"""


class Bench:
    """The test account's side of the benchmark: its ids, environment, a private directory."""

    def __init__(self) -> None:
        pw = pwd.getpwnam(USER)
        self.uid, self.gid, self.home = pw.pw_uid, pw.pw_gid, pw.pw_dir
        self.base = Path(tempfile.mkdtemp(prefix="jim-bench-condor-", dir="/tmp"))
        os.chown(self.base, self.uid, self.gid)
        self.base.chmod(0o700)

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "HOME": self.home,
            "USER": USER,
            "LOGNAME": USER,
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "CONDOR_CONFIG": str(STATE / "condor_config.client"),
            **extra,
        }

    def run(self, argv: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            user=self.uid,
            group=self.gid,
            extra_groups=[],
            env=self.env(**extra),
            cwd=str(self.base),
            capture_output=True,
            text=True,
            timeout=1800,
        )

    def file(self, name: str, text: str) -> Path:
        path = self.base / name
        path.write_text(text)
        os.chown(path, self.uid, self.gid)
        return path

    def jim(self, home: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run([PYTHON, "-m", "jim", *args], JIM_HOME=str(home), JIM_CONFIG=str(config))

    def stop_monitors(self) -> None:
        """SIGKILL this benchmark's jim processes (found by their JIM_HOME under the base directory)."""
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(v.startswith(f"JIM_HOME={self.base}".encode()) for v in env):
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def remove_jobs(self) -> None:
        """Remove this benchmark's held jobs (as an admin inside the chroot; held jobs leave at once)."""
        constraint = f'Owner == "{USER}" && substr(Iwd, 0, {len(str(self.base))}) == "{self.base}"'
        subprocess.run(["chroot", str(ROOT), "condor_rm", "-constraint", constraint], capture_output=True)


def all_queued(home: Path, job_id: str, timeout: float = 1800) -> bool:
    """True once every local job has its batch id (jim's summary says none awaits submission)."""
    summary = home / "db" / f"{job_id}.state"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "#UNSUBMITTED=0\n" in summary.read_text():
                return True
        except OSError:
            pass
        time.sleep(0.005)
    return False


def queued(job_id: str) -> int:
    """How many jobs of this grid job the schedd holds (asked as an admin inside the chroot)."""
    p = subprocess.run(
        ["chroot", str(ROOT), "condor_q", "-allusers", "-constraint", f'JimGridJob == "{job_id}"', "-af", "ProcId"],
        capture_output=True,
        text=True,
    )
    return len(p.stdout.split())


def schedd_queries(since: int) -> int:
    with open(SCHEDLOG, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return sum("(QUERY_JOB_ADS)" in ln and f"from {USER}@" in ln for ln in text.splitlines())


def config(b: Bench, name: str, cache_interval: float) -> Path:
    return b.file(
        name,
        f"""
[site]
max_local_jobs = 20000
[batch]
adapter = "condor"
python = "/usr/bin/python3"
cache_interval = {cache_interval}
chunk_size = 10000
[batch.submit_commands]
hold = "true"
[monitor]
interval = 2.0
idle_exit = 600
""",
    )


def submit(b: Bench, home: Path, cfg: Path, n: int) -> str:
    p = b.jim(home, cfg, "submit", "--rsl", f"&(executable=/bin/true)(count={n})")
    assert "JOB_ID=" in p.stdout, p.stdout + p.stderr
    return p.stdout.split("JOB_ID=")[1].split()[0]


def b1(b: Bench, sizes: list[int], cache_interval: float) -> dict[str, dict[str, float]]:
    cfg = config(b, "b1.toml", cache_interval)
    rows = {}
    for n in sizes:
        row = {}
        bare = b.base / f"bare-{n}"
        bare.mkdir()
        os.chown(bare, b.uid, b.gid)
        p = b.run([PYTHON, "-c", BARE, str(n), str(bare)])
        assert p.returncode == 0, p.stderr
        row["bare Schedd.submit(count=N) s"] = round(float(p.stdout.split()[-1]), 3)
        b.remove_jobs()
        home = b.base / f"b1-{n}"
        t = time.perf_counter()
        job_id = submit(b, home, cfg, n)
        row["jim submit returns s"] = round(time.perf_counter() - t, 3)
        assert all_queued(home, job_id)
        row["jim until all queued s"] = round(time.perf_counter() - t, 3)
        row["in the queue (condor_q)"] = queued(job_id)
        assert row["in the queue (condor_q)"] == n, row
        row["jim overhead over bare submit s"] = round(
            row["jim until all queued s"] - row["bare Schedd.submit(count=N) s"], 3
        )
        time.sleep(2)  # the worker starts the monitor once it has recorded the batch ids: let it, then stop it
        b.stop_monitors()
        b.remove_jobs()
        rows[f"N={n}"] = row
        print(f"B1 N={n}: {row}", flush=True)
    return rows


def b2(b: Bench, minutes: float, cache_interval: float) -> dict[str, object]:
    cfg = config(b, "b2.toml", cache_interval)
    home = b.base / "b2"
    ids = [submit(b, home, cfg, 100) for _ in range(10)]
    for job_id in ids:
        assert all_queued(home, job_id)
    time.sleep(cache_interval + 1)
    start, t0, polls = SCHEDLOG.stat().st_size, time.time(), 0
    while time.time() - t0 < minutes * 60:
        cycle = time.time()
        for job_id in ids:
            b.jim(home, cfg, "poll", "--job-id", job_id)
            polls += 1
        time.sleep(max(0.0, 10 - (time.time() - cycle)))
    took = (time.time() - t0) / 60
    queries = schedd_queries(start)
    b.stop_monitors()
    b.remove_jobs()
    row = {
        "grid jobs": 10,
        "held local jobs each": 100,
        "poll period s": 10,
        "polls": polls,
        "minutes": round(took, 2),
        "schedd job queries": queries,
        "per minute": round(queries / took, 2),
        "cache_interval s": cache_interval,
        "one query per poll would be per minute": round(polls / took, 1),
    }
    print(f"B2: {row}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--poll-minutes", type=float, default=1.0)
    ap.add_argument("--cache-interval", type=float, default=30.0)
    args = ap.parse_args()
    if not (STATE / "condor_config.client").exists() or os.geteuid() != 0:
        sys.exit("needs the HTCondor test pool (tests/services/htcondor/start.sh) and root")
    b = Bench()
    try:
        results = {
            "machine": os.uname().nodename,
            "cpus": os.cpu_count(),
            "jim": PYTHON,
            "B1 submit until queued": b1(b, [int(x) for x in args.sizes.split(",") if x], args.cache_interval),
            "B2 schedd queries while polling": b2(b, args.poll_minutes, args.cache_interval),
        }
    finally:
        b.stop_monitors()
        b.remove_jobs()
        shutil.rmtree(b.base, ignore_errors=True)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_condor.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
