"""Grid Engine (SGE 6.2 / Son of Grid Engine 8.1): local jobs as array jobs, one ``qstat`` for all.

* **submit**: one ``qsub -terse -t 1-K`` per run of consecutive local jobs of a
  chunk (``-t`` takes one range only).  Task ``t`` (``$SGE_TASK_ID``, from 1)
  of the array job named ``jim.<grid id>.<offset>`` is local job
  ``offset + t - 1``; the job name carries jim's tag, so that a job is known
  by its name, never by its id alone.  ``-C ''`` (no ``#$`` directives are
  read from the script), ``-S /bin/sh``, ``-wd`` the grid job's directory,
  stdout and stderr joined into ``batch/sge-$JOB_ID.$TASK_ID.out``, ``-r n``.
* **query**: ``qstat -u <user> -xml -g d`` (one ``job_list`` element per
  array task), parsed with lxml, once per ``cache_interval`` for everything
  the user has, shared through the on-disk cache of :meth:`Adapter.query_cached`.
  Finished jobs leave qstat at once.
* **accounting**: ``qacct -j <job id>`` (per array job that has tasks gone
  from qstat): ``failed``, ``exit_status``, ``qsub_time`` of every task;
  records whose job name is not jim's tag are ignored.
* **cancel**: one ``qdel <job id> -t <range> ...`` for the tasks concerned
  (tasks already gone are not an error).  Grid Engine kills running tasks
  with SIGKILL and its accounting cannot tell that from any other kill, so
  the tasks jim deleted are noted in ``cache/sge-deleted.log``: their records
  then say CANCELLED, not FAILED.
* **find by tag**: ``qstat`` (and ``qacct -j 'jim.<grid id>.*'`` for array jobs
  that already left it) by job name.

Grid Engine gives two exit codes a meaning of its own: a job that exits 100
is put into an error state (``Eqw``, it stays in the queue until an admin
clears or deletes it) and one that exits 99 is requeued (``Rq``) and run
again, forever.  ``reserved_exit_codes = (99, 100)``: the wrapper exits 1
instead and keeps the true code in its exit-code file, which is what jim
reports to the grid.

The commands are found on ``PATH`` (a site's ``$SGE_ROOT/$SGE_CELL/common/settings.sh``
puts ``$SGE_ROOT/bin/<arch>`` there); ``SGE_ROOT``, ``SGE_CELL`` and, where
used, ``SGE_QMASTER_PORT``/``SGE_EXECD_PORT`` come from the environment.

Native states: sge_status(5), qstat(1); "failed" codes of qacct: sge_status(5).
"""

from __future__ import annotations

import getpass
import logging
import os
import pwd
import re
import time
from dataclasses import replace
from typing import Iterable

from jim.adapters.base import (Adapter, BatchStatus, NAME_PREFIX, QueryResult, SubmitChunk,
                               parse_tag_name, tag_name)
from jim.errors import CancelError, ConfigError, QueryError, SubmitError
from jim.states import Evidence, LocalState

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
    "Rq": LocalState.QUEUED,      # requeued after a run that exited 99 (or a rescheduling): waits again
    "Rqw": LocalState.QUEUED,
    "hqw": LocalState.HELD,       # user, operator or system hold, or waiting for -hold_jid dependencies
    "hRqw": LocalState.HELD,      # held after a requeue (sge_status(5) spells it hRwq)
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
    "hr": LocalState.RUNNING,     # running; a hold set meanwhile only applies to a rerun
    "Rr": LocalState.RUNNING,     # running again after a requeue or migration
    "t": LocalState.RUNNING,      # ambiguous: being transferred to the execution host, our code is about
    "Rt": LocalState.RUNNING,     #   to start (DRMAA says RUNNING); a job whose end execd has not yet
                                  #   reported can also linger in t: RUNNING lets the exit file win
    # suspended (resources kept)
    "s": LocalState.SUSPENDED,    # qmod -sj
    "ts": LocalState.SUSPENDED,
    "S": LocalState.SUSPENDED,    # its queue is suspended (qmod -sq, subordination)
    "tS": LocalState.SUSPENDED,
    "T": LocalState.SUSPENDED,    # a suspend threshold of its queue was exceeded
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
_ERROR_REASON = ("error state ({native}): Grid Engine will not start it until the error is cleared "
                 "(qmod -cj) or it is deleted; qstat -j {job} says why")

