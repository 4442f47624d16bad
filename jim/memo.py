"""What the long-lived monitor remembers between passes: a pass costs what changed since the last.

A pass applies, to each active grid job, its record and its **inputs**
(:class:`Inputs`): the batch statuses of its local jobs, its wrappers'
directories, and the **rules of time** (a job absent without evidence turns
LOST after a grace period, a hold that lasts too long is cancelled, a retry
comes due, and every grid job is looked at again once in a long while).
:class:`Memo` keeps, per grid job, the record file's identity and the inputs
the last pass applied (:class:`Seen`); a grid job whose record and inputs are
both as they were is neither read nor written: **no news**.

* **Statuses** are known by the answer's generations (see
  :mod:`jim.adapters.cache`): a grid job's :class:`StatusKey` is the latest
  generation in which one of its local jobs' status changed, and how many of
  them the answer shows.  Nothing is compared status by status.
* **Wrappers' directories** are known by the mtime of the grid job's
  ``local/`` directory (the wrapper touches it whenever it writes something
  the monitor reads), listed again only when it moved or was too young to be
  trusted (:data:`SETTLE`).
* **In a grid job that changed**, only the local jobs whose status or
  directory changed are applied (:func:`which`), unless the record itself
  changed, the answer failed, a hold may be overdue or the periodic look is
  due: then every one.
* A pass that leaves every grid job up to date starts a **quiet run**
  (:class:`Quiet`): the next passes look at the home's ``db/`` and ``jobs/``
  directories and the status answer's generation, and nothing else, until one
  of them moves or a rule of time is due.

Nothing here changes a record; :mod:`jim.monitor` does.
"""

from __future__ import annotations

import math
import os
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from jim import localfiles, retry
from jim.adapters.model import BatchStatus, QueryResult
from jim.paths import Home
from jim.record import GridJob
from jim.states import LocalState

#: Seconds after which a grid job in which nothing changed is looked at again all the same (each grid job
#: at its own moment within the period): a safety net, not the way news arrives.
FULL_LOOK = 1800.0
#: The grid jobs' periodic looks fall in this many moments of the period, spread by grid job: at most one
#: pass in FULL_LOOK / LOOK_SLOTS seconds ends a quiet run for them, however many grid jobs there are.
LOOK_SLOTS = 30
#: Seconds a ``local/`` directory's mtime must be old, when it is listed, to be trusted to show the next
#: change (file times move in clock ticks, and a shared file system's clock may differ a little).
SETTLE = 2.0

_UNSUBMITTED = (LocalState.PLANNED, LocalState.SUBMITTING)

Key = tuple[int, int]
"""A local job's (index, attempt): the name of its wrapper's directory."""
Dirs = dict[Key, tuple[int, int]]
"""The wrappers' directories that exist: key -> (directory mtime, progress file mtime)."""
FileKey = int | tuple[tuple[Key, tuple[int, int]], ...]
"""The ``local/`` directory's mtime when it can be trusted, else every wrapper directory's times."""
RecordKey = tuple[int, int, int]
"""A record file's identity (inode, size, mtime: :func:`jim.safeio.disk_key`)."""


@dataclass(frozen=True)
class StatusKey:
    """What a status answer says of one grid job's active local jobs, as a key."""

    newest: int
    """The latest generation in which the status of one of them changed (0: none is shown)."""
    shown: int
    """How many of them the answer shows."""
    total: int
    """How many there are."""

    @property
    def any_absent(self) -> bool:
        return self.shown < self.total


@dataclass(frozen=True)
class Inputs:
    """Everything outside the record a pass applies to a grid job: when it equals what the last pass
    applied (and the record is the same), nothing can change."""

    statuses: StatusKey | None
    """None: the status query failed (no news)."""
    files: FileKey
    tick: int
    """Which period of the rule of time that concerns the grid job now it is in."""
    due: bool
    """A hold may be overdue."""


