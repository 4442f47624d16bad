"""A scripted fake of HTCondor's schedd and collector, for jim's tests.

HTCondor's daemons cannot be installed where jim's tests run, so the condor
adapter is tested against this fake, injected through the adapter's one seam
(:meth:`jim.adapters.condor.CondorAdapter.schedd` and
:func:`jim.adapters.condor.collector`).  It is enabled only by two explicit
environment variables, which :func:`enable` sets::

    JIM_CONDOR_FAKE=condor_fake           # this module (it declares JIM_CONDOR_FAKE_LAYER = True)
    JIM_CONDOR_FAKE_DIR=/tmp/.../fake     # its state: the queue, the history, the scenario

plus ``PYTHONPATH`` with this directory, so that jim's worker and monitor (run
as subprocesses) import it too.

What it does like a schedd (the parts the adapter relies on):

* ``submit(Submit, count=K)``: the description is written out as the
  bindings do (``key = value`` lines) and parsed again with the real
  ``htcondor2.Submit`` (a value that smuggles in a line is caught); every
  command is macro-expanded by the real submit language per process
  (``$(Cluster)``, ``$(Process)``, ``$(DOLLAR)``...), ``My.X``/``+X``
  attributes are parsed with classad2 (a bad one refuses the submit), the
  ``arguments`` and ``environment`` are read with HTCondor's V2 rules
  (condor_arglist.cpp's ``split_args``, ported below); one cluster of K
  procs; each proc is run by a "starter" process that starts the job for
  real (so the wrapper writes its exit-code file), with a clean environment
  (the job's ``environment`` plus what a starter adds), stdout/stderr to
  ``output``/``error``;
* ``query(constraint, projection)`` and ``history(constraint, projection,
  match, since)``: ClassAds (real ``classad2.ClassAd`` objects) filtered by
  the constraint *evaluated with classad2*, projected; completed and removed
  jobs leave the queue for the history, as HTCondor's do;
* ``act(JobAction.Remove, ids | constraint)``: removed jobs are signalled
  (SIGTERM, SIGKILL after ``job_max_vacate_time``, default 2 s here) and go
  to the history as JobStatus 3;
* the collector: ``advertise`` records the ads, ``query`` answers from
  scripted startd slots, ``locate`` names the schedd.

What a scenario (``scenario.json`` in the state directory, re-read at every
call, changed with :func:`set_scenario`) can script::

    {"start_delay": 0.5,                  # seconds a job stays Idle before it starts
     "query_error": "...",                # query() raises HTCondorException(...)
     "history_error": "...", "act_error": "...",
     "submit_error": "...",               # submit() refuses: nothing is created
     "submit_error_after_commit": "...",  # the jobs are created and run, then submit() raises
     "collector_error": "...",            # the collector is unreachable
     "slots": [{"Name": "slot1@x", "Cpus": 4, "State": "Unclaimed", "Activity": "Idle"}],
     "rules": [                           # per proc, at submit: the first rule whose "when"
       {"when": "JimOffset + ProcId == 1",#   (a ClassAd expression on the job ad) is true
        "after": 0.0,                     # seconds Idle before the scripted transition
        "hold": {"reason": "...", "code": 13, "subcode": 2},  # held, never runs
        "exit": {"code": 3} | {"signal": 9},  # completes without running anything
        "status": 7,                      # sits in this JobStatus for good
        "idle": true,                     # never starts
        "vanish": true,                   # runs, then leaves no history record at all
        "leave_in_queue": true}]}         # completed jobs stay in the queue (JobStatus 4)

Not faithful (and so not verified by these tests): authentication, the
network, file transfer, matchmaking and requirements (every job "matches"
at once), partitionable slots, job policies (periodic_*, allowed_job_duration),
hold/release/suspend on request, requeueing after an execute node fails,
history rotation, the schedd's own exceptions' wording.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import getpass
import json
import os
import pwd
import re
import signal
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

JIM_CONDOR_FAKE_LAYER = True
MODULE = "condor_fake"
DIR_ENV = "JIM_CONDOR_FAKE_DIR"
HERE = Path(__file__).resolve().parent

#: JobStatus values (HTCondor's numbers)
IDLE, RUNNING, REMOVED, COMPLETED, HELD, TRANSFERRING, SUSPENDED = 1, 2, 3, 4, 5, 6, 7
UNIVERSES = {"vanilla": 5, "scheduler": 7, "local": 12}
#: request_* submit commands -> the job attribute condor_submit makes of each (an expression)
REQUESTS = {"request_cpus": "RequestCpus", "request_gpus": "RequestGPUs", "request_memory": "RequestMemory"}
_MEMORY_UNIT = re.compile(r"^\s*(\d+)\s*([KMGT]?)B?\s*$", re.I)


def request_expr(command: str, value: str) -> str:
    """The job attribute's expression of a request_* command: condor_submit reads a memory with a unit
    (``2GB``) as MB; anything else is a ClassAd expression (``TotalSlotCpus``), evaluated at match."""
    m = _MEMORY_UNIT.match(value) if command == "request_memory" else None
    if m:
        scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2}[m.group(2).upper()]
        return str(max(1, int(int(m.group(1)) * scale)))
    return value


def enable(env: dict[str, str], state_dir: Path | str) -> dict[str, str]:
    """``env`` with the fake enabled, its state in ``state_dir`` (created)."""
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    env = dict(env)
    env["JIM_CONDOR_FAKE"] = MODULE
    env[DIR_ENV] = str(state_dir)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    return env


def _state_dir() -> Path:
    d = os.environ.get(DIR_ENV)
    if not d:
        raise RuntimeError(f"the fake HTCondor layer needs {DIR_ENV} (see tests/condor_fake.py)")
    return Path(d)


def fake_schedd(adapter: Any = None) -> FakeSchedd:
    """The seam's factory for the schedd (``adapter`` is the CondorAdapter asking)."""
    return FakeSchedd(_state_dir())


