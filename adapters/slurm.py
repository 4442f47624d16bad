"""Slurm: local jobs as job arrays, one ``squeue`` for all of the user's jobs.

* **submit**: one ``sbatch --parsable --array`` per group of local jobs.  Array
  task ``t`` of the array named ``jim.<grid id>.<offset>`` is local job
  ``offset + t``; task ids stay below the cluster's ``MaxArraySize`` (asked
  once a day, ``scontrol show config``), and an array may skip indices.
* **query**: ``squeue -h -r -t all -u <user> -o '%i|%A|%F|%K|%T|%r|%j|%k'``,
  once per ``cache_interval`` for everything the user has.
* **accounting**: ``sacct -n -P`` for jobs that left ``squeue`` (or ended there); records
  whose name is not jim's tag are ignored, those of steps only give their memory peak.  A task's
  record also says what it used (:data:`USAGE_ACCT_FIELDS`, source ``sacct``): ElapsedRaw, AllocCPUS
  and NodeList always, UserCPU, SystemCPU and the steps' MaxRSS only where the cluster gathers them
  (``JobAcctGatherType`` not ``jobacct_gather/none``, asked once a day; else they are unknown).
* **cancel**: ``scancel`` of whole arrays, or of their tasks.
* **find by tag**: ``squeue``, then ``sacct`` of the last week, by job name.
* **why a job ended** (:data:`STATE_CAUSES`, :data:`LAUNCH_FAILURE_REASONS`, :func:`over_memory`):
  NODE_FAIL, BOOT_FAIL, PREEMPTED and a launch failure are the site's; TIMEOUT, DEADLINE and
  OUT_OF_MEMORY (Slurm's state, or a job SIGKILLed with its batch step over its ``--mem``) the
  job's own.  jim submits with ``--no-requeue`` (unless ``requeue = true``):
  a job hit by a node failure ends, and says so, rather than running a second time.

Native states: https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES
"""

from __future__ import annotations

import datetime as _dt
import logging
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from jim.adapters import capacity
from jim.adapters.base import CommandAdapter
from jim.adapters.model import BatchStatus, Capacity, Limits, SubmitChunk
from jim.adapters.options import AdapterOptions
from jim.errors import ConfigError, QueryError
from jim.jobid import parse_tag_name, tag_name
from jim.ranges import array_spec, parse_array_spec
from jim.states import EndCause, Evidence, LocalState

if TYPE_CHECKING:
    from jim.record.usage import Usage

log = logging.getLogger("jim.adapters")

SQUEUE_FORMAT = "%i|%A|%F|%K|%T|%r|%j|%k"
SACCT_FIELDS = "JobID,JobIDRaw,State,ExitCode,Submit,Start,End,JobName,Comment"
#: The accounting of vanished jobs also reads the memory a job asked for and its batch step's peak
#: (asked without ``-X``: the steps' lines carry MaxRSS), to see a job killed for its memory.
ACCT_FIELDS = "JobID,JobIDRaw,State,ExitCode,Submit,Start,End,ReqMem,MaxRSS,JobName,Comment"
#: What the accounting query asks: :data:`ACCT_FIELDS` and what each task used (jim.record.usage).
USAGE_ACCT_FIELDS = (
    "JobID,JobIDRaw,State,ExitCode,Submit,Start,End,ReqMem,MaxRSS,"
    "ElapsedRaw,UserCPU,SystemCPU,AllocCPUS,NodeList,JobName,Comment"
)
#: sacct's CPU times: ``[D-][HH:]MM:SS[.mmm]``.
_SLURM_DURATION = re.compile(r"(?:([0-9]{1,5})-)?(?:([0-9]{1,2}):)?([0-9]{1,2}):([0-9]{1,2})(?:\.([0-9]{1,6}))?")
DEFAULT_MAX_ARRAY_SIZE = 1001
#: Seconds the accounting is asked again for a job squeue shows killed by a signal and slurmdbd
#: has no final record of yet (slurmdbd is fed asynchronously, about a second behind).
ACCOUNTING_LAG = 5.0
#: A GRES name, with its type if any (``gpu``, ``gpu:a100``).
_GRES_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}(?::[A-Za-z0-9_.-]{1,64})?")