@dataclass
class Seen:
    """What the monitor last applied to one grid job."""

    version: RecordKey | None
    """Its record file's identity when read (None: unknown, read it again)."""
    batch_ids: dict[str, Key]
    """Batch id -> (local job index, attempt), of its active local jobs."""
    newest: float = 0.0
    """When its latest local job was queued."""
    retry_at: float | None = None
    """When the first retry in its cool-off is due, if every unsubmitted local job waits for one."""
    wake_at: float | None = None
    """When a rule of time (a hold that lasts too long) may change it with no other news."""
    waiting: int = 0
    """How many of its local jobs await submission."""
    cancel: bool = False
    """A cancel was requested."""
    inputs: Inputs | None = None
    """The inputs the last pass applied (None: every local job is applied next)."""
    generation: int | None = None
    """The generation of the status answer ``key`` was taken from."""
    key: StatusKey | None = None
    root: int = -1
    """The ``local/`` directory's mtime when ``dirs`` was listed."""
    dirs: Dirs = field(default_factory=dict)
    settled: bool = False
    """``root`` was older than :data:`SETTLE` seconds when the directory was listed."""
    next_look: float = math.inf
    """When a rule of time next concerns it, with no other news (see :func:`rules_of_time`)."""
    applied: Dirs | None = None
    """The wrappers' directories the last pass applied (``dirs`` then): which of them changed since."""
    applied_generation: int | None = None
    """The generation of the status answer the last pass applied: which statuses changed since."""

    @classmethod
    def of(cls, version: RecordKey | None, job: GridJob, held_timeout: float) -> Seen:
        active = {}
        waiting = 0
        held = None
        for lj, state, batch_id, key in job.local_keys():
            if state in _UNSUBMITTED:
                waiting += 1
                continue
            if batch_id and not state.terminal:
                active[batch_id] = key
                if state in (LocalState.HELD, LocalState.SUSPENDED):
                    since = lj.entered(state)
                    if since is not None:
                        held = since if held is None else min(held, since)
        return cls(
            version,
            active,
            newest=job.last_entered(LocalState.QUEUED) or 0.0,
            retry_at=job.retry_at(waiting) if waiting else None,
            wake_at=held + held_timeout if held is not None else None,
            waiting=waiting,
            cancel=job.cancel_requested,
        )

    def keep_files(self, before: Seen | None) -> None:
        """Carry over what was read of the wrappers' directories before the record changed."""
        if before is not None:
            self.root, self.dirs, self.settled = before.root, before.dirs, before.settled


@dataclass
class Quiet:
    """A pass that left every grid job up to date, and what must stay as it was for the next to have
    nothing to do."""

    key: Key
    """The mtimes of the home's ``db`` directory (every record and summary is replaced there) and ``jobs``
    directory (every wrapper touches it when it writes something the monitor reads)."""
    until: float
    """The earliest time a rule of time (a grace period, a hold, a retry, the periodic look) is due."""
    batch_ids: list[str]
    generation: int
    """The status answer's generation."""
    active: int


@dataclass
class Memo:
    """What the long-lived monitor remembers between passes (a one-off pass starts empty)."""

    seen: dict[str, Seen] = field(default_factory=dict)
    accounting: tuple[float, frozenset[str], dict[str, BatchStatus]] | None = None
    """The last accounting answer: (status answer's time, ids asked, answer)."""
    failures: dict[str, int] = field(default_factory=dict)
    """Grid job -> passes in a row that failed on it (see :meth:`jim.monitor.Pass.contain`)."""
    given_up: set[str] = field(default_factory=set)
    """Grid jobs that could not even be marked FAILED: no longer looked at by this monitor."""
    rule: retry.Rule | None = None
    """The retry rule (its job types' hooks looked up once)."""
    quiet: Quiet | None = None
    """The last pass, when it left every grid job up to date: the next skips everything while nothing it
    depends on moved."""
    credentials: dict[str, list[tuple[str, tuple[int, ...]]]] = field(default_factory=dict)
    """Grid job -> the front ends' credential files and the versions copied (:func:`jim.credentials.watched`)."""

    def forget_others(self, active: list[str]) -> None:
        """Drop what is remembered of grid jobs no longer active."""
        keep = set(active)
        for gone in set(self.seen) - keep:
            del self.seen[gone]
        for gone in set(self.failures) - keep:
            del self.failures[gone]
        for gone in set(self.credentials) - keep:
            del self.credentials[gone]


def home_key(home: Home) -> Key | None:
    """The mtimes of the home's ``db`` and ``jobs`` directories (see :class:`Quiet`)."""
    try:
        return (os.stat(home.db).st_mtime_ns, os.stat(home.jobs).st_mtime_ns)
    except OSError:
        return None


def settled(key: Key) -> bool:
    """Both directories changed at least :data:`SETTLE` seconds ago (a later change shows in their mtimes)."""
    return time.time() - max(key) / 1e9 >= SETTLE


