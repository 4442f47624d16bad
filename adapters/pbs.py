"""PBS-style batch systems (``qsub``/``qstat``/``qdel``): Torque, PBS Pro, Slurm's torque wrappers.

The three speak the same commands with different dialects.  Every difference
jim depends on is data, in :data:`FLAVOURS` (one :class:`Flavour` each), not
code: the array option and how array ids look, the task-id variable, the
``qstat`` arguments, which one-letter states exist, whether ``qstat`` tells
the exit status, whether finished jobs can be asked for, and whether ``qsub``
runs its command through a shell.  ``[batch] flavour`` picks one (``auto``
asks the installed commands once and remembers the answer for a day).

* **submit**: with an array option, one ``qsub`` array per chunk, named
  ``jim.<grid id>.<offset>`` (task ``t`` is local job ``offset + t``).
  Without one (Slurm's wrappers: their ``qstat`` shows array tasks under raw
  job ids, all with the same name and no task index, so nothing could tell
  which task is which local job), one ``qsub`` per local job, named with its
  own tag ``jim.<grid id>.<index>``, several at a time (``submit_parallel``):
  about 80 ms of perl start-up per job on the test cluster.
* **query**: ``qstat -f`` (all jobs, one command) parsed into records, kept
  for this user's jobs named like jim's tags; shared through the on-disk
  cache of :meth:`Adapter.query_cached`.  ``qstat -f -u USER`` is not used: the
  wrappers (and Torque) switch to a one-line format with the name cut to 20
  characters when ``-u`` is given.
* **finished jobs**: a job that ``qstat`` shows finished (``C``/``F``/``X``)
  is reported DONE or FAILED only when ``qstat`` also gives its exit status
  (Torque's ``exit_status``, PBS Pro's ``Exit_status``).  Slurm's wrappers do
  not: such a job is reported *absent*, so that the wrapper's exit-code file
  decides (else LOST after the grace period): a finished job is never taken
  as done on the batch system's word alone.
* **accounting**: PBS Pro only (``qstat -x -f`` shows finished jobs).
* **cancel**: ``qdel`` (ids of jobs that already ended are not an error).
* **find by tag**: ``qstat -f`` by job name; for jobs gone from ``qstat``,
  the wrapper's ``started`` file in jim's local job directory (it records the
  batch id the job ran under).

Native states: Torque ``qstat(1)`` (C E H Q R T W S), PBS Pro ``qstat(1B)``
(B E F H M Q R S T U W X), Slurm's wrappers (C R Q S U).
"""

from __future__ import annotations

import getpass
import json
import logging
import re
import shlex
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from jim.adapters.base import Adapter, BatchStatus, QueryResult, SubmitChunk, parse_tag_name, tag_name
from jim.ranges import array_spec
from jim.errors import CancelError, ConfigError, QueryError, SubmitError
from jim.states import Evidence, LocalState

log = logging.getLogger("jim.adapters")


_Q, _H, _R, _S = LocalState.QUEUED, LocalState.HELD, LocalState.RUNNING, LocalState.SUSPENDED
#: a finished job: DONE/FAILED from its exit status, else reported absent (see the module docstring)
ENDED = "ended"


@dataclass(frozen=True)
class Flavour:
    """Everything that differs between the PBS-style systems, as data."""

    name: str
    #: qsub option for job arrays (``-t`` Torque, ``-J`` PBS Pro), None: one qsub per local job
    array_option: str | None
    #: the environment variable that holds an array task's index in the job
    task_env: str | None
    #: the smallest array qsub accepts (PBS Pro refuses a one-element range)
    array_min: int = 1
    #: the array option takes lists (``0-3,7``: Torque); else only one range (``0-3``: PBS Pro)
    array_lists: bool = True
    #: largest array (PBS Pro's max_array_size defaults to 10000; Torque's max_job_array_size is site-set)
    array_max: int = 10000
    #: what qsub prints for an array, e.g. ``123[].server``: group 1 is the sequence number
    array_id_re: str = r"^(\d+)\[\](?:\.(\S+))?$"
    #: what qsub prints for one job, e.g. ``123.server`` or ``123``
    job_id_re: str = r"^(\d+)(?:\.(\S+))?$"
    #: the output file of an array job; ``{path}`` is jim's path for it (Torque appends ``-<task>`` itself)
    array_output: str = "{path}"
    #: arguments of the one status query (all jobs, full format)
    qstat_args: tuple[str, ...] = ("-f",)
    #: arguments that add finished jobs (None: qstat cannot show them)
    history_args: tuple[str, ...] | None = None
    #: one-letter state -> jim state (or ENDED); a letter not here is logged and skipped, never guessed
    states: dict[str, object] = field(default_factory=dict)
    #: the qstat -f attribute with a finished job's exit status (None: qstat never tells it)
    exit_attr: str | None = None
    #: an array task's name is the array's name plus ``-<task>`` (Torque)
    task_name_suffix: bool = False
    #: qsub hands its command line to a shell (Slurm's perl qsub builds one string): quote every argument
    shell_quotes_argv: bool = False
    #: the variable holding the job's own id inside the job
    job_id_env: str = "PBS_JOBID"


