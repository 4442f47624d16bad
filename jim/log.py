"""Logging: jim's own log file, one log per grid job, stderr only with ``-v``.

Nothing is ever logged to stdout: stdout is the protocol channel.
Records logged with ``extra={"job": <grid job id>}`` (see :func:`for_job`)
also go to that grid job's ``jobs/<id>/jim.log``, which ends up in its output tar
(and goes with the grid job's work area: :mod:`jim.purge`).

jim's own log, ``log/jim.log``, is written by every jim process of the home at
once (one ``O_APPEND`` write per line) and rotated by size (:class:`_SharedLog`):
once it reaches :data:`MAX_LOG_BYTES`, the process that wrote the line renames it
``jim.log.1`` (``jim.log.1`` to ``jim.log.2`` ... up to :data:`KEEP_LOGS`, the
oldest dropped), under a lock on ``log/.jim.log.lock`` and only if no other process
did it first; the others notice (their file passed the size) and open the new
``jim.log`` at their next line.  No logrotate is needed (docs/housekeeping.md).
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)-7s [%(process)d] %(name)s: %(message)s"
#: ``log/jim.log`` is rotated when it reaches this size ...
MAX_LOG_BYTES = 10 * 1024 * 1024
#: ... and this many rotated ones are kept (``jim.log.1``, the newest, to ``jim.log.5``).
KEEP_LOGS = 5
_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class _SharedLog(logging.Handler):
    """``log/jim.log``, shared by every jim process of the home, rotated by size (see the module docstring)."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path
        self.fd = -1
        self._open()

    def _open(self) -> None:
        fd = os.open(self.path, _OPEN_FLAGS, 0o600)
        st = os.fstat(fd)
        if st.st_mode & 0o077 and st.st_uid == os.geteuid():
            os.fchmod(fd, 0o600)
        old, self.fd = self.fd, fd
        if old >= 0:
            os.close(old)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            os.write(self.fd, (self.format(record) + "\n").encode(errors="replace"))
            if os.fstat(self.fd).st_size >= MAX_LOG_BYTES:
                self._rotate()
        except Exception:  # logging must never break jim
            self.handleError(record)

    def _rotate(self) -> None:
        """Rotate the file if it is still the one that grew too big (else another process did), then
        write to the new one."""
        lock = os.open(self.path.parent / ".jim.log.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            mine = os.fstat(self.fd)
            try:
                now = os.lstat(self.path)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
                base = str(self.path)
                for k in range(KEEP_LOGS - 1, 0, -1):
                    try:
                        os.rename(f"{base}.{k}", f"{base}.{k + 1}")
                    except FileNotFoundError:
                        pass
                os.rename(base, f"{base}.1")
            self._open()
        finally:
            os.close(lock)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        super().close()


class _JobFileHandler(logging.Handler):
    """Appends records that carry a ``job`` attribute to that job's own log."""

    def __init__(self, jobs_dir: Path):
        super().__init__()
        self.jobs_dir = jobs_dir

    def emit(self, record: logging.LogRecord) -> None:
        job = getattr(record, "job", None)
        if not job:
            return
        path = self.jobs_dir / job
        if not path.is_dir():
            return
        try:
            line = self.format(record) + "\n"
            fd = os.open(path / "jim.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode(errors="replace"))
            finally:
                os.close(fd)
        except Exception:  # logging must never break jim
            self.handleError(record)


_configured = False


def reopen(home: Path) -> None:
    """Drop every handler and set up again (a forked child that closed its inherited files)."""
    global _configured
    logger = logging.getLogger("jim")
    for h in list(logger.handlers):
        logger.removeHandler(h)
    _configured = False
    setup(home)


def setup(home: Path, *, verbose: bool = False, quiet: bool = False) -> None:
    global _configured
    logger = logging.getLogger("jim")
    if _configured:
        return
    _configured = True
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False
    fmt = logging.Formatter(FORMAT)
    logdir = home / "log"
    try:
        os.makedirs(home.parent, exist_ok=True)
        for d in (home, logdir):  # (private whatever the umask: os.mkdir only ever removes bits from 0700)
            try:
                os.mkdir(d, 0o700)
            except FileExistsError:
                pass
        fh = _SharedLog(logdir / "jim.log")
        fh.setFormatter(fmt)
        logger.addHandler(fh)
        jh = _JobFileHandler(home / "jobs")
        jh.setFormatter(fmt)
        logger.addHandler(jh)
    except OSError:
        pass
    if verbose or not logger.handlers:
        sh = logging.StreamHandler(sys.stderr)
        sh.setFormatter(fmt)
        sh.setLevel(logging.DEBUG if verbose else (logging.ERROR if quiet else logging.WARNING))
        logger.addHandler(sh)


def for_job(name: str, job_id: str) -> logging.LoggerAdapter[logging.Logger]:
    return logging.LoggerAdapter(logging.getLogger(name), {"job": job_id})
