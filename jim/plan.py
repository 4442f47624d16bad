"""Plan: from a validated job description to N local jobs, their queue and their command lines.

The first stage of a grid job, run synchronously by ``jim submit`` (and by
``jim plan --dry-run``, which records nothing):

1. common checks of the description (:meth:`JobDescription.check_common`);
2. the job type's handler (a ``parameters*`` attribute without ``jimtype``
   makes a parametric job) and the attributes it accepts;
3. the local queue, from the job's requirements and the site's
   ``[resources]`` (:mod:`jim.requirements`), or the job's GRAM ``queue``;
4. the handler's ``getNumSubmissionTimes`` (N and the slices), checked
   against the site's limits, and ``getCommandAndArguments`` for every slice;
5. the grid job's files: every ``inputfiles`` value a regular file the caller
   can read, outside /proc and /sys, all within the site's ``max_input_bytes``;
   ``outputs`` patterns relative and bounded; the declared outputs
   (``keepfiles``) and their merge rule (:func:`jim.keep.check`) (refused
   with error 134 naming the file).

The plan and the commands are kept in ``jobs/<id>/plan.json`` (:func:`save`,
:func:`load`) for the worker, which builds the sandbox from them.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from jim import keep
from jim.adapters.options import check_queue_name
from jim.config import Config
from jim.errors import GramError, InvalidAttribute, JimError, PlanError
from jim.handlers import get_handler_class
from jim.handlers.base import Handler, Plan, input_path
from jim.jobdesc import JobDescription, Shape, shown, stated_shape
from jim.paths import Home
from jim.safeio import NotRegular, atomic_write, kind, open_regular
from jim.sandbox.builder import input_arcname, open_input

PLAN_FILE = "plan.json"
_PARAMETER_ATTRS = ("parameters", "parameterstart", "parameterstep", "parameterfactor")

Commands = list[list[str]]


def _is_parameter_attr(name: str) -> bool:
    return name.partition(".")[0] in _PARAMETER_ATTRS


def make_plan(
    config: Config,
    desc: JobDescription,
    *,
    job_id: str | None = None,
    dry_run: bool = False,
    credential_left: float | None = None,
) -> tuple[Handler, Plan, Commands]:
    """Validate ``desc``, choose its local queue and plan it: (handler, plan, commands).

    ``credential_left``: the seconds the grid job's credential lasts (less the margin and the submission's
    allowance), a time limit of its local jobs the handler may size them by (:meth:`Handler.time_limit`);
    None: not counted.

    Records nothing; a real submit (``dry_run=False``) only remembers the
    queue choice in the requirements cache under ``$JIM_HOME/cache``.
    """
    cls = _handler_class(desc)
    stated = (desc.get("queue") or "").strip()
    if stated:  # (the GRAM queue, before anything is matched against it: never an option-looking word)
        check_queue_name(stated)
    shape = stated_shape(desc)
    choice = _choose_queue(config, desc, dry_run, shape)
    if choice.name:
        check_queue_name(choice.name)
    if choice.queue is None:
        check_site_shape(config, shape)
    shape = choice.shape or shape
    options = config.handler_options(cls.name or desc.jimtype)
    handler = cls(config.site, options, queue=choice.queue, grid_job_id=job_id, shape=shape)
    handler.credential_left = credential_left
    try:
        plan = handler.getNumSubmissionTimes(desc)
    except ValueError as e:  # splitters raise ValueError on bad parameters
        if isinstance(e, JimError):
            raise
        raise InvalidAttribute(str(e)) from e
    if plan.n < 1:
        raise PlanError("the plan has no local jobs")
    if plan.n > config.site.max_local_jobs:
        raise PlanError(f"the plan has {plan.n} local jobs, over the site's limit of {config.site.max_local_jobs}")
    check_input_files(desc, config.site.max_input_bytes)  # (after the plan: a parametric job's are expanded)
    check_output_patterns(desc)
    check_output_tar_value(desc)
    keep.check(desc, handler.output_merge, plan.n)  # (declared outputs: names, collisions, merge rule)
    _record_queue(plan, choice)
    _record_shape(plan, handler.shape, desc)
    commands = [handler.getCommandAndArguments(desc, plan, s) for s in plan.slices]
    for argv in commands:
        if not argv or not all(isinstance(a, str) for a in argv) or any("\0" in a for a in argv):
            raise InvalidAttribute("a local job's command must be a non-empty list of strings")
    if not dry_run:
        check_gram_paths(desc, commands)  # (GRAM's own numbers for a directory, executable or stdin not found)
    plan.stdin = stdin_path(desc)  # (every local job's standard input, as the wrapper opens it)
    return handler, plan, commands


def _handler_class(desc: JobDescription) -> type[Handler]:
    """The handler of the job's type, after the checks every description must pass."""
    desc.check_common()
    if not desc.has("jimtype") and any(_is_parameter_attr(a) for a in desc.attrs):
        desc.attrs["jimtype"] = ["parametric"]
    cls = get_handler_class(desc.jimtype)
    accepted = cls.accepted_attributes(desc)
    desc.check_known(accepted)
    if "parameters" not in accepted:
        stray = sorted(a for a in desc.attrs if _is_parameter_attr(a))
        if stray:
            raise InvalidAttribute(
                f"attribute {stray[0]} makes a parametric job, but the job type is {desc.jimtype}: "
                "use jimtype=parametric"
            )
    return cls


