"""What jim's wrapper leaves in a local job's directory, read back: ``jobs/<id>/local/<k>/``
(``<k>.<n>/`` for attempt n > 1).

The wrapper (``sandbox/wrapper.py``, stdlib only, on the worker node) is the
only writer; this module is the only reader on jim's side:

``started``     JSON written when the wrapper starts: host, pid, the batch id it runs under
``heartbeat``   epoch seconds, rewritten every ``heartbeat`` seconds while the job runs
``progress``    ``<phase> <done> <total>`` lines appended by the job (the last per phase counts;
                ASCII digits only, bounded; other lines are counted and ignored)
``exit_code``   written last, atomically: the job's exit code, then ``key=value`` lines (among them
                what the job used: ``cpu_user``, ``cpu_system``, ``max_rss_kb``, ``wall``, ``cores``,
                ``node``; read by :meth:`ExitFile.usage`, checked by :func:`jim.record.usage.checked`)
``stdout``, ``stderr``, ``wrapper.log``, ``outputs/``   (gathered by jim.outputs)
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jim.jobid import parse_local_dir_name
from jim.safeio import open_regular, read_at_most, read_regular

if TYPE_CHECKING:
    from jim.record.usage import Usage

#: The tail of a progress file that is read (a job that writes without end costs no more).
MAX_PROGRESS_BYTES = 64 * 1024
MAX_PHASE_NAME = 64
MAX_EXIT_BYTES = 16 * 1024
#: The exit file's keys that say what the job used (see :mod:`jim.record.usage`).
USAGE_KEYS = ("cpu_user", "cpu_system", "max_rss_kb", "wall", "cores", "node")
_EXIT_CODE = re.compile(r"-?[0-9]{1,9}", re.ASCII)
_HEARTBEAT = re.compile(rb"[0-9]{1,11}")
MAX_PROGRESS_LINE = 256
MAX_PROGRESS_LINES = 4096
MAX_PHASES = 64
# <name> <done> <total>: blanks and tabs between, ASCII digits only (at most 18: an int64)
_PROGRESS_LINE = re.compile(rb"[ \t]*([^\s]+)[ \t]+([0-9]{1,18})[ \t]+([0-9]{1,18})[ \t\r]*")


@dataclass(frozen=True)
class ExitFile:
    """The wrapper's ``exit_code`` file."""

    code: int
    info: dict[str, str]

    @property
    def succeeded(self) -> bool:
        """Exit code 0, and not because a signal (a cancel) stopped the job first."""
        return self.code == 0 and "terminated_by" not in self.info

    @property
    def wrapper_failed(self) -> bool:
        """The wrapper failed before it ran the job's command (the node's fault, not the job's)."""
        return "wrapper_error" in self.info

    def usage(self, cores: int | None = None) -> Usage | None:
        """What the job used, as the wrapper measured it (None: the wrapper wrote no measure, say it
        failed before the job ran).  Every field is checked (:func:`jim.record.usage.checked`):
        one that is malformed or absurd is None and named in ``rejected``.  ``cores``: the plan's."""
        from jim.record.usage import Source, checked  # (lazy: the record's package loads lxml; adapters import this)

        fields = {k: self.info[k] for k in USAGE_KEYS if k in self.info}
        return checked(Source.WRAPPER, fields, cores=cores) if fields else None

    @property
    def reason(self) -> str:
        """Why the job failed, in one line."""
        info = self.info
        signalled = f"killed by signal {info['signal']}" if "signal" in info else f"exit code {self.code}"
        return info.get("error") or info.get("wrapper_error") or signalled


def read_exit(local_dir: Path) -> ExitFile | None:
    """The exit-code file, or None when there is none (yet) or it is not whole."""
    data = read_regular(local_dir / "exit_code", MAX_EXIT_BYTES)
    if data is None:
        return None
    lines = data.decode(errors="replace").splitlines()
    if not lines or not _EXIT_CODE.fullmatch(lines[0].strip()):
        return None
    code = int(lines[0].strip())
    info = {}
    for line in lines[1:65]:
        key, _, value = line.partition("=")
        info[key.strip()[:64]] = value.strip()[:300]
    return ExitFile(code, info)


def has_exit(local_dir: Path) -> bool:
    try:
        return (local_dir / "exit_code").exists()
    except OSError:
        return False


