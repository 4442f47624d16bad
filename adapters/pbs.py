"""PBS-style batch systems (``qsub``/``qstat``/``qdel``): Torque, PBS Pro, Slurm's torque wrappers.

The three speak the same commands with different dialects.  Every difference
jim depends on is data, in :data:`FLAVOURS` (one :class:`Flavour` each), not
code.  ``[batch] flavour`` picks one; ``auto`` asks the installed commands
(a site fact, remembered for a day).

* **submit** (``qsub``): with an array option, one array per group of local
  jobs, named ``jim.<grid id>.<offset>`` (task ``t`` is local job
  ``offset + t``).  Without one (Slurm's wrappers: their ``qstat`` shows array
  tasks under raw job ids, all with the same name and no task index, so
  nothing could tell which task is which local job), or for a group smaller
  than the flavour's smallest array, one ``qsub`` per local job, named with
  its own tag, ``submit_parallel`` at a time (~80 ms of perl start-up per job on
  the test cluster).  Times, cores, memory, GPUs, whole node: :mod:`jim.adapters.shapes`.
* **query** (``qstat -f``): all jobs in one command, kept for this user's jobs
  named like jim's tags.  Not ``qstat -f -u USER``: with ``-u`` the wrappers
  (and Torque) switch to a one-line format with the name cut to 20 characters.
  With nothing to show ``qstat`` may exit 153 without a word: an empty answer.
* **finished jobs**: a job that ``qstat`` shows finished (``C``/``F``/``X``)
  is reported DONE or FAILED only when ``qstat`` also gives its exit status
  (Torque's ``exit_status``, PBS Pro's ``Exit_status``).  Slurm's wrappers do
  not: such a job is reported *absent*, so that the wrapper's exit-code file
  decides (else LOST after the grace period): a finished job is never taken
  as done on the batch system's word alone.  A negative exit status is the server's or
  MOM's: per flavour (:data:`TORQUE_EXEC_CODES`, :data:`PBSPRO_EXEC_CODES`) it says whether
  the job had started and why it ended (launch or node failure, memory or wall-time limit).
* **accounting** (``qstat -x -f``): PBS Pro only (it shows finished jobs).
* **cancel** (``qdel``): ids of jobs that already ended are not an error.
* **find by tag** (``qstat -f``): by job name, finished jobs too.

Native states: Torque ``qstat(1)``, PBS Pro ``qstat(1B)``, Slurm's wrappers
(``slurm-wlm-torque``: C R Q S, and U for what they have no letter for).
"""

from __future__ import annotations

import logging
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jim.adapters import capacity
from jim.adapters.base import CommandAdapter
from jim.adapters.model import BatchStatus, Capacity, SubmitChunk
from jim.adapters.options import AdapterOptions
from jim.adapters.shapes import pbs_resource_args
from jim.errors import ConfigError, QueryError, SubmitError
from jim.jobid import parse_tag_name, tag_name
from jim.paths import Home
from jim.ranges import array_spec
from jim.states import EndCause, Evidence, LocalState

log = logging.getLogger("jim.adapters")

#: A finished job: DONE/FAILED from its exit status, else reported absent (see the module docstring).
ENDED = "ended"

#: The states Torque and PBS Pro share -> jim state.
_COMMON: dict[str, LocalState | str] = {
    "Q": LocalState.QUEUED,
    "W": LocalState.QUEUED,  # waiting for the start time it was given (qsub -a): not yet eligible
    "T": LocalState.QUEUED,  # in transit to another queue or server
    "H": LocalState.HELD,
    "R": LocalState.RUNNING,
    "E": LocalState.RUNNING,  # ambiguous: exiting (the script ended, files are staged out); the exit file decides
    "S": LocalState.SUSPENDED,
}
TORQUE_STATES: dict[str, LocalState | str] = {**_COMMON, "C": ENDED}
PBSPRO_STATES: dict[str, LocalState | str] = {
    **_COMMON,
    "B": LocalState.RUNNING,  # an array that has begun: only its own record says B, its tasks are jobs of their own
    "M": LocalState.QUEUED,  # moved to another server: queued there
    "U": LocalState.SUSPENDED,  # cycle harvesting: suspended while its workstation is busy
    "F": ENDED,
    "X": ENDED,  # an array task that has finished
}
SLURM_WRAPPER_STATES: dict[str, LocalState | str] = {
    "Q": LocalState.QUEUED,  # ambiguous: held jobs too, the wrappers have no H
    "R": LocalState.RUNNING,
    "S": LocalState.SUSPENDED,
    "C": ENDED,  # every end, whatever its exit status (which they never show)
    # no U: they print it for Slurm states they have no letter for (DEADLINE, OUT_OF_MEMORY, ...),
    # so such a job is skipped, and the exit-code file decides
}