_COMMON = {"Q": _Q, "W": _Q, "T": _Q, "H": _H, "R": _R, "E": _R, "S": _S}

FLAVOURS: dict[str, Flavour] = {
    "torque": Flavour(
        name="torque", array_option="-t", task_env="PBS_ARRAYID", array_min=1, array_max=10000,
        array_output="{path}",                      # Torque writes <path>-<task> for array tasks
        qstat_args=("-f", "-t"),                    # -t: one record per array task
        history_args=None,                          # completed jobs stay (keep_completed) with exit_status
        states={**_COMMON, "C": ENDED},
        exit_attr="exit_status", task_name_suffix=True),
    "pbspro": Flavour(
        name="pbspro", array_option="-J", task_env="PBS_ARRAY_INDEX", array_min=2, array_max=10000,
        array_lists=False,
        array_output="{path}.^array_index^",
        qstat_args=("-f", "-t"),
        history_args=("-x", "-f", "-t"),            # finished jobs with Exit_status (job_history_enable)
        states={**_COMMON, "B": _R, "M": _Q, "U": _S, "F": ENDED, "X": ENDED},
        exit_attr="Exit_status"),
    "slurm": Flavour(
        # Debian's slurm-wlm-torque: qsub -t makes a Slurm array, but qstat lists its tasks under raw
        # job ids with one shared name and no task index: no arrays.  qstat has no exit status, no -x;
        # held jobs show Q; U is a Slurm state it has no letter for (DEADLINE, OUT_OF_MEMORY).
        name="slurm", array_option=None, task_env="SLURM_ARRAY_TASK_ID",
        job_id_re=r"^(\d+)()$",
        qstat_args=("-f",), history_args=None,
        states={"Q": _Q, "R": _R, "S": _S, "C": ENDED},
        exit_attr=None, shell_quotes_argv=True, job_id_env="SLURM_JOB_ID"),
}

#: qsub/qstat/qdel failures that a retry may cure (server down, busy, or the Slurm controller behind the wrappers)
_TRANSIENT = re.compile(r"Unable to contact slurm controller|Socket timed out|Connection refused|"
                        r"Transport endpoint|Resource temporarily unavailable|try again|"
                        r"Slurm temporarily unable|Zero Bytes were transmitted|"
                        r"cannot connect to server|Server is currently too busy|End of File|"
                        r"communication failure|Problem loading", re.I)
#: qdel complaints that only say the job is already gone
_GONE = re.compile(r"Unknown Job|has finished|already (?:completed|done|finished)|Invalid job id|"
                   r"Job has been deleted|Request invalid for state of job", re.I)


def _transient(text: str) -> bool:
    return bool(_TRANSIENT.search(text))


def _why(text: str) -> str:
    """The telling line of a failed command's output: the last error message, else the first line.

    (The wrappers' qsub wraps sbatch's ``sbatch: error: ...`` lines in a paragraph of its own.)"""
    lines = [ln.strip().strip("'").strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"error", ln, re.I) and not ln.startswith("There was an error")]
    return (errors[-1] if errors else lines[0] if lines else "no output")[:300]




def short_id(job_id: str) -> str:
    """``123[4]`` from ``123[4].server``, ``123`` from ``123.server``: jim's batch ids carry no server."""
    return job_id.strip().split(".", 1)[0]


