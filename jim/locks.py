"""Cross-process locks on files (``fcntl.flock``), with timeouts.

Two kinds:

* :func:`locked` — a read-modify-write lock, waited for up to a deadline
  (:class:`jim.errors.LockTimeout` after that);
* :class:`SingleInstance` — a lock held for a process's whole life (the
  worker of a grid job, the per-user monitor); ``acquire`` never waits, and
  the pid of the holder is written into the file for people and for cancel.

Only ``os``, ``fcntl`` and ``time`` are needed: ``jim poll`` asks whether the
worker and the monitor run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator

from jim.errors import LockTimeout


def _open(path: str | os.PathLike[str]) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


@contextlib.contextmanager
def locked(path: str | os.PathLike[str], timeout: float = 10.0, *, shared: bool = False) -> Iterator[None]:
    """Hold an exclusive (or shared) lock on ``path`` for the ``with`` block."""
    fd = _open(path)
    try:
        mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            try:
                fcntl.flock(fd, mode)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"could not lock {os.path.basename(path)} within {timeout:g} s") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        yield
    finally:
        os.close(fd)


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
