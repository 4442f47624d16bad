"""Grid Engine (SGE 6.2 / Son of Grid Engine 8.1): local jobs as array jobs, one ``qstat`` for all.

* **submit**: ``qsub -terse -t 1-K``, one per run of consecutive local jobs of
  a chunk (``-t`` takes one range only).  Task ``t`` (``$SGE_TASK_ID``, from 1)
  of the array job named ``jim.<grid id>.<offset>`` is local job
  ``offset + t - 1``.  ``-C ''`` (no ``#$`` directives are read from the
  script), ``-S /bin/sh``, ``-wd`` the grid job's directory, stdout and stderr
  joined into ``batch/sge-$JOB_ID.$TASK_ID.out``, ``-r n``.  Each local job's
  cores (``-pe``), memory per slot, GPUs and whole node: :mod:`jim.adapters.shapes`.
* **query**: ``qstat -u <user> -xml -g d`` (one ``job_list`` element per
  array task), parsed with lxml, for everything the user has, once per
  ``cache_interval`` (the answer is shared by every jim process of the user).
  Finished jobs leave qstat at once.
* **accounting**: ``qacct -j <job id>``, one per array job with tasks gone
  from qstat (qacct takes one job per call): ``failed``, ``exit_status``,
  ``qsub_time`` of every task, and what it used (source ``qacct``: :func:`jim.adapters.usage.qacct_usage`);
  records whose job name is not jim's tag are ignored.
* **cancel**: ``qdel <job id> -t <range> ...`` for the tasks concerned (tasks
  already gone are not an error).  Grid Engine kills running tasks with
  SIGKILL and its accounting cannot tell that from any other kill, so the
  tasks jim deleted are noted in ``cache/sge-deleted.log``: their records then
  say CANCELLED, not FAILED.
* **find by tag**: ``qstat``, then ``qacct -o <user> -j 'jim.<grid id>.*'`` for
  array jobs that already left it, by job name.
* **free slots**: the AVAIL column of ``qstat -g c`` (cluster queue summary).

Grid Engine gives two exit codes a meaning of its own: a job that exits 100
is put into an error state (``Eqw``, it stays in the queue until an admin
clears or deletes it) and one that exits 99 is requeued (``Rq``) and run
again, forever.  ``reserved_exit_codes = (99, 100)``: the wrapper exits 1
instead and keeps the true code in its exit-code file, which is what jim
reports to the grid.

The commands are found on ``PATH`` (a site's ``$SGE_ROOT/$SGE_CELL/common/settings.sh``
puts ``$SGE_ROOT/bin/<arch>`` there); ``SGE_ROOT``, ``SGE_CELL`` and, where
used, ``SGE_QMASTER_PORT``/``SGE_EXECD_PORT`` come from the environment.

Native states: sge_status(5), qstat(1); "failed" codes of qacct: sge_status(5), and why a
task ended (:data:`FAILED_CAUSES`): a launch failure (the site's), or qmaster's h_rt kill.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jim.adapters import capacity
from jim.adapters.base import CommandAdapter
from jim.adapters.model import BatchStatus, Capacity, SubmitChunk
from jim.adapters.options import AdapterOptions
from jim.adapters.shapes import check_name, sge_shape_args
from jim.adapters.usage import qacct_usage
from jim.errors import ConfigError, QueryError, SubmitError
from jim.jobid import NAME_PREFIX, TagName, parse_tag_name, tag_name
from jim.ranges import array_spec, parse_array_spec
from jim.safeio import atomic_write
from jim.states import EndCause, Evidence, LocalState

log = logging.getLogger("jim.adapters")

#: Grid Engine state letters -> jim state (the combinations of sge_status(5),
#: plus those seen on 8.1.9).  d(eletion) E(rror) h(old) q(ueued) w(aiting)
#: r(unning) R(estarted) s(uspended by qmod) S(queue suspended)
#: t(ransferring) T(hreshold suspended).  A state not listed is logged and
#: the job is left out of the answer (absent: accounting and the exit file
#: decide), never guessed.
STATE_MAP: dict[str, LocalState] = {
    # pending
    "qw": LocalState.QUEUED,
    "Rq": LocalState.QUEUED,  # requeued after a run that exited 99 (or a rescheduling): waits again
    "Rqw": LocalState.QUEUED,
    "hqw": LocalState.HELD,  # user, operator or system hold, or waiting for -hold_jid dependencies
    "hRqw": LocalState.HELD,  # held after a requeue (sge_status(5) spells it hRwq)
    "hRwq": LocalState.HELD,
    # error: the job failed to start (unwritable output path, missing working
    # directory, or a job that exited 100) and stays in the queue until an
    # admin clears the error (qmod -cj, then it runs again) or deletes it.
    # Not terminal: HELD, so that the grid job shows SUSPENDED and jim's
    # held_timeout cancels it if nobody acts.  (`qstat -j ID` says why.)
    "Eqw": LocalState.HELD,
    "Ehqw": LocalState.HELD,
    "EhRqw": LocalState.HELD,
    "ERqw": LocalState.HELD,
    # running
    "r": LocalState.RUNNING,
    "hr": LocalState.RUNNING,  # running; a hold set meanwhile only applies to a rerun
    "Rr": LocalState.RUNNING,  # running again after a requeue or migration
    # ambiguous: t(ransferring) to the execution host, our code is about to start (DRMAA says
    # RUNNING); a job whose end execd has not yet reported can also linger in t: RUNNING lets
    # the exit file win
    "t": LocalState.RUNNING,
    "Rt": LocalState.RUNNING,
    # suspended (resources kept)
    "s": LocalState.SUSPENDED,  # qmod -sj
    "ts": LocalState.SUSPENDED,
    "S": LocalState.SUSPENDED,  # its queue is suspended (qmod -sq, subordination)
    "tS": LocalState.SUSPENDED,
    "T": LocalState.SUSPENDED,  # a suspend threshold of its queue was exceeded
    "tT": LocalState.SUSPENDED,
    "Rs": LocalState.SUSPENDED,
    "Rts": LocalState.SUSPENDED,
    "RS": LocalState.SUSPENDED,
    "RtS": LocalState.SUSPENDED,
    "RT": LocalState.SUSPENDED,
    "RtT": LocalState.SUSPENDED,
    # deletion under way (qdel: jim's cancel, an admin, a limit): the job is
    # killed (SIGKILL) and leaves qstat within a second or two.  Terminal, so
    # that the wrapper's exit file (if it wrote one) or else this status decides.
    "dr": LocalState.CANCELLED,
    "dt": LocalState.CANCELLED,
    "dRr": LocalState.CANCELLED,
    "dRt": LocalState.CANCELLED,
    "ds": LocalState.CANCELLED,
    "dS": LocalState.CANCELLED,
    "dT": LocalState.CANCELLED,
    "dRs": LocalState.CANCELLED,
    "dRS": LocalState.CANCELLED,
    "dRT": LocalState.CANCELLED,
    "dqw": LocalState.CANCELLED,  # pending jobs are normally deleted at once; seen only in a race
    "dhqw": LocalState.CANCELLED,
    "dEqw": LocalState.CANCELLED,
}
_ERROR_REASON = (
    "error state ({native}): Grid Engine will not start it until the error is cleared "
    "(qmod -cj) or it is deleted; qstat -j {job} says why"
)

#: qacct "failed" codes after which the job is back in the queue (not an end).
FAILED_REQUEUED = {25}  # "rescheduling": the run exited 99 (or was rescheduled by an admin)

#: qacct "failed" codes that say why a task ended: the shepherd's SSTATE_* codes (Grid Engine's
#: source/common/execution_states.h; the "failed" table of sge_status(5), sge_diagnostics(1)).
#: Every code up to 11 and 26-29, 38 means Grid Engine could not start the job on its host:
#: execd or the shepherd failed, or the prolog, the PE start, the output file, the shell, the
#: working directory, AFS or the group id did (for jim's jobs these are jim's own paths and
#: the site's setup, not the job's doing).  37 is qmaster killing a job past its h_rt (its own
#: wall time).  Left out, saying nothing clear: 12-16 (the job ran; pe_stop, epilog or a
#: processor set failed after it), 17-21 (the shepherd died or lost track: how is unknown),
#: 22 ("removed manually": qdel -f of a job its execd lost), 24/25 (migrated, rescheduled: no
#: end), 30 (exit 100: jim's wrapper never exits so), 100 ("assumedly after job": killed by a
#: signal, from qdel, an execd-enforced limit or anything else).  Grid Engine has no job state
#: for a node failure: a job on a host gone unknown stays "r" until reschedule_unknown requeues
#: it (failed 25: no end) or an admin deletes it.
FAILED_CAUSES: dict[int, EndCause] = {
    1: EndCause.LAUNCH_FAILED,  # assumedly before job (execd could not start it)
    2: EndCause.LAUNCH_FAILED,  # on executing shepherd
    3: EndCause.LAUNCH_FAILED,  # before writing config
    4: EndCause.LAUNCH_FAILED,  # before writing pid
    5: EndCause.LAUNCH_FAILED,  # on reading config file
    6: EndCause.LAUNCH_FAILED,  # setting processor set
    7: EndCause.LAUNCH_FAILED,  # before prolog
    8: EndCause.LAUNCH_FAILED,  # in prolog
    9: EndCause.LAUNCH_FAILED,  # before pestart
    10: EndCause.LAUNCH_FAILED,  # in pestart
    11: EndCause.LAUNCH_FAILED,  # before job
    26: EndCause.LAUNCH_FAILED,  # opening input/output file
    27: EndCause.LAUNCH_FAILED,  # searching requested shell
    28: EndCause.LAUNCH_FAILED,  # changing into working directory
    29: EndCause.LAUNCH_FAILED,  # setting up AFS credentials
    38: EndCause.LAUNCH_FAILED,  # setting the additional group id
    37: EndCause.TIMEOUT,  # qmaster enforced h_rt limit
}

#: Failures that a retry may cure: sge_qmaster down, slow or restarting, or the user's job limit.
TRANSIENT_ERRORS = (
    "commlib error|got (select|send) error|failed receiving gdi request|Connection refused|no connection",
    "unable to (send message to|contact) qmaster|qmaster is (down|not running|starting)",
    "timeout|timed out|try again|temporarily",
    r"jobs are allowed (per|for) (user|this user)|only \d+ jobs are allowed",  # the user's job limit
)
#: qdel lines that only say a job or task is already gone; and those that say what it did delete
#: (qdel exits 1 when any of its tasks had already gone: its other lines are then no complaint).
GONE_ERRORS = ("does not exist|is already in deletion|has already been deleted", "for deletion|has deleted")
#: characters Grid Engine refuses in a job name (sge_types(5) object_name), plus its wildcards
_BAD_NAME = re.compile(r"[\s/:'\\\[\]{}|()@%,\"*?]")


@dataclass(frozen=True)
class SgeOptions(AdapterOptions):
    queue: str = ""
    """Default queue (``-q``); a queue chosen by requirements wins."""
    project: str = ""
    """``-P``."""
    qsub_options: tuple[str, ...] = ()
    """Extra qsub arguments, as an argument list."""
    python: str = "python3"
    """Interpreter for the wrapper on the execution hosts."""
    cache_interval: float = 30.0
    rerun: bool = False
    """``-r y``: let Grid Engine rerun a job after a host crash (it may then run twice)."""
    parallel_environment: str = ""
    """The parallel environment of a local job of more than one core (``-pe <pe> N``; one with
    ``allocation_rule $pe_slots``); "": such jobs are refused."""
    memory_resources: tuple[str, ...] = ("h_data",)
    """The resources a local job's memory is given as, per slot (``-l h_vmem=...``, ``mem_free``...)."""
    gpu_resource: str = ""
    """The complex that counts GPUs (``-l gpu=N``; consumable JOB); "": jobs with GPUs are refused."""
    exclusive_resource: str = ""
    """The exclusive complex of a whole node (``-l exclusive=true``); "": whole-node jobs are refused."""

    def check(self) -> None:
        super().check()
        for key in ("parallel_environment", "gpu_resource", "exclusive_resource"):
            check_name(key, getattr(self, key))
        for name in self.memory_resources:
            check_name("memory_resources", name)
            if not name:
                raise ConfigError("[batch] memory_resources: a resource name must not be empty")


