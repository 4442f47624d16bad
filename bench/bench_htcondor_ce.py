#!/usr/bin/env python3
"""B12: HTCondor-CE's path to a batch system, N pilots the usual way vs one grid job that jim splits.

    python bench/bench_htcondor_ce.py [--sizes "1 100 1000"] [--wait 60] [--only condor|jim]

Needs tests/services/htcondor/start.sh (as root); the bench installs jim as
the pool's BLAH backend ``jim`` itself.  It submits as ``$JIM_TEST_HTC_USER``
(default jimtest-condor): give it an account no test is using at the time
(``JIM_TEST_HTC_USER=jimtest-bob``), so that its gridmanager, its schedd
queries and its ``~/.blah/user.config`` are the bench's alone.

For each N, side by side in one run on the test pool (Condor-G, blahpd and
the local batch system are the same HTCondor 23.9 pool, in its chroot):

``batch condor``  N grid-universe jobs ``grid_resource = batch condor``
                  (``queue N``): Condor-G hands each to blahpd, which runs
                  BLAHP's own ``condor_submit.sh`` once per job; the N local
                  jobs are vanilla jobs in the pool.
``batch jim``     ONE grid-universe job ``grid_resource = batch jim`` whose
                  environment asks jim for N local jobs (Monte Carlo, N
                  events of one event per local job); jim, blahpd's backend inside the chroot,
                  submits them to the same pool with its ``condor`` adapter.

Every local job stays idle (a requirement no slot meets), so "queued" is
measured without running N jobs; every job is removed after each case.

Measured per case:

- **queued s**: from the start of ``condor_submit`` to all N local jobs in
  the schedd's queue (a ``condor_q`` as root every 0.25 s).
- **CE CPU s**: user+system CPU of the CE side -- the schedd, the
  gridmanager, blahpd and every process it ran (BLAHP's scripts, condor_submit,
  condor_q, jim), the job router, and jim's own detached processes (worker,
  monitor) -- from the submit until the end of the wait.  Method: every
  process whose root is the chroot and that descends from the pool's
  ``condor_master`` (or runs the chroot's jim) is read from
  ``/proc/PID/stat``: ``utime+stime`` of the process plus ``cutime+cstime``
  of the children it has reaped.  CPU in the window = that sum over the
  processes alive at the end, minus the same sum at the start, plus, for a
  process that ended and that no process of the pool reaped (jim's
  double-forked daemons end as children of init), its last sample (taken
  every second); a process alive at the start that ended and was reaped
  inside the pool has its start value subtracted (its whole life moved into
  its parent's cutime).  The bench's own ``condor_q`` calls are not the
  pool's children and are not counted; the schedd's work answering them is.
  The pool's collector, negotiator, startd and master are shown apart
  ("pool").
- **grid jobs / local jobs**: jobs of the case in the schedd: grid universe
  (what Condor-G, the CE, tracks) and vanilla (the local batch system's).
- **status per minute** while every local job waits (``--wait`` seconds):
  ``BLAH_JOB_STATUS`` commands the gridmanager sends blahpd (its log, at
  D_FULLDEBUG); the status programs the pool's processes start: ``condor_q``
  (BLAHP's ``condor_status.sh``) and ``jim <command>`` (jim's BLAH scripts),
  counted by sampling ``/proc`` every 0.1 s (a program shorter than that may
  be missed); and the job queries the schedd served to the test account
  (``QUERY_JOB_ADS`` in SchedLog, at D_COMMAND): BLAHP's condor_q, and jim's
  adapter's one user-wide query per ``cache_interval``.

For the jim half the bench installs jim as blahpd's backend (``jim
blah-install``) and gives blahpd's jim its own configuration (the ``condor``
adapter on this pool, the chroot's python, a home under /tmp) through the
account's ``~/.blah/user.config`` (``jim_config``), put back as it was at the
end.

Prints a table and the JSON (also written to bench/results/).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = Path(os.environ.get("JIM_TEST_HTC_ROOT", "/var/lib/jim-htcondor/root"))
STATE = Path(os.environ.get("JIM_TEST_HTC_STATE", "/var/lib/jim-htcondor/state"))
USER = os.environ.get("JIM_TEST_HTC_USER", "jimtest-condor")
CHROOT_JIM = "/opt/jim-venv/bin/jim"
LOGS = ROOT / "var/log/condor"
TICK = os.sysconf("SC_CLK_TCK")
NEVER = "(TARGET.JimBenchNever =?= true)"  # no slot has it: every local job stays idle
CATEGORIES = ("schedd", "gridmanager", "blahpd", "job_router", "jim", "pool")
CE_SIDE = ("schedd", "gridmanager", "blahpd", "job_router", "jim")
_DAEMONS = {
    "condor_schedd": "schedd",
    "condor_gridmana": "gridmanager",
    "blahpd": "blahpd",
    "condor_job_rout": "job_router",
    "condor_master": "pool",
    "condor_collecto": "pool",
    "condor_negotiat": "pool",
    "condor_startd": "pool",
    "condor_procd": "pool",
    "condor_shared_p": "pool",
    "condor_shadow": "schedd",
}


# ---------------------------------------------------------------- running things


def in_root(*argv: str, user: str | None = None, timeout: float = 600, stdin: str | None = None):
    """A command inside the pool's chroot, as ``user`` (runuser) or root; never through a shell."""
    cmd = ["chroot", str(ROOT), *(["runuser", "-u", user, "--"] if user else []), *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=stdin)