#: Slurm state -> jim state.  Terminal Slurm states only say how the job
#: ended; the exit code comes from the wrapper's file or from accounting.
STATE_MAP: dict[str, LocalState] = {
    "PENDING": LocalState.QUEUED,  # HELD instead when the reason says so (see _HELD_REASONS)
    "CONFIGURING": LocalState.QUEUED,  # nodes allocated but booting: not yet running our code
    "REQUEUED": LocalState.QUEUED,
    "REQUEUE_FED": LocalState.QUEUED,
    "REQUEUE_HOLD": LocalState.HELD,
    "RESV_DEL_HOLD": LocalState.HELD,
    "SPECIAL_EXIT": LocalState.HELD,  # requeued in held state after a special exit code
    "RUNNING": LocalState.RUNNING,
    "COMPLETING": LocalState.RUNNING,  # ambiguous: our code ended, Slurm is cleaning up; the exit file decides
    "RESIZING": LocalState.RUNNING,
    "SIGNALING": LocalState.RUNNING,
    "STAGE_OUT": LocalState.RUNNING,  # burst-buffer stage-out after the script ended
    "SUSPENDED": LocalState.SUSPENDED,
    "STOPPED": LocalState.SUSPENDED,  # SIGSTOPped, resources kept
    "COMPLETED": LocalState.DONE,
    "FAILED": LocalState.FAILED,
    "TIMEOUT": LocalState.FAILED,  # ran out of wall time: a failure for jim
    "NODE_FAIL": LocalState.FAILED,
    "BOOT_FAIL": LocalState.FAILED,
    "OUT_OF_MEMORY": LocalState.FAILED,
    "DEADLINE": LocalState.FAILED,
    "PREEMPTED": LocalState.FAILED,  # ambiguous: with requeue the job comes back PENDING (jim submits --no-requeue)
    "CANCELLED": LocalState.CANCELLED,
    "REVOKED": LocalState.CANCELLED,  # federation: the sibling ran elsewhere
}
_HELD_REASONS = ("JobHeldUser", "JobHeldAdmin", "launch failed requeued held")

#: Slurm end states that say why a job ended (the names of job_state_string(),
#: src/common/slurm_protocol_defs.c; https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES).
#: The first three are the site's: a node that failed or could not boot, a job preempted (jim
#: submits --no-requeue, so a preempted job ends); the others are the job's own limits.
STATE_CAUSES: dict[str, EndCause] = {
    "NODE_FAIL": EndCause.NODE_FAIL,
    "BOOT_FAIL": EndCause.BOOT_FAIL,
    "PREEMPTED": EndCause.PREEMPTED,
    "TIMEOUT": EndCause.TIMEOUT,
    "DEADLINE": EndCause.DEADLINE,
    "OUT_OF_MEMORY": EndCause.OUT_OF_MEMORY,
}
#: squeue reasons (``%r``) that say the job could not be started on its node: FAIL_LAUNCH's name
#: "JobLaunchFailure" (src/common/job_state_reason.c), and the description slurmctld gives a batch
#: job requeued held after a launch or prolog failure, "launch failed requeued held"
#: (src/slurmctld/job_mgr.c).  Compared by prefix, ignoring case.  Not on a FAILED job: slurmctld
#: gives FAIL_LAUNCH to every batch job whose script died of a signal (a script that killed itself,
#: one killed for its memory, as seen on Slurm 22.05), so there it tells nothing; a job that really
#: failed to launch never started jim's wrapper, which jim sees itself (NOT_STARTED).
LAUNCH_FAILURE_REASONS = ("joblaunchfailure", "launch failed")


def end_cause(state: str, reason: str | None = None) -> EndCause | None:
    """Why a job in Slurm ``state`` (first word counts) with squeue ``reason`` ended, if Slurm says."""
    first = state.split()[0] if state else ""
    cause = STATE_CAUSES.get(first)
    if cause is None and first != "FAILED" and reason and reason.lower().startswith(LAUNCH_FAILURE_REASONS):
        cause = EndCause.LAUNCH_FAILED
    return cause