#: How long (and up to what size) the note of the tasks jim deleted is kept.
DELETED_LOG_DAYS = 14
DELETED_LOG_MAX = 1 << 20

#: qacct "failed" codes after which the job is back in the queue (not an end).
FAILED_REQUEUED = {25}  # "rescheduling": the run exited 99 (or was rescheduled by an admin)

#: Failures that a retry may cure: sge_qmaster down, slow or restarting.
_TRANSIENT = re.compile(r"commlib error|unable to (send message to|contact) qmaster|Connection refused|"
                        r"got select error|got send error|failed receiving gdi request|"
                        r"no connection|timeout|timed out|try again|temporarily|"
                        r"qmaster is (down|not running|starting)|"
                        r"jobs are allowed (per|for) (user|this user)|only \d+ jobs are allowed", re.I)
#: qdel lines that only say the job or task is already gone.
_GONE = re.compile(r'does not exist|is already in deletion|has already been deleted', re.I)
#: characters Grid Engine refuses in a job name (sge_types(5) object_name), plus its wildcards
_BAD_NAME = re.compile(r"[\s/:'\\\[\]{}|()@%,\"*?]")


def _transient(rc: int, stderr: str) -> bool:
    return bool(_TRANSIENT.search(stderr))




def runs(values: Iterable[int], limit: int | None = None) -> list[list[int]]:
    """Sorted values in runs of consecutive numbers (each at most ``limit`` long)."""
    out: list[list[int]] = []
    for v in sorted(set(values)):
        if out and v == out[-1][-1] + 1 and (limit is None or len(out[-1]) < limit):
            out[-1].append(v)
        else:
            out.append([v])
    return out


def task_ranges(tasks: Iterable[int]) -> list[str]:
    """``["1-3", "7"]`` from task ids: the ranges ``qdel -t`` takes."""
    return [str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs(tasks)]


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


# -- qstat -xml ------------------------------------------------------------------

_PARSER = None


def _parser():
    global _PARSER
    if _PARSER is None:
        from lxml import etree
        # (blank text dropped: a third fewer nodes to build for qstat's indented output)
        _PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True, remove_blank_text=True)
    return _PARSER


def qstat_tasks(xml: str | bytes):
    """``(batch id, tag, native state, fields)`` of every jim array task in ``qstat -xml -g d``,
    whatever its state.

    Raises ``ValueError`` when the text is not qstat's XML (a query that says
    nothing, not one that says "no jobs").
    """
    from lxml import etree

    data = xml.encode() if isinstance(xml, str) else xml
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as e:
        raise ValueError(f"qstat printed no valid XML: {e}") from None
    if root.tag != "job_info":
        raise ValueError(f"qstat printed XML whose root is <{root.tag}>, not <job_info>")
    tags: dict[str | None, tuple[str, int] | None] = {}  # job name -> parsed tag (tasks share a name)
    out = []
    for jl in root.iter("job_list"):
        f = {c.tag: c.text for c in jl}
        name = f.get("JB_name")
        tag = tags[name] if name in tags else tags.setdefault(name, parse_tag_name(name))
        task = f.get("tasks") or ""
        job = f.get("JB_job_number") or ""
        if tag is None or not task.isdigit() or not job.isdigit():
            continue  # not jim's, or a folded task range (we always ask with -g d)
        out.append((f"{job}.{task}", f"{tag[0]}.{tag[1] + int(task) - 1}", (f.get("state") or "").strip(), f))
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
        reason = None
        if state is LocalState.HELD:
            job = bid.partition(".")[0]
            reason = _ERROR_REASON.format(native=native, job=job) if "E" in native else f"held ({native})"
        elif state is LocalState.CANCELLED:
            reason = f"being deleted ({native}: qdel)"
        queue = f.get("queue_name")
        host = queue.partition("@")[2] or None if queue else None
        out[bid] = BatchStatus(state, None, reason, native, Evidence.BATCH, host, tag)
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


