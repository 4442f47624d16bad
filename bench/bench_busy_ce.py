#!/usr/bin/env python3
"""B10, a busy CE: what the per-user monitor costs as the number L of local jobs a user has grows.

    python bench/bench_busy_ce.py [--scenarios 10x100,100x100,1000x100,10x10000,1000x100/10]
                                  [--minutes 1] [--finish-passes 3] [--runs 30] [--profile] [--json]

A scenario ``GxK`` is G grid jobs of K local jobs each (L = G*K); ``GxK/U`` spreads them over U users.
Every scenario starts from nothing: jim's Slurm adapter against the project's fake Slurm
(``tests/fake_sched``: real ``sbatch squeue sacct scancel scontrol`` executables first on PATH, its
state in ``$FAKE_SCHED_DIR``), told to start nothing (fault ``cpus = 0``), so every local job stays
queued until this benchmark ends it, as the controller would (the fake's ``fake-sched end ID
COMPLETED``, done for many tasks at once under the fake's lock).  The U "users" are U jim homes, each
with its own fake controller, all run at once as this one Unix user (``squeue -u`` of one Unix user
sees everything on one controller; one controller per home gives each monitor only its own user's
jobs, as at a site).  The fake's commands run with its accounting records indexed and its state
written unindented (``FAST_FAKE``: as they are, they take minutes per command at L = 100,000;
``--plain-fake`` runs them so), and ended
tasks stay in ``squeue`` (fault ``min_job_age = 3600``; Slurm's MinJobAge is 300 s by default).

Per scenario:

* **submit**: the G ``jim submit --rsl '&(executable=/bin/true)(count=K)'`` run one after the other
  (jim from a wheel install, as at a site: ``_site_install.py``); their detached workers submit the
  arrays; "until batch ids" is from the first submit until every grid job's poll summary says no
  local job awaits submission.  At most ``--max-backlog`` grid jobs wait for their worker at once
  (the next submit waits): G workers at once would exhaust this machine, not measure jim.
* **the monitor**: per user, ``jim _monitor``'s own loop (:func:`jim.monitor.run`, its lock, its memo,
  its interval) in a process of its own, started before the first submit, with a clock around each
  pass (``jim.monitor.refresh`` wrapped in that process; the time spent in batch commands, which here
  is mostly the fake controller's, is counted apart).  The real ``jim _monitor`` cannot be timed per
  pass; this is the same code in the same kind of process.
* **steady, nothing changing** (``--minutes``): pass wall time p50 / max (the max is the pass that
  looks at every grid job again, once a minute), the monitors' CPU seconds per minute (utime+stime of
  ``/proc/<pid>/stat``, children excluded), peak RSS (``VmHWM``, the largest monitor), bytes written
  per minute (``/proc/<pid>/task/*/io``, the monitor's own threads: ``wchar``, every write() it makes,
  and ``write_bytes``, what reached the disk; ``/proc/<pid>/io`` would add the batch commands'; the
  pass log this benchmark keeps is taken off ``wchar``),
  batch commands per minute (the fake controller's event log, one line per command run);
* **10 % finishing per pass** (``--finish-passes``): before each, 10 % of every grid job's local jobs
  end COMPLETED in the batch system; the time of the pass that applies it (the first whose status
  query came back after the fake's state said so);
* ``jim poll --job-id`` p50 / p99 against ``python3 -c pass`` (the same python, run by turns with the
  polls), while the monitors run.

At the end the growth exponents: the slope of log(pass time, nothing changing: p50 and max, whole and
jim's own, i.e. without the time in batch commands) and of log(CPU seconds per minute) against log(L),
least squares over the one-user scenarios.

``--profile``: after the largest scenario (L = 100,000 with the defaults) its monitors are stopped and
one full pass (an empty memo: every record read and written, as after a monitor start) of the first
user's home is run under cProfile in this process (this checkout's jim), then the next pass (the memo
kept, nothing changed); the top 25 functions of each by cumulative and by total time are printed.

``--quiet-submit``: no monitor runs while the workers submit (the benchmark holds the monitor's lock);
the timed monitor starts once every batch id is recorded.  The fake controller does every command under
one lock, loading and writing its whole state: at L = 100,000 a monitor asking every 2 s keeps it busy,
and the workers' ``sbatch`` time out (jim then reconciles by tag and waits).

Results go to ``bench/results/bench_busy_ce.json``, merged with the scenarios already there (each keeps
the settings and date of its run; ``--fresh`` starts anew), or ``--results FILE``; ``--json`` prints them
too.  The growth exponents are fitted over every scenario in the file.

``--jim-source DIR`` measures the jim of another checkout (a ``git worktree`` of an older commit), with this
checkout's benchmark and fake Slurm: before and after on one machine, one after the other, e.g.
``git worktree add /tmp/before REV`` then ``--jim-source /tmp/before --results bench/results/before.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "fake_sched"))

from _site_install import jim_command, site_python  # noqa: E402
from bench_cli import timed  # noqa: E402

FAKE_BIN = REPO / "tests" / "fake_sched" / "bin"
RESULTS = HERE / "results" / "bench_busy_ce.json"
FAKE_COMMANDS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "fake-sched")

#: The fake's commands, with its accounting records indexed (its own ``sync_acct`` scans every record
#: for each task it touches: quadratic in the jobs it holds, minutes per command at L = 100,000) and its
#: state written without indentation (indented JSON takes the pure-Python encoder: 15 s per command at
#: 45,000 tasks); the answers are the same.
FAST_FAKE = r"""#!/usr/bin/env python3
import json, os, sys
sys.path.insert(0, @FAKE_DIR@)
import fakesched

