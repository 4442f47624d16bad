"""``generic``: N copies of the executable, N from ``count`` (one job of ``count`` slots for
``jobtype=single`` or ``mpi``: its cores, see :mod:`jim.jobdesc.shape`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jim.handlers.base import Handler, LocalSlice, Plan, check_count
from jim.jobdesc import JobDescription

if TYPE_CHECKING:
    from jim.sandbox.builder import WorkArea


class GenericHandler(Handler):
    """N identical local jobs (N = count); each knows its index from $JIM_INDEX."""

    name = "generic"
    output_merge = "concat"  # (one stream of results, in local-job order)

    def getNumSubmissionTimes(self, desc: JobDescription) -> Plan:
        """See :mod:`jim.handlers.base`: N from ``count`` (1 for ``jobtype=single`` or ``mpi``, whose
        ``count`` is the slots of the one local job)."""
        count = desc.get_int("count", 1, minimum=1)
        binding = "count"
        jobtype = (desc.get("jobtype") or "multiple").strip().lower()
        if jobtype in ("single", "mpi"):
            count, binding = 1, f"jobtype-{jobtype}"
        cap, why = self.max_local_jobs(desc)
        check_count(count, cap, why)
        self.executable_argv(desc)  # fails early without an executable
        slices = [LocalSlice() for _ in range(count)]
        return Plan(slices, binding, f"{count} local job(s) from {binding.replace('-', ' ')}={count}")

    def prepareWorkArea(self, desc: JobDescription, plan: Plan, area: WorkArea) -> None:
        """See :mod:`jim.handlers.base`: the job's ``inputfiles``."""
        self.add_input_files(desc, area)

    def getCommandAndArguments(self, desc: JobDescription, plan: Plan, local: LocalSlice) -> list[str]:
        """See :mod:`jim.handlers.base`: the job's executable and arguments, the same for every local job."""
        return self.executable_argv(desc)
