"""The job-type handler contract (the JIM job manager's "adapter" for a job type).

A handler turns one grid job description into a plan of N local jobs.  jim
calls three methods, named as in the JIM job managers:

``getNumSubmissionTimes(desc) -> Plan``
    Decide how many local jobs there will be and what slice of the work each
    one gets, from the size of the job (events, files, a count ...), the
    user's hints, and the site's limits (``self.site``).  Record *why* in
    ``Plan.binding`` / ``Plan.explanation``.  Refuse a description that cannot
    be planned by raising :class:`jim.errors.InvalidAttribute` or
    :class:`jim.errors.PlanError`: they reach the gatekeeper as a GRAM error.
    Called at submit time, synchronously, so keep it cheap and pure.

``prepareWorkArea(desc, plan, area)``
    Put what the local jobs need into the sandbox through ``area``
    (:class:`jim.sandbox.builder.WorkArea`): input files, helper scripts.
    Called once per grid job by the detached worker.

``getCommandAndArguments(desc, plan, local) -> list[str]``
    The argv of one local job (``local`` is its :class:`LocalSlice`).  The
    wrapper runs it as is: no shell, so nothing needs quoting.  The slice's
    ``env`` is exported to it as well.

A site admin adds a job type by installing a package with one subclass and one
entry point in the group ``jim.handlers`` (see docs/handlers.md).  The class
attribute ``attributes`` declares the extra RSL attributes the job type
accepts; any other unknown attribute is refused at submit.

What a handler knows when it plans
----------------------------------
``self.site`` (:class:`jim.config.SiteLimits`), ``self.options`` (the handler's
options, a :class:`HandlerOptions` dataclass: its defaults overridden by
``[handlers.<name>]``), ``self.queue``
(the :class:`jim.requirements.Queue` jim chose for the job from its
requirements, with the site's parameters such as ``WallTimeLimit``; ``None``
when the site describes no queues) and ``self.grid_job_id`` (``None`` for a
dry run).  :meth:`Handler.time_limit` and :meth:`Handler.event_budget` turn
the site's and the queue's limits into events per local job, as montecarlo
and reprocessing do.

Queue parameters jim reads (all optional, in seconds)
-----------------------------------------------------
``WallTimeLimit``
    wall-clock seconds a local job may run in the queue;
``MaxCPUTime``
    CPU seconds a local job may use in the queue;
``CPUPower``
    how fast the queue's CPUs are relative to the reference CPU of the user's
    ``cpuperevent`` hint (default 1: one event takes ``cpuperevent /
    CPUPower`` seconds there).

A queue's limits are the batch system's kill limits, so a local job is sized
to ``safety`` (an option, default 0.8) times them.  The site's
``max_cpu_per_job`` is the site's own bound and is used as is.
"""

from __future__ import annotations

import abc
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from jim import settings
from jim.config import SiteLimits
from jim.errors import ConfigError, InvalidAttribute, InvalidCount, PlanError
from jim.jobdesc import JobDescription, Shape

if TYPE_CHECKING:
    from jim.requirements import Queue
    from jim.sandbox.builder import WorkArea


@dataclass
class LocalSlice:
    """The share of the work of one local job."""

    attrs: dict[str, Any] = field(default_factory=dict)
    """Recorded in the database as the slice (e.g. firstEvent, lastEvent, events)."""
    params: dict[str, str] = field(default_factory=dict)
    """Named parameters of the slice (recorded, and offered to the job as JIM_PARAM_<name>)."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of this local job."""
    failed_on_creation: str | None = None
    """Set to a reason to record this slice as FAILED without submitting it."""
    queue: str | None = None

    def record(self) -> dict[str, Any]:
        out = dict(self.attrs)
        out["params"] = dict(self.params)
        out["failed_on_creation"] = self.failed_on_creation
        out["queue"] = self.queue
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "attrs": self.attrs,
            "params": self.params,
            "env": self.env,
            "queue": self.queue,
            "failed_on_creation": self.failed_on_creation,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LocalSlice:
        return cls(
            attrs=data["attrs"],
            params=data["params"],
            env=data["env"],
            queue=data.get("queue"),
            failed_on_creation=data.get("failed_on_creation"),
        )