def check_site_shape(config: Config, shape: Shape) -> None:
    """Where the site describes no queues: the cores within the site's ``max_cores_per_job`` (when
    set) and, on the fork backend, the shape within this host (its cores, or the ``[batch] cores``
    the site gives it, its memory and GPUs); else
    :class:`PlanError` (134) naming what was asked and what there is."""
    most = config.site.max_cores_per_job
    if most and shape.min_cores > most:
        raise PlanError(f"{shape.min_cores} cores per local job asked, over the site's max_cores_per_job of {most}")
    if config.batch.adapter != "fork":
        return
    from jim.adapters.fork import host_capacity  # (the host's cores, memory and GPUs; cheap)

    host = host_capacity()
    cores = int(getattr(config.batch.options, "cores", 0) or 0) or host.cores  # ([batch] cores: the site's)
    if shape.min_cores > cores:
        raise PlanError(f"{shape.min_cores} cores per local job asked; this host has {cores}")
    if shape.gpus > host.gpus:
        raise PlanError(f"{shape.gpus} GPU(s) per local job asked; this host has {host.gpus}")
    if shape.memory_mb and host.memory_mb and shape.memory_mb > host.memory_mb:
        raise PlanError(f"{shape.memory_mb} MB per local job asked; this host has {host.memory_mb} MB")


class _NoQueues:
    """The queue choice when the site describes no queues and the job states no requirements.

    The common case needs no matching, so ``jim submit`` does not even import
    :mod:`jim.requirements` (about 10 ms): the batch system's default queue,
    or the job's GRAM ``queue`` passed through.
    """

    queue = ce = None
    eligible = 0
    described = ""

    def __init__(self, name: str | None, shape: Shape):
        self.name = name
        self.how = "gram-queue" if name else "batch-default"
        self.shape = shape


def _choose_queue(config: Config, desc: JobDescription, dry_run: bool, shape: Shape) -> Any:
    """The job's local queue from its requirements, its shape and the site's ``[resources]``."""
    if not config.resources and not desc.has("requirements"):
        gram_queue = (desc.get("queue") or "").strip()
        return _NoQueues(gram_queue or None, shape)
    # (imported here: a submit without requirements never needs it, see _NoQueues)
    from jim.requirements import QueueCache, choose_queue, requirements_of_description

    home = Home(config.home)
    if not dry_run:
        home.ensure()
    stated = requirements_of_description(desc.attrs.get("requirements"), desc.get("queue"))
    return choose_queue(config.resources, stated, cache=QueueCache(home.cache, write=not dry_run), shape=shape)