def task_ranges(tasks: Iterable[int]) -> list[str]:
    """``["1-3", "7"]`` from task ids: the ranges ``qdel -t`` takes (one each)."""
    return array_spec(tasks).split(",")


_TERSE = re.compile(r"^(\d+)(?:\.\d+-\d+:\d+)?$")


def parse_terse(stdout: str) -> str | None:
    """The job id from ``qsub -terse``: ``"32.1-10:1"`` for an array job, ``"31"`` for a plain one."""
    for line in stdout.splitlines():
        m = _TERSE.match(line.strip())
        if m:
            return m.group(1)
    return None


def split_batch_id(batch_id: str) -> tuple[str, int] | None:
    """("<job id>", task) from ``"<job id>.<task>"``, else None."""
    job, sep, task = batch_id.partition(".")
    if not sep or not job.isdigit() or not task.isdigit():
        return None
    return job, int(task)


def output_path(job_dir: Path) -> str:
    """qsub's ``-o`` for the tasks of an array job of the grid job in ``job_dir``."""
    out = str(job_dir / "batch" / "sge-$JOB_ID.$TASK_ID.out")
    if "," in out:
        raise SubmitError(f"Grid Engine cannot write output under a path with a comma: {job_dir}")
    return ":" + out if ":" in out else out  # a path with a colon needs an empty host name in front


