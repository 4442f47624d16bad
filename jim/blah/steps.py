"""``jim blah-submit``, ``blah-cancel``, ``blah-hold``, ``blah-resume``, ``blah-ping``: BLAH's other steps.

blahpd runs each ``jim_<step>.sh`` as the job's owner; the script execs
``jim blah-<step>`` with blahpd's words as its argv.  jim's configuration and
home are the account's own (``$JIM_CONFIG`` when ``blah.config`` names
``jim_config``, else jim's usual search; the home from it, default
``~/.jim``).

* **submit** reads the options (:mod:`jim.blah.submitargs`), runs the local
  submit attributes hook (:mod:`jim.blah.hook`), submits the description
  with blahpd's grid identity (:func:`jim.blah.submitargs.identity`)
  through jim's normal path (:func:`jim.submit.submit`: the same checks as
  ``jim submit``; a refused description records nothing) and prints
  ``BLAHP_JOBID_PREFIXjim/<id>``.  A refusal is jim's one-line reason on
  stdout, exit status 1: the gridmanager puts it in the job's
  ``HoldReason``.
* **cancel** is ``jim cancel`` (every local job stopped, outputs gathered).
* **hold** and **resume**: jim cannot suspend a grid job and resume it later,
  so both are refused with that reason (exit status 1).  Condor-G's own
  ``condor_hold`` of a ``batch`` job cancels it here (it never asks blahpd to
  hold), and ``condor_release`` submits it again.
* **ping** answers ``0 No error`` once jim runs: a failed ping marks the
  resource down for every job of the account for minutes (measured: 5), while
  a problem with jim's configuration is said better by the submit it fails,
  in that job's hold reason.
"""

from __future__ import annotations

import os
import sys

from jim.blah import hook, submitargs
from jim.blah.status import LRMS, jim_id
from jim.config import load_for_step
from jim.errors import JimError
from jim.handlers import discover
from jim.jobdesc import JIM_ATTRIBUTES
from jim.site import Site

#: What submit prints before the BLAH job id (blahpd's JOBID_REGEXP).
JOBID_PREFIX = "BLAHP_JOBID_PREFIX"
#: Characters of a refusal written for blahpd, at most.
MAX_REASON = 1000


def known_attributes() -> set[str]:
    """The names ``JIM_*`` variables may set: jim's attributes and every installed job type's."""
    known = set(JIM_ATTRIBUTES)
    for entry in discover().values():
        if isinstance(entry, type):
            known |= set(getattr(entry, "attributes", ()) or ())
    return known


def submit(argv: list[str]) -> int:
    """Submit blahpd's job to jim; print BLAH's job id line."""
    from jim.submit import submit as jim_submit  # (lazy: only submit needs the planner and the worker)

    request = submitargs.read(argv)
    site_attributes = hook.run(request.get("C"))
    desc = submitargs.to_description(request, known=known_attributes(), site_attributes=site_attributes)
    config = load_for_step()

    def announce(job_id: str) -> None:
        sys.stdout.write(f"{JOBID_PREFIX}{LRMS}/{job_id}\n")
        sys.stdout.flush()

    jim_submit(Site(config), desc, announce=announce, handover=submitargs.handover(request))
    return 0


def cancel(argv: list[str]) -> int:
    """``jim cancel`` of each BLAH job id; BLAH's answer line."""
    from jim.cancel import cancel as jim_cancel  # (lazy: only cancel needs the adapters)

    if not argv:
        raise JimError("usage: jim_cancel.sh jim/<id> ...")
    site = Site(load_for_step())
    for blah_id in argv:
        jim_cancel(site, site.home.check_id(jim_id(blah_id)))
    print(" 0 No\\ error")
    return 0


def hold(argv: list[str]) -> int:
    """Refused: jim cannot hold a grid job and resume it later."""
    raise JimError("jim cannot hold a grid job (its local jobs would be cancelled): remove it, or let it run")


def resume(argv: list[str]) -> int:
    """Refused: jim never holds a grid job, so there is nothing to resume."""
    raise JimError("jim cannot resume a grid job: jim never holds one")


def ping(argv: list[str]) -> int:
    """``0 No error``: jim runs.  Its configuration is not checked here: a failed ping marks the whole
    resource down for every job of the account for minutes, while a submit's refusal says what is wrong
    in that job's hold reason."""
    print("0 No error")
    return 0


STEPS = {"blah-submit": submit, "blah-cancel": cancel, "blah-hold": hold, "blah-resume": resume, "blah-ping": ping}


def run(step: str, argv: list[str]) -> int:
    """Run ``step``; a refusal or failure is one line on stdout and stderr, exit status 1."""
    os.umask(0o077)
    try:
        return STEPS[step](argv)
    except JimError as e:
        reason = e.message
    except OSError as e:
        reason = f"{e.strerror or e}" + (f" ({e.filename})" if e.filename else "")
    reason = " ".join(reason.split())[:MAX_REASON] or "jim failed"
    if step == "blah-ping":
        print(f"1 {reason}")
        return 0
    print(reason)  # (blahpd puts stdout and stderr both into the hold reason: once is enough)
    return 1
