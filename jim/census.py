"""Counting what jim homes hold, for ``jim metrics`` and the admin's view: counts, never content.

:func:`count_home` counts one home (run as its owner); :func:`census` counts
the caller's home, or as root every account's home that ``--homes`` names,
each read in a fork that is the home's account (:func:`jim.accounts.as_account`):
nothing a user wrote is opened with root's rights, nothing is read that is
not a regular file (no waiting on a FIFO), and what the fork answers is
checked again by root (:func:`clean`: every label value one of a known set
or a bounded name, every number bounded) before anyone sees it.

What is counted, per home (see docs/metrics.md):

* grid jobs by state, and the oldest active one (id, creation), from the
  index (``db/index.xml``: what ``jim list`` shows, no record parsed);
* local jobs by state, queue and adapter, attempts, and the attempts that
  another followed by cause (:func:`jim.accounting.waste_cause`) and origin
  (``retry``: jim's own, ``resubmit``: a person's), from the records.  A
  record's counts are remembered in ``cache/metrics.json`` under the record
  file's identity (inode, size, modification time): a scrape parses only the
  records that changed since the last one, and stats the others;
* per adapter, the batch commands run and failed and the degraded flag of
  its status query (:mod:`jim.adapters.cache`);
* whether the monitor runs (its lock: :mod:`jim.background`) and its last
  pass (:mod:`jim.monitorpass`).

Nothing of a job's content (arguments, environment, paths, names, identity)
is read into the counts: only states, queue and adapter names, causes.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import re
from collections.abc import Iterable
from functools import partial
from typing import Any

from lxml import etree

from jim import accounts, background, monitorpass
from jim.accounting import WASTE_CAUSES, Attempt, waste_cause
from jim.adapters.cache import ADAPTER_NAME, COMMAND_NAME, adapters_of, command_counts, degraded_since
from jim.jobid import valid_job_id
from jim.paths import Home
from jim.record import PARSER
from jim.safeio import atomic_write, read_regular
from jim.states import GramState, LocalState
from jim.timestamps import parse_iso

log = logging.getLogger("jim.census")

#: Bytes of ``cache/metrics.json`` read, at most.
MAX_CACHE = 64 * 1024 * 1024
#: One record's bytes read at most (a bigger one is counted as unreadable).
MAX_RECORD = 256 * 1024 * 1024
#: Distinct (state, queue, adapter) rows one home may give; more fold into queue "other".
MAX_ROWS = 500
CACHE_FILE = "metrics.json"
CACHE_VERSION = 1
ENTRY_FIELDS = 7
GRID_STATES = tuple(s.name for s in GramState)
LOCAL_STATES = tuple(s.value for s in LocalState)
ORIGINS = ("retry", "resubmit")
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.@+:-]{1,64}")
_BIG = 1 << 62

Counts = dict[str, Any]


# ---------------------------------------------------------------------------
# One home, as its owner
# ---------------------------------------------------------------------------


def count_home(home: Home) -> Counts:
    """The raw counts of ``home`` (see the module docstring), read as the caller."""
    records = _RecordCounts(home)
    index = _index(home)
    if index is None:  # (no index, or a damaged one: the records say, as jim list's rebuilt index would)
        index = []
        for job_id in _record_ids(home):
            entry = records.add(job_id)
            if entry is not None:
                index.append((job_id, str(entry[5]), str(entry[6])))
    else:
        for job_id, _state, _created in index:
            records.add(job_id)
    records.save()
    grid: dict[str, int] = {}
    oldest: tuple[str, str] | None = None
    for job_id, state, created in index:
        grid[state] = grid.get(state, 0) + 1
        if state not in ("DONE", "FAILED") and created and (oldest is None or created < oldest[0]):
            oldest = (created, job_id)  # (jim's timestamps have one width: the least string is the oldest)
    monitor = monitorpass.read(home.root) or {}
    monitor["running"] = background.running(background.monitor_lock(home.root))
    return {
        "grid": grid,
        "oldest_active": {"id": oldest[1], "created": parse_iso(oldest[0])} if oldest else None,
        "local": [[s, q, a, n] for (s, q, a), n in records.local.items()],
        "attempts": records.attempts,
        "retries": [[c, o, n] for (c, o), n in records.retries.items()],
        "unreadable": records.unreadable,
        "adapters": {
            name: {"degraded_since": degraded_since(home, name), "commands": command_counts(home, name)}
            for name in sorted(set(adapters_of(home)) | {a for _s, _q, a in records.local if a})
        },
        "monitor": monitor,
    }


def _index(home: Home) -> list[tuple[str, str, str]] | None:
    """(id, state, created) of every grid job of the index (what ``jim list`` shows); None when
    there is no index that can be read (never waiting on what is not a regular file)."""
    data = read_regular(os.path.join(home.db, "index.xml"), MAX_RECORD)
    try:
        root = etree.fromstring(data, PARSER) if data else None
    except etree.XMLSyntaxError:
        return None
    if root is None:
        return None
    return [(el.get("id") or "", el.get("state") or "", el.get("created") or "") for el in root.iterfind("job")]


def _record_ids(home: Home) -> list[str]:
    try:
        names = os.listdir(home.db)
    except OSError:
        return []
    return sorted(n[:-4] for n in names if n.endswith(".xml") and valid_job_id(n[:-4]))


class _RecordCounts:
    """The local jobs, attempts and retries of a home's records, summed; each record's counts
    remembered in ``cache/metrics.json`` under its file's identity."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.local: dict[tuple[str, str, str], int] = {}
        self.retries: dict[tuple[str, str], int] = {}
        self.attempts = 0
        self.unreadable = 0
        self.path = home.cache / CACHE_FILE
        self.db = os.fspath(home.db)
        self.known = self._load()
        self.kept: dict[str, list[Any]] = {}
        self.changed = False

    def _load(self) -> dict[str, list[Any]]:
        data = read_regular(self.path, MAX_CACHE)
        try:
            raw = json.loads(data) if data else {}
        except ValueError:
            return {}
        jobs = raw.get("jobs") if isinstance(raw, dict) and raw.get("version") == CACHE_VERSION else None
        return jobs if isinstance(jobs, dict) else {}

    def add(self, job_id: str) -> list[Any] | None:
        """Count the record of ``job_id``; its entry (see :func:`_record_counts`), None if unreadable."""
        if not valid_job_id(job_id):
            return None
        path = f"{self.db}/{job_id}.xml"
        try:
            st = os.lstat(path)
        except OSError:
            self.unreadable += 1
            return None
        key = [st.st_ino, st.st_size, st.st_mtime_ns]
        entry = self.known.get(job_id)
        if not (isinstance(entry, list) and len(entry) == ENTRY_FIELDS and entry[0] == key):
            entry = _record_counts(path, key)
            self.changed = True
            if entry is None:
                self.unreadable += 1
                return None
        self.kept[job_id] = entry
        try:
            _key, adapter, attempts, local, retries, _state, _created = entry
            self.attempts += int(attempts)
            for state, queue, n in local:
                row = (str(state), str(queue), str(adapter))
                self.local[row] = self.local.get(row, 0) + int(n)
            for cause, origin, n in retries:
                self.retries[(str(cause), str(origin))] = self.retries.get((str(cause), str(origin)), 0) + int(n)
        except (TypeError, ValueError):
            self.unreadable += 1
            return None
        return entry

    def save(self) -> None:
        """Remember the counts of every record seen (only when one changed, or one went)."""
        if not (self.changed or set(self.known) - set(self.kept)) or not self.home.cache.is_dir():
            return
        try:
            atomic_write(self.path, json.dumps({"version": CACHE_VERSION, "jobs": self.kept}), sync=False)
        except OSError:
            pass


