"""jim's background processes and their locks: the worker of each grid job and the per-user monitor.

The one owner of how they are started, found and stopped:

* the **worker** of a grid job (``jim _worker ID``, :mod:`jim.worker`) builds its
  sandbox and submits its local jobs; at most one per grid job, by the lock
  ``locks/<id>.worker.lock``;
* the **monitor** (``jim _monitor``, :mod:`jim.monitor`) follows every active
  local job of the user; at most one per jim home, by ``locks/monitor.lock``.

A lock is a :class:`jim.locks.SingleInstance`: held for the process's life
and released by the kernel when the process dies, so "is it running?" is one
``flock`` and a crashed process never blocks its successor.

:func:`ensure_running` is what ``jim poll`` calls on its hot path (only ``os``
and ``fcntl`` are imported then); the stages call :func:`start_worker`,
:func:`start_monitor`, :func:`stop_worker` and, from ``jim submit``,
:func:`run_detached` to run a new grid job's worker in a fork of themselves.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: poll's hot path imports this module)
if TYPE_CHECKING:
    from collections.abc import Callable

    from jim.locks import SingleInstance

WORKER_COMMAND = "_worker"
MONITOR_COMMAND = "_monitor"


def worker_lock(home: str | os.PathLike[str], job_id: str) -> str:
    return os.path.join(home, "locks", f"{job_id}.worker.lock")


def monitor_lock(home: str | os.PathLike[str]) -> str:
    return os.path.join(home, "locks", "monitor.lock")


def _error_log(home: str | os.PathLike[str]) -> str:
    """Where a background process's stderr goes (anything that escapes jim's own log)."""
    return os.path.join(home, "log", "background.err")


def _spawn(home: str | os.PathLike[str], *args: str) -> None:
    from jim.ownership import detached_env  # (lazy: a poll that finds both running starts nothing)
    from jim.proc import jim_argv, spawn_detached  # (lazy: likewise)

    spawn_detached(jim_argv(*args), env=detached_env(home), cwd="/", stderr=_error_log(home))


def _lock(path: str) -> SingleInstance:
    from jim.locks import SingleInstance  # (lazy: a finished grid job's poll never looks at a lock)

    return SingleInstance(path)


def running(lock_path: str) -> bool:
    """True when a process holds this background process's lock."""
    return _lock(lock_path).held_elsewhere()


def start_monitor(home: str | os.PathLike[str]) -> bool:
    """Start the monitor unless one is running; True when started."""
    if running(monitor_lock(home)):
        return False
    _spawn(home, MONITOR_COMMAND)
    return True


def start_worker(home: str | os.PathLike[str], job_id: str) -> bool:
    """Start the worker of ``job_id`` unless one is running; True when started."""
    if running(worker_lock(home, job_id)):
        return False
    _spawn(home, WORKER_COMMAND, job_id)
    return True


def ensure_running(home: str, job_id: str, *, worker_needed: bool) -> None:
    """The monitor, and the worker of ``job_id`` when ``worker_needed``: started if not running."""
    start_monitor(home)
    if worker_needed:
        start_worker(home, job_id)


def stop_worker(home: str | os.PathLike[str], job_id: str, timeout: float = 5.0) -> None:
    """Kill the worker of ``job_id`` if it runs (its intent journal makes that safe: see jim.worker)."""
    lock = _lock(worker_lock(home, job_id))
    if not lock.held_elsewhere():
        return
    pid = lock.holder_pid()
    if pid:
        import signal  # (lazy: it imports enum, and poll's hot path imports this module)

        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while lock.held_elsewhere() and time.monotonic() < deadline:
        time.sleep(0.02)


def run_detached(home: str | os.PathLike[str], work: Callable[[], int]) -> None:
    """Run ``work()`` in a detached fork of this process (see :func:`jim.proc.detach`).

    Everything ``work`` needs is already imported and configured here, which
    saves a second interpreter start (a few hundred ms before the first batch
    command) when ``jim submit`` starts the worker of the grid job it recorded.
    """
    from jim.proc import detach  # (lazy: see _spawn)

    def isolated() -> int:
        import sys  # (lazy: in the forked child only)

        from jim.ownership import detached_env, vetted_import_path  # (lazy: in the forked child only)

        os.environ["PATH"] = detached_env(home)["PATH"]
        sys.path[:] = vetted_import_path(home, sys.path)  # (no working directory, nothing others can write)
        return work()

    detach(isolated, cwd="/", stderr=_error_log(home))