def condor_q(constraint: str, *attrs: str) -> list[list[str]]:
    """Jobs of every owner matching ``constraint``, one list of values per job (as root, inside the chroot)."""
    p = in_root("condor_q", "-allusers", "-constraint", constraint, "-af", *attrs, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"condor_q failed: {p.stderr.strip()}")
    return [line.split() for line in p.stdout.splitlines() if line.strip()]


def count(constraint: str) -> int:
    return len(condor_q(constraint, "ProcId"))


def remove(constraint: str, timeout: float = 900) -> None:
    """Remove every job matching ``constraint`` and wait until none is left (forcing the ones in X)."""
    in_root("condor_rm", "-constraint", constraint)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if count(constraint) == 0:
            return
        time.sleep(3)
        in_root("condor_rm", "-forcex", "-constraint", f"({constraint}) && JobStatus == 3")
    raise RuntimeError(f"jobs matching {constraint} still in the queue after {timeout} s")


# ---------------------------------------------------------------- CPU of the pool's processes


@dataclass
class Proc:
    pid: int
    ppid: int
    comm: str
    cpu: float  # utime+stime+cutime+cstime, seconds
    jim: bool


def _read(pid: int) -> Proc | None:
    try:
        if os.readlink(f"/proc/{pid}/root") != str(ROOT):
            return None
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    f = stat[stat.rindex(")") + 2 :].split()
    ticks = int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return Proc(pid, int(f[1]), comm, ticks / TICK, b"/opt/jim-venv/" in cmdline)


def snapshot() -> dict[int, Proc]:
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (p := _read(int(d))):
            procs[p.pid] = p
    return procs


def _pool(procs: dict[int, Proc]) -> dict[int, str]:
    """The pool's processes by category: the condor_master and its descendants (a daemon by its name,
    any other process by its nearest named ancestor's), and the chroot's jim wherever its parent is
    (jim's detached worker and monitor end up as init's children)."""
    out: dict[int, str | None] = {}

    def cat(pid: int, depth: int = 0) -> str | None:
        if pid in out:
            return out[pid]
        p = procs.get(pid)
        if p is None or depth > 64:
            return None
        if p.comm == "condor_master":
            c: str | None = "pool"
        elif p.jim:
            c = "jim"
        else:
            parent = cat(p.ppid, depth + 1)
            c = None if parent is None else _DAEMONS.get(p.comm, parent)
        out[pid] = c
        return c

    for pid in procs:
        cat(pid)
    return {pid: c for pid, c in out.items() if c is not None}


class CpuMeter:
    """CPU of the pool's processes between :meth:`start` and :meth:`stop` (see the module's docstring).

    Each process x counts ``final(x) - start(x)`` of utime+stime+cutime+cstime (``final``: its last
    sample; ``start``: 0 for a process born in the window), minus the last sample of every child that
    ended while x was its parent and before x's own last sample (that child's whole life is then in
    x's cutime, and the child counts its own part itself)."""

    def __init__(self) -> None:
        self.base: dict[int, float] = {}
        self.last: dict[int, tuple[str, float, int, int]] = {}  # pid -> (category, cpu, ppid, sample no.)
        self.n = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> dict[int, Proc]:
        self.n += 1
        procs = snapshot()
        cats = _pool(procs)
        for pid, c in cats.items():
            self.last[pid] = (c, procs[pid].cpu, procs[pid].ppid, self.n)
        return {pid: procs[pid] for pid in cats}

    def start(self) -> None:
        self.base = {pid: p.cpu for pid, p in self._sample().items()}
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self._sample()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self._sample()
        by: dict[str, float] = dict.fromkeys(CATEGORIES, 0.0)
        for pid, (c, cpu, _ppid, _n) in self.last.items():
            by[c] += cpu - self.base.get(pid, 0.0)
        for _pid, (_c, cpu, ppid, n) in self.last.items():
            parent = self.last.get(ppid)
            if n < self.n and parent is not None and n < parent[3]:  # ended, then its parent was sampled
                by[parent[0]] -= cpu
        return {k: round(v, 2) for k, v in by.items()}