#: Failures a retry may cure: the controller is down, slow or restarting.
TRANSIENT_ERRORS = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Transport endpoint",
    "Resource temporarily unavailable",
    "try again",
    "Slurm temporarily unable",
    "Zero Bytes were transmitted",
)


@dataclass(frozen=True)
class SlurmOptions(AdapterOptions):
    partition: str = ""
    """Default partition (a queue chosen by requirements wins)."""
    account: str = ""
    sbatch_options: tuple[str, ...] = ()
    """Extra sbatch arguments, as an argument list."""
    python: str = "python3"
    """Interpreter for the wrapper on the worker nodes."""
    cache_interval: float = 30.0
    requeue: bool = False
    """Let Slurm requeue a job after a node failure (it may then run twice)."""
    max_array_size: int = 0
    """0: ask the cluster (``scontrol show config``)."""
    gpu_gres: str = "gpu"
    """The GRES name of the site's GPUs: a job asking for N GPUs gets ``--gres=<gpu_gres>:N``
    (a type may be part of it: ``gpu:a100``)."""

    def check(self) -> None:
        super().check()
        if not _GRES_NAME.fullmatch(self.gpu_gres):
            raise ConfigError(f"[batch] gpu_gres: a GRES name like 'gpu' or 'gpu:a100', got {self.gpu_gres[:40]!r}")


def _split(line: str, n: int) -> list[str] | None:
    """Split ``line`` on ``|`` into n fields; the name field (second to last) may contain '|'."""
    parts = line.split("|")
    if len(parts) < n:
        return None
    if len(parts) > n:  # '|' in name or comment: keep the fixed fields at both ends
        parts = [*parts[: n - 2], "|".join(parts[n - 2 : -1]), parts[-1]]
    return parts


def squeue_tasks(text: str) -> list[tuple[str, str, str, str]]:
    """``(batch id, tag, native state, reason)`` of every jim array task in ``squeue -o SQUEUE_FORMAT``
    output, whatever its state."""
    out = []
    for line in text.splitlines():
        f = _split(line.strip(), 8)
        if f is None:
            continue
        _jobid, _raw, array_id, task, state, reason, name, _comment = f
        tag = parse_tag_name(name)
        if tag is None or not task.isdigit():
            continue  # not jim's, or a folded pending range (we always ask with -r)
        out.append((f"{array_id}_{task}", tag.tag(int(task)), state, reason))
    return out


def parse_squeue(text: str) -> dict[str, BatchStatus]:
    """Statuses of jim's array tasks from ``squeue -o SQUEUE_FORMAT`` output.

    A task in a state not in :data:`STATE_MAP` is left out (and logged).
    """
    out: dict[str, BatchStatus] = {}
    for bid, tag, state, reason in squeue_tasks(text):
        jim_state = STATE_MAP.get(state.split()[0] if state else "")
        if jim_state is None:
            log.warning("unknown Slurm state %r for %s: left out of the answer", state, bid)
            continue
        if jim_state is LocalState.QUEUED and reason in _HELD_REASONS:
            jim_state = LocalState.HELD
        cause = end_cause(state, reason) if jim_state.terminal or jim_state is LocalState.HELD else None
        out[bid] = BatchStatus(
            jim_state,
            reason=None if reason == "None" else reason,
            native=state,
            evidence=Evidence.BATCH,
            tag=tag,
            cause=cause,
        )
    return out


def _slurm_time(s: str) -> float | None:
    if not s or s in ("Unknown", "None"):
        return None
    try:
        return _dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S").timestamp()  # local time, as sacct prints it
    except ValueError:
        return None


def _exit_code(value: str) -> int | None:
    code, _, sig = value.partition(":")
    try:
        code_i, sig_i = int(code), int(sig or 0)
    except ValueError:
        return None
    return 128 + sig_i if sig_i and not code_i else code_i