_SUBJOB = re.compile(r"^(\d+)\[(\d+)\]$")


def parse_full(text: str) -> list[dict[str, str]]:
    """Records of ``qstat -f``: ``{"Job Id": ..., attribute: value, ...}``.

    Attributes are ``name = value`` lines indented by a tab (Slurm's wrappers)
    or spaces (Torque, PBS Pro); Torque and PBS Pro wrap long values onto
    continuation lines that start with a tab and are joined back verbatim.
    """
    records: list[dict[str, str]] = []
    cur: dict[str, str] | None = None
    last: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip("\n")
        m = re.match(r"^Job Id:\s*(\S+)", line)
        if m:
            cur = {"Job Id": m.group(1)}
            records.append(cur)
            last = None
            continue
        if cur is None or not line.strip():
            last = None if not line.strip() else last
            continue
        m = re.match(r"^\s+([A-Za-z_][\w.]*) = (.*)$", line)
        if m:
            last = m.group(1)
            cur[last] = m.group(2)
        elif line[:1] == "\t" and last is not None:
            cur[last] += line[1:]
    return records


def _pbs_exit(value: str | None) -> int | None:
    """jim's exit code from a PBS exit status (>= 256: killed by signal N-256; < 0: never ran)."""
    if value is None:
        return None
    try:
        code = int(value.strip())
    except ValueError:
        return None
    if code >= 256:
        return 128 + (code - 256)
    return code


def jim_records(text: str, flavour: Flavour, user: str | None = None) -> list[tuple[str, str, dict[str, str]]]:
    """(short batch id, jim tag, record) of every job in ``qstat -f`` output that is one of jim's.

    A job is jim's when its name is a tag (``jim.<grid id>.<offset>``; an
    array task adds its index to the offset) and, with ``user``, that user owns
    it.  Array parents (``123[]``) are skipped: their tasks are the jobs.
    """
    out = []
    for rec in parse_full(text):
        if user is not None:
            owner = rec.get("Job_Owner", "").partition("@")[0] or rec.get("euser", "").partition("(")[0]
            if owner and owner != user:
                continue
        bid = short_id(rec["Job Id"])
        name = rec.get("Job_Name", "")
        task = 0
        sub = _SUBJOB.match(bid)
        if sub:
            task = int(sub.group(2))
            if flavour.task_name_suffix and name.endswith(f"-{task}"):
                name = name[: -len(f"-{task}")]
        elif "[" in bid:
            continue  # an array's parent record
        tag = parse_tag_name(name)
        if tag is None:
            continue
        out.append((bid, f"{tag[0]}.{tag[1] + task}", rec))
    return out


def parse_qstat(text: str, flavour: Flavour, user: str | None = None,
                evidence: Evidence = Evidence.BATCH) -> dict[str, BatchStatus]:
    """Statuses of jim's jobs (by short batch id) from ``qstat -f`` output.

    A finished job (``C``, ``F``, ``X``) without an exit status is left out:
    it is *absent*, and the wrapper's exit-code file decides.
    """
    out: dict[str, BatchStatus] = {}
    for bid, job_tag, rec in jim_records(text, flavour, user):
        code = rec.get("job_state", "").strip()
        state = flavour.states.get(code)
        if state is None:
            log.warning("unknown %s job state %r for %s: ignored", flavour.name, code, bid)
            continue
        submitted = _pbs_time(rec.get("qtime"))
        host = rec.get("exec_host", "").split("/")[0].split("+")[0] or None
        if state == ENDED:
            exit_status = rec.get(flavour.exit_attr) if flavour.exit_attr else None
            code_i = _pbs_exit(exit_status)
            if code_i is None:
                continue  # ended, exit status unknown: absent (the exit-code file decides)
            ended = LocalState.DONE if code_i == 0 else LocalState.FAILED
            reason = None if code_i == 0 else (
                f"{flavour.exit_attr} {exit_status}" if code_i >= 0 else f"never ran ({flavour.exit_attr} {exit_status})")
            out[bid] = BatchStatus(ended, exit_code=code_i if code_i >= 0 else None, reason=reason,
                                   native=f"{code} {flavour.exit_attr}={exit_status}", evidence=evidence,
                                   host=host, tag=job_tag, submitted=submitted)
        else:
            assert isinstance(state, LocalState)
            out[bid] = BatchStatus(state, native=code, evidence=evidence, host=host, tag=job_tag,
                                   submitted=submitted)
    return out


