"""The poll summary: ``db/<id>.state``, what ``jim poll`` prints for a grid job, kept beside its record.

One writer, one reader.  :func:`render` is called by :mod:`jim.db` with every
write of a record, under the record's lock, and the file is replaced
atomically with it; :func:`read` serves ``jim poll`` (which must not parse the
XML record), the worker's intent journal (has a cancel come?) and the list of
active grid jobs.  It lives with the database in the foundation because it is
the record's shadow: written in the same step, never on its own.

Format: ``KEY=VALUE`` lines.  The first line is always ``JOB_STATE``; lines
whose key starts with ``#`` are jim's own and never printed::

    JOB_STATE=FAILED
    EXIT_CODE=3                 once DONE or FAILED
    MESSAGE=local job 2 ...     once FAILED: why, in one line
    #UNSUBMITTED=0              local jobs not yet submitted (a worker is needed)
    #RETRY_AT=1764000000        every one of them waits for a retry's cool-off until then
    #CANCEL=1                   a cancel was requested

Only ``os`` is used here: ``jim poll`` reads it on its hot path.
"""

from __future__ import annotations

import os

#: The keys ``jim poll`` prints, in order.
PROTOCOL_KEYS = ("JOB_STATE", "EXIT_CODE", "MESSAGE")
TERMINAL_STATES = ("DONE", "FAILED")


def render(
    state: str,
    *,
    exit_code: int | None,
    message: str | None,
    unsubmitted: int,
    cancel: bool,
    retry_at: float | None = None,
) -> bytes:
    """The summary of a grid job in ``state`` (a GRAM state name).  ``retry_at``: when the first of
    the unsubmitted local jobs may be submitted, if all of them wait for a retry's cool-off."""
    lines = [f"JOB_STATE={state}"]
    if exit_code is not None:
        lines.append(f"EXIT_CODE={exit_code}")
    if message is not None:
        lines.append("MESSAGE=" + " ".join(message.split()))
    lines.append(f"#UNSUBMITTED={unsubmitted}")
    if retry_at is not None and unsubmitted:
        lines.append(f"#RETRY_AT={int(retry_at)}")
    lines.append(f"#CANCEL={'1' if cancel else '0'}")
    return ("\n".join(lines) + "\n").encode()


def path(home: str | os.PathLike[str], job_id: str) -> str:
    """Where the summary of ``job_id`` is (``job_id`` already checked: see jim.jobid)."""
    return os.path.join(home, "db", f"{job_id}.state")


def read(path: str | os.PathLike[str]) -> dict[str, str] | None:
    """key -> value (jim's own keys without the ``#``); None when there is no such file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.lstrip("#")] = value
    return out


def worker_needed(unsubmitted: int, retry_at: float | None, cancel: bool, now: float) -> bool:
    """Whether a grid job needs its worker now: local jobs await submission, no cancel came, and
    they do not all wait for a retry's cool-off that ends after ``now`` (``retry_at``: when the
    first of them may be submitted, if all of them wait for one).  The one rule: ``jim poll``, the
    monitor and the worker itself ask it."""
    return unsubmitted > 0 and not cancel and (retry_at is None or retry_at <= now)


def unsubmitted(summary: dict[str, str], now: float) -> bool:
    """:func:`worker_needed`, for the grid job of this summary."""
    count = summary.get("UNSUBMITTED", "0")
    at = summary.get("RETRY_AT", "")
    return worker_needed(
        int(count) if count.isdigit() else 0, int(at) if at.isdigit() else None, summary.get("CANCEL") == "1", now
    )


def cancel_requested(summary: dict[str, str]) -> bool:
    return summary.get("CANCEL") == "1"


def terminal(summary: dict[str, str]) -> bool:
    return summary.get("JOB_STATE") in TERMINAL_STATES
