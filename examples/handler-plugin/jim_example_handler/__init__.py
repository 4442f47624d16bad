"""An example jim job type installed as a plug-in: ``jimtype=seeds``.

One local job per random seed, ``seed_k = firstseed + k * stride``: the farm a
generator needs when it, not jim, decides how many events each job makes::

    &(executable=/opt/gen/run)(jimtype=seeds)(seeds=50)(firstseed=1000)

Each local job finds its seed in ``$JIM_PARAM_seed`` (and, with the option
``seed_argument = "--seed"``, as two more arguments).  Site options, in jim's
TOML configuration::

    [handlers.seeds]
    stride = 7            # distance between two seeds (default 1)
    seed_argument = ""    # e.g. "--seed": append "--seed <seed>" to the arguments
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jim.errors import InvalidAttribute
from jim.handlers.base import Handler, HandlerOptions, LocalSlice, Plan, check_count
from jim.jobdesc import JobDescription

if TYPE_CHECKING:
    from jim.sandbox.builder import WorkArea  # (for the type checker only: jim passes the area in)

__all__ = ["SeedsHandler", "SeedsOptions"]


@dataclass(frozen=True)
class SeedsOptions(HandlerOptions):
    """``[handlers.seeds]`` in jim's configuration."""

    stride: int = 1
    """Distance between two seeds."""
    seed_argument: str = ""
    """e.g. ``--seed``: append ``--seed <seed>`` to the arguments."""


class SeedsHandler(Handler):
    """One local job per random seed (example plug-in)."""

    name = "seeds"
    attributes = {
        "seeds": "number of local jobs, one per seed",
        "firstseed": "the first seed (default 1)",
    }
    Options = SeedsOptions
    options: SeedsOptions

    def getNumSubmissionTimes(self, desc: JobDescription) -> Plan:
        n = desc.get_int("seeds", None, minimum=1)
        if n is None:
            raise InvalidAttribute("seeds jobs need seeds=<number of local jobs>")
        first = desc.get_int("firstseed", 1, minimum=0)
        cap, why = self.max_local_jobs(desc)
        check_count(n, cap, why)  # refuse more local jobs than the user or the site allow
        self.executable_argv(desc)  # no executable: refused now, not later in the worker
        stride = self.options.stride
        seeds = [first + k * stride for k in range(n)]
        slices = [LocalSlice(params={"seed": str(s)}) for s in seeds]  # recorded, and $JIM_PARAM_seed
        return Plan(
            slices,
            "seeds",
            f"{n} local jobs, one per seed: {seeds[0]} to {seeds[-1]} by {stride}",
            attrs={"unit": "seeds", "firstSeed": first, "stride": stride},
        )

    def prepareWorkArea(self, desc: JobDescription, plan: Plan, area: WorkArea) -> None:
        self.add_input_files(desc, area)  # the job's inputfiles, as every built-in type does

    def getCommandAndArguments(self, desc: JobDescription, plan: Plan, local: LocalSlice) -> list[str]:
        argv = self.executable_argv(desc)
        if self.options.seed_argument:
            argv += [self.options.seed_argument, local.params["seed"]]
        return argv
