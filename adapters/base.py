"""The batch-system adapter contract ("idealizers"), and the plumbing they share.

A concrete adapter only builds commands and parses their output.  This base
class owns the rest:

* :meth:`Adapter.run` — the one seam through which every batch command runs:
  an argv list (never a shell), a timeout, captured output, and one typed
  error (:class:`jim.errors.BatchError`) carrying argv, exit code, stdout and
  stderr;
* :meth:`Adapter.retrying` — retries with exponential backoff (tenacity),
  driven only by the error's ``transient`` flag;
* the three-valued status result, :class:`QueryResult`: a local job is
  *known* (with a state), *absent* (the query worked and the job is not in
  it), or the query *failed* (nothing can be said: "no news");
* the degraded flag: a failed query marks the adapter degraded (no new
  submissions) until a query succeeds again.

What a subclass implements (see each method's docstring):

==========================  ==================================================
``submit_chunk(chunk)``     submit the local jobs of one chunk, in bulk (a job
                            array where the system has them), each carrying
                            its tag; return index -> batch id
``query(batch_ids)``        one status query covering all of them
``cancel(batch_ids, grace)`` stop them
``find_by_tag(grid, tags)`` which of these tags the batch system already has
                            (reconciles a submit whose outcome is unknown)
``accounting(batch_ids)``   (optional) final states of jobs that left the queue
==========================  ==================================================

Each local job's wrapper writes an exit-code file; that file, not the batch
system's silence, is what turns a vanished job into DONE or FAILED.
"""

from __future__ import annotations

import abc
import json
import logging
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, TypeVar

from jim.errors import BatchError, ConfigError
from jim.paths import Home
from jim.states import Evidence, LocalState

log = logging.getLogger("jim.adapters")
T = TypeVar("T")


@dataclass(frozen=True)
class BatchStatus:
    """What the batch system says about one local job."""

    state: LocalState
    exit_code: int | None = None
    reason: str | None = None
    native: str = ""
    evidence: Evidence = Evidence.BATCH
    host: str | None = None
    tag: str | None = None
    """jim's tag of the job this status belongs to, when the batch system shows it:
    a status whose tag differs from the local job's is someone else's (a reused id)."""
    submitted: float | None = None
    """When the batch system says the job was submitted (epoch), if it says."""

    def to_json(self) -> list:
        return [self.state.value, self.exit_code, self.reason, self.native, self.evidence.value, self.host,
                self.tag, self.submitted]

    @classmethod
    def from_json(cls, v: list) -> "BatchStatus":
        return cls(LocalState(v[0]), v[1], v[2], v[3], Evidence(v[4]), v[5], v[6], v[7])


@dataclass
class QueryResult:
    """The answer of one status query: known jobs, or a failed query."""

    ok: bool
    statuses: dict[str, BatchStatus] = field(default_factory=dict)
    error: str = ""
    at: float = field(default_factory=time.time)

    def lookup(self, batch_id: str) -> BatchStatus | None:
        """The status, or None when the job is absent.  Only call when ``ok``."""
        if not self.ok:
            raise RuntimeError("a failed query says nothing about any job")
        return self.statuses.get(batch_id)


@dataclass(frozen=True)
class LocalJobSpec:
    index: int
    tag: str
    queue: str | None = None


@dataclass
class SubmitChunk:
    """Local jobs of one grid job to submit together."""

    grid_id: str
    jobs: list[LocalJobSpec]
    job_dir: Path
    wrapper: Path
    sandbox: Path
    outroot: Path
    queue: str | None = None
    limits: dict[str, Any] = field(default_factory=dict)

    def wrapper_argv(self, python: str, index: int | None = None, index_env: str | None = None,
                     index_offset: int = 0) -> list[str]:
        argv = [python, str(self.wrapper), "--sandbox", str(self.sandbox), "--outroot", str(self.outroot)]
        if index is not None:
            argv += ["--index", str(index)]
        else:
            argv += ["--index-env", str(index_env), "--index-offset", str(index_offset)]
        return argv