def _record_counts(path: str, key: list[int]) -> list[Any] | None:
    """``[key, adapter, attempts, [[state, queue, n]...], [[cause, origin, n]...], grid state,
    created]`` of one record (None when it cannot be read or parsed)."""
    data = read_regular(path, MAX_RECORD)
    if data is None:
        return None
    try:
        root = etree.fromstring(data, PARSER)
    except etree.XMLSyntaxError:
        return None
    local: dict[tuple[str, str], int] = {}
    retries: dict[tuple[str, str], int] = {}
    attempts = 0
    for lj in root.iterfind("localjobs/localjob"):
        row = (lj.get("state") or "", lj.get("queue") or "")
        local[row] = local.get(row, 0) + 1
        current = lj.get("attempt") or "1"
        attempts += int(current) if current.isdigit() and len(current) < 10 else 1
        for a in lj.iterfind("attempts/attempt"):
            why = (_cause(a.attrib), "resubmit" if a.get("retryBy") else "retry")
            retries[why] = retries.get(why, 0) + 1
    return [
        key,
        root.get("adapter") or "",
        attempts,
        [[s, q, n] for (s, q), n in local.items()],
        [[c, o, n] for (c, o), n in retries.items()],
        root.get("state") or "",
        root.get("created") or "",
    ]


def _cause(attrs: Any) -> str:
    """Why an attempt that another followed ended (one rule: :func:`jim.accounting.waste_cause`)."""
    get = attrs.get
    return waste_cause(
        Attempt(
            grid_id="", index=0, n=0, state=str(get("state") or ""), batch_id=None, cause=get("cause"),
            evidence=get("evidence"), killed_by=get("killedBy"), queue=None, submitted=None, ended=None,
            counted=False, usage=None,
        )
    )  # fmt: skip


# ---------------------------------------------------------------------------
# What root accepts of a home's counts
# ---------------------------------------------------------------------------


