"""jim as a NorduGrid ARC CE backend (``lrms=jim``): ``jim arc-install`` and ``jim arc-backend``.

A-REX 6 hands each job to its batch-system backend through three scripts in
``/usr/share/arc`` and loads an information-provider module from there (see
docs/arc.md and docs/frontends.md).  The steps are split by who runs them:

==================  ===========================  ===================================================
module              runs as                      what it does
==================  ===========================  ===================================================
:mod:`.options`     (every step)                 ``[custom:jim]``, an account's jim environment
:mod:`.grami`       the mapped user              the grami file A-REX writes, as a jim description
:mod:`.usersteps`   the mapped user              ``submit`` and ``cancel``, in this process
:mod:`.owners`      root, acting as each owner   the control directory's jobs in the LRMS; one
                                                 ``jim poll --json`` per owner, as that owner
:mod:`.scan`        root                         ``scan``: ``lrms_done`` and ``gm-kick`` of the jobs
                                                 that ended
:mod:`.diag`        root's fork, as the owner    the session-side diag: exit code, accounting
:mod:`.info`        root                         ``info``: the site's figures, the jobs' states
:mod:`.install`     root (an admin)              ``jim arc-install``: the shims, ``JIMmod.pm``,
                                                 the arc.conf blocks
==================  ===========================  ===================================================

This module is the dispatcher, :func:`backend_main`: it checks a step's
arguments (usage: exit 2), sets the umask 077, reads ``[custom:jim]`` and
runs the step with stdout kept for A-REX alone: a step's answer (``info``'s
JSON, a user step's one-line failure reason) is the only thing written there;
anything else a library prints goes to stderr.  A failure is exit 1 with a
one-line reason, never a traceback on stdout.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback

from jim.arc.options import BackendError, Options
from jim.errors import JimError

__all__ = ["main"]

BACKEND_USAGE = """usage: jim arc-backend submit --config CFG GRAMI
       jim arc-backend cancel --config CFG GRAMI
       jim arc-backend scan --config CFG CONTROLDIR [CONTROLDIR ...]
       jim arc-backend info --config CFG [--controldir DIR]
(the ARC CE's lrms=jim steps: see docs/arc.md)
"""
#: The steps A-REX runs as the mapped user, each on one grami file.
USER_STEPS = ("submit", "cancel")
STEPS = (*USER_STEPS, "scan", "info")
#: Characters of a failure reason written for A-REX, at most.
MAX_REASON = 1000


def main(argv: list[str]) -> int:
    """``jim arc-install ...`` or ``jim arc-backend ...`` (``argv[0]`` is the command)."""
    if argv[0] == "arc-install":
        from jim.arc.install import main as install_main  # (lazy: the installer is an admin's command)

        return install_main(argv[1:])
    return backend_main(argv[1:])


def _split(args: list[str]) -> tuple[str | None, str | None, list[str]] | None:
    """(config, controldir, positional) of a step's arguments; None when they do not parse."""
    config = controldir = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--config", "--controldir") and i + 1 < len(args):
            if a == "--config":
                config = args[i + 1]
            else:
                controldir = args[i + 1]
            i += 2
            continue
        if a.startswith("-"):
            return None
        rest.append(a)
        i += 1
    return config, controldir, rest


def _parse(args: list[str]) -> tuple[str, str | None, str | None, list[str]] | None:
    """(step, config, controldir, positional) of ``jim arc-backend``'s arguments; None: a usage error."""
    if not args or args[0] not in STEPS:
        return None
    step = args[0]
    parsed = _split(args[1:])
    if parsed is None:
        return None
    config, controldir, rest = parsed
    if (step in USER_STEPS and len(rest) != 1) or (step == "scan" and not rest):
        return None
    return step, config, controldir, rest


def backend_main(args: list[str]) -> int:
    """One backend step; stdout carries only what A-REX reads (submit: the failure reason)."""
    parsed = _parse(args)
    if parsed is None:
        print(BACKEND_USAGE, end="", file=sys.stderr)
        return 2
    step, config_path, controldir, rest = parsed
    config_path = config_path or os.environ.get("ARC_CONFIG") or None
    os.umask(0o077)
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # (anything a library prints goes to stderr: stdout is A-REX's failure reason)
    answer = ""
    code = 0
    try:
        answer, code = _step(step, config_path, controldir, rest)
        if code and answer and step in USER_STEPS:
            # A-REX 6.17 keeps only "Job submission to LRMS failed" of stdout; stderr reaches the
            # job's errors file, which the user reads with arccat -l
            print(f"jim: {' '.join(answer.split())[:MAX_REASON]}", file=sys.stderr, flush=True)
    finally:
        _answer(real_stdout, step, answer)
    return code


def _answer(real_stdout: int, step: str, answer: str) -> None:
    """Write the step's answer (if any) on the real stdout, then make it stdout again."""
    if answer:
        text = answer if step == "info" else " ".join(answer.split())[:MAX_REASON]
        data = (text + "\n").encode()
        while data:
            data = data[os.write(real_stdout, data) :]
    os.dup2(real_stdout, 1)
    os.close(real_stdout)


def _step(step: str, config_path: str | None, controldir: str | None, rest: list[str]) -> tuple[str, int]:
    """(what to print on stdout, exit status) of one step; never a traceback on stdout."""
    try:
        return _run(step, Options.load(config_path), controldir, rest)
    except JimError as e:
        return e.message, 1
    except BackendError as e:
        return str(e), 1
    except Exception as e:
        try:
            logging.getLogger("jim.arc").exception("jim arc-backend %s failed", step)
        except Exception:
            pass
        traceback.print_exc(file=sys.stderr)
        return f"internal error in jim arc-backend {step}: {type(e).__name__}: {e}", 1


def _run(step: str, opts: Options, controldir: str | None, rest: list[str]) -> tuple[str, int]:
    """Run one step.  Each step imports its own module only: a scan run (as root, every ~10 s) that
    finds nothing ended takes 40 ms of CPU, 83 ms with every step's modules loaded (measured)."""
    if step == "submit":
        from jim.arc.usersteps import submit  # (lazy: each step its own modules, see above)

        job_id = submit(opts, rest[0])
        print(f"jim arc-backend: submitted as jim grid job {job_id}", file=sys.stderr)
        return "", 0
    if step == "cancel":
        from jim.arc.usersteps import cancel  # (lazy: each step its own modules, see above)

        state = cancel(opts, rest[0])
        print(f"jim arc-backend: cancelled, jim says {state}", file=sys.stderr)
        return "", 0
    if step == "scan":
        from jim.arc.scan import scan  # (lazy: each step its own modules, see above)

        return "", scan(opts, rest)
    from jim.arc.info import info  # (lazy: each step its own modules, see above)

    return json.dumps(info(opts, controldir), sort_keys=True), 0
