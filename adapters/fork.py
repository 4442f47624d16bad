"""The embedded fork backend: local jobs as detached process groups on this host.

No batch system needed.  Each local job is jim's wrapper started in a session
of its own (so it outlives the jim call that started it), identified by
``<pid>:<start time>`` so that a reused pid is never mistaken for it.

* submit: start the wrappers (the pid and start time are noted before the
  wrapper may run, see :func:`jim.proc.detach`'s handshake);
* query: a local job runs while a process with that pid *and* that start
  time is alive (and not a zombie); otherwise it is absent, and the wrapper's
  exit-code file tells how it ended;
* cancel: SIGTERM to the process group, SIGKILL to whatever is left of it
  (and of its descendants) after the grace period;
* find by tag: the ``JIM_TAG`` in a live process's environment, else the
  wrapper's ``started`` file.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jim.adapters.base import Adapter, AdapterOptions, BatchStatus, QueryResult, SubmitChunk
from jim.errors import SubmitError
from jim.proc import spawn_detached
from jim.states import LocalState

if TYPE_CHECKING:
    import psutil

_UNKNOWN_START = "?"


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
        return p
    except (ps.NoSuchProcess, ps.AccessDenied):
        return None


@dataclass(frozen=True)
class ForkOptions(AdapterOptions):
    python: str = ""
    """Interpreter for the wrapper ("": the one jim runs with)."""


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

    def submit_group(self, chunk: SubmitChunk, group: list[int]) -> dict[int, str]:
        ps = _ps()
        ids: dict[int, str] = {}
        scratch = chunk.job_dir / "scratch"
        scratch.mkdir(mode=0o700, exist_ok=True)
        tags = {s.index: s.tag for s in chunk.jobs}
        for index in group:
            argv = [*chunk.wrapper_argv(self.python, index=index), "--scratch", str(scratch)]
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
            if _process(bid) is not None:
                statuses[bid] = BatchStatus(LocalState.RUNNING, native="alive")
        return QueryResult(ok=True, statuses=statuses)

    def cancel_units(self, batch_ids: list[str]) -> Sequence[str]:
        return batch_ids

    def cancel_batch(self, units: Sequence[str], grace: float) -> None:
        """SIGTERM to each wrapper's process group; SIGKILL to what is left of them after ``grace``."""
        ps = _ps()
        victims: list[psutil.Process] = []
        for bid in units:
            p = _process(bid)
            if p is None:
                continue
            try:
                victims.append(p)
                victims.extend(p.children(recursive=True))
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError, ps.Error):
                pass
        _gone, alive = ps.wait_procs(victims, timeout=grace)
        for p in alive:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.kill()
            except ps.Error:
                pass
        ps.wait_procs(alive, timeout=2.0)

    def find_by_tag(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        ps = _ps()
        wanted = set(tags)
        found: dict[str, str] = {}
        for p in ps.process_iter(["pid", "create_time"]):
            try:
                tag = p.environ().get("JIM_TAG")
            except (ps.Error, OSError):
                continue
            if tag in wanted and p.status() != ps.STATUS_ZOMBIE:
                # the wrapper is the session leader; its children inherit JIM_TAG
                if os.getsid(p.pid) == p.pid:
                    found[tag] = f"{p.pid}:{p.info['create_time']:.3f}"
        return found

    def batch_id_from_started(self, info: dict[str, Any]) -> str | None:
        """A wrapper that is gone (its start time unknown): its pid."""
        try:
            return f"{int(info['pid'])}:{_UNKNOWN_START}"
        except (KeyError, TypeError, ValueError):
            return None

    def free_slots(self) -> int | None:
        """This host's CPUs minus the running local jobs of this user (wrappers: session leaders with JIM_TAG)."""
        ps = _ps()
        running = 0
        for p in ps.process_iter(["uids"]):
            try:
                if (
                    p.info["uids"]
                    and p.info["uids"].real == os.getuid()
                    and os.getsid(p.pid) == p.pid
                    and "JIM_TAG" in p.environ()
                    and p.status() != ps.STATUS_ZOMBIE
                ):
                    running += 1
            except (ps.Error, OSError):
                continue
        return max(0, (os.cpu_count() or 1) - running)