# ---------------------------------------------------------------- counting status queries


class ProcessCounter:
    """Counts the status programs the pool's processes start while it runs (``/proc`` sampled every
    0.1 s, so a program shorter than that may be missed: the schedd's count is the exact one):
    ``condor_q`` (BLAHP's condor_status.sh), and jim by its command (``jim blah-status``, ...).
    The bench's own condor_q calls (its children) are left out."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, str], str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _label(words: list[str]) -> str | None:
        for i, w in enumerate(words[:3]):
            base = os.path.basename(w)
            if base == "condor_q":
                return "condor_q"
            if base == "jim" and w.startswith("/opt/jim-venv/"):
                rest = [a for a in words[i + 1 :] if not a.startswith("-")]
                return "jim " + (rest[0] if rest else "")
        return None

    def _run(self) -> None:
        me = str(os.getpid())
        while not self._stop.wait(0.1):
            for d in os.listdir("/proc"):
                if not d.isdigit():
                    continue
                try:
                    if os.readlink(f"/proc/{d}/root") != str(ROOT):
                        continue
                    argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
                    f = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if f[1] == me:
                    continue
                label = self._label([a.decode(errors="replace") for a in argv if a])
                if label:
                    self.seen[(int(d), f[19])] = label

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        counts: dict[str, int] = {}
        for label in self.seen.values():
            counts[label] = counts.get(label, 0) + 1
        return counts


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def log_since(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


# ---------------------------------------------------------------- the two ways


@dataclass
class Case:
    way: str
    n: int
    work: Path
    grid: str = ""  # constraint of the case's grid jobs
    local: str = ""  # constraint of its local jobs
    result: dict = field(default_factory=dict)


def submit_file(case: Case, tag: int, jim_env: str) -> str:
    w = case.work
    common = f"""universe = grid
