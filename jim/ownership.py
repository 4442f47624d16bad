"""Whose home this is: the checks on ``$JIM_HOME``, acting as its owner, and what a detached jim inherits.

A gatekeeper host serves many local accounts, so jim trusts its home only
when it is the caller's own and nobody else can write to it:

* :func:`home_problem` says why a home must not be used (another account
  owns it, or a group or everybody can write to it), or None;
* :func:`act_as_owner` is what an administrator asks for explicitly
  (``jim --as-owner ...`` or ``JIM_AS_OWNER=1``, as root): jim switches to
  the home's owner (groups, gid, uid, ``HOME``/``USER``/``LOGNAME``) before it
  touches anything, so every file it writes is the owner's;
* :func:`detached_env` and :func:`import_path` are what a background jim
  (``python -I -m jim``, working directory ``/``) is given: a ``PATH`` and an
  import path made only of absolute directories that no other account can
  write to and that are not inside the home.

Only ``os`` is imported here: ``jim poll`` checks the home on its hot path.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing on poll's path; mypy knows the name)
if TYPE_CHECKING:
    import pwd

#: Set to 1 (or give ``--as-owner``) to let root act on a home it does not own, as that home's owner.
AS_OWNER_ENV = "JIM_AS_OWNER"
#: The parent's vetted import path, handed to a background jim (whose ``-I`` drops ``PYTHONPATH``).
IMPORT_PATH_ENV = "JIM_IMPORT_PATH"

_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def _account(uid: int) -> str:
    try:
        import pwd  # (lazy: only to name an account in an error)

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return f"uid {uid}"


def home_problem(root: str | os.PathLike[str], uid: int | None = None) -> str | None:
    """Why ``root`` must not be used as ``uid``'s jim home (one line), or None (also when it does not exist yet)."""
    uid = os.geteuid() if uid is None else uid
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"jim's home {os.fspath(root)} cannot be examined: {e.strerror}"
    import stat  # (lazy: only once the home exists)

    if not stat.S_ISDIR(st.st_mode):
        return f"jim's home {os.fspath(root)} is not a directory"
    if st.st_uid != uid:
        return (
            f"jim's home {os.fspath(root)} belongs to {_account(st.st_uid)}, not {_account(uid)} "
            f"(run jim as its owner; an administrator may add --as-owner, as root)"
        )
    if st.st_mode & 0o022:
        return (
            f"jim's home {os.fspath(root)} can be written by other accounts (mode {stat.S_IMODE(st.st_mode):04o}): "
            f"chmod 700 it"
        )
    return None


def owner_of(root: str | os.PathLike[str]) -> int | None:
    """The uid that owns an existing home, else None."""
    try:
        return os.stat(root).st_uid
    except OSError:
        return None


def act_as_owner(root: str | os.PathLike[str]) -> str | None:
    """As root, become the owner of the home ``root`` (for good); returns why not, or None when done.

    Nothing to do when the caller owns it already.  Supplementary groups,
    gid and uid (real, effective and saved) are all switched, and the
    environment's ``HOME``/``USER``/``LOGNAME`` follow, so that nothing done
    afterwards can act with root's rights or write root-owned files.
    """
    uid = owner_of(root)
    if uid is None:
        return f"jim's home {os.fspath(root)} does not exist: there is no owner to act as"
    if uid == os.geteuid():
        return None
    if os.geteuid() != 0:
        return f"only root can act as the owner of {os.fspath(root)}"
    if uid == 0:
        return None
    import pwd  # (lazy: only when an administrator acts for a user)

    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return f"jim's home {os.fspath(root)} belongs to uid {uid}, which has no account"
    become(pw)
    return None


def become(pw: pwd.struct_passwd) -> None:
    """Become the account ``pw`` for good, as root (its supplementary groups, gid and uid: real, effective
    and saved; nothing to do when this process is it already), ``HOME``/``USER``/``LOGNAME`` its own."""
    if os.geteuid() != pw.pw_uid:
        os.setgroups(os.getgrouplist(pw.pw_name, pw.pw_gid))
        os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
        os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
    os.environ.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name)


def _trusted_dir(path: str, home: str) -> bool:
    """An absolute directory outside the home that no other account can write to (nor any of its parents)."""
    if not os.path.isabs(path):
        return False
    real = os.path.realpath(path)
    if real == home or real.startswith(home.rstrip("/") + "/"):
        return False
    me = os.geteuid()
    d = real
    while True:
        try:
            st = os.stat(d)
        except OSError:
            return False
        if st.st_uid not in (0, me) or (st.st_mode & 0o022 and not st.st_mode & 0o1000):
            return False
        parent = os.path.dirname(d)
        if parent == d:
            return True
        d = parent


def vetted_import_path(home: str | os.PathLike[str], entries: list[str]) -> list[str]:
    """Those of ``entries`` a background jim may import from: the interpreter's own, and trusted directories."""
    import sys  # (lazy: poll's hot path imports this module and needs only home_problem)

    real_home = os.path.realpath(home)
    own = tuple({os.path.realpath(sys.prefix) + "/", os.path.realpath(sys.base_prefix) + "/"})
    out = []
    for p in entries:
        if not p or not os.path.isabs(p):
            continue
        if (os.path.realpath(p) + "/").startswith(own) or _trusted_dir(p, real_home):
            out.append(p)
    return list(dict.fromkeys(out))


def detached_env(home: str | os.PathLike[str], env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a background jim: ``env`` (default ours) with a vetted ``PATH`` and import path."""
    import sys  # (lazy: see vetted_import_path)

    out = dict(os.environ if env is None else env)
    real_home = os.path.realpath(home)
    out["JIM_HOME"] = os.fspath(home)
    path = [p for p in out.get("PATH", _DEFAULT_PATH).split(":") if p and _trusted_dir(p, real_home)]
    out["PATH"] = ":".join(dict.fromkeys(path)) or _DEFAULT_PATH
    out[IMPORT_PATH_ENV] = os.pathsep.join(vetted_import_path(home, sys.path))
    return out


def import_path() -> list[str]:
    """The import path a background jim was handed (see :func:`detached_env`), vetted again here."""
    value = os.environ.get(IMPORT_PATH_ENV, "")
    home = os.environ.get("JIM_HOME") or os.path.expanduser("~/.jim")
    return vetted_import_path(home, value.split(os.pathsep))