def _record_queue(plan: Plan, choice: Any) -> None:
    """Put the queue choice into the plan: plan.queue, every slice's queue, attributes, explanation."""
    plan.queue = plan.queue or choice.name
    for s in plan.slices:
        if s.queue is None:
            s.queue = plan.queue
    facts = {"queueChosenBy": choice.how, "ce": choice.ce, "requirements": choice.described or None}
    if choice.queue is not None:
        facts["eligibleQueues"] = str(choice.eligible)
    for key, value in facts.items():
        if value is not None:
            plan.attrs.setdefault(key, value)
    text = plan.explanation.rstrip()
    text += "" if not text or text.endswith(".") else "."
    if choice.queue is not None:
        why = f"for {choice.described}" if choice.described else "no requirements: the site's preferred"
        plan.explanation = f"{text} Queue {choice.name} on CE {choice.ce} ({why}; {choice.eligible} eligible)."
    elif choice.name:
        plan.explanation = f"{text} Queue {choice.name} (the job's queue attribute)."


def _record_shape(plan: Plan, shape: Shape, desc: JobDescription) -> None:
    """Put each local job's shape into the plan (its attributes and explanation) and offer its cores
    to the local jobs: ``JIM_CORES``, and ``OMP_NUM_THREADS`` unless the job's environment sets it."""
    plan.shape = shape
    for key, value in shape.record().items():
        plan.attrs.setdefault(key, value)
    if shape != Shape() or shape.by:
        why = ", ".join(f"{k} from {v}" for k, v in sorted(shape.by.items()))
        text = plan.explanation.rstrip()
        text += "" if not text or text.endswith(".") else "."
        plan.explanation = f"{text} Each local job: {shape.describe()}" + (f" ({why})." if why else ".")
    threads = not any(name == "OMP_NUM_THREADS" for name, _ in desc.environment())
    for s in plan.slices:
        s.env.setdefault("JIM_CORES", str(shape.cores))
        if threads:
            s.env.setdefault("OMP_NUM_THREADS", str(shape.cores))


def save(job_dir: Path, plan: Plan, commands: Commands, environment: list[tuple[str, str]] | None = None) -> None:
    """Write ``plan.json``: the plan, every local job's command line and the job's environment (kept
    here verbatim, as the commands are: the record's XML cannot hold every character)."""
    data = {**plan.to_json(), "commands": commands, "environment": [list(p) for p in environment or []]}
    atomic_write(job_dir / PLAN_FILE, json.dumps(data).encode())


def load(job_dir: Path) -> tuple[Plan, Commands]:
    """What :func:`save` wrote."""
    data = json.loads((job_dir / PLAN_FILE).read_text())
    return Plan.from_json(data), data["commands"]


def environment(job_dir: Path) -> list[tuple[str, str]] | None:
    """The job's environment :func:`save` wrote; None from a ``plan.json`` written without it."""
    env = json.loads((job_dir / PLAN_FILE).read_text()).get("environment")
    return None if env is None else [(str(k), str(v)) for k, v in env]


def dry_run_json(desc: JobDescription, plan: Plan, commands: Commands) -> dict[str, Any]:
    """What ``jim plan --dry-run --json`` prints."""
    attrs = plan.record_attrs()
    return {
        "dryRun": True,
        "jobtype": desc.jimtype,
        "localJobs": plan.n,
        "binding": plan.binding,
        "queue": plan.queue,
        "shape": plan.shape.to_json(),
        "timeLimit": attrs.get("timeLimit"),
        "timeLimitBy": attrs.get("timeLimitBy"),
        "explanation": plan.explanation,
        "plan": attrs,
        "jobs": [
            {
                "index": k,
                "queue": s.queue,
                "slice": s.attrs,
                "params": s.params,
                "env": s.env,
                "estSeconds": s.attrs.get("estSeconds"),
                "failedOnCreation": s.failed_on_creation,
                "argv": commands[k],
            }
            for k, s in enumerate(plan.slices)
        ],
    }