executable = /bin/true
output = {w}/out.$(Process)
error = {w}/err.$(Process)
log = {w}/log
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
+JimBenchCase = {tag}
"""
    if case.way == "batch condor":
        return (
            common
            + f'grid_resource = batch condor\n+BatchExtraSubmitArgs = "requirements = {NEVER}\\n+JimBenchTag = {tag}"\n'
            + f"queue {case.n}\n"
        )
    return common + f'grid_resource = batch jim\nenvironment = "{jim_env.format(n=case.n)}"\nqueue 1\n'


def run_case(case: Case, tag: int, args: argparse.Namespace) -> dict:
    (case.work / "job.sub").write_text(submit_file(case, tag, args.jim_env))
    os.chown(case.work / "job.sub", *_ids())
    case.grid = f"JimBenchCase == {tag}"
    # batch condor: BLAHP's local jobs carry the tag (BatchExtraSubmitArgs); batch jim: jim's carry
    # JimGridJob, jim's grid job id, which blahpd's job id (the grid job's GridJobId) holds
    case.local = f"JimBenchTag == {tag}" if case.way == "batch condor" else ""
    gm_log, sched_log = LOGS / f"GridmanagerLog.{USER}", LOGS / "SchedLog"
    meter = CpuMeter()
    meter.start()
    t0 = time.monotonic()
    p = in_root("sh", "-c", f"cd {case.work} && exec condor_submit -terse job.sub", user=USER)
    if p.returncode != 0:
        meter.stop()
        raise RuntimeError(f"{case.way}: condor_submit failed: {p.stderr.strip()}")
    submitted = time.monotonic() - t0
    deadline = t0 + args.timeout
    n_local = 0
    while time.monotonic() < deadline:
        if held := condor_q(f"({case.grid}) && JobStatus == 5", "HoldReason"):
            raise RuntimeError(f"{case.way}: a grid job is held: {' '.join(held[0])}")
        if count(f"({case.grid}) && (JobStatus == 3 || JobStatus == 4)"):
            raise RuntimeError(f"{case.way}: a grid job ended before its local jobs were queued")
        if not case.local:
            case.local = jim_local_constraint(case.grid)
            if not case.local:
                time.sleep(0.25)
                continue
        n_local = count(case.local)
        if n_local >= case.n:
            break
        time.sleep(0.25)
    queued = time.monotonic() - t0
    if n_local < case.n:
        queued = float("nan")
    held = condor_q(f"({case.grid}) && JobStatus == 5", "HoldReason")
    grid_jobs, local_jobs = count(case.grid), count(case.local)
    # the wait: every local job idle, Condor-G and the backend polling
    gm0, sl0 = log_size(gm_log), log_size(sched_log)
    counter = ProcessCounter()
    counter.start()
    w0 = time.monotonic()
    time.sleep(args.wait)
    minutes = (time.monotonic() - w0) / 60
    progs = counter.stop()
    cpu = meter.stop()
    gahp = log_since(gm_log, gm0)
    sched = log_since(sched_log, sl0)
    status_cmds = len(re.findall(r"<- 'BLAH_JOB_STATUS", gahp))
    queries = len(re.findall(rf"command \d+ \(QUERY_JOB_ADS\w*\) from {re.escape(USER)}@", sched))
    res = {
        "way": case.way,
        "N": case.n,
        "condor_submit s": round(submitted, 2),
        "queued s": round(queued, 2),
        "local jobs queued": n_local,
        "grid jobs": grid_jobs,
        "local jobs": local_jobs,
        "held grid jobs": len(held),
        "hold reasons": sorted({" ".join(h) for h in held})[:3],
        "CE CPU s": round(sum(cpu[k] for k in CE_SIDE), 2),
        "CPU s by process": cpu,
        "wait min": round(minutes, 2),
        "BLAH_JOB_STATUS /min": round(status_cmds / minutes, 1),
        "status programs /min": {k: round(v / minutes, 1) for k, v in progs.items()},
        "schedd job queries /min": round(queries / minutes, 1),
    }
    t_clean = time.monotonic()
    remove(case.grid)
    remove(case.local)
    res["cleanup s"] = round(time.monotonic() - t_clean, 1)
    return res


JIM_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{8}\b")


def jim_local_constraint(grid: str) -> str:
    """The local jobs of the batch-jim grid job, once blahpd has its id (else "")."""
    for row in condor_q(grid, "GridJobId"):
        if m := JIM_ID.search(" ".join(row)):
            return f"JobUniverse == 5 && JimGridJob == {json.dumps(m.group(0))}"
    return ""


def _ids() -> tuple[int, int]:
    pw = pwd.getpwnam(USER)
    return pw.pw_uid, pw.pw_gid


def table(rows: list[dict]) -> str:
    head = (
        "way",
        "N",
        "queued s",
        "grid jobs",
        "local jobs",
        "CE CPU s",
        "BLAH_JOB_STATUS /min",
        "schedd job queries /min",
    )
    out = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        out.append(" | ".join(str(r.get(h, "")) for h in head))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1 100 1000", help='N values, e.g. "1 100 1000"')
    ap.add_argument("--wait", type=float, default=60.0, help="seconds to count status queries while jobs wait")
    ap.add_argument("--timeout", type=float, default=1200.0, help="most seconds to wait for N local jobs queued")
    ap.add_argument("--only", choices=("condor", "jim"), help="run one way only")
    ap.add_argument("--cache-interval", type=float, default=30.0, help="jim's [batch] cache_interval")
    ap.add_argument(
        "--jim-env",
        default="JIM_JOBTYPE=montecarlo JIM_EVENTS={n} JIM_EVENTSPERJOB=1",
        help="the batch-jim grid job's environment ({n} is N): what asks jim for N local jobs",
    )
    ap.add_argument(
        "--probe-interval",
        type=int,
        default=60,
        help="GRIDMANAGER_JOB_PROBE_INTERVAL while the bench runs (HTCondor's default, 60 s; the test pool's own is 5)",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (chroot, /proc of the pool's processes)")
    if not (STATE / "master.pid").exists():
        sys.exit("the HTCondor test pool is not running: tests/services/htcondor/start.sh")
    probe_config = ROOT / "etc" / "condor" / "config.d" / "99-jim-bench.config"
    probe_config.write_text(f"GRIDMANAGER_JOB_PROBE_INTERVAL = {int(args.probe_interval)}\n")
    probe_config.chmod(0o644)
    in_root("condor_reconfig")
    try:
        run_bench(args)
    finally:  # the pool's own configuration again
        probe_config.unlink(missing_ok=True)
        in_root("condor_reconfig")


def run_bench(args: argparse.Namespace) -> None:
    """Every case of ``args``, the results printed as a table and JSON."""
    sizes = [int(s) for s in args.sizes.replace(",", " ").split()]
    ways = [w for w in ("batch condor", "batch jim") if not args.only or w.endswith(args.only)]
    probe = in_root("condor_config_val", "GRIDMANAGER_JOB_PROBE_INTERVAL").stdout.strip()
    results: dict = {
        "machine": os.uname().nodename,
        "cpus": os.cpu_count(),
        "condor": in_root("condor_version").stdout.splitlines()[0],
        "GRIDMANAGER_JOB_PROBE_INTERVAL": probe,
        "wait s": args.wait,
        "cases": [],
    }
    base_tag = int(time.time())
    user_config = Path(pwd.getpwnam(USER).pw_dir) / ".blah" / "user.config"
    saved = user_config.read_bytes() if user_config.exists() else None
    try:
        if "batch jim" in ways:
            results["jim"] = install_jim(args, max(sizes), user_config)
        run_all(results, sizes, ways, base_tag, args)
    finally:  # the account's BLAH configuration as it was
        if saved is None:
            user_config.unlink(missing_ok=True)
        else:
            user_config.write_bytes(saved)
    print(table(results["cases"]))
    print(json.dumps(results, indent=2))
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / f"htcondor_ce-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(results, indent=2))


def install_jim(args: argparse.Namespace, most: int, user_config: Path) -> dict:
    """jim as blahpd's ``batch jim`` backend for the bench: its own home and configuration (the pool
    as its batch system, through the condor adapter; local jobs that never match a slot)."""
    # an IDTOKEN for the account: inside the chroot, FS authentication of the bindings' clients fails
    # ("Directory name doesn't match server's network address"), so jim's adapter needs the token
    token = Path(__file__).resolve().parent.parent / "tests" / "services" / "htcondor" / "token.sh"
    subprocess.run([str(token), USER], check=True)
    site = Path(tempfile.mkdtemp(prefix="jim-bench-ce-site-", dir="/tmp"))
    os.chown(site, *_ids())
    config = site / "jim.toml"
    config.write_text(
        f"""[jim]
