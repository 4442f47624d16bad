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
    #SCHEMA=2                   the schema version of the record beside it (none: 1)
    #INBATCH=5                  its local jobs in the batch system now (jim.caps counts them)
    #QUEUE=long                 the queue they went to (the plan's; none: the batch system's default)

``jim poll`` refuses a grid job whose record is of a schema version newer than
this jim reads (:data:`RECORD_SCHEMA`, :func:`newer_schema`) as reading the
record itself would (see docs/upgrades.md).

Only ``os`` is used here: ``jim poll`` reads it on its hot path.
"""

from __future__ import annotations

import os

#: The keys ``jim poll`` prints, in order.
PROTOCOL_KEYS = ("JOB_STATE", "EXIT_CODE", "MESSAGE")
TERMINAL_STATES = ("DONE", "FAILED")

#: The schema version of the records (and the index) this jim writes, and the newest it reads
#: (``jim.record.SCHEMA_VERSION`` is its text).  Defined here, not in :mod:`jim.record`, because
#: ``jim poll`` compares it with a summary's ``#SCHEMA`` and must not import lxml.
RECORD_SCHEMA = 2


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
    lines.append(f"#SCHEMA={RECORD_SCHEMA}")  # (jim.db writes a record only at this version)
    return ("\n".join(lines) + "\n").encode()


#: The local states of a local job that is (or may be) in the batch system: what a cap counts.
IN_BATCH_STATES = ("SUBMITTING", "QUEUED", "RUNNING", "HELD", "SUSPENDED")


def in_batch_lines(count: int, queue: str) -> bytes:
    """The lines that follow :func:`render`'s: how many local jobs of the grid job are in the batch
    system now, and in which queue (nothing when none is)."""
    if count <= 0:
        return b""
    name = "".join(queue.split())[:128]
    return (f"#INBATCH={count}\n" + (f"#QUEUE={name}\n" if name else "")).encode()


def in_batch(summary: dict[str, str]) -> tuple[int, str]:
    """(local jobs in the batch system, their queue) of this summary (0 when it does not say)."""
    return _number(summary.get("INBATCH", ""), 0), summary.get("QUEUE", "")


def _number(text: str, default: int) -> int:
    """A count of a summary: at most nine digits, else ``default``."""
    return int(text) if text.isdigit() and len(text) <= 9 else default


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


def newer_schema(summary: dict[str, str]) -> int | None:
    """The schema version of this summary's record when it is newer than this jim reads, else None
    (no ``#SCHEMA``: a record of version 1; a value that is not a number says nothing)."""
    version = _number(summary.get("SCHEMA", ""), 1)
    return version if version > RECORD_SCHEMA else None


def too_new(what: str, version: int) -> str:
    """The one-line refusal of ``what`` (``record <id>``, ``the index``) of a newer schema ``version``."""
    return f"{what} was written by a newer jim (schema {version}, this jim reads up to {RECORD_SCHEMA}): upgrade jim"
