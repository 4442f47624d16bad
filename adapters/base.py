"""The batch-system adapter contract ("idealizers"), and the batch loop every adapter shares.

A concrete adapter builds commands and parses their output; this module owns
the loop around them, once:

* **the loop**: :meth:`Adapter.submit` submits a chunk of local jobs with
  retries, looking the jobs up by tag before every retry of a failure whose
  outcome is unknown (:meth:`Adapter.reconcile`); :meth:`Adapter.submit_chunk`
  groups the chunk into job arrays (:func:`jim.ranges.runs`) and turns a
  failure after some arrays went in into a transient error (the caller
  reconciles); ids are batched into commands of at most ``ids_per_command``;
* **one seam for commands**, :meth:`Adapter.run`: an argv list (never a
  shell), a timeout, captured output, and one typed error
  (:class:`jim.errors.BatchError`) carrying argv, exit code, stdout and stderr;
  whether a failure is transient is decided by the adapter's
  ``transient_errors`` patterns, which are data;
* **retries** with exponential backoff (tenacity, :meth:`Adapter.retrying`),
  driven only by an error's ``transient`` flag;
* **one status answer per interval**, :meth:`Adapter.query_cached`, through
  the adapter's own :class:`jim.adapters.cache.AdapterCache` (``adapter.cache``:
  the answer shared on disk, its generations, the degraded flag, site facts).

What crosses the boundary (chunks, statuses, answers) is in
:mod:`jim.adapters.model`; what a site may set, in :mod:`jim.adapters.options`.

Two kinds of adapters.  :class:`CommandAdapter` drives a batch system through
its commands (Slurm, Grid Engine, PBS): the subclass supplies argv builders,
output parsers and its native-state table (see that class).  An adapter that
talks to its batch system otherwise (fork: processes; HTCondor: the Python
bindings) subclasses :class:`Adapter` directly and implements
:meth:`~Adapter.submit_group`, :meth:`~Adapter.query`,
:meth:`~Adapter.cancel_units`/:meth:`~Adapter.cancel_batch` and
:meth:`~Adapter.find_by_tag`.

What every adapter must keep true: each local job carries jim's tag (the batch
job name ``jim.<grid id>.<offset>``, see :func:`jim.jobid.tag_name`, or an
attribute of its own), so that a job is known by its tag, never by a batch id
alone; and jim's wrapper runs each local job and writes its exit-code file,
which, not the batch system's silence, turns a vanished job into DONE or FAILED.
"""

from __future__ import annotations

import abc
import getpass
import logging
import os
import pwd
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from jim import localfiles
from jim.adapters import templates
from jim.adapters.cache import AdapterCache, Statuses
from jim.adapters.model import BatchStatus, Capacity, QueryResult, SubmitChunk
from jim.adapters.options import AdapterOptions, queue_name_problem
from jim.errors import BatchError, CancelError, ConfigError, JimError, QueryError, SubmitError
from jim.jobid import local_dir_name, parse_local_tag
from jim.log import for_job
from jim.paths import Home
from jim.ranges import runs

if TYPE_CHECKING:
    import subprocess

log = logging.getLogger("jim.adapters")
T = TypeVar("T")
U = TypeVar("U")


def batched(items: Sequence[U], size: int) -> list[Sequence[U]]:
    """``items`` in slices of at most ``size`` (one command each: keeps command lines short)."""
    return [items[k : k + size] for k in range(0, len(items), max(1, size))]


# ---------------------------------------------------------------------------
# the adapter
# ---------------------------------------------------------------------------