#: A negative exit status (set by the server or MOM, never by the job): its name in the system's
#: job.h, why the job ended (None: nothing clear), and whether the job had started.
ExecCode = tuple[str, EndCause | None, bool]

#: Torque's JOB_EXEC_* (src/include/pbs_job.h of Torque 4.2 to 6.1; before 4.2, -10 was any
#: limit and -11, -12 did not exist).  A job that exceeded a limit on its own (memory, wall time)
#: is its own fault; one whose MOM restarted under it (-4..-6, INITABT: "job aborted on MOM
#: initialization") lost its node; one MOM could not start (-1..-3, -7, -9, -13) never ran.
TORQUE_EXEC_CODES: dict[int, ExecCode] = {
    -1: ("JOB_EXEC_FAIL1", EndCause.LAUNCH_FAILED, False),  # exec failed, before files, no retry
    -2: ("JOB_EXEC_FAIL2", EndCause.LAUNCH_FAILED, False),  # exec failed, after files, no retry
    -3: ("JOB_EXEC_RETRY", EndCause.LAUNCH_FAILED, False),  # exec failed, retry (ends when requeue is off)
    -4: ("JOB_EXEC_INITABT", EndCause.NODE_FAIL, True),  # aborted on MOM initialization
    -5: ("JOB_EXEC_INITRST", EndCause.NODE_FAIL, True),  # ... with a checkpoint, no migration
    -6: ("JOB_EXEC_INITRMG", EndCause.NODE_FAIL, True),  # ... with a checkpoint, migration allowed
    -7: ("JOB_EXEC_BADRESRT", EndCause.LAUNCH_FAILED, False),  # restart failed
    -8: ("JOB_EXEC_CMDFAIL", None, False),  # exec() of the job's command failed
    -9: ("JOB_EXEC_STDOUTFAIL", EndCause.LAUNCH_FAILED, False),  # could not create/open stdout/stderr
    -10: ("JOB_EXEC_OVERLIMIT_MEM", EndCause.OUT_OF_MEMORY, True),
    -11: ("JOB_EXEC_OVERLIMIT_WT", EndCause.TIMEOUT, True),
    -12: ("JOB_EXEC_OVERLIMIT_CPUT", None, True),  # its CPU time: its own, but no wall time
    -13: ("JOB_EXEC_RETRY_CGROUP", EndCause.LAUNCH_FAILED, False),  # its cgroups could not be made
}
#: PBS Pro / OpenPBS's JOB_EXEC_* (src/include/job.h): -1..-7 as Torque's, then its own numbers.
#: Left without a cause: reruns and requeues (no end), hook decisions (the site's policy, not a
#: failure), a missing Kerberos credential, the job's own CPU and CPU-time overuse.
PBSPRO_EXEC_CODES: dict[int, ExecCode] = {
    **{k: v for k, v in TORQUE_EXEC_CODES.items() if k >= -7},
    -10: ("JOB_EXEC_FAILUID", EndCause.LAUNCH_FAILED, False),  # invalid uid/gid on the node
    -11: ("JOB_EXEC_RERUN", None, True),
    -12: ("JOB_EXEC_CHKP", None, True),
    -13: ("JOB_EXEC_FAIL_PASSWORD", EndCause.LAUNCH_FAILED, False),
    -14: ("JOB_EXEC_RERUN_SIS_FAIL", EndCause.NODE_FAIL, True),  # a sister node failed
    -15: ("JOB_EXEC_QUERST", None, True),
    -16: ("JOB_EXEC_FAILHOOK_RERUN", None, False),
    -17: ("JOB_EXEC_FAILHOOK_DELETE", None, False),
    -18: ("JOB_EXEC_HOOK_RERUN", None, True),
    -19: ("JOB_EXEC_HOOK_DELETE", None, True),
    -20: ("JOB_EXEC_RERUN_MS_FAIL", EndCause.NODE_FAIL, True),  # the mother superior's connection failed
    -21: ("JOB_EXEC_FAIL_SECURITY", EndCause.LAUNCH_FAILED, False),  # PBS directory not secure
    -22: ("JOB_EXEC_HOOKERROR", EndCause.LAUNCH_FAILED, False),  # a hook failed or timed out
    -23: ("JOB_EXEC_FAIL_KRB5", None, False),
    -24: ("JOB_EXEC_KILL_NCPUS_BURST", None, True),
    -25: ("JOB_EXEC_KILL_NCPUS_SUM", None, True),
    -26: ("JOB_EXEC_KILL_VMEM", EndCause.OUT_OF_MEMORY, True),
    -27: ("JOB_EXEC_KILL_MEM", EndCause.OUT_OF_MEMORY, True),
    -28: ("JOB_EXEC_KILL_CPUT", None, True),
    -29: ("JOB_EXEC_KILL_WALLTIME", EndCause.TIMEOUT, True),
    -30: ("JOB_EXEC_JOINJOB", EndCause.LAUNCH_FAILED, False),  # the sister MOMs could not join the job
}