def parse_sacct(
    text: str, wanted: set[str] | None = None, memory: bool = False, usage: bool = False
) -> dict[str, BatchStatus]:
    """States of jim's array tasks from ``sacct -n -X -P -o SACCT_FIELDS`` (``memory``: from
    ``sacct -n -P -o ACCT_FIELDS``, the steps' records too), by batch id.

    Slurm hands ids out again, so one id may have several records: the most
    recently submitted one is kept (callers still check its tag).
    """
    out: dict[str, BatchStatus] = {}
    for jobid, st in parse_sacct_rows(text, wanted, memory, usage):
        old = out.get(jobid)
        if old is None or (st.submitted or 0) >= (old.submitted or 0):
            out[jobid] = st
    return out


def parse_sacct_rows(
    text: str, wanted: set[str] | None = None, memory: bool = False, usage: bool = False
) -> list[tuple[str, BatchStatus]]:
    """Every record of jim's array tasks, in sacct's order: (batch id, status).

    Tasks that never started are folded into one record of their array:
    ``<array>_[0-99]``, or, when no task of it ever started, the bare
    ``<array>``.  A folded range is unfolded; a bare array record counts for
    the tasks of that array in ``wanted`` (callers still check the tags it
    gives them).  ``memory``: the lines have :data:`ACCT_FIELDS` (with the
    steps' lines), and a job killed for its memory says so (:func:`over_memory`).  ``usage``: the
    lines have :data:`USAGE_ACCT_FIELDS`, and an ended task's status carries what it used.
    """
    memory = memory or usage
    n = len((USAGE_ACCT_FIELDS if usage else ACCT_FIELDS if memory else SACCT_FIELDS).split(","))
    rows = [f for f in (_split(line.strip(), n) for line in text.splitlines()) if f is not None]
    batch_rss = {f[1].partition(".")[0]: f[8] for f in rows if memory and f[1].endswith(".batch")}
    peaks = _step_peaks(rows) if usage else {}
    out: list[tuple[str, BatchStatus]] = []
    for f in rows:
        jobid, raw, state, exitcode, submit = f[:5]
        tag = parse_tag_name(f[-2])
        jim_state = STATE_MAP.get(state.split()[0] if state else "")
        if tag is None or jim_state is None:
            continue
        cause = end_cause(state) if jim_state.terminal else None
        if cause is None and memory and over_memory(state, exitcode, f[7], batch_rss.get(raw, "")):
            cause = EndCause.OUT_OF_MEMORY
        array_id, _, task = jobid.partition("_")
        used = _usage(f, peaks.get(raw)) if usage and jim_state.terminal and task.isdigit() else None
        for t in _sacct_tasks(jobid, raw, wanted):
            out.append(
                (
                    f"{array_id}_{t}",
                    BatchStatus(
                        jim_state,
                        exit_code=_exit_code(exitcode) if jim_state.terminal else None,
                        reason=state,
                        native=state,
                        evidence=Evidence.ACCOUNTING,
                        tag=tag.tag(t),
                        submitted=_slurm_time(submit),
                        cause=cause,
                        usage=used,
                    ),
                )
            )
    return out


def _step_peaks(rows: list[list[str]]) -> dict[str, str]:
    """The largest MaxRSS of any step of each job (by JobIDRaw), in KiB as text."""
    peaks: dict[str, float] = {}
    for f in rows:
        raw, dot, _step = f[1].partition(".")
        mb = _memory_mb(f[8]) if dot else None
        if mb is not None:
            peaks[raw] = max(peaks.get(raw, 0.0), mb)
    return {raw: "%d" % round(mb * 1024) for raw, mb in peaks.items()}


def _usage(f: list[str], peak_kb: str | None) -> Usage:
    """What one task used, from its line of :data:`USAGE_ACCT_FIELDS` and its steps' peak RSS
    (checked: :func:`jim.record.usage.checked`)."""
    from jim.record.usage import Source, checked  # (lazy: the record's package loads lxml; only an ended task's)

    elapsed, user, system, cpus, nodes = f[9:14]
    fields = {"wall": elapsed, "cores": cpus, "cpu_user": _duration(user), "cpu_system": _duration(system)}
    if peak_kb is not None:
        fields["max_rss_kb"] = peak_kb
    if nodes and nodes not in ("None", "None assigned"):
        fields["node"] = nodes
    return checked(Source.SACCT, {k: v for k, v in fields.items() if v is not None})