# -- qstat -xml ------------------------------------------------------------------


@functools.cache
def _lxml() -> tuple[Any, Any]:
    # lxml is imported when qstat's XML is first parsed, not by every jim command that loads the adapter
    from lxml import etree

    # (blank text dropped: a third fewer nodes to build for qstat's indented output)
    return etree, etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True, remove_blank_text=True)


def qstat_tasks(xml: str | bytes) -> list[tuple[str, str, str, dict[str, str | None]]]:
    """``(batch id, tag, native state, fields)`` of every jim array task in ``qstat -xml -g d``,
    whatever its state.

    Raises ``ValueError`` when the text is not qstat's XML (a query that says
    nothing, not one that says "no jobs").
    """
    etree, parser = _lxml()
    try:
        root = etree.fromstring(xml.encode() if isinstance(xml, str) else xml, parser)
    except etree.XMLSyntaxError as e:
        raise ValueError(f"qstat printed no valid XML: {e}") from None
    if root.tag != "job_info":
        raise ValueError(f"qstat printed XML whose root is <{root.tag}>, not <job_info>")
    tags: dict[str | None, TagName | None] = {}  # job name -> parsed tag (tasks share a name)
    out = []
    for jl in root.iter("job_list"):
        f = {c.tag: c.text for c in jl}
        name = f.get("JB_name")
        tag = tags[name] if name in tags else tags.setdefault(name, parse_tag_name(name))
        task, job = f.get("tasks") or "", f.get("JB_job_number") or ""
        if tag is None or not task.isdigit() or not job.isdigit():
            continue  # not jim's, or a folded task range (we always ask with -g d)
        out.append((f"{job}.{task}", tag.tag(int(task) - 1), (f.get("state") or "").strip(), f))
    return out


