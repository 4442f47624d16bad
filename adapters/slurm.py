"""Slurm: local jobs as job arrays, one ``squeue`` for all of the user's jobs.

* **submit**: one ``sbatch --parsable --array`` per chunk.  Array task ``t``
  of the array named ``jim.<grid id>.<offset>`` is local job ``offset + t``
  (task ids stay below the cluster's ``MaxArraySize``, read once from
  ``scontrol show config``).  The job name carries jim's tag, so that a job is
  known by its name, never by its id alone (Slurm hands ids out again after a
  controller crash).
* **query**: ``squeue -h -r -t all -u <user> -o '%i|%A|%F|%K|%T|%r|%j|%k'``,
  once per ``cache_interval`` for everything the user has, shared through the
  on-disk cache of :meth:`Adapter.query_cached`.
* **accounting**: ``sacct -n -X -P`` for jobs that left ``squeue``; records
  whose name is not jim's tag are ignored.
* **cancel**: one ``scancel`` for the arrays (or tasks) concerned.
* **find by tag**: ``squeue`` (and ``sacct`` for arrays that already left it)
  by job name.

Native states: https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES
"""

from __future__ import annotations

import datetime as _dt
import getpass
import json
import logging
import re
import time

from jim.adapters.base import (Adapter, BatchStatus, QueryResult, SubmitChunk, array_spec,
                               parse_array_spec, parse_tag_name, tag_name)
from jim.errors import CancelError, QueryError, SubmitError
from jim.states import Evidence, LocalState

log = logging.getLogger("jim.adapters")

SQUEUE_FORMAT = "%i|%A|%F|%K|%T|%r|%j|%k"
SACCT_FIELDS = "JobID,JobIDRaw,State,ExitCode,Submit,Start,End,JobName,Comment"

#: Slurm state -> jim state.  Terminal Slurm states only say how the job
#: ended; the exit code comes from the wrapper's file or from accounting.
STATE_MAP: dict[str, LocalState] = {
    "PENDING": LocalState.QUEUED,        # HELD instead when the reason says so (see _HELD_REASONS)
    "CONFIGURING": LocalState.QUEUED,    # nodes allocated but booting: not yet running our code
    "REQUEUED": LocalState.QUEUED,
    "REQUEUE_FED": LocalState.QUEUED,
    "REQUEUE_HOLD": LocalState.HELD,
    "RESV_DEL_HOLD": LocalState.HELD,
    "SPECIAL_EXIT": LocalState.HELD,     # requeued in held state after a special exit code
    "RUNNING": LocalState.RUNNING,
    "COMPLETING": LocalState.RUNNING,    # ambiguous: our code ended, Slurm is cleaning up; the exit file decides
    "RESIZING": LocalState.RUNNING,
    "SIGNALING": LocalState.RUNNING,
    "STAGE_OUT": LocalState.RUNNING,     # burst-buffer stage-out after the script ended
    "SUSPENDED": LocalState.SUSPENDED,
    "STOPPED": LocalState.SUSPENDED,     # SIGSTOPped, resources kept
    "COMPLETED": LocalState.DONE,
    "FAILED": LocalState.FAILED,
    "TIMEOUT": LocalState.FAILED,        # ran out of wall time: a failure for jim
    "NODE_FAIL": LocalState.FAILED,
    "BOOT_FAIL": LocalState.FAILED,
    "OUT_OF_MEMORY": LocalState.FAILED,
    "DEADLINE": LocalState.FAILED,
    "PREEMPTED": LocalState.FAILED,      # ambiguous: with requeue the job comes back PENDING (jim submits --no-requeue)
    "CANCELLED": LocalState.CANCELLED,
    "REVOKED": LocalState.CANCELLED,     # federation: the sibling ran elsewhere
}
_HELD_REASONS = ("JobHeldUser", "JobHeldAdmin", "launch failed requeued held")

#: sbatch/squeue failures that a retry may cure (the controller is down or slow).
_TRANSIENT = re.compile(r"Unable to contact slurm controller|Socket timed out|Connection refused|"
                        r"Transport endpoint|Resource temporarily unavailable|try again|"
                        r"Slurm temporarily unable|Zero Bytes were transmitted", re.I)


