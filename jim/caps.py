"""Caps: how many local jobs may be in the batch system at once, per user, per user and queue, site-wide.

``[caps]`` (:class:`jim.config.CapsConfig`, docs/caps.md) sets them; 0 is no
cap.  A local job over a cap is never refused and never fails for it: it stays
PLANNED in jim, with the reason recorded (``waiting``), and goes in as others
end.  Three parts:

* **the gate** (:class:`Gate`, asked by the worker of a grid job before each
  chunk, :mod:`jim.worker`): how many of the chunk may go now.  Under the home's
  lock (``locks/caps.lock``) it counts this home's local jobs in the batch system
  from the poll summaries (``#INBATCH`` and ``#QUEUE`` of ``db/<id>.state``,
  written with every record: a summary is read again only when its file
  changed), adds the slots other workers of the home have taken and not yet
  recorded (their *claims*, in the home's ledger ``cache/caps.json``), and, for
  the site-wide cap, the counts of every other home in the shared directory.
  The free slots are dealt in turn among the grid jobs of the home whose workers
  wait for one (:func:`share`), the one served longest ago first; the worker
  records its claim, submits, and releases the claim once the record (and so the
  summary) holds the local jobs it submitted (:meth:`Gate.release`);
* **the wait** (:meth:`Gate.wait`): a capped worker looks every
  :data:`LOOK` seconds whether a record of its home or the shared directory
  changed (one ``stat`` each), and asks again then, or after :data:`WAIT`;
* **the site's counts** (:class:`Shared`): each home keeps one small file in the
  shared directory (``[caps] shared_dir``, made by root with mode 1777 like
  ``/tmp``): ``<uid>-<hash of the home>``, its owner's, holding the home's count.
  The gate writes it with each claim under the directory's lock (``flock`` on
  the directory, held for a few reads and one write), the monitor after a pass
  that changed a record (:class:`Publisher`), and at least every
  :data:`REFRESH` seconds while it is not 0.  A reader takes a file only if its
  owner is the uid its name says, it is a regular file (never through a link),
  it was written in the last :data:`STALE` seconds, and counts at most the
  per-user cap from it.  The cap is cooperative: a user can run the batch
  system's commands directly anyway.

Only a PLANNED local job is held here (one SUBMITTING may already be in the
batch system: the worker reconciles it first).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from jim import background, summary
from jim.config import CapsConfig
from jim.errors import LockTimeout
from jim.jobid import valid_job_id
from jim.locks import locked
from jim.paths import Home
from jim.safeio import atomic_write, kind, read_regular

log = logging.getLogger("jim.caps")

#: How every reason a cap gives starts (a local job's ``waiting``).
REASON = "waiting for a slot: "
#: The longest a capped worker waits before it asks again (seconds).
WAIT = 5.0
#: How often a capped worker looks whether anything moved (seconds).
LOOK = 0.5
#: A worker that has not asked for this long is no longer dealt a share (seconds).
ASK_TTL = 30.0
#: A home's count in the shared directory is rewritten at least this often while it is not 0 (seconds).
REFRESH = 60.0
#: A count in the shared directory not rewritten for this long is ignored (its monitor is gone).
STALE = 600.0
#: How long a gate waits for the home's lock, then for the shared directory's (seconds).
LOCK_WAIT = 10.0
SITE_LOCK_WAIT = 5.0
#: The most bytes read of the home's ledger and of a count file.
LEDGER_MAX = 1 << 20
COUNT_MAX = 32
#: The most files of the shared directory looked at (one per home that has local jobs in the batch system).
MAX_FILES = 100_000

_COUNT_NAME = re.compile(r"([0-9]{1,10})-[0-9a-f]{16}")


@dataclass(frozen=True)
class Turn:
    """What the gate answered: ``n`` local jobs may go now; ``reason`` (for those held) None when
    the gate could not tell (the home's lock was busy): nothing to record, ask again."""

    n: int
    reason: str | None


def share(free: int, askers: list[str], me: str) -> int:
    """The free slots dealt in turn: ``askers`` in the order they are served (the one served longest
    ago first); each gets ``free // len`` and the first ``free % len`` one more."""
    order = askers if me in askers else [*askers, me]
    rank = order.index(me)
    return free // len(order) + (1 if rank < free % len(order) else 0)


def reasons(config: CapsConfig, queue: str) -> dict[str, str]:
    """The reason of each cap, as a local job held by it shows it (stable: recorded once)."""
    return {
        "user": f"{REASON}at most {config.max_local_jobs_per_user} local jobs of this user in the batch system "
        "at once ([caps] max_local_jobs_per_user)",
        "queue": f"{REASON}at most {config.queues.get(queue, 0)} local jobs of this user in queue {queue} at once "
        "([caps.queues])",
        "site": f"{REASON}at most {config.max_local_jobs_site} local jobs of all users in the batch system at once "
        "([caps] max_local_jobs_site)",
        "turn": f"{REASON}the free slots go to this user's other grid jobs first, in turn ([caps])",
    }


class _Summaries:
    """This home's local jobs in the batch system, from the poll summaries; a summary is read again
    only when its file changed (a new version is a new file)."""

    def __init__(self, db_dir: Path) -> None:
        self.db_dir = db_dir
        self.known: dict[str, tuple[tuple[int, int, int], int, str]] = {}

    def count(self) -> tuple[int, dict[str, int]]:
        """(local jobs in the batch system, the same per queue)."""
        seen: dict[str, tuple[tuple[int, int, int], int, str]] = {}
        with os.scandir(self.db_dir) as entries:
            for entry in entries:
                if not entry.name.endswith(".state"):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                key = (st.st_ino, st.st_size, st.st_mtime_ns)
                old = self.known.get(entry.name)
                if old is not None and old[0] == key:
                    seen[entry.name] = old
                    continue
                try:
                    found = summary.read(entry.path) or {}
                except OSError:
                    continue
                n, queue = summary.in_batch(found) if not summary.terminal(found) else (0, "")
                seen[entry.name] = (key, n, queue)
        self.known = seen
        per_queue: dict[str, int] = {}
        for _key, n, queue in seen.values():
            if n:
                per_queue[queue] = per_queue.get(queue, 0) + n
        return sum(per_queue.values()), per_queue


class _Ledger:
    """The home's ledger (``cache/caps.json``): per worker that asked, when it last asked, when it was
    last served, its queue and its claim (slots taken, not yet in the record).  Read and written under
    the home's lock only."""

    def __init__(self, home: Home) -> None:
        self.path = home.cache / "caps.json"
        self.workers: dict[str, dict[str, float | int | str]] = {}

    def load(self) -> None:
        data = read_regular(self.path, LEDGER_MAX)
        try:
            found = json.loads(data) if data else {}
        except ValueError:
            found = {}
        workers = found.get("workers") if isinstance(found, dict) else None
        self.workers = {}
        for job_id, w in workers.items() if isinstance(workers, dict) else ():
            if isinstance(w, dict) and valid_job_id(job_id):
                self.workers[str(job_id)] = {
                    "asked": _number(w.get("asked")),
                    "served": _number(w.get("served")),
                    "claim": int(_number(w.get("claim"))),
                    "queue": str(w.get("queue", ""))[:128],
                }

    def save(self) -> None:
        atomic_write(self.path, json.dumps({"workers": self.workers}, sort_keys=True), sync=False)

    def prune(self, home: Home, now: float, me: str | None) -> None:
        """Forget workers that died (with their claims; one ``flock`` each) and those that no longer ask
        and hold no claim."""
        for job_id, w in list(self.workers.items()):
            if job_id == me:
                continue
            if (not w["claim"] and now - float(w["asked"]) >= ASK_TTL) or not background.running(
                background.worker_lock(home.root, job_id)
            ):
                del self.workers[job_id]

    def claims(self, me: str | None = None, queue: str | None = None) -> int:
        return sum(
            int(w["claim"])
            for job_id, w in self.workers.items()
            if job_id != me and (queue is None or w["queue"] == queue)
        )


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else 0.0


class Shared:
    """The site-wide counts: one file per home in the shared directory (see the module docstring)."""

    def __init__(self, config: CapsConfig, home: Home) -> None:
        self.dir = Path(config.shared_dir)
        self.per_file = config.max_local_jobs_per_user or None
        digest = hashlib.sha256(str(home.root).encode()).hexdigest()[:16]
        self.name = f"{os.getuid()}-{digest}"
        self.checked: tuple[float, str | None] = (-1e18, None)

    def problem(self, now: float) -> str | None:
        """Why the shared directory cannot be used (looked at again every :data:`REFRESH` seconds, every
        :data:`WAIT` while it cannot)."""
        if now - self.checked[0] >= (REFRESH if self.checked[1] is None else WAIT):
            self.checked = (now, directory_problem(self.dir))
        return self.checked[1]

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The shared directory's lock (``flock`` on the directory), waited for up to
        :data:`SITE_LOCK_WAIT` seconds; then the count goes on without it (logged: someone holds it)."""
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            deadline = time.monotonic() + SITE_LOCK_WAIT
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() >= deadline:
                        log.warning("the lock of %s is held too long: counting without it", self.dir)
                        break
                    time.sleep(0.01)
            yield
        finally:
            os.close(fd)

    def others(self, now: float) -> int:
        """The local jobs of every other home in the batch system, as their counts say."""
        total = 0
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            with os.scandir(fd) as entries:  # (one by one: never more than MAX_FILES looked at)
                for k, entry in enumerate(entries):
                    if k >= MAX_FILES:
                        log.warning("%s holds more than %d files: the others are not counted", self.dir, MAX_FILES)
                        break
                    match = _COUNT_NAME.fullmatch(entry.name)
                    if match is None or entry.name == self.name:
                        continue
                    n = _read_count(fd, entry.name, int(match.group(1)), now)
                    total += min(n, self.per_file) if self.per_file else n
        finally:
            os.close(fd)
        return total

    def publish_or_log(self, count: int) -> None:
        """:meth:`publish`; a count that cannot be written (a file of another user in its place, say) is
        logged, and written again by the monitor's next pass."""
        try:
            self.publish(count)
        except OSError as e:
            log.warning("this home's count for the site-wide cap was not written in %s: %s", self.dir, e)

    def publish(self, count: int) -> None:
        """This home's count (0: its file removed)."""
        path = self.dir / self.name
        if count > 0:
            atomic_write(path, f"{count}\n", mode=0o644, sync=False)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _read_count(dir_fd: int, name: str, uid: int, now: float) -> int:
    """The count in one file of the shared directory; 0 when it is not one to believe."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or now - st.st_mtime >= STALE:
            return 0
        text = os.read(fd, COUNT_MAX).decode("ascii", "replace").strip()
    except OSError:
        return 0
    finally:
        os.close(fd)
    return int(text) if text.isdigit() and len(text) <= 9 else 0


def directory_problem(path: Path) -> str | None:
    """Why ``path`` cannot be the shared directory of the site-wide cap, in a few words; None if it can."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"{path} does not exist (root makes it: install -d -m 1777 {path})"
    except OSError as e:
        return f"{path}: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is {kind(st.st_mode)}, not a directory"
    if st.st_uid not in (0, os.getuid()):
        return f"{path} belongs to uid {st.st_uid}, not to root"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"{path} is writable by others without the sticky bit (mode 1777)"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable by this user (mode 1777)"
    return None


class Gate:
    """The worker's question to the caps: how many of a chunk may go now (see the module docstring)."""

    def __init__(self, config: CapsConfig, home: Home) -> None:
        self.config, self.home = config, home
        self.on = config.on
        self.summaries = _Summaries(home.db)
        self.ledger = _Ledger(home)
        self.shared = Shared(config, home) if config.max_local_jobs_site else None
        self.lock = home.locks / "caps.lock"

    def take(self, job_id: str, wanted: int, queue: str, now: float) -> Turn:
        """How many of ``wanted`` local jobs of ``job_id`` (for ``queue``) may go now; they are claimed
        until :meth:`release`.  The reason of the cap that holds the others back."""
        if not self.on or wanted <= 0:
            return Turn(wanted, None)
        try:
            with locked(self.lock, LOCK_WAIT):
                return self._take(job_id, wanted, queue, now)
        except LockTimeout:
            return Turn(0, None)
        except OSError as e:  # (a full disk, say: the local jobs wait, with the reason, and are asked for again)
            log.warning("the caps could not be counted: %s", e)
            return Turn(0, f"{REASON}the caps could not be counted: {e.strerror or e}")

    def _take(self, job_id: str, wanted: int, queue: str, now: float) -> Turn:
        config, ledger = self.config, self.ledger
        why = reasons(config, queue)
        ledger.load()
        ledger.prune(self.home, now, job_id)
        me = ledger.workers.setdefault(job_id, {"asked": now, "served": 0.0, "claim": 0, "queue": queue})
        me.update(asked=now, claim=0, queue=queue)
        used, per_queue = self.summaries.count()
        mine = used + ledger.claims(job_id)
        limits: list[tuple[int, str]] = []
        if config.max_local_jobs_per_user:
            limits.append((config.max_local_jobs_per_user - mine, why["user"]))
        if queue in config.queues:
            limits.append(
                (int(config.queues[queue]) - per_queue.get(queue, 0) - ledger.claims(job_id, queue), why["queue"])
            )
        with self._site() as site:
            if site is not None:
                limits.append((config.max_local_jobs_site - mine - site, why["site"]))
            elif self.shared is not None:  # (the shared directory is not usable: nothing goes)
                limits.append((0, f"{REASON}the site-wide cap cannot be counted: {self.shared.problem(now)}"))
            if not limits:  # (only other queues have a cap)
                return Turn(wanted, None)
            free, reason = min(limits)
            askers = sorted(
                (float(w["served"]), j) for j, w in ledger.workers.items() if now - float(w["asked"]) < ASK_TTL
            )
            n = max(0, min(wanted, share(max(free, 0), [j for _served, j in askers], job_id)))
            if n:
                me.update(served=now, claim=n)
            if self.shared is not None and site is not None:
                self.shared.publish_or_log(mine + n)
        ledger.save()
        return Turn(n, reason if n >= max(free, 0) else why["turn"])

    @contextlib.contextmanager
    def _site(self) -> Iterator[int | None]:
        """Under the shared directory's lock: the other homes' count (None: no site-wide cap, or its
        directory is not usable)."""
        shared = self.shared
        now = time.time()
        if shared is None or shared.problem(now) is not None:
            yield None
            return
        with shared.locked():
            yield shared.others(now)

    def release(self, job_id: str) -> None:
        """The claim of ``job_id`` is over: what it submitted is in its record now (or nothing went)."""
        if not self.on:
            return
        with contextlib.suppress(LockTimeout, OSError), locked(self.lock, LOCK_WAIT):  # (else: the next take)
            self.ledger.load()
            w = self.ledger.workers.get(job_id)
            if w is not None and w["claim"]:
                w["claim"] = 0
                self.ledger.save()

    def wait(self, seconds: float = WAIT) -> None:
        """Until a record of this home or a count in the shared directory changed, or ``seconds``."""
        marks = self._marks()
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            time.sleep(LOOK)
            if self._marks() != marks:
                return

    def _marks(self) -> tuple[int, int]:
        def mtime(path: Path) -> int:
            try:
                return os.stat(path).st_mtime_ns
            except OSError:
                return 0

        return mtime(self.home.db), mtime(self.shared.dir) if self.shared is not None else 0


class Publisher:
    """The monitor's part of the site-wide cap: after a pass, this home's count in the shared
    directory, when a record changed since the last (one ``stat`` of ``db/`` otherwise), and at
    least every :data:`REFRESH` seconds while it is not 0.  Never raises: a count it could not write
    is logged once and written after a later pass."""

    def __init__(self, config: CapsConfig, home: Home) -> None:
        self.home = home
        self.gate = Gate(config, home) if config.max_local_jobs_site else None
        self.mark = -1
        self.written: tuple[float, int] = (-1e18, -1)
        self.failing = False

    def after_pass(self, now: float | None = None) -> None:
        gate = self.gate
        if gate is None or gate.shared is None:
            return
        now = time.time() if now is None else now
        try:
            mark = os.stat(self.home.db).st_mtime_ns
            if mark == self.mark and (self.written[1] == 0 or now - self.written[0] < REFRESH):
                return
            if gate.shared.problem(now) is not None:
                return
            with locked(gate.lock, 0.0):  # (a gate holds it: it writes the count itself)
                gate.ledger.load()
                gate.ledger.prune(self.home, now, None)
                count = gate.summaries.count()[0] + gate.ledger.claims()
                gate.shared.publish(count)
                self.written = (now, count)
            self.mark = mark
            self.failing = False
        except LockTimeout:
            return
        except Exception as e:  # (the monitor's pass goes on whatever happens here)
            if not self.failing:
                log.warning("this home's count for the site-wide cap was not written: %s", e)
            self.failing = True