def parse_qstat(xml: str | bytes) -> dict[str, BatchStatus]:
    """Statuses of jim's array tasks from ``qstat -xml -g d``, keyed ``"<job id>.<task>"``.

    A task in a state not in :data:`STATE_MAP` is left out (and logged).
    Raises ``ValueError`` as :func:`qstat_tasks` does.
    """
    out: dict[str, BatchStatus] = {}
    for bid, tag, native, f in qstat_tasks(xml):
        state = STATE_MAP.get(native)
        if state is None:
            log.warning("unknown Grid Engine state %r for %s: left out of the answer", native, bid)
            continue
        reason, cause = None, None
        if state is LocalState.HELD:
            job = bid.partition(".")[0]
            reason = _ERROR_REASON.format(native=native, job=job) if "E" in native else f"held ({native})"
            # error state: Grid Engine could not start it (a job exiting 100 is the other way in,
            # and jim's wrapper never exits 100: see reserved_exit_codes)
            cause = EndCause.LAUNCH_FAILED if "E" in native else None
        elif state is LocalState.CANCELLED:
            reason = f"being deleted ({native}: qdel)"
        queue = f.get("queue_name")
        host = queue.partition("@")[2] or None if queue else None
        out[bid] = BatchStatus(state, None, reason, native, Evidence.BATCH, host, tag, cause=cause)
    return out