def parse_qacct(text: str) -> dict[str, BatchStatus]:
    """Final states of jim's array tasks from ``qacct -j`` output, keyed ``"<job id>.<task>"``.

    A task run more than once (requeued) has a record per run, in the order
    they ended: the last one counts, and a last one that says the task went
    back to the queue (failed 25) is no end at all.
    """
    out: dict[str, BatchStatus] = {}
    for block in _RECORD_SEP.split(text):
        f: dict[str, str] = {}
        for line in block.splitlines():
            key, _, value = line.partition(" ")
            if key:
                f[key] = value.strip()
        tag = parse_tag_name(f.get("jobname"))
        job, task = f.get("jobnumber", ""), f.get("taskid", "")
        if tag is None or not job.isdigit() or not task.isdigit():
            continue  # not jim's (a non-array job has taskid "undefined")
        key = f"{job}.{task}"
        failed = _first_int(f.get("failed"))
        exit_status = _first_int(f.get("exit_status"))
        if failed is None or exit_status is None:
            continue
        if failed in FAILED_REQUEUED:
            out.pop(key, None)
            continue
        why = f.get("failed", "").partition(":")[2].strip()
        if failed == 0 and exit_status == 0:
            state, code, reason = LocalState.DONE, 0, None
        elif failed == 0:
            state, code, reason = LocalState.FAILED, exit_status, f"exit code {exit_status}"
        else:
            state, code = LocalState.FAILED, (exit_status or None)
            reason = f"Grid Engine: failed {failed}" + (f" ({why})" if why else "") + (
                f", exit status {exit_status}" if exit_status else "")
        out[key] = BatchStatus(state, exit_code=code, reason=reason,
                               native=f"failed {failed}, exit_status {exit_status}",
                               evidence=Evidence.ACCOUNTING, host=f.get("hostname") or None,
                               tag=f"{tag[0]}.{tag[1] + int(task) - 1}", submitted=_sge_time(f.get("qsub_time")))
    return out


def _qacct_not_found(proc) -> bool:
    return proc.returncode == 1 and "not found" in (proc.stderr + proc.stdout)


