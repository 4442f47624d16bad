"""The site's drain switch: while root's flag file is there, every front end refuses new grid jobs.

Before a downtime an administrator runs ``jim drain on --reason "..."`` (as
root): from then on ``jim submit``, ARC's submit step and BLAH's submit step
refuse every new grid job with ``the site is draining: <reason>``
(:class:`SiteDraining`, GRAM error 3 ``NO_RESOURCES``), before any planning
and with nothing recorded, while the grid jobs already there go on: their
workers, the monitor, polls, cancels, retries, resubmits and the output tars
never look at the switch.  ``jim drain off`` accepts again; ``jim drain
status`` and ``jim doctor`` say which.

The state is one flag file, ``[site] drain_file`` (default
:data:`DEFAULT_FILE`), the same for every account of the host.  Only a flag
file root made counts: a regular file (not a symbolic link, never followed),
owned by uid 0, not writable by its group or others, with one link.  Anything
else at that path is ignored, with one line in jim's log saying why: no
account but root can drain a site, nor keep it drained.  Its content is an
optional reason, one line (at most :data:`MAX_REASON` characters of it are
used).

Checking costs one ``lstat`` on the submit path (:func:`check`): the file is
opened only when it is there and counts, to read the reason.  ``jim poll``
never loads this module.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass

from jim.errors import GramError, JimError
from jim.safeio import NotRegular, atomic_write, kind, open_regular, read_at_most
from jim.timestamps import now_iso

#: Where the flag file is when ``[site] drain_file`` does not say.
DEFAULT_FILE = "/etc/jim/drain"
#: Characters of the reason a refusal carries, at most.
MAX_REASON = 200
#: Bytes of the flag file read, at most (the reason is its first line).
MAX_READ = 4096
#: A refusal's reason when the flag file gives none.
NO_REASON = "new grid jobs are not accepted now"

_log = logging.getLogger("jim.drain")
_logged: set[str] = set()  # (the flag files whose being ignored this process logged: ARC's submit checks twice)


class SiteDraining(JimError):
    """A new grid job refused while the site drains (GRAM's ``NO_RESOURCES``: try another site, or later)."""

    gram_error = GramError.NO_RESOURCES


@dataclass(frozen=True)
class State:
    """What the flag file at ``path`` says."""

    path: str
    drained: bool = False
    reason: str = ""
    """The flag file's reason ("" when it gives none or cannot be read)."""
    since: float | None = None
    """When the flag file was written (its modification time)."""
    ignored: str = ""
    """Why something at ``path`` does not count ("it is a symbolic link" ...); "" when nothing is ignored."""

    def refusal(self) -> str:
        """The one line a refused submit carries."""
        return f"the site is draining: {self.reason or NO_REASON}"

    def describe(self) -> str:
        """One line for ``jim drain status`` and ``jim doctor``."""
        if self.drained:
            return f"draining since {now_iso(self.since)}: {self.reason or '(no reason given)'} ({self.path})"
        if self.ignored:
            return f"accepting new grid jobs: {self.path} is ignored: {self.ignored}"
        return f"accepting new grid jobs (no {self.path})"


def look(path: str) -> State:
    """The drain state: one ``lstat`` of ``path``, and when a flag file counts, its reason read."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return State(path)
    except OSError as e:
        return State(path, ignored=f"it cannot be examined: {e.strerror}")
    why = _unfit(st)
    if why:
        return State(path, ignored=why)
    return State(path, drained=True, reason=_reason(path), since=st.st_mtime)


def check(path: str) -> None:
    """Raise :class:`SiteDraining` when the site drains; log a flag file that does not count (once a process)."""
    state = look(path)
    if state.ignored and path not in _logged:
        _logged.add(path)
        _log.warning("the drain flag file %s is ignored: %s", path, state.ignored)
    if state.drained:
        raise SiteDraining(state.refusal())


def _unfit(st: os.stat_result) -> str:
    """Why a file of ``st`` is not root's flag file ("" when it is)."""
    if not stat.S_ISREG(st.st_mode):
        return f"it is {kind(st.st_mode)}, not a regular file"
    if st.st_uid != 0:
        return f"it is owned by uid {st.st_uid}, not root"
    if st.st_mode & 0o022:
        return f"its group or others can write it (mode {stat.S_IMODE(st.st_mode):04o})"
    if st.st_nlink != 1:
        return f"it has {st.st_nlink} hard links"
    return ""


def _reason(path: str) -> str:
    """The flag file's first line, made printable and bounded; "" when it cannot be read."""
    try:
        fd, st = open_regular(path, follow=False)
    except (OSError, NotRegular):
        return ""
    try:
        if _unfit(st):  # (replaced since the lstat: drained still, its words not trusted)
            return ""
        data = read_at_most(fd, MAX_READ)
    except OSError:
        return ""
    finally:
        os.close(fd)
    line = data.split(b"\n", 1)[0].decode("utf-8", "replace")
    return " ".join("".join(c if c.isprintable() else " " for c in line).split())[:MAX_REASON]


# ---- jim drain on | off (root's)


def turn_on(path: str, reason: str) -> State:
    """Write root's flag file with ``reason`` (one printable line, at most :data:`MAX_REASON` characters)."""
    _need_root("on")
    if not reason.isprintable():
        raise JimError("--reason must be one line of printable characters")
    words = " ".join(reason.split())
    if len(words) > MAX_REASON:
        raise JimError(f"--reason is longer than {MAX_REASON} characters")
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        try:
            os.makedirs(parent)
            os.chmod(parent, 0o755)  # (every account looks for the flag file there)
        except OSError as e:
            raise JimError(f"cannot create {parent} for the drain flag file: {e.strerror}") from None
    try:
        atomic_write(path, f"{words}\n" if words else "", mode=0o644)
    except OSError as e:
        raise JimError(f"cannot write the drain flag file {path}: {e.strerror}") from None
    _log.warning("the site drains from now on: %s (%s)", words or "no reason given", path)
    return look(path)


def turn_off(path: str) -> State:
    """Remove root's flag file (a symbolic link there is removed, never followed)."""
    _need_root("off")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise JimError(f"cannot remove the drain flag file {path}: {e.strerror}") from None
    else:
        _log.warning("the site accepts new grid jobs again (%s removed)", path)
    return look(path)


def _need_root(action: str) -> None:
    if os.geteuid() != 0:
        raise JimError(f"jim drain {action} must be run as root (only a flag file root owns drains the site)")