def parse_cluster_queues(text: str) -> int | None:
    """Sum of the AVAIL column of ``qstat -g c`` (cluster queue summary), None if there is none."""
    lines = text.splitlines()
    if not lines or "AVAIL" not in lines[0].split():
        return None
    col = lines[0].split().index("AVAIL") - 1  # the header's "CLUSTER QUEUE" is two words, a name one
    total, rows = 0, 0
    for line in lines[1:]:
        f = line.split()
        if len(f) > col and not line.startswith("-") and f[col].isdigit():
            total += int(f[col])
            rows += 1
    return total if rows else None


# -- qacct -----------------------------------------------------------------------

_RECORD_SEP = re.compile(r"^={10,}\s*$", re.M)


def _sge_time(s: str | None) -> float | None:
    """Epoch from qacct's ``Sun Nov 22 07:51:22 2026`` (local time), else None."""
    if not s or s.strip() in ("-/-", "undefined"):
        return None
    try:
        return time.mktime(time.strptime(s.strip(), "%a %b %d %H:%M:%S %Y"))
    except (ValueError, OverflowError):
        return None


def _first_int(s: str | None) -> int | None:
    m = re.match(r"\s*(-?\d+)", s or "")
    return int(m.group(1)) if m else None


def _qacct_fields(block: str) -> dict[str, str]:
    """The ``key value`` lines of one qacct record."""
    return {key: value.strip() for key, _, value in (line.partition(" ") for line in block.splitlines()) if key}


def _ended(failed: int, exit_status: int, why: str) -> tuple[LocalState, int | None, str | None]:
    """(state, exit code, reason) of a task's record whose ``failed`` and ``exit_status`` say how it ended."""
    if failed == 0 and exit_status == 0:
        return LocalState.DONE, 0, None
    if failed == 0:
        return LocalState.FAILED, exit_status, f"exit code {exit_status}"
    reason = f"Grid Engine: failed {failed}" + (f" ({why})" if why else "")
    return LocalState.FAILED, exit_status or None, reason + (f", exit status {exit_status}" if exit_status else "")


def parse_qacct(text: str, usage: bool = False) -> dict[str, BatchStatus]:
    """Final states of jim's array tasks from ``qacct -j`` output, keyed ``"<job id>.<task>"``
    (``usage``: with what each used).

    A task run more than once (requeued) has a record per run, in the order
    they ended: the last one counts, and a last one that says the task went
    back to the queue (failed 25) is no end at all.
    """
    out: dict[str, BatchStatus] = {}
    for block in _RECORD_SEP.split(text):
        f = _qacct_fields(block)
        tag = parse_tag_name(f.get("jobname"))
        job, task = f.get("jobnumber", ""), f.get("taskid", "")
        if tag is None or not job.isdigit() or not task.isdigit():
            continue  # not jim's (a non-array job has taskid "undefined")
        key = f"{job}.{task}"
        failed, exit_status = _first_int(f.get("failed")), _first_int(f.get("exit_status"))
        if failed is None or exit_status is None:
            continue
        if failed in FAILED_REQUEUED:
            out.pop(key, None)
            continue
        state, code, reason = _ended(failed, exit_status, f.get("failed", "").partition(":")[2].strip())
        native = f"failed {failed}, exit_status {exit_status}"
        host, submitted = f.get("hostname") or None, _sge_time(f.get("qsub_time"))
        task_tag = tag.tag(int(task) - 1)
        cause = FAILED_CAUSES.get(failed)
        used = qacct_usage(f, failed) if usage and cause is not EndCause.LAUNCH_FAILED else None
        out[key] = BatchStatus(state, code, reason, native, Evidence.ACCOUNTING, host, task_tag, submitted, cause, used)
    return out


# -- the tasks jim deleted -------------------------------------------------------
# Grid Engine's accounting cannot tell a task killed by qdel from one killed by a signal
# ("failed 100 : assumedly after job", exit status 137).  The tasks jim deletes are noted
# in cache/sge-deleted.log, a line per qdel'd range ("<time> <job id> <task range>"), so
# that their records say CANCELLED, not FAILED.

#: How long (and up to what size) the note of the tasks jim deleted is kept.
DELETED_LOG_DAYS = 14
DELETED_LOG_MAX = 1 << 20