def _duration(value: str) -> str | None:
    """Seconds, as text, of one of sacct's CPU times (``01:02.345``, ``1-02:03:04``); '' when it is
    not one ("x": checked() counts it malformed), None when there is none."""
    if not value:
        return None
    m = _SLURM_DURATION.fullmatch(value.strip())
    if m is None:
        return "x"
    days, hours, minutes, seconds, frac = m.groups()
    total = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)
    return f"{total}.{frac}" if frac else str(total)


def over_memory(state: str, exitcode: str, req_mem: str, batch_max_rss: str) -> bool:
    """Was a job killed for using more memory than it asked for?

    Where memory is watched by the accounting gatherer (``JobAcctGatherParams=OverMemoryKill``,
    no cgroups), slurmstepd SIGKILLs a step over its job's ``--mem`` and Slurm 22.05 records the
    job as any job whose batch script died of a signal: FAILED, exit ``0:9`` (squeue's reason
    JobLaunchFailure), its batch step "CANCELLED by 0" -- not OUT_OF_MEMORY, which only the
    cgroup plugin reports.  The batch step's MaxRSS above the job's ReqMem tells the two apart.
    """
    if state.split()[0:1] != ["FAILED"] or exitcode != "0:9":
        return False
    asked, used = _memory_mb(req_mem), _memory_mb(batch_max_rss)
    return asked is not None and used is not None and used > asked


#: sacct's memory values: a number and a unit (``100M``, ``322204K``, ``1.50G``); ReqMem of Slurm
#: before 21.08 ends in ``n`` (per node: the job's, on one node) or ``c`` (per CPU: not read here).
_SACCT_MEMORY = re.compile(r"([0-9]+(?:\.[0-9]+)?)([KMGTP])n?")
_UNIT_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def _memory_mb(value: str) -> float | None:
    """MB of a memory as sacct prints it; None when it is empty or not in that form."""
    m = _SACCT_MEMORY.fullmatch(value.strip())
    return float(m.group(1)) * _UNIT_MB[m.group(2)] if m else None


def _sacct_tasks(jobid: str, raw: str, wanted: set[str] | None) -> list[int]:
    """The array tasks one sacct record stands for (see :func:`parse_sacct_rows`)."""
    array_id, sep, task = jobid.partition("_")
    if sep and task.isdigit():
        return [int(task)]
    if sep and task.startswith("[") and task.endswith("]"):
        return parse_array_spec(task[1:-1]) or []
    if not sep and jobid == raw and wanted:
        return [int(t) for a, _, t in (b.partition("_") for b in wanted) if a == jobid and t.isdigit()]
    return []


