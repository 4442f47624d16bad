"""What one batch adapter keeps in the home's ``cache/``, shared by every jim process of the user.

An adapter owns one :class:`AdapterCache` (``adapter.cache``):

* **the status answer** (:meth:`AdapterCache.answer`): for an adapter whose
  status command covers all of the user's jobs, one answer is kept for
  ``cache_interval`` seconds in ``<name>-status.json``; at most one process
  refreshes it at a time (single flight: the others use the answer they find
  rather than wait).  A failed query is cached too, so a batch system that is
  down is asked once per interval, not once per caller.  An answer that says
  what the cached one says is not written again: only its date is, in
  ``<name>-status.at`` (``{"answer": <the cached answer's date>, "at": <the
  new date>}``: a few bytes where the answer would be megabytes); a date that
  names another answer is ignored;
* **generations** (:class:`Generations`): every answer handed out is stamped
  with the generation of its content and, per job, the generation in which its
  status last changed (:attr:`jim.adapters.model.QueryResult.changed`); a
  long-lived caller (the monitor) compares integers, never statuses;
* **the degraded flag** (``<name>.degraded``): set by a failed query, cleared
  by one that works; a degraded adapter gets no new submissions;
* **the batch commands run** (``<name>-commands.json``: command -> [run, failed]): counted at
  :meth:`jim.adapters.base.Adapter.run`, the one seam of batch commands (:meth:`AdapterCache.counted`),
  read by ``jim metrics`` (:func:`command_counts`); one small locked rewrite per command;
* **site facts** (``<name>-<fact>.json``): what changes rarely (Slurm's
  MaxArraySize, which PBS answers), computed at most once a day; and the
  batch system's capacity (``<name>-capacity.json``: cores, free cores,
  memory, GPUs), asked at most once per :data:`CAPACITY_MAX_AGE` (an
  unanswered query too: a batch system that is down is asked once a minute).

Cache files are written with :func:`jim.safeio.atomic_write` (no ``fsync``:
losing one in a crash only means asking the batch system again).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jim.adapters import capacity as capacities
from jim.adapters.model import UNSTAMPED, BatchStatus, Capacity, QueryResult
from jim.locks import SingleInstance
from jim.paths import Home
from jim.safeio import atomic_write, disk_key, read_at_most, read_regular

if TYPE_CHECKING:
    import subprocess

log = logging.getLogger("jim.adapters")

#: How long a site fact (see :meth:`AdapterCache.fact`) is trusted.
FACT_MAX_AGE = 86400.0
#: How long the batch system's capacity (see :meth:`AdapterCache.capacity`) is trusted: its free
#: cores change by the minute, and ARC's information provider asks about once a minute.
CAPACITY_MAX_AGE = 60.0

Statuses = dict[str, BatchStatus]

#: An adapter's name as it may appear in a cache file's name (and so in ``jim metrics``).
ADAPTER_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
#: A batch command's name as counted: the basename of its argv[0] (anything else counts as "other").
COMMAND_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,40}")
#: Most distinct commands one counts file holds (more count as "other"), and its size read at most.
MAX_COMMANDS = 32
MAX_COUNTS_BYTES = 16 * 1024


class Generations:
    """Stamps the answers of one adapter object with generations (see the module docstring).

    The first answer is generation 1, every job in it changed then.  An answer whose statuses equal
    the last one's keeps its generation; one that differs gets the next, and the jobs whose status
    differs (or that are new) are marked changed in it.
    """

    def __init__(self) -> None:
        self.generation = 0
        self._statuses: Statuses | None = None
        self._changed: dict[str, int] = {}

    def stamp(self, result: QueryResult) -> QueryResult:
        """``result`` with its generation and changes set (in place); a failed one is left unstamped."""
        if not result.ok:
            result.generation = UNSTAMPED
            return result
        if result.statuses is not self._statuses:
            self._advance(result.statuses)
        result.generation, result.changed = self.generation, self._changed
        return result

    def _advance(self, statuses: Statuses) -> None:
        last = self._statuses or {}
        news = [k for k, v in statuses.items() if (old := last.get(k)) is not v and old != v]
        gone = len(last) - (len(statuses) - sum(1 for k in news if k not in last))
        self._statuses = statuses
        if not news and not gone and self.generation:
            return
        self.generation += 1
        changed = {k: g for k, g in self._changed.items() if k in statuses} if gone else dict(self._changed)
        changed.update(dict.fromkeys(news, self.generation))
        self._changed = changed


@dataclass
class _Answer:
    """The status answer this object read or made last: the cache file's identity, its raw statuses
    and the :class:`QueryResult` built from them."""

    key: object
    raw: dict[str, list[Any]]
    result: QueryResult
    """The answer, dated by the date file when that confirms it later."""
    answered: float
    """The date in the cache file: what the date file names to confirm this answer."""
    date_key: object = None
    """The date file's identity when last read or written."""