def note_deleted(path: Path, ranges: Sequence[tuple[str, str]], now: float) -> None:
    """Append ``(job id, task range)`` pairs to the note (pruned of old lines once it is large)."""
    try:
        if path.stat().st_size > DELETED_LOG_MAX:
            _prune_deleted(path, now)
    except OSError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, "".join(f"{now:.0f} {job} {r}\n" for job, r in ranges).encode())
    finally:
        os.close(fd)


def _prune_deleted(path: Path, now: float) -> None:
    def recent(line: str) -> bool:
        at = line.split(" ", 1)[0]
        return at.isdigit() and now - int(at) < DELETED_LOG_DAYS * 86400

    keep = [ln for ln in path.read_text().splitlines() if recent(ln)]
    atomic_write(path, "".join(ln + "\n" for ln in keep), sync=False)


def deleted_by_jim(path: Path) -> dict[str, float]:
    """batch id -> when jim deleted it, from the note."""
    out: dict[str, float] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        tasks = parse_array_spec(parts[2]) if len(parts) == 3 and parts[0].isdigit() else None
        for t in tasks or ():
            out[f"{parts[1]}.{t}"] = float(parts[0])
    return out


class SgeAdapter(CommandAdapter):
    """Grid Engine, through qsub/qstat/qacct/qdel; one array job per run of local jobs."""

    name = "sge"
    Options = SgeOptions
    options: SgeOptions
    user_wide_query = True
    reserved_exit_codes = (99, 100)
    submit_command = "qsub"
    transient_errors = TRANSIENT_ERRORS
    gone_errors = GONE_ERRORS
    ids_per_accounting = 1

    @property
    def array_span(self) -> int:
        return self.max_chunk  # runs of consecutive local jobs (-t takes one range), at most a chunk long

    # -- submit ------------------------------------------------------------------
    def script(self, chunk: SubmitChunk, group: list[int]) -> str:
        offset = group[0]
        return self.render(
            "sge.sh",
            grid_id=chunk.grid_id,
            offset=offset,
            index_offset=offset - 1,
            python=self.options.python,
            wrapper=chunk.wrapper,
            sandbox=chunk.sandbox,
            outroot=chunk.outroot,
            attempt=chunk.attempt,
        )

    def submit_argv(self, chunk: SubmitChunk, group: list[int], script: Path) -> list[str]:
        name = tag_name(chunk.grid_id, group[0], chunk.attempt)
        if _BAD_NAME.search(name):
            raise SubmitError(f"grid job id {chunk.grid_id!r} cannot be part of a Grid Engine job name")
        argv = ["qsub", "-terse", "-t", f"1-{len(group)}", "-N", name, "-C", "", "-S", "/bin/sh"]
        argv += ["-wd", str(chunk.job_dir), "-o", output_path(chunk.job_dir), "-j", "y"]
        argv += ["-r", "y" if self.options.rerun else "n"]
        queue = self.queue_of(chunk, self.options.queue)
        if queue:
            argv += ["-q", queue]
        project = chunk.limits.project or self.options.project
        if project:
            argv += ["-P", project]
        if chunk.limits.wall_seconds is not None:
            argv += ["-l", f"h_rt={max(1, chunk.limits.wall_seconds)}"]
        if chunk.limits.cpu_seconds:
            argv += ["-l", f"h_cpu={chunk.limits.cpu_seconds}"]
        argv += self.shape_args(chunk)
        return [*argv, *self.options.qsub_options, str(script)]

    def shape_args(self, chunk: SubmitChunk) -> list[str]:
        """``-pe``, the memory per slot (``h_data``: as the stock GRAM sge module), GPUs, whole node."""
        o = self.options
        return sge_shape_args(
            chunk.limits,
            pe=o.parallel_environment,
            memory_resources=o.memory_resources,
            gpu_resource=o.gpu_resource,
            exclusive_resource=o.exclusive_resource,
        )

    def parse_submit(self, stdout: str, group: list[int]) -> str | None:
        return parse_terse(stdout)

    def group_ids(self, job_id: str, group: list[int]) -> dict[int, str]:
        return {i: f"{job_id}.{i - group[0] + 1}" for i in group}

    # -- status ------------------------------------------------------------------
    def status_argv(self) -> list[str]:
        return ["qstat", "-u", self.user, "-xml", "-g", "d"]

    def parse_status(self, stdout: str) -> dict[str, BatchStatus]:
        return parse_qstat(stdout)

    def parse_tags(self, stdout: str) -> Iterable[tuple[str, str]]:
        return ((bid, tag) for bid, tag, _native, _f in qstat_tasks(stdout))

    # -- accounting --------------------------------------------------------------
    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        """The base's, and records of tasks jim deleted say CANCELLED."""
        return self._deleted_are_cancelled(super().accounting(batch_ids))

    def accounting_units(self, batch_ids: list[str]) -> Sequence[str]:
        return sorted({p[0] for p in map(split_batch_id, batch_ids) if p}, key=int)

    def accounting_argv(self, units: Sequence[str]) -> list[str]:
        (job,) = units  # qacct takes one job per call: see ids_per_accounting
        return ["qacct", "-j", job]

    def accounting_accept(self, proc: subprocess.CompletedProcess[str]) -> bool:
        return proc.returncode == 1 and "not found" in (proc.stderr + proc.stdout)  # no record (yet): none

    def parse_accounting(self, stdout: str, wanted: set[str]) -> dict[str, BatchStatus]:
        return parse_qacct(stdout, usage=True)

    def history_tags(self, grid_id: str, missing: set[str]) -> dict[str, str]:
        """Array jobs of ``grid_id`` gone from qstat: their accounting records, by job name
        (records in the order the jobs ended: a later one of the same tag wins)."""
        if _BAD_NAME.search(grid_id):
            return {}  # never a job name: nothing was submitted
        argv = ["qacct", "-o", self.user, "-j", f"{NAME_PREFIX}{grid_id}.*"]
        records = self.accounting_records(argv, set())
        return {st.tag: bid for bid, st in records.items() if st.tag is not None and st.tag in missing}

    @property
    def _deleted_log(self) -> Path:
        return self.home.cache / "sge-deleted.log"

    def _deleted_are_cancelled(self, got: dict[str, BatchStatus]) -> dict[str, BatchStatus]:
        """Records of tasks killed by a qdel of jim's say CANCELLED (unless submitted after it: a reused id)."""
        killed = {b: s for b, s in got.items() if s.state is LocalState.FAILED and s.native.startswith("failed 100,")}
        deleted = deleted_by_jim(self._deleted_log) if killed else {}
        for b, st in killed.items():
            since = deleted.get(b)
            if since is not None and (st.submitted is None or st.submitted <= since):
                got[b] = replace(st, state=LocalState.CANCELLED, reason=f"deleted by jim (qdel); {st.reason}")
        return got

    # -- cancel --------------------------------------------------------------------
    def cancel_units(self, batch_ids: list[str]) -> Sequence[tuple[str, str]]:
        """(job id, task range) pairs, by job id."""
        by_job: dict[str, list[int]] = {}
        for job, task in filter(None, map(split_batch_id, batch_ids)):
            by_job.setdefault(job, []).append(task)
        return [(job, r) for job in sorted(by_job, key=int) for r in task_ranges(by_job[job])]

    def cancel_argv(self, units: Sequence[tuple[str, str]]) -> list[str]:
        return ["qdel", *(arg for job, r in units for arg in (job, "-t", r))]

    def after_cancel(self, units: Sequence[tuple[str, str]], proc: subprocess.CompletedProcess[str]) -> None:
        # (qdel exits 1 when some of its tasks had already gone: those it says it deleted, it did)
        if proc.returncode == 0 or "for deletion" in proc.stdout or "has deleted" in proc.stdout:
            note_deleted(self._deleted_log, units, time.time())

    # -- the site --------------------------------------------------------------------
    def free_slots(self) -> int | None:
        """Slots free now in the queue (or in every cluster queue): AVAIL of ``qstat -g c``."""
        argv = ["qstat", "-g", "c", *(["-q", self.options.queue] if self.options.queue else [])]
        try:
            return parse_cluster_queues(self.run(argv, error=QueryError).stdout)
        except QueryError:
            return None

    def ask_capacity(self) -> Capacity | None:
        """Every host with its queue instances' slots (of the queue, if one is set), memory and ``gpu`` complex."""
        queue = self.options.queue
        return capacity.ask(self, ["qhost", "-q", "-F", "gpu"], lambda out: capacity.parse_qhost(out, queue))
