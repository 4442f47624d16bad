"""Detached processes: double fork, a session of their own, nothing inherited but the environment.

One daemonizer, :func:`detach`, serves all of jim's background work: the
monitor and workers that ``jim poll`` restarts (:func:`spawn_detached`, a new
interpreter), the worker that ``jim submit`` forks with everything already
imported (:func:`detach` of a function), and the fork adapter's local jobs
(:func:`spawn_detached` with a handshake).  Only ``os`` and ``sys`` are
imported here: ``jim poll`` may start the monitor.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: poll's hot path imports this module)
if TYPE_CHECKING:
    from collections.abc import Callable


def detach(
    child: Callable[[], int],
    *,
    cwd: str = "/",
    stdout: str | None = None,
    stderr: str | None = None,
    handshake: bool = False,
) -> tuple[int, Callable[[bool], None] | None]:
    """Run ``child()`` in a grandchild that leads a new session, reparented away from us.

    Returns ``(pid, release)``.  The pid is also the process group id, so
    ``os.killpg(pid, sig)`` reaches the process and everything it started
    (unless they made sessions of their own).  The grandchild has no
    controlling terminal, /dev/null as stdin, ``stdout``/``stderr`` appended
    to the named files (else /dev/null), no other inherited file descriptor
    (above all not the protocol pipe, whose reader waits for EOF), the
    working directory ``cwd`` and umask 077; it exits with ``child()``'s
    return value (1 if it raises).

    With ``handshake=True`` the grandchild waits, before it calls ``child``,
    until ``release(go)`` is called: the caller can note the pid (and its
    start time) first.  If the caller dies before releasing, or releases with
    ``go=False``, the grandchild exits without running anything, so a half-done
    launch never runs unnoticed.  Without a handshake ``release`` is None.
    """
    rd, wr = os.pipe()
    hs_rd, hs_wr = os.pipe() if handshake else (-1, -1)
    pid = os.fork()
    if pid == 0:  # first child: fork again, report the grandchild's pid, exit
        code = 1
        try:
            os.close(rd)
            if handshake:
                os.close(hs_wr)
            gpid = os.fork()
            if gpid == 0:
                _become_detached(child, wr, hs_rd, cwd, stdout, stderr)
            os.write(wr, str(gpid).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(wr)
    if handshake:
        os.close(hs_rd)
    data = b""
    while chunk := os.read(rd, 64):
        data += chunk
    os.close(rd)
    os.waitpid(pid, 0)
    if not data:
        if handshake:
            os.close(hs_wr)
        raise OSError("could not start a detached process")
    if not handshake:
        return int(data), None

    def release(go: bool = True) -> None:
        try:
            os.write(hs_wr, b"1" if go else b"0")
        finally:
            os.close(hs_wr)

    return int(data), release


def _become_detached(
    child: Callable[[], int], wr: int, hs_rd: int, cwd: str, stdout: str | None, stderr: str | None
) -> None:
    """The grandchild's side of :func:`detach`; never returns."""
    code = 1
    try:
        os.setsid()
        _clean_signals()
        os.close(wr)
        if hs_rd >= 0:
            go = os.read(hs_rd, 1)
            os.close(hs_rd)
            if go != b"1":
                os._exit(1)
        null = os.open(os.devnull, os.O_RDWR)
        out = os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) if stdout else null
        err = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) if stderr else null
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.closerange(3, 65536)
        os.chdir(cwd)
        os.umask(0o077)
        code = child()
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _clean_signals() -> None:
    """No signal blocked, and none of those that stop or warn a job ignored: a caller may block or ignore
    them (A-REX's arched blocks nearly all), and a local job that never sees its SIGTERM cannot be cancelled
    gracefully (the wrapper passes it on, then writes its exit-code file)."""
    import signal  # (lazy: only in a detached process)

    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)


def spawn_detached(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str = "/",
    stdout: str | None = None,
    stderr: str | None = None,
    handshake: bool = False,
) -> tuple[int, Callable[[bool], None] | None]:
    """:func:`detach` of ``execve(argv, env)``: ``(pid, release)``.  A failed exec exits 127."""
    env = dict(os.environ if env is None else env)

    def execute() -> int:
        try:
            os.execve(argv[0], argv, env)
        except OSError:
            pass
        return 127

    return detach(execute, cwd=cwd, stdout=stdout, stderr=stderr, handshake=handshake)


def jim_argv(*args: str) -> list[str]:
    """argv that runs this jim with the same interpreter, isolated: ``python -I -m jim ...``.

    ``-I``: neither the working directory nor ``PYTHON*`` variables nor the
    user's site directory reach ``sys.path`` (see :mod:`jim.ownership` for
    the import path jim hands on instead)."""
    return [sys.executable, "-I", "-m", "jim", *args]