def _n(value: Any) -> int:
    """A count: a whole number from 0 to 2**62, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _BIG else 0


def _t(value: Any) -> float | None:
    """A time or a duration: a finite number from 0 on, else None."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e12
    return float(value) if ok else None


def _one_of(value: Any, allowed: Iterable[str]) -> str:
    return value if isinstance(value, str) and value in allowed else "other"


def _name(value: Any, pattern: re.Pattern[str]) -> str:
    if value == "":
        return ""
    return value if isinstance(value, str) and pattern.fullmatch(value) else "other"


def _rows(raw: dict[str, Any], key: str, width: int) -> list[list[Any]]:
    """The rows of ``raw[key]`` that are lists of ``width`` items."""
    found = raw.get(key)
    return [row for row in found if isinstance(row, list) and len(row) == width] if isinstance(found, list) else []


def clean(user: str, raw: Any) -> Counts:
    """The counts of ``user``'s home as root shows them: ``raw`` (what a fork running as the user
    answered) checked field by field; anything unexpected becomes "other" or 0."""
    raw = raw if isinstance(raw, dict) else {}
    grid: dict[str, int] = {}
    found = raw.get("grid")
    for state, n in found.items() if isinstance(found, dict) else ():
        key = _one_of(state, GRID_STATES)
        grid[key] = grid.get(key, 0) + _n(n)
    local: dict[tuple[str, str, str], int] = {}
    for state, queue, adapter, n in _rows(raw, "local", 4):
        queue = _name(queue, QUEUE_NAME) if len(local) < MAX_ROWS else "other"
        key3 = (_one_of(state, LOCAL_STATES), queue, _name(adapter, ADAPTER_NAME))
        local[key3] = local.get(key3, 0) + _n(n)
    retries: dict[tuple[str, str], int] = {}
    for cause, origin, n in _rows(raw, "retries", 3):
        key2 = (_one_of(cause, WASTE_CAUSES), _one_of(origin, ORIGINS))
        retries[key2] = retries.get(key2, 0) + _n(n)
    return {
        "user": user,
        "grid": grid,
        "oldest_active": _oldest(raw.get("oldest_active")),
        "local": local,
        "attempts": _n(raw.get("attempts")),
        "retries": retries,
        "unreadable": _n(raw.get("unreadable")),
        "adapters": _adapters(raw.get("adapters")),
        "monitor": _monitor(raw.get("monitor")),
    }


def _oldest(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict) or not valid_job_id(str(value.get("id"))) or _t(value.get("created")) is None:
        return None
    return {"id": str(value["id"]), "created": _t(value["created"])}


def _adapters(value: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, info in value.items() if isinstance(value, dict) else ():
        if not (isinstance(name, str) and ADAPTER_NAME.fullmatch(name) and isinstance(info, dict)) or len(out) >= 16:
            continue
        commands: dict[str, tuple[int, int]] = {}
        found = info.get("commands")
        for command, pair in found.items() if isinstance(found, dict) else ():
            if isinstance(command, str) and COMMAND_NAME.fullmatch(command) and isinstance(pair, list | tuple):
                if len(pair) == 2 and len(commands) < 64:
                    commands[command] = (_n(pair[0]), _n(pair[1]))
        out[name] = {"degraded_since": _t(info.get("degraded_since")), "commands": commands}
    return out


def _monitor(value: Any) -> dict[str, Any]:
    value = value if isinstance(value, dict) else {}
    out: dict[str, Any] = {"running": value.get("running") is True, "ok": value.get("ok") is True}
    for key in ("at", "duration", "slowest"):
        out[key] = _t(value.get(key))
    return out


# ---------------------------------------------------------------------------
# Every home: which, and each read as its owner
# ---------------------------------------------------------------------------


def census(own: Home | None, pattern: str | None = None) -> tuple[list[Counts], list[dict[str, str]]]:
    """The counts of every home (cleaned: :func:`clean`), and the homes skipped (user, why).

    Without ``pattern``: ``own``, the caller's home, counted as the caller.  With it (root's):
    every home :func:`jim.accounts.homes` finds, each read in a fork that is its account
    (:func:`jim.accounts.as_account`)."""
    if pattern is None:
        try:
            me = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            me = str(os.geteuid())
        return ([clean(me, count_home(own))] if own is not None else []), []
    counted: list[Counts] = []
    skipped: list[dict[str, str]] = []
    for pw, path, why in accounts.homes(pattern):
        if why is None:
            try:
                counted.append(clean(pw.pw_name, accounts.as_account(pw, path, partial(_count, path))))
                continue
            except accounts.AccountError as e:
                why = str(e)
        log.warning("jim census: %s skipped: %s", path, why)
        skipped.append({"user": pw.pw_name, "why": why})
    return counted, skipped


def _count(path: str) -> dict[str, object]:
    return count_home(Home(path))
