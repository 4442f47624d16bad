"""The session-side diag of an ARC job that ended in jim, written as the job's owner.

A-REX reads ``<sessiondir>.diag`` when a job leaves the LRMS: its exit code
and its accounting.  The scan (:mod:`jim.arc.scan`) runs
:func:`owner_diags` in a fork switched to the owner
(:func:`jim.arc.owners.as_user`), once per owner and pass, for every job of
that owner that ended; root never writes into a session directory.  In that
fork:

1. each job's local jobs are read from the owner's jim record
   (:func:`jim.status.status_json`), best effort and bounded by
   ``jim_timeout`` (an alarm): a job without a record is written without
   accounting;
2. :func:`accounting` makes the diag's keys of them: ``WallTime`` (the local
   jobs' wall times added up), ``Processors`` (local jobs that ran),
   ``LRMSStartTime``, ``LRMSEndTime`` and one ``nodename`` per node;
3. :func:`diag_text` (``exitcode=<n>`` and those keys) is appended to the
   diag, opened never through a symbolic link and written only if it is a
   regular file.
"""

from __future__ import annotations

import os
import pwd
import signal
import stat
import time
from collections.abc import Iterable

from jim.arc.options import Options, log, user_env
from jim.arc.owners import ArcJob
from jim.config import load
from jim.site import Site
from jim.status import status_json
from jim.timestamps import parse_iso

#: A local job's row of ``jim status --json``.
Row = dict[str, object]
#: Nodes named in one diag, at most.
MAX_NODES = 1000
_STAMP = "%Y%m%d%H%M%SZ"


def diag_text(exit_code: int, accounting: list[tuple[str, str]] | None = None) -> str:
    """The lines appended to a diag: ``exitcode=<n>``, then ``key=value`` per accounting entry."""
    lines = [f"exitcode={exit_code}"]
    for key, value in accounting or []:
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def accounting(rows: list[Row]) -> list[tuple[str, str]]:
    """The diag's accounting keys from ``jim status --json``'s local-job rows: ``WallTime`` (the local
    jobs' wall times added up, each from its start, or its submission when jim never saw it run),
    ``Processors`` (local jobs that ran), ``LRMSStartTime`` (the first start), ``LRMSEndTime`` (the last
    end), one ``nodename`` per node."""
    ran = [(row, span) for row in rows if (span := _span(row)) is not None]
    if not ran:
        return []
    starts = [start for _row, (start, _end) in ran]
    ended = [(start, end) for _row, (start, end) in ran if end is not None]
    wall = sum(end - start for start, end in ended)
    out = [("WallTime", f"{round(wall)}s"), ("Processors", str(len(starts)))]
    out.append(("LRMSStartTime", time.strftime(_STAMP, time.gmtime(min(starts)))))
    if ended:
        out.append(("LRMSEndTime", time.strftime(_STAMP, time.gmtime(max(end for _start, end in ended)))))
    out += [("nodename", n) for n in _nodes(row for row, _ in ran)]
    return out


def _span(row: Row) -> tuple[float, float | None] | None:
    """(start, end) of a local job that ran: its end only when it is known and not before its start."""
    began = row.get("started") or row.get("submitted")  # (a short job may end before jim sees it run)
    start = parse_iso(str(began)) if began else None
    if start is None:
        return None
    end = parse_iso(str(row.get("ended") or "")) if row.get("ended") else None
    return start, (end if end is not None and end >= start else None)


def _nodes(rows: Iterable[Row]) -> list[str]:
    """The nodes the rows name, each once, in order; a name that is not printable or too long is left out."""
    nodes: list[str] = []
    for row in rows:
        node = str(row.get("node") or row.get("host") or "")
        if node and node not in nodes and node.isprintable() and len(node) < 256 and len(nodes) < MAX_NODES:
            nodes.append(node)
    return nodes


class _TimedOut(BaseException):
    """The owner's fork took longer than the timeout to read jim's records (never caught per job)."""


def owner_diags(opts: Options, ended: list[tuple[ArcJob, int]]) -> int:
    """In the owner's fork: each ended job's accounting from its jim record (best effort, bounded by
    the timeout), then its diag appended; 0 when every diag was written."""
    rows = _records(opts, [job for job, _code in ended])
    writes = []
    for job, code in ended:
        try:
            extra = accounting(rows.get(job.localid, []))
        except Exception:
            extra = []
        writes.append((job.sessiondir.rstrip("/") + ".diag", diag_text(code, extra)))
    return append_diags(writes)


def _records(opts: Options, jobs: list[ArcJob]) -> dict[str, list[Row]]:
    """jim id -> the local-job rows of its record, for the jobs whose record could be read in time."""
    rows: dict[str, list[Row]] = {}

    def timed_out(_signum: int, _frame: object) -> None:
        raise _TimedOut()

    try:
        signal.signal(signal.SIGALRM, timed_out)
        signal.alarm(max(1, int(opts.timeout)))
        os.environ.update(user_env(opts, pwd.getpwuid(os.getuid())))
        site = Site(load())
        home, db = site.home, site.db
        for job in jobs:
            try:
                rows[job.localid] = list(status_json(db.read(home.check_id(job.localid)))["localJobs"])
            except Exception as e:
                log(f"job {job.arc_id}: no accounting from jim's record ({type(e).__name__}: {e})")
    except (Exception, _TimedOut) as e:
        log(f"no accounting from jim's records: {type(e).__name__}: {e}")
    finally:
        signal.alarm(0)
    return rows


def append_diags(writes: list[tuple[str, str]]) -> int:
    """Append each text to its diag file (run as the owner: never through a symbolic link, a regular file)."""
    failed = 0
    for path, text in writes:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        except OSError as e:
            log(f"cannot write {path}: {e.strerror}")
            failed += 1
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                failed += 1
                continue
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    return 1 if failed else 0