@dataclass(frozen=True)
class Flavour:
    """Everything that differs between the PBS-style systems, as data."""

    name: str
    #: qsub option for job arrays (``-t`` Torque, ``-J`` PBS Pro), None: one qsub per local job
    array_option: str | None
    #: the environment variable that holds an array task's index in the job
    task_env: str | None
    #: one-letter state -> jim state (or ENDED); a letter not here is logged and skipped, never guessed
    states: Mapping[str, LocalState | str] = field(default_factory=dict)
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
    #: arguments of the one status query (all jobs, full format; ``-t``: one record per array task)
    qstat_args: tuple[str, ...] = ("-f", "-t")
    #: arguments that add finished jobs (None: qstat cannot show them)
    history_args: tuple[str, ...] | None = None
    #: the qstat -f attribute with a finished job's exit status (None: qstat never tells it)
    exit_attr: str | None = None
    #: an array task's name is the array's name plus ``-<task>`` (Torque)
    task_name_suffix: bool = False
    #: qsub hands its command line to a shell (Slurm's perl qsub builds one string): quote every argument
    shell_quotes_argv: bool = False
    #: qsub keeps only its last ``-l`` (the wrappers' perl qsub): every resource goes in one comma list
    one_l: bool = False
    #: negative exit statuses: name, why the job ended, whether it had started (see TORQUE_EXEC_CODES)
    exec_codes: Mapping[int, ExecCode] = field(default_factory=dict)


FLAVOURS: dict[str, Flavour] = {
    # completed jobs stay in qstat (keep_completed) with their exit_status: no history needed
    "torque": Flavour(
        "torque",
        array_option="-t",
        task_env="PBS_ARRAYID",
        states=TORQUE_STATES,
        exit_attr="exit_status",
        task_name_suffix=True,
        exec_codes=TORQUE_EXEC_CODES,
    ),
    # finished jobs with their Exit_status under qstat -x (job_history_enable)
    "pbspro": Flavour(
        "pbspro",
        array_option="-J",
        task_env="PBS_ARRAY_INDEX",
        states=PBSPRO_STATES,
        array_min=2,
        array_lists=False,
        array_output="{path}.^array_index^",
        history_args=("-x", "-f", "-t"),
        exit_attr="Exit_status",
        exec_codes=PBSPRO_EXEC_CODES,
    ),
    # Debian's slurm-wlm-torque: qsub -t makes a Slurm array, but qstat lists its tasks under raw job ids
    # with one shared name and no task index: no arrays.  Its qstat has no -t, no exit status, no -x.
    "slurm": Flavour(
        "slurm",
        array_option=None,
        task_env="SLURM_ARRAY_TASK_ID",
        states=SLURM_WRAPPER_STATES,
        job_id_re=r"^(\d+)()$",
        qstat_args=("-f",),
        shell_quotes_argv=True,
        one_l=True,
    ),
}

