"""HTCondor, through the htcondor Python bindings (``htcondor2``/``classad2``).

* **submit**: one ``Schedd.submit(description, count=K)`` transaction per chunk
  (per run of consecutive local jobs, which a chunk normally is).  Process
  ``p`` of the cluster is local job ``offset + p``: the wrapper finds ``p`` in
  ``$JIM_INDEX_ARRAY`` (``environment = "JIM_INDEX_ARRAY=$(Process) ..."``).
  Every job carries ``JimGridJob`` (the grid job id), ``JimOffset`` and
  ``JimTag`` (``<grid id>.<offset>``, the chunk's tag base); a process's own
  tag is ``<JimGridJob>.<JimOffset + ProcId>``.  Batch ids are
  ``<ClusterId>.<ProcId>``.
* **query**: one projected ``Schedd.query`` per ``cache_interval`` for every
  jim job of this user (``JimGridJob =!= undefined && Owner == "<user>"``),
  shared through the on-disk cache of :meth:`Adapter.query_cached`.
* **accounting**: ``Schedd.history`` for the jobs that left the queue.
* **cancel**: ``Schedd.act(JobAction.Remove, ["<cluster>.<proc>", ...])``.
* **find by tag**: ``Schedd.query`` and ``Schedd.history`` by ``JimGridJob``.
* **free slots**: idle CPUs of unclaimed slots, from the collector.

The bindings are imported lazily (never when jim itself is imported: ``jim
poll`` stays light), and every call to HTCondor goes through one seam,
:meth:`CondorAdapter.schedd` (and :func:`collector` for the collector).  When
the environment variable ``JIM_CONDOR_FAKE`` names a module, the seam asks that
module for the schedd and the collector instead (its ``fake_schedd(adapter)``
and ``fake_collector(pool)``).  It is meant for tests only: the module must
declare ``JIM_CONDOR_FAKE_LAYER = True``, and every use is logged as a warning.
jim's own test suite uses ``tests/condor_fake.py``.

Job states: https://htcondor.readthedocs.io/en/latest/classad-attributes/job-classad-attributes.html#JobStatus
Argument quoting: the "new syntax" of ``arguments`` in condor_submit(1)
(src/condor_utils/condor_arglist.cpp: ``join_args`` / ``V2RawToV2Quoted``).
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import time
from typing import Any, Iterable

from jim.adapters.base import Adapter, BatchStatus, QueryResult, SubmitChunk
from jim.errors import CancelError, ConfigError, QueryError, SubmitError
from jim.states import Evidence, LocalState

log = logging.getLogger("jim.adapters")

FAKE_ENV = "JIM_CONDOR_FAKE"
INDEX_ENV = "JIM_INDEX_ARRAY"

#: JobStatus -> (HTCondor's name, jim state).  A completed job is DONE only
#: with exit code 0 (see :func:`status_of`); the exit-code file decides first.
JOB_STATUS: dict[int, tuple[str, LocalState]] = {
    1: ("Idle", LocalState.QUEUED),
    2: ("Running", LocalState.RUNNING),
    3: ("Removed", LocalState.CANCELLED),           # condor_rm (jim's or an admin's); in the queue until cleaned up
    4: ("Completed", LocalState.DONE),              # FAILED when ExitCode != 0 or ExitBySignal
    5: ("Held", LocalState.HELD),                   # HoldReason / HoldReasonCode recorded as the reason
    6: ("Transferring Output", LocalState.RUNNING),  # ambiguous: our code ended, files still moving
    7: ("Suspended", LocalState.SUSPENDED),
}

#: What every status query, history lookup and tag search asks for.
PROJECTION = ["ClusterId", "ProcId", "JobStatus", "HoldReason", "HoldReasonCode", "HoldReasonSubCode",
              "ExitCode", "ExitBySignal", "ExitSignal", "RemoveReason", "JimTag", "JimGridJob", "JimOffset",
              "QDate", "EnteredCurrentStatus", "RemoteHost", "LastRemoteHost", "Owner"]

#: Submit commands jim writes itself; ``submit_commands`` may not set them (nor any ``My.Jim*`` attribute).
RESERVED_COMMANDS = frozenset({
    "universe", "executable", "arguments", "args", "environment", "env", "initialdir", "initial_dir", "iwd",
    "output", "error", "input", "transfer_executable", "queue", "+jimtag", "my.jimtag", "+jimgridjob",
    "my.jimgridjob", "+jimoffset", "my.jimoffset", "+jimqueue", "my.jimqueue", "requirements",
    "allowed_job_duration",
})
_MACRO_LIKE = re.compile(r"\$[A-Za-z0-9_]*\(")
_COMMAND_NAME = re.compile(r"^(?:\+|[Mm][Yy]\.)?[A-Za-z_][A-Za-z0-9_.]*$")

#: Messages of errors a retry may cure (the schedd is down, busy or unreachable).
_TRANSIENT = re.compile(r"connect|timed? ?out|timeout|unable to locate|failed to (?:contact|fetch|locate|send|"
                        r"start transaction|commit)|communicat|socket|refused|temporarily|try again|busy|"
                        r"SECMAN|authenticat|reset by peer|broken pipe|no route", re.I)


# ---------------------------------------------------------------------------
# the seam
# ---------------------------------------------------------------------------

def fake_layer() -> Any | None:
    """The test module named by ``$JIM_CONDOR_FAKE``, or None (production: the real bindings)."""
    name = os.environ.get(FAKE_ENV)
    if not name:
        return None
    from importlib import import_module

    try:
        module = import_module(name)
    except ImportError as e:
        raise ConfigError(f"{FAKE_ENV}={name}: cannot import the fake HTCondor layer: {e}") from e
    if getattr(module, "JIM_CONDOR_FAKE_LAYER", False) is not True:
        raise ConfigError(f"{FAKE_ENV}={name}: that module is not a fake HTCondor layer "
                          f"(it does not declare JIM_CONDOR_FAKE_LAYER = True)")
    log.warning("HTCondor is faked by %s (%s is set): nothing reaches a real schedd or collector", name, FAKE_ENV)
    return module


def collector(pool: str | None = None):
    """An ``htcondor2.Collector`` for ``pool`` (None: the local pool), or the fake one."""
    fake = fake_layer()
    if fake is not None:
        return fake.fake_collector(pool or None)
    import htcondor2

    return htcondor2.Collector(pool or None)


def _errors() -> tuple[type[BaseException], ...]:
    """What a call into the bindings may raise (their exception, and what wraps C-level failures)."""
    try:
        import htcondor2

        return (htcondor2.HTCondorException, RuntimeError, OSError)
    except ImportError:  # pragma: no cover - the wheel is a dependency
        return (RuntimeError, OSError)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text[:300]


def _is_transient(e: BaseException) -> bool:
    return isinstance(e, (OSError, TimeoutError)) or bool(_TRANSIENT.search(str(e)))


# ---------------------------------------------------------------------------
# the submit language
# ---------------------------------------------------------------------------

def quote_argument(arg: str) -> str:
    """One argument in HTCondor's V2 raw syntax (``join_args`` of condor_arglist.cpp).

    White space and single quotes are protected inside single quotes, a single
    quote doubled; everything else is literal (backslashes included).
    """
    if arg == "":
        return "''"
    if not re.search(r"[\s']", arg):
        return arg
    return "'" + arg.replace("'", "''") + "'"


def quote_arguments(argv: Iterable[str]) -> str:
    """The value of the ``arguments`` submit command for ``argv`` (V2 quoted syntax).

    The V2 raw string is put between double quotes with every double quote
    doubled; every ``$`` becomes ``$(DOLLAR)`` so that the submit language's
    macro expansion gives it back.  Refused (``ValueError``): newlines (the
    bindings write the description as lines of text), ``$$`` (the schedd
    expands it again when the job is matched) and ``$(``, ``$NAME(`` (the
    submit language expands those even after the ``$(DOLLAR)`` escape).
    """
    raw = " ".join(quote_argument(a) for a in argv)
    return '"' + submit_text(raw, what="an argument").replace('"', '""') + '"'


def submit_text(value: str, *, what: str = "a submit value") -> str:
    """``value`` made safe for the submit language: ``$`` escaped; newlines, ``$$``, ``$(``, ``$NAME(`` refused."""
    value = str(value)
    if "\n" in value or "\r" in value or "\x00" in value:
        raise ValueError(f"{what} contains a newline or NUL, which HTCondor's submit language cannot carry: "
                         f"{value!r}")
    if "$$" in value:
        raise ValueError(f"{what} contains '$$', which HTCondor expands when the job is matched: {value!r}")
    if _MACRO_LIKE.search(value):
        # $(DOLLAR) is no escape there: the submit language expands "$(DOLLAR)(X)" and "$(DOLLAR)F(...)" again
        raise ValueError(f"{what} contains text that HTCondor's submit language reads as a macro: {value!r}")
    return value.replace("$", "$(DOLLAR)")


def classad_string(value: str) -> str:
    """A ClassAd string literal for a ``My.X`` attribute (then made safe for the submit language)."""
    import classad2

    return submit_text(classad2.quote(str(value)), what="an attribute value")


def _value(ad: Any, key: str) -> Any:
    """``ad[key]`` as a Python value; None when absent or undefined (classad2 gives an enum for that)."""
    try:
        v = ad.eval(key) if key in ad else None
    except Exception:  # a malformed value in a record: treat as absent
        return None
    if v is None or type(v).__name__ == "Value":  # classad2.Value.Undefined / Error
        return None
    return v


def _int(ad: Any, key: str) -> int | None:
    v = _value(ad, key)
    if isinstance(v, bool):
        return int(v)
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def tag_of(ad: Any) -> str | None:
    """jim's tag of the local job a job ad belongs to, or None when it is not jim's."""
    grid = _value(ad, "JimGridJob")
    offset, proc = _int(ad, "JimOffset"), _int(ad, "ProcId")
    if not isinstance(grid, str) or offset is None or proc is None:
        return None
    return f"{grid}.{offset + proc}"


def batch_id_of(ad: Any) -> str | None:
    cluster, proc = _int(ad, "ClusterId"), _int(ad, "ProcId")
    return None if cluster is None or proc is None else f"{cluster}.{proc}"


def status_of(ad: Any, *, evidence: Evidence = Evidence.BATCH) -> BatchStatus | None:
    """A :class:`BatchStatus` from a job ad (of the queue or of the history); None when unusable."""
    code = _int(ad, "JobStatus")
    if code not in JOB_STATUS:
        if code is not None:
            log.warning("unknown HTCondor JobStatus %r for job %s", code, batch_id_of(ad))
        return None
    name, state = JOB_STATUS[code]
    exit_code = None
    reason = None
    if state is LocalState.HELD:
        why = _value(ad, "HoldReason") or "held (no reason given)"
        hold_code, sub = _int(ad, "HoldReasonCode"), _int(ad, "HoldReasonSubCode")
        reason = str(why) + (f" (HoldReasonCode {hold_code}" + (f", subcode {sub}" if sub else "") + ")"
                             if hold_code is not None else "")
    elif code == 4:
        if _value(ad, "ExitBySignal") is True:
            signal = _int(ad, "ExitSignal") or 0
            exit_code, state, reason = 128 + signal, LocalState.FAILED, f"killed by signal {signal}"
        else:
            exit_code = _int(ad, "ExitCode")
            if exit_code:
                state, reason = LocalState.FAILED, f"exit code {exit_code}"
    elif code == 3:
        removed = _value(ad, "RemoveReason")
        reason = f"removed from HTCondor: {removed}" if removed else "removed from HTCondor"
    host = _value(ad, "RemoteHost") or (_value(ad, "LastRemoteHost") if state.terminal else None)
    if isinstance(host, str) and "@" in host:
        host = host.split("@", 1)[1]
    qdate = _int(ad, "QDate")
    return BatchStatus(state, exit_code=exit_code, reason=reason, native=f"{name} ({code})", evidence=evidence,
                       host=host if isinstance(host, str) and host else None, tag=tag_of(ad),
                       submitted=float(qdate) if qdate else None)


def _runs(indices: Iterable[int]) -> list[list[int]]:
    """Consecutive runs of sorted indices: ``[0, 1, 2, 5, 6] -> [[0, 1, 2], [5, 6]]``."""
    runs: list[list[int]] = []
    for i in sorted(set(indices)):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


# ---------------------------------------------------------------------------
# the adapter
# ---------------------------------------------------------------------------

class CondorAdapter(Adapter):
    """HTCondor through its Python bindings; one cluster (``count`` procs) per chunk."""

    name = "condor"
    aliases = ("htcondor",)
    user_wide_query = True
    options = {
        "pool": "",                 # collector host[:port] of the pool; "" = the local HTCondor configuration
        "schedd": "",               # name of the schedd (as the collector knows it); "" = the local schedd
        "python": "/usr/bin/python3",  # absolute path of the interpreter for the wrapper on the execute nodes
        "requirements": "",         # a ClassAd expression for the jobs' requirements
        "submit_commands": {},      # more submit commands, as a table: {request_memory = "2GB", "+Group" = '"d0"'}
        "cache_interval": 30.0,     # seconds one schedd answer is shared
        "history_days": 7,          # how far back find_by_tag searches the history
    }

    def __init__(self, home, options=None, **kw):
        super().__init__(home, options, **kw)
        python = self.opts["python"]
        if not isinstance(python, str) or not os.path.isabs(python):
            raise ConfigError(f"[batch] python must be an absolute path on the execute nodes (HTCondor does not "
                              f"search PATH for the executable), got {python!r}")
        extra = self.opts["submit_commands"]
        if not isinstance(extra, dict):
            raise ConfigError("[batch] submit_commands must be a table of submit commands (never raw text)")
        for key, value in extra.items():
            if not _COMMAND_NAME.match(str(key)):
                raise ConfigError(f"[batch] submit_commands: {key!r} is not a submit command name")
            attr = re.sub(r"^(\+|my\.)", "", key.lower())
            if key.lower() in RESERVED_COMMANDS or (attr != key.lower() and attr.startswith("jim")):
                raise ConfigError(f"[batch] submit_commands: jim sets {key!r} itself"
                                  + (" (use the requirements option)" if key.lower() == "requirements" else ""))
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise ConfigError(f"[batch] submit_commands.{key}: expected a string or a number, got {value!r}")
            if "\n" in str(value) or "\r" in str(value):
                raise ConfigError(f"[batch] submit_commands.{key}: a value must be one line")
        req = self.opts["requirements"]
        if not isinstance(req, str) or "\n" in req or "\r" in req:
            raise ConfigError("[batch] requirements must be a one-line ClassAd expression")
        if req.strip():
            import classad2

            try:
                classad2.ExprTree(req)
            except Exception as e:
                raise ConfigError(f"[batch] requirements is not a ClassAd expression: {req!r} ({e})") from None
        self.user = getpass.getuser()
        self._schedd: Any = None

    # -- the seam -------------------------------------------------------------------
    def schedd(self):
        """The schedd every call goes through (the fake one when ``$JIM_CONDOR_FAKE`` is set)."""
        if self._schedd is None:
            fake = fake_layer()
            if fake is not None:
                self._schedd = fake.fake_schedd(self)
            else:
                import htcondor2

                if self.opts["pool"] or self.opts["schedd"]:
                    ad = htcondor2.Collector(self.opts["pool"] or None).locate(
                        htcondor2.DaemonTypes.Schedd, self.opts["schedd"] or None)
                    self._schedd = htcondor2.Schedd(ad)
                else:
                    self._schedd = htcondor2.Schedd()
        return self._schedd

    def _call(self, method: str, *args, error: type = QueryError, **kwargs):
        """``self.schedd().<method>(...)``; the bindings' failures become ``error`` (transient by message)."""
        what = {"act": "remove"}.get(method, method)
        try:
            return getattr(self.schedd(), method)(*args, **kwargs)
        except _errors() as e:
            self._schedd = None  # locate it again next time
            raise error(f"HTCondor {what} failed: {_one_line(e)}", transient=_is_transient(e), cause=e) from None

    # -- the submit description ----------------------------------------------------
    def description(self, chunk: SubmitChunk, offset: int) -> dict[str, str]:
        """The submit description (command -> value) of the cluster starting at local job ``offset``."""
        argv = chunk.wrapper_argv(self.opts["python"], index_env=INDEX_ENV, index_offset=offset)
        batch = chunk.job_dir / "batch"
        try:
            desc = {
                "universe": "vanilla",
                "executable": submit_text(argv[0], what="the python option"),
                "transfer_executable": "false",
                "arguments": quote_arguments(argv[1:]),
                "environment": f'"{INDEX_ENV}=$(Process) JIM_BATCH_ID=$(Cluster).$(Process)"',
                "initialdir": submit_text(str(chunk.job_dir), what="the job directory"),
                "output": submit_text(str(batch), what="the job directory") + "/condor-$(Cluster).$(Process).out",
                "error": submit_text(str(batch), what="the job directory") + "/condor-$(Cluster).$(Process).err",
                "should_transfer_files": "NO",   # jim's job directory is on a shared file system
                "notification": "never",
                "My.JimGridJob": classad_string(chunk.grid_id),
                "My.JimOffset": str(int(offset)),
                "My.JimTag": classad_string(f"{chunk.grid_id}.{offset}"),
            }
        except ValueError as e:
            raise SubmitError(f"cannot describe local jobs of {chunk.grid_id} to HTCondor: {e}") from None
        if chunk.queue and chunk.queue != "default":
            desc["My.JimQueue"] = classad_string(chunk.queue)
        if self.opts["requirements"].strip():
            desc["requirements"] = self.opts["requirements"].strip()
        wall = chunk.limits.get("wall_seconds")
        if wall:
            desc["allowed_job_duration"] = str(int(wall))
        for key, value in self.opts["submit_commands"].items():
            desc[str(key)] = str(value)
        return desc

    def submit_description(self, chunk: SubmitChunk, offset: int):
        """The ``htcondor2.Submit`` of :meth:`description`, checked to hold exactly those commands.

        ``Submit(dict)`` reads its values as lines of a submit file: a value that
        made it see another command is refused here (:meth:`description` already
        refuses newlines; this is the last line of defence).
        """
        import htcondor2

        desc = self.description(chunk, offset)
        sub = htcondor2.Submit(desc)

        def norm(k: str) -> str:  # "+X" is "My.X"; names ignore case
            return "my." + k[1:].lower() if k.startswith("+") else k.lower()

        got = {norm(k): v for k, v in sub.items()}
        want = {norm(k): v for k, v in desc.items()}
        if got != want:
            extra = sorted(set(got.items()) ^ set(want.items()))
            raise SubmitError(f"HTCondor reads the submit description differently than jim wrote it: {extra!r}")
        return sub

    # -- submit -----------------------------------------------------------------------
    def submit_chunk(self, chunk: SubmitChunk) -> dict[int, str]:
        ids: dict[int, str] = {}
        for run in _runs(s.index for s in chunk.jobs):
            offset = run[0]
            (chunk.job_dir / "batch").mkdir(mode=0o700, exist_ok=True)
            description = self.submit_description(chunk, offset)
            try:
                result = self._call("submit", description, count=len(run), error=SubmitError)
                cluster, first, n = int(result.cluster()), int(result.first_proc()), int(result.num_procs())
            except SubmitError as e:
                found = self._after_failed_submit(chunk, run, e)
                if found is None:
                    if ids:  # earlier clusters of this chunk are in: say so, let the caller reconcile
                        raise SubmitError(f"part of the chunk was submitted: {e.message}", transient=True) from None
                    raise
                ids.update(found)
                continue
            if n != len(run):
                raise SubmitError(f"HTCondor made {n} jobs of cluster {cluster}, {len(run)} were asked for",
                                  transient=True)
            for p, index in enumerate(run):
                ids[index] = f"{cluster}.{first + p}"
        return ids

    def _after_failed_submit(self, chunk: SubmitChunk, run: list[int], error: SubmitError) -> dict[int, str] | None:
        """After a refused submit, make sure nothing went in: the ids if it all did, else None.

        A failure whose outcome is unknown stays transient (the worker reconciles by tag).
        """
        if error.transient:
            return None
        tags = {f"{chunk.grid_id}.{i}": i for i in run}
        try:
            found = self.find_by_tag(chunk.grid_id, list(tags))
        except QueryError:
            error.transient = True  # cannot tell whether it went in
            return None
        if not found:
            return None
        if len(found) == len(tags):
            return {tags[t]: bid for t, bid in found.items()}
        error.transient = True  # some went in: reconcile
        return None

    # -- status ---------------------------------------------------------------------
    def constraint(self, extra: str = "") -> str:
        import classad2

        base = f"JimGridJob =!= undefined && Owner == {classad2.quote(self.user)}"
        return f"{base} && ({extra})" if extra else base

    def query(self, batch_ids: list[str]) -> QueryResult:
        try:
            ads = self._call("query", constraint=self.constraint(), projection=PROJECTION)
        except QueryError as e:
            return QueryResult(ok=False, error=e.message)
        statuses: dict[str, BatchStatus] = {}
        for ad in ads:
            bid, st = batch_id_of(ad), status_of(ad)
            if bid is not None and st is not None:
                statuses[bid] = st
        return QueryResult(ok=True, statuses=statuses)

    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        by_cluster: dict[int, list[int]] = {}
        for b in batch_ids:
            c, _, p = b.partition(".")
            if c.isdigit() and p.isdigit():
                by_cluster.setdefault(int(c), []).append(int(p))
        if not by_cluster:
            return {}
        wanted = set(batch_ids)
        found: dict[str, BatchStatus] = {}
        clusters = sorted(by_cluster)
        for k in range(0, len(clusters), 100):  # keep each constraint short
            terms = [f"(ClusterId == {c} && member(ProcId, {{{', '.join(map(str, sorted(by_cluster[c])))}}}))"
                     for c in clusters[k:k + 100]]
            match = sum(len(by_cluster[c]) for c in clusters[k:k + 100])
            ads = self._call("history", constraint=self.constraint(" || ".join(terms)),
                             projection=PROJECTION, match=match)
            for ad in ads:
                bid, st = batch_id_of(ad), status_of(ad, evidence=Evidence.ACCOUNTING)
                if bid in wanted and st is not None and st.state.terminal and bid not in found:
                    found[bid] = st
        return found

    # -- cancel ------------------------------------------------------------------------
    def cancel(self, batch_ids: list[str], grace: float = 5.0) -> None:
        if not batch_ids:
            return
        import htcondor2

        ids = sorted(set(batch_ids))
        self._call("act", htcondor2.JobAction.Remove, ids, error=CancelError)

    # -- reconcile ---------------------------------------------------------------------
    def find_by_tag(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        import classad2

        wanted = set(tags)
        found: dict[str, str] = {}
        constraint = self.constraint(f"JimGridJob == {classad2.quote(grid_id)}")
        for ad in self._call("query", constraint=constraint, projection=PROJECTION):
            tag, bid = tag_of(ad), batch_id_of(ad)
            if tag in wanted and bid:
                found[tag] = bid
        if wanted - set(found):
            since = classad2.ExprTree(
                f"EnteredCurrentStatus < {int(time.time() - float(self.opts['history_days']) * 86400)}")
            for ad in self._call("history", constraint=constraint, projection=PROJECTION,
                                 match=-1, since=since):
                tag, bid = tag_of(ad), batch_id_of(ad)
                if tag in wanted and bid and tag not in found:
                    found[tag] = bid
        return found

    # -- the site ------------------------------------------------------------------------
    def free_slots(self) -> int | None:
        """Idle CPUs of the pool: the ``Cpus`` of its unclaimed, idle slots (None when unknown)."""
        try:
            import htcondor2

            ads = collector(self.opts["pool"] or None).query(
                htcondor2.AdTypes.Startd, constraint='State == "Unclaimed" && Activity == "Idle"',
                projection=["Name", "Cpus"])
        except Exception as e:  # the pool's health is not ours to report here
            log.warning("cannot count HTCondor's free slots: %s", _one_line(e))
            return None
        return sum(_int(ad, "Cpus") or 0 for ad in ads)