def status_key(seen: Seen, result: QueryResult) -> StatusKey | None:
    """What ``result`` says of the grid job's active local jobs (None: the query failed); taken again
    only from an answer of another generation."""
    if not result.ok:
        return None
    if seen.key is not None and seen.generation == result.generation:
        return seen.key
    changed = result.changed
    newest = shown = 0
    for b in seen.batch_ids:
        g = changed.get(b)
        if g is not None:
            shown += 1
            if g > newest:
                newest = g
    seen.generation, seen.key = result.generation, StatusKey(newest, shown, len(seen.batch_ids))
    return seen.key


def inputs_of(seen: Seen, job_id: str, local_root: Path, result: QueryResult, rules: TimeRules) -> Inputs:
    """The grid job's inputs in this pass (see :class:`Inputs`); the wrappers' directories listed again
    only when the ``local/`` directory changed."""
    statuses = status_key(seen, result)
    try:
        root = os.stat(local_root).st_mtime_ns
    except OSError:
        root = 0
    if root != seen.root or not seen.settled:
        scanned = time.time()
        seen.root, seen.dirs = root, localfiles.started_dirs(local_root) if root else {}
        # a wrapper's touch in the same clock tick as this scan leaves the mtime as it is: a directory
        # changed less than SETTLE seconds before the scan is listed again until it is older
        seen.settled = scanned - root / 1e9 >= SETTLE
    files: FileKey = seen.root if seen.settled else tuple(sorted(seen.dirs.items()))
    tick, due = rules_of_time(seen, job_id, statuses, rules)
    return Inputs(statuses, files, tick, due)


@dataclass(frozen=True)
class TimeRules:
    """The moment of a pass and the site's grace period, for :func:`rules_of_time`."""

    now: float
    lost_grace: float


def rules_of_time(seen: Seen, job_id: str, statuses: StatusKey | None, rules: TimeRules) -> tuple[int, bool]:
    """The tick of the rule of time that concerns the grid job now, and whether a hold is due;
    ``seen.next_look`` set to when one next concerns it.  A job absent from the answer is looked at
    every quarter of the grace period (at most a minute); otherwise each grid job once per
    :data:`FULL_LOOK`, at its own moment."""
    now = rules.now
    if statuses is not None and statuses.any_absent:
        period = min(60.0, max(0.5, rules.lost_grace / 4))
        tick = int(now // period)
        next_look = (tick + 1) * period
    else:
        offset = (zlib.crc32(job_id.encode()) % LOOK_SLOTS) * (FULL_LOOK / LOOK_SLOTS)
        tick = int((now + offset) // FULL_LOOK)
        next_look = (tick + 1) * FULL_LOOK - offset
    for at in (seen.wake_at, seen.retry_at):
        if at is not None and now < at < next_look:
            next_look = at
    seen.next_look = next_look
    return tick, seen.wake_at is not None and now >= seen.wake_at


def which(seen: Seen, inputs: Inputs, result: QueryResult) -> set[Key] | None:
    """The local jobs (their directory keys) a pass must apply to a grid job whose record is the one the
    last pass wrote: those whose batch status changed since the answer the last pass applied, is missing
    or is a terminal one the last pass could not settle, and those whose wrapper's directory changed.
    None: every local job (the record changed, the answer failed, a hold may be overdue, or the periodic
    look is due).  The others' inputs are those the last pass applied: applying them again would change
    nothing."""
    before, applied = seen.inputs, seen.applied
    if before is None or applied is None or before.statuses is None or inputs.statuses is None or inputs.due:
        return None
    if before.statuses.total != inputs.statuses.total or inputs.statuses.total != len(seen.batch_ids):
        return None
    if inputs.tick != before.tick and not inputs.statuses.any_absent:
        return None  # the periodic look at everything
    return _news_of_statuses(seen, result) | _news_of_dirs(seen.dirs, applied)


def _news_of_statuses(seen: Seen, result: QueryResult) -> set[Key]:
    """The local jobs whose status changed since the answer the last pass applied, is missing, or is a
    terminal one (the last pass may not have settled it: its exit file or accounting may come later)."""
    since = seen.applied_generation
    changed, statuses = result.changed, result.statuses
    out = set()
    for b, key in seen.batch_ids.items():
        g = changed.get(b)
        if g is None or since is None or g > since or statuses[b].state.terminal:
            out.add(key)
    return out


def _news_of_dirs(dirs: Dirs, applied: Dirs) -> set[Key]:
    """The wrappers' directories that changed, came or went since the last pass applied ``applied``."""
    if dirs is applied:  # (not listed again since)
        return set()
    out = {key for key, times in dirs.items() if applied.get(key) != times}
    out.update(key for key in applied if key not in dirs)
    return out