class Adapter(abc.ABC):
    """Base of every batch-system adapter; see the module docstring."""

    name: ClassVar[str] = ""
    #: The options class of this adapter.
    Options: ClassVar[type[AdapterOptions]] = AdapterOptions
    #: Most local jobs one submit step holds, unless the ``chunk_size`` option says otherwise.
    max_chunk_size: ClassVar[int] = 1000
    #: Most ids (or id ranges) one cancel or accounting command names.
    ids_per_command: ClassVar[int] = 200
    #: Most ids one accounting command names, when that differs (Grid Engine's qacct: one job).
    ids_per_accounting: ClassVar[int | None] = None
    #: Codes the batch system gives a meaning of its own (the wrapper never exits with them).
    reserved_exit_codes: ClassVar[tuple[int, ...]] = ()
    #: True when :meth:`query` answers for *all* of this user's jobs (one command),
    #: so that its answer can be cached on disk and shared: see :meth:`query_cached`.
    user_wide_query: ClassVar[bool] = False
    #: Patterns (regular expressions, case-insensitive) of failures a retry may cure.
    transient_errors: ClassVar[tuple[str, ...]] = ()
    #: Patterns of cancel output lines that are no complaint: a job had already gone (or the line
    #: only reports what was done, where the command prints that beside its complaints).
    gone_errors: ClassVar[tuple[str, ...]] = ()

    def __init__(self, home: Home, options: AdapterOptions | Mapping[str, Any] | None = None):
        self.home = home
        if isinstance(options, AdapterOptions):
            if not isinstance(options, self.Options):
                raise ConfigError(f"[batch] adapter {self.name}: options of another adapter")
            self.options = options
        else:
            self.options = self.Options.from_table(dict(options or {}), adapter=self.name)
        self._transient = _pattern(self.transient_errors)
        self._gone = _pattern(self.gone_errors)
        #: The files this adapter keeps in the home's cache (status answer, degraded flag, site facts).
        self.cache = AdapterCache(home, self.name, interned=self.interned)

    @property
    def max_chunk(self) -> int:
        """Most local jobs submitted in one worker step."""
        return self.options.chunk_size or self.max_chunk_size

    @property
    def array_span(self) -> int | None:
        """Largest span (last - first + 1) of local jobs one submission (job array) covers; None: no limit."""
        return None

    @property
    def array_gaps(self) -> bool:
        """True when one job array may skip local jobs (``0-3,7``); else only runs of consecutive ones."""
        return False

    @property
    def status_interval(self) -> float:
        """Seconds a status answer stays good (the on-disk cache's lifetime)."""
        return self.options.cache_interval

    @property
    def user(self) -> str:
        """The owner of the jobs jim submits: the real user id's name, whatever USER or LOGNAME say."""
        try:
            return pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            return getpass.getuser()

    # -- what a subclass implements ----------------------------------------------
    @abc.abstractmethod
    def submit_group(self, chunk: SubmitChunk, group: list[int]) -> dict[int, str]:
        """Submit the local jobs ``group`` (sorted indices: one array, see :meth:`groups`) of ``chunk``,
        each tagged; return local index -> batch id.

        Raise :class:`jim.errors.SubmitError`, ``transient`` when the outcome
        is unknown or a retry may work.
        """

    @abc.abstractmethod
    def query(self, batch_ids: list[str]) -> QueryResult:
        """One status query for all ``batch_ids``; never raises: a failure is ``ok=False``."""

    @abc.abstractmethod
    def find_by_tag(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        """tag -> batch id for those of ``tags`` the batch system knows (in any state)."""

    @abc.abstractmethod
    def cancel_units(self, batch_ids: list[str]) -> Sequence[Any]:
        """What cancel commands name for these batch ids (ids, arrays, id ranges), in order."""

    @abc.abstractmethod
    def cancel_batch(self, units: Sequence[Any], grace: float) -> None:
        """Stop one batch of :meth:`cancel_units` (already-finished jobs are not an error)."""

    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        """Final states of jobs that left the queue (none by default)."""
        return {}

    def batch_id_from_started(self, info: dict[str, Any]) -> str | None:
        """The batch id a wrapper wrote into its ``started`` file, in this adapter's form; None: unusable."""
        bid = info.get("batch_id")
        return bid if isinstance(bid, str) and bid.strip() else None

    def free_slots(self) -> int | None:
        """How many more local jobs could start now (idle CPUs), for ``jim advertise``; None: unknown."""
        return None

    def capacity(self) -> Capacity | None:
        """What the batch system has (cores, free cores, memory, GPUs): :meth:`ask_capacity`, shared a
        minute by every jim process of the user (:meth:`AdapterCache.capacity`); None: unknown."""
        return self.cache.capacity(self.ask_capacity, key=repr(self.options))

    def ask_capacity(self) -> Capacity | None:
        """One bulk query of what the batch system has (:mod:`jim.adapters.capacity`); None: it cannot say."""
        return None

    # -- the loop -----------------------------------------------------------------
    def groups(self, indices: Iterable[int]) -> list[list[int]]:
        """The local jobs of a chunk, in the groups that one submission (one job array) takes."""
        return runs(indices, span=self.array_span, gaps=self.array_gaps)

    def submit_chunk(self, chunk: SubmitChunk) -> dict[int, str]:
        """Submit every local job of ``chunk`` (one :meth:`submit_group` per group); local index -> batch id.

        A failure after earlier groups went in is transient (the caller reconciles by tag).
        """
        ids: dict[int, str] = {}
        for group in self.groups(s.index for s in chunk.jobs):
            try:
                ids.update(self.submit_group(chunk, group))
            except SubmitError as e:
                if ids:
                    raise SubmitError(f"part of the chunk was submitted: {e.message}", transient=True) from e
                raise
        return ids

    def submit(self, chunk: SubmitChunk) -> dict[int, str]:
        """:meth:`submit_chunk` with retries: before each retry of a transient failure the local jobs
        are looked up by tag (:meth:`reconcile`), and only those not found are submitted again.

        Partly submitted and then failed: a transient :class:`SubmitError` (the caller's journal
        names the jobs; a later :meth:`reconcile` finds those that went in).
        """
        ids: dict[int, str] = {}
        remaining = list(chunk.jobs)

        def attempt() -> None:
            if remaining:
                ids.update(self.submit_chunk(replace(chunk, jobs=list(remaining))))
                remaining.clear()

        def reconcile_remaining(failure: BaseException) -> None:
            for_job("jim.adapters", chunk.grid_id).warning(
                "submission of %d local jobs failed (%s); reconciling by tag before retrying", len(remaining), failure
            )
            try:
                found = self.reconcile(chunk.grid_id, [s.tag for s in remaining])
            except JimError as e:  # the outcome stays unknown: the jobs stay journaled for the next round
                raise SubmitError(f"{failure}; reconcile failed: {e.message}", transient=True) from e
            ids.update((s.index, found[s.tag]) for s in remaining if s.tag in found)
            remaining[:] = [s for s in remaining if s.tag not in found]

        try:
            self.retrying(attempt, before_retry=reconcile_remaining)
        except SubmitError as e:
            if ids:
                raise SubmitError(e.message, transient=True) from e
            raise
        return ids

    def reconcile(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        """tag -> batch id for those of ``tags`` that were submitted: what :meth:`find_by_tag` finds,
        then what the wrappers say.

        A local job can leave the queue before the batch system's accounting
        shows it (Grid Engine flushes its accounting file every few seconds,
        slurmdbd is fed asynchronously): neither the queue nor the accounting
        knows it then.  But it ran, so its wrapper wrote ``started`` with the
        batch id.  The files are read *after* the batch system was asked: a
        job the query missed because it had already finished has its file by
        then.  Raises what :meth:`find_by_tag` raises.
        """
        found = dict(self.find_by_tag(grid_id, tags))
        for tag in tags:
            if tag in found:
                continue
            parts = parse_local_tag(tag)
            if parts is None or parts[0] != grid_id:
                continue
            info = localfiles.read_started(self.home.local_dir(grid_id, parts[1], parts[2]))
            if info is None:
                continue
            bid = self.batch_id_from_started(info)
            if bid is None:
                log.warning(
                    "local job %s started but its wrapper reported no usable batch id (%r)", tag, info.get("batch_id")
                )
                continue
            found[tag] = bid
        return found

    def cancel(self, batch_ids: list[str], grace: float = 5.0) -> None:
        """Stop these local jobs, ``ids_per_command`` at a time (already-finished ones are not an error)."""
        for part in batched(self.cancel_units(batch_ids), self.ids_per_command):
            self.cancel_batch(part, grace)

    def queue_of(self, chunk: SubmitChunk, default: str) -> str | None:
        """The local queue of a chunk: the one the plan chose, else the adapter's default; None for
        the batch system's own default (``default`` is what jim calls it when no queue is described)."""
        queue = chunk.queue or default
        if not queue or queue == "default":
            return None
        problem = queue_name_problem(queue)
        if problem is not None:  # (never an option-looking word on a batch command line)
            raise SubmitError(f"local queue refused: {problem}", transient=False)
        return queue

    # -- commands -----------------------------------------------------------------
    def run(
        self,
        argv: list[str],
        *,
        error: type[BatchError] = BatchError,
        timeout: float | None = None,
        input: str | None = None,
        accept: Callable[[subprocess.CompletedProcess[str]], bool] | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run one batch command (the one seam: see the module docstring).

        A non-zero exit raises ``error`` (transient by :attr:`transient_errors`)
        unless ``check`` is false or ``accept(proc)`` says that answer is fine.
        """
        import subprocess  # (lazy: loading the configuration imports this module; subprocess costs ms)

        timeout = self.options.command_timeout if timeout is None else timeout
        started = time.monotonic()
        try:
            proc = self.cache.counted(subprocess.run)(  # (each command counted for jim metrics)
                argv,
                input=input,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            raise error(
                f"{argv[0]} did not answer within {timeout:g} s",
                argv=argv,
                stdout=_text(e.stdout),
                stderr=_text(e.stderr),
                transient=True,
            ) from None
        except OSError as e:
            raise error(f"cannot run {argv[0]}: {e.strerror}", argv=argv, transient=False) from None
        log.debug("ran %s rc=%s in %.3f s", argv, proc.returncode, time.monotonic() - started)
        if check and proc.returncode != 0 and not (accept and accept(proc)):
            raise error(
                f"{os.path.basename(argv[0])} failed (exit {proc.returncode}): {self.failure_line(proc)}",
                argv=argv,
                returncode=proc.returncode,
                stdout=proc.stdout,
                stderr=proc.stderr,
                transient=self.is_transient(proc.stdout + "\n" + proc.stderr),
            )
        return proc

    def failure_line(self, proc: subprocess.CompletedProcess[str]) -> str:
        """The line of a failed command's output that says why (default: the first)."""
        first = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        return first[0] if first else "no output"

    def is_transient(self, text: str) -> bool:
        """True when a command's output says a retry may cure its failure."""
        return bool(self._transient and self._transient.search(text))

    def not_gone(self, text: str) -> list[str]:
        """The lines of a cancel command's output that say more than "this job has already gone"."""
        return [ln for ln in text.splitlines() if ln.strip() and not (self._gone and self._gone.search(ln))]

    def retrying(
        self,
        fn: Callable[..., T],
        *args: Any,
        attempts: int | None = None,
        before_retry: Callable[[BaseException], None] | None = None,
        **kwargs: Any,
    ) -> T:
        """Call ``fn`` and retry transient failures with exponential backoff; ``before_retry(failure)``
        runs before each retry (an exception from it ends the retries)."""
        # (lazy: loading the configuration imports this module for the options; tenacity adds ~8 ms)
        from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

        def transient(e: BaseException) -> bool:
            return bool(getattr(e, "transient", False))

        def before_sleep(state: RetryCallState) -> None:
            failure = state.outcome.exception() if state.outcome is not None else None
            log.warning("%s: transient failure (%s), retrying", self.name, failure)
            if before_retry is not None and failure is not None:
                before_retry(failure)

        for attempt in Retrying(
            stop=stop_after_attempt(attempts or self.options.retries),
            wait=wait_exponential(multiplier=0.5, max=10),
            retry=retry_if_exception(transient),
            before_sleep=before_sleep,
            reraise=True,
        ):
            with attempt:
                return fn(*args, **kwargs)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the status answer -----------------------------------------------------------
    def query_cached(self, batch_ids: list[str], *, now: float | None = None) -> QueryResult:
        """:meth:`query`, stamped with its generation (see :mod:`jim.adapters.cache`); for an adapter
        whose query covers all of the user's jobs, one answer per ``cache_interval`` shared on disk by
        every jim process of the user."""
        if not self.user_wide_query or self.status_interval <= 0:
            return self.cache.generations.stamp(self._query_at_start(batch_ids))
        return self.cache.answer(lambda: self._query_at_start(batch_ids), self.status_interval, now=now)

    def interned(self, before: Statuses, after: Statuses) -> None:  # noqa: B027 (a hook: most need nothing)
        """The statuses ``before`` this adapter answered were kept as ``after`` (equal, sharing the
        previous answer's objects): a command adapter answers ``after`` for the same output again."""

    def prepare_query(self) -> None:  # noqa: B027 (a hook: most adapters need nothing)
        """Work a query needs that must not count in its date (imports, finding the server); none by default."""

    def _query_at_start(self, batch_ids: list[str]) -> QueryResult:
        """:meth:`query`, its answer dated when the command started: a job submitted while the
        query ran may be missing from it, and must not count as absent (see the monitor)."""
        self.prepare_query()
        started = time.time()
        result = self.query(batch_ids)
        result.at = min(result.at, started)
        return result


class CommandAdapter(Adapter):
    """An adapter that drives its batch system through commands (Slurm, Grid Engine, PBS).

    The subclass supplies, besides its options class, ``transient_errors``,
    ``gone_errors`` and its native-state table (a module-level dict, one line
    per state, a comment on every ambiguous one):

    ==================================  ============================================
    ``script(chunk, group)``            the job script of one array (rendered template)
    ``submit_argv(chunk, group, path)`` the command that submits it
    ``parse_submit(stdout, group)``     the job (array) id the command printed, else None
    ``group_ids(job_id, group)``        local index -> batch id for that array
    ``status_argv()``                   the one command that lists all of the user's jobs
    ``parse_status(stdout)``            batch id -> status (ValueError: no answer)
    ``parse_tags(stdout)``              (batch id, tag) of every job of jim's it lists,
                                        in any state
    ``cancel_units(ids)``, ``cancel_argv(units)``   what cancel names, and how
    ``accounting_units(ids)``, ``accounting_argv(units)``, ``parse_accounting(stdout, wanted)``
                                        (optional) final states of jobs gone from the queue
    ``history_tags(grid_id, missing)``  (optional) tag -> batch id of jobs gone from the queue
    ==================================  ============================================
    """

    #: What the submit command is called in messages.
    submit_command: ClassVar[str] = "submit"

    # -- builders and parsers ---------------------------------------------------------
    @abc.abstractmethod
    def script(self, chunk: SubmitChunk, group: list[int]) -> str:
        """The job script of the array of local jobs ``group``."""

    @abc.abstractmethod
    def submit_argv(self, chunk: SubmitChunk, group: list[int], script: Path) -> list[str]:
        """The command that submits ``script`` as the array of local jobs ``group``."""

    @abc.abstractmethod
    def parse_submit(self, stdout: str, group: list[int]) -> str | None:
        """The job (array) id the submit command printed for ``group``; None when it printed none."""

    @abc.abstractmethod
    def group_ids(self, job_id: str, group: list[int]) -> dict[int, str]:
        """local index -> batch id of each local job of the array ``job_id``."""

    @abc.abstractmethod
    def status_argv(self) -> list[str]:
        """The one command that lists every job of this user."""

    @abc.abstractmethod
    def parse_status(self, stdout: str) -> dict[str, BatchStatus]:
        """Statuses of jim's jobs from the output of :meth:`status_argv` (ValueError: not its output)."""

    @abc.abstractmethod
    def parse_tags(self, stdout: str) -> Iterable[tuple[str, str]]:
        """(batch id, tag) of every job of jim's in the output of :meth:`status_argv`, in any state."""

    @abc.abstractmethod
    def cancel_argv(self, units: Sequence[Any]) -> list[str]:
        """The command that cancels one batch of :meth:`cancel_units`."""

    def status_accept(self, proc: subprocess.CompletedProcess[str]) -> bool:
        """True when a non-zero exit of the status command is an answer all the same."""
        return False

    def accounting_units(self, batch_ids: list[str]) -> Sequence[Any]:
        """What accounting commands name for these batch ids (none: no accounting)."""
        return ()

    def accounting_argv(self, units: Sequence[Any]) -> list[str]:
        raise NotImplementedError(f"{self.name}: accounting_units without accounting_argv")

    def accounting_accept(self, proc: subprocess.CompletedProcess[str]) -> bool:
        """True when a non-zero exit of an accounting command is an answer all the same: its output
        holds the records there are (none, when it says it has none)."""
        return False

    def parse_accounting(self, stdout: str, wanted: set[str]) -> dict[str, BatchStatus]:
        raise NotImplementedError(f"{self.name}: accounting_units without parse_accounting")

    def history_tags(self, grid_id: str, missing: set[str]) -> dict[str, str]:
        """tag -> batch id of jobs of ``grid_id`` gone from the queue (from the accounting); none by default."""
        return {}

    def after_cancel(self, units: Sequence[Any], proc: subprocess.CompletedProcess[str]) -> None:
        """Called after each cancel command (e.g. to note what jim deleted)."""

    def render(self, template: str, **values: Any) -> str:
        """A job script from its template (:func:`jim.adapters.templates.render`)."""
        return templates.render(template, **values)

    # -- the loop, for commands -----------------------------------------------------------
    def submit_group(self, chunk: SubmitChunk, group: list[int]) -> dict[int, str]:
        name = f"{self.name}-{local_dir_name(group[0], chunk.attempt)}.sh"
        path = templates.write(chunk.job_dir, name, self.script(chunk, group))
        argv = self.submit_argv(chunk, group, path)
        proc = self.run(argv, error=SubmitError)
        job_id = self.parse_submit(proc.stdout, group)
        if job_id is None:
            raise SubmitError(
                f"{self.submit_command} printed no job id: {proc.stdout.strip()!r}",
                argv=argv,
                stdout=proc.stdout,
                stderr=proc.stderr,
                transient=True,
            )
        return self.group_ids(job_id, group)

    #: The last status command output this object parsed, and what it parsed to (see :meth:`interned`).
    _parsed: tuple[str, Statuses] | None = None

    def interned(self, before: Statuses, after: Statuses) -> None:
        if self._parsed is not None and self._parsed[1] is before:
            self._parsed = (self._parsed[0], after)

    def query(self, batch_ids: list[str]) -> QueryResult:
        try:
            proc = self.run(self.status_argv(), error=QueryError, accept=self.status_accept)
            last = self._parsed
            if last is not None and last[0] == proc.stdout:
                return QueryResult(ok=True, statuses=last[1])  # the very same output: the same statuses
            statuses = self.parse_status(proc.stdout)
            self._parsed = (proc.stdout, statuses)
            return QueryResult(ok=True, statuses=statuses)
        except QueryError as e:
            return QueryResult(ok=False, error=e.message)
        except ValueError as e:
            return QueryResult(ok=False, error=str(e))

    def find_by_tag(self, grid_id: str, tags: list[str]) -> dict[str, str]:
        wanted = set(tags)
        # (retried: a failure here stops the worker that asks, so ride out a short blip of the batch system)
        proc = self.retrying(self.run, self.status_argv(), error=QueryError, accept=self.status_accept)
        try:
            # in any state, one jim cannot map too: it exists, never submit it again
            found = {tag: bid for bid, tag in self.parse_tags(proc.stdout) if tag in wanted}
        except ValueError as e:
            raise QueryError(str(e), transient=True) from None
        missing = wanted - set(found)
        if missing:
            for tag, bid in self.retrying(self.history_tags, grid_id, missing).items():
                if tag in missing:
                    found.setdefault(tag, bid)
        return found

    def accounting(self, batch_ids: list[str]) -> dict[str, BatchStatus]:
        wanted = set(batch_ids)
        found: dict[str, BatchStatus] = {}
        for part in batched(self.accounting_units(batch_ids), self.ids_per_accounting or self.ids_per_command):
            found.update(self.accounting_records(self.accounting_argv(part), wanted))
        return {b: s for b, s in found.items() if b in wanted and s.state.terminal}

    def accounting_records(self, argv: list[str], wanted: set[str]) -> dict[str, BatchStatus]:
        """Run one accounting command and parse its records (see :meth:`accounting_accept`)."""
        proc = self.run(argv, error=QueryError, accept=self.accounting_accept)
        return self.parse_accounting(proc.stdout, wanted)

    def cancel_batch(self, units: Sequence[Any], grace: float) -> None:
        argv = self.cancel_argv(units)
        proc = self.run(argv, error=CancelError, check=False)
        self.after_cancel(units, proc)
        text = (proc.stdout + "\n" + proc.stderr).strip()
        bad = self.not_gone(text) if proc.returncode != 0 else []
        if bad:
            raise CancelError(
                f"{os.path.basename(argv[0])} failed (exit {proc.returncode}): {bad[0].strip()}",
                argv=argv,
                returncode=proc.returncode,
                stdout=proc.stdout,
                stderr=proc.stderr,
                transient=self.is_transient(text),
            )


def _pattern(parts: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{p})" for p in parts), re.I) if parts else None


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode(errors="replace")
