"""The files jim's installers put into the system, as root: one way for ``jim gram-install`` and ``jim arc-install``.

Both installers write files that the gatekeeper and the mapped users read
(Perl modules, shims, service entries, configuration), and both must be safe
to run again.  :meth:`RootFiles.install` is how each such file is written:

* a file that already holds the content with the mode is left alone and said
  ``unchanged  <path>``; anything else is said ``install    <path> (mode
  0644)`` and counted in :attr:`RootFiles.changed`;
* the new file is written whole (:func:`jim.safeio.atomic_write`, the mode
  exactly as given, whatever the umask: jim runs under 077); missing parent
  directories are created 0755 (:func:`system_dirs`), so that the mapped
  users' processes can reach what is installed there;
* with a ``marker`` (``jim arc-install``), a file at the path that is not
  jim's, i.e. not a regular file holding the marker line
  (:func:`carries_marker`), is refused with :class:`InstallError` unless
  ``force`` is given; an uninstall removes only files that carry it;
* in dry-run mode (``jim gram-install --dry-run``) every line is said with a
  ``[dry run]`` prefix and nothing is written.

Lines go to ``out`` (standard output unless given: ``jim arc-install`` says
them on standard error, where its arc.conf blocks are not).  Something the
admin has to fix is an :class:`InstallError`, whose message says what.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TextIO

from jim.safeio import atomic_write

#: A file larger than this is never jim's (the marker is not looked for).
MAX_MARKED_BYTES = 1024 * 1024


class InstallError(Exception):
    """Something the admin has to fix; the message says what."""


def not_root(command: str, root: str | os.PathLike[str], root_option: str, dry_run: bool) -> str | None:
    """Why ``jim <command>`` may not run as it is asked (it would change the system's files, and this is
    not root), or None: a dry run, an install below another ``root`` and root itself may."""
    if Path(root) != Path("/") or os.geteuid() == 0 or dry_run:
        return None
    return f"jim {command} changes system files: run it as root (or try --dry-run, or {root_option} DIR)"


def system_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents 0755 whatever the umask (jim runs under 0077): the mapped
    users' job managers must reach what is installed there."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for d in reversed(missing):
        d.mkdir()
        os.chmod(d, 0o755)


def carries_marker(path: Path, marker: str) -> bool:
    """Whether ``path`` is jim's: a regular file (not a symbolic link), not too large, holding ``marker``."""
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MARKED_BYTES:
            return False
        return marker in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def holds(path: Path, content: str, mode: int) -> bool:
    """Whether ``path`` is a regular file (not a symbolic link) with ``content`` and ``mode``."""
    if not path.is_file() or path.is_symlink():
        return False
    same = path.read_text(encoding="utf-8", errors="replace") == content
    return same and stat.S_IMODE(path.stat().st_mode) == mode


class RootFiles:
    """Writes (or, in dry-run mode, describes) root-owned files idempotently, counting the changes."""

    def __init__(self, *, dry_run: bool = False, out: TextIO | None = None):
        self.dry_run = dry_run
        self.out = out
        self.changed = 0

    def say(self, message: str) -> None:
        """One line of what is (or would be) done."""
        print(("[dry run] " if self.dry_run else "") + message, file=self.out)

    def install(self, path: Path, content: str, mode: int, *, marker: str | None = None, force: bool = False) -> bool:
        """Make ``path`` hold ``content`` with ``mode``; True when it changed (or would).

        With ``marker``, a file there that is not jim's is an :class:`InstallError` unless ``force``."""
        if marker is not None and (path.is_symlink() or path.exists()) and not carries_marker(path, marker):
            if not force:
                raise InstallError(f"{path} exists and is not jim's (no marker line): remove it, or give --force")
        elif holds(path, content, mode):
            self.say(f"unchanged  {path}")
            return False
        self.changed += 1
        self.say(f"install    {path} (mode {mode:04o})")
        if not self.dry_run:
            system_dirs(path.parent)
            atomic_write(path, content, mode=mode)
        return True

    def remove_marked(self, path: Path, marker: str) -> bool:
        """Remove ``path`` when it is jim's (carries ``marker``); a file without it is kept and said so.
        True when it was removed."""
        if not (path.exists() or path.is_symlink()):
            return False
        if not carries_marker(path, marker):
            self.say(f"kept       {path} (not jim's: no marker line)")
            return False
        self.changed += 1
        self.say(f"remove     {path}")
        if not self.dry_run:
            path.unlink()
        return True