linear = fakesched.Sched.sync_acct

def sync_acct(self, job, t, task):
    if task.get("vanished"):
        return
    acct = self.state["acct"]
    if getattr(self, "_indexed", None) is not acct:
        self._index = {(r["id"], r["task"], r["submit"]): r for r in acct}
        self._submits = {r["id"]: r["submit"] for r in acct}
        self._indexed = acct
    key = (job["id"], t if job["array"] else None, job["submit"])
    r = self._index.get(key)
    if r is not None:
        r.update({k: v for k, v in self.acct_record(job, t, task).items() if k != "purged"})
    elif self._submits.get(job["id"], job["submit"]) != job["submit"]:  # an id handed out again: the fake's
        # own order of records
        linear(self, job, t, task)
        self._indexed = None
    else:
        r = self.acct_record(job, t, task)
        acct.append(r)
        self._index[key] = r
        self._submits[job["id"]] = job["submit"]


def _save(self, name, data):  # the same JSON, without indentation (the C encoder: 10x faster)
    path = os.path.join(self.dir, name)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)

fakesched.Sched.sync_acct = sync_acct
fakesched.Sched._save = _save
sys.exit(fakesched.main(os.path.basename(sys.argv[0]), sys.argv[1:]))
"""


def fast_fake(d: Path) -> Path:
    """A directory of the fake's commands with indexed accounting (see :data:`FAST_FAKE`)."""
    d.mkdir(parents=True, exist_ok=True)
    for cmd in FAKE_COMMANDS:
        (d / cmd).write_text(FAST_FAKE.replace("@FAKE_DIR@", repr(str(REPO / "tests" / "fake_sched"))))
        (d / cmd).chmod(0o755)
    return d


