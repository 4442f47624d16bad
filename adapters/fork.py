"""The embedded fork backend: local jobs as detached process groups on this host.

No batch system needed.  Each local job is jim's wrapper started in a session
of its own (so it outlives the jim call that started it), identified by
``<pid>:<start time>`` so that a reused pid is never mistaken for it.

* submit: start the wrappers (the pid and start time are noted before the
  wrapper may run, see :func:`jim.proc.detach`'s handshake);
* query: a local job runs while a process with that pid *and* that start
  time is alive (and not a zombie); otherwise it is absent, and the wrapper's
  exit-code file tells how it ended;
* cancel: SIGTERM to the process group and to every process of this uid that
  carries the local job's ``JIM_TAG`` (those that left the wrapper's session
  with ``setsid`` or a double fork too), SIGKILL to whatever is left of them
  after the grace period, until no process with that tag is found.  The tag
  is read from the live wrapper's environment: processes a local job leaves
  behind after its wrapper has ended are not looked for;
* find by tag: a live wrapper (a session leader of this uid running the grid
  job's ``wrapper.py``) with that ``JIM_TAG`` in its environment, else the
  wrapper's ``started`` file.

Environments are read from ``/proc/<pid>/environ``, at most
:data:`ENVIRON_LIMIT` bytes of each, and only of processes of this uid; no
process of another uid is ever signalled.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from jim.adapters import forkmemory, forkslots
from jim.adapters.base import Adapter
from jim.adapters.model import BatchStatus, Capacity, QueryResult, SubmitChunk
from jim.adapters.options import AdapterOptions
from jim.errors import ConfigError, SubmitError
from jim.jobid import local_dir_name
from jim.proc import spawn_detached
from jim.safeio import read_regular
from jim.states import LocalState

if TYPE_CHECKING:
    import psutil

_UNKNOWN_START = "?"
#: The wrapper's file in a grid job's directory (jim.sandbox.builder.WRAPPER_NAME; not imported:
#: loading the configuration imports this module, and the builder would add tarfile to every command).
WRAPPER_NAME = "wrapper.py"
#: The most of a process's environment read when looking for its ``JIM_TAG``: an environment
#: is at most a few MiB (the kernel's ARG_MAX), and a tag found past this is not looked for.
ENVIRON_LIMIT = 4 << 20
#: Rounds of "find the tagged processes, SIGKILL them" at most (a job that forks as fast as it is
#: killed is outrun within a few).
_KILL_ROUNDS = 50


def host_capacity() -> Capacity:
    """This host as the fork backend's batch system: the cores jim may use (its CPU affinity), the
    physical memory and the NVIDIA GPUs its ``/dev`` shows."""
    try:
        cores = len(os.sched_getaffinity(0))
    except OSError:
        cores = os.cpu_count() or 1
    try:
        memory: int | None = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1 << 20)
    except (OSError, ValueError):
        memory = None
    try:
        gpus = sum(1 for name in os.listdir("/dev") if name.startswith("nvidia") and name[6:].isdigit())
    except OSError:
        gpus = 0
    return Capacity(cores, cores, None, memory, gpus, gpus)


def _ps() -> ModuleType:
    """psutil, imported on first use: loading the configuration imports this module for its
    options, and psutil would add ~12 ms to every ``jim submit``."""
    import psutil  # (lazy: see above)

    return psutil


def _identity(batch_id: str) -> tuple[int, float | None]:
    pid, _, start = batch_id.partition(":")
    return int(pid), (None if start in ("", _UNKNOWN_START) else float(start))


def _process(batch_id: str) -> psutil.Process | None:
    """The live process of this batch id, or None (gone, zombie, or a reused pid)."""
    ps = _ps()
    try:
        pid, start = _identity(batch_id)
    except ValueError:
        return None
    if start is None:
        return None
    try:
        p = ps.Process(pid)
        if abs(p.create_time() - start) > 0.05 or p.status() == ps.STATUS_ZOMBIE:
            return None
        return cast("psutil.Process", p)
    except (ps.NoSuchProcess, ps.AccessDenied):
        return None


def _uids(pid: int) -> tuple[int, int] | None:
    """(real, effective) uid of a process, from /proc/<pid>/status; None when it is gone."""
    data = read_regular(f"/proc/{pid}/status", 16384)
    if data is None:
        return None
    for line in data.splitlines():
        if line.startswith(b"Uid:"):
            fields = line.split()
            try:
                return int(fields[1]), int(fields[2])
            except (IndexError, ValueError):
                return None
    return None


def _environ_entries(pid: int) -> list[bytes]:
    """The NUL-separated entries of a process's environment, from at most ENVIRON_LIMIT bytes of
    it (an entry cut by the limit is left out); none when it cannot be read."""
    data = read_regular(f"/proc/{pid}/environ", ENVIRON_LIMIT)
    if not data:
        return []
    entries = data.split(b"\0")
    if len(data) >= ENVIRON_LIMIT or entries[-1]:  # (the last entry is whole only when a NUL ends it)
        entries.pop()
    return entries


def _environ_tag(pid: int) -> str | None:
    """The ``JIM_TAG`` of a process (its first such entry)."""
    for entry in _environ_entries(pid):
        if entry.startswith(b"JIM_TAG="):
            return entry[len(b"JIM_TAG=") :].decode("utf-8", "surrogateescape")
    return None


def _carries(pid: int, entries: set[bytes]) -> bool:
    """True when the environment of process ``pid`` holds one of ``entries`` (``JIM_TAG=<tag>``)
    as a whole NUL-separated entry."""
    return not entries.isdisjoint(_environ_entries(pid))


def _start_ticks(pid: int) -> str | None:
    """The start time of a process (field 22 of /proc/<pid>/stat, in clock ticks): with the pid, its identity."""
    data = read_regular(f"/proc/{pid}/stat", 4096)
    if not data:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def _argv(pid: int) -> list[bytes]:
    return (read_regular(f"/proc/{pid}/cmdline", 65536) or b"").split(b"\0")


def _is_wrapper(pid: int, wrapper: bytes | None = None) -> bool:
    """True when process ``pid`` is of this uid, leads a session of its own and runs jim's wrapper
    (``wrapper``: that very file; else any file of that name) as a local job of the fork backend,
    or waits for its cores to run it (:mod:`jim.adapters.forkslots`)."""
    if _uids(pid) != (os.getuid(),) * 2 or os.getsid(pid) != pid:
        return False
    argv = _argv(pid)
    argv = forkslots.wrapper_of(argv) or argv
    if len(argv) < 2:
        return False
    return argv[1] == wrapper if wrapper is not None else os.path.basename(argv[1]) == WRAPPER_NAME.encode()


class _Tagged:
    """A process of this uid that carries one of the tags, held so that a signal reaches that
    process and never one that got its pid later (a pidfd where the host has them; else its
    start time, checked before each signal)."""

    def __init__(self, pid: int, fd: int | None, start: str | None):
        self.pid, self.fd, self.start = pid, fd, start

    def signal(self, signum: int) -> bool:
        """Send ``signum``; False when the process is gone."""
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, signum)
            else:
                if _start_ticks(self.pid) != self.start:
                    return False
                os.kill(self.pid, signum)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def tagged_processes(tags: set[str], uid: int | None = None) -> list[_Tagged]:
    """Every live process of ``uid`` (default: ours) whose environment has the exact entry
    ``JIM_TAG=<tag>`` for one of ``tags``.  Processes of any other uid are never returned, nor
    this process; a process that exits while it is looked at is skipped.  Close what it returns."""
    uid = os.getuid() if uid is None else uid
    entries = {b"JIM_TAG=" + t.encode("utf-8", "surrogateescape") for t in tags}
    if not entries:
        return []
    found: list[_Tagged] = []
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        if _uids(pid) != (uid, uid) or not _carries(pid, entries):
            continue
        fd = None
        if hasattr(os, "pidfd_open"):
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            except OSError:  # (an old kernel: no pidfds)
                fd = None
        start = _start_ticks(pid)
        held = _Tagged(pid, fd, start)
        # looked at again now that it is held: still ours and tagged, and (signal 0) still the same process
        if start is None or _uids(pid) != (uid, uid) or not _carries(pid, entries) or not held.signal(0):
            held.close()
            continue
        found.append(held)
    return found


def _signal_tagged(tags: set[str], signum: int) -> int:
    """Send ``signum`` to every process of ours that carries one of ``tags``; how many got it."""
    procs = tagged_processes(tags)
    sent = 0
    for p in procs:
        sent += p.signal(signum)
        p.close()
    return sent


@dataclass(frozen=True)
class ForkOptions(AdapterOptions):
    python: str = ""
    """Interpreter for the wrapper ("": the one jim runs with)."""
    cores: int = 0
    """The cores local jobs may hold at once on this host (0: every core jim may use, see
    :func:`host_capacity`); a local job of c cores waits until c of them are free."""
    slots: str = ""
    """The directory of the host's core slots ("": ``fork/slots`` in jim's home, this account's
    own; see :mod:`jim.adapters.forkslots` for one directory that many accounts share)."""
    cgroup: str = "/sys/fs/cgroup/jim"
    """The cgroup v2 under which a local job with a memory limit gets a cgroup of its own, when jim
    may write there ("": never; the job's resident memory is watched instead)."""

    def check(self) -> None:
        super().check()
        if not 0 <= self.cores <= 100_000:
            raise ConfigError("[batch] cores must be between 0 (the host's) and 100000")
        for key in ("slots", "cgroup"):
            value = getattr(self, key)
            if value and not os.path.isabs(value):
                raise ConfigError(f"[batch] {key} must be an absolute path, got {value!r}")


class ForkAdapter(Adapter):
    """Local jobs as detached processes on the gatekeeper host."""

    name = "fork"
    Options = ForkOptions
    options: ForkOptions
    max_chunk_size = 100
    ids_per_command = sys.maxsize  # (no command: one kill and one wait for them all)

    @property
    def python(self) -> str:
        return self.options.python or sys.executable

    @property
    def cores(self) -> int:
        """The cores local jobs may hold at once (the ``cores`` option, else the host's)."""
        return self.options.cores or host_capacity().cores

    def slots(self) -> forkslots.Slots:
        """This host's core slots (the ``slots`` directory, else this account's own in jim's home)."""
        if self.options.slots:
            return forkslots.Slots(Path(self.options.slots), self.cores)
        own = self.home.root / "fork" / "slots"
        own.mkdir(mode=0o700, parents=True, exist_ok=True)
        return forkslots.Slots(own, self.cores)

    @property
    def ended(self) -> Path:
        """Where the memory watch records the local jobs it stopped (see :mod:`jim.adapters.forkmemory`)."""
        return self.home.root / "fork" / "ended"

    def _cores_of(self, chunk: SubmitChunk, slots: forkslots.Slots) -> int:
        """The slots each local job of ``chunk`` holds; a job that could never get them is refused."""
        usable = slots.usable()
        cores = usable if chunk.limits.whole_node else chunk.limits.cores
        if not 1 <= cores <= usable:
            raise SubmitError(
                f"a local job of {cores} cores cannot run on this host: the fork backend has {usable} "
                f"core slot(s) in {slots.directory}",
                transient=False,
            )
        return cores

    def _launcher(self, chunk: SubmitChunk, index: int, slots: forkslots.Slots, cores: int) -> list[str]:
        scratch = chunk.job_dir / "scratch"
        wrapper = [*chunk.wrapper_argv(self.python, index=index), "--scratch", str(scratch)]
        outdir = chunk.outroot / local_dir_name(index, chunk.attempt)
        launch = forkslots.Launch(
            slots.directory, slots.count, cores, chunk.limits.memory_mb, self.ended, self.options.cgroup, outdir
        )
        return launch.argv(sys.executable, wrapper)

    def submit_group(self, chunk: SubmitChunk, group: list[int]) -> dict[int, str]:
        ps = _ps()
        ids: dict[int, str] = {}
        scratch = chunk.job_dir / "scratch"
        scratch.mkdir(mode=0o700, exist_ok=True)
        tags = {s.index: s.tag for s in chunk.jobs}
        slots = self.slots()
        cores = self._cores_of(chunk, slots)
        for index in group:
            argv = self._launcher(chunk, index, slots, cores)
            env = dict(os.environ)
            env["JIM_TAG"] = tags[index]
            env.pop("JIM_FAULT", None)
            try:
                pid, release = spawn_detached(argv, env=env, cwd=str(chunk.job_dir), handshake=True)
            except OSError as e:
                raise SubmitError(f"cannot start local job {index}: {e}", argv=argv, transient=True) from e
            assert release is not None
            try:
                start = ps.Process(pid).create_time()
            except ps.Error:  # cannot happen while it waits for us; be safe anyway
                release(False)
                raise SubmitError(f"local job {index} vanished before it started", argv=argv, transient=True) from None
            ids[index] = f"{pid}:{start:.3f}"
            release(True)
        return ids

    def query(self, batch_ids: list[str]) -> QueryResult:
        statuses = {}
        for bid in batch_ids:
            p = _process(bid)
            if p is None:
                continue
            if forkslots.wrapper_of(_argv(p.pid)) is not None:  # (not the wrapper yet: waiting for its cores)
                statuses[bid] = BatchStatus(LocalState.QUEUED, native="waiting for cores")
            else:
                statuses[bid] = BatchStatus(LocalState.RUNNING, native="alive")
        return QueryResult(ok=True, statuses=statuses)

    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        """The local jobs the memory limit stopped (see :mod:`jim.adapters.forkmemory`)."""
        cgroups = Path(self.options.cgroup) if self.options.cgroup else None
        found = {}
        for bid in batch_ids:
            st = forkmemory.read_record(self.ended, cgroups, bid)
            if st is not None:
                found[bid] = st
        return found

    def cancel_units(self, batch_ids: list[str]) -> Sequence[str]:
        return batch_ids

    def cancel_batch(self, units: Sequence[str], grace: float) -> None:
        """SIGTERM to each wrapper's process group and to every process of this uid carrying the
        wrapper's ``JIM_TAG``; after ``grace``, SIGKILL to what is left of them, until no process
        with one of those tags is found."""
        ps = _ps()
        victims: list[psutil.Process] = []
        tags: set[str] = set()
        for bid in units:
            p = _process(bid)
            if p is None:
                continue
            tag = _environ_tag(p.pid)
            if tag and _process(bid) is not None:  # (the tag read is the wrapper's, not a reused pid's)
                tags.add(tag)
            try:
                victims.append(p)
                victims.extend(p.children(recursive=True))
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError, ps.Error):
                pass
        _signal_tagged(tags, signal.SIGTERM)
        deadline = time.monotonic() + grace
        alive = victims
        while time.monotonic() < deadline:
            _gone, alive = ps.wait_procs(alive, timeout=min(0.1, max(0.0, deadline - time.monotonic())))
            if not alive and not _signal_tagged(tags, 0):
                break
        for p in alive:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.kill()
            except ps.Error:
                pass
        for _ in range(_KILL_ROUNDS):  # (a process may fork while it is being killed: again until none is found)
            if not _signal_tagged(tags, signal.SIGKILL):
                break
            time.sleep(0.01)
        ps.wait_procs(alive, timeout=2.0)

    def find_by_tag(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        """The wrappers of ``tags``: processes of this uid that lead a session of their own, run this
        grid job's wrapper and carry the tag (a process of the job that left for a session of its
        own with ``setsid`` carries the tag too, and is no wrapper)."""
        ps = _ps()
        wanted = set(tags)
        wrapper = os.fsencode(self.home.job_dir(grid_id) / WRAPPER_NAME)
        found: dict[str, str] = {}
        for p in ps.process_iter(["pid", "create_time"]):
            try:
                if not _is_wrapper(p.pid, wrapper):
                    continue
                tag = _environ_tag(p.pid)
                if tag in wanted and p.status() != ps.STATUS_ZOMBIE:
                    found[tag] = f"{p.pid}:{p.info['create_time']:.3f}"
            except (ps.Error, OSError):
                continue
        return found

    def batch_id_from_started(self, info: dict[str, Any]) -> str | None:
        """A wrapper that is gone (its start time unknown): its pid."""
        try:
            return f"{int(info['pid'])}:{_UNKNOWN_START}"
        except (KeyError, TypeError, ValueError):
            return None

    def free_slots(self) -> int | None:
        """The core slots free now: those of the slot directory no local job holds, and no more than
        the cores less this account's running local jobs (one each: their wrappers, see
        :func:`_is_wrapper`), which a jim with another home, such as ARC's info step, sees too."""
        ps = _ps()
        running = 0
        for p in ps.process_iter():
            try:
                if _is_wrapper(p.pid) and _environ_tag(p.pid) is not None and p.status() != ps.STATUS_ZOMBIE:
                    running += 1
            except (ps.Error, OSError):
                continue
        return min(self.slots().free(), max(0, self.cores - running))

    def ask_capacity(self) -> Capacity | None:
        """This host (:func:`host_capacity`), its free cores the core slots no local job holds."""
        return replace(host_capacity(), free_cores=self.free_slots())
