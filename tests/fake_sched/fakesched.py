"""A fault-injecting fake Slurm: ``sbatch``, ``squeue``, ``sacct``, ``scancel``, ``scontrol`` as real commands.

jim's real :class:`SlurmAdapter` runs against it unchanged (the commands are
found on PATH: put ``tests/fake_sched/bin`` first).  It stages on demand the
failures a real batch system shows only by bad luck: query errors, a submit
that timed out but went through, duplicate and out-of-order reports, job ids
handed out again, jobs that vanish without a trace.

State lives in ``$FAKE_SCHED_DIR`` (required):

``state.json``   every job and array task, the accounting records (JSON, replaced atomically)
``lock``         ``flock``-ed by every command for its whole run: one command at a time
``faults.json``  the faults to inject (read under the lock; counters count down); see FAULTS
``events.log``   one JSON line per command run and per fault fired, for tests to check
``run/``         per task: the job's environment, the shepherd's pid, its exit record
``out/``         default output directory of jobs

Running a job means what it means on a real system: every command first
"ticks" the scheduler, which starts pending tasks (up to ``cpus`` at a time)
as real detached processes: a *shepherd* (this module, ``_shepherd``: the
slurmstepd of the fake) runs the batch script in a session of its own with
``SLURM_JOB_ID``, ``SLURM_ARRAY_JOB_ID``, ``SLURM_ARRAY_TASK_ID``, ... set, the
submitter's environment otherwise (``--export=ALL``), waits for it and writes
its exit status; the next tick records COMPLETED or FAILED.  Ended tasks stay
in ``squeue -t all`` for ``min_job_age`` seconds, in ``sacct`` for good.

Stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time

#: faults.json keys (all optional).  Counters ("N") count down by one each time the fault fires;
#: -1 means for ever.  A test may rewrite the file at any time.
FAULTS = {
    "fail": "{command: N}: the next N runs of squeue/sacct/sbatch/scancel/scontrol fail like an unreachable "
    "controller (rc 1; sbatch records nothing)",
    "slow_submit": "{'seconds': S, 'count': N}: sbatch records and starts the job, then sleeps S s before "
    "printing its id (the caller times out: the submit went through anyway)",
    "duplicate": "N: the next N squeue runs print every row twice",
    "out_of_order": "N: the next N squeue runs shuffle the rows, and every other one shows tasks that have "
    "ended by themselves in the state they had before (COMPLETED, then RUNNING again)",
    "reuse_ids": "N: the next N submissions get the id of the newest job purged from the queue (another "
    "grid job's); sacct then lists the old job's records after the new one's",
    "vanish": "N: the next N running tasks vanish: killed with SIGKILL (no exit-code file), gone from squeue "
    "and from accounting",
    "accounting_lag": "S: sacct lists a job only S seconds after its submission (slurmdbd behind the "
    "controller); with min_job_age 0 a short job is then known to neither squeue nor sacct",
    "cpus": "tasks running at once (default 64)",
    "min_job_age": "seconds an ended task stays in squeue (default 3)",
    "max_array_size": "MaxArraySize (default 1001)",
}

CONTROLLER_DOWN = "Unable to contact slurm controller (connect failure)"
TERMINAL = (
    *("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"),
    *("NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "DEADLINE"),  # only by ``fake-sched end``
)


def now() -> float:
    return time.time()


def fmt_time(t: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else "Unknown"


class Sched:
    """The fake controller: state, lock, faults."""

    def __init__(self, directory: str):
        self.dir = directory
        os.makedirs(os.path.join(directory, "run"), exist_ok=True)
        os.makedirs(os.path.join(directory, "out"), exist_ok=True)
        self._lockf = open(os.path.join(directory, "lock"), "a+")
        fcntl.flock(self._lockf, fcntl.LOCK_EX)
        self.state = self._load("state.json", {"next_id": 1000, "jobs": {}, "acct": [], "squeue_calls": 0})
        self.faults = self._load("faults.json", {})
        self._faults_changed = False

    # -- persistence ---------------------------------------------------------------
    def _load(self, name, default):
        try:
            with open(os.path.join(self.dir, name)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return default

    def _save(self, name, data):
        path = os.path.join(self.dir, name)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)

    def close(self):
        self._save("state.json", self.state)
        if self._faults_changed:
            self._save("faults.json", self.faults)
        fcntl.flock(self._lockf, fcntl.LOCK_UN)
        self._lockf.close()

    def event(self, **kw):
        kw.setdefault("t", round(now(), 3))
        with open(os.path.join(self.dir, "events.log"), "a") as f:
            f.write(json.dumps(kw, sort_keys=True) + "\n")

    # -- faults --------------------------------------------------------------------
    def config(self, key, default):
        v = self.faults.get(key)
        return default if v is None else v

    def fire(self, key, sub=None) -> bool:
        """Whether fault ``key`` (``fail: {sub: N}``) fires now; counts it down (-1: for ever)."""
        holder, field = self.faults, key
        if sub is not None:
            holder, field = self.faults.get(key), sub
        elif isinstance(self.faults.get(key), dict):
            holder, field = self.faults[key], "count"
        if not isinstance(holder, dict):
            return False
        n = holder.get(field, 0)
        if not isinstance(n, int) or n == 0:
            return False
        if n > 0:
            holder[field] = n - 1
            self._faults_changed = True
        self.event(fault=key if sub is None else "%s.%s" % (key, sub))
        return True

    # -- jobs ------------------------------------------------------------------------
    def tasks(self):
        for _jid, job in sorted(self.state["jobs"].items(), key=lambda kv: int(kv[0])):
            for t, task in sorted(job["tasks"].items(), key=lambda kv: int(kv[0])):
                yield job, int(t), task

    def key(self, job, t):
        return "%s_%d" % (job["id"], t) if job["array"] else str(job["id"])

    def new_id(self) -> int:
        if self.fire("reuse_ids"):
            purged = [r for r in self.state["acct"] if r.get("purged") and str(r["id"]) not in self.state["jobs"]]
            if purged:
                old = max(purged, key=lambda r: r["end"] or 0)["id"]
                self.event(reused_id=old)
                return old
        jid = self.state["next_id"]
        self.state["next_id"] += 1
        return jid

    def acct_record(self, job, t, task):
        return {
            "id": job["id"],
            "task": t if job["array"] else None,
            "name": job["name"],
            "comment": job["comment"],
            "user": job["user"],
            "state": task["state"],
            "exit": task.get("exit", "0:0"),
            "submit": job["submit"],
            "start": task.get("start"),
            "end": task.get("end"),
            "purged": False,
        }

    def sync_acct(self, job, t, task):
        """Keep the accounting record of (job, t) in step with its task (unless it vanished)."""
        if task.get("vanished"):
            return
        for r in self.state["acct"]:
            if r["id"] == job["id"] and r["task"] == (t if job["array"] else None) and r["submit"] == job["submit"]:
                r.update({k: v for k, v in self.acct_record(job, t, task).items() if k != "purged"})
                return
        rec = self.acct_record(job, t, task)
        # a reused id: the new job's record goes first, the old one after it (a dict keyed by
        # job id then keeps the OLD one: the worst case for a reader that does not check names)
        for i, r in enumerate(self.state["acct"]):
            if r["id"] == job["id"] and r["submit"] != job["submit"]:
                self.state["acct"].insert(i, rec)
                return
        self.state["acct"].append(rec)

    def run_path(self, job, t, what):
        return os.path.join(self.dir, "run", "%s.%s" % (self.key(job, t), what))

    def tick(self):
        """Notice ended tasks, start pending ones, purge old ones, inject vanishing."""
        t_now = now()
        running = 0
        for job, t, task in list(self.tasks()):
            if task["state"] == "RUNNING":
                ended = self._read_exit(job, t)
                if ended is not None:
                    rc, sig = ended
                    if task.get("cancelled"):
                        task.update(state="CANCELLED", exit="%d:%d" % (rc, sig), end=task.get("end") or t_now)
                    else:
                        task.update(
                            state="COMPLETED" if rc == 0 and sig == 0 else "FAILED",
                            exit="%d:%d" % (rc, sig),
                            end=t_now,
                            reason="None" if rc == 0 and sig == 0 else "NonZeroExitCode",
                        )
                    task.setdefault("history", []).append("RUNNING")
                    self.sync_acct(job, t, task)
                elif not _alive(task.get("shepherd")):
                    task.update(state="FAILED", exit="0:9", end=t_now, reason="NodeFail")
                    task.setdefault("history", []).append("RUNNING")
                    self.sync_acct(job, t, task)
                else:
                    running += 1
        cpus = int(self.config("cpus", 64))
        for job, t, task in list(self.tasks()):
            if task["state"] == "PENDING" and not job.get("held") and running < cpus:
                self._start(job, t, task)
                running += 1
        for job, t, task in list(self.tasks()):
            if task["state"] == "RUNNING" and task.get("start", t_now) < t_now and self.fire("vanish"):
                self.vanish(job, t, task)
        age = float(self.config("min_job_age", 3))
        for jid, job in list(self.state["jobs"].items()):
            ts = job["tasks"]
            for t in [
                t for t, task in ts.items() if task["state"] in TERMINAL and (task.get("end") or 0) + age <= t_now
            ]:
                for r in self.state["acct"]:
                    if (
                        r["id"] == job["id"]
                        and r["task"] == (int(t) if job["array"] else None)
                        and r["submit"] == job["submit"]
                    ):
                        r["purged"] = True
                del ts[t]
            if not ts:
                del self.state["jobs"][jid]

    def _read_exit(self, job, t):
        try:
            with open(self.run_path(job, t, "exit")) as f:
                d = json.load(f)
            return int(d["rc"]), int(d["signal"])
        except (OSError, ValueError, KeyError):
            return None

    def _start(self, job, t, task):
        key = self.key(job, t)
        for what in ("exit", "pgid", "job"):  # an id handed out again must not see the old job's files
            try:
                os.unlink(self.run_path(job, t, what))
            except OSError:
                pass
        _atomic(self.run_path(job, t, "job"), json.dumps(job))
        py = sys.executable or "python3"
        proc = subprocess.Popen(
            [
                py,
                os.path.abspath(__file__),
                "_shepherd",
                self.dir,
                str(job["id"]),
                str(t),
                "1" if job["array"] else "0",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
            env=job_env(self, job, t),
        )
        task.update(state="RUNNING", start=now(), shepherd=[proc.pid, _start_time(proc.pid)])
        task.setdefault("history", []).append("PENDING")
        self.sync_acct(job, t, task)
        self.event(started=key, shepherd=proc.pid)

    def signal_task(self, job, t, task, sig):
        """Signal the job's process group (the shepherd writes it once the job runs)."""
        deadline = now() + 2
        while now() < deadline:
            try:
                with open(self.run_path(job, t, "pgid")) as f:
                    pgid = int(f.read().strip())
                break
            except (OSError, ValueError):
                if not _alive(task.get("shepherd")):
                    return
                time.sleep(0.02)
        else:
            return
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass

    def vanish(self, job, t, task):
        """The task disappears: killed hard, no record anywhere."""
        self.signal_task(job, t, task, signal.SIGKILL)
        sh = task.get("shepherd")
        if sh and _alive(sh):
            try:
                os.kill(sh[0], signal.SIGKILL)
            except OSError:
                pass
        self.state["acct"] = [
            r
            for r in self.state["acct"]
            if not (
                r["id"] == job["id"] and r["task"] == (t if job["array"] else None) and r["submit"] == job["submit"]
            )
        ]
        del job["tasks"][str(t)]
        if not job["tasks"]:
            del self.state["jobs"][str(job["id"])]
        self.event(vanished=self.key(job, t))

    def end_as(self, job, t, task, state, reason):
        """The controller ends the task in ``state`` (NODE_FAIL, PREEMPTED, ...): killed hard (no
        exit-code file), then squeue and sacct say ``state`` with ``reason``."""
        if task["state"] == "RUNNING":
            self.signal_task(job, t, task, signal.SIGKILL)
            sh = task.get("shepherd")
            if sh and _alive(sh):
                try:
                    os.kill(sh[0], signal.SIGKILL)
                except OSError:
                    pass
        task.setdefault("history", []).append(task["state"])
        task.update(state=state, exit="0:0", end=now(), reason=reason)
        self.sync_acct(job, t, task)
        self.event(ended=self.key(job, t), state=state)

    def find(self, spec: str):
        """Tasks named by ``123`` (a whole job/array) or ``123_4``."""
        jid, _, t = spec.partition("_")
        job = self.state["jobs"].get(jid)
        if job is None:
            return []
        if t:
            task = job["tasks"].get(t)
            return [(job, int(t), task)] if task is not None else []
        return [(job, int(k), v) for k, v in sorted(job["tasks"].items(), key=lambda kv: int(kv[0]))]