def read_started(local_dir: Path) -> dict[str, Any] | None:
    """The ``started`` file, or None when there is none or it is not a JSON object."""
    data = read_regular(local_dir / "started", MAX_EXIT_BYTES)
    try:
        info = json.loads(data) if data is not None else None
    except (ValueError, RecursionError):
        return None
    return info if isinstance(info, dict) else None


def read_heartbeat(local_dir: Path) -> int | None:
    """Epoch seconds of the last heartbeat, or None."""
    data = read_regular(local_dir / "heartbeat", 64)
    text = data.strip() if data is not None else b""
    return int(text) or None if _HEARTBEAT.fullmatch(text) else None


def read_progress(local_dir: Path) -> dict[str, tuple[int, int]]:
    """Latest ``(done, total)`` per phase from the progress file (malformed lines are skipped)."""
    return read_progress_counted(local_dir)[0]


def read_progress_counted(local_dir: Path) -> tuple[dict[str, tuple[int, int]], int]:
    """Latest ``(done, total)`` per phase, and how many lines were malformed and ignored.

    Only the last :data:`MAX_PROGRESS_BYTES` of the file are read, at most
    :data:`MAX_PROGRESS_LINES` lines of them are looked at, and a line must be
    ``<name> <done> <total>``: a printable name of at most :data:`MAX_PHASE_NAME`
    characters, two numbers of ASCII digits (no sign, no other script's digits),
    at most :data:`MAX_PROGRESS_LINE` bytes in all.  At most :data:`MAX_PHASES`
    phases are kept.  Anything else in the file counts as a bad line; nothing raises.
    """
    try:
        fd, st = open_regular(local_dir / "progress", follow=False)
    except OSError:
        return {}, 0
    try:
        start = max(0, st.st_size - MAX_PROGRESS_BYTES)
        os.lseek(fd, start, os.SEEK_SET)
        data = read_at_most(fd, MAX_PROGRESS_BYTES)
    except OSError:
        return {}, 0
    finally:
        os.close(fd)
    return parse_progress(data, partial_first=start > 0)


def parse_progress(data: bytes, *, partial_first: bool = False) -> tuple[dict[str, tuple[int, int]], int]:
    """:func:`read_progress_counted` on the bytes read; ``partial_first``: the first line may be cut."""
    lines = data[:MAX_PROGRESS_BYTES].split(b"\n")
    if partial_first and lines:
        lines = lines[1:]  # the file was read from the middle of a line
    if lines and not lines[-1]:
        lines.pop()
    bad = max(0, len(lines) - MAX_PROGRESS_LINES)
    phases: dict[str, tuple[int, int]] = {}
    for raw in lines[-MAX_PROGRESS_LINES:]:
        found = _progress_line(raw)
        if found is None or (found[0] not in phases and len(phases) >= MAX_PHASES):
            bad += 1
            continue
        name, done, total = found
        phases[name] = (done, total)
    return phases, bad


def _progress_line(raw: bytes) -> tuple[str, int, int] | None:
    if len(raw) > MAX_PROGRESS_LINE:
        return None
    m = _PROGRESS_LINE.fullmatch(raw)
    if m is None:
        return None
    try:
        name = m.group(1).decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(name) > MAX_PHASE_NAME or not name.isprintable():
        return None
    return name, int(m.group(2)), int(m.group(3))


def started_dirs(local_root: Path) -> dict[tuple[int, int], tuple[int, int]]:
    """Attempts of local jobs whose wrapper has started (their directory exists):
    (index, attempt) -> (dir mtime, progress mtime).

    One ``scandir`` per grid job instead of three failed opens per local job
    that has not started yet (thousands, while a big grid job waits in the queue).
    """
    out: dict[tuple[int, int], tuple[int, int]] = {}
    try:
        entries = list(os.scandir(local_root))
    except OSError:  # none yet, or not a directory jim can read: no wrapper has started there
        return out
    for e in entries:
        key = parse_local_dir_name(e.name)
        if key is None:
            continue
        try:
            d = e.stat().st_mtime_ns
            try:
                p = os.stat(os.path.join(e.path, "progress")).st_mtime_ns
            except OSError:
                p = 0
        except OSError:
            continue
        out[key] = (d, p)
    return out