def fake_collector(pool: str | None = None) -> FakeCollector:
    """The seam's factory for the collector."""
    return FakeCollector(_state_dir(), pool)


def set_scenario(state_dir: Path | str, **changes: Any) -> dict:
    """Update the scenario (None removes a key); returns it."""
    path = Path(state_dir) / "scenario.json"
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    with _locked(Path(state_dir)):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        for k, v in changes.items():
            if v is None:
                data.pop(k, None)
            else:
                data[k] = v
        _write_json(path, data)
    return data


def _error(message: str) -> Exception:
    import htcondor2

    return htcondor2.HTCondorException(message)


# ---------------------------------------------------------------------------
# HTCondor's V2 argument syntax (a port of condor_arglist.cpp)
# ---------------------------------------------------------------------------


def v2_quoted_to_raw(text: str) -> str:
    """``V2QuotedToV2Raw``: strip the double quotes, ``""`` is a literal ``"``."""
    s = text.strip()
    if not s.startswith('"'):
        raise ValueError("expected a double-quoted (V2) string")
    out = []
    i = 1
    while i < len(s):
        c = s[i]
        if c == '"':
            if i + 1 < len(s) and s[i + 1] == '"':
                out.append('"')
                i += 2
                continue
            if s[i + 1 :].strip():
                raise ValueError(f"unexpected characters following double-quote: {s[i:]!r}")
            return "".join(out)
        out.append(c)
        i += 1
    raise ValueError("unterminated double-quote")


def split_args(raw: str) -> list[str]:
    """``split_args``: white space separates; '...' protects, '' inside is a literal '."""
    args: list[str] = []
    buf: list[str] = []
    token = False
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == "'":
            token = True
            start = i
            i += 1
            while True:
                if i >= len(raw):
                    raise ValueError(f"unbalanced quote starting here: {raw[start:]!r}")
                if raw[i] == "'":
                    if i + 1 < len(raw) and raw[i + 1] == "'":
                        buf.append("'")
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(raw[i])
                i += 1
        elif c in " \t\n\r":
            i += 1
            if token:
                args.append("".join(buf))
                buf, token = [], False
        else:
            token = True
            buf.append(c)
            i += 1
    if token:
        args.append("".join(buf))
    return args


def parse_arguments(value: str) -> list[str]:
    """The argv (without argv[0]) of an expanded ``arguments`` value (V2 only)."""
    if not value.strip():
        return []
    return split_args(v2_quoted_to_raw(value))