#: qsub/qstat/qdel failures that a retry may cure (server down, busy, or the Slurm controller behind the wrappers)
TRANSIENT_ERRORS = (
    "Unable to contact slurm controller|Socket timed out|Connection refused|Transport endpoint",
    "Resource temporarily unavailable|try again|Slurm temporarily unable|Zero Bytes were transmitted",
    "cannot connect to server|Server is currently too busy|End of File|communication failure|Problem loading",
)
#: qdel complaints that only say the job is already gone (Slurm's qdel says nothing, and exits 1)
GONE_ERRORS = (
    r"Unknown Job|has finished|already (?:completed|done|finished)|Invalid job id|Job has been deleted",
    "Request invalid for state of job",
)


@dataclass(frozen=True)
class PbsOptions(AdapterOptions):
    flavour: str = "auto"
    """torque, pbspro, slurm, or auto: ask the installed commands (once a day)."""
    queue: str = ""
    """Default queue (a queue chosen by requirements wins)."""
    account: str = ""
    qsub_options: tuple[str, ...] = ()
    """Extra qsub arguments, as an argument list."""
    python: str = "python3"
    """Interpreter for the wrapper on the worker nodes."""
    cache_interval: float = 30.0
    rerunnable: bool = False
    """Let the system rerun a job after a node failure (it may then run twice)."""
    bin_dir: str = ""
    """Where qsub/qstat/qdel are ("": on PATH)."""
    submit_parallel: int = 4
    """qsub calls at once when each local job is a job of its own."""

    def check(self) -> None:
        super().check()
        if self.flavour != "auto" and self.flavour not in FLAVOURS:
            raise ConfigError(
                f"[batch] flavour must be auto or one of {', '.join(sorted(FLAVOURS))}, not {self.flavour!r}"
            )


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
    for line in text.splitlines():
        m = re.match(r"^Job Id:\s*(\S+)", line)
        if m:
            cur = {"Job Id": m.group(1)}
            records.append(cur)
            last = None
        elif cur is None or not line.strip():
            last = None
        elif m := re.match(r"^\s+([A-Za-z_][\w.]*) = (.*)$", line):
            last = m.group(1)
            cur[last] = m.group(2)
        elif line[:1] == "\t" and last is not None:
            cur[last] += line[1:]
    return records


def _pbs_exit(value: str | None) -> int | None:
    """jim's exit code from a PBS exit status (>= 256: killed by signal N-256; < 0: never ran)."""
    try:
        code = int(value.strip()) if value is not None else None
    except ValueError:
        return None
    if code is not None and code >= 256:
        return 128 + (code - 256)
    return code


def _pbs_time(s: str | None) -> float | None:
    """Epoch from ``Sun Nov 22 07:50:08 2026`` (local time, as qstat prints it)."""
    try:
        return time.mktime(time.strptime(" ".join(s.split()), "%a %b %d %H:%M:%S %Y")) if s else None
    except ValueError:
        return None


def jim_records(text: str, flavour: Flavour, user: str | None = None) -> list[tuple[str, str, dict[str, str]]]:
    """(short batch id, jim tag, record) of every job in ``qstat -f`` output that is one of jim's.

    A job is jim's when its name is a tag (``jim.<grid id>.<offset>``; an
    array task adds its index to the offset) and, with ``user``, that user owns
    it.  Array parents (``123[]``) are skipped: their tasks are the jobs.
    """
    out = []
    for rec in parse_full(text):
        owner = rec.get("Job_Owner", "").partition("@")[0] or rec.get("euser", "").partition("(")[0]
        if user is not None and owner and owner != user:
            continue
        bid, name, task = short_id(rec["Job Id"]), rec.get("Job_Name", ""), 0
        sub = _SUBJOB.match(bid)
        if sub:
            task = int(sub.group(2))
            if flavour.task_name_suffix and name.endswith(f"-{task}"):
                name = name[: -len(f"-{task}")]
        elif "[" in bid:
            continue  # an array's parent record
        tag = parse_tag_name(name)
        if tag is not None:
            out.append((bid, tag.tag(task), rec))
    return out