def render_dry_run(data: dict[str, Any]) -> str:
    """What ``jim plan --dry-run`` prints for a person (from :func:`dry_run_json`)."""
    attrs, jobs = data["plan"], data["jobs"]
    failed = sum(1 for j in jobs if j["failedOnCreation"])
    failed_note = f" ({failed} failed on creation)" if failed else ""
    lines = [
        f"job type {data['jobtype']}: {data['localJobs']} local job(s){failed_note}; binding limit: {data['binding']}"
    ]
    queue = data["queue"] or "(the batch system's default)"
    extra = f" on CE {attrs['ce']}" if attrs.get("ce") else ""
    lines.append(
        f"queue: {queue}{extra}" + (f"; requirements: {attrs['requirements']}" if attrs.get("requirements") else "")
    )
    shape = Shape.from_json(data.get("shape"))
    by = attrs.get("shapeBy")
    lines.append(f"each local job: {shape.describe()}" + (f" ({by})" if by else ""))
    if attrs.get("timeLimit"):
        longest = attrs.get("estSecondsPerJob")
        lines.append(
            f"time limit per local job: {attrs['timeLimit']} s ({attrs['timeLimitBy']})"
            + (f"; longest local job about {longest} s" if longest else "")
        )
    lines.append(data["explanation"])
    lines.append(f"  {'#':>5}  {'queue':<12} {'est. s':>8}  slice")
    for job in jobs[:50]:
        sl = " ".join(f"{a}={v}" for a, v in {**job["slice"], **job["params"]}.items() if a != "estSeconds")
        extra = f"  [failed on creation: {job['failedOnCreation']}]" if job["failedOnCreation"] else ""
        lines.append(f"  {job['index']:>5}  {job['queue'] or '-':<12} {job['estSeconds'] or '-':>8}  {sl}{extra}")
    if len(jobs) > 50:
        lines.append(f"  ... and {len(jobs) - 50} more")
    lines.append("(dry run: nothing recorded or submitted)")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# the grid job's files, checked at submit
# ---------------------------------------------------------------------------

#: The most ``outputs`` patterns, and the longest one.
MAX_OUTPUT_PATTERNS = 1000
MAX_OUTPUT_PATTERN_CHARS = 1024


def check_input_files(desc: JobDescription, max_bytes: int) -> None:
    """At submit: every ``inputfiles`` value a regular file the caller can read, not through a
    symbolic link, not in /proc, /sys or another kernel file system, no two with the same name, all
    of them together within the site's ``max_input_bytes``; else :class:`InvalidAttribute` (134)
    naming the file."""
    names: dict[str, str] = {}
    total = 0
    for value in desc.values("inputfiles"):
        path = input_path(desc, value)
        arc = input_arcname(path)
        if arc in names:
            raise InvalidAttribute(f"input files {names[arc]!r} and {value!r} have the same name")
        names[arc] = value
        fd, st = open_input(path)
        os.close(fd)
        total += st.st_size
        if total > max_bytes:
            raise InvalidAttribute(
                f"input file {value!r}: the input files come to more than the site's limit of {max_bytes} bytes"
            )


def check_gram_paths(desc: JobDescription, commands: list[list[str]]) -> None:
    """At submit, as GRAM's stock job manager does, for the paths this host can see: the grid job's
    ``directory`` an existing directory (4 BAD_DIRECTORY); each local job's executable, when it is a
    path (absolute, or relative to ``directory``), an existing (5 EXECUTABLE_NOT_FOUND) regular file
    the caller may execute (72 EXECUTABLE_PERMISSIONS); ``stdin``, unless a URL or ``/dev/null``, an
    existing regular file the caller may read, not a symbolic link, FIFO or device (11 STDIN_NOT_FOUND).
    A bare command name is looked up where the job runs."""
    directory = input_path(desc, "")
    try:
        st = os.stat(directory)
        usable = stat.S_ISDIR(st.st_mode) and os.access(directory, os.X_OK)
    except (OSError, ValueError):
        usable = False
    if not usable:
        raise InvalidAttribute(
            f"the directory {shown(directory)} does not exist or cannot be entered", gram_error=GramError.BAD_DIRECTORY
        )
    seen: set[str] = set()
    for argv in commands:
        exe = argv[0] if argv else ""
        if exe in seen or not os.path.isabs(exe):
            continue
        seen.add(exe)
        try:
            st = os.stat(exe)
        except (OSError, ValueError):
            raise InvalidAttribute(
                f"the executable {shown(exe)} does not exist", gram_error=GramError.EXECUTABLE_NOT_FOUND
            ) from None
        if not stat.S_ISREG(st.st_mode) or not os.access(exe, os.X_OK):
            raise InvalidAttribute(
                f"the executable {shown(exe)} is not an executable file", gram_error=GramError.EXECUTABLE_PERMISSIONS
            )
    path = stdin_path(desc)
    if path is not None:
        _check_stdin(path, desc.get("stdin") or "")


