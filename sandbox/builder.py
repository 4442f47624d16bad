"""Builds the sandbox of a grid job: one tarball that every local job unpacks.

The tarball holds ``manifest.json`` (the argv and environment of every local
job, the output patterns, the heartbeat period), ``bin/jim-progress`` and the
files the handler added through :class:`WorkArea` (``inputs/...``).  The
wrapper (``wrapper.py``) sits next to the tarball in the grid job's directory
so that a batch script can start it, with its helpers beside it: ``jimworkdir.py`` (a
local job's view of the job's directory and its declared outputs) and ``jimusage.py``
(what the job used, measured with ``os.wait4``).

Building is idempotent: the tarball is written to a temporary name and renamed
into place, so a worker killed half-way leaves either no sandbox or a whole one.

Input files are opened by :func:`open_input` (at submit, to check them, and
again here): a regular file, not through a symbolic link, not in ``/proc``,
``/sys`` or another kernel file system (whose sizes lie and whose reads may do
things).  They are copied by the bytes actually read, never trusting
``st_size``, and never more than the site's ``max_input_bytes`` in all.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import stat
import tarfile
import tempfile
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO

from jim.errors import InvalidAttribute
from jim.safeio import NotRegular, atomic_write, kind, open_regular

SANDBOX_NAME = "sandbox.tar.gz"
WRAPPER_NAME = "wrapper.py"
#: The wrapper's helper for a job's directory view and declared outputs, beside it (it imports it).
WORKDIR_NAME = "jimworkdir.py"
#: The wrapper's helper that measures what the job used (os.wait4), beside it (it imports it).
USAGE_NAME = "jimusage.py"


def _safe_arcname(name: str) -> str:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts or name.startswith("-"):
        raise InvalidAttribute(f"sandbox path {name!r} must be relative and stay inside the sandbox")
    return str(p)


def input_arcname(path: str | os.PathLike[str]) -> str:
    """Where an input file lands in the sandbox: ``inputs/<its name>``."""
    name = os.path.basename(os.fspath(path))
    if not name or name in (".", "..") or name.startswith("-"):
        raise InvalidAttribute(f"input file {_shown(os.fspath(path))} has no usable file name")
    return _safe_arcname("inputs/" + name)


#: Kernel file systems: their files are no data (sizes lie, a read may change something).
PSEUDO_FILESYSTEMS = frozenset(
    {
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "debugfs",
        "tracefs",
        "securityfs",
        "configfs",
        "bpf",
        "pstore",
        "efivarfs",
        "fusectl",
        "binfmt_misc",
        "devpts",
        "mqueue",
        "nsfs",
        "rpc_pipefs",
        "autofs",
    }
)
_PSEUDO_ROOTS = ("/proc", "/sys")


def _shown(path: str, limit: int = 200) -> str:
    text = repr(path[:limit])
    return text + f"... ({len(path)} characters)" if len(path) > limit else text


_MOUNTS: dict[int, str] | None = None


def _filesystems() -> dict[int, str]:
    """st_dev -> file system type, of every mount this process sees (from /proc/self/mountinfo, read
    once per process: a submit checks many input files)."""
    global _MOUNTS
    if _MOUNTS is None:
        _MOUNTS = _read_mountinfo()
    return _MOUNTS


def _read_mountinfo() -> dict[int, str]:
    out: dict[int, str] = {}
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            text = f.read(4 * 1024 * 1024).decode("utf-8", "replace")
    except OSError:
        return out
    for line in text.splitlines():
        fields = line.split()
        try:
            major, minor = (int(n) for n in fields[2].split(":"))
            fstype = fields[fields.index("-") + 1]
        except (IndexError, ValueError):
            continue
        out[os.makedev(major, minor)] = fstype
    return out


def open_input(path: str) -> tuple[int, os.stat_result]:
    """Open an input file as the caller: ``(fd, fstat)`` of a regular file, read-only, not followed
    through a symbolic link, not in /proc, /sys or another kernel file system; else
    :class:`InvalidAttribute` (134) with a one-line reason naming the file."""
    name = _shown(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise InvalidAttribute(f"input file {name} does not exist") from None
    except OSError as e:
        raise InvalidAttribute(f"input file {name} cannot be looked at: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidAttribute(f"input file {name} is {kind(st.st_mode)}, not a regular file")
    real = os.path.realpath(path)
    for root in _PSEUDO_ROOTS:
        if real == root or real.startswith(root + "/"):
            raise InvalidAttribute(f"input file {name} is in {root}, not a data file")
    try:
        fd, st = open_regular(path, follow=False)
    except NotRegular as e:
        raise InvalidAttribute(f"input file {name} is {e.kind}, not a regular file") from None
    except OSError as e:
        raise InvalidAttribute(f"input file {name} is not readable: {e.strerror}") from None
    try:
        fstype = _filesystems().get(st.st_dev)
        if fstype in PSEUDO_FILESYSTEMS:
            raise InvalidAttribute(f"input file {name} is on a {fstype} file system, not a data file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


class WorkArea:
    """What a handler's ``prepareWorkArea`` adds to the sandbox."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[bytes | Path, int]] = {}

    def add_bytes(self, arcname: str, data: bytes, *, executable: bool = False) -> None:
        arc = _safe_arcname(arcname)
        if arc in self.files:
            raise InvalidAttribute(f"two sandbox files named {arc!r}")
        self.files[arc] = (data, 0o700 if executable else 0o600)

    def add_file(self, path: str | os.PathLike[str], arcname: str | None = None) -> str:
        src = Path(path)
        fd, st = open_input(str(src))  # (checked now; opened again, and copied by what is read, by build)
        os.close(fd)
        arc = _safe_arcname(arcname or src.name)
        if arc in self.files:
            raise InvalidAttribute(f"two sandbox files named {arc!r}")
        self.files[arc] = (src, 0o700 if st.st_mode & 0o100 else 0o600)
        return arc

    def add_input(self, path: str | os.PathLike[str]) -> str:
        """An input file, unpacked as inputs/<name> in the local job's scratch directory."""
        return self.add_file(path, input_arcname(path))