#: The monitor's own loop, with a clock around each pass (run by the site install's python).
MONITOR = r"""
import json, sys, time
import jim.monitor as m
from jim.adapters import base
from jim.config import load

out = open(sys.argv[1], "a", buffering=1)
in_batch = [0.0]
run_command = base.CommandAdapter.run

queried = [None]

def counted(self, *a, **kw):
    t = time.perf_counter()
    try:
        return run_command(self, *a, **kw)
    finally:
        in_batch[0] += time.perf_counter() - t
        queried[0] = queried[0] or time.time()  # when the pass's status query came back

base.CommandAdapter.run = counted
refresh = m.refresh

def timed_refresh(*a, **kw):
    in_batch[0], queried[0] = 0.0, None
    start, t, c = time.time(), time.perf_counter(), time.process_time()
    active = refresh(*a, **kw)
    out.write(json.dumps({"start": start, "wall": time.perf_counter() - t, "cpu": time.process_time() - c,
                          "batch": in_batch[0], "queried": queried[0], "active": active}) + "\n")
    return active

m.refresh = timed_refresh
sys.exit(m.run(load()))
"""


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def proc_stats(pid: int) -> dict[str, float]:
    """CPU seconds (self), VmHWM bytes, wchar and write_bytes of a live process."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    out = {"cpu": (int(fields[11]) + int(fields[12])) / tick}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            out["hwm"] = int(line.split()[1]) * 1024
    out["wchar"] = out["write_bytes"] = 0
    for task in Path(f"/proc/{pid}/task").iterdir():  # per thread: /proc/<pid>/io adds the reaped children's
        for line in (task / "io").read_text().splitlines():  # (the batch commands') writes
            k, v = line.split(":")
            if k in ("wchar", "write_bytes"):
                out[k] += int(v)
    return out


class User:
    """One jim home with its own fake controller and its own timed monitor."""

    def __init__(self, root: Path, config: Path, base_env: dict[str, str], fake_bin: Path):
        self.home = root / "home"
        self.sched = root / "sched"
        self.sched.mkdir(parents=True)
        # nothing starts; an ended task stays in squeue (Slurm's MinJobAge is 300 s by default)
        (self.sched / "faults.json").write_text(json.dumps({"cpus": 0, "min_job_age": 3600}))
        self.passes = root / "passes.jsonl"
        self.env = {
            **base_env,
            "JIM_HOME": str(self.home),
            "JIM_CONFIG": str(config),
            "FAKE_SCHED_DIR": str(self.sched),
            "PATH": f"{fake_bin}:{base_env['PATH']}",
        }
        self.jobs: list[str] = []
        self.locked_at = 0.0
        self.monitor: subprocess.Popen | None = None

    def start_monitor(self, py: str) -> None:
        self.monitor = subprocess.Popen(
            [py, "-c", MONITOR, str(self.passes)],
            env=self.env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.passes.with_suffix(".err"), "w"),  # (kept for the process's life)
        )
        lock = self.home / "locks" / "monitor.lock"
        deadline = time.monotonic() + 30
        while not (lock.exists() and self.pass_log()) and time.monotonic() < deadline:
            time.sleep(0.05)  # its lock taken and a first pass made: no worker starts another monitor

    def stop_monitor(self) -> None:
        if self.monitor is not None and self.monitor.poll() is None:
            self.monitor.send_signal(signal.SIGTERM)
            try:
                self.monitor.wait(30)
            except subprocess.TimeoutExpired:
                self.monitor.kill()
                self.monitor.wait()

    def pass_log(self) -> list[dict]:
        try:
            return [json.loads(x) for x in self.passes.read_text().splitlines() if x.endswith("}")]
        except OSError:
            return []

    def unsubmitted(self, job_id: str) -> bool:
        try:
            return "#UNSUBMITTED=0\n" not in (self.home / "db" / f"{job_id}.state").read_text()
        except OSError:
            return True

    def batch_commands(self, since: float, until: float) -> int:
        n = 0
        try:
            with open(self.sched / "events.log") as f:
                for line in f:
                    e = json.loads(line)
                    if "cmd" in e and since <= e["t"] < until:
                        n += 1
        except OSError:
            pass
        return n

    def end_tenth(self, k: int) -> int:
        """End COMPLETED, in the batch system, every queued task whose index is ``k`` mod 10 (10 % of
        every grid job's local jobs): the fake's ``fake-sched end ID COMPLETED`` for all of them at once."""
        from fakesched import Sched, now  # (lazy: needs the fake's directory on sys.path, set above)

        s = Sched(str(self.sched))
        s._save = lambda name, data: _save_flat(s.dir, name, data)
        self.locked_at = time.time()  # a status query that returns after this saw the tasks ended
        try:
            acct = {(r["id"], r["task"], r["submit"]): r for r in s.state["acct"]}
            n = 0
            t_now = now()
            for job, t, task in s.tasks():
                if task["state"] == "PENDING" and t % 10 == k:
                    task.setdefault("history", []).append(task["state"])
                    task.update(state="COMPLETED", exit="0:0", end=t_now, reason="None")
                    r = acct.get((job["id"], t if job["array"] else None, job["submit"]))
                    if r is not None:
                        r.update({k2: v for k2, v in s.acct_record(job, t, task).items() if k2 != "purged"})
                    n += 1
            s.event(ended_by_bench=n)
            return n
        finally:
            s.close()


def _save_flat(directory: str, name: str, data: object) -> None:
    """The fake's state written as its commands here write it (see :data:`FAST_FAKE`)."""
    path = os.path.join(directory, name)
    tmp = f"{path}.{os.getpid()}.tmp"
    Path(tmp).write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


def wait_passes(users: list[User], after: float, timeout: float = 900.0, key: str = "start") -> list[dict]:
    """The first pass of every user's monitor that started (``key``: whose status query came back)
    after ``after``."""
    deadline = time.monotonic() + timeout
    got: dict[int, dict] = {}
    while len(got) < len(users) and time.monotonic() < deadline:
        for i, u in enumerate(users):
            if i not in got:
                p = [x for x in u.pass_log() if (x.get(key) or 0) > after]
                if p:
                    got[i] = p[0]
        time.sleep(0.1)
    if len(got) < len(users):
        raise RuntimeError("a monitor made no pass in time (see its passes.err)")
    return list(got.values())


def run_scenario(name: str, args, tmp: Path, py: str, jim: list[str]) -> dict:
    spec, _, u = name.partition("/")
    g, k = (int(x) for x in spec.split("x"))
    n_users = int(u or 1)
    root = tmp / name.replace("/", "-by-")
    root.mkdir()
    cfg = root / "jim.toml"
    cfg.write_text(
        f"""
[site]
max_local_jobs = {max(k, 10000)}
[batch]
adapter = "slurm"
partition = "debug"
cache_interval = {args.cache_interval}
[monitor]
interval = {args.interval}
idle_exit = 3600
"""
    )
    # (without PYTHONUNBUFFERED: the fake's commands are Python, and unbuffered their output reaches the
    # monitor a line per write, where squeue's stdio writes blocks; at 100,000 lines reading it so costs
    # the monitor four times the CPU)
    base_env = {
        k2: v for k2, v in os.environ.items() if not k2.startswith(("JIM_", "FAKE_SCHED")) and k2 != "PYTHONUNBUFFERED"
    }
    fake_bin = FAKE_BIN if args.plain_fake else fast_fake(tmp / "fake-bin")
    users = [User(root / f"user{i}", cfg, base_env, fake_bin) for i in range(n_users)]
    res: dict = {"grid jobs": g, "local jobs each": k, "users": n_users, "L": g * k}
    res["settings"] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "steady minutes": args.minutes,
        "monitor interval s": args.interval,
        "cache_interval s": args.cache_interval,
        "max backlog": args.max_backlog,
        "monitor during submission": not args.quiet_submit,
        "fake": ("plain" if args.plain_fake else "indexed accounting") + ", output buffered",
        "jim commit": args.commit,
    }
    held = []
    try:
        if args.quiet_submit:
            from jim.background import monitor_lock  # (lazy: only this option needs jim in this process)
            from jim.locks import SingleInstance  # (lazy: likewise)
            from jim.paths import Home  # (lazy: likewise)

            for usr in users:  # no monitor while the workers submit: they alone talk to the batch system
                Home(usr.home).ensure()
                held.append(SingleInstance(monitor_lock(usr.home)))
                assert held[-1].acquire()
        else:
            for usr in users:
                usr.start_monitor(py)
        # ---- submit ----------------------------------------------------------------
        submit_ms: list[float] = []
        waiting: list[tuple[User, str]] = []
        t0 = time.perf_counter()
        for i in range(g):
            usr = users[i % n_users]
            while len(waiting) >= args.max_backlog:
                waiting = [(x, j) for x, j in waiting if x.unsubmitted(j)]
                if len(waiting) >= args.max_backlog:
                    time.sleep(0.02)
            t = time.perf_counter()
            p = subprocess.run(
                [*jim, "submit", "--rsl", f"&(executable=/bin/true)(count={k})"],
                env=usr.env,
                capture_output=True,
                text=True,
                cwd="/",
            )
            submit_ms.append((time.perf_counter() - t) * 1000)
            if "JOB_ID=" not in p.stdout:
                raise RuntimeError(f"jim submit failed: {p.stdout} {p.stderr}")
            job_id = p.stdout.split("JOB_ID=")[1].split()[0]
            usr.jobs.append(job_id)
            waiting.append((usr, job_id))
        submitted = time.perf_counter() - t0
        deadline = time.monotonic() + args.submit_timeout
        while waiting and time.monotonic() < deadline:
            waiting = [(x, j) for x, j in waiting if x.unsubmitted(j)]
            time.sleep(0.05)
        if waiting:
            raise RuntimeError(f"{len(waiting)} grid jobs still await submission after {args.submit_timeout} s")
        queued = time.perf_counter() - t0
        for lock in held:
            lock.release()
        if held:
            for usr in users:
                usr.start_monitor(py)
        res["submit"] = {
            "all G submits s": round(submitted, 2),
            "jim submit p50 ms": round(statistics.median(submit_ms), 1),
            "jim submit max ms": round(max(submit_ms), 1),
            "until every local job has a batch id s": round(queued, 2),
            "local jobs queued per s": round(g * k / queued, 1),
        }
        print(f"  {name}: submitted in {submitted:.1f} s, every batch id after {queued:.1f} s", flush=True)
        # ---- steady, nothing changing ---------------------------------------------------
        settle = time.time()
        wait_passes(users, settle)  # a pass that saw every batch id (it applies them all)
        wait_passes(users, time.time())
        logged = sum(x.passes.stat().st_size for x in users)
        w0, before = time.time(), [proc_stats(x.monitor.pid) for x in users if x.monitor]
        time.sleep(args.minutes * 60)
        w1, after = time.time(), [proc_stats(x.monitor.pid) for x in users if x.monitor]
        logged = sum(x.passes.stat().st_size for x in users) - logged  # (this benchmark's own pass log)
        minutes = (w1 - w0) / 60
        steady = [p for x in users for p in x.pass_log() if w0 <= p["start"] and p["start"] + p["wall"] <= w1]
        walls = [p["wall"] * 1000 for p in steady]
        res["nothing changing"] = {
            "passes": len(steady),
            "pass p50 ms": round(statistics.median(walls), 2),
            "pass max ms": round(max(walls), 1),
            "pass max, in batch commands ms": round(max(steady, key=lambda p: p["wall"])["batch"] * 1000, 1),
            "pass p50, jim's own ms": round(statistics.median((p["wall"] - p["batch"]) * 1000 for p in steady), 2),
            "pass max, jim's own ms": round(max((p["wall"] - p["batch"]) * 1000 for p in steady), 1),
            "monitor CPU s per minute": round(sum(a["cpu"] - b["cpu"] for a, b in zip(after, before)) / minutes, 3),
            "of which in passes s per minute": round(sum(p["cpu"] for p in steady) / minutes, 3),
            "monitor RSS VmHWM MiB (largest)": round(max(a["hwm"] for a in after) / 2**20, 1),
            "wchar bytes per minute": round(
                (sum(a["wchar"] - b["wchar"] for a, b in zip(after, before)) - logged) / minutes
            ),
            "write_bytes per minute": round(
                sum(a["write_bytes"] - b["write_bytes"] for a, b in zip(after, before)) / minutes
            ),
            "batch commands per minute": round(sum(x.batch_commands(w0, w1) for x in users) / minutes, 1),
        }
        print(f"  {name}: steady {res['nothing changing']}", flush=True)
        # ---- jim poll while the monitors run ---------------------------------------------
        polls, base = [], []
        for r in range(args.runs):  # turn about, so that both see the same load
            usr = users[r % n_users]
            polls += timed([*jim, "poll", "--job-id", usr.jobs[r % len(usr.jobs)]], env=usr.env, n=1)
            base += timed([py, "-c", "pass"], n=1)
        res["jim poll"] = {
            "p50 ms": round(statistics.median(polls), 1),
            "p99 ms": round(pct(polls, 0.99), 1),
            "python3 -c pass p50 ms": round(statistics.median(base), 1),
            "python3 -c pass p99 ms": round(pct(base, 0.99), 1),
            "p50 ratio": round(statistics.median(polls) / statistics.median(base), 2),
            "p99 ratio": round(pct(polls, 0.99) / pct(base, 0.99), 2),
        }
        # ---- 10 % finishing per pass -------------------------------------------------------
        fin = []
        for step in range(args.finish_passes):
            t_end = time.time()
            ended = sum(x.end_tenth(step) for x in users)
            # per user, the pass that applied it: the first whose status query came back after the tasks ended
            got = [wait_passes([x], x.locked_at, key="queried")[0] for x in users]
            fin += got
            print(
                f"  {name}: {ended} ended; pass {max(p['wall'] for p in got) * 1000:.0f} ms "
                f"({time.time() - t_end:.1f} s after)",
                flush=True,
            )
        if fin:
            walls = [p["wall"] * 1000 for p in fin]
            res["10% finishing per pass"] = {
                "passes": len(fin),
                "pass p50 ms": round(statistics.median(walls), 1),
                "pass max ms": round(max(walls), 1),
                "pass p50, in batch commands ms": round(statistics.median(p["batch"] * 1000 for p in fin), 1),
                "pass p50, jim's own ms": round(statistics.median((p["wall"] - p["batch"]) * 1000 for p in fin), 1),
                "pass max, jim's own ms": round(max((p["wall"] - p["batch"]) * 1000 for p in fin), 1),
                "pass p50 CPU ms": round(statistics.median(p["cpu"] * 1000 for p in fin), 1),
            }
        if args.profile and name == args.profile_scenario:
            for usr in users:
                usr.stop_monitor()
            res["profile"] = profile_pass(users[0])
    finally:
        for usr in users:
            usr.stop_monitor()
        for lock in held:
            lock.release()
    return res


