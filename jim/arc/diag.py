"""The session-side diag of an ARC job that ended in jim, written as the job's owner.

A-REX reads ``<sessiondir>.diag`` when a job leaves the LRMS: its exit code
and its accounting (A-REX's accounting record, AAR: ``arcctl accounting job
info``, and what JURA publishes to APEL).  The scan (:mod:`jim.arc.scan`) runs
:func:`owner_diags` in a fork switched to the owner
(:func:`jim.arc.owners.as_user`), once per owner and pass, for every job of
that owner that ended; root never writes into a session directory.  In that
fork:

1. each job's attempts are read from the owner's jim record (:func:`attempts`:
   every attempt of every local job that ran, with its times from the record
   and its measured :class:`jim.record.usage.Usage`), best effort and bounded
   by ``jim_timeout`` (an alarm): a job without a record is written without
   accounting;
2. :func:`accounting` makes the diag's keys of them, each meaning what A-REX's
   stock backends mean by it (docs/arc.md, "Accounting"): ``WallTime`` and
   ``Processors`` whose product is the core-seconds the attempts held
   (``Processors``: the most cores held at one moment; ``WallTime``: the
   core-seconds over them), ``UserTime`` and ``KernelTime`` (sums),
   ``MaxResidentMemory`` (the largest peak, kB), ``LRMSStartTime``,
   ``LRMSEndTime``, one ``nodename`` per node, ``Benchmark`` (the job's
   queue's, else ``[lrms]``'s, from the configuration).  A key whose value is
   not known for every attempt that ran is not written;
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jim.arc.options import Options, log, user_env
from jim.arc.owners import ArcJob
from jim.config import load
from jim.record import GridJob
from jim.record.usage import Totals, Usage
from jim.site import Site
from jim.timestamps import parse_iso

#: Nodes named in one diag, at most.
MAX_NODES = 1000
#: The longest benchmark written (``HEPSPEC:12.26``).
MAX_BENCHMARK = 100
_STAMP = "%Y%m%d%H%M%SZ"


@dataclass(frozen=True)
class Attempt:
    """One attempt of a local job that ran: its times in jim's record (seconds since the epoch; None:
    not recorded), the node the record names, and what it used (None: nobody measured it)."""

    start: float | None
    end: float | None
    usage: Usage | None
    node: str | None = None

    @property
    def cores(self) -> int | None:
        return self.usage.cores if self.usage is not None else None


def diag_text(exit_code: int, accounting: list[tuple[str, str]] | None = None) -> str:
    """The lines appended to a diag: ``exitcode=<n>``, then ``key=value`` per accounting entry."""
    lines = [f"exitcode={exit_code}"]
    for key, value in accounting or []:
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def accounting(tried: list[Attempt], benchmark: str = "") -> list[tuple[str, str]]:
    """The diag's accounting keys of a grid job's attempts (every attempt of every local job that
    ran; an attempt that failed used its resources too):

    - ``Processors``: the most cores the attempts held at one moment; ``WallTime``: the core-seconds
      they held (sum of wall x cores) over ``Processors``, so that A-REX's core-hours (``WallTime``
      x ``Processors``) are the core-hours used, and ``WallTime`` is at most the job's span;
    - ``UserTime``, ``KernelTime``: the sums; ``MaxResidentMemory``: the largest peak (kB);
    - ``LRMSStartTime`` (the first start), ``LRMSEndTime`` (the last end), one ``nodename`` per node;
    - ``Benchmark``: as given (the configuration's).

    A key is written only when its value is known for every attempt: a sum over some of them would
    be recorded as the job's whole use.  Times are whole seconds (A-REX reads integers)."""
    out: list[tuple[str, str]] = []
    usages = [a.usage for a in tried]
    measured = [u for u in usages if u is not None]
    whole = len(measured) == len(usages) > 0

    def known(field: str) -> bool:
        return whole and all(getattr(u, field) is not None for u in measured)

    totals = Totals.of(usages)
    width = _widest(tried) if known("cores") else None
    if width:
        if known("wall") and totals.core_seconds is not None:
            out.append(("WallTime", f"{round(totals.core_seconds / width)}s"))
        out.append(("Processors", str(width)))
    if known("cpu_user") and totals.cpu_user is not None:
        out.append(("UserTime", f"{round(totals.cpu_user)}s"))
    if known("cpu_system") and totals.cpu_system is not None:
        out.append(("KernelTime", f"{round(totals.cpu_system)}s"))
    if known("max_rss_kb") and totals.max_rss_kb is not None:
        out.append(("MaxResidentMemory", f"{totals.max_rss_kb}kB"))
    starts = [a.start for a in tried if a.start is not None]
    if starts:
        out.append(("LRMSStartTime", time.strftime(_STAMP, time.gmtime(min(starts)))))
    ends = [a.end for a in tried if a.end is not None]
    if ends and len(ends) == len(tried):
        out.append(("LRMSEndTime", time.strftime(_STAMP, time.gmtime(max(ends)))))
    out += [("nodename", n) for n in _nodes(tried)]
    if benchmark:
        out.append(("Benchmark", benchmark))
    return out


def _widest(tried: list[Attempt]) -> int:
    """The most cores held at one moment: the attempts' intervals swept (an end before a start at the
    same instant); an attempt whose times are unknown counts as a moment of its own."""
    events: list[tuple[float, int]] = []
    widest = 0
    for a in tried:
        cores = a.cores or 0
        widest = max(widest, cores)
        if a.start is not None and a.end is not None:
            events += [(a.start, cores), (a.end, -cores)]
    held = 0
    for _at, change in sorted(events, key=lambda e: (e[0], e[1])):
        held += change
        widest = max(widest, held)
    return widest


def _nodes(tried: Iterable[Attempt]) -> list[str]:
    """The nodes the attempts ran on (measured, else as the record names them), each once, in order; a
    name that is not printable or too long is left out."""
    nodes: list[str] = []
    for a in tried:
        node = (a.usage.node if a.usage is not None else None) or a.node or ""
        if node and node not in nodes and node.isprintable() and len(node) < 256 and len(nodes) < MAX_NODES:
            nodes.append(node)
    return nodes


def attempts(job: GridJob) -> list[Attempt]:
    """Every attempt of the grid job's local jobs that ran: measured (a ``<usage>``), or ended after
    it ran (a batch id and a start or a node) without a measure, as :meth:`GridJob.usage_totals`
    counts them.  Its start is its ``started``, else its ``submitted`` (a short job may end before
    jim sees it run); its end only when it is not before its start."""
    found: list[Attempt] = []
    for lj in job.local_jobs():
        past = {a.get("n", ""): a for a in lj.past_attempts()}
        for n, usage in lj.usages():
            attrs: Mapping[str, str] = past.get(str(n)) or {str(k): str(v) for k, v in lj.el.attrib.items()}
            ran = bool(attrs.get("ended") and attrs.get("batchId") and (attrs.get("started") or attrs.get("node")))
            if usage is None and not ran:
                continue
            start = parse_iso(attrs.get("started") or attrs.get("submitted"))
            end = parse_iso(attrs.get("ended"))
            if start is not None and end is not None and end < start:
                end = None
            found.append(Attempt(start, end, usage, attrs.get("node") or attrs.get("host")))
    return found


def benchmark_of(opts: Options, queue: str) -> str:
    """The job's benchmark as A-REX's stock backends write it (``HEPSPEC:12.26``): the first
    ``benchmark`` of its ``[queue:<name>]``, else of ``[lrms]`` (``name value``, blanks to colons);
    "" when neither gives a printable one."""
    raw = opts.benchmarks.get(f"queue:{queue}") if queue else None
    text = ":".join((raw or opts.benchmarks.get("lrms") or "").split())
    return text if text.isprintable() and len(text) <= MAX_BENCHMARK else ""


class _TimedOut(BaseException):
    """The owner's fork took longer than the timeout to read jim's records (never caught per job)."""


def owner_diags(opts: Options, ended: list[tuple[ArcJob, int]]) -> int:
    """In the owner's fork: each ended job's accounting from its jim record (best effort, bounded by
    the timeout), then its diag appended; 0 when every diag was written."""
    tried = _records(opts, [job for job, _code in ended])
    writes = []
    for job, code in ended:
        try:
            extra = accounting(tried[job.localid], benchmark_of(opts, job.queue)) if job.localid in tried else []
        except Exception as e:
            log(f"job {job.arc_id}: no accounting ({type(e).__name__}: {e})")
            extra = []
        writes.append((job.sessiondir.rstrip("/") + ".diag", diag_text(code, extra)))
    return append_diags(writes)


def _records(opts: Options, jobs: list[ArcJob]) -> dict[str, list[Attempt]]:
    """jim id -> the attempts of its record, for the jobs whose record could be read in time."""
    found: dict[str, list[Attempt]] = {}

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
                found[job.localid] = attempts(db.read(home.check_id(job.localid)))
            except Exception as e:
                log(f"job {job.arc_id}: no accounting from jim's record ({type(e).__name__}: {e})")
    except (Exception, _TimedOut) as e:
        log(f"no accounting from jim's records: {type(e).__name__}: {e}")
    finally:
        signal.alarm(0)
    return found


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