def _pbs_time(s: str | None) -> float | None:
    """Epoch from ``Sun Nov 22 07:50:08 2026`` (local time, as qstat prints it)."""
    if not s:
        return None
    try:
        return time.mktime(time.strptime(" ".join(s.split()), "%a %b %d %H:%M:%S %Y"))
    except ValueError:
        return None


def parse_qsub(stdout: str, flavour: Flavour, array: bool) -> str | None:
    """The short batch id (``123`` or ``123[]`` for an array) from qsub's output, else None."""
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        return None
    word = lines[-1].split()[-1]
    m = re.match(flavour.array_id_re if array else flavour.job_id_re, word)
    if not m:
        return None
    return f"{m.group(1)}[]" if array else m.group(1)


def walltime(seconds: float) -> str:
    s = max(60, int(seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


class PbsAdapter(Adapter):
    """Torque, PBS Pro and Slurm's PBS wrappers through qsub/qstat/qdel."""

    name = "pbs"
    user_wide_query = True
    options = {
        "flavour": "auto",           # torque | pbspro | slurm | auto (ask the commands, once a day)
        "queue": "",                 # default queue (a queue chosen by requirements wins)
        "account": "",
        "qsub_options": [],          # extra qsub arguments, as an argument list
        "python": "python3",         # interpreter for the wrapper on the worker nodes
        "cache_interval": 30.0,      # seconds one qstat answer is shared
        "rerunnable": False,         # let the system rerun a job after a node failure (may run it twice)
        "bin_dir": "",               # where qsub/qstat/qdel are ("": on PATH)
        "submit_parallel": 4,        # qsub calls at once when each local job is its own job
    }

    def __init__(self, home, options=None, **kw):
        super().__init__(home, options, **kw)
        extra = self.opts["qsub_options"]
        if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
            raise ConfigError("[batch] qsub_options must be a list of strings (arguments, not shell text)")
        fl = str(self.opts["flavour"])
        if fl != "auto" and fl not in FLAVOURS:
            raise ConfigError(f"[batch] flavour must be auto or one of {', '.join(sorted(FLAVOURS))}, not {fl!r}")
        self.user = getpass.getuser()
        self._flavour: Flavour | None = FLAVOURS.get(fl)

    # -- flavour -------------------------------------------------------------
    def cmd(self, name: str) -> str:
        d = self.opts["bin_dir"]
        return str(Path(d) / name) if d else name

    @property
    def flavour(self) -> Flavour:
        if self._flavour is None:
            self._flavour = FLAVOURS[self.detect_flavour()]
        return self._flavour

    def detect_flavour(self) -> str:
        """Which PBS answers: Slurm's perl wrappers, PBS Pro or Torque (cached on disk for a day)."""
        cache = self.home.cache / "pbs-flavour.json"
        try:
            data = json.loads(cache.read_text())
            if time.time() - data["at"] < 86400 and data["flavour"] in FLAVOURS and data.get("qsub") == self._qsub_path():
                return data["flavour"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        found = self._probe()
        try:
            cache.write_text(json.dumps({"at": time.time(), "flavour": found, "qsub": self._qsub_path()}))
        except OSError:
            pass
        return found

    def _qsub_path(self) -> str:
        return shutil.which(self.cmd("qsub")) or ""

    def _probe(self) -> str:
        path = self._qsub_path()
        if not path:
            raise ConfigError(f"[batch] adapter pbs: no qsub found ({self.cmd('qsub')})")
        try:
            head = Path(path).read_bytes()[:4096]
        except OSError:
            head = b""
        if head.startswith(b"#!") and b"perl" in head.split(b"\n", 1)[0] and b"sbatch" in Path(path).read_bytes():
            return "slurm"
        try:
            proc = self.run([self.cmd("qstat"), "--version"], check=False, error=QueryError)
        except QueryError:
            proc = None
        text = (proc.stdout + proc.stderr) if proc else ""
        if re.search(r"pbs_version", text, re.I):
            return "pbspro"
        if re.search(r"^Version:", text, re.M | re.I):
            return "torque"
        raise ConfigError(f"[batch] adapter pbs: cannot tell which PBS {path} is; set flavour")

    # -- running commands --------------------------------------------------------
    def _run(self, argv: list[str], error: type):
        """Run a PBS command; failures become ``error``, transient by what they print (on either stream)."""
        proc = self.run(argv, check=False, error=error)
        if proc.returncode != 0:
            text = proc.stdout + "\n" + proc.stderr
            raise error(f"{Path(argv[0]).name} failed (exit {proc.returncode}): {_why(text)}",
                        argv=argv, returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
                        transient=_transient(text))
        return proc

    # -- submit ------------------------------------------------------------------
    def qsub_argv(self, chunk: SubmitChunk, name: str, script: str, output: str,
                  array: str | None = None) -> list[str]:
        fl = self.flavour
        argv = [self.cmd("qsub"), "-N", name, "-j", "oe", "-o", output, "-r", "y" if self.opts["rerunnable"] else "n"]
        if array:
            argv += [fl.array_option or "", array]
        queue = chunk.queue or self.opts["queue"]
        if queue and queue != "default":
            argv += ["-q", queue]
        if self.opts["account"]:
            argv += ["-A", self.opts["account"]]
        wall = chunk.limits.get("wall_seconds")
        if wall:
            argv += ["-l", f"walltime={walltime(wall)}"]
        argv += list(self.opts["qsub_options"])
        argv.append(script)
        if fl.shell_quotes_argv:
            argv = [argv[0]] + [shlex.quote(a) for a in argv[1:]]
        return argv

    def _script(self, chunk: SubmitChunk, offset: int, index_env: str, task: str) -> Path:
        return self.write_script(chunk, f"pbs-{offset}.sh", self.render(
            "pbs.sh", grid_id=chunk.grid_id, offset=offset, python=self.opts["python"], flavour=self.flavour.name,
            wrapper=chunk.wrapper, sandbox=chunk.sandbox, outroot=chunk.outroot, index_env=index_env, task=task))

    def submit_chunk(self, chunk: SubmitChunk) -> dict[int, str]:
        fl = self.flavour
        indices = sorted(s.index for s in chunk.jobs)
        if not fl.array_option:
            return self._submit_singles(chunk, indices)
        groups: list[list[int]] = []
        for i in indices:
            if groups and i - groups[-1][0] < fl.array_max and (fl.array_lists or i == groups[-1][-1] + 1):
                groups[-1].append(i)
            else:
                groups.append([i])
        ids: dict[int, str] = {}
        for group in groups:
            try:
                if len(group) < fl.array_min:
                    ids.update(self._submit_singles(chunk, group))
                    continue
                offset = group[0]
                script = self._script(chunk, offset, fl.task_env or "", "")
                out = fl.array_output.format(path=chunk.job_dir / "batch" / f"pbs-{offset}.out")
                argv = self.qsub_argv(chunk, tag_name(chunk.grid_id, offset), str(script), out,
                                      array=array_spec(i - offset for i in group))
                proc = self._run(argv, SubmitError)
                array_id = parse_qsub(proc.stdout, fl, array=True)
                if array_id is None:
                    raise SubmitError(f"qsub printed no array id: {proc.stdout.strip()!r}", argv=argv,
                                      stdout=proc.stdout, stderr=proc.stderr, transient=True)
                for i in group:
                    ids[i] = f"{array_id[:-2]}[{i - offset}]"
            except SubmitError:
                if ids:  # earlier arrays of this chunk are in: say so, let the caller reconcile
                    raise SubmitError("part of the chunk was submitted", transient=True) from None
                raise
        return ids

    def _submit_one(self, chunk: SubmitChunk, index: int) -> str:
        script = self._script(chunk, index, "JIM_PBS_TASK", "0")
        argv = self.qsub_argv(chunk, tag_name(chunk.grid_id, index), str(script),
                              str(chunk.job_dir / "batch" / f"pbs-{index}.out"))
        proc = self._run(argv, SubmitError)
        bid = parse_qsub(proc.stdout, self.flavour, array=False)
        if bid is None:
            raise SubmitError(f"qsub printed no job id: {proc.stdout.strip()!r}", argv=argv,
                              stdout=proc.stdout, stderr=proc.stderr, transient=True)
        return bid

    def _submit_singles(self, chunk: SubmitChunk, indices: list[int]) -> dict[int, str]:
        """One qsub per local job, ``submit_parallel`` at a time; all or a transient partial failure."""
        ids: dict[int, str] = {}
        errors: list[SubmitError] = []
        workers = max(1, int(self.opts["submit_parallel"]))
        with ThreadPoolExecutor(max_workers=min(workers, len(indices) or 1)) as pool:
            futures = {i: pool.submit(self._submit_one, chunk, i) for i in indices}
            for i, fut in futures.items():
                try:
                    ids[i] = fut.result()
                except SubmitError as e:
                    errors.append(e)
        if errors:
            if ids:
                raise SubmitError(f"{len(ids)} of {len(indices)} local jobs submitted; "
                                  f"{len(errors)} failed: {errors[0].message}", transient=True)
            raise errors[0]
        return ids

    # -- status ------------------------------------------------------------------
    def qstat_argv(self, history: bool = False) -> list[str]:
        fl = self.flavour
        return [self.cmd("qstat"), *(fl.history_args if history and fl.history_args else fl.qstat_args)]

    def _qstat(self) -> str:
        proc = self.run(self.qstat_argv(), check=False, error=QueryError)
        # qstat with nothing to show: Slurm's wrappers and Torque exit 0 with no output; with
        # job ids that are all unknown 153.  A failure prints something (stderr) and exits non-zero.
        if proc.returncode != 0 and (proc.stderr.strip() or proc.stdout.strip() or proc.returncode != 153):
            text = proc.stdout + "\n" + proc.stderr
            raise QueryError(f"qstat failed (exit {proc.returncode}): {_why(text)}",
                             argv=proc.args, returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
                             transient=_transient(text))
        return proc.stdout

    def query(self, batch_ids: list[str]) -> QueryResult:
        try:
            text = self._qstat()
        except QueryError as e:
            return QueryResult(ok=False, error=e.message)
        return QueryResult(ok=True, statuses=parse_qstat(text, self.flavour, self.user))

    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        fl = self.flavour
        if not fl.history_args or not batch_ids:
            return {}
        found: dict[str, BatchStatus] = {}
        for k in range(0, len(batch_ids), 200):
            proc = self.run(self.qstat_argv(history=True) + batch_ids[k:k + 200], check=False, error=QueryError)
            found.update(parse_qstat(proc.stdout, fl, self.user, evidence=Evidence.ACCOUNTING))
        wanted = set(batch_ids)
        return {b: s for b, s in found.items() if b in wanted and s.state.terminal}

    # -- cancel --------------------------------------------------------------------
    def cancel(self, batch_ids: list[str], grace: float = 5.0) -> None:
        if not batch_ids:
            return
        for k in range(0, len(batch_ids), 200):
            argv = [self.cmd("qdel"), *batch_ids[k:k + 200]]
            proc = self.run(argv, check=False, error=CancelError)
            if proc.returncode == 0:
                continue
            # a job that already ended is not an error: Slurm's qdel counts it in its exit status
            # without a word; Torque and PBS Pro print "Unknown Job Id" / "Job has finished"
            text = (proc.stdout + "\n" + proc.stderr).strip()
            bad = [ln for ln in text.splitlines() if ln.strip() and not _GONE.search(ln)]
            if bad:
                raise CancelError(f"qdel failed (exit {proc.returncode}): {bad[0]}", argv=argv,
                                  returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
                                  transient=_transient(text))

    # -- reconcile -------------------------------------------------------------------
    def find_by_tag(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        wanted = set(tags)
        found: dict[str, str] = {}
        for bid, tag, _rec in jim_records(self._qstat(), self.flavour, self.user):
            if tag in wanted:  # in any state, finished ones too
                found[tag] = bid
        return found

    def batch_id_from_started(self, info) -> str | None:
        bid = super().batch_id_from_started(info)
        if bid is None or ("_" in bid and not self.flavour.array_option):
            return None  # none, or a Slurm array task id: not something qsub made
        return short_id(bid)


