"""Files jim reads that someone else may have planted, and files jim writes whole.

**Reading** (opened without waiting, regular files only, bounded).

A wrapper's progress file, a description file, a secret file, an input file:
any of them may be a FIFO (opening it would wait for a writer for ever), a
device or a directory, or grow while it is read.  :func:`open_regular` opens
read-only with ``O_NONBLOCK`` (a FIFO never blocks the open), optionally
without following a final symbolic link, and refuses anything but a regular
file; :func:`read_at_most` and :func:`read_regular` never read past a limit.

**Writing** (:func:`atomic_write`, the one way jim replaces a file): readers
see the old file or the new one, whole, never a half-written one.  The new
content goes into a temporary file beside the target, created exclusively
under a name nobody can have prepared (``O_EXCL | O_NOFOLLOW``: never an
existing file, never through a symbolic link), given its mode, optionally
``fsync``'d, then renamed over the target; on any failure the temporary file
is removed and the target is as it was.

Only ``os`` and ``stat`` are imported: the monitor reads wrapper files on
every pass.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: see above)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def kind(mode: int) -> str:
    """What a file of ``mode`` is, for a message (``a FIFO``, ``a directory``, ...)."""
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


class NotRegular(OSError):
    """The path names something other than a regular file (``kind`` says what)."""

    def __init__(self, kind: str):
        super().__init__(f"is {kind}, not a regular file")
        self.kind = kind


def open_regular(path: str | os.PathLike[str], *, follow: bool = True) -> tuple[int, os.stat_result]:
    """``(fd, fstat)`` of the regular file ``path``, opened read-only without waiting (and with
    ``follow=False`` not through a final symbolic link); :class:`NotRegular` for anything else,
    :class:`OSError` as the system says.  The caller closes the fd."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(kind(st.st_mode))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_at_most(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd`` (fewer at the end of the file)."""
    parts: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(1 << 20, limit - size))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


def read_regular(path: str | os.PathLike[str], limit: int, *, follow: bool = False) -> bytes | None:
    """At most ``limit`` bytes of the regular file ``path``, or None when it is not one or cannot be read."""
    try:
        fd, _st = open_regular(path, follow=follow)
    except OSError:
        return None
    try:
        return read_at_most(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def atomic_write(
    path: str | os.PathLike[str],
    content: bytes | str | Callable[[BinaryIO], None],
    *,
    mode: int = 0o600,
    sync: bool = True,
    owner: tuple[int, int] | None = None,
) -> None:
    """Replace ``path`` with ``content`` (bytes, text written as UTF-8, or a function that writes into
    the open file) so that readers see the old or the new file, whole.

    ``mode`` is the new file's mode exactly (not reduced by the umask); ``owner`` (uid, gid): the new
    file's, set before it is renamed in (root writing a file of another account).  ``sync=False`` skips the
    ``fsync``: for caches that may be lost in a crash, never for a record.  A symbolic link at
    ``path`` is replaced, not followed.
    """
    target = os.fspath(path)
    head, name = os.path.split(target)
    tmp = os.path.join(head, f".{name[:64]}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(content, bytes):
                f.write(content)
            elif isinstance(content, str):
                f.write(content.encode())
            else:
                content(f)
            f.flush()
            if owner is not None:
                os.fchown(f.fileno(), *owner)
            os.fchmod(f.fileno(), mode)
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def disk_key(path: str | os.PathLike[str], missing: bool = False) -> tuple[int, int, int] | None:
    """What tells one version of a record file from another: a new version is a new file (atomic
    replace), so a new inode, whatever the clock's resolution."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if missing:
            return None
        raise
    return (st.st_ino, st.st_size, st.st_mtime_ns)
