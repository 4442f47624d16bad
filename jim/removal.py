"""Removing what jim made in its home, never through a symbolic link: the one way jim deletes a tree.

A grid job's work area holds what its local jobs left (their payloads'
outputs among them), so anything may be planted there: a symbolic link to
another directory, a directory without write permission, a deep nest.  A
:class:`Remover` works only from directory file descriptors:

* each directory is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to its
  parent's descriptor, and checked to be the one ``lstat`` saw (same device and
  inode): a link is never followed, a directory swapped for a link midway is
  refused;
* a symbolic link (or any other non-directory) is unlinked itself: its target is
  never touched;
* a directory of the caller's own without the owner's rwx is given them first
  (a payload may have made one read-only), nothing else is ever changed;
* another file system mounted inside is refused, as is a nest deeper than
  :data:`MAX_DEPTH`; the refusal (:class:`Refused`) names the entry, and what was
  removed before it stays removed.

``dry_run`` removes nothing and changes nothing (it measures only).  ``freed``
counts the bytes given back to the file system: allocated blocks, of files with
no other hard link.
"""

from __future__ import annotations

import os
import stat

#: Directories deeper than this below the tree's top are refused.
MAX_DEPTH = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(OSError):
    """Something in the tree is not removed (a mount point, too deep, replaced midway): why, in one line."""


class Remover:
    """Removes entries below directory descriptors; ``freed`` adds up what they took."""

    def __init__(self, *, dry_run: bool = False) -> None:
        self.dry_run = dry_run
        self.freed = 0
        self.entries = 0

    def remove(self, dir_fd: int, name: str) -> bool:
        """Remove the entry ``name`` of the directory ``dir_fd`` and, if it is a directory, all it holds;
        False when there was nothing of that name.  :class:`OSError` (:class:`Refused` among them) when
        something could not be removed."""
        try:
            st = os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return False
        self._remove(dir_fd, name, st, st.st_dev, 0)
        return True

    def remove_all_but(self, dir_fd: int, keep: frozenset[str]) -> int:
        """Remove every entry of the directory ``dir_fd`` but those named in ``keep``; how many went."""
        gone = 0
        for name in sorted(os.listdir(dir_fd)):
            if name not in keep and self.remove(dir_fd, name):
                gone += 1
        return gone

    def _remove(self, dir_fd: int, name: str, st: os.stat_result, dev: int, depth: int) -> None:
        if stat.S_ISDIR(st.st_mode):
            self._empty(dir_fd, name, st, dev, depth)
            if not self.dry_run:
                os.rmdir(name, dir_fd=dir_fd)
        elif not self.dry_run:
            os.unlink(name, dir_fd=dir_fd)
        self.entries += 1
        if stat.S_ISDIR(st.st_mode) or st.st_nlink <= 1:
            self.freed += st.st_blocks * 512

    def _empty(self, dir_fd: int, name: str, st: os.stat_result, dev: int, depth: int) -> None:
        """Remove what the directory ``name`` (as ``st`` saw it) holds."""
        if st.st_dev != dev:
            raise Refused(f"{name}: another file system is mounted there")
        if depth >= MAX_DEPTH:
            raise Refused(f"{name}: nested deeper than {MAX_DEPTH} directories")
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise Refused(f"{name}: replaced while it was being removed")
            if not self.dry_run and now.st_uid == os.geteuid() and stat.S_IMODE(now.st_mode) & 0o700 != 0o700:
                os.fchmod(fd, stat.S_IMODE(now.st_mode) | 0o700)
            for child in os.listdir(fd):
                try:
                    child_st = os.lstat(child, dir_fd=fd)
                except FileNotFoundError:
                    continue
                self._remove(fd, child, child_st, dev, depth + 1)
        finally:
            os.close(fd)


def open_dir(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> int:
    """A descriptor of the directory ``path`` (relative to ``dir_fd`` if given), never through a final
    symbolic link (:class:`OSError` ``ELOOP`` for one, ``ENOTDIR`` for anything not a directory)."""
    return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)


def size_of(dir_fd: int, name: str) -> int:
    """The bytes the entry ``name`` of ``dir_fd`` and all it holds take (0 when it is not there)."""
    measure = Remover(dry_run=True)
    measure.remove(dir_fd, name)
    return measure.freed
