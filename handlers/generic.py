"""``generic``: N copies of the executable, N from ``count``."""

from __future__ import annotations

from jim.handlers.base import Handler, LocalSlice, Plan, check_count
from jim.jobdesc import JobDescription


class GenericHandler(Handler):
    """N identical local jobs (N = count); each knows its index from $JIM_INDEX."""

    name = "generic"

    def getNumSubmissionTimes(self, desc: JobDescription) -> Plan:
        count = desc.get_int("count", 1, minimum=1)
        binding = "count"
        if (desc.get("jobtype") or "multiple").lower() == "single":
            count, binding = 1, "jobtype-single"
        cap, why = self.max_local_jobs(desc)
        check_count(count, cap, why)
        self.executable_argv(desc)  # fails early without an executable
        slices = [LocalSlice() for _ in range(count)]
        return Plan(slices, binding, f"{count} local job(s) from {binding.replace('-', ' ')}={count}")

    def prepareWorkArea(self, desc, plan, area) -> None:
        self.add_input_files(desc, area)

    def getCommandAndArguments(self, desc, plan, local) -> list[str]:
        return self.executable_argv(desc)