class AdapterCache:
    """The files of adapter ``name`` in ``home``'s cache (see the module docstring).

    ``interned(before, after)`` is told when an answer's statuses were replaced by ones that share
    the previous answer's objects (a command adapter then remembers those for the same output).
    """

    def __init__(self, home: Home, name: str, *, interned: Callable[[Statuses, Statuses], None] | None = None) -> None:
        self.home, self.name = home, name
        self.generations = Generations()
        self._interned_hook = interned
        self._answer: _Answer | None = None

    # -- the status answer ----------------------------------------------------------------
    @property
    def answer_path(self) -> Path:
        return self.home.cache / f"{self.name}-status.json"

    @property
    def date_path(self) -> Path:
        return self.home.cache / f"{self.name}-status.at"

    def answer(self, ask: Callable[[], QueryResult], interval: float, *, now: float | None = None) -> QueryResult:
        """The shared answer when it is younger than ``interval`` seconds, else ``ask()`` (once for every
        process of the user: see the module docstring); stamped."""
        now = time.time() if now is None else now
        cached = self.cached()
        if cached is not None and now - cached.at < interval:
            return cached
        lock = SingleInstance(self.home.cache / f"{self.name}-status.lock")
        if not lock.acquire():
            if cached is not None:
                return cached
            return QueryResult(ok=False, error="another process is refreshing the batch status")
        try:
            return self._refresh(ask())
        finally:
            lock.release()

    def cached(self) -> QueryResult | None:
        """The last status answer any jim process of this user cached, whatever its age, stamped.

        While the cache files have not changed, the very same :class:`QueryResult` (no parse); a new
        answer shares each unchanged job's :class:`BatchStatus` object with the previous one.
        """
        try:
            key = disk_key(self.answer_path)
            last = self._answer
            if last is None or last.key != key:
                data = json.loads(self.answer_path.read_text())
                result = self._intern(data["ok"], data.get("error", ""), data["at"], data["statuses"])
                last = self._answer = _Answer(key, data["statuses"], result, result.at)
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
            return None
        return self.generations.stamp(self._dated(last))

    def _refresh(self, fresh: QueryResult) -> QueryResult:
        """Keep ``fresh`` (just asked): only its date when it says what the cache file says."""
        last = self._answer
        unchanged = (
            last is not None
            and fresh.ok
            and last.result.ok
            and fresh.error == last.result.error
            and disk_key(self.answer_path, missing=True) == last.key
        )
        if last is not None and unchanged and fresh.statuses is last.result.statuses:
            return self._redate(last, fresh.at)  # (the adapter knew its output for the one it gave before)
        raw = {k: v.to_json() for k, v in fresh.statuses.items()}
        if last is not None and unchanged and raw == last.raw:
            return self._redate(last, fresh.at)
        result = self._intern(fresh.ok, fresh.error, fresh.at, raw)
        if self._interned_hook is not None:
            self._interned_hook(fresh.statuses, result.statuses)
        head = json.dumps({"at": result.at, "ok": result.ok, "error": result.error})
        atomic_write(self.answer_path, f'{head[:-1]}, "statuses": {json.dumps(raw)}}}', sync=False)
        try:
            self._answer = _Answer(disk_key(self.answer_path), raw, result, result.at)
        except OSError:
            self._answer = None
        return self.generations.stamp(result)

    def _redate(self, last: _Answer, at: float) -> QueryResult:
        """The batch system said again what the cache file says: date it again (a few bytes)."""
        atomic_write(self.date_path, json.dumps({"answer": last.answered, "at": at}), sync=False)
        last.result = replace(last.result, at=at)
        last.date_key = disk_key(self.date_path, missing=True)
        return self.generations.stamp(last.result)

    def _dated(self, last: _Answer) -> QueryResult:
        """``last``'s result, with the date of the date file when that file confirms this very answer."""
        try:
            key = disk_key(self.date_path)
            if key == last.date_key:
                return last.result
            data = json.loads(self.date_path.read_text())
            at = float(data["at"])
            confirms = float(data["answer"]) == last.answered
        except (OSError, ValueError, KeyError, TypeError):
            return last.result
        last.date_key = key
        if confirms and at > last.result.at:
            last.result = replace(last.result, at=at)
        return last.result

    def _intern(self, ok: bool, error: str, at: float, raw: dict[str, list[Any]]) -> QueryResult:
        """A :class:`QueryResult` of ``raw`` (batch id -> :meth:`BatchStatus.to_json`), reusing the previous
        answer's status object of every job whose raw status is the same."""
        last = self._answer
        if last is None:
            statuses = {k: BatchStatus.from_json(v) for k, v in raw.items()}
        else:
            before_raw, before = last.raw, last.result.statuses
            statuses = {}
            for k, v in raw.items():
                old = before.get(k)
                statuses[k] = old if old is not None and before_raw.get(k) == v else BatchStatus.from_json(v)
        return QueryResult(ok=bool(ok), error=str(error), at=float(at), statuses=statuses)

    # -- the degraded flag ---------------------------------------------------------------------
    @property
    def _degraded_path(self) -> Path:
        return self.home.cache / f"{self.name}.degraded"

    def mark_degraded(self, reason: str) -> None:
        if not self._degraded_path.exists():
            log.warning("adapter %s degraded: %s", self.name, reason)
        atomic_write(self._degraded_path, json.dumps({"since": time.time(), "reason": reason}), sync=False)

    def mark_healthy(self) -> None:
        if self._degraded_path.exists():
            log.info("adapter %s healthy again", self.name)
            self._degraded_path.unlink(missing_ok=True)

    def degraded(self) -> dict[str, Any] | None:
        """``{"since": epoch, "reason": ...}`` while the adapter is degraded, else None."""
        try:
            data = json.loads(self._degraded_path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    # -- the batch commands run --------------------------------------------------------------------
    @property
    def commands_path(self) -> Path:
        return self.home.cache / f"{self.name}-commands.json"

    def counted(
        self, run: Callable[..., subprocess.CompletedProcess[str]]
    ) -> Callable[..., subprocess.CompletedProcess[str]]:
        """``run`` (``subprocess.run``, as :meth:`jim.adapters.base.Adapter.run` calls it) counting each
        command it runs in ``<name>-commands.json``: run, and failed (it did not answer in time, could
        not be run, or exited non-zero)."""

        def counting(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
            failed = True
            try:
                proc = run(argv, **kwargs)
                failed = proc.returncode != 0
                return proc
            finally:
                self.count_command(argv[0] if argv else "", failed=failed)

        return counting

    def count_command(self, command: str, *, failed: bool) -> None:
        """One more run (and failure) of the batch command ``command`` (a path: its basename counts).
        Never raises: a count that cannot be kept is lost, the command is not."""
        name = os.path.basename(command)
        if not COMMAND_NAME.fullmatch(name):
            name = "other"
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.commands_path, flags, 0o600)
        except OSError:
            return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            fcntl.flock(fd, fcntl.LOCK_EX)  # (every jim process of the user counts into this one file)
            before = read_at_most(fd, MAX_COUNTS_BYTES)
            counts = _counts(before)
            if name not in counts and len(counts) >= MAX_COMMANDS:
                name = "other"
            ran, failures = counts.get(name, (0, 0))
            counts[name] = (ran + 1, failures + int(failed))
            data = json.dumps({k: list(v) for k, v in sorted(counts.items())}).encode()
            # rewritten in place, padded to the old length: no truncation (ext4 flushes a file truncated
            # and written again when it is closed: a millisecond a command); torn by a crash, the
            # counts start again from zero, as after a reset
            os.pwrite(fd, data.ljust(len(before)), 0)
        except OSError:
            pass
        finally:
            os.close(fd)

    # -- site facts ------------------------------------------------------------------------------
    def fact(self, name: str, compute: Callable[[], Any], *, key: str = "", max_age: float = FACT_MAX_AGE) -> Any:
        """A fact about the site that changes rarely, computed at most once per ``max_age`` s (a day)
        per jim home (``<adapter>-<name>.json``); a different ``key`` (e.g. which command answers)
        recomputes it."""
        path = self.home.cache / f"{self.name}-{name}.json"
        try:
            data = json.loads(path.read_text())
            if 0 <= time.time() - data["at"] < max_age and data.get("key", "") == key:
                return data["value"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        value = compute()
        try:
            atomic_write(path, json.dumps({"at": time.time(), "key": key, "value": value}), sync=False)
        except OSError:
            pass
        return value

    def capacity(self, ask: Callable[[], Capacity | None], *, key: str = "") -> Capacity | None:
        """The batch system's capacity: ``ask()`` (one bulk query) at most once per
        :data:`CAPACITY_MAX_AGE` for every jim process of the user; None: it could not say."""
        value = self.fact("capacity", lambda: capacities.to_json(ask()), key=key, max_age=CAPACITY_MAX_AGE)
        return capacities.from_json(value)

    def last_capacity(self) -> tuple[float, Capacity | None] | None:
        """(when it was asked, the answer) of the capacity last cached, whatever its age; None when
        none was (nothing is asked: for a reader that must not run batch commands, the web view)."""
        try:
            data = json.loads((self.home.cache / f"{self.name}-capacity.json").read_text())
            return float(data["at"]), capacities.from_json(data["value"])
        except (OSError, ValueError, KeyError, TypeError):
            return None


# -- what every adapter of a home keeps, for jim metrics and the admin's view -------------------------


def _counts(data: bytes) -> dict[str, tuple[int, int]]:
    """command -> (run, failed) of a counts file's bytes (nothing from a damaged one)."""
    try:
        raw = json.loads(data) if data else {}
    except ValueError:
        return {}
    out: dict[str, tuple[int, int]] = {}
    for name, pair in raw.items() if isinstance(raw, dict) else ():
        if (
            isinstance(name, str)
            and COMMAND_NAME.fullmatch(name)
            and isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(n, int) and 0 <= n < 1 << 62 for n in pair)
        ):
            out[name] = (pair[0], pair[1])
    return out


def adapters_of(home: Home) -> list[str]:
    """The adapters that keep something in ``home``'s cache (by their files' names), sorted."""
    try:
        names = os.listdir(home.cache)
    except OSError:
        return []
    found = set()
    for name in names:
        for suffix in ("-status.json", ".degraded", "-commands.json"):
            adapter = name[: -len(suffix)] if name.endswith(suffix) else ""
            if ADAPTER_NAME.fullmatch(adapter):
                found.add(adapter)
    return sorted(found)


def command_counts(home: Home, adapter: str) -> dict[str, tuple[int, int]]:
    """command -> (run, failed) that ``adapter`` counted in ``home`` (see :meth:`AdapterCache.counted`)."""
    data = read_regular(home.cache / f"{adapter}-commands.json", MAX_COUNTS_BYTES)
    return _counts(data) if data else {}


def degraded_since(home: Home, adapter: str) -> float | None:
    """Since when ``adapter``'s status query has failed in ``home`` (its degraded flag), else None."""
    data = read_regular(home.cache / f"{adapter}.degraded", 64 * 1024)
    if data is None:
        return None
    try:
        since = json.loads(data).get("since")
    except (ValueError, AttributeError):
        return 0.0  # (degraded, since it cannot say when)
    return float(since) if isinstance(since, int | float) else 0.0