def parse_environment(value: str) -> dict[str, str]:
    """An expanded ``environment`` value (V2 only: ``"A=1 B='x y'"``)."""
    env = {}
    if not value.strip():
        return env
    for item in split_args(v2_quoted_to_raw(value)):
        name, sep, val = item.partition("=")
        if not sep or not name:
            raise ValueError(f"environment entry without '=': {item!r}")
        env[name] = val
    return env


# ---------------------------------------------------------------------------
# state on disk
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(d: Path) -> Iterator[None]:
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _ad_to_json(ad) -> dict[str, str]:
    return {k: str(ad.lookup(k)) for k in ad.keys()}  # noqa: SIM118 (a ClassAd, not a dict)


def _ad_from_json(data: dict[str, str]):
    import classad2

    ad = classad2.ClassAd()
    for k, v in data.items():
        ad[k] = classad2.ExprTree(v)
    return ad


def _literal(value: Any) -> str:
    import classad2

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return classad2.quote(str(value))


def _identity(pid: int) -> float | None:
    try:
        import psutil

        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p.create_time()
    except Exception:
        return None


def _alive(pid: int | None, start: float | None) -> bool:
    if not pid or start is None:
        return False
    now = _identity(pid)
    return now is not None and abs(now - start) < 0.05


class _State:
    """The fake schedd's queue, history and counters, in one directory."""

    def __init__(self, d: Path):
        self.dir = Path(d)
        self.queue = self.dir / "queue"
        self.hist = self.dir / "history"
        for sub in (self.queue, self.hist, self.dir / "scratch", self.dir / "collector"):
            sub.mkdir(parents=True, exist_ok=True)

    def scenario(self) -> dict:
        try:
            return json.loads((self.dir / "scenario.json").read_text())
        except (OSError, ValueError):
            return {}

    def counter(self, name: str, start: int = 1) -> int:
        path = self.dir / f"{name}.counter"
        try:
            value = int(path.read_text())
        except (OSError, ValueError):
            value = start
        path.write_text(str(value + 1))
        return value

    def load(self, bid: str) -> dict | None:
        try:
            return json.loads((self.queue / f"{bid}.json").read_text())
        except (OSError, ValueError):
            return None

    def save(self, bid: str, rec: dict) -> None:
        _write_json(self.queue / f"{bid}.json", rec)

    def queued(self) -> list[tuple[str, dict]]:
        out = []
        for path in sorted(self.queue.glob("*.json"), key=lambda p: tuple(int(x) for x in p.stem.split("."))):
            try:
                out.append((path.stem, json.loads(path.read_text())))
            except (OSError, ValueError):
                continue
        return out

    def retire(self, bid: str, rec: dict) -> None:
        """The job leaves the queue: into the history (unless it is scripted to vanish)."""
        (self.queue / f"{bid}.json").unlink(missing_ok=True)
        if rec["x"].get("vanish"):
            return
        seq = self.counter("history")
        _write_json(self.hist / f"{seq:09d}-{bid}.json", rec)

    def history(self) -> list[dict]:
        out = []
        for path in sorted(self.hist.glob("*.json"), reverse=True):  # newest first
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return out


def _set_status(rec: dict, status: int, now: float | None = None, **attrs: Any) -> None:
    now = time.time() if now is None else now
    rec["ad"]["JobStatus"] = str(status)
    rec["ad"]["EnteredCurrentStatus"] = str(int(now))
    for k, v in attrs.items():
        if v is None:
            rec["ad"].pop(k, None)
        else:
            rec["ad"][k] = _literal(v)


# ---------------------------------------------------------------------------
# the schedd
# ---------------------------------------------------------------------------


class FakeSubmitResult:
    def __init__(self, cluster: int, first: int, n: int, ad=None):
        self._cluster, self._first, self._n, self._ad = cluster, first, n, ad

    def cluster(self) -> int:
        return self._cluster

    def first_proc(self) -> int:
        return self._first

    def num_procs(self) -> int:
        return self._n

    def clusterad(self):
        return self._ad