def parse_qstat(
    text: str, flavour: Flavour, user: str | None = None, evidence: Evidence = Evidence.BATCH
) -> dict[str, BatchStatus]:
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
        status = BatchStatus(state, native=code) if isinstance(state, LocalState) else _ended(code, rec, flavour)
        if status is not None:
            host = rec.get("exec_host", "").split("/")[0].split("+")[0] or None
            out[bid] = replace(status, evidence=evidence, host=host, tag=job_tag, submitted=_pbs_time(rec.get("qtime")))
    return out


def _ended(code: str, rec: dict[str, str], flavour: Flavour) -> BatchStatus | None:
    """DONE or FAILED of a finished job, from its exit status; None when qstat does not tell it."""
    attr = flavour.exit_attr
    exit_status = rec.get(attr) if attr else None
    exit_code = _pbs_exit(exit_status)
    native = f"{code} {attr}={exit_status}"
    if exit_code is None:
        return None  # absent: the exit-code file decides
    if exit_code == 0:
        return BatchStatus(LocalState.DONE, exit_code=0, native=native)
    if exit_code < 0:  # set by the server or MOM, not by the job
        name, cause, started = flavour.exec_codes.get(exit_code, ("", None, False))
        said = f"{attr} {exit_status}" + (f": {name}" if name else "")
        reason = said if started else f"never ran ({said})"
        return BatchStatus(LocalState.FAILED, reason=reason, native=native, cause=cause)
    # (>= 256: killed by a signal, e.g. 271 = SIGTERM from qdel, or from a limit MOM enforced: whose, unknown)
    return BatchStatus(LocalState.FAILED, exit_code=exit_code, reason=f"{attr} {exit_status}", native=native)


def parse_qsub(stdout: str, flavour: Flavour, array: bool) -> str | None:
    """The short batch id (``123`` or ``123[]`` for an array) from qsub's output, else None."""
    words = stdout.split()
    m = re.match(flavour.array_id_re if array else flavour.job_id_re, words[-1]) if words else None
    if m is None:
        return None
    return f"{m.group(1)}[]" if array else m.group(1)


