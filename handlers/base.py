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
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

from jim.config import SiteLimits
from jim.errors import InvalidAttribute, InvalidCount
from jim.jobdesc import JobDescription


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

    @property
    def n(self) -> int:
        return len(self.slices)

    def record_attrs(self) -> dict[str, Any]:
        out = {"localJobs": self.n, "binding": self.binding}
        if self.queue:
            out["queue"] = self.queue
        out.update({k: v for k, v in self.attrs.items() if v is not None})
        return out


class Handler(abc.ABC):
    """Base class of job-type handlers; see the module docstring for the contract."""

    #: The job type this handler serves (the ``jimtype`` RSL value).
    name: ClassVar[str] = ""
    #: Extra RSL attributes this job type accepts: canonical name -> meaning.
    attributes: ClassVar[dict[str, str]] = {}
    #: Handler options a site may set in ``[handlers.<name>]``, with defaults.
    options: ClassVar[dict[str, Any]] = {}

    def __init__(self, site: SiteLimits, options: dict[str, Any] | None = None):
        self.site = site
        given = dict(options or {})
        unknown = set(given) - set(self.options)
        if unknown:
            from jim.errors import ConfigError
            raise ConfigError(f"[handlers.{self.name}]: unknown option(s) {', '.join(sorted(unknown))}")
        self.opts = {**self.options, **given}

    # -- the three JIM methods ----------------------------------------------
    @abc.abstractmethod
    def getNumSubmissionTimes(self, desc: JobDescription) -> Plan:
        """See :mod:`jim.handlers.base`."""

    @abc.abstractmethod
    def prepareWorkArea(self, desc: JobDescription, plan: Plan, area) -> None:
        """See :mod:`jim.handlers.base`."""

    @abc.abstractmethod
    def getCommandAndArguments(self, desc: JobDescription, plan: Plan, local: LocalSlice) -> list[str]:
        """See :mod:`jim.handlers.base`."""

    # -- helpers for subclasses ------------------------------------------------
    def max_local_jobs(self, desc: JobDescription) -> tuple[int, str]:
        """The cap on N: the site's, or the user's ``maxlocaljobs`` when lower."""
        site_max = self.site.max_local_jobs
        user = desc.get_int("maxlocaljobs", None, minimum=1)
        if user is not None and user < site_max:
            return user, "user-max-local-jobs"
        return site_max, "site-max-local-jobs"

    def executable_argv(self, desc: JobDescription) -> list[str]:
        """``executable`` + ``arguments``, the executable made absolute against ``directory``."""
        exe = desc.executable
        if not exe:
            raise InvalidAttribute("the job description has no executable", gram_error=81)
        if not os.path.isabs(exe) and "/" in exe:
            directory = desc.get("directory") or os.path.expanduser("~")
            exe = os.path.normpath(os.path.join(directory, exe))
        return [exe, *desc.arguments]

    def add_input_files(self, desc: JobDescription, area) -> None:
        """Copy the ``inputfiles`` of the description into the sandbox's inputs/."""
        directory = desc.get("directory") or os.path.expanduser("~")
        for f in desc.values("inputfiles"):
            path = f if os.path.isabs(f) else os.path.join(directory, f)
            area.add_input(path)

    def describe(self) -> str:
        doc = (self.__doc__ or "").strip().splitlines()
        return doc[0] if doc else self.name


def check_count(value: int, cap: int, why: str) -> None:
    if value > cap:
        raise InvalidCount(f"{value} local jobs requested, over the limit of {cap} ({why})")
