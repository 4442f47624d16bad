"""jim as a NorduGrid ARC CE backend (``lrms=jim``): ``jim arc-install`` and ``jim arc-backend``.

A-REX 6 hands each job to its batch-system backend through three scripts in
``/usr/share/arc`` and loads an information-provider module from there (see
docs/arc.md):

==================  ============================================================
module              what it does
==================  ============================================================
:mod:`.grami`       the grami file A-REX writes, as a jim job description
:mod:`.backend`     ``jim arc-backend submit|scan|cancel|info``: the steps
:mod:`.install`     ``jim arc-install``: the shims, ``JIMmod.pm``, the arc.conf blocks
==================  ============================================================
"""

from __future__ import annotations

import sys

__all__ = ["main"]

BACKEND_USAGE = """usage: jim arc-backend submit --config CFG GRAMI
       jim arc-backend cancel --config CFG GRAMI
       jim arc-backend scan --config CFG CONTROLDIR [CONTROLDIR ...]
       jim arc-backend info --config CFG [--controldir DIR]
(the ARC CE's lrms=jim steps: see docs/arc.md)
"""


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


def backend_main(args: list[str]) -> int:
    """One backend step; stdout carries only what A-REX reads (submit: the failure reason)."""
    import os  # (lazy: see main)

    if not args or args[0] not in ("submit", "cancel", "scan", "info"):
        print(BACKEND_USAGE, end="", file=sys.stderr)
        return 2
    step = args[0]
    parsed = _split(args[1:])
    if parsed is None or (step in ("submit", "cancel") and len(parsed[2]) != 1) or (step == "scan" and not parsed[2]):
        print(BACKEND_USAGE, end="", file=sys.stderr)
        return 2
    config_path, controldir, rest = parsed
    config_path = config_path or os.environ.get("ARC_CONFIG") or None
    os.umask(0o077)
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # (anything a library prints goes to stderr: stdout is A-REX's failure reason)
    answer = ""
    code = 0
    try:
        answer, code = _step(step, config_path, controldir, rest)
        if code and answer and step in ("submit", "cancel"):
            # A-REX 6.17 keeps only "Job submission to LRMS failed" of stdout; stderr reaches the
            # job's errors file, which the user reads with arccat -l
            print(f"jim: {' '.join(answer.split())[:1000]}", file=sys.stderr, flush=True)
    finally:
        if answer:
            text = answer if step == "info" else " ".join(answer.split())[:1000]
            data = (text + "\n").encode()
            while data:
                data = data[os.write(real_stdout, data) :]
        os.dup2(real_stdout, 1)
        os.close(real_stdout)
    return code


def _step(step: str, config_path: str | None, controldir: str | None, rest: list[str]) -> tuple[str, int]:
    """(what to print on stdout, exit status) of one step; never a traceback on stdout."""
    import json  # (lazy: see main)

    from jim.arc import backend  # (lazy: see main)
    from jim.errors import JimError  # (lazy: see main)

    try:
        opts = backend.Options.load(config_path)
        if step == "submit":
            job_id = backend.submit(opts, rest[0])
            print(f"jim arc-backend: submitted as jim grid job {job_id}", file=sys.stderr)
            return "", 0
        if step == "cancel":
            state = backend.cancel(opts, rest[0])
            print(f"jim arc-backend: cancelled, jim says {state}", file=sys.stderr)
            return "", 0
        if step == "scan":
            return "", backend.scan(opts, rest)
        return json.dumps(backend.info(opts, controldir), sort_keys=True), 0
    except JimError as e:
        return e.message, 1
    except backend.BackendError as e:
        return str(e), 1
    except Exception as e:
        try:
            import logging  # (lazy: only on an unexpected error)

            logging.getLogger("jim.arc").exception("jim arc-backend %s failed", step)
        except Exception:
            pass
        import traceback  # (lazy: only on an unexpected error)

        traceback.print_exc(file=sys.stderr)
        return f"internal error in jim arc-backend {step}: {type(e).__name__}: {e}", 1
