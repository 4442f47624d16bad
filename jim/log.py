"""Logging: jim's own log file, one log per grid job, stderr only with ``-v``.

Nothing is ever logged to stdout: stdout is the protocol channel.
Records logged with ``extra={"job": <grid job id>}`` (see :func:`for_job`)
also go to that grid job's ``jobs/<id>/jim.log``, which ends up in its output tar.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)-7s [%(process)d] %(name)s: %(message)s"


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


def _private_file(path: Path) -> None:
    """Create ``path`` 0600 if it is not there; make an existing one of ours private."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o077 and st.st_uid == os.geteuid():
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


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
        _private_file(logdir / "jim.log")
        fh = logging.FileHandler(logdir / "jim.log")
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