def walltime(seconds: float) -> str:
    s = max(60, int(seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


class PbsAdapter(CommandAdapter):
    """Torque, PBS Pro and Slurm's PBS wrappers through qsub/qstat/qdel."""

    name = "pbs"
    Options = PbsOptions
    options: PbsOptions
    user_wide_query = True
    submit_command = "qsub"
    transient_errors = TRANSIENT_ERRORS
    gone_errors = GONE_ERRORS

    def __init__(self, home: Home, options: AdapterOptions | Mapping[str, Any] | None = None):
        super().__init__(home, options)
        self._flavour: Flavour | None = FLAVOURS.get(self.options.flavour)

    # -- flavour -------------------------------------------------------------
    def cmd(self, name: str) -> str:
        return str(Path(self.options.bin_dir) / name) if self.options.bin_dir else name

    @property
    def flavour(self) -> Flavour:
        """The configured flavour; for ``auto``, which PBS answers (a site fact of this qsub: asked once a day)."""
        if self._flavour is None:
            found = self.cache.fact("flavour", self._probe, key=self._qsub_path())
            self._flavour = FLAVOURS.get(found) or FLAVOURS[self._probe()]
        return self._flavour

    def _qsub_path(self) -> str:
        return shutil.which(self.cmd("qsub")) or ""

    def _probe(self) -> str:
        path = self._qsub_path()
        if not path:
            raise ConfigError(f"[batch] adapter pbs: no qsub found ({self.cmd('qsub')})")
        try:
            head = Path(path).read_bytes()
        except OSError:
            head = b""
        if head.startswith(b"#!") and b"perl" in head.split(b"\n", 1)[0] and b"sbatch" in head:
            return "slurm"
        try:
            proc = self.run([self.cmd("qstat"), "--version"], error=QueryError, check=False)
            text = proc.stdout + proc.stderr
        except QueryError:
            text = ""
        if re.search(r"pbs_version", text, re.I):
            return "pbspro"
        if re.search(r"^Version:", text, re.M | re.I):
            return "torque"
        raise ConfigError(f"[batch] adapter pbs: cannot tell which PBS {path} is; set flavour")

    # -- commands ------------------------------------------------------------------
    def failure_line(self, proc: subprocess.CompletedProcess[str]) -> str:
        """The telling line of either stream: the last error message, else the first line.

        (The wrappers' qsub wraps sbatch's ``sbatch: error: ...`` lines in a paragraph of its own.)"""
        text = proc.stdout + "\n" + proc.stderr
        lines = [ln.strip().strip("'").strip() for ln in text.strip().splitlines() if ln.strip()]
        errors = [ln for ln in lines if re.search(r"error", ln, re.I) and not ln.startswith("There was an error")]
        return (errors[-1] if errors else lines[0] if lines else "no output")[:300]

    # -- submit ------------------------------------------------------------------
    @property
    def array_span(self) -> int | None:
        # without arrays the whole chunk is one group: submit_group submits its local jobs one by one
        return self.flavour.array_max if self.flavour.array_option else None

    @property
    def array_gaps(self) -> bool:
        return self.flavour.array_lists or not self.flavour.array_option

    def is_array(self, group: list[int]) -> bool:
        """True when ``group`` goes in as one job array, else as one job per local job."""
        return bool(self.flavour.array_option) and len(group) >= self.flavour.array_min

    def render_script(self, chunk: SubmitChunk, offset: int, *, array: bool) -> str:
        """The job script of an array whose task 0 is local job ``offset``, or of local job ``offset`` alone."""
        return self.render(
            "pbs.sh",
            grid_id=chunk.grid_id,
            offset=offset,
            python=self.options.python,
            flavour=self.flavour.name,
            wrapper=chunk.wrapper,
            sandbox=chunk.sandbox,
            outroot=chunk.outroot,
            attempt=chunk.attempt,
            index_env=self.flavour.task_env if array else "JIM_PBS_TASK",
            task="" if array else "0",
        )

    def script(self, chunk: SubmitChunk, group: list[int]) -> str:
        return self.render_script(chunk, group[0], array=self.is_array(group))

    def submit_argv(self, chunk: SubmitChunk, group: list[int], script: Path) -> list[str]:
        output = str(script.with_suffix(".out"))
        if not self.is_array(group):
            return self.qsub_argv(chunk, tag_name(chunk.grid_id, group[0], chunk.attempt), str(script), output)
        return self.qsub_argv(
            chunk,
            tag_name(chunk.grid_id, group[0], chunk.attempt),
            str(script),
            self.flavour.array_output.format(path=output),
            array=array_spec(i - group[0] for i in group),
        )

    def qsub_argv(self, chunk: SubmitChunk, name: str, script: str, output: str, array: str | None = None) -> list[str]:
        """qsub of ``script`` named ``name``, as the array of task ids ``array`` (e.g. ``0-2``) or one job."""
        argv = [self.cmd("qsub"), "-N", name, "-j", "oe", "-o", output, "-r", "y" if self.options.rerunnable else "n"]
        if array:
            argv += [self.flavour.array_option or "", array]
        queue = self.queue_of(chunk, self.options.queue)
        if queue:
            argv += ["-q", queue]
        account = chunk.limits.project or self.options.account
        if account:
            argv += ["-A", account]
        wall, cpu = chunk.limits.wall_seconds, chunk.limits.cpu_seconds
        job_wide = [*([f"walltime={walltime(wall)}"] if wall else []), *([f"cput={walltime(cpu)}"] if cpu else [])]
        argv += pbs_resource_args(job_wide, chunk.limits, flavour=self.flavour.name, one_list=self.flavour.one_l)
        argv += [*self.options.qsub_options, script]
        return [argv[0], *map(shlex.quote, argv[1:])] if self.flavour.shell_quotes_argv else argv

    def parse_submit(self, stdout: str, group: list[int]) -> str | None:
        """``123[]`` for an array, ``123`` for one job; None when qsub printed not what was asked for
        (something went in: it is then reconciled by tag)."""
        return parse_qsub(stdout, self.flavour, array=self.is_array(group))

    def group_ids(self, job_id: str, group: list[int]) -> dict[int, str]:
        if self.is_array(group):
            return {i: f"{job_id[:-2]}[{i - group[0]}]" for i in group}
        return {group[0]: job_id}

    def submit_group(self, chunk: SubmitChunk, group: list[int]) -> dict[int, str]:
        if self.is_array(group):
            return super().submit_group(chunk, group)
        return self._submit_singles(chunk, group)

    def _submit_one(self, chunk: SubmitChunk, index: int) -> dict[int, str]:
        return super().submit_group(chunk, [index])

    def _submit_singles(self, chunk: SubmitChunk, indices: list[int]) -> dict[int, str]:
        """One qsub per local job, ``submit_parallel`` at a time; all or a transient partial failure."""
        ids: dict[int, str] = {}
        errors: list[SubmitError] = []
        with ThreadPoolExecutor(max_workers=min(max(1, self.options.submit_parallel), len(indices))) as pool:
            for future in [pool.submit(self._submit_one, chunk, i) for i in indices]:
                try:
                    ids.update(future.result())
                except SubmitError as e:
                    errors.append(e)
        if errors and ids:
            raise SubmitError(
                f"{len(ids)} of {len(indices)} local jobs submitted; {len(errors)} failed: {errors[0].message}",
                transient=True,
            )
        if errors:
            raise errors[0]
        return ids

    # -- status ------------------------------------------------------------------
    def status_argv(self) -> list[str]:
        return [self.cmd("qstat"), *self.flavour.qstat_args]

    def status_accept(self, proc: subprocess.CompletedProcess[str]) -> bool:
        """qstat with nothing to show exits 0 or 153 (the wrappers with no job at all) without a word;
        a failure prints something."""
        return proc.returncode == 153 and not (proc.stdout.strip() or proc.stderr.strip())

    def parse_status(self, stdout: str) -> dict[str, BatchStatus]:
        return parse_qstat(stdout, self.flavour, self.user)

    def parse_tags(self, stdout: str) -> Iterable[tuple[str, str]]:
        return ((bid, tag) for bid, tag, _rec in jim_records(stdout, self.flavour, self.user))

    def accounting_units(self, batch_ids: list[str]) -> Sequence[str]:
        return batch_ids if self.flavour.history_args else ()

    def accounting_argv(self, units: Sequence[str]) -> list[str]:
        return [self.cmd("qstat"), *(self.flavour.history_args or ()), *units]

    def accounting_accept(self, proc: subprocess.CompletedProcess[str]) -> bool:
        return True  # qstat -x exits non-zero when some ids are unknown, and still lists the others

    def parse_accounting(self, stdout: str, wanted: set[str]) -> dict[str, BatchStatus]:
        return parse_qstat(stdout, self.flavour, self.user, evidence=Evidence.ACCOUNTING)

    # -- cancel --------------------------------------------------------------------
    def cancel_units(self, batch_ids: list[str]) -> Sequence[str]:
        return batch_ids

    def cancel_argv(self, units: Sequence[str]) -> list[str]:
        return [self.cmd("qdel"), *units]

    def batch_id_from_started(self, info: dict[str, Any]) -> str | None:
        bid = super().batch_id_from_started(info)
        if bid is None or ("_" in bid and not self.flavour.array_option):
            return None  # none, or a Slurm array task id: not something qsub made
        return short_id(bid)

    def ask_capacity(self) -> Capacity | None:
        """Every node of ``pbsnodes -a`` (Torque's, PBS Pro's and Slurm's wrapper's forms)."""
        return capacity.ask(self, [self.cmd("pbsnodes"), "-a"], capacity.parse_pbsnodes)
