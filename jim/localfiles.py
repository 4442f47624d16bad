"""What jim's wrapper leaves in a local job's directory, ``jobs/<id>/local/<k>/``, read back.

The wrapper (``sandbox/wrapper.py``, stdlib only, on the worker node) is the
only writer; this module is the only reader on jim's side:

``started``     JSON written when the wrapper starts: host, pid, the batch id it runs under
``heartbeat``   epoch seconds, rewritten every ``heartbeat`` seconds while the job runs
``progress``    ``<phase> <done> <total>`` lines appended by the job (the last per phase counts)
``exit_code``   written last, atomically: the job's exit code, then ``key=value`` lines
``stdout``, ``stderr``, ``wrapper.log``, ``outputs/``   (gathered by jim.outputs)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The tail of a progress file that is read (a job that writes without end costs no more).
MAX_PROGRESS_BYTES = 64 * 1024
MAX_PHASE_NAME = 64


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
    def reason(self) -> str:
        """Why the job failed, in one line."""
        info = self.info
        signalled = f"killed by signal {info['signal']}" if "signal" in info else f"exit code {self.code}"
        return info.get("error") or info.get("wrapper_error") or signalled


def read_exit(local_dir: Path) -> ExitFile | None:
    """The exit-code file, or None when there is none (yet) or it is not whole."""
    try:
        text = (local_dir / "exit_code").read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    lines = text.splitlines()
    if not lines:
        return None
    try:
        code = int(lines[0].strip())
    except ValueError:
        return None
    info = {}
    for line in lines[1:]:
        key, _, value = line.partition("=")
        info[key.strip()] = value.strip()
    return ExitFile(code, info)


def has_exit(local_dir: Path) -> bool:
    return (local_dir / "exit_code").exists()


def read_started(local_dir: Path) -> dict[str, Any] | None:
    """The ``started`` file, or None when there is none or it is not a JSON object."""
    try:
        info = json.loads((local_dir / "started").read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def read_heartbeat(local_dir: Path) -> int | None:
    """Epoch seconds of the last heartbeat, or None."""
    try:
        return int((local_dir / "heartbeat").read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def read_progress(local_dir: Path) -> dict[str, tuple[int, int]]:
    """Latest ``(done, total)`` per phase from the progress file (malformed lines are skipped)."""
    try:
        with open(local_dir / "progress", "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - MAX_PROGRESS_BYTES))
            data = f.read().decode(errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return {}
    phases: dict[str, tuple[int, int]] = {}
    for line in data.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        name, done, total = parts
        if not (done.isdigit() and total.isdigit()) or len(name) > MAX_PHASE_NAME:
            continue
        phases[name] = (int(done), int(total))
    return phases


def started_dirs(local_root: Path) -> dict[int, tuple[int, int]]:
    """Local jobs whose wrapper has started (their directory exists): index -> (dir mtime, progress mtime).

    One ``scandir`` per grid job instead of three failed opens per local job
    that has not started yet (thousands, while a big grid job waits in the queue).
    """
    out: dict[int, tuple[int, int]] = {}
    try:
        entries = list(os.scandir(local_root))
    except FileNotFoundError:
        return out
    for e in entries:
        if not e.name.isdigit():
            continue
        try:
            d = e.stat().st_mtime_ns
            try:
                p = os.stat(os.path.join(e.path, "progress")).st_mtime_ns
            except FileNotFoundError:
                p = 0
        except FileNotFoundError:
            continue
        out[int(e.name)] = (d, p)
    return out