def stdin_path(desc: JobDescription) -> str | None:
    """The file every local job reads on its standard input: ``stdin`` made absolute as
    :func:`input_path` does; None without one, for ``/dev/null`` (GRAM's default) and for a URL
    (GRAM's job manager stages those to a local file first: one that still arrives is not read)."""
    stdin = desc.get("stdin")
    if not stdin or "://" in stdin:
        return None
    path = input_path(desc, stdin)
    return None if path == os.devnull else path


def _check_stdin(path: str, stdin: str) -> None:
    """``path`` a regular file the caller can open for reading, not through a symbolic link (a FIFO
    or a device is never opened); else 11 STDIN_NOT_FOUND with the reason."""
    fail, code = f"stdin {shown(stdin)}", GramError.STDIN_NOT_FOUND
    try:
        st = os.lstat(path)
    except (OSError, ValueError):
        raise InvalidAttribute(f"{fail} does not exist", gram_error=code) from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidAttribute(f"{fail} is {kind(st.st_mode)}, not a regular file", gram_error=code)
    try:
        fd, _st = open_regular(path, follow=False)
    except NotRegular as e:
        raise InvalidAttribute(f"{fail} is {e.kind}, not a regular file", gram_error=code) from None
    except OSError as e:
        raise InvalidAttribute(f"{fail} cannot be read: {e.strerror}", gram_error=code) from None
    os.close(fd)


def check_output_patterns(desc: JobDescription) -> None:
    """At submit: ``outputs`` patterns relative, without ``..``, NUL or other control characters,
    bounded in number and length; else :class:`InvalidAttribute` (134) naming the pattern."""
    patterns = desc.values("outputs")
    if len(patterns) > MAX_OUTPUT_PATTERNS:
        raise InvalidAttribute(f"{len(patterns)} outputs patterns, more than {MAX_OUTPUT_PATTERNS}")
    for p in patterns:
        shown = repr(p[:100]) + ("..." if len(p) > 100 else "")
        if not p:
            raise InvalidAttribute("an outputs pattern is empty")
        if len(p) > MAX_OUTPUT_PATTERN_CHARS:
            raise InvalidAttribute(f"outputs pattern {shown} is longer than {MAX_OUTPUT_PATTERN_CHARS} characters")
        if not p.isprintable():
            raise InvalidAttribute(f"outputs pattern {shown} holds a NUL or another control character")
        if p.startswith("/"):
            raise InvalidAttribute(
                f"outputs pattern {shown} is an absolute path: patterns name files in the job's directory"
            )
        if ".." in p.split("/"):
            raise InvalidAttribute(f"outputs pattern {shown} holds '..': patterns stay where the job runs")


def check_output_tar_value(desc: JobDescription) -> None:
    """At submit: ``outputtar``, when given, one non-empty path (where it may be is checked when it is
    resolved, :func:`jim.outputs.resolve_user_paths`); else :class:`InvalidAttribute` (134)."""
    if "outputtar" not in desc.attrs:
        return
    values = desc.attrs["outputtar"]
    if len(values) != 1 or not isinstance(values[0], str) or not values[0].strip():
        given = " ".join(v if isinstance(v, str) else f"({' '.join(map(str, v))})" for v in values)
        raise InvalidAttribute(f"outputtar takes one path of a .tar.gz file, got {shown(given)}")