def profile_pass(usr: User) -> dict:
    """One full pass (empty memo) of ``usr``'s home under cProfile, in this process."""
    os.environ.update({k: usr.env[k] for k in ("JIM_HOME", "JIM_CONFIG", "FAKE_SCHED_DIR", "PATH")})
    from jim.adapters import get_adapter  # (lazy: the bench's own process needs jim only here)
    from jim.config import load  # (lazy: likewise)
    from jim.db import Database  # (lazy: likewise)
    from jim.memo import Memo  # (lazy: likewise)
    from jim.monitor import refresh  # (lazy: likewise)
    from jim.paths import Home  # (lazy: likewise)
    from jim.site import Site  # (lazy: likewise)

    config = load()
    home = Home(config.home).ensure()
    db = Database(home, config.deadlines.lock)
    adapter = get_adapter(config, home)
    out: dict = {}
    memo = Memo()
    for what in ("", "idle "):  # a full pass (empty memo), then one with nothing changed since (memo kept)
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        refresh(Site(config, db=db, adapter=adapter), memo=memo)
        prof.disable()
        out[f"{what}wall s"] = round(time.perf_counter() - t, 2)
        for key in ("cumulative", "tottime"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(25)
            out[f"{what}top 25 by {key}"] = buf.getvalue()
    return out


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) against log(x)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len({p[0] for p in pts}) < 2:
        return None
    mx = statistics.fmean(p[0] for p in pts)
    my = statistics.fmean(p[1] for p in pts)
    return round(sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="10x100,100x100,1000x100,10x10000,1000x100/10")
    ap.add_argument("--minutes", type=float, default=1.0, help="the steady window, per scenario")
    ap.add_argument("--finish-passes", type=int, default=3, help="passes with 10%% of local jobs ending before each")
    ap.add_argument("--runs", type=int, default=30, help="jim poll runs")
    ap.add_argument("--interval", type=float, default=2.0, help="[monitor] interval")
    ap.add_argument("--cache-interval", type=float, default=0.0, help="[batch] cache_interval (0: query every pass)")
    ap.add_argument("--max-backlog", type=int, default=32, help="grid jobs awaiting their worker at once")
    ap.add_argument("--submit-timeout", type=float, default=1800.0)
    ap.add_argument(
        "--quiet-submit", action="store_true", help="no monitor until every batch id is recorded (see the docstring)"
    )
    ap.add_argument("--fresh", action="store_true", help="start a new results file (else scenarios are merged in)")
    ap.add_argument("--plain-fake", action="store_true", help="the fake's commands as they are (slow at 100,000)")
    ap.add_argument("--profile", action="store_true", help="cProfile one full pass of the largest scenario")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--jim-source",
        type=Path,
        default=REPO,
        help="the checkout whose jim is installed and measured (another worktree: before and after in one run)",
    )
    ap.add_argument("--results", type=Path, default=RESULTS, help="the results file (merged into, as above)")
    args = ap.parse_args()
    if args.profile and args.jim_source.resolve() != REPO:
        ap.error("--profile runs this checkout's jim in process: for another checkout's, see bench_monitor_pass.py")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stopped: the monitors are stopped too (finally)
    names = [s for s in args.scenarios.split(",") if s]
    sizes = {n: math.prod(int(x) for x in n.split("/")[0].split("x")) for n in names}
    args.profile_scenario = max(names, key=lambda n: sizes[n])
    git = ["git", "-C", str(args.jim_source)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "jim", "adapters"], capture_output=True, text=True).stdout
    args.commit = head + ("+changes" if dirty.strip() else "")  # the wheel is built from the tree as it is
    tmp = Path(tempfile.mkdtemp(prefix="jim-bench-busy-"))
    py = site_python(tmp, args.jim_source)
    jim = jim_command(tmp, args.jim_source)
    results: dict = {
        "machine": os.uname().nodename,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "scenarios": {},
    }
    if not args.fresh:  # scenarios of earlier runs are kept (each with its own settings), this run's replace them
        try:
            results["scenarios"] = json.loads(args.results.read_text())["scenarios"]
        except (OSError, ValueError, KeyError):
            pass
    try:
        for name in names:
            print(f"== {name}", flush=True)
            try:
                results["scenarios"][name] = run_scenario(name, args, tmp, py, jim)
            except Exception as e:  # a scenario that cannot finish is reported, the others still run
                results["scenarios"][name] = {"L": sizes[name], "error": str(e)[:500]}
                print(f"  {name}: {e}", flush=True)
            save(results, args.results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    done = [  # one user each: a monitor follows its own user's L
        (r["L"], r["nothing changing"])
        for r in results["scenarios"].values()
        if "nothing changing" in r and r.get("users", 1) == 1
    ]
    results["growth exponent vs L (nothing changing)"] = {
        "pass p50": slope([x for x, _ in done], [s["pass p50 ms"] for _, s in done]),
        "pass max": slope([x for x, _ in done], [s["pass max ms"] for _, s in done]),
        "pass p50, jim's own": slope([x for x, _ in done], [s.get("pass p50, jim's own ms", 0) for _, s in done]),
        "pass max, jim's own": slope([x for x, _ in done], [s.get("pass max, jim's own ms", 0) for _, s in done]),
        "CPU per minute": slope([x for x, _ in done], [s["monitor CPU s per minute"] for _, s in done]),
    }
    save(results, args.results)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    report(results)


def save(results: dict, path: Path) -> None:
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(results, indent=2))


