"""Builds the sandbox of a grid job: one tarball that every local job unpacks.

The tarball holds ``manifest.json`` (the argv and environment of every local
job, the output patterns, the heartbeat period), ``bin/jim-progress`` and the
files the handler added through :class:`WorkArea` (``inputs/...``).  The
wrapper (``wrapper.py``) sits next to the tarball in the grid job's directory
so that a batch script can start it.

Building is idempotent: the tarball is written to a temporary name and renamed
into place, so a worker killed half-way leaves either no sandbox or a whole one.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from jim.errors import InvalidAttribute

SANDBOX_NAME = "sandbox.tar.gz"
WRAPPER_NAME = "wrapper.py"


def _safe_arcname(name: str) -> str:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts or name.startswith("-"):
        raise InvalidAttribute(f"sandbox path {name!r} must be relative and stay inside the sandbox")
    return str(p)


class WorkArea:
    """What a handler's ``prepareWorkArea`` adds to the sandbox."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[bytes | Path, int]] = {}

    def add_bytes(self, arcname: str, data: bytes, *, executable: bool = False) -> None:
        arc = _safe_arcname(arcname)
        if arc in self.files:
            raise InvalidAttribute(f"two sandbox files named {arc!r}")
        self.files[arc] = (data, 0o700 if executable else 0o600)

    def add_file(self, path: str | os.PathLike, arcname: str | None = None) -> str:
        src = Path(path)
        if not src.is_file():
            raise InvalidAttribute(f"input file {str(src)!r} does not exist or is not a regular file", gram_error=135)
        if not os.access(src, os.R_OK):
            raise InvalidAttribute(f"input file {str(src)!r} is not readable", gram_error=135)
        arc = _safe_arcname(arcname or src.name)
        if arc in self.files:
            raise InvalidAttribute(f"two sandbox files named {arc!r}")
        self.files[arc] = (src, 0o700 if os.access(src, os.X_OK) else 0o600)
        return arc

    def add_input(self, path: str | os.PathLike) -> str:
        """An input file, unpacked as inputs/<name> in the local job's scratch directory."""
        return self.add_file(path, "inputs/" + Path(path).name)


def _add(tar: tarfile.TarFile, arcname: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(arcname)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def build(job_dir: Path, manifest: dict[str, Any], area: WorkArea) -> tuple[Path, Path]:
    """Write the sandbox and the wrapper into ``job_dir``; return both paths."""
    job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    sandbox = job_dir / SANDBOX_NAME
    wrapper = job_dir / WRAPPER_NAME
    pkg = resources.files("jim.sandbox")
    if not wrapper.exists():
        tmpw = job_dir / f".{WRAPPER_NAME}.tmp"
        tmpw.write_bytes(pkg.joinpath(WRAPPER_NAME).read_bytes())
        tmpw.chmod(0o700)
        os.replace(tmpw, wrapper)
    if sandbox.exists():
        return sandbox, wrapper
    tmp = job_dir / f".{SANDBOX_NAME}.{os.getpid()}.tmp"
    with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
        _add(tar, "manifest.json", json.dumps(manifest, separators=(",", ":")).encode(), 0o600)
        _add(tar, "bin/jim-progress", pkg.joinpath("jim-progress").read_bytes(), 0o700)
        for arc, (src, mode) in sorted(area.files.items()):
            if isinstance(src, Path):
                with open(src, "rb") as f:
                    info = tar.gettarinfo(fileobj=f, arcname=arc)
                    info.mode, info.uid, info.gid, info.uname, info.gname = mode, 0, 0, "", ""
                    tar.addfile(info, f)
            else:
                _add(tar, arc, src, mode)
    os.chmod(tmp, 0o600)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, sandbox)
    return sandbox, wrapper


def remove(job_dir: Path) -> None:
    """Remove a half-built sandbox (used when a build fails)."""
    for p in job_dir.glob(f".{SANDBOX_NAME}.*.tmp"):
        p.unlink(missing_ok=True)
    shutil.rmtree(job_dir / "scratch", ignore_errors=True)
