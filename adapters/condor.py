"""HTCondor, through the htcondor Python bindings (``htcondor2``/``classad2``).

The base (:mod:`jim.adapters.base`) owns the batch loop (runs of consecutive
local jobs, retries with reconcile-by-tag, batched ids); this module says how
HTCondor is asked:

* **submit**: one ``Schedd.submit(description, count=K)`` per run of local
  jobs.  Process ``p`` of the cluster is local job ``offset + p`` (the wrapper
  finds ``p`` in ``$JIM_INDEX_ARRAY``).  Every job carries ``JimGridJob``,
  ``JimOffset`` and ``JimTag`` (and ``JimAttempt`` after the first attempt);
  its own tag is ``<JimGridJob>.<JimOffset + ProcId>[.<JimAttempt>]``, its
  batch id ``<ClusterId>.<ProcId>``.
* **query**: one projected ``Schedd.query`` per ``cache_interval`` for every jim
  job of the user; **accounting**: ``Schedd.history``, with what each job used (source
  ``condor``: :func:`jim.adapters.usage.condor_usage`); **cancel**:
  ``Schedd.act(JobAction.Remove, ids)``; **find by tag**: query and history by
  ``JimGridJob``; **free slots**: idle CPUs of unclaimed slots (collector).

The bindings are imported lazily, by :mod:`jim.classads` (``jim poll`` stays
light), and every call goes through one seam, :meth:`CondorAdapter.schedd`
(and :func:`collector`).
When ``$JIM_CONDOR_FAKE`` names a module that declares
``JIM_CONDOR_FAKE_LAYER = True``, the seam asks its ``fake_schedd(adapter)``
and ``fake_collector(pool)`` instead (tests only; logged as a warning; jim's
own is ``tests/condor_fake.py``).

Job states: https://htcondor.readthedocs.io/en/latest/classad-attributes/job-classad-attributes.html#JobStatus
Argument quoting: the "new syntax" of ``arguments`` in condor_submit(1)
(src/condor_utils/condor_arglist.cpp: ``join_args`` / ``V2RawToV2Quoted``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from importlib import import_module
from typing import Any

from jim.adapters import capacity
from jim.adapters.base import Adapter, batched
from jim.adapters.model import BatchStatus, Capacity, QueryResult, SubmitChunk
from jim.adapters.options import AdapterOptions
from jim.adapters.usage import CONDOR_USAGE_ATTRS, condor_usage
from jim.classads import classad_module, htcondor_module
from jim.errors import BatchError, CancelError, ConfigError, QueryError, SubmitError
from jim.jobid import local_tag
from jim.states import Evidence, LocalState

log = logging.getLogger("jim.adapters")

FAKE_ENV = "JIM_CONDOR_FAKE"
INDEX_ENV = "JIM_INDEX_ARRAY"
REMOVED, COMPLETED = 3, 4

#: JobStatus -> (HTCondor's name, jim state).  The exit-code file decides first.  No status
#: gives a cause (:class:`jim.states.EndCause`): a job evicted from a failed or preempting slot
#: goes back to Idle and runs again (no end), Removed is condor_rm's (jim's, the user's or an
#: admin's) and Held is not an end; none says clearly that the site made a job end.
JOB_STATUS: dict[int, tuple[str, LocalState]] = {
    1: ("Idle", LocalState.QUEUED),  # also a job evicted from its slot: it will run again
    2: ("Running", LocalState.RUNNING),
    3: ("Removed", LocalState.CANCELLED),  # condor_rm (jim's or an admin's); in the queue until cleaned up
    4: ("Completed", LocalState.DONE),  # FAILED when ExitCode != 0 or ExitBySignal (see _completion)
    5: ("Held", LocalState.HELD),  # HoldReason / HoldReasonCode recorded as the reason
    6: ("Transferring Output", LocalState.RUNNING),  # ambiguous: our code ended, files still moving
    7: ("Suspended", LocalState.SUSPENDED),
}

#: What every status query, history lookup and tag search asks for.
PROJECTION = [
    *("ClusterId", "ProcId", "JobStatus"),  # which job, in which state
    *("HoldReason", "HoldReasonCode", "HoldReasonSubCode"),  # why it is held
    *("ExitCode", "ExitBySignal", "ExitSignal", "RemoveReason"),  # how it ended
    *("JimTag", "JimGridJob", "JimOffset", "JimAttempt"),  # jim's tag
    *("QDate", "EnteredCurrentStatus", "RemoteHost", "LastRemoteHost", "Owner"),  # when, where, whose
]

#: Submit commands jim writes itself; ``submit_commands`` may not set them (nor any ``My.Jim*`` attribute).
RESERVED_COMMANDS = frozenset(
    {
        *("universe", "executable", "arguments", "args", "environment", "env", "initialdir", "initial_dir", "iwd"),
        *("output", "error", "input", "transfer_executable", "queue", "requirements", "allowed_job_duration"),
        *("+jimtag", "my.jimtag", "+jimgridjob", "my.jimgridjob", "+jimoffset", "my.jimoffset", "+jimqueue"),
        "my.jimqueue",
    }
)
_MACRO_LIKE = re.compile(r"\$[A-Za-z0-9_]*\(")
_COMMAND_NAME = re.compile(r"^(?:\+|[Mm][Yy]\.)?[A-Za-z_][A-Za-z0-9_.]*$")

#: Messages of failures a retry may cure: the schedd is down, busy or unreachable.
TRANSIENT_ERRORS = (
    "connect|communicat|socket|refused|reset by peer|broken pipe|no route",  # the network
    "unable to locate|failed to (?:contact|fetch|locate|send|start transaction|commit)",  # no schedd (yet)
    "timed? ?out|temporarily|try again|busy",  # a busy schedd
    "SECMAN|authenticat",  # security negotiation (a daemon restarting, an expired session)
)


@dataclass(frozen=True)
class CondorOptions(AdapterOptions):
    pool: str = ""  # collector host[:port] of the pool; "": the local HTCondor configuration
    schedd: str = ""  # name of the schedd, as the collector knows it; "": the local schedd
    python: str = "/usr/bin/python3"  # absolute path of the interpreter for the wrapper on the execute nodes
    requirements: str = ""  # a ClassAd expression for the jobs' requirements
    submit_commands: dict[str, Any] = field(default_factory=dict)  # {request_memory = "2GB", "+Group" = '"d0"'}
    cache_interval: float = 30.0  # seconds one schedd answer is shared
    history_days: float = 7.0  # how far back find_by_tag searches the history

    def check(self) -> None:
        super().check()
        if not os.path.isabs(self.python):
            raise ConfigError(
                f"[batch] python must be an absolute path on the execute nodes (HTCondor does not "
                f"search PATH for the executable), got {self.python!r}"
            )
        for key, value in self.submit_commands.items():
            _check_command(str(key), value)
        _check_requirements(self.requirements)


def _check_command(key: str, value: Any) -> None:
    """One entry of ``submit_commands``: a command jim does not write itself, with a one-line value."""
    if not _COMMAND_NAME.match(key):
        raise ConfigError(f"[batch] submit_commands: {key!r} is not a submit command name")
    attr = re.sub(r"^(\+|my\.)", "", key.lower())
    if key.lower() in RESERVED_COMMANDS or (attr != key.lower() and attr.startswith("jim")):
        raise ConfigError(
            f"[batch] submit_commands: jim sets {key!r} itself"
            + (" (use the requirements option)" if key.lower() == "requirements" else "")
        )
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"[batch] submit_commands.{key}: expected a string or a number, got {value!r}")
    if "\n" in str(value) or "\r" in str(value):
        raise ConfigError(f"[batch] submit_commands.{key}: a value must be one line")


def _check_requirements(req: str) -> None:
    if "\n" in req or "\r" in req:
        raise ConfigError("[batch] requirements must be a one-line ClassAd expression")
    if req.strip():
        try:
            classad_module().ExprTree(req)
        except Exception as e:
            raise ConfigError(f"[batch] requirements is not a ClassAd expression: {req!r} ({e})") from None


# -- the seam ---------------------------------------------------------------------------------------------------------


def fake_layer() -> Any | None:
    """The test module named by ``$JIM_CONDOR_FAKE``, or None (production: the real bindings)."""
    name = os.environ.get(FAKE_ENV)
    if not name:
        return None
    try:
        module = import_module(name)
    except ImportError as e:
        raise ConfigError(f"{FAKE_ENV}={name}: cannot import the fake HTCondor layer: {e}") from e
    if getattr(module, "JIM_CONDOR_FAKE_LAYER", False) is not True:
        raise ConfigError(
            f"{FAKE_ENV}={name}: that module is not a fake HTCondor layer "
            f"(it does not declare JIM_CONDOR_FAKE_LAYER = True)"
        )
    log.warning("HTCondor is faked by %s (%s is set): nothing reaches a real schedd or collector", name, FAKE_ENV)
    return module


def collector(pool: str | None = None) -> Any:
    """An ``htcondor2.Collector`` for ``pool`` (None: the local pool), or the fake one."""
    fake = fake_layer()
    if fake is not None:
        return fake.fake_collector(pool or None)
    return htcondor_module().Collector(pool or None)


def _errors() -> tuple[type[BaseException], ...]:
    """What a call into the bindings may raise (their exception, and what wraps C-level failures)."""
    return (htcondor_module().HTCondorException, RuntimeError, OSError)


def _one_line(e: BaseException) -> str:
    return (" ".join(str(e).split()) or type(e).__name__)[:300]


# -- the submit language ----------------------------------------------------------------------------------------------


def quote_argument(arg: str) -> str:
    """One argument in HTCondor's V2 raw syntax (``join_args``): white space and single quotes
    are protected inside single quotes, a single quote doubled; everything else is literal."""
    if arg == "":
        return "''"
    if not re.search(r"[\s']", arg):
        return arg
    return "'" + arg.replace("'", "''") + "'"


def quote_arguments(argv: Iterable[str]) -> str:
    """The value of the ``arguments`` submit command for ``argv`` (V2 quoted syntax).

    The V2 raw string is put between double quotes with every double quote
    doubled, and made safe for the submit language (:func:`submit_text`:
    ``ValueError`` for what it cannot carry).
    """
    raw = " ".join(quote_argument(a) for a in argv)
    return '"' + submit_text(raw, what="an argument").replace('"', '""') + '"'


def submit_text(value: str, *, what: str = "a submit value") -> str:
    """``value`` made safe for the submit language: ``$`` escaped; newlines, ``$$``, ``$(``, ``$NAME(`` refused."""
    value = str(value)
    if "\n" in value or "\r" in value or "\x00" in value:
        raise ValueError(f"{what} contains a newline or NUL, which HTCondor's submit language cannot carry: {value!r}")
    if "$$" in value:
        raise ValueError(f"{what} contains '$$', which HTCondor expands when the job is matched: {value!r}")
    if _MACRO_LIKE.search(value):
        # $(DOLLAR) is no escape there: the submit language expands "$(DOLLAR)(X)" and "$(DOLLAR)F(...)" again
        raise ValueError(f"{what} contains text that HTCondor's submit language reads as a macro: {value!r}")
    return value.replace("$", "$(DOLLAR)")


def classad_string(value: str) -> str:
    """A ClassAd string literal for a ``My.X`` attribute (then made safe for the submit language)."""
    return submit_text(classad_module().quote(str(value)), what="an attribute value")


# -- job ads ----------------------------------------------------------------------------------------------------------


def _value(ad: Any, key: str) -> Any:
    """``ad[key]`` as a Python value; None when absent or undefined (classad2 gives an enum for that)."""
    try:
        v = ad.eval(key) if key in ad else None
    except Exception:  # a malformed value in a record: treat as absent
        return None
    return None if v is None or type(v).__name__ == "Value" else v  # classad2.Value.Undefined / Error


def _int(ad: Any, key: str) -> int | None:
    v = _value(ad, key)
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
    return local_tag(grid, offset + proc, _int(ad, "JimAttempt") or 1)


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
    exit_code, reason = None, None
    if state is LocalState.HELD:
        reason = _hold_reason(ad)
    elif code == COMPLETED:
        state, exit_code, reason = _completion(ad)
    elif code == REMOVED:
        removed = _value(ad, "RemoveReason")
        reason = f"removed from HTCondor: {removed}" if removed else "removed from HTCondor"
    native, qdate = f"{name} ({code})", _int(ad, "QDate")
    submitted = float(qdate) if qdate else None
    return BatchStatus(state, exit_code, reason, native, evidence, _host(ad, state), tag_of(ad), submitted)


def _hold_reason(ad: Any) -> str:
    why = str(_value(ad, "HoldReason") or "held (no reason given)")
    code, sub = _int(ad, "HoldReasonCode"), _int(ad, "HoldReasonSubCode")
    if code is None:
        return why
    return f"{why} (HoldReasonCode {code}" + (f", subcode {sub}" if sub else "") + ")"


def _completion(ad: Any) -> tuple[LocalState, int | None, str | None]:
    """How a completed job ended: DONE only with exit code 0 (or none recorded)."""
    if _value(ad, "ExitBySignal") is True:
        signal = _int(ad, "ExitSignal") or 0
        return LocalState.FAILED, 128 + signal, f"killed by signal {signal}"
    code = _int(ad, "ExitCode")
    return (LocalState.FAILED, code, f"exit code {code}") if code else (LocalState.DONE, code, None)


def _host(ad: Any, state: LocalState) -> str | None:
    """The execute host (of the last run, for a job that ended), without the slot name."""
    host = _value(ad, "RemoteHost") or (_value(ad, "LastRemoteHost") if state.terminal else None)
    if not isinstance(host, str) or not host:
        return None
    return host.split("@", 1)[1] if "@" in host else host


def _tags(ads: Iterable[Any]) -> Iterable[tuple[str, str]]:
    """(tag, batch id) of each of jim's job ads."""
    for ad in ads:
        tag, bid = tag_of(ad), batch_id_of(ad)
        if tag and bid:
            yield tag, bid


def _procs_by_cluster(batch_ids: Iterable[str]) -> dict[int, list[int]]:
    """``["7.0", "7.2", "9.1"] -> {7: [0, 2], 9: [1]}`` (what is not ``<cluster>.<proc>`` is left out)."""
    out: dict[int, list[int]] = {}
    for b in sorted(set(batch_ids)):
        c, _, p = b.partition(".")
        if c.isdigit() and p.isdigit():
            out.setdefault(int(c), []).append(int(p))
    return {c: sorted(out[c]) for c in sorted(out)}


# -- the adapter ------------------------------------------------------------------------------------------------------


class CondorAdapter(Adapter):
    """HTCondor through its Python bindings; one cluster (``count`` procs) per run of local jobs."""

    name = "condor"
    Options = CondorOptions
    options: CondorOptions
    user_wide_query = True
    ids_per_command = 100  # clusters per history constraint or remove: keeps each one short
    transient_errors = TRANSIENT_ERRORS
    _schedd: Any = None

    # -- the seam ---------------------------------------------------------------------
    def schedd(self) -> Any:
        """The schedd every call goes through (the fake one when ``$JIM_CONDOR_FAKE`` is set)."""
        if self._schedd is None:
            fake = fake_layer()
            if fake is not None:
                self._schedd = fake.fake_schedd(self)
            else:
                htcondor = htcondor_module()
                if self.options.pool or self.options.schedd:
                    ad = htcondor.Collector(self.options.pool or None).locate(
                        htcondor.DaemonTypes.Schedd, self.options.schedd or None
                    )
                    self._schedd = htcondor.Schedd(ad)
                else:
                    self._schedd = htcondor.Schedd()
        return self._schedd

    def _call(self, method: str, *args: Any, error: type[BatchError] = QueryError, **kwargs: Any) -> Any:
        """``self.schedd().<method>(...)``; the bindings' failures become ``error`` (transient by message)."""
        try:
            return getattr(self.schedd(), method)(*args, **kwargs)
        except _errors() as e:
            self._schedd = None  # locate it again next time
            transient = isinstance(e, (OSError, TimeoutError)) or self.is_transient(str(e))
            what = {"act": "remove"}.get(method, method)
            raise error(f"HTCondor {what} failed: {_one_line(e)}", transient=transient, cause=e) from None

    # -- the submit description -------------------------------------------------------
    def description(self, chunk: SubmitChunk, offset: int) -> dict[str, str]:
        """The submit description (command -> value) of the cluster starting at local job ``offset``."""
        argv = chunk.wrapper_argv(self.options.python, index_env=INDEX_ENV, index_offset=offset)
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
                "should_transfer_files": "NO",  # jim's job directory is on a shared file system
                "notification": "never",
                "My.JimGridJob": classad_string(chunk.grid_id),
                "My.JimOffset": str(int(offset)),
                "My.JimTag": classad_string(local_tag(chunk.grid_id, offset, chunk.attempt)),
            }
            if chunk.attempt > 1:
                desc["My.JimAttempt"] = str(int(chunk.attempt))
            queue = self.queue_of(chunk, "")
            if queue:
                desc["My.JimQueue"] = classad_string(queue)
            desc.update(self.resource_commands(chunk))
        except ValueError as e:
            raise SubmitError(f"cannot describe local jobs of {chunk.grid_id} to HTCondor: {e}") from None
        if self.options.requirements.strip():
            desc["requirements"] = self.options.requirements.strip()
        if chunk.limits.wall_seconds:
            desc["allowed_job_duration"] = str(chunk.limits.wall_seconds)
        return {**desc, **{str(k): str(v) for k, v in self.options.submit_commands.items()}}

    #: jim's resource commands, each with the site commands (names normalised: ``+X`` is ``my.x``)
    #: that make it give way whole: the site's memory, its hold policy, its accounting group.
    RESOURCE_COMMANDS_YIELD = {
        "request_cpus": {"request_cpus"},
        "request_gpus": {"request_gpus"},
        "request_memory": {"request_memory"},
        "periodic_hold": {"periodic_hold"},
        "periodic_hold_reason": {"periodic_hold", "periodic_hold_reason"},
        "accounting_group": {"accounting_group", "my.accountinggroup", "my.acctgroup"},
    }

    def resource_commands(self, chunk: SubmitChunk) -> dict[str, str]:
        """The submit commands of the local job's shape and the grid job's GRAM resource attributes:
        ``request_cpus`` and ``request_gpus`` (above one core, with GPUs); ``request_memory`` (MB) from
        ``maxmemory``, else ``minmemory`` (the slot must hold what the job may use; the stock GRAM condor
        module asks for ``minmemory``); a whole node as all of the partitionable slot it matches
        (``request_cpus = TotalSlotCpus``, ``request_memory = TotalSlotMemory``: the slot's own totals,
        evaluated against the machine when it is matched); a hold once the job has used its ``maxcputime`` (HTCondor has
        no CPU-time limit of its own; a hold, as for ``allowed_job_duration``); ``project`` as the
        ``accounting_group``.  Where the site's ``submit_commands`` say the same (see
        :attr:`RESOURCE_COMMANDS_YIELD`), the site's win and jim's are left out."""
        cmds: dict[str, str] = {}
        if chunk.limits.cores > 1:
            cmds["request_cpus"] = str(int(chunk.limits.cores))
        if chunk.limits.gpus:
            cmds["request_gpus"] = str(int(chunk.limits.gpus))
        memory = chunk.limits.memory_mb or chunk.limits.min_memory_mb
        if memory:
            cmds["request_memory"] = str(int(memory))
        if chunk.limits.whole_node:
            cmds.update(request_cpus="TotalSlotCpus", request_memory="TotalSlotMemory")
        if chunk.limits.cpu_seconds:
            cpu = int(chunk.limits.cpu_seconds)
            cmds["periodic_hold"] = f"RemoteUserCpu + RemoteSysCpu > {cpu}"
            cmds["periodic_hold_reason"] = classad_string(f"CPU time limit of {cpu} s (maxcputime) exceeded")
        if chunk.limits.project:
            cmds["accounting_group"] = submit_text(chunk.limits.project, what="the project")
        site = {re.sub(r"^\+", "my.", str(k).lower()) for k in self.options.submit_commands}
        return {k: v for k, v in cmds.items() if not self.RESOURCE_COMMANDS_YIELD[k] & site}

    def submit_description(self, chunk: SubmitChunk, offset: int) -> Any:
        """The ``htcondor2.Submit`` of :meth:`description`, checked to hold exactly those commands
        (``Submit(dict)`` reads its values as lines of a submit file: the last line of defence)."""
        desc = self.description(chunk, offset)
        sub = htcondor_module().Submit(desc)

        def norm(k: str) -> str:  # "+X" is "My.X"; names ignore case
            return "my." + k[1:].lower() if k.startswith("+") else k.lower()

        got = {norm(k): v for k, v in sub.items()}
        want = {norm(k): v for k, v in desc.items()}
        if got != want:
            extra = sorted(set(got.items()) ^ set(want.items()))
            raise SubmitError(f"HTCondor reads the submit description differently than jim wrote it: {extra!r}")
        return sub

    # -- submit ---------------------------------------------------------------------------
    def submit_group(self, chunk: SubmitChunk, group: list[int]) -> dict[int, str]:
        """One cluster of ``len(group)`` procs for the run of local jobs ``group``."""
        (chunk.job_dir / "batch").mkdir(mode=0o700, exist_ok=True)
        description = self.submit_description(chunk, group[0])
        try:
            result = self._call("submit", description, count=len(group), error=SubmitError)
            cluster, first, n = int(result.cluster()), int(result.first_proc()), int(result.num_procs())
        except SubmitError as e:
            found = self._after_failed_submit(chunk, group, e)
            if found is None:
                raise
            return found
        if n != len(group):
            raise SubmitError(
                f"HTCondor made {n} jobs of cluster {cluster}, {len(group)} were asked for", transient=True
            )
        return {index: f"{cluster}.{first + p}" for p, index in enumerate(group)}

    def _after_failed_submit(self, chunk: SubmitChunk, group: list[int], error: SubmitError) -> dict[int, str] | None:
        """After a refused submit, make sure nothing went in: the ids if it all did, else None.

        A failure whose outcome is unknown stays transient (the worker reconciles by tag).
        """
        if error.transient:
            return None
        tags = {local_tag(chunk.grid_id, i, chunk.attempt): i for i in group}
        try:
            found = self.find_by_tag(chunk.grid_id, list(tags))
        except QueryError:
            error.transient = True  # cannot tell whether it went in
            return None
        if not found:
            return None  # refused: nothing went in
        if len(found) == len(tags):
            return {tags[t]: bid for t, bid in found.items()}
        error.transient = True  # some went in: reconcile
        return None

    # -- status ---------------------------------------------------------------------------
    def constraint(self, extra: str = "") -> str:
        base = f"JimGridJob =!= undefined && Owner == {classad_module().quote(self.user)}"
        return f"{base} && ({extra})" if extra else base

    def prepare_query(self) -> None:
        """What a fresh process pays once (importing the bindings, locating the schedd), done before
        the answer is dated: the next process then asks at least ``cache_interval`` later."""
        self.constraint()
        with contextlib.suppress(*_errors()):  # (the query then fails the same way, and says so)
            self.schedd()

    def query(self, batch_ids: list[str]) -> QueryResult:
        try:
            ads = self._call("query", constraint=self.constraint(), projection=PROJECTION)
        except QueryError as e:
            return QueryResult(ok=False, error=e.message)
        statuses = {bid: st for bid, st in ((batch_id_of(ad), status_of(ad)) for ad in ads) if bid and st}
        return QueryResult(ok=True, statuses=statuses)

    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        procs, wanted = _procs_by_cluster(batch_ids), set(batch_ids)
        found: dict[str, BatchStatus] = {}
        for clusters in batched(list(procs), self.ids_per_command):
            terms = " || ".join(
                f"(ClusterId == {c} && member(ProcId, {{{', '.join(map(str, procs[c]))}}}))" for c in clusters
            )
            match = sum(len(procs[c]) for c in clusters)
            projection = [*PROJECTION, *CONDOR_USAGE_ATTRS]
            ads = self._call("history", constraint=self.constraint(terms), projection=projection, match=match)
            for ad in ads:
                bid, st = batch_id_of(ad), status_of(ad, evidence=Evidence.ACCOUNTING)
                if bid in wanted and st is not None and st.state.terminal and bid not in found:
                    found[bid] = replace(st, usage=condor_usage(functools.partial(_value, ad)))
        return found

    # -- cancel ---------------------------------------------------------------------------
    def cancel_units(self, batch_ids: list[str]) -> Sequence[list[str]]:
        """The ids of each cluster, one unit per cluster."""
        return [[f"{c}.{p}" for p in ps] for c, ps in _procs_by_cluster(batch_ids).items()]

    def cancel_batch(self, units: Sequence[list[str]], grace: float) -> None:
        """One remove for these clusters' procs (the schedd gives them their vacate time)."""
        self._call("act", htcondor_module().JobAction.Remove, [b for unit in units for b in unit], error=CancelError)

    # -- reconcile ------------------------------------------------------------------------
    def find_by_tag(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        classad = classad_module()
        wanted = set(tags)
        constraint = self.constraint(f"JimGridJob == {classad.quote(grid_id)}")
        ads = self._call("query", constraint=constraint, projection=PROJECTION)
        found = {tag: bid for tag, bid in _tags(ads) if tag in wanted}  # (a tag twice: the newest cluster)
        if wanted - set(found):
            since = classad.ExprTree(f"EnteredCurrentStatus < {int(time.time() - self.options.history_days * 86400)}")
            ads = self._call("history", constraint=constraint, projection=PROJECTION, match=-1, since=since)
            for tag, bid in _tags(ads):
                if tag in wanted:
                    found.setdefault(tag, bid)  # (the history is newest first)
        return found

    # -- the site -------------------------------------------------------------------------
    def free_slots(self) -> int | None:
        """Idle CPUs of the pool: the ``Cpus`` of its unclaimed, idle slots (None when unknown)."""
        try:
            pool, idle = collector(self.options.pool or None), 'State == "Unclaimed" && Activity == "Idle"'
            ads = pool.query(htcondor_module().AdTypes.Startd, constraint=idle, projection=["Name", "Cpus"])
        except Exception as e:  # the pool's health is not ours to report here
            log.warning("cannot count HTCondor's free slots: %s", _one_line(e))
            return None
        return sum(_int(ad, "Cpus") or 0 for ad in ads)

    def ask_capacity(self) -> Capacity | None:
        """Every slot of the pool (one collector query): machines' totals, free: partitionable and idle slots."""
        try:
            ads = collector(self.options.pool or None).query(
                htcondor_module().AdTypes.Startd, constraint="true", projection=capacity.CONDOR_PROJECTION
            )
            return capacity.from_slots({k: _value(ad, k) for k in capacity.CONDOR_PROJECTION} for ad in ads)
        except Exception as e:  # the pool's health is not ours to report here
            log.warning("HTCondor's capacity unknown: %s", _one_line(e))
            return None