def report(results: dict) -> None:
    rows = [
        ("L", lambda r: f"{r['L']:,}"),
        ("all G submits s", lambda r: r["submit"]["all G submits s"]),
        ("jim submit p50 ms", lambda r: r["submit"]["jim submit p50 ms"]),
        ("until every batch id s", lambda r: r["submit"]["until every local job has a batch id s"]),
        ("idle pass p50 ms", lambda r: r["nothing changing"]["pass p50 ms"]),
        ("idle pass max ms", lambda r: r["nothing changing"]["pass max ms"]),
        ("  of which batch cmds ms", lambda r: r["nothing changing"]["pass max, in batch commands ms"]),
        ("idle pass p50 jim's own ms", lambda r: r["nothing changing"]["pass p50, jim's own ms"]),
        ("idle pass max jim's own ms", lambda r: r["nothing changing"]["pass max, jim's own ms"]),
        ("10% ending pass p50 ms", lambda r: r["10% finishing per pass"]["pass p50 ms"]),
        ("10% ending pass max ms", lambda r: r["10% finishing per pass"]["pass max ms"]),
        ("  p50 in batch cmds ms", lambda r: r["10% finishing per pass"]["pass p50, in batch commands ms"]),
        ("10% ending p50 jim's own ms", lambda r: r["10% finishing per pass"]["pass p50, jim's own ms"]),
        ("10% ending max jim's own ms", lambda r: r["10% finishing per pass"]["pass max, jim's own ms"]),
        ("monitor CPU s/min", lambda r: r["nothing changing"]["monitor CPU s per minute"]),
        ("monitor VmHWM MiB", lambda r: r["nothing changing"]["monitor RSS VmHWM MiB (largest)"]),
        ("wchar KiB/min", lambda r: round(r["nothing changing"]["wchar bytes per minute"] / 1024, 1)),
        ("write_bytes KiB/min", lambda r: round(r["nothing changing"]["write_bytes per minute"] / 1024, 1)),
        ("batch commands/min", lambda r: r["nothing changing"]["batch commands per minute"]),
        ("jim poll p50 / p99 ms", lambda r: f"{r['jim poll']['p50 ms']} / {r['jim poll']['p99 ms']}"),
        (
            "python -c pass p50 / p99",
            lambda r: f"{r['jim poll']['python3 -c pass p50 ms']} / {r['jim poll']['python3 -c pass p99 ms']}",
        ),
        ("poll ratio p50 / p99", lambda r: f"{r['jim poll']['p50 ratio']} / {r['jim poll']['p99 ratio']}"),
    ]
    sc = results["scenarios"]
    print(f"\n{results['cpus']} CPUs, Python {results['python']}")
    for name, r in sc.items():
        print(f"  {name}: {r.get('settings', {})}")
    print(f"{'':<28}" + "".join(f"{n:>16}" for n in sc))
    for label, get in rows:
        cells = []
        for r in sc.values():
            try:
                cells.append(f"{get(r)!s:>16}")
            except (KeyError, ValueError):
                cells.append(f"{'-':>16}")
        print(f"{label:<28}" + "".join(cells))
    print(f"growth exponent vs L, nothing changing: {results['growth exponent vs L (nothing changing)']}")
    for name, r in sc.items():
        if "profile" in r:
            print(f"\n== profile: one full pass (empty memo), {name}, first user: {r['profile']['wall s']} s")
            print(r["profile"]["top 25 by cumulative"])
            print(r["profile"]["top 25 by tottime"])
            if "idle wall s" in r["profile"]:
                print(f"\n== profile: the next pass (memo kept, nothing changed): {r['profile']['idle wall s']} s")
                print(r["profile"]["idle top 25 by cumulative"])
                print(r["profile"]["idle top 25 by tottime"])


if __name__ == "__main__":
    main()
