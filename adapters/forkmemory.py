"""The fork backend's memory limit: a local job kept within ``Limits.memory_mb`` on this host.

Two ways, the first the host allows:

* **a cgroup v2 of its own** (``memory.max``, no swap beyond it) under the
  adapter's ``cgroup`` directory, when that directory is a cgroup v2 with the
  memory controller that jim's account can write to: the kernel stops the job
  (its OOM killer), and the cgroup's ``memory.events`` (``oom_kill``) tells
  why;
* else **a watch** of the resident memory of the job's processes (every
  process the wrapper started, and theirs; the wrapper itself and this watch
  do not count), as Slurm's ``OverMemoryKill`` does: over the limit, they are
  killed (SIGKILL) and the wrapper writes its exit file.

Either way the reason is written first into a small **record** under jim's
home (``fork/ended/<batch id>``), which :meth:`ForkAdapter.accounting` reads:
the local job then ends FAILED with the cause ``OUT_OF_MEMORY`` (the job's own
fault: not tried again).  The watch writes the record before it kills; with a
cgroup the adapter also reads ``memory.events`` itself while the cgroup is
there, so the exit file is never read without the reason being found.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from jim.adapters.model import BatchStatus
from jim.safeio import read_regular
from jim.states import EndCause, Evidence, LocalState

#: Seconds between two looks at a watched job's resident memory.
WATCH_EVERY = 0.5
#: Records of ended local jobs are removed after this many seconds.
RECORD_DAYS = 7
_RECORD_BYTES = 4096


def safe_id(batch_id: str) -> str:
    """A batch id (``<pid>:<start>``) as a file name."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in batch_id)[:64]


# ---------------------------------------------------------------------------
# records: why a local job was stopped, read by the adapter's accounting
# ---------------------------------------------------------------------------


def write_record(ended: Path, batch_id: str, tag: str, reason: str) -> None:
    """Record (atomically) that ``batch_id`` was stopped for want of memory; old records go."""
    ended.mkdir(mode=0o700, parents=True, exist_ok=True)
    _prune(ended)
    path = ended / safe_id(batch_id)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"tag": tag, "reason": reason, "time": time.time()}))
    os.replace(tmp, path)


def _prune(ended: Path) -> None:
    limit = time.time() - RECORD_DAYS * 86400
    try:
        entries = list(os.scandir(ended))
    except OSError:
        return
    for e in entries:
        try:
            if e.stat(follow_symlinks=False).st_mtime < limit:
                os.unlink(e.path)
        except OSError:
            continue


def read_record(ended: Path, cgroups: Path | None, batch_id: str) -> BatchStatus | None:
    """What is known of how ``batch_id`` ended for want of memory: its cgroup's ``memory.events``
    while the cgroup is there, else its record; None when it was not stopped for memory."""
    if cgroups is not None:
        events = cgroup_oom_kills(cgroups / safe_id(batch_id))
        if events:
            return _oom_status(None, f"the kernel killed {events} process(es) over the memory limit")
    data = read_regular(ended / safe_id(batch_id), _RECORD_BYTES)
    if data is None:
        return None
    try:
        info: Any = json.loads(data)
    except ValueError:
        return None
    if not isinstance(info, dict):
        return None
    tag, reason = info.get("tag"), info.get("reason")
    return _oom_status(tag if isinstance(tag, str) else None, str(reason)[:300] if reason else "")


def _oom_status(tag: str | None, reason: str) -> BatchStatus:
    return BatchStatus(
        LocalState.FAILED,
        reason=reason or None,
        native="memory limit",
        evidence=Evidence.ACCOUNTING,
        tag=tag,
        cause=EndCause.OUT_OF_MEMORY,
    )


# ---------------------------------------------------------------------------
# a cgroup v2 of its own
# ---------------------------------------------------------------------------


