"""Cross-process locks on files (``fcntl.flock``), with timeouts.

Two kinds:

* :func:`locked` — a read-modify-write lock, waited for up to a deadline
  (:class:`jim.errors.LockTimeout` after that);
* :class:`SingleInstance` — a lock held for a process's whole life (the
  worker of a grid job, the per-user monitor); ``acquire`` never waits, and
  the pid of the holder is written into the file for people and for cancel.

Only ``os``, ``fcntl`` and ``time`` are imported (not even ``contextlib``):
``jim poll`` asks whether the worker and the monitor run.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time


def _open(path: str | os.PathLike[str]) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


class locked:
    """Hold an exclusive (or shared) lock on ``path`` for the ``with`` block."""

    def __init__(self, path: str | os.PathLike[str], timeout: float = 10.0, *, shared: bool = False):
        self.path, self.timeout, self.shared = path, timeout, shared
        self.fd = -1

    def __enter__(self) -> None:
        self.fd = _open(self.path)
        try:
            self._wait()
        except BaseException:
            os.close(self.fd)
            raise

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def _wait(self) -> None:
        mode = (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        deadline = time.monotonic() + self.timeout
        delay = 0.002
        while True:
            try:
                fcntl.flock(self.fd, mode)
                return
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    name = os.path.basename(self.path)
                    from jim.errors import LockTimeout  # (lazy: poll's lock probe never waits, so never times out)

                    raise LockTimeout(f"could not lock {name} within {self.timeout:g} s") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)


class SingleInstance:
    """A lock that marks "this process is the one doing X"."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> bool:
        fd = _open(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def held_elsewhere(self) -> bool:
        """True when another process holds the lock (cheap: one open + flock)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
        return False

    def holder_pid(self) -> int | None:
        try:
            with open(self.path) as f:
                text = f.read().strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None
