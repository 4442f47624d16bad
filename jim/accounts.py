"""Every account's jim home, and work done in one of them as its account: root's commands over all homes.

``jim purge --all-users`` (and any command of root's that goes through every
user's home) finds the homes here and never opens anything in one with root's
rights:

* :func:`homes` lists, for every account the system can enumerate
  (``getpwall``), the jim home a pattern names: ``[jim] home`` as written
  (``$USER``, ``~``; empty: ``~/.jim``) or a ``--homes`` pattern (``{user}``,
  ``{home}``, as ``jim serve --site`` reads it), or a glob of homes, each its
  owner's (``/home/*/.jim``).  Homes that are not there are
  left out; one that is not the account's own and private to it is named with the
  reason (:func:`jim.ownership.home_problem`), never used;
* :func:`as_account` runs a piece of work in a forked child that becomes the
  account first (supplementary groups, gid, uid: real, effective and saved; for
  good; ``HOME``/``USER``/``LOGNAME``), checks the home again as the account,
  and hands back the work's JSON answer through a pipe (bounded by
  :data:`MAX_ANSWER`).  Whatever the child raises comes back as a one-line
  :class:`AccountError`.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
from collections.abc import Callable, Iterator

from jim.ownership import become, home_problem
from jim.safeio import read_at_most

#: A child's answer read, at most.
MAX_ANSWER = 64 * 1024 * 1024

#: What a piece of work gives back (JSON data).
Answer = dict[str, object]


class AccountError(Exception):
    """The work for one account failed: why, in one line."""


def home_of(pattern: str, pw: pwd.struct_passwd) -> str:
    """The account ``pw``'s jim home from ``pattern`` (see the module docstring)."""
    path = (pattern or "~/.jim").replace("$USER", pw.pw_name).replace("{user}", pw.pw_name)
    path = path.replace("{home}", pw.pw_dir.rstrip("/") or "/")
    if path == "~" or path.startswith("~/"):
        path = pw.pw_dir.rstrip("/") + path[1:]
    return path


def homes(pattern: str) -> Iterator[tuple[pwd.struct_passwd, str, str | None]]:
    """(account, its home, why it must not be used or None) of every home ``pattern`` names: with
    ``{user}``, ``{home}``, ``$USER`` or ``~`` (or empty: ``~/.jim``), one per account whose home is
    there, a home named by several accounts once, with the first (lowest uid); otherwise a glob, each
    home's account its owner's."""
    if pattern and not any(mark in pattern for mark in ("{user}", "{home}", "$USER", "~")):
        yield from _glob_homes(pattern)
        return
    seen: set[str] = set()
    for pw in sorted(pwd.getpwall(), key=lambda p: (p.pw_uid, p.pw_name)):
        root = home_of(pattern, pw)
        if root in seen or not os.path.isabs(root) or not os.path.lexists(root):
            continue
        seen.add(root)
        yield pw, root, home_problem(root, pw.pw_uid)


def _glob_homes(pattern: str) -> Iterator[tuple[pwd.struct_passwd, str, str | None]]:
    for path in sorted(glob.glob(pattern)):
        try:
            pw = pwd.getpwuid(os.stat(path).st_uid)
        except (OSError, KeyError):
            continue
        yield pw, path, home_problem(path, pw.pw_uid)


def as_account(pw: pwd.struct_passwd, root: str, work: Callable[[], Answer]) -> Answer:
    """``work()`` in a child that is the account ``pw`` and has checked ``root`` is its own home;
    its answer.  :class:`AccountError` when the child failed, with why."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child: the tests see it through its answer)
        os.close(r)
        status = 1
        try:
            become(pw)
            why = home_problem(root)
            answer: Answer = {"error": why} if why is not None else work()
            status = 0
        except BaseException as e:
            answer = {"error": " ".join(f"{type(e).__name__}: {e}".split())[:300]}
        try:
            data = json.dumps(answer).encode()
            while data:
                data = data[os.write(w, data) :]
        finally:
            os._exit(status)
    os.close(w)
    try:
        raw = read_at_most(r, MAX_ANSWER)
    finally:
        os.close(r)
        _pid, wstatus = os.waitpid(pid, 0)
    try:
        answer = json.loads(raw) if raw else {"error": f"exit status {os.waitstatus_to_exitcode(wstatus)}"}
    except ValueError:
        raise AccountError(f"as {pw.pw_name}: an answer that is not JSON") from None
    if not isinstance(answer, dict):
        raise AccountError(f"as {pw.pw_name}: an answer that is not an object")
    if "error" in answer:  # (the account may have tampered with its child: one printable line, bounded)
        why = "".join(c if c.isprintable() else "?" for c in " ".join(str(answer["error"]).split()))[:300]
        raise AccountError(f"as {pw.pw_name}: {why}")
    return answer