def _transient(rc: int, stderr: str) -> bool:
    return bool(_TRANSIENT.search(stderr))






def _split(line: str, n: int) -> list[str] | None:
    """Split ``line`` on ``|`` into n fields; the name field (second to last) may contain '|'."""
    parts = line.split("|")
    if len(parts) < n:
        return None
    if len(parts) > n:  # '|' in name or comment: keep the fixed fields at both ends
        head, tail = parts[: n - 2], parts[-1:]
        middle = "|".join(parts[n - 2:-1])
        parts = head + [middle] + tail
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
        out.append((f"{array_id}_{task}", f"{tag[0]}.{tag[1] + int(task)}", state, reason))
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
        out[bid] = BatchStatus(jim_state, reason=None if reason == "None" else reason,
                               native=state, evidence=Evidence.BATCH, tag=tag)
    return out


def _slurm_time(s: str) -> float | None:
    if not s or s in ("Unknown", "None"):
        return None
    try:
        return _dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S").timestamp()  # local time, as sacct prints it
    except ValueError:
        return None


def _exit_code(field: str) -> int | None:
    code, _, sig = field.partition(":")
    try:
        code_i, sig_i = int(code), int(sig or 0)
    except ValueError:
        return None
    return 128 + sig_i if sig_i and not code_i else code_i


def parse_sacct(text: str, wanted: set[str] | None = None) -> dict[str, BatchStatus]:
    """States of jim's array tasks from ``sacct -n -X -P -o SACCT_FIELDS``, by batch id.

    Slurm hands ids out again, so one id may have several records: the most
    recently submitted one is kept (callers still check its tag).
    """
    out: dict[str, BatchStatus] = {}
    for jobid, st in parse_sacct_rows(text, wanted):
        old = out.get(jobid)
        if old is None or (st.submitted or 0) >= (old.submitted or 0):
            out[jobid] = st
    return out


def parse_sacct_rows(text: str, wanted: set[str] | None = None) -> list[tuple[str, BatchStatus]]:
    """Every record of jim's array tasks, in sacct's order: (batch id, status).

    Tasks that never started are folded into one record of their array:
    ``<array>_[0-99]``, or, when no task of it ever started, the bare
    ``<array>``.  A folded range is unfolded; a bare array record counts for
    the tasks of that array in ``wanted`` (callers still check the tags it
    gives them).
    """
    out: list[tuple[str, BatchStatus]] = []
    for line in text.splitlines():
        f = _split(line.strip(), 9)
        if f is None:
            continue
        jobid, raw, state, exitcode, submit, _start, _end, name, _comment = f
        tag = parse_tag_name(name)
        if tag is None:
            continue
        array_id, sep, task = jobid.partition("_")
        if sep and task.isdigit():
            tasks = [int(task)]
        elif sep and task.startswith("[") and task.endswith("]"):
            tasks = parse_array_spec(task[1:-1]) or []
        elif not sep and jobid == raw and wanted:
            tasks = [int(b.partition("_")[2]) for b in wanted
                     if b.partition("_")[0] == jobid and b.partition("_")[2].isdigit()]
        else:
            continue
        word = state.split()[0] if state else ""
        jim_state = STATE_MAP.get(word)
        if jim_state is None:
            continue
        for t in tasks:
            out.append((f"{array_id}_{t}", BatchStatus(
                jim_state, exit_code=_exit_code(exitcode) if jim_state.terminal else None, reason=state,
                native=state, evidence=Evidence.ACCOUNTING, tag=f"{tag[0]}.{tag[1] + t}",
                submitted=_slurm_time(submit))))
    return out