class SlurmAdapter(CommandAdapter):
    """Slurm, through sbatch/squeue/sacct/scancel; one job array per group of local jobs."""

    name = "slurm"
    Options = SlurmOptions
    options: SlurmOptions
    user_wide_query = True
    ids_per_command = 100
    submit_command = "sbatch"
    transient_errors = TRANSIENT_ERRORS

    @property
    def array_span(self) -> int:
        return self.max_array_size()

    @property
    def array_gaps(self) -> bool:
        return True

    @property
    def max_chunk(self) -> int:
        limit = self.max_array_size()
        return min(self.options.chunk_size, limit) if self.options.chunk_size else limit

    def max_array_size(self) -> int:
        """The cluster's MaxArraySize (asked once a day)."""
        return self.options.max_array_size or int(self.cache.fact("MaxArraySize", self._ask_max_array_size))

    def _ask_max_array_size(self) -> int:
        try:
            proc = self.run(["scontrol", "show", "config"], error=QueryError)
        except QueryError:
            return DEFAULT_MAX_ARRAY_SIZE
        m = re.search(r"^MaxArraySize\s*=\s*(\d+)", proc.stdout, re.M)
        return int(m.group(1)) if m else DEFAULT_MAX_ARRAY_SIZE

    # -- submit ------------------------------------------------------------------
    def script(self, chunk: SubmitChunk, group: list[int]) -> str:
        return self.render(
            "slurm.sh",
            grid_id=chunk.grid_id,
            offset=group[0],
            python=self.options.python,
            wrapper=chunk.wrapper,
            sandbox=chunk.sandbox,
            outroot=chunk.outroot,
            attempt=chunk.attempt,
        )

    def submit_argv(self, chunk: SubmitChunk, group: list[int], script: Path) -> list[str]:
        offset = group[0]
        argv = [
            "sbatch",
            "--parsable",
            f"--array={array_spec(i - offset for i in group)}",
            f"--job-name={tag_name(chunk.grid_id, offset, chunk.attempt)}",
            f"--comment=jim:{chunk.grid_id}:{offset}",
            "-D",
            str(chunk.job_dir),
            "-o",
            str(chunk.job_dir / "batch" / "slurm-%A_%a.out"),
        ]
        partition = self.queue_of(chunk, self.options.partition)
        if partition:
            argv.append(f"--partition={partition}")
        account = chunk.limits.project or self.options.account
        if account:
            argv.append(f"--account={account}")
        if not self.options.requeue:
            argv.append("--no-requeue")
        if chunk.limits.wall_seconds:
            argv.append(f"--time={max(1, chunk.limits.wall_seconds // 60)}")
        argv += self.shape_args(chunk.limits)
        return [*argv, *self.options.sbatch_options, str(script)]  # the site's own options last: they win

    def shape_args(self, limits: Limits) -> list[str]:
        """The resource shape of each local job as sbatch asks for it: one task on one node with
        ``--cpus-per-task`` cores (accounting shows them as AllocCPUS), ``--mem`` MB of the whole job
        (the one node's), ``--gres`` GPUs, ``--exclusive`` for a whole node."""
        args = []
        if limits.cores > 1:
            args.append(f"--cpus-per-task={limits.cores}")
        if limits.memory_mb:
            args.append(f"--mem={limits.memory_mb}")
        if limits.gpus:
            args.append(f"--gres={self.options.gpu_gres}:{limits.gpus}")
        if limits.whole_node:
            args.append("--exclusive")
        return args

    def parse_submit(self, stdout: str, group: list[int]) -> str | None:
        array_id = stdout.strip().split(";")[0]
        return array_id if array_id.isdigit() else None

    def group_ids(self, job_id: str, group: list[int]) -> dict[int, str]:
        return {i: f"{job_id}_{i - group[0]}" for i in group}

    # -- status ------------------------------------------------------------------
    def status_argv(self) -> list[str]:
        return ["squeue", "-h", "-r", "-t", "all", "-u", self.user, "-o", SQUEUE_FORMAT]

    def parse_status(self, stdout: str) -> dict[str, BatchStatus]:
        return parse_squeue(stdout)

    def parse_tags(self, stdout: str) -> Iterable[tuple[str, str]]:
        return ((bid, tag) for bid, tag, _state, _reason in squeue_tasks(stdout))

    def accounting_units(self, batch_ids: list[str]) -> Sequence[str]:
        return sorted({b.partition("_")[0] for b in batch_ids if "_" in b}, key=int)

    def accounting_argv(self, units: Sequence[str]) -> list[str]:
        return ["sacct", "-n", "-P", "-o", USAGE_ACCT_FIELDS, "-j", ",".join(units)]

    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        """The records of ``batch_ids``; for a job squeue shows killed by a signal (FAILED,
        JobLaunchFailure) whose record is not final yet, asked again for up to
        :data:`ACCOUNTING_LAG` seconds: only the record says whether its memory killed it, and
        slurmdbd is fed asynchronously (a job ends in squeue a moment before its record does)."""
        found = super().accounting(batch_ids)
        deadline = time.monotonic() + ACCOUNTING_LAG
        late = self._signalled_unrecorded(batch_ids, found)
        while late and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                found.update(super().accounting(late))
            except QueryError:
                break  # (what the first answer said still counts)
            late = self._signalled_unrecorded(late, found)
        return found

    def _signalled_unrecorded(self, batch_ids: list[str], found: dict[str, BatchStatus]) -> list[str]:
        """Those of ``batch_ids`` without a final record that the last squeue answer shows FAILED
        with reason JobLaunchFailure (a batch script killed by a signal)."""
        cached = self.cache.cached()
        if cached is None:
            return []
        late = []
        for b in batch_ids:
            st = cached.statuses.get(b)
            if b not in found and st is not None and st.native == "FAILED" and st.reason == "JobLaunchFailure":
                late.append(b)
        return late

    def parse_accounting(self, stdout: str, wanted: set[str]) -> dict[str, BatchStatus]:
        found = parse_sacct(stdout, wanted, usage=True)
        if self.gathers_usage():
            return found
        # (no gatherer: sacct shows 00:00:00 CPU and no MaxRSS for every job: not measured, unknown)
        return {
            b: replace(st, usage=replace(st.usage, cpu_user=None, cpu_system=None, max_rss_kb=None))
            if st.usage is not None
            else st
            for b, st in found.items()
        }

    def gathers_usage(self) -> bool:
        """Does the cluster gather the jobs' CPU and memory (``JobAcctGatherType``, asked once a day)?"""
        return bool(self.cache.fact("JobAcctGatherType", self._ask_gathers_usage))

    def _ask_gathers_usage(self) -> bool:
        try:
            proc = self.run(["scontrol", "show", "config"], error=QueryError)
        except QueryError:
            return False  # (unknown stays unknown)
        m = re.search(r"^JobAcctGatherType\s*=\s*(\S+)", proc.stdout, re.M)
        return m is not None and m.group(1) != "jobacct_gather/none"

    def history_tags(self, grid_id: str, missing: set[str]) -> dict[str, str]:
        """jim's jobs of the last week in the accounting, by tag (the first record of a tag wins)."""
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 7 * 86400))
        argv = ["sacct", "-n", "-X", "-P", "-o", SACCT_FIELDS, "-u", self.user, "-S", since]
        try:
            proc = self.run(argv, error=QueryError)
        except QueryError as e:
            if "accounting storage is disabled" in (e.stderr + e.stdout):
                return {}
            raise
        found: dict[str, str] = {}
        for bid, st in parse_sacct_rows(proc.stdout):  # by tag: an id may be someone else's too
            if st.tag in missing:
                found.setdefault(st.tag, bid)
        return found

    # -- cancel ----------------------------------------------------------------------
    def cancel_units(self, batch_ids: list[str]) -> Sequence[str]:
        """Whole arrays when every task of them is to go (as far as the cached answer knows), else tasks."""
        by_array: dict[str, list[str]] = {}
        for b in batch_ids:
            by_array.setdefault(b.partition("_")[0], []).append(b)
        cached = self.cache.cached()
        units: list[str] = []
        for array_id, tasks in sorted(by_array.items()):
            known = sum(1 for b in cached.statuses if b.partition("_")[0] == array_id) if cached else len(tasks) + 1
            units += tasks if len(tasks) < max(known, len(tasks)) else [array_id]
        return units

    def cancel_argv(self, units: Sequence[str]) -> list[str]:
        return ["scancel", *units]

    # -- the site --------------------------------------------------------------------
    def free_slots(self) -> int | None:
        """Idle CPUs of the partition (or the cluster): ``sinfo -h -o %C`` prints allocated/idle/other/total."""
        partition = self.options.partition
        argv = ["sinfo", "-h", "-o", "%C", *(["-p", partition] if partition else [])]
        try:
            lines = self.run(argv, error=QueryError).stdout.split()
            return sum(int(line.split("/")[1]) for line in lines) if lines else None
        except (QueryError, IndexError, ValueError):
            return None

    def ask_capacity(self) -> Capacity | None:
        """Every node of the partition (or the cluster) once: CPUs allocated/idle/other/total, memory, GRES."""
        partition = self.options.partition
        argv = ["sinfo", "-h", "-N", "-o", "%N|%C|%m|%G", *(["-p", partition] if partition else [])]
        return capacity.ask(self, argv, capacity.parse_sinfo)
