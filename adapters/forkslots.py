"""The fork backend's core slots, and the launcher each of its local jobs starts as.

A host runs at most as many local jobs at once as it has cores: each core is a
**slot file** (``core.0`` ... ``core.<N-1>``) in a slot directory, and a local
job of c cores holds an exclusive ``flock`` on c of them while it runs.  The
kernel releases a lock when the last descriptor of it closes, so a job that
is killed, however, never leaks its slots.

A local job of the fork backend starts as this module (``python -I -m
jim.adapters.forkslots ... -- <wrapper argv>``), the leader of its own session
with the job's ``JIM_TAG``.  It waits for its slots (one waiter at a time takes
slots, holding the ``gate`` lock, so that a job of many cores is not overtaken
for ever by jobs of one), starts the memory watch when the job has a memory
limit (:mod:`jim.adapters.forkmemory`), and then *becomes* jim's wrapper
(``exec``: same pid, same start time, so the batch id stays), which holds the
slots until it ends.  While it waits it is a local job QUEUED: a cancel's
SIGTERM ends it, and nothing of it is left.

Whose slots: by default the directory is ``fork/slots`` under jim's home,
private to its account (the host's cores shared by that account's local
jobs).  A site whose fork host serves many accounts can name one directory
for them all (``slots``): jim then creates no file there and uses the
``core.*`` files an administrator made (owned by root, readable by all, in a
directory only root may write), so that nobody can remove or replace them; a
lock lasts only as long as the process that holds it, so an account blocks
slots only with processes of its own that run.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path

#: The module a local job starts as (``python -I -m`` it).
MODULE = "jim.adapters.forkslots"
#: How often (seconds) the waiter that holds the gate looks again for free slots.
POLL = 0.2
GATE = "gate"


def slot_name(k: int) -> str:
    return f"core.{k}"


class Slots:
    """The ``count`` core slots of a slot directory."""

    def __init__(self, directory: Path, count: int):
        self.directory, self.count = directory, count
        try:
            st = directory.stat()
            self.own = st.st_uid == os.getuid()
            self.mode = 0o600 if not st.st_mode & 0o077 else 0o444  # (a directory others may enter: theirs to lock too)
        except OSError:
            self.own, self.mode = False, 0o600

    def open(self, name: str) -> int | None:
        """A descriptor of the slot file ``name`` (made in a directory of our own); None when
        there is none to use (missing in a shared directory, not a regular file, not readable)."""
        path = self.directory / name
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(path, flags | (os.O_CREAT if self.own else 0), self.mode)
        except OSError:
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd

    def usable(self) -> int:
        """How many slot files there are to lock."""
        found = 0
        for k in range(self.count):
            fd = self.open(slot_name(k))
            if fd is not None:
                found += 1
                os.close(fd)
        return found

    def free(self) -> int:
        """How many slots no local job holds now (each looked at with a lock tried and let go)."""
        free = 0
        for k in range(self.count):
            fd = self.open(slot_name(k))
            if fd is None:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free += 1
            except OSError:
                pass
            finally:
                os.close(fd)
        return free

    def take(self, cores: int) -> list[int]:
        """Wait for ``cores`` free slots and lock them; their descriptors (closing them frees the slots)."""
        gate = self.open(GATE)
        if gate is None:
            raise OSError(errno.ENOENT, f"no slot gate in {self.directory}")
        held: list[int] = []
        taken: set[int] = set()
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)  # (one waiter at a time takes slots: no two starve each other)
            while len(held) < cores:
                for k in range(self.count):
                    if k in taken or len(held) >= cores:
                        continue
                    fd = self.open(slot_name(k))
                    if fd is None:
                        continue
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        os.close(fd)
                        continue
                    held.append(fd)
                    taken.add(k)
                if len(held) < cores:
                    time.sleep(POLL)
        except BaseException:
            for fd in held:
                os.close(fd)
            raise
        finally:
            os.close(gate)
        return held


@dataclass(frozen=True)
class Launch:
    """What a local job's launcher is told: its slots, and its memory limit with where to record it."""

    slots: Path
    count: int
    cores: int
    memory_mb: int | None
    ended: Path
    cgroup: str
    outdir: Path

    def argv(self, python: str, wrapper: list[str]) -> list[str]:
        """The argv a local job starts with: this module, then (after ``--``) the wrapper's."""
        argv = [python, "-I", "-m", MODULE, "--slots", str(self.slots), "--count", str(self.count)]
        argv += ["--cores", str(self.cores)]
        if self.memory_mb:
            argv += ["--memory", str(self.memory_mb), "--ended", str(self.ended), "--outdir", str(self.outdir)]
            argv += ["--cgroup", self.cgroup]
        return [*argv, "--", *wrapper]


def wrapper_of(argv: list[bytes]) -> list[bytes] | None:
    """The wrapper's argv in a launcher's argv (read from ``/proc``), or None when it is no launcher."""
    if argv[1:4] != [b"-I", b"-m", MODULE.encode()] or b"--" not in argv:
        return None
    return argv[argv.index(b"--") + 1 :]


def _options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    cut = argv.index("--")
    opts: dict[str, str] = {}
    it = iter(argv[:cut])
    for key in it:
        opts[key.lstrip("-")] = next(it)
    return opts, argv[cut + 1 :]


def main(argv: list[str]) -> int:
    """Wait for the slots, start the memory watch, become the wrapper (see the module docstring)."""
    opts, wrapper = _options(argv)
    held = Slots(Path(opts["slots"]), int(opts["count"])).take(int(opts["cores"]))
    if "memory" in opts:
        _watch(opts)
    for fd in held:
        os.set_inheritable(fd, True)  # (the wrapper holds the slots: they end with it)
    os.execv(wrapper[0], wrapper)
    return 127


def _watch(opts: dict[str, str]) -> None:
    """Start the memory watch of this local job in a child process (not counted, not in the job's cgroup)."""
    import psutil  # (lazy: only a job with a memory limit needs it)

    from jim.adapters import forkmemory  # (lazy: only a job with a memory limit needs it)

    me = os.getpid()
    batch_id = f"{me}:{psutil.Process(me).create_time():.3f}"
    memory = int(opts["memory"])
    group = forkmemory.make_cgroup(Path(opts["cgroup"]), batch_id, memory) if opts.get("cgroup") else None
    watch = forkmemory.Watch(
        me, batch_id, os.environ.get("JIM_TAG", ""), memory, Path(opts["ended"]), Path(opts["outdir"])
    )
    if os.fork() == 0:
        code = 0
        try:
            watch.run(group)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    if group is not None:
        forkmemory.join_cgroup(group)  # (if it cannot, the watch finds the job outside and watches it by RSS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
