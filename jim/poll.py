"""``jim poll``: the GRAM state of grid jobs, read from their poll summaries; the hot path.

The gatekeeper's module calls it every 10 s per grid job at a real site::

    jim poll --job-id ID                                     -> JOB_STATE= [EXIT_CODE=] [MESSAGE=]
    jim poll --json (--job-id A [--job-id B ...] | --active) -> {"A": {"JOB_STATE": .., "EXIT_CODE": 0}, ..}

Each answer comes from the grid job's summary (:mod:`jim.summary`), never from
its XML record.  A grid job that has not ended gets its background processes
started if they are not running (:func:`jim.background.ensure_running`).
Errors are answered as :mod:`jim.protocol` answers them (exit status 1): no
id is ERROR=46, an id jim does not know ERROR=156, a home that is not the
caller's own ERROR=47, a grid job whose record a newer jim wrote ERROR=123
(its summary's ``#SCHEMA``: :func:`jim.summary.newer_schema`; nothing is
started for it).  In the JSON answer an id jim does not know has
``{"ERROR": 156, "MESSAGE": ..}`` (one a newer jim wrote ``{"ERROR": 123,
"MESSAGE": ..}``) in its place, ``--active`` adds every grid
job that has not ended, and a problem with the request or the home is the
whole answer: ``{"ERROR": n, "MESSAGE": ..}``.

:func:`read_args` reads both forms' arguments by hand: argparse alone costs
about as much as the interpreter's start (``python -c pass``), which is most
of what a poll costs.  The single poll skips what it does not know (the GRAM
module may hand the description again: ``--description``, ``--rsl`` or
``--jdl`` and its value); the JSON poll refuses it (ERROR=46).

Only ``os``, ``time`` and the foundation's light modules (summary, background,
jobid, ownership) are imported: the error classes, ``json`` and the
configuration only when they are needed (the configuration only without
``$JIM_HOME``).  :mod:`jim.cli` calls :func:`main` before it imports anything
else; :mod:`jim.commands` uses :func:`answer` for ``jim -v poll`` and
:func:`check_home` for every command.
"""

from __future__ import annotations

import os
import time

from jim import background, summary
from jim.jobid import valid_job_id
from jim.ownership import AS_OWNER_ENV, act_as_owner, home_problem
from jim.protocol import Answer

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing, ~3 ms of poll's hot path)
if TYPE_CHECKING:
    from typing import NoReturn

#: At most this many ``--job-id`` in one ``jim poll --json``.
MAX_BULK_IDS = 100_000

#: Options of the single poll that take a value it does not need (the GRAM module may hand them again).
_SKIPPED = ("--description", "--rsl", "--jdl")