class Adapter(abc.ABC):
    """Base of every batch-system adapter; see the module docstring."""

    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    #: Options of this adapter (the ``[batch]`` table minus ``adapter``), with defaults.
    options: ClassVar[dict[str, Any]] = {}
    #: Largest number of local jobs submitted in one call.
    max_chunk: int = 1000
    #: Codes the batch system gives a meaning of its own (the wrapper never exits with them).
    reserved_exit_codes: ClassVar[tuple[int, ...]] = ()
    #: True when :meth:`query` answers for *all* of this user's jobs (one command),
    #: so that its answer can be cached on disk and shared: see :meth:`query_cached`.
    user_wide_query: ClassVar[bool] = False

    def __init__(self, home: Home, options: dict[str, Any] | None = None, *,
                 command_timeout: float = 30.0):
        given = dict(options or {})
        unknown = set(given) - set(self.options) - {"command_timeout", "retries", "chunk_size"}
        if unknown:
            raise ConfigError(f"[batch] adapter {self.name}: unknown option(s) {', '.join(sorted(unknown))}")
        self.home = home
        self.command_timeout = float(given.pop("command_timeout", command_timeout))
        self.retries = int(given.pop("retries", 3))
        if "chunk_size" in given:
            self.max_chunk = max(1, int(given.pop("chunk_size")))
        self.opts = {**self.options, **given}

    @property
    def status_interval(self) -> float:
        """Seconds a status answer stays good (the on-disk cache's lifetime)."""
        return float(self.opts.get("cache_interval", 0) or 0)

    # -- the contract --------------------------------------------------------
    @abc.abstractmethod
    def submit_chunk(self, chunk: SubmitChunk) -> dict[int, str]:
        """Submit every local job of ``chunk``; return local index -> batch id.

        Must tag each local job with its ``tag`` so that :meth:`find_by_tag`
        can find it.  Raise :class:`jim.errors.SubmitError` (``transient`` when
        the outcome is unknown or a retry may work).
        """

    @abc.abstractmethod
    def query(self, batch_ids: list[str]) -> QueryResult:
        """One status query for all ``batch_ids``; never raises: a failure is ``ok=False``."""

    @abc.abstractmethod
    def cancel(self, batch_ids: list[str], grace: float = 5.0) -> None:
        """Stop these local jobs (already-finished ones are not an error)."""

    @abc.abstractmethod
    def find_by_tag(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        """tag -> batch id for those of ``tags`` the batch system knows."""

    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        """Final states of jobs that left the queue (none by default)."""
        return {}

    def batch_id_from_started(self, info: dict[str, Any]) -> str | None:
        """The batch id a wrapper wrote into its ``started`` file, in this adapter's form; None: unusable."""
        bid = info.get("batch_id")
        return bid if isinstance(bid, str) and bid.strip() else None

    def reconcile(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        """tag -> batch id for those of ``tags`` that were submitted: what :meth:`find_by_tag` finds,
        then what the wrappers say.

        A local job can leave the queue before the batch system's accounting
        shows it (Grid Engine flushes its accounting file every few seconds,
        slurmdbd is fed asynchronously): neither the queue nor the accounting
        knows it then.  But it ran, so its wrapper wrote ``OUT/started`` with
        the batch id.  The files are read *after* the batch system was asked:
        a job the query missed because it had already finished has its file
        by then.  Raises what :meth:`find_by_tag` raises.
        """
        found = dict(self.find_by_tag(grid_id, tags))
        for tag in tags:
            if tag in found:
                continue
            try:
                index = int(tag.rsplit(".", 1)[1])
                info = json.loads((self.home.local_dir(grid_id, index) / "started").read_text())
            except (IndexError, ValueError, OSError):
                continue
            bid = self.batch_id_from_started(info) if isinstance(info, dict) else None
            if bid is None:
                log.warning("local job %s started but its wrapper reported no usable batch id (%r)",
                            tag, info.get("batch_id") if isinstance(info, dict) else info)
                continue
            found[tag] = bid
        return found

    def free_slots(self) -> int | None:
        """How many more local jobs could start now (idle CPUs), for ``jim advertise``; None: unknown."""
        return None

    # -- plumbing -----------------------------------------------------------
    def render(self, template: str, **values: Any) -> str:
        """A job script from ``templates/<template>``, every value quoted for the shell."""
        import shlex
        import string
        from importlib import resources

        text = resources.files("jim.adapters.templates").joinpath(template).read_text()
        try:
            return string.Template(text).substitute({k: shlex.quote(str(v)) for k, v in values.items()})
        except KeyError as e:
            raise ConfigError(f"job script template {template} needs a value for {e.args[0]}") from None
        except ValueError as e:
            raise ConfigError(f"job script template {template} is malformed: {e}") from None

    def write_script(self, chunk: SubmitChunk, name: str, text: str) -> Path:
        d = chunk.job_dir / "batch"
        d.mkdir(mode=0o700, exist_ok=True)
        path = d / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o700)
        os.replace(tmp, path)
        return path

    def run(self, argv: list[str], *, timeout: float | None = None, input: str | None = None,
            env: dict[str, str] | None = None, check: bool = True,
            error: type[BatchError] = BatchError, transient: Callable[[int, str], bool] | None = None
            ) -> subprocess.CompletedProcess:
        """Run one batch command; see the module docstring."""
        timeout = self.command_timeout if timeout is None else timeout
        started = time.monotonic()
        try:
            proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout,
                                  env=env, stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise error(f"{argv[0]} did not answer within {timeout:g} s", argv=argv,
                        stdout=_text(e.stdout), stderr=_text(e.stderr), transient=True) from None
        except OSError as e:
            raise error(f"cannot run {argv[0]}: {e.strerror}", argv=argv, transient=False) from None
        log.debug("ran %s rc=%s in %.3f s", argv, proc.returncode, time.monotonic() - started)
        if check and proc.returncode != 0:
            is_transient = transient(proc.returncode, proc.stderr) if transient else False
            first = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            raise error(f"{argv[0]} failed (exit {proc.returncode}): {first[0] if first else 'no output'}",
                        argv=argv, returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
                        transient=is_transient)
        return proc

    def retrying(self, fn: Callable[..., T], *args: Any, attempts: int | None = None,
                 before_retry: Callable[[], None] | None = None, **kwargs: Any) -> T:
        """Call ``fn`` and retry transient failures with exponential backoff."""
        from tenacity import (RetryCallState, Retrying, retry_if_exception, stop_after_attempt,
                              wait_exponential)

        def transient(e: BaseException) -> bool:
            return bool(getattr(e, "transient", False))

        def before_sleep(state: RetryCallState) -> None:
            log.warning("%s: transient failure (%s), retrying", self.name, state.outcome.exception())
            if before_retry:
                before_retry()

        for attempt in Retrying(stop=stop_after_attempt(attempts or self.retries),
                                wait=wait_exponential(multiplier=0.5, max=10),
                                retry=retry_if_exception(transient), before_sleep=before_sleep, reraise=True):
            with attempt:
                return fn(*args, **kwargs)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the shared status cache ------------------------------------------------
    @property
    def _cache_path(self) -> Path:
        return self.home.cache / f"{self.name}-status.json"

    def _read_cache(self) -> QueryResult | None:
        try:
            data = json.loads(self._cache_path.read_text())
            return QueryResult(ok=data["ok"], error=data.get("error", ""), at=data["at"],
                               statuses={k: BatchStatus.from_json(v) for k, v in data["statuses"].items()})
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None

    def _write_cache(self, result: QueryResult) -> None:
        data = {"at": result.at, "ok": result.ok, "error": result.error,
                "statuses": {k: v.to_json() for k, v in result.statuses.items()}}
        tmp = self._cache_path.with_name(f".{self._cache_path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self._cache_path)

    def query_cached(self, batch_ids: list[str], *, now: float | None = None) -> QueryResult:
        """:meth:`query`, shared through an on-disk cache by every jim process of this user.

        For adapters whose query covers all of the user's jobs, one answer is
        kept for ``status_interval`` seconds; at most one process refreshes it
        at a time (single flight: the others use the answer they find rather
        than wait).  A failed query is cached too, so a batch system that is
        down is asked once per interval, not once per caller.
        """
        if not self.user_wide_query or self.status_interval <= 0:
            return self._query_at_start(batch_ids)
        from jim.locks import SingleInstance

        now = time.time() if now is None else now
        cached = self._read_cache()
        if cached is not None and now - cached.at < self.status_interval:
            return cached
        lock = SingleInstance(self.home.cache / f"{self.name}-status.lock")
        if not lock.acquire():
            if cached is not None:
                return cached
            return QueryResult(ok=False, error="another process is refreshing the batch status")
        try:
            result = self._query_at_start(batch_ids)
            self._write_cache(result)
            return result
        finally:
            lock.release()

    def _query_at_start(self, batch_ids: list[str]) -> QueryResult:
        """:meth:`query`, its answer dated when the command started: a job submitted while the
        query ran may be missing from it, and must not count as absent (see the monitor)."""
        started = time.time()
        result = self.query(batch_ids)
        result.at = min(result.at, started)
        return result

    # -- health -------------------------------------------------------------
    @property
    def _degraded_path(self) -> Path:
        return self.home.cache / f"{self.name}.degraded"

    def mark_degraded(self, reason: str) -> None:
        if not self._degraded_path.exists():
            log.warning("adapter %s degraded: %s", self.name, reason)
        tmp = self._degraded_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"since": time.time(), "reason": reason}))
        os.replace(tmp, self._degraded_path)

    def mark_healthy(self) -> None:
        if self._degraded_path.exists():
            log.info("adapter %s healthy again", self.name)
            self._degraded_path.unlink(missing_ok=True)

    def degraded(self) -> dict[str, Any] | None:
        try:
            return json.loads(self._degraded_path.read_text())
        except (OSError, ValueError):
            return None