class SgeAdapter(Adapter):
    """Grid Engine, through qsub/qstat/qacct/qdel; one array job per run of local jobs."""

    name = "sge"
    aliases = ("gridengine",)
    user_wide_query = True
    reserved_exit_codes = (99, 100)
    options = {
        "queue": "",                 # default queue (-q); a queue chosen by requirements wins
        "project": "",               # -P
        "qsub_options": [],          # extra qsub arguments, as an argument list
        "python": "python3",         # interpreter for the wrapper on the execution hosts
        "cache_interval": 30.0,      # seconds one qstat answer is shared
        "rerun": False,              # -r y: let Grid Engine rerun a job after a host crash (may run it twice)
    }

    def __init__(self, home, options=None, **kw):
        super().__init__(home, options, **kw)
        extra = self.opts["qsub_options"]
        if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
            raise ConfigError("[batch] qsub_options must be a list of strings (arguments, not shell text)")
        # the owner of the jobs jim submits: the real user id, whatever USER/LOGNAME say
        try:
            self.user = pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            self.user = getpass.getuser()

    # -- submit ------------------------------------------------------------------
    def qsub_argv(self, chunk: SubmitChunk, offset: int, ntasks: int, script: str) -> list[str]:
        name = tag_name(chunk.grid_id, offset)
        if _BAD_NAME.search(name):
            raise SubmitError(f"grid job id {chunk.grid_id!r} cannot be part of a Grid Engine job name")
        out = str(chunk.job_dir / "batch" / "sge-$JOB_ID.$TASK_ID.out")
        if "," in out:
            raise SubmitError(f"Grid Engine cannot write output under a path with a comma: {chunk.job_dir}")
        if ":" in out:
            out = ":" + out  # a path with a colon needs an empty host name in front
        argv = ["qsub", "-terse", "-t", f"1-{ntasks}", "-N", name, "-C", "", "-S", "/bin/sh",
                "-wd", str(chunk.job_dir), "-o", out, "-j", "y", "-r", "y" if self.opts["rerun"] else "n"]
        queue = chunk.queue or self.opts["queue"]
        if queue and queue != "default":
            argv += ["-q", queue]
        if self.opts["project"]:
            argv += ["-P", self.opts["project"]]
        wall = chunk.limits.get("wall_seconds")
        if wall:
            argv += ["-l", f"h_rt={max(1, int(wall))}"]
        argv += list(self.opts["qsub_options"])
        argv.append(script)
        return argv

    def render_script(self, chunk: SubmitChunk, offset: int) -> str:
        return self.render("sge.sh", grid_id=chunk.grid_id, offset=offset, index_offset=offset - 1,
                           python=self.opts["python"], wrapper=chunk.wrapper, sandbox=chunk.sandbox,
                           outroot=chunk.outroot)

    def submit_chunk(self, chunk: SubmitChunk) -> dict[int, str]:
        ids: dict[int, str] = {}
        for group in runs((s.index for s in chunk.jobs), self.max_chunk):
            offset = group[0]
            script = self.write_script(chunk, f"sge-{offset}.sh", self.render_script(chunk, offset))
            argv = self.qsub_argv(chunk, offset, len(group), str(script))
            try:
                proc = self.run(argv, error=SubmitError, transient=_transient)
            except SubmitError:
                if ids:  # earlier array jobs of this chunk are in: say so, let the caller reconcile
                    raise SubmitError("part of the chunk was submitted", transient=True) from None
                raise
            job = parse_terse(proc.stdout)
            if job is None:
                raise SubmitError(f"qsub printed no job id: {proc.stdout.strip()!r}", argv=argv,
                                  stdout=proc.stdout, stderr=proc.stderr, transient=True)
            for i in group:
                ids[i] = f"{job}.{i - offset + 1}"
        return ids

    # -- status ------------------------------------------------------------------
    def qstat_argv(self) -> list[str]:
        return ["qstat", "-u", self.user, "-xml", "-g", "d"]

    def query(self, batch_ids: list[str]) -> QueryResult:
        try:
            proc = self.run(self.qstat_argv(), error=QueryError, transient=_transient)
            return QueryResult(ok=True, statuses=parse_qstat(proc.stdout))
        except QueryError as e:
            return QueryResult(ok=False, error=e.message)
        except ValueError as e:
            return QueryResult(ok=False, error=str(e))

    def _qacct(self, argv: list[str]) -> dict[str, BatchStatus]:
        proc = self.run(argv, error=QueryError, transient=_transient, check=False)
        if proc.returncode != 0:
            if _qacct_not_found(proc):
                return {}
            first = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            raise QueryError(f"qacct failed (exit {proc.returncode}): {first[0] if first else 'no output'}",
                             argv=argv, returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
                             transient=_transient(proc.returncode, proc.stderr))
        return parse_qacct(proc.stdout)

    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        jobs = sorted({p[0] for p in map(split_batch_id, batch_ids) if p}, key=int)
        found: dict[str, BatchStatus] = {}
        for job in jobs:  # qacct takes one job (id, name or pattern) per call
            found.update(self._qacct(["qacct", "-j", job]))
        wanted = set(batch_ids)
        got = {b: s for b, s in found.items() if b in wanted}
        killed = [b for b, s in got.items() if s.state is LocalState.FAILED and s.native.startswith("failed 100,")]
        if killed:
            deleted = self._deleted_by_jim()
            for b in killed:
                since = deleted.get(b)
                if since is not None and (got[b].submitted is None or got[b].submitted <= since):
                    got[b] = replace(got[b], state=LocalState.CANCELLED,
                                     reason=f"deleted by jim (qdel); {got[b].reason}")
        return got

    # Grid Engine's accounting cannot tell a task killed by qdel from one killed by a
    # signal ("failed 100 : assumedly after job", exit status 137).  The tasks jim
    # deletes are noted here (one line per qdel: "<time> <job id> <task range>"),
    # so that their records say CANCELLED, not FAILED.
    @property
    def _deleted_log(self):
        return self.home.cache / "sge-deleted.log"

    def _note_deleted(self, pairs: list[tuple[str, str]]) -> None:
        now = time.time()
        path = self._deleted_log
        try:
            if path.stat().st_size > DELETED_LOG_MAX:
                self._prune_deleted(now)
        except OSError:
            pass
        text = "".join(f"{now:.0f} {job} {r}\n" for job, r in pairs)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def _prune_deleted(self, now: float) -> None:
        path = self._deleted_log
        keep = [ln for ln in path.read_text().splitlines()
                if ln.split(" ", 1)[0].isdigit() and now - int(ln.split(" ", 1)[0]) < DELETED_LOG_DAYS * 86400]
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text("".join(ln + "\n" for ln in keep))
        os.replace(tmp, path)

    def _deleted_by_jim(self) -> dict[str, float]:
        """batch id -> when jim deleted it."""
        out: dict[str, float] = {}
        try:
            text = self._deleted_log.read_text()
        except OSError:
            return out
        for line in text.splitlines():
            parts = line.split()
            if len(parts) != 3 or not parts[0].isdigit():
                continue
            first, _, last = parts[2].partition("-")
            if not first.isdigit() or not (last or first).isdigit():
                continue
            for t in range(int(first), int(last or first) + 1):
                out[f"{parts[1]}.{t}"] = float(parts[0])
        return out

    # -- cancel --------------------------------------------------------------------
    def cancel(self, batch_ids: list[str], grace: float = 5.0) -> None:
        by_job: dict[str, list[int]] = {}
        for b in batch_ids:
            p = split_batch_id(b)
            if p:
                by_job.setdefault(p[0], []).append(p[1])
        if not by_job:
            return
        pairs = [(job, r) for job, tasks in sorted(by_job.items(), key=lambda kv: int(kv[0]))
                 for r in task_ranges(tasks)]
        for k in range(0, len(pairs), 200):  # keep the command line short
            argv = ["qdel"]
            for job, r in pairs[k:k + 200]:
                argv += [job, "-t", r]
            proc = self.run(argv, error=CancelError, transient=_transient, check=False)
            if proc.returncode == 0 or any("for deletion" in ln or "has deleted" in ln
                                           for ln in proc.stdout.splitlines()):
                self._note_deleted(pairs[k:k + 200])
            if proc.returncode == 0:
                continue
            # rc 1 also when some of them had already ended: only other complaints count
            lines = [ln for ln in (proc.stdout + "\n" + proc.stderr).splitlines() if ln.strip()]
            bad = [ln for ln in lines if not _GONE.search(ln) and "for deletion" not in ln
                   and "has deleted" not in ln]
            if bad:
                raise CancelError(f"qdel failed (exit {proc.returncode}): {bad[0]}", argv=argv,
                                  returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
                                  transient=_transient(proc.returncode, proc.stderr + proc.stdout))

    # -- site facts --------------------------------------------------------------------
    def free_slots(self) -> int | None:
        """Slots free now in the queue (or in every cluster queue): AVAIL of ``qstat -g c``."""
        argv = ["qstat", "-g", "c"] + (["-q", self.opts["queue"]] if self.opts["queue"] else [])
        try:
            return parse_cluster_queues(self.run(argv, error=QueryError, transient=_transient).stdout)
        except QueryError:
            return None

    # -- reconcile -------------------------------------------------------------------
    def find_by_tag(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        wanted = set(tags)
        found: dict[str, str] = {}
        # (retried: a failure here stops the worker that asks, so ride out a short qmaster blip)
        proc = self.retrying(self.run, self.qstat_argv(), error=QueryError, transient=_transient)
        try:
            tasks = qstat_tasks(proc.stdout)
        except ValueError as e:
            raise QueryError(str(e), transient=True) from None
        for bid, tag, _native, _f in tasks:
            if tag in wanted:  # in any state, one jim cannot map too: it exists, never submit it again
                found[tag] = bid
        if wanted - set(found) and not _BAD_NAME.search(grid_id):
            # array jobs already gone from qstat: their accounting records, by name
            # (records in the order the jobs ended: a later one of the same tag wins)
            from_qacct = {st.tag: bid for bid, st in self.retrying(
                self._qacct, ["qacct", "-o", self.user, "-j", f"{NAME_PREFIX}{grid_id}.*"]).items()
                if st.tag in wanted}
            for tag, bid in from_qacct.items():
                found.setdefault(tag, bid)
        return found