class PollArgs:
    """What :func:`read_args` found: the ids (in order), ``--json``, ``--active``, and what it did not know."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json
        self.ids: list[str] = []
        self.active = False
        self.unknown: list[str] = []


def read_args(args: list[str]) -> PollArgs:
    """The arguments after ``poll``: ``--job-id ID``, ``-j ID`` and ``--job-id=ID`` (any number),
    ``--json``, ``--active``; without ``--json``, ``--description``, ``--rsl`` or ``--jdl`` skip their value."""
    found = PollArgs(as_json="--json" in args)
    i = 0
    while i < len(args):
        a = args[i]
        has_value = i + 1 < len(args)
        if a in ("--job-id", "-j") and has_value:
            found.ids.append(args[i + 1])
            i += 1
        elif a in _SKIPPED and has_value and not found.as_json:
            i += 1
        elif a.startswith("--job-id="):
            found.ids.append(a.split("=", 1)[1])
        elif a == "--active":
            found.active = True
        elif a != "--json":
            found.unknown.append(a)
        i += 1
    return found


def main(args: list[str], *, as_owner: bool = False) -> int:
    """``jim poll`` with the arguments after ``poll``; the exit status.  ``as_owner``: ``jim --as-owner``
    (or ``$JIM_AS_OWNER``) as root acts on a home another account owns, as that account."""
    request = read_args(args)
    as_owner = as_owner or as_owner_requested()
    if request.as_json:
        return _poll_json(request, as_owner=as_owner)
    with Answer("poll") as out:
        job_id = request.ids[-1] if request.ids else None
        if not job_id:
            _not_found("poll needs --job-id ID", gram_error=46)
        home = home_of_poll()
        check_home(home, as_owner=as_owner)
        out.log_home = home
        answer(home, job_id, out)
    return out.code


def answer(home: str, job_id: str, out: Answer) -> None:
    """The protocol lines of ``job_id`` from its poll summary; start the background processes it still needs."""
    if not valid_job_id(job_id):
        _not_found(f"no grid job {job_id!r} (not a jim job id)")
    found = summary.read(summary.path(home, job_id))
    if found is None:
        _not_found(f"no grid job {job_id}")
    newer = summary.newer_schema(found)
    if newer is not None:
        from jim.errors import RecordTooNew  # (lazy: a poll that answers never needs the error classes)

        raise RecordTooNew(summary.too_new(f"record {job_id}", newer))
    for key in summary.PROTOCOL_KEYS:
        if key in found:
            out.emit(key, found[key])
    if not summary.terminal(found):
        # (a worker for local jobs that may be submitted now: not for retries in their cool-off)
        background.ensure_running(home, job_id, worker_needed=summary.unsubmitted(found, time.time()))


class JsonAnswer(Answer):
    """The answer of ``jim poll --json``: one JSON object, :attr:`data`; an error replaces it."""

    def __init__(self, command: str) -> None:
        super().__init__(command)
        self.data: dict[str, object] = {}

    def fail(self, gram_error: int, message: str) -> None:
        self.data = {"ERROR": gram_error, "MESSAGE": message}
        self.code = 1

    def close(self, final: bool = True) -> None:
        import json  # (lazy: the single poll prints KEY=VALUE lines)

        self.lines = [json.dumps(self.data, sort_keys=True) + "\n"]
        super().close(final)


def _poll_json(request: PollArgs, *, as_owner: bool) -> int:
    with JsonAnswer("poll") as out:
        problem = _json_problem(request)
        if problem:
            _not_found(problem, gram_error=46)
        home = home_of_poll()
        check_home(home, as_owner=as_owner)
        out.log_home = home
        out.data = answer_json(home, request.ids, active=request.active)
    return out.code


def _json_problem(request: PollArgs) -> str | None:
    """Why ``jim poll --json`` cannot answer ``request`` (one line), or None."""
    if request.unknown:
        return f"unknown argument {request.unknown[-1][:80]!r} to jim poll --json"
    if not request.ids and not request.active:
        return "poll --json needs --job-id ID (one or more) or --active"
    if len(request.ids) > MAX_BULK_IDS:
        return f"poll --json takes at most {MAX_BULK_IDS} job ids"
    return None


def answer_json(home: str, ids: list[str], *, active: bool) -> dict[str, object]:
    """id -> its answer (``JOB_STATE``, ``EXIT_CODE`` as a number, ``MESSAGE``) or its error (156), for
    ``ids`` and, with ``active``, every grid job of ``home`` that has not ended; the background
    processes of those that have not ended are started as :func:`answer` starts them."""
    named = set(ids)
    if active:
        ids = ids + [j for j in _summary_ids(home) if j not in named]
    now = time.time()
    out: dict[str, object] = {}
    for job_id in ids:
        if not valid_job_id(job_id):
            out[job_id] = {"ERROR": 156, "MESSAGE": f"no grid job {job_id[:80]!r} (not a jim job id)"}
            continue
        found = summary.read(summary.path(home, job_id))
        newer = summary.newer_schema(found) if found is not None else None
        if found is None:
            out[job_id] = {"ERROR": 156, "MESSAGE": f"no grid job {job_id}"}
        elif newer is not None:
            out[job_id] = {"ERROR": 123, "MESSAGE": summary.too_new(f"record {job_id}", newer)}
        elif not summary.terminal(found):
            out[job_id] = _row(found)
            background.ensure_running(home, job_id, worker_needed=summary.unsubmitted(found, now))
        elif job_id in named:
            out[job_id] = _row(found)
    return out


def _row(found: dict[str, str]) -> dict[str, object]:
    """The protocol keys of one summary; ``EXIT_CODE`` as a number."""
    row: dict[str, object] = {}
    for key in summary.PROTOCOL_KEYS:
        if key in found:
            row[key] = int(found[key]) if key == "EXIT_CODE" and _is_int(found[key]) else found[key]
    return row


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit() and len(text) < 20


def _summary_ids(home: str) -> list[str]:
    """Every grid job id that has a poll summary in ``home``."""
    try:
        names = os.listdir(os.path.join(home, "db"))
    except FileNotFoundError:
        return []
    return sorted(n[: -len(".state")] for n in names if n.endswith(".state") and valid_job_id(n[: -len(".state")]))


def home_of_poll() -> str:
    """``$JIM_HOME``, else the configuration's home."""
    if os.environ.get("JIM_HOME"):
        return os.path.expanduser(os.environ["JIM_HOME"])
    from jim.config import load  # (lazy: only without $JIM_HOME does poll parse the config)

    return str(load().home)


def as_owner_requested() -> bool:
    """``$JIM_AS_OWNER`` asks to act as the home's owner (as ``--as-owner`` does)."""
    return os.environ.get(AS_OWNER_ENV, "") in ("1", "true", "yes")


def check_home(home: str, *, as_owner: bool) -> None:
    """Refuse a home that is not the caller's own (ERROR=47); as root with ``as_owner``, become its owner."""
    why = act_as_owner(home) if as_owner else None
    why = why or home_problem(home)
    if why:
        from jim.errors import ConfigError  # (lazy: a poll that answers never needs the error classes)

        raise ConfigError(why)


def _not_found(message: str, gram_error: int | None = None) -> NoReturn:
    from jim.errors import JobNotFound  # (lazy: a poll that answers never needs the error classes)

    raise JobNotFound(message, gram_error=gram_error)