class FakeSchedd:
    """See the module docstring.  Method signatures follow ``htcondor2.Schedd``."""

    def __init__(self, state_dir: Path | str):
        self.state = _State(Path(state_dir))

    # -- submit --------------------------------------------------------------------
    def submit(
        self, description, count: int = 0, spool: bool = False, itemdata: Any = None, queue: str | None = None
    ) -> FakeSubmitResult:
        import htcondor2

        if not isinstance(description, htcondor2.Submit):
            raise TypeError("description must be an htcondor2.Submit object")
        if itemdata is not None or queue is not None or spool:
            raise NotImplementedError("the fake schedd supports count only")
        scenario = self.state.scenario()
        if scenario.get("submit_error"):
            raise _error(scenario["submit_error"])
        given = dict(description.items())
        # what htcondor2.Schedd.submit does: write "key = value" lines, then the queue statement
        text = "".join(f"{k} = {v}\n" for k, v in given.items())
        reparsed = dict(htcondor2.Submit(text).items())
        if reparsed != given:
            raise _error(
                f"submit description changed when written out (a value with a newline?): "
                f"{sorted(set(reparsed.items()) ^ set(given.items()))!r}"
            )
        n = count or 1
        with _locked(self.state.dir):
            cluster = self.state.counter("cluster")
            now = time.time()
            records = [self._job(given, cluster, p, now, scenario) for p in range(n)]  # may refuse: nothing saved
            for p, rec in enumerate(records):
                self.state.save(f"{cluster}.{p}", rec)
        for p, rec in enumerate(records):
            if rec["x"]["phase"] == "idle" and not rec["x"].get("scripted"):
                self._start_starter(f"{cluster}.{p}")
        self._log("submit", {"cluster": cluster, "count": n, "description": given})
        if scenario.get("submit_error_after_commit"):
            raise _error(scenario["submit_error_after_commit"])
        return FakeSubmitResult(cluster, 0, n)

    def _job(self, given: dict[str, str], cluster: int, proc: int, now: float, scenario: dict) -> dict:
        """The job ad of one proc, as condor_submit would make it (the parts jim relies on)."""
        import classad2
        import htcondor2

        sub = htcondor2.Submit(given)
        for macro, value in (("Cluster", cluster), ("ClusterId", cluster), ("Process", proc), ("ProcId", proc)):
            sub[macro] = str(value)
        expanded = {k: sub.expand(k) for k in given}
        lower = {k.lower(): v for k, v in expanded.items()}
        ad: dict[str, str] = {}

        def put(attr: str, value: Any) -> None:
            ad[attr] = _literal(value)

        exe = lower.get("executable", "")
        if not exe:
            raise _error("No 'executable' parameter was provided")
        universe = lower.get("universe", "vanilla").lower()
        if universe not in UNIVERSES:
            raise _error(f"unknown universe {universe!r}")
        iwd = lower.get("initialdir") or lower.get("initial_dir") or os.getcwd()
        if not os.path.isdir(iwd):
            raise _error(f"No such directory: {iwd}")
        transfer = lower.get("transfer_executable", "true").lower() not in ("false", "no", "0")
        if not transfer and not os.path.isabs(exe):
            raise _error(f"executable {exe!r} must be an absolute path when transfer_executable is false")
        try:
            args = parse_arguments(lower.get("arguments", ""))
            env = parse_environment(lower.get("environment", ""))
        except ValueError as e:
            raise _error(f"bad arguments or environment: {e}") from None
        put("ClusterId", cluster)
        put("ProcId", proc)
        put("Owner", pwd.getpwuid(os.getuid()).pw_name)  # as a schedd does: the submitter's account, not $USER
        put("QDate", int(now))
        put("JobStatus", IDLE)
        put("EnteredCurrentStatus", int(now))
        put("JobUniverse", UNIVERSES[universe])
        put("Cmd", exe)
        put("Iwd", iwd)
        put("Out", os.path.join(iwd, lower.get("output", "/dev/null")))
        put("Err", os.path.join(iwd, lower.get("error", "/dev/null")))
        put("TransferExecutable", transfer)
        for key, value in expanded.items():
            low = key.lower()
            if key.startswith("+") or low.startswith("my."):
                attr = key[1:] if key.startswith("+") else key[3:]
                try:
                    classad2.ExprTree(value)
                except Exception:
                    raise _error(f"Parse error in expression: {key} = {value}") from None
                ad[attr] = value
            elif low in REQUESTS:
                expr = request_expr(low, value)
                try:
                    classad2.ExprTree(expr)
                except Exception:
                    raise _error(f"Parse error in expression: {key} = {value}") from None
                ad[REQUESTS[low]] = expr
            elif low == "requirements":
                try:
                    classad2.ExprTree(value)
                except Exception:
                    raise _error(f"Parse error in expression: requirements = {value}") from None
                ad["Requirements"] = value
        rec = {
            "ad": ad,
            "x": {
                "phase": "idle",
                "argv": [exe, *args],
                "env": env,
                "vacate": float(lower.get("job_max_vacate_time", 2)),
                "submitted": now,
            },
        }
        rule = self._rule(ad, scenario)
        if rule:
            rec["x"]["rule"] = rule
            rec["x"]["vanish"] = bool(rule.get("vanish"))
            rec["x"]["leave_in_queue"] = bool(rule.get("leave_in_queue"))
            if any(k in rule for k in ("hold", "exit", "status", "idle")):
                rec["x"]["scripted"] = True
        rec["x"]["start_delay"] = float((rule or {}).get("start_delay", scenario.get("start_delay", 0.0)))
        return rec

    @staticmethod
    def _rule(ad: dict[str, str], scenario: dict) -> dict | None:
        import classad2

        if not scenario.get("rules"):
            return None
        job = _ad_from_json(ad)
        for rule in scenario["rules"]:
            if classad2.ExprTree(rule.get("when", "true")).eval(job) is True:
                return rule
        return None

    def _start_starter(self, bid: str) -> None:
        from jim.proc import spawn_detached

        spawn_detached(
            [sys.executable, str(Path(__file__).resolve()), "_starter", str(self.state.dir), bid],
            env=dict(os.environ),
            cwd=str(self.state.dir),
            stderr=str(self.state.dir / "starter.err"),
        )

    # -- time-driven, scripted transitions -------------------------------------------
    def _advance(self) -> None:
        now = time.time()
        with _locked(self.state.dir):
            for bid, rec in self.state.queued():
                x = rec["x"]
                if not x.get("scripted") or x.get("done"):
                    continue
                rule = x["rule"]
                if now < x["submitted"] + float(rule.get("after", 0.0)):
                    continue
                if "hold" in rule:
                    h = rule["hold"]
                    _set_status(
                        rec,
                        HELD,
                        now,
                        HoldReason=h.get("reason", "held"),
                        HoldReasonCode=int(h.get("code", 1)),
                        HoldReasonSubCode=int(h.get("subcode", 0)),
                    )
                    x["phase"], x["done"] = "held", True
                    self.state.save(bid, rec)
                elif "exit" in rule:
                    e = rule["exit"]
                    by_signal = "signal" in e
                    _set_status(
                        rec,
                        COMPLETED,
                        now,
                        ExitBySignal=by_signal,
                        ExitCode=None if by_signal else int(e.get("code", 0)),
                        ExitSignal=int(e["signal"]) if by_signal else None,
                        CompletionDate=int(now),
                        LastRemoteHost=f"slot1@{socket.gethostname()}",
                    )
                    x["phase"], x["done"] = "exited", True
                    if x.get("leave_in_queue"):
                        self.state.save(bid, rec)
                    else:
                        self.state.retire(bid, rec)
                elif "status" in rule:
                    _set_status(rec, int(rule["status"]), now)
                    x["phase"], x["done"] = "scripted", True
                    self.state.save(bid, rec)
                else:  # idle for good
                    x["done"] = True
                    self.state.save(bid, rec)

    # -- queries -----------------------------------------------------------------------
    @staticmethod
    def _select(records: list[dict], constraint: Any, projection: list[str], limit: int = -1) -> list:
        import classad2

        expr = (
            constraint
            if isinstance(constraint, classad2.ExprTree)
            else classad2.ExprTree("true" if constraint is None else str(constraint))
        )
        out = []
        for rec in records:
            ad = _ad_from_json(rec["ad"])
            if expr.eval(ad) is not True:
                continue
            if projection:
                small = classad2.ClassAd()
                for attr in projection:
                    if attr in ad:
                        small[attr] = ad.lookup(attr)
                ad = small
            out.append(ad)
            if 0 <= limit <= len(out):
                break
        return out

    def query(
        self,
        constraint: Any = "true",
        projection: Sequence[str] = (),
        callback: Any = None,
        limit: int = -1,
        opts: Any = None,
    ) -> list:
        scenario = self.state.scenario()
        self._log("query", {"constraint": str(constraint), "projection": list(projection)})
        if scenario.get("query_error"):
            raise _error(scenario["query_error"])
        self._advance()
        with _locked(self.state.dir):
            records = [rec for _bid, rec in self.state.queued()]
        ads = self._select(records, constraint, projection, limit)
        return [callback(a) for a in ads] if callback else ads

    def history(
        self, constraint: Any = None, projection: Sequence[str] = (), match: int = -1, since: Any = None
    ) -> list:
        import classad2

        scenario = self.state.scenario()
        self._log(
            "history",
            {
                "constraint": str(constraint),
                "projection": list(projection),
                "match": match,
                "since": None if since is None else str(since),
            },
        )
        if scenario.get("history_error"):
            raise _error(scenario["history_error"])
        self._advance()
        with _locked(self.state.dir):
            records = self.state.history()
        if since is not None:
            if isinstance(since, int):
                stop = classad2.ExprTree(f"ClusterId == {since}")
            elif isinstance(since, str) and re.match(r"^\d+\.\d+$", since):
                c, p = since.split(".")
                stop = classad2.ExprTree(f"ClusterId == {c} && ProcId == {p}")
            else:
                stop = since if isinstance(since, classad2.ExprTree) else classad2.ExprTree(str(since))
            kept = []
            for rec in records:
                if stop.eval(_ad_from_json(rec["ad"])) is True:
                    break
                kept.append(rec)
            records = kept
        return self._select(records, constraint, projection, match)

    # -- actions ---------------------------------------------------------------------
    def act(self, action: Any, job_spec: Any, reason: str | None = None):
        import classad2
        import htcondor2

        scenario = self.state.scenario()
        self._log(
            "act",
            {"action": str(action), "job_spec": job_spec if isinstance(job_spec, (list, str, int)) else str(job_spec)},
        )
        if scenario.get("act_error"):
            raise _error(scenario["act_error"])
        if action != htcondor2.JobAction.Remove:
            raise NotImplementedError(f"the fake schedd only removes jobs, not {action!r}")
        if isinstance(job_spec, list):
            wanted = {str(j) for j in job_spec}
            match = lambda bid, ad: bid in wanted or bid.split(".")[0] in wanted  # noqa: E731
        elif isinstance(job_spec, int):
            match = lambda bid, ad: bid.split(".")[0] == str(job_spec)  # noqa: E731
        elif isinstance(job_spec, str) and re.match(r"^\d+(\.\d+)?$", job_spec):
            match = lambda bid, ad: bid == job_spec or bid.split(".")[0] == job_spec  # noqa: E731
        else:
            expr = job_spec if isinstance(job_spec, classad2.ExprTree) else classad2.ExprTree(str(job_spec))
            match = lambda bid, ad: expr.eval(_ad_from_json(ad)) is True  # noqa: E731
        why = reason or f"Python-initiated action (by user {getpass.getuser()})"
        success = not_found = 0
        signal_starters = []
        with _locked(self.state.dir):
            queued = dict(self.state.queued())
            for bid, rec in queued.items():
                if not match(bid, rec["ad"]):
                    continue
                if rec["ad"].get("JobStatus") == str(REMOVED):
                    continue
                success += 1
                x = rec["x"]
                _set_status(rec, REMOVED, RemoveReason=why)
                if x["phase"] == "running":
                    x["phase"] = "removing"
                    self.state.save(bid, rec)
                    signal_starters.append((x.get("starter_pid"), x.get("starter_start")))
                else:
                    x["phase"] = "removed"
                    self.state.retire(bid, rec)
            if isinstance(job_spec, list):
                not_found = len([j for j in job_spec if str(j) not in queued])
        for pid, start in signal_starters:
            if _alive(pid, start):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        result = classad2.ClassAd()
        result["TotalSuccess"] = success
        result["TotalNotFound"] = not_found
        result["TotalError"] = 0
        return result

    # -- helpers for the tests (what an admin or a crash would do) --------------------
    def admin_remove(self, bid: str, *, force: bool = True) -> None:
        """``condor_rm`` by someone else; ``force``: the job is SIGKILLed (no chance to flush)."""
        with _locked(self.state.dir):
            rec = self.state.load(bid)
            if rec is None:
                return
            x = rec["x"]
            _set_status(rec, REMOVED, RemoveReason="removed by the administrator")
            if x["phase"] == "running":
                x["phase"] = "removing"
                x["vacate"] = 0.0 if force else x["vacate"]
                self.state.save(bid, rec)
                pid, start = x.get("job_pid"), x.get("job_start")
                if force and _alive(pid, start):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
            else:
                x["phase"] = "removed"
                self.state.retire(bid, rec)

    def jobs(self) -> dict[str, dict]:
        """The queue: batch id -> record (``ad``: attribute -> ClassAd expression text, ``x``: the fake's own)."""
        with _locked(self.state.dir):
            return dict(self.state.queued())

    def history_records(self) -> list[dict]:
        with _locked(self.state.dir):
            return self.state.history()

    def calls(self, kind: str | None = None) -> list[dict]:
        """Every call made to this fake (all processes), oldest first."""
        path = self.state.dir / "calls.jsonl"
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return []
        calls = [json.loads(line) for line in lines if line.strip()]
        return [c for c in calls if kind is None or c["call"] == kind]

    def kill_everything(self) -> None:
        """Teardown: kill every starter and job this fake started."""
        with _locked(self.state.dir):
            records = [rec for _bid, rec in self.state.queued()]
        for rec in records:
            x = rec["x"]
            if _alive(x.get("job_pid"), x.get("job_start")):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(x["job_pid"], signal.SIGKILL)
            if _alive(x.get("starter_pid"), x.get("starter_start")):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(x["starter_pid"], signal.SIGKILL)

    def _log(self, call: str, data: dict) -> None:
        line = json.dumps({"call": call, "at": time.time(), "pid": os.getpid(), **data}, default=str) + "\n"
        fd = os.open(self.state.dir / "calls.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------
# the starter: runs one job for real
# ---------------------------------------------------------------------------


def _pdeathsig() -> None:
    """In the job: die with the starter (so that a killed starter leaves no job behind)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def starter_main(state_dir: str, bid: str) -> int:
    import subprocess
    import threading

    state = _State(Path(state_dir))
    me = os.getpid()
    my_start = _identity(me)
    with _locked(state.dir):
        rec = state.load(bid)
        if rec is None or rec["x"]["phase"] != "idle":
            return 0
        rec["x"]["starter_pid"], rec["x"]["starter_start"] = me, my_start
        state.save(bid, rec)
        delay = rec["x"].get("start_delay", 0.0)
    deadline = time.time() + delay
    while time.time() < deadline:
        time.sleep(0.05)
        with _locked(state.dir):
            rec = state.load(bid)
            if rec is None or rec["x"]["phase"] != "idle":
                return 0
    scratch = state.dir / "scratch" / f"dir_{bid}"
    scratch.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    with _locked(state.dir):
        rec = state.load(bid)
        if rec is None or rec["x"]["phase"] != "idle":
            return 0
        x, ad = rec["x"], rec["ad"]
        job_ad = scratch / ".job.ad"
        job_ad.write_text("".join(f"{k} = {v}\n" for k, v in sorted(ad.items())))
        env = {
            "_CONDOR_SCRATCH_DIR": str(scratch),
            "_CONDOR_SLOT": "slot1",
            "_CONDOR_JOB_AD": str(job_ad),
            "_CONDOR_JOB_IWD": json.loads(ad["Iwd"]),
            "TMPDIR": str(scratch),
            "TMP": str(scratch),
            "TEMP": str(scratch),
            "BATCH_SYSTEM": "HTCondor",
            **x["env"],
        }
        out_path, err_path, iwd = (json.loads(ad[k]) for k in ("Out", "Err", "Iwd"))
        try:
            out = open(out_path, "ab")
            err = open(err_path, "ab")
            proc = subprocess.Popen(
                x["argv"],
                cwd=iwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=_pdeathsig,
            )
        except OSError as e:
            _set_status(
                rec,
                HELD,
                HoldReason=f"Error from slot1@{host}: Failed to execute '{x['argv'][0]}': {e.strerror}",
                HoldReasonCode=6,
                HoldReasonSubCode=e.errno or 0,
            )
            x["phase"] = "held"
            state.save(bid, rec)
            return 0
        x["phase"], x["job_pid"], x["job_start"] = "running", proc.pid, _identity(proc.pid)
        _set_status(rec, RUNNING, RemoteHost=f"slot1@{host}", JobCurrentStartDate=int(time.time()))
        state.save(bid, rec)
        vacate = float(x.get("vacate", 2.0))

    def on_term(signum, frame):  # a remove: the job gets SIGTERM, then SIGKILL after the vacate time
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)

        def hard_kill():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        t = threading.Timer(vacate, hard_kill)
        t.daemon = True
        t.start()

    signal.signal(signal.SIGTERM, on_term)
    # a remove that came before the handler was installed
    with _locked(state.dir):
        rec = state.load(bid)
        if rec is not None and rec["x"]["phase"] == "removing":
            on_term(signal.SIGTERM, None)
    rc = proc.wait()
    now = time.time()
    with _locked(state.dir):
        rec = state.load(bid)
        if rec is None:
            return 0
        x = rec["x"]
        by_signal = rc < 0
        attrs = dict(
            ExitBySignal=by_signal,
            ExitCode=None if by_signal else rc,
            ExitSignal=-rc if by_signal else None,
            CompletionDate=int(now),
            LastRemoteHost=f"slot1@{host}",
            RemoteHost=None,
        )
        if x["phase"] == "removing":
            rec["ad"]["EnteredCurrentStatus"] = str(int(now))
            for k, v in attrs.items():
                if v is None:
                    rec["ad"].pop(k, None)
                else:
                    rec["ad"][k] = _literal(v)
            x["phase"] = "removed"
            state.retire(bid, rec)
            return 0
        _set_status(rec, COMPLETED, now, **attrs)
        x["phase"] = "exited"
        if x.get("leave_in_queue"):
            state.save(bid, rec)
        else:
            state.retire(bid, rec)
    return 0


# ---------------------------------------------------------------------------
# the collector
# ---------------------------------------------------------------------------


class FakeCollector:
    """``htcondor2.Collector`` stand-in: advertise records, query answers scripted slots."""

    def __init__(self, state_dir: Path | str, pool: str | None = None):
        self.state = _State(Path(state_dir))
        self.pool = pool

    def _check(self) -> None:
        scenario = self.state.scenario()
        if scenario.get("collector_error"):
            raise _error(scenario["collector_error"])
        if self.pool and self.pool in scenario.get("unreachable_pools", []):
            raise _error("Failed to advertise to collector.")

    def advertise(self, ad_list: list, command: str = "UPDATE_AD_GENERIC", use_tcp: bool = True) -> None:
        import classad2

        self._check()
        if not all(isinstance(ad, classad2.ClassAd) for ad in ad_list):
            raise TypeError("ad_list must be a list of classad2.ClassAd")
        with _locked(self.state.dir):
            path = self.state.dir / "collector" / "advertised.jsonl"
            with open(path, "a") as f:
                for ad in ad_list:
                    f.write(json.dumps({"pool": self.pool, "command": command, "ad": _ad_to_json(ad)}) + "\n")

    def advertised(self) -> list[dict]:
        path = self.state.dir / "collector" / "advertised.jsonl"
        try:
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except OSError:
            return []

    def query(
        self, ad_type: Any = None, constraint: Any = "true", projection: Sequence[str] = (), statistics: Any = None
    ) -> list:
        self._check()
        slots = self.state.scenario().get("slots", [])
        records = [{"ad": {k: _literal(v) for k, v in slot.items()}} for slot in slots]
        return FakeSchedd._select(records, constraint if constraint is not None else "true", projection)

    def locate(self, daemon_type: Any, name: str | None = None):
        import classad2

        self._check()
        return classad2.ClassAd({"Name": name or f"fake-schedd@{socket.gethostname()}", "MyAddress": "<127.0.0.1:0>"})


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "_starter":
        sys.exit(starter_main(sys.argv[2], sys.argv[3]))
    print("usage: condor_fake.py _starter STATE_DIR CLUSTER.PROC", file=sys.stderr)
    sys.exit(2)