class SlurmAdapter(Adapter):
    """Slurm, through sbatch/squeue/sacct/scancel; one job array per chunk."""

    name = "slurm"
    user_wide_query = True
    options = {
        "partition": "",             # default partition (a queue chosen by requirements wins)
        "account": "",
        "sbatch_options": [],        # extra sbatch arguments, as an argument list
        "python": "python3",         # interpreter for the wrapper on the worker nodes
        "cache_interval": 30.0,      # seconds one squeue answer is shared
        "requeue": False,            # let Slurm requeue a job after a node failure (may run it twice)
        "max_array_size": 0,         # 0: ask the cluster (scontrol show config)
    }

    def __init__(self, home, options=None, **kw):
        super().__init__(home, options, **kw)
        extra = self.opts["sbatch_options"]
        if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
            from jim.errors import ConfigError
            raise ConfigError("[batch] sbatch_options must be a list of strings (arguments, not shell text)")
        self.user = getpass.getuser()
        self._max_array: int | None = int(self.opts["max_array_size"]) or None

    # -- cluster facts ---------------------------------------------------------
    def max_array_size(self) -> int:
        """The cluster's MaxArraySize (cached on disk for a day)."""
        if self._max_array:
            return self._max_array
        cache = self.home.cache / "slurm-config.json"
        try:
            data = json.loads(cache.read_text())
            if time.time() - data["at"] < 86400:
                self._max_array = int(data["MaxArraySize"])
                return self._max_array
        except (OSError, ValueError, KeyError):
            pass
        value = 1001  # Slurm's default
        try:
            proc = self.run(["scontrol", "show", "config"], error=QueryError, transient=_transient)
            m = re.search(r"^MaxArraySize\s*=\s*(\d+)", proc.stdout, re.M)
            if m:
                value = int(m.group(1))
                cache.write_text(json.dumps({"at": time.time(), "MaxArraySize": value}))
        except QueryError:
            pass
        self._max_array = value
        return value

    @property
    def max_chunk(self) -> int:  # type: ignore[override]
        limit = self.max_array_size()
        return min(self.__dict__.get("_chunk_override", limit), limit)

    @max_chunk.setter
    def max_chunk(self, value: int) -> None:
        self.__dict__["_chunk_override"] = value

    # -- submit ------------------------------------------------------------------
    def sbatch_argv(self, chunk: SubmitChunk, offset: int, tasks: list[int], script: str) -> list[str]:
        argv = ["sbatch", "--parsable", f"--array={array_spec(tasks)}", f"--job-name={tag_name(chunk.grid_id, offset)}",
                f"--comment=jim:{chunk.grid_id}:{offset}", "-D", str(chunk.job_dir),
                "-o", str(chunk.job_dir / "batch" / "slurm-%A_%a.out")]
        partition = chunk.queue or self.opts["partition"]
        if partition and partition != "default":
            argv.append(f"--partition={partition}")
        if self.opts["account"]:
            argv.append(f"--account={self.opts['account']}")
        if not self.opts["requeue"]:
            argv.append("--no-requeue")
        wall = chunk.limits.get("wall_seconds")
        if wall:
            argv.append(f"--time={max(1, int(wall) // 60)}")
        argv += list(self.opts["sbatch_options"])
        argv.append(script)
        return argv

    def submit_chunk(self, chunk: SubmitChunk) -> dict[int, str]:
        limit = self.max_array_size()
        indices = sorted(s.index for s in chunk.jobs)
        groups: list[list[int]] = []
        for i in indices:
            if groups and i - groups[-1][0] < limit:
                groups[-1].append(i)
            else:
                groups.append([i])
        ids: dict[int, str] = {}
        for group in groups:
            offset = group[0]
            script = self.write_script(chunk, f"slurm-{offset}.sh", self.render(
                "slurm.sh", grid_id=chunk.grid_id, offset=offset, python=self.opts["python"],
                wrapper=chunk.wrapper, sandbox=chunk.sandbox, outroot=chunk.outroot))
            tasks = [i - offset for i in group]
            argv = self.sbatch_argv(chunk, offset, tasks, str(script))
            try:
                proc = self.run(argv, error=SubmitError, transient=_transient)
            except SubmitError:
                if ids:  # earlier arrays of this chunk are in: say so, let the caller reconcile
                    raise SubmitError("part of the chunk was submitted", transient=True) from None
                raise
            array_id = proc.stdout.strip().split(";")[0]
            if not array_id.isdigit():
                raise SubmitError(f"sbatch printed no job id: {proc.stdout.strip()!r}", argv=argv,
                                  stdout=proc.stdout, stderr=proc.stderr, transient=True)
            for i in group:
                ids[i] = f"{array_id}_{i - offset}"
        return ids

    # -- status ------------------------------------------------------------------
    def squeue_argv(self) -> list[str]:
        return ["squeue", "-h", "-r", "-t", "all", "-u", self.user, "-o", SQUEUE_FORMAT]

    def query(self, batch_ids: list[str]) -> QueryResult:
        try:
            proc = self.run(self.squeue_argv(), error=QueryError, transient=_transient)
        except QueryError as e:
            return QueryResult(ok=False, error=e.message)
        return QueryResult(ok=True, statuses=parse_squeue(proc.stdout))

    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        arrays = sorted({b.partition("_")[0] for b in batch_ids if "_" in b}, key=int)
        found: dict[str, BatchStatus] = {}
        wanted = set(batch_ids)
        for k in range(0, len(arrays), 100):  # sacct gets slow with very long id lists
            argv = ["sacct", "-n", "-X", "-P", "-o", SACCT_FIELDS, "-j", ",".join(arrays[k:k + 100])]
            proc = self.run(argv, error=QueryError, transient=_transient)
            found.update(parse_sacct(proc.stdout, wanted))
        return {b: s for b, s in found.items() if b in wanted and s.state.terminal}

    # -- cancel --------------------------------------------------------------------
    def cancel(self, batch_ids: list[str], grace: float = 5.0) -> None:
        if not batch_ids:
            return
        by_array: dict[str, list[str]] = {}
        for b in batch_ids:
            by_array.setdefault(b.partition("_")[0], []).append(b)
        argv = ["scancel"]
        for array_id, tasks in sorted(by_array.items()):
            # the whole array when every task of it is wanted is one id; else the tasks
            argv += tasks if len(tasks) < self._array_size(array_id, tasks) else [array_id]
        self.run(argv, error=CancelError, transient=_transient)

    def _array_size(self, array_id: str, tasks: list[str]) -> int:
        """How many tasks of ``array_id`` jim knows about (from the cache): cancel the array when all."""
        cached = self._read_cache()
        if cached is None:
            return len(tasks) + 1  # unknown: name the tasks
        return max(len(tasks), sum(1 for b in cached.statuses if b.partition("_")[0] == array_id))

    def free_slots(self) -> int | None:
        """Idle CPUs of the partition (or the cluster): ``sinfo -h -o %C`` prints allocated/idle/other/total."""
        argv = ["sinfo", "-h", "-o", "%C"] + (["-p", self.opts["partition"]] if self.opts["partition"] else [])
        try:
            lines = self.run(argv, error=QueryError, transient=_transient).stdout.split()
            return sum(int(line.split("/")[1]) for line in lines) if lines else None
        except (QueryError, IndexError, ValueError):
            return None

    # -- reconcile -------------------------------------------------------------------
    def find_by_tag(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        wanted = set(tags)
        found: dict[str, str] = {}
        proc = self.run(self.squeue_argv(), error=QueryError, transient=_transient)
        for bid, tag, _state, _reason in squeue_tasks(proc.stdout):
            if tag in wanted:  # in any state, one jim cannot map too: it exists, never submit it again
                found[tag] = bid
        if wanted - set(found):
            argv = ["sacct", "-n", "-X", "-P", "-o", SACCT_FIELDS, "-u", self.user,
                    "-S", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 7 * 86400))]
            try:
                proc = self.run(argv, error=QueryError, transient=_transient)
                for bid, st in parse_sacct_rows(proc.stdout):  # by tag: an id may be someone else's too
                    if st.tag in wanted and st.tag not in found:
                        found[st.tag] = bid
            except QueryError as e:
                if "accounting storage is disabled" not in (e.stderr + e.stdout):
                    raise
        return found