#: Every batch job jim submits is named ``jim.<grid job id>.<offset>``: jim's tag, by
#: which a job is known (never by its batch id alone, which batch systems hand out again).
NAME_PREFIX = "jim."


def tag_name(grid_id: str, offset: int) -> str:
    """The batch job name of the array (or job) whose first task is local job ``offset``."""
    return f"{NAME_PREFIX}{grid_id}.{offset}"


def parse_tag_name(name: str | None) -> tuple[str, int] | None:
    """(grid id, offset) from a job name made by :func:`tag_name`, else None."""
    if not name or not name.startswith(NAME_PREFIX):
        return None
    grid, _, offset = name[len(NAME_PREFIX):].rpartition(".")
    if not grid or not offset.isdigit():
        return None
    return grid, int(offset)


def array_spec(tasks) -> str:
    """``0-3,7,9-10`` from array task ids (the job-array syntax of Slurm, Torque and Grid Engine lists)."""
    ts = sorted(set(tasks))
    parts = []
    start = prev = ts[0]
    for t in ts[1:] + [None]:
        if t is not None and t == prev + 1:
            prev = t
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if t is not None:
            start = prev = t
    return ",".join(parts)

def parse_array_spec(spec: str) -> list[int] | None:
    """Task ids from ``0-3,7,9-10`` (what :func:`array_spec` writes; Slurm's ``:step`` and ``%limit``
    suffixes are allowed and the step ignored), else None for anything else."""
    out: list[int] = []
    for part in spec.split("%")[0].split(","):
        m = _RANGE.fullmatch(part)
        if not m:
            return None
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        if last - first > 1_000_000:
            return None
        out.extend(range(first, last + 1))
    return out


_RANGE = re.compile(r"(\d+)(?:-(\d+))?(?::\d+)?")


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode(errors="replace")