def job_env(s: Sched, job, t):
    try:
        with open(os.path.join(s.dir, "run", "%d.env" % job["id"])) as f:
            env = json.load(f)
    except (OSError, ValueError):
        env = dict(os.environ)
    env.update(
        {
            "SLURM_JOB_ID": str(job["id"]),
            "SLURM_JOB_NAME": job["name"],
            "SLURM_JOBID": str(job["id"]),
            "SLURM_SUBMIT_DIR": job["workdir"],
            "SLURM_CLUSTER_NAME": "fake",
            "FAKE_SCHED_DIR": s.dir,
        }
    )
    if job["array"]:
        env.update({"SLURM_ARRAY_JOB_ID": str(job["id"]), "SLURM_ARRAY_TASK_ID": str(t)})
    else:
        env.pop("SLURM_ARRAY_JOB_ID", None)
        env.pop("SLURM_ARRAY_TASK_ID", None)
    return env


def _start_time(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(sh) -> bool:
    """Whether the shepherd [pid, start time] still runs (a reused pid is not it)."""
    if not sh:
        return False
    st = _start_time(sh[0])
    if st is None or (sh[1] is not None and st != sh[1]):
        return False
    try:
        with open("/proc/%d/stat" % sh[0]) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- the shepherd (the fake's slurmstepd) -------------------------------------------
def shepherd(directory, jid, t, array):
    key = "%s_%s" % (jid, t) if array == "1" else jid
    with open(os.path.join(directory, "run", key + ".job")) as f:  # written before we were started
        job = json.load(f)
    out = expand(job["output"], job, int(t))
    err = expand(job["error"], job, int(t)) if job.get("error") else out
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "ab") as o, open(err, "ab") if err != out else open(os.devnull, "wb") as e:
        p = subprocess.Popen(
            [job["script"]] + job.get("args", []),
            cwd=job["workdir"] if os.path.isdir(job["workdir"]) else "/tmp",
            stdin=subprocess.DEVNULL,
            stdout=o,
            stderr=e if err != out else o,
            start_new_session=True,
        )
        _atomic(os.path.join(directory, "run", key + ".pgid"), "%d\n" % p.pid)
        rc = p.wait()
    _atomic(
        os.path.join(directory, "run", key + ".exit"),
        json.dumps({"rc": rc if rc >= 0 else 0, "signal": -rc if rc < 0 else 0}),
    )


def _atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def expand(pattern, job, t):
    s = pattern.replace("%A", str(job["id"])).replace("%a", str(t)).replace("%j", str(job["id"]))
    s = s.replace("%x", job["name"]).replace("%u", job["user"]).replace("%%", "%")
    return s if os.path.isabs(s) else os.path.join(job["workdir"], s)


# -- the commands -----------------------------------------------------------------------
class Usage(Exception):
    pass


def parse_opts(argv, with_value, flags, positional_stop=True):
    """Slurm-style options: ``--name=value``, ``--name value``, ``-x value``, ``-xvalue``."""
    opts, rest = {}, []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            name, eq, val = a[2:].partition("=")
            if name in flags:
                opts[name] = True
            elif name in with_value or eq:
                if not eq:
                    i += 1
                    if i >= len(argv):
                        raise Usage("option --%s needs a value" % name)
                    val = argv[i]
                opts[name] = val
            else:
                opts[name] = True
        elif a.startswith("-") and len(a) > 1:
            name = a[1]
            long = with_value.get(name) or flags.get(name)
            if name in flags or (long and long in flags):
                opts[long or name] = True
            else:
                val = a[2:]
                if not val:
                    i += 1
                    if i >= len(argv):
                        raise Usage("option -%s needs a value" % name)
                    val = argv[i]
                opts[long or name] = val
        else:
            rest = argv[i:] if positional_stop else rest + [a]
            if positional_stop:
                break
        i += 1
    return opts, rest


def parse_array(spec, limit):
    tasks = []
    spec = spec.split("%", 1)[0]
    for part in spec.split(","):
        m = re.match(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$", part)
        if not m:
            raise Usage("sbatch: error: Invalid job array specification")
        a = int(m.group(1))
        b = int(m.group(2)) if m.group(2) else a
        step = int(m.group(3) or 1)
        tasks += list(range(a, b + 1, step))
    if not tasks or max(tasks) >= limit:
        raise Usage("sbatch: error: Batch job submission failed: Invalid job array specification")
    return sorted(set(tasks))


def cmd_sbatch(s: Sched, argv):
    if s.fire("fail", "sbatch"):
        sys.stderr.write("sbatch: error: Batch job submission failed: %s\n" % CONTROLLER_DOWN)
        return 1
    opts, rest = parse_opts(
        argv,
        {
            "J": "job-name",
            "D": "chdir",
            "o": "output",
            "e": "error",
            "p": "partition",
            "A": "account",
            "t": "time",
            "a": "array",
            "job-name": 1,
            "chdir": 1,
            "output": 1,
            "error": 1,
            "partition": 1,
            "account": 1,
            "time": 1,
            "array": 1,
            "comment": 1,
            "mem": 1,
            "qos": 1,
            "export": 1,
        },
        {"H": "hold", "hold": 1, "parsable": 1, "no-requeue": 1, "requeue": 1},
    )
    if not rest:
        sys.stderr.write("sbatch: error: fake sbatch needs a script file (no --wrap, no stdin)\n")
        return 1
    script = os.path.abspath(rest[0])
    if not os.access(script, os.R_OK):
        sys.stderr.write("sbatch: error: Unable to open file %s\n" % rest[0])
        return 1
    partition = opts.get("partition", "debug")
    if partition not in ("debug", "long"):
        sys.stderr.write(
            "sbatch: error: invalid partition specified: %s\n"
            "sbatch: error: Batch job submission failed: Invalid partition name specified\n" % partition
        )
        return 1
    try:
        tasks = parse_array(opts["array"], int(s.config("max_array_size", 1001))) if "array" in opts else [0]
    except Usage as e:
        sys.stderr.write(str(e) + "\n")
        return 1
    jid = s.new_id()
    workdir = os.path.abspath(opts.get("chdir", os.getcwd()))
    job = {
        "id": jid,
        "name": opts.get("job-name", os.path.basename(script)),
        "comment": opts.get("comment", ""),
        "user": _user(),
        "submit": now(),
        "script": script,
        "args": rest[1:],
        "workdir": workdir,
        "output": opts.get(
            "output", os.path.join(s.dir, "out", "slurm-%A_%a.out" if "array" in opts else "slurm-%j.out")
        ),
        "error": opts.get("error"),
        "partition": partition,
        "held": bool(opts.get("hold")),
        "array": "array" in opts,
        "tasks": {},
    }
    for t in tasks:
        job["tasks"][str(t)] = {"state": "PENDING", "reason": "JobHeldUser" if job["held"] else "None"}
    s.state["jobs"][str(jid)] = job
    with open(os.path.join(s.dir, "run", "%d.env" % jid), "w") as f:
        json.dump(dict(os.environ), f)
    for t in tasks:
        s.sync_acct(job, t, job["tasks"][str(t)])
    s.event(submitted=jid, name=job["name"], tasks=len(tasks))
    s.tick()
    slow = s.faults.get("slow_submit")
    if isinstance(slow, dict) and s.fire("slow_submit"):
        s.close()  # the job is in and running: release the lock, then keep the caller waiting
        s.closed = True
        time.sleep(float(slow.get("seconds", 60)))
    print(jid if opts.get("parsable") else "Submitted batch job %d" % jid)
    return 0


SQUEUE_FIELDS = {"i", "A", "F", "K", "T", "r", "j", "k", "u", "P"}


def squeue_row(fmt, job, t, state, reason):
    vals = {
        "i": "%d_%d" % (job["id"], t) if job["array"] else str(job["id"]),
        "A": str(job["id"]),
        "F": str(job["id"]),
        "K": str(t) if job["array"] else "N/A",
        "T": state,
        "r": reason or "None",
        "j": job["name"],
        "k": job["comment"] or "(null)",
        "u": job["user"],
        "P": job["partition"],
    }
    return re.sub(r"%(\.?\d*)([a-zA-Z])", lambda m: vals.get(m.group(2), "?"), fmt)


def cmd_squeue(s: Sched, argv):
    if s.fire("fail", "squeue"):
        sys.stderr.write("slurm_load_jobs error: %s\n" % CONTROLLER_DOWN)
        return 1
    opts, _ = parse_opts(
        argv,
        {
            "o": "format",
            "format": 1,
            "u": "user",
            "user": 1,
            "t": "states",
            "states": 1,
            "j": "jobs",
            "jobs": 1,
            "n": "name",
            "name": 1,
        },
        {"h": "noheader", "noheader": 1, "r": "array", "array": 1},
        positional_stop=False,
    )
    fmt = opts.get("format", "%i|%T|%j")
    states = opts.get("states", "")
    want_all = states.lower() == "all"
    state_set = {x.upper() for x in states.split(",") if x} if states and not want_all else None
    users = set(opts["user"].split(",")) if "user" in opts else None
    ids = opts["jobs"].split(",") if "jobs" in opts else None
    names = set(opts["name"].split(",")) if "name" in opts else None
    s.state["squeue_calls"] = s.state.get("squeue_calls", 0) + 1
    stale = s.fire("out_of_order") and s.state["squeue_calls"] % 2 == 0
    dup = s.fire("duplicate")
    rows = []
    for job, t, task in s.tasks():
        if ids is not None and str(job["id"]) not in ids and "%d_%d" % (job["id"], t) not in ids:
            continue
        if users is not None and job["user"] not in users:
            continue
        if names is not None and job["name"] not in names:
            continue
        state, reason = task["state"], task.get("reason", "None")
        if stale and state in ("COMPLETED", "FAILED") and task.get("history"):
            state, reason = task["history"][-1], "None"
        if state_set is not None and state not in state_set:
            continue
        if state_set is None and not want_all and state in TERMINAL:
            continue
        rows.append(squeue_row(fmt, job, t, state, reason))
        if dup:
            rows.append(rows[-1])
    if stale:
        rows.reverse()
    if ids is not None and len(ids) == 1 and not rows and not any(s.find(i) for i in ids):
        sys.stderr.write("slurm_load_jobs error: Invalid job id specified\n")
        return 1
    if not opts.get("noheader"):
        print(
            re.sub(
                r"%(\.?\d*)([a-zA-Z])",
                lambda m: {"i": "JOBID", "T": "STATE", "j": "NAME"}.get(m.group(2), m.group(2).upper()),
                fmt,
            )
        )
    for r in rows:
        print(r)
    return 0


def cmd_sacct(s: Sched, argv):
    if s.fire("fail", "sacct"):
        sys.stderr.write("sacct: error: Problem talking to the database: Connection refused\n")
        return 1
    opts, _ = parse_opts(
        argv,
        {
            "o": "format",
            "format": 1,
            "j": "jobs",
            "jobs": 1,
            "u": "user",
            "user": 1,
            "S": "starttime",
            "starttime": 1,
            "s": "state",
            "state": 1,
        },
        {
            "n": "noheader",
            "noheader": 1,
            "X": "allocations",
            "allocations": 1,
            "P": "parsable2",
            "parsable2": 1,
            "parsable": 1,
        },
        positional_stop=False,
    )
    fields = opts.get("format", "JobID,JobName,State,ExitCode").split(",")
    ids = opts["jobs"].split(",") if "jobs" in opts else None
    users = set(opts["user"].split(",")) if "user" in opts else None
    rows = []
    lag = float(s.config("accounting_lag", 0))
    for r in s.state["acct"]:
        if lag and now() < r["submit"] + lag:
            continue  # not in the database yet
        jobid = "%d_%d" % (r["id"], r["task"]) if r["task"] is not None else str(r["id"])
        if ids is not None and str(r["id"]) not in ids and jobid not in ids:
            continue
        if users is not None and r["user"] not in users:
            continue
        vals = {
            "jobid": jobid,
            "jobidraw": str(r["id"]),
            "state": r["state"],
            "exitcode": r["exit"],
            "submit": fmt_time(r["submit"]),
            "start": fmt_time(r["start"]) if r["start"] else "Unknown",
            "end": fmt_time(r["end"]) if r["end"] else "Unknown",
            "jobname": r["name"],
            "comment": r["comment"],
            "user": r["user"],
        }
        rows.append("|".join(vals.get(f.lower(), "") for f in fields))
    if not opts.get("noheader"):
        print("|".join(fields))
    for row in rows:
        print(row)
    return 0


def cmd_scancel(s: Sched, argv):
    if s.fire("fail", "scancel"):
        sys.stderr.write(
            "scancel: error: Kill job error on job id %s: %s\n" % (argv[-1] if argv else "?", CONTROLLER_DOWN)
        )
        return 8
    opts, rest = parse_opts(
        argv,
        {"s": "signal", "signal": 1, "n": "name", "name": 1},
        {"f": "full", "full": 1, "b": "batch", "batch": 1},
        positional_stop=False,
    )
    sig = opts.get("signal", "TERM")
    signum = getattr(signal, "SIG" + sig.upper().replace("SIG", ""), None) if not str(sig).isdigit() else int(sig)
    targets = []
    for spec in rest:
        found = s.find(spec)
        if not found:
            sys.stderr.write("scancel: error: Kill job error on job id %s: Invalid job id specified\n" % spec)
        targets += found
    if "name" in opts:
        names = set(opts["name"].split(","))
        targets += [(j, t, task) for j, t, task in s.tasks() if j["name"] in names]
    for job, t, task in targets:
        if task["state"] == "PENDING":
            task.update(state="CANCELLED", end=now(), exit="0:0", reason="None")
            task.setdefault("history", []).append("PENDING")
            s.sync_acct(job, t, task)
        elif task["state"] == "RUNNING":
            task.update(cancelled=True, end=now())
            s.signal_task(job, t, task, signum or signal.SIGTERM)
            task.update(state="CANCELLED", exit="0:%d" % (signum or 15), reason="None")
            task.setdefault("history", []).append("RUNNING")
            s.sync_acct(job, t, task)
        s.event(cancelled=s.key(job, t))
    return 0


def cmd_scontrol(s: Sched, argv):
    if s.fire("fail", "scontrol"):
        sys.stderr.write("slurm_load_ctl_conf error: %s\n" % CONTROLLER_DOWN)
        return 1
    if argv[:2] == ["show", "config"]:
        print("Configuration data as of %s" % fmt_time(now()))
        print("ClusterName             = fake")
        print("MaxArraySize            = %d" % int(s.config("max_array_size", 1001)))
        print("MinJobAge               = %d sec" % int(float(s.config("min_job_age", 3))))
        return 0
    if argv[:1] == ["ping"]:
        print("Slurmctld(primary) at fake is UP")
        return 0
    if argv[:1] in (["release"], ["hold"]) and len(argv) > 1:
        for job, _t, task in s.find(argv[1]):
            job["held"] = argv[0] == "hold"
            if task["state"] == "PENDING":
                task["reason"] = "JobHeldUser" if job["held"] else "None"
        return 0
    sys.stderr.write("scontrol: fake supports show config, ping, hold ID, release ID\n")
    return 1


def cmd_admin(s: Sched, argv):
    """``fake-sched vanish ID`` | ``fake-sched end ID STATE [REASON]`` | ``fake-sched state`` |
    ``fake-sched tick``: an admin's hand (``end``: the task ends in STATE, e.g. NODE_FAIL)."""
    if argv[:1] == ["vanish"]:
        for spec in argv[1:]:
            for job, t, task in s.find(spec):
                s.vanish(job, t, task)
        return 0
    if argv[:1] == ["end"] and len(argv) in (3, 4) and argv[2] in TERMINAL:
        for job, t, task in s.find(argv[1]):
            s.end_as(job, t, task, argv[2], argv[3] if len(argv) == 4 else "None")
        return 0
    if argv[:1] == ["state"]:
        print(json.dumps(s.state, indent=1, sort_keys=True))
        return 0
    if argv[:1] == ["tick"]:
        return 0
    sys.stderr.write("usage: fake-sched vanish ID... | end ID STATE [REASON] | state | tick\n")
    return 2


COMMANDS = {
    "sbatch": cmd_sbatch,
    "squeue": cmd_squeue,
    "sacct": cmd_sacct,
    "scancel": cmd_scancel,
    "scontrol": cmd_scontrol,
    "fake-sched": cmd_admin,
}


def _user():
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def main(command, argv):
    if command == "_shepherd":
        shepherd(*argv)
        return 0
    directory = os.environ.get("FAKE_SCHED_DIR")
    if not directory:
        sys.stderr.write("%s (fake): FAKE_SCHED_DIR is not set\n" % command)
        return 1
    s = Sched(directory)
    s.closed = False
    try:
        s.event(cmd=command, argv=argv)
        if command != "sbatch":
            s.tick()
        return COMMANDS[command](s, argv)
    except Usage as e:
        sys.stderr.write("%s: error: %s\n" % (command, e))
        return 1
    finally:
        if not s.closed:
            s.close()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_shepherd":
        sys.exit(main("_shepherd", sys.argv[2:]))
    sys.exit(main(os.path.basename(sys.argv[0]), sys.argv[1:]))