home = "{site}/home"
[site]
max_local_jobs = {max(most, 1000)}
[batch]
adapter = "condor"
python = "/usr/bin/python3"
requirements = "{NEVER}"
cache_interval = {args.cache_interval}
"""
    )
    os.chown(config, *_ids())
    p = in_root(CHROOT_JIM, "blah-install", "--jim-command", CHROOT_JIM)
    if p.returncode != 0:
        raise SystemExit(f"jim blah-install failed: {p.stdout}{p.stderr}")
    # blahpd's jim reads jim_config from the account's ~/.blah/user.config (over /etc/blah.config)
    user_config.parent.mkdir(mode=0o755, exist_ok=True)
    os.chown(user_config.parent, *_ids())
    user_config.write_text(f"jim_config={config}\n")
    os.chown(user_config, *_ids())
    return {"config": config.read_text(), "jim": in_root(CHROOT_JIM, "--version").stdout.strip()}


def run_all(results: dict, sizes: list[int], ways: list[str], base_tag: int, args: argparse.Namespace) -> None:
    for i, n in enumerate(sizes):
        for j, way in enumerate(ways):
            work = Path(tempfile.mkdtemp(prefix="jim-bench-ce-", dir="/tmp"))
            os.chown(work, *_ids())
            case = Case(way, n, work)
            print(f"[{way} N={n}] ...", file=sys.stderr, flush=True)
            try:
                r = run_case(case, base_tag * 10 + i * 2 + j, args)
            except Exception as e:  # a case that fails is reported, and the others still run
                r = {"way": way, "N": n, "error": str(e)}
                for c in (case.grid, case.local):
                    if c:
                        remove(c)
            print(f"[{way} N={n}] {json.dumps(r)}", file=sys.stderr, flush=True)
            results["cases"].append(r)


if __name__ == "__main__":
    main()