@dataclass
class Plan:
    """How a grid job is split: the slices, and why that many."""

    slices: list[LocalSlice]
    binding: str
    """Which limit decided N (e.g. ``site-recommended-cpu``, ``count``)."""
    explanation: str
    attrs: dict[str, Any] = field(default_factory=dict)
    """Further facts recorded with the plan (unit, total, perJob, estimates ...)."""
    queue: str | None = None
    stdin: str | None = None
    """The absolute path of the file every local job reads on its standard input (:func:`stdin_path`)."""
    shape: Shape = field(default_factory=Shape)
    """What each local job gets: cores, memory, GPUs, whole node, wall time (:mod:`jim.jobdesc.shape`)."""

    @property
    def n(self) -> int:
        return len(self.slices)

    def record_attrs(self) -> dict[str, Any]:
        out = {"localJobs": self.n, "binding": self.binding}
        if self.queue:
            out["queue"] = self.queue
        out.update({k: v for k, v in self.attrs.items() if v is not None})
        return out

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON data (what ``jobs/<id>/plan.json`` holds, with the commands: see jim.plan)."""
        return {
            "binding": self.binding,
            "explanation": self.explanation,
            "attrs": self.attrs,
            "queue": self.queue,
            "stdin": self.stdin,
            "shape": self.shape.to_json(),
            "slices": [s.to_json() for s in self.slices],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        return cls(
            [LocalSlice.from_json(s) for s in data["slices"]],
            data["binding"],
            data["explanation"],
            attrs=data["attrs"],
            queue=data.get("queue"),
            stdin=data.get("stdin"),
            shape=Shape.from_json(data.get("shape")),
        )


@dataclass(frozen=True)
class HandlerOptions:
    """Options of every job type (none); a job type with options subclasses it (see :class:`Handler`)."""


class Handler(abc.ABC):
    """Base class of job-type handlers; see the module docstring for the contract."""

    #: The job type this handler serves (the ``jimtype`` RSL value).
    name: ClassVar[str] = ""
    #: Extra RSL attributes this job type accepts: canonical name -> meaning.
    attributes: ClassVar[dict[str, str]] = {}
    #: The options a site may set in ``[handlers.<name>]``: a frozen dataclass of typed fields with
    #: defaults (read by :func:`jim.settings.load`).  A job type with options of its own declares
    #: ``Options = MyOptions`` and ``options: MyOptions``.
    Options: ClassVar[type[HandlerOptions]] = HandlerOptions
    options: HandlerOptions
    #: How the local jobs' declared output files (``keepfiles``) become one file each in the grid
    #: job's directory when the job gives no ``outputmerge``: ``concat`` (in local-job order),
    #: ``first`` (the first local job's) or ``indexed`` (one file per local job, ``<stem>.<k><suffix>``);
    #: see :mod:`jim.keep`.
    output_merge: ClassVar[str] = "concat"

    def __init__(
        self,
        site: SiteLimits,
        options: HandlerOptions | Mapping[str, Any] | None = None,
        *,
        queue: Queue | None = None,
        grid_job_id: str | None = None,
        shape: Shape | None = None,
    ):
        self.site = site
        if isinstance(options, HandlerOptions):
            if not isinstance(options, self.Options):
                raise ConfigError(f"[handlers.{self.name}]: options of another job type")
            self.options = options
        else:
            self.options = settings.load(self.Options, options or {}, f"[handlers.{self.name}]")
        #: The local queue chosen for the job (None: the site describes no queues).
        self.queue = queue
        #: The grid job's id (None in ``jim plan --dry-run``).
        self.grid_job_id = grid_job_id
        #: What each local job gets (cores, memory, GPUs, whole node), as the queue holds it; the
        #: plan may give a job more cores when one event is too long for one core (:meth:`event_budget`).
        self.shape = shape if shape is not None else Shape()
        #: The seconds the grid job's credential lasts, less the site's margin (None: unknown, or not
        #: counted): a bound :meth:`time_limit` may size local jobs by (``credential-lifetime``).
        self.credential_left: float | None = None

    @classmethod
    def accepted_attributes(cls, desc: JobDescription) -> set[str]:
        """The extra attributes ``desc`` may carry for this job type (default: ``attributes``).

        Override when the names depend on the description (e.g. ``parameters.<name>``).
        """
        return set(cls.attributes)

    # -- the three JIM methods ----------------------------------------------
    @abc.abstractmethod
    def getNumSubmissionTimes(self, desc: JobDescription) -> Plan:
        """See :mod:`jim.handlers.base`."""

    @abc.abstractmethod
    def prepareWorkArea(self, desc: JobDescription, plan: Plan, area: WorkArea) -> None:
        """See :mod:`jim.handlers.base`."""

    @abc.abstractmethod
    def getCommandAndArguments(self, desc: JobDescription, plan: Plan, local: LocalSlice) -> list[str]:
        """See :mod:`jim.handlers.base`."""

    # -- retries -------------------------------------------------------------------
    def retryable_exit_code(self, code: int) -> bool:
        """True when a local job of this type that ran to its end with ``code`` is worth another
        attempt (say, an exit code the job's program uses for "the input server did not answer").

        Asked by the monitor only for a code the site's ``[retry] exit_codes`` does not name; the
        attempt limit and cool-off still apply.  Default: no code (a job's own failure is final)."""
        return False

    # -- what every job type builds on ------------------------------------------
    def max_local_jobs(self, desc: JobDescription) -> tuple[int, str]:
        """The cap on N: the site's, or the user's ``maxlocaljobs`` when lower."""
        site_max = self.site.max_local_jobs
        user = desc.get_int("maxlocaljobs", None, minimum=1)
        if user is not None and user < site_max:
            return user, "user-max-local-jobs"
        return site_max, "site-max-local-jobs"

    def executable_argv(self, desc: JobDescription) -> list[str]:
        """``executable`` + ``arguments``, the executable made absolute against ``directory``."""
        memo = self.__dict__.get("_argv_memo")
        if memo is not None and memo[0] is desc:
            return list(memo[1])
        argv = self._executable_argv(desc)
        self.__dict__["_argv_memo"] = (desc, argv)
        return list(argv)

    def _executable_argv(self, desc: JobDescription) -> list[str]:
        exe = desc.executable
        if not exe:
            raise InvalidAttribute("the job description has no executable", gram_error=81)
        if not os.path.isabs(exe) and "/" in exe:
            exe = input_path(desc, exe)  # (against ``directory``, itself relative to the submitter's home)
        return [exe, *desc.arguments]

    def add_input_files(self, desc: JobDescription, area: WorkArea) -> None:
        """Copy the ``inputfiles`` of the description into the sandbox's inputs/."""
        for f in desc.values("inputfiles"):
            area.add_input(input_path(desc, f))

    def describe(self) -> str:
        doc = (self.__doc__ or "").strip().splitlines()
        return doc[0] if doc else self.name

    # -- the queue's and the site's limits ----------------------------------------
    def queue_number(self, name: str) -> float | None:
        """A positive numeric parameter of the chosen queue (``inf`` and absent: None)."""
        if self.queue is None:
            return None
        value = self.queue.get(name)
        if value is None:
            return None
        number: float | None = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None
        if number is None or number != number or number <= 0:
            raise ConfigError(f"queue {self.queue.qualified_name}: {name} must be a positive number, got {value!r}")
        return None if math.isinf(number) else number

    def cpu_power(self) -> float:
        """The queue's ``CPUPower`` (1 when the queue does not say)."""
        return self.queue_number("CPUPower") or 1.0

    def speed(self, cores: int | None = None) -> float:
        """How many reference CPU seconds one wall second of a local job does: ``CPUPower`` times its
        cores times the site's ``core_efficiency`` (one core: no loss).  CPU hints divide by this."""
        cores = self.shape.cores if cores is None else cores
        return self.cpu_power() * cores * (self.site.core_efficiency if cores > 1 else 1.0)

    def speed_text(self) -> str:
        """`` / CPUPower 2 / 8 cores x efficiency 0.9``: what :meth:`speed` divides by (empty: 1)."""
        power, cores = self.cpu_power(), self.shape.cores
        text = f" / CPUPower {power:g}" if power != 1 else ""
        if cores > 1:
            eff = self.site.core_efficiency
            text += f" / {cores} cores" + (f" x efficiency {eff:g}" if eff != 1 else "")
        return text

    def most_cores(self) -> int:
        """The most cores the plan may give a local job of its own accord: the stated most of a range,
        else the queue's ``NumberOfProcessors`` / ``CoresPerNode``, else the site's
        ``max_cores_per_job``; a job that states its cores exactly keeps them."""
        if "cores" in self.shape.by:
            return self.shape.cores
        most = self.queue_number("NumberOfProcessors") or self.queue_number("CoresPerNode")
        return int(most) if most else max(self.shape.cores, self.site.max_cores_per_job)

    def time_limit(self, safety: float = 1.0, *, credential: bool = True) -> TimeLimit:
        """The tightest bound on one local job's seconds: the site's maximum CPU, or the
        queue's ``WallTimeLimit`` / ``MaxCPUTime`` times ``safety``, or (``credential``) the
        grid job's credential's remaining lifetime (:attr:`credential_left`: a local job sized to end
        before its credential does, rather than wait for a refresh; never below one minute)."""
        if not 0 < safety <= 1:
            raise ConfigError(f"[handlers.{self.name}].safety must be in (0, 1], got {safety!r}")
        best = TimeLimit(float(self.site.max_cpu_per_job), "site-max-cpu", float(self.site.max_cpu_per_job), 1.0)
        queue = self.queue.name if self.queue is not None else ""
        for param, by in (("WallTimeLimit", "queue-wall-time"), ("MaxCPUTime", "queue-cpu-time")):
            raw = self.queue_number(param)
            if raw is not None and raw * safety < best.seconds:
                best = TimeLimit(raw * safety, by, raw, safety, queue)
        left = self.credential_left
        if credential and left is not None and 60.0 <= left < best.seconds:
            best = TimeLimit(left, "credential-lifetime", left)
        return best

    def event_budget(self, desc: JobDescription, *, safety: float, default_per_job: int) -> EventBudget:
        """Events per local job from the CPU hint, the user's wish and the limits.

        * with ``cpuperevent`` (seconds per event on the reference CPU; one
          event takes ``cpuperevent / speed`` wall seconds on the queue, see
          :meth:`speed`: CPU limits are compared per core):
          ``floor(recommended_cpu_per_job / t)`` (``site-recommended-cpu``),
          never above what fits :meth:`time_limit` (its binding name); a
          single event above the limit takes more cores per local job, up to
          :meth:`most_cores` (``shape.by["cores"]`` says so), and is refused
          beyond;
        * without it: ``default_per_job`` (``default-events-per-job``);
        * ``eventsperjob`` from the user wins (``user-events-per-job``), capped
          by the time limit when the hint allows checking it.
        """
        cpe = desc.get_float("cpuperevent", None, positive=True)
        user = desc.get_int("eventsperjob", None, minimum=1)
        limit = self.time_limit(safety)
        seconds = fits = None
        if cpe is not None and limit.by == "credential-lifetime" and cpe / self.speed() > limit.seconds:
            limit = self.time_limit(safety, credential=False)  # (one event outlasts it: local jobs wait for a refresh)
        if cpe is not None:
            seconds = cpe / self.speed()
            fits = math.floor(round(limit.seconds / seconds, 9))
            if fits < 1:
                self._widen(cpe, limit)
                seconds = cpe / self.speed()
                fits = max(1, math.floor(round(limit.seconds / seconds, 9)))
            per_job = max(1, math.floor(round(self.site.recommended_cpu_per_job / seconds, 9)))
            binding = "site-recommended-cpu"
            if per_job > fits:
                per_job, binding = fits, limit.by
        else:
            per_job, binding = default_per_job, "default-events-per-job"
        if user is not None:
            per_job, binding = user, "user-events-per-job"
            if fits is not None and per_job > fits:
                per_job, binding = fits, limit.by
        return EventBudget(per_job, binding, fits, seconds, cpe, limit, user is not None)

    def _widen(self, cpe: float, limit: TimeLimit) -> None:
        """Give each local job the fewest cores in which one event of ``cpe`` CPU seconds fits
        ``limit``, up to :meth:`most_cores`; :class:`PlanError` when even those are too few."""
        most = self.most_cores()
        for cores in range(self.shape.cores + 1, most + 1):
            if cpe / self.speed(cores) <= limit.seconds * (1 + 1e-9):
                self.shape = self.shape.with_cores(cores, "one event within the time limit")
                return
        seconds = cpe / self.speed(most)
        on = f" on {most} cores" if most > 1 else ""
        raise PlanError(f"one event needs {seconds:g} s{on}, more than {limit.describe()}")


@dataclass(frozen=True)
class TimeLimit:
    """The bound on one local job's duration that jim sizes jobs against."""

    seconds: float
    """Usable seconds (the raw limit times the safety factor)."""
    by: str
    """``site-max-cpu``, ``queue-wall-time`` or ``queue-cpu-time``."""
    raw: float
    safety: float = 1.0
    queue: str = ""

    def describe(self) -> str:
        if self.by == "site-max-cpu":
            return f"the site's maximum of {self.raw:g} s per local job"
        if self.by == "credential-lifetime":
            return f"the grid job's credential's remaining {self.raw:.0f} s (less the margin and a minute to submit)"
        what = "wall-time" if self.by == "queue-wall-time" else "CPU-time"
        return f"queue {self.queue}'s {what} limit of {self.raw:g} s x safety {self.safety:g} = {self.seconds:g} s"

    def record(self) -> dict[str, str]:
        """Plan attributes: ``timeLimit`` (usable seconds) and ``timeLimitBy``."""
        return {"timeLimit": f"{self.seconds:g}", "timeLimitBy": self.by}


@dataclass(frozen=True)
class EventBudget:
    """What :meth:`Handler.event_budget` decided."""

    per_job: int
    binding: str
    fits: int | None
    """Most events that fit the time limit (None without a CPU hint)."""
    seconds_per_event: float | None
    """On the chosen queue (None without a CPU hint)."""
    cpu_per_event: float | None
    limit: TimeLimit
    user_set: bool = False

    def estimate(self, events: float) -> float | None:
        return None if self.seconds_per_event is None else events * self.seconds_per_event


def check_count(value: int, cap: int, why: str) -> None:
    if value > cap:
        raise InvalidCount(f"{value} local jobs requested, over the limit of {cap} ({why})")


def input_path(desc: JobDescription, name: str) -> str:
    """An ``inputfiles`` value as a path: relative ones against the grid job's ``directory``, which
    is itself relative to the submitter's home (GRAM's reading; the home is also the default)."""
    base = os.path.join(os.path.expanduser("~"), desc.get("directory") or "")
    return os.path.normpath(os.path.join(base, name))