def _add(tar: tarfile.TarFile, arcname: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(arcname)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


class _InputBudget:
    """The bytes the input files may still come to (None: no limit), of the site's ``limit``."""

    def __init__(self, limit: int | None) -> None:
        self.limit = self.left = limit

    def read(self, src: Path, spool: Path) -> tuple[IO[bytes], int, os.stat_result]:
        """An input file's bytes, as actually read from it, in an unnamed temporary file under ``spool``
        (a tar member's size comes first): (the copy, its size, the file's stat)."""
        fd, st = open_input(str(src))
        copy = tempfile.TemporaryFile(dir=spool)
        try:
            with os.fdopen(fd, "rb") as f:
                size = self._copy(f, copy, src)
        except BaseException:
            copy.close()
            raise
        copy.seek(0)
        return copy, size, st

    def _copy(self, f: IO[bytes], copy: IO[bytes], src: Path) -> int:
        left, size = self.left, 0
        while chunk := f.read(_CHUNK if left is None else min(_CHUNK, left - size + 1)):
            size += len(chunk)
            if left is not None and size > left:
                raise InvalidAttribute(
                    f"input file {_shown(str(src))}: the input files come to more than the site's limit of "
                    f"{self.limit} bytes"
                )
            copy.write(chunk)
        self.left = None if left is None else left - size
        return size


def _copy_input(tar: tarfile.TarFile, arcname: str, src: Path, mode: int, budget: _InputBudget, spool: Path) -> None:
    """Add an input file by the bytes actually read from it, within the budget."""
    copy, size, st = budget.read(src, spool)
    with copy:
        info = tarfile.TarInfo(arcname)
        info.size, info.mode, info.mtime = size, mode, int(st.st_mtime)
        tar.addfile(info, copy)


_CHUNK = 1024 * 1024


def build(
    job_dir: Path, manifest: dict[str, Any], area: WorkArea, *, max_input_bytes: int | None = None
) -> tuple[Path, Path]:
    """Write the sandbox and the wrapper into ``job_dir``; return both paths.  Input files count
    against ``max_input_bytes`` (None: no limit) by the bytes read from them."""
    job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    sandbox = job_dir / SANDBOX_NAME
    wrapper = job_dir / WRAPPER_NAME
    pkg = resources.files("jim.sandbox")
    for name in (WORKDIR_NAME, USAGE_NAME):
        helper = job_dir / name
        if not helper.exists():  # (before the wrapper: a wrapper that exists finds its helpers beside it)
            atomic_write(helper, pkg.joinpath(name).read_bytes(), mode=0o600, sync=False)
    if not wrapper.exists():
        atomic_write(wrapper, pkg.joinpath(WRAPPER_NAME).read_bytes(), mode=0o700, sync=False)
    if sandbox.exists():
        return sandbox, wrapper

    def write(raw: BinaryIO) -> None:
        budget = _InputBudget(max_input_bytes)
        with tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar:
            _add(tar, "manifest.json", json.dumps(manifest, separators=(",", ":")).encode(), 0o600)
            _add(tar, "bin/jim-progress", pkg.joinpath("jim-progress").read_bytes(), 0o700)
            for arc, (src, mode) in sorted(area.files.items()):
                if isinstance(src, Path):
                    _copy_input(tar, arc, src, mode, budget, job_dir)
                else:
                    _add(tar, arc, src, mode)

    atomic_write(sandbox, write)
    return sandbox, wrapper


def transient(error: BaseException) -> bool:
    """True when a failed build may work when tried again (a full disk or quota), not otherwise."""
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT, errno.ENOMEM)


def remove(job_dir: Path) -> None:
    """Remove a half-built sandbox (used when a build fails)."""
    for p in job_dir.glob(f".{SANDBOX_NAME}.*.tmp"):
        p.unlink(missing_ok=True)
    shutil.rmtree(job_dir / "scratch", ignore_errors=True)
