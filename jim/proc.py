"""Starting detached processes (double fork + setsid), cheaply.

Used for jim's own background processes (the worker of a grid job, the
per-user monitor) and by the fork adapter for local jobs.  Only ``os`` is
imported here: ``jim poll`` may start the monitor, and poll must stay light.
"""

from __future__ import annotations

import os
import sys


def spawn_detached(argv: list[str], *, env: dict[str, str] | None = None, cwd: str = "/",
                   stdout: str | None = None, stderr: str | None = None,
                   handshake: bool = False):
    """Start ``argv`` as the leader of a new session, reparented away from us; return its pid.

    The pid is also the process group id, so ``os.killpg(pid, sig)`` reaches
    the process and everything it started (unless they made sessions of their own).

    The new process has no controlling terminal, /dev/null as stdin, and
    ``stdout``/``stderr`` appended to the named files (else /dev/null), so
    nothing it prints can reach our stdout (the protocol channel).

    With ``handshake=True`` the new process waits, before it execs, until the
    returned ``release(go: bool)`` is called: the caller can note the pid (and
    its start time) first.  If the caller dies before releasing, the process
    exits without running anything, so a half-done launch never runs unnoticed.
    Returns ``pid`` or, with handshake, ``(pid, release)``.
    """
    env = dict(os.environ if env is None else env)
    rd, wr = os.pipe()
    if handshake:
        hs_rd, hs_wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: new session, fork again, report the grandchild's pid
        try:
            os.close(rd)
            if handshake:
                os.close(hs_wr)
            gpid = os.fork()
            if gpid == 0:  # grandchild: leader of a session and process group of its own
                try:
                    os.setsid()
                    os.close(wr)
                    if handshake:
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
                    os.execve(argv[0], argv, env)
                except BaseException:
                    pass
                os._exit(127)
            os.write(wr, str(gpid).encode())
            os._exit(0)
        except BaseException:
            os._exit(1)
    os.close(wr)
    if handshake:
        os.close(hs_rd)
    data = b""
    while True:
        chunk = os.read(rd, 64)
        if not chunk:
            break
        data += chunk
    os.close(rd)
    os.waitpid(pid, 0)
    if not data:
        if handshake:
            os.close(hs_wr)
        raise OSError(f"could not start {argv[0]}")
    gpid = int(data)
    if not handshake:
        return gpid

    def release(go: bool = True) -> None:
        try:
            os.write(hs_wr, b"1" if go else b"0")
        finally:
            os.close(hs_wr)

    return gpid, release


def jim_argv(*args: str) -> list[str]:
    """argv that runs this jim with the same interpreter: ``python -m jim ...``."""
    return [sys.executable, "-m", "jim", *args]
