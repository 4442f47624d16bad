"""``jim blah-status``: BLAH's job states of jim's grid jobs, all of them from one process.

blahpd runs ``jim_status.sh [-w] [-n] jim/<id> [jim/<id> ...]``; the script
execs ``jim blah-status`` with the same words.  One ``jim blah-status``
answers every id it is given in this one process, from the grid jobs' poll
summaries (:func:`jim.poll.answer_json`, which also starts the background
processes a grid job that has not ended still needs): no process per job.
(blahpd 23 asks for one job per call; a caller that asks for many gets them
all from one answer.)

Each id gets one line, in the order asked: ``0[BatchJobId="<id>"; JobStatus=N; ...]``,
where N is BLAH's job status (:func:`blah_state`):

==============================  =================================================
jim's grid state                BLAH's JobStatus
==============================  =================================================
PENDING, STAGE_IN, UNSUBMITTED  1 (idle)
ACTIVE, STAGE_OUT               2 (running)
SUSPENDED                       2 (running: the batch system suspended local jobs
                                and resumes them itself; 5 would hold the Condor-G
                                job until a person releases it)
DONE                            4 (completed), ``ExitCode`` jim's exit code
FAILED, cancelled               3 (removed)
FAILED                          4 (completed), ``ExitCode`` jim's exit code (1 when
                                jim has none), ``ExitReason`` jim's message
==============================  =================================================

No news is never an error: a grid job the answer cannot give (its summary
unreadable, jim's home not usable, any failure of this process) gets
``1Status not found`` on its line, which blahpd reads as "unknown" and the
gridmanager asks again (it holds a job only after several such answers in a
row: ``BATCH_GAHP_CHECK_STATUS_ATTEMPTS``).  The exit status is 0 whatever
the answers; a usage error alone is 1.
"""

from __future__ import annotations

import os

from jim import poll, summary
from jim.jobid import valid_job_id

#: BLAH's job status codes.
IDLE, RUNNING, REMOVED, COMPLETED, HELD = 1, 2, 3, 4, 5
#: jim's grid states (GRAM's names) -> BLAH's job status, for the states that need no more.
_SIMPLE = {
    "UNSUBMITTED": IDLE,
    "PENDING": IDLE,
    "STAGE_IN": IDLE,
    "ACTIVE": RUNNING,
    "STAGE_OUT": RUNNING,
    "SUSPENDED": RUNNING,
}
#: The prefix of jim's ids in BLAH's job ids (``jim/<id>``).
LRMS = "jim"
NOT_FOUND = "1Status\\ not\\ found"


def blah_state(row: dict[str, object], *, cancelled: bool) -> dict[str, object] | None:
    """BLAH's attributes (``JobStatus``, ``ExitCode``, ``ExitReason``) of one row of ``jim poll --json``;
    None when the row gives no state (an error: no news)."""
    state = row.get("JOB_STATE")
    if not isinstance(state, str):
        return None
    if state in _SIMPLE:
        return {"JobStatus": _SIMPLE[state]}
    code = row.get("EXIT_CODE")
    if state == "DONE":
        return {"JobStatus": COMPLETED, "ExitCode": code if isinstance(code, int) else 0}
    if state == "FAILED":
        if cancelled:
            return {"JobStatus": REMOVED}
        out: dict[str, object] = {"JobStatus": COMPLETED, "ExitCode": code if isinstance(code, int) and code else 1}
        message = row.get("MESSAGE")
        if isinstance(message, str) and message:
            out["ExitReason"] = message
        return out
    return None


def classad(batch_id: str, attrs: dict[str, object]) -> str:
    """One ClassAd line as blahpd parses it: ``[BatchJobId="..."; JobStatus=N; ...]``."""
    parts = [f"BatchJobId={_string(batch_id)}"]
    for name, value in attrs.items():
        parts.append(f"{name}={_string(value) if isinstance(value, str) else value}")
    return "[" + "; ".join(parts) + "]"


def _string(text: str) -> str:
    """A ClassAd string literal: quotes and backslashes escaped, one line, bounded."""
    text = " ".join(text.split())[:500]
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def jim_id(blah_id: str) -> str:
    """jim's grid job id of a BLAH job id (``jim/<id>``; a bare id is taken as it is)."""
    return blah_id[len(LRMS) + 1 :] if blah_id.startswith(LRMS + "/") else blah_id


def answer_lines(blah_ids: list[str], home: str) -> list[str]:
    """One line per BLAH job id: ``0[...]`` or :data:`NOT_FOUND`."""
    ids = [jim_id(b) for b in blah_ids]
    asked = [i for i in ids if valid_job_id(i)]
    rows = poll.answer_json(home, asked, active=False) if asked else {}
    lines = []
    for blah_id, job_id in zip(blah_ids, ids, strict=True):
        row = rows.get(job_id)
        attrs = None
        if isinstance(row, dict):
            attrs = blah_state(row, cancelled=row.get("JOB_STATE") == "FAILED" and _cancelled(home, job_id))
        lines.append(NOT_FOUND if attrs is None else "0" + classad(blah_id, attrs))
    return lines


def _cancelled(home: str, job_id: str) -> bool:
    """Whether the grid job ended because it was cancelled (its summary's cancel mark)."""
    found = summary.read(summary.path(home, job_id))
    return found is not None and found.get("CANCEL") == "1"


def main(args: list[str]) -> int:
    """``jim blah-status [-w] [-n] jim/<id> ...``: one line per id on stdout; exit status 0."""
    ids = [a for a in args if a not in ("-w", "-n")]
    if not ids:
        print("1Usage:\\ jim_status.sh\\ [-w]\\ [-n]\\ jim/<id>\\ ...")
        return 1
    try:
        home = poll.home_of_poll()
        poll.check_home(home, as_owner=False)
        lines = answer_lines(ids, home)
    except Exception:  # (no news, never an error: blahpd asks again)
        lines = [NOT_FOUND for _ in ids]
    os.write(1, ("\n".join(lines) + "\n").encode())
    return 0
