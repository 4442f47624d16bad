"""``jim arc-backend scan``: as root, tell A-REX which of its jobs in the LRMS jim has ended.

A-REX runs ``scan-jim-job --config CFG CONTROLDIR...`` as root about every
10 s.  One pass (:func:`scan_pass`):

1. the jobs of the control directories in INLRMS or CANCELING that jim has
   and that have no ``lrms_done`` (:func:`jim.arc.owners.jobs_in_lrms`; ARC 6's
   and ARC 7's layouts, :mod:`jim.arc.controldir`), grouped by owner; a job's
   delegation that ``arcrenew`` renewed in A-REX's store is written into its
   ``proxy`` file, which A-REX itself does not do for a job in the LRMS
   (:func:`jim.arc.renew.renew_pass`);
2. ONE ``jim poll --json`` per owner, as that owner
   (:func:`jim.arc.owners.bulk_poll`); a failed or timed-out answer is no
   news, and the next pass asks again;
3. for the owner's jobs that ended (:func:`lrms_done_line`: DONE, FAILED, or
   unknown to jim), their diags, written in one fork as the owner
   (:func:`jim.arc.diag.owner_diags`);
4. for each of them, as root in the root-owned control directory, the job's
   ``lrms_done`` (:func:`finish`: written whole, mode 0600), then ``gm-kick``
   so that A-REX looks at the job at once (:func:`kick`: its exit status is
   checked, and a failure logged with what it printed: A-REX would otherwise
   notice the job only at its periodic pass, minutes later).

``scan_passes`` of ``[custom:jim]`` makes one run do that many passes,
``scan_interval`` seconds apart.  Each pass logs one line on stderr, which
A-REX appends to its helper log.
"""

from __future__ import annotations

import os
import subprocess
import time
from functools import partial

from jim.arc import controldir as cd
from jim.arc.options import Options, log
from jim.arc.owners import IDS_PER_CALL, Answer, ArcJob, as_user, bulk_poll, by_owner, jobs_in_lrms
from jim.arc.renew import renew_pass
from jim.safeio import atomic_write

GM_KICK = "/usr/lib/arc/gm-kick"
#: Seconds ``gm-kick`` may take.
GM_KICK_TIMEOUT = 30
#: Characters of ``gm-kick``'s output logged when it fails.
GM_KICK_OUTPUT = 300
#: ``lrms_done``'s mode: A-REX (root) reads it.
LRMS_DONE_MODE = 0o600
#: A grid job jim does not know (GRAM's JOB_CONTACT_NOT_FOUND).
UNKNOWN_JOB = 156


def lrms_done_line(localid: str, answer: Answer) -> tuple[int, str] | None:
    """(exit code, the ``lrms_done`` line) of a grid job that ended; None while it runs or when unclear."""
    state = answer.get("JOB_STATE")
    code = answer.get("EXIT_CODE")
    message = " ".join(str(answer.get("MESSAGE") or "").split())[:500]
    if state == "DONE":
        n = code if isinstance(code, int) else 0
        return n, f"{n}" if n == 0 else f"{n} jim: the job ended with exit code {n}"
    if state == "FAILED":
        n = code if isinstance(code, int) else -1
        return n, f"{n} {message or 'failed in jim'}"
    if answer.get("ERROR") == UNKNOWN_JOB:
        return -1, f"-1 job {localid[:100]} unknown to jim"
    return None


def finish(job: ArcJob, line: str) -> None:
    """The job's ``lrms_done`` (as root, in the root-owned control directory, written whole), then ``gm-kick``."""
    atomic_write(cd.job_file(job.controldir, job.arc_id, "lrms_done", job.layout), line + "\n", mode=LRMS_DONE_MODE)
    kick(job)


def kick(job: ArcJob) -> bool:
    """``gm-kick`` of the job, with the last argument its layout wants; False (logged) when it failed."""
    if not os.access(GM_KICK, os.X_OK):
        return False
    argv = [GM_KICK, "-j", job.arc_id, cd.kick_argument(job.controldir, job.arc_id, job.layout)]
    try:
        proc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=GM_KICK_TIMEOUT
        )
    except (OSError, subprocess.SubprocessError) as e:
        log(f"gm-kick of {job.arc_id}: {e}")
        return False
    if proc.returncode != 0:
        said = " ".join(proc.stdout[-GM_KICK_OUTPUT:].decode("utf-8", "replace").split())
        log(f"gm-kick of {job.arc_id} failed with exit status {proc.returncode}: {said or 'no output'}")
        return False
    return True


def scan_pass(opts: Options, controldirs: list[str]) -> dict[str, int]:
    """One pass over the control directories; counts: checked, ended, jim calls, proxy files renewed."""
    jobs = [j for d in controldirs for j in jobs_in_lrms(d)]
    counts = {"checked": len(jobs), "ended": 0, "calls": 0, "renewed": _renew(jobs)}
    for uid, owned in sorted(by_owner(jobs).items()):
        ids = list(dict.fromkeys(j.localid for j in owned))
        counts["calls"] += -(-len(ids) // IDS_PER_CALL)
        ended = _ended(owned, bulk_poll(opts, uid, ids))
        if ended:
            _write_diags(opts, uid, ended)
            counts["ended"] += _finish_all(ended)
    return counts


def _renew(jobs: list[ArcJob]) -> int:
    """:func:`renew_pass` of the jobs, which never fails the scan."""
    try:
        return renew_pass(jobs) if jobs else 0
    except Exception as e:  # (a bug there must not stop the jobs from ending)
        log(f"renewing the jobs' proxy files: {type(e).__name__}: {e}")
        return 0


def _ended(owned: list[ArcJob], answers: dict[str, Answer]) -> list[tuple[ArcJob, int, str]]:
    """(job, exit code, ``lrms_done`` line) of each job whose grid job ended."""
    ended = []
    for job in owned:
        answer = answers.get(job.localid)
        result = lrms_done_line(job.localid, answer) if answer is not None else None
        if result is not None:
            ended.append((job, result[0], result[1]))
    return ended


def _write_diags(opts: Options, uid: int, ended: list[tuple[ArcJob, int, str]]) -> None:
    """The diags of the ended jobs that name a session directory, in one fork as their owner."""
    # (lazy: only a pass in which a job ended reads jim's records; a scan run that finds none
    # takes 40 ms of CPU, 64 ms with them loaded: measured)
    from jim.arc.diag import owner_diags

    with_diag = [(j, code) for j, code, _l in ended if j.sessiondir]
    if with_diag and as_user(uid, partial(owner_diags, opts, with_diag)) != 0:
        log(f"uid {uid}: some session diag files could not be written")


def _finish_all(ended: list[tuple[ArcJob, int, str]]) -> int:
    """:func:`finish` of each ended job; how many got their ``lrms_done``."""
    done = 0
    for job, _code, line in ended:
        try:
            finish(job, line)
            done += 1
        except OSError as e:
            log(f"job {job.arc_id}: cannot write lrms_done: {e}")
    return done


def scan(opts: Options, controldirs: list[str]) -> int:
    """``scan_passes`` passes, ``scan_interval`` seconds apart; the step's exit status."""
    for n in range(max(1, opts.scan_passes)):
        if n:
            time.sleep(opts.scan_interval)
        counts = scan_pass(opts, controldirs)
        renewed = f", {counts['renewed']} proxy file(s) renewed" if counts["renewed"] else ""
        log(
            f"scan pass: {counts['checked']} job(s) checked, {counts['ended']} ended, "
            f"{counts['calls']} jim call(s){renewed}"
        )
    return 0