def cgroup_oom_kills(group: Path) -> int:
    """The ``oom_kill`` count of a cgroup's ``memory.events`` (0: none, or no such cgroup)."""
    data = read_regular(group / "memory.events", 4096)
    for line in (data or b"").splitlines():
        key, _, value = line.partition(b" ")
        if key == b"oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def usable_cgroups(parent: Path) -> bool:
    """True when local jobs can have cgroups of their own under ``parent``: a cgroup v2 directory
    that jim's account may write, whose children get the memory controller."""
    if not parent.is_dir() and (parent.parent / "cgroup.controllers").is_file():
        try:
            if "memory" not in (parent.parent / "cgroup.subtree_control").read_text().split():
                (parent.parent / "cgroup.subtree_control").write_text("+memory")
            parent.mkdir(mode=0o755)
        except OSError:
            return False
    try:
        controllers = (parent / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False
    if "memory" not in controllers:
        try:
            (parent / "cgroup.subtree_control").write_text("+memory")
        except OSError:
            return False
    return os.access(parent, os.W_OK | os.X_OK)


def make_cgroup(parent: Path, batch_id: str, memory_mb: int) -> Path | None:
    """A new cgroup for one local job with ``memory.max`` = ``memory_mb`` and no swap; None when
    one cannot be made (then the job is watched instead)."""
    if not usable_cgroups(parent):
        return None
    group = parent / safe_id(batch_id)
    try:
        group.mkdir(mode=0o755)
        (group / "memory.max").write_text(str(memory_mb << 20))
        if (group / "memory.swap.max").exists():
            (group / "memory.swap.max").write_text("0")
    except OSError:
        remove_cgroup(group)
        return None
    return group


def join_cgroup(group: Path) -> bool:
    """Move this process (and all it will start) into ``group``."""
    try:
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        return False
    return True


def remove_cgroup(group: Path) -> None:
    """Kill what is left in a job's cgroup and remove it (a few tries: the kernel empties it
    asynchronously)."""
    try:
        (group / "cgroup.kill").write_text("1")
    except OSError:
        pass
    for _ in range(50):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


# ---------------------------------------------------------------------------
# the watch (no cgroup): resident memory of the job's processes
# ---------------------------------------------------------------------------


class Watch:
    """Watches one local job from a process of its own (a child of the wrapper's process, not
    counted): ``wrapper`` is the wrapper's pid, ``group`` its cgroup (None: watched by RSS)."""

    def __init__(self, wrapper: int, batch_id: str, tag: str, limit_mb: int, ended: Path, outdir: Path):
        self.wrapper, self.batch_id, self.tag = wrapper, batch_id, tag
        self.limit_mb, self.ended, self.outdir = limit_mb, ended, outdir

    def run(self, group: Path | None) -> None:
        """Until the wrapper ends; then the cgroup (if any) is emptied and removed."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signum, signal.SIG_IGN)  # (a cancel's signals are for the job: the watch ends with it)
        kills = 0
        while os.getppid() == self.wrapper:
            time.sleep(WATCH_EVERY)
            if group is not None and not self._inside(group):
                remove_cgroup(group)  # (the job could not join it: watched by RSS instead)
                group = None
            if group is not None:
                seen = cgroup_oom_kills(group)
                if seen > kills:
                    kills = seen
                    self.stop(f"the kernel killed a process over the memory limit of {self.limit_mb} MB", group)
            else:
                self.check()
        if group is not None:
            if cgroup_oom_kills(group) > kills:
                self._record(f"the kernel killed a process over the memory limit of {self.limit_mb} MB")
            remove_cgroup(group)

    def _inside(self, group: Path) -> bool:
        data = read_regular(group / "cgroup.procs", 1 << 20) or b""
        return str(self.wrapper).encode() in data.split()

    def check(self) -> None:
        """The job's processes' resident memory; over the limit, they are stopped."""
        import psutil  # (lazy: only a watching process needs it)

        me = os.getpid()
        try:
            procs = [p for p in psutil.Process(self.wrapper).children(recursive=True) if p.pid != me]
        except psutil.Error:
            return
        rss = 0
        for p in procs:
            try:
                rss += p.memory_info().rss
            except psutil.Error:
                continue
        if rss > self.limit_mb << 20:
            self._record(f"resident memory {rss >> 20} MB over the memory limit of {self.limit_mb} MB")
            for p in procs:
                try:
                    p.kill()
                except psutil.Error:
                    continue

    def stop(self, reason: str, group: Path) -> None:
        """The kernel killed a process of the job in its cgroup: the reason recorded, and the rest
        of its processes (the wrapper aside) killed."""
        self._record(reason)
        data = read_regular(group / "cgroup.procs", 1 << 20) or b""
        for line in data.split():
            pid = int(line) if line.isdigit() else self.wrapper
            if pid != self.wrapper:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    continue

    def _record(self, reason: str) -> None:
        write_record(self.ended, self.batch_id, self.tag, reason)
        try:
            with open(self.outdir / "stderr", "a") as f:
                f.write(f"jim (fork backend): {reason}: the job was stopped\n")
        except OSError:
            pass
