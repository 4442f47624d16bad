"""jim as a BLAH backend: Condor-G's ``grid_resource = batch jim`` and HTCondor-CE's routes.

blahpd (run by ``condor_gridmanager`` as the job's owner) runs
``<libexec>/jim_<step>.sh``; each is a shim that execs ``jim blah-<step>``
with blahpd's words as its argv (see docs/htcondor.md).

==================  =====================  ==================================================
module              runs as                what it does
==================  =====================  ==================================================
:mod:`.submitargs`  the job's owner        BLAH's submit options as a jim description
:mod:`.hook`        the job's owner        the local submit attributes hook (the CE's JIM_*)
:mod:`.steps`       the job's owner        submit, cancel, hold, resume, ping
:mod:`.status`      the job's owner        every asked job's BLAH state from one process
:mod:`.install`     root (an admin)        ``jim blah-install``: the scripts, blah.config
==================  =====================  ==================================================
"""

from __future__ import annotations

import sys

__all__ = ["main"]

#: The commands the scripts run (``jim blah-<step>``).
STEP_COMMANDS = ("blah-submit", "blah-status", "blah-cancel", "blah-hold", "blah-resume", "blah-ping")


def main(argv: list[str]) -> int:
    """``jim blah-install ...`` or ``jim blah-<step> ...`` (``argv[0]`` is the command)."""
    command, rest = argv[0], argv[1:]
    if command not in (*STEP_COMMANDS, "blah-install"):
        print(
            f"jim: unknown command {command[:80]!r} (BLAH's: blah-install, {', '.join(STEP_COMMANDS)})", file=sys.stderr
        )
        return 2
    if command == "blah-install":
        from jim.blah.install import main as install_main  # (lazy: the installer is an admin's command)

        return install_main(rest)
    if command == "blah-status":
        from jim.blah.status import main as status_main  # (lazy: status loads only poll's light modules)

        return status_main(rest)
    from jim.blah.steps import run  # (lazy: submit and cancel load the planner and the adapters)

    return run(command, rest)
