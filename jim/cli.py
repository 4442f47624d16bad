"""jim's command line: ``main(argv) -> int``.

Protocol commands (what the gatekeeper's module calls) print only
``KEY=VALUE`` lines on stdout::

    jim submit --rsl 'RSL' | --description FILE.json | --jdl FILE   -> JOB_ID=, JOB_STATE=
    jim poll --job-id ID                                            -> JOB_STATE= [EXIT_CODE=]
    jim poll --json (--job-id A [--job-id B ...] | --active)        -> one JSON object, id -> those keys
    jim cancel --job-id ID                                          -> JOB_STATE=FAILED
    on any error                                                    -> ERROR=<GRAM code>, MESSAGE=<one line>

While a protocol command runs, file descriptor 1 points at stderr: anything a
plug-in or library prints lands there, never in the protocol.  Exit status:
0 success, 1 failure (the protocol lines say which), 2 usage error.

Human commands: ``status``, ``list``, ``plan``, ``handlers``, ``doctor``,
``serve``, ``advertise``, ``gram-install``, ``arc-install`` (and ``arc-backend``, the ARC CE's calls).

``poll`` runs every 10 s per grid job at a real site, so it takes a short
path: no argparse, no lxml, no config parsing when ``$JIM_HOME`` is set; it
reads the one-line summary of the grid job and starts the background
processes if they are needed.
"""

from __future__ import annotations

import os
import sys
import time

from jim import __version__, background, summary
from jim.jobid import valid_job_id

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing, ~3 ms of poll's hot path)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

    from jim.config import Config
    from jim.errors import JimError
    from jim.jobdesc import JobDescription

PROTOCOL = ("submit", "poll", "cancel")
USAGE = """usage: jim [-v|-q] [--as-owner] COMMAND ...

protocol commands (stdout is KEY=VALUE lines only):
  submit (--rsl RSL | --description FILE.json | --jdl FILE)   record a grid job, start it
  poll --job-id ID                                             the grid job's GRAM state
  poll --json (--job-id A [--job-id B ...] | --active)         many grid jobs at once: one JSON object
  cancel --job-id ID                                           stop every local job, gather outputs

commands for people:
  status ID [--json]        grid state, plan, every local job
  kill ID.k                 stop some local jobs of a running grid job (ID.3-7,12 for several)
  resubmit ID.k | ID --failed   another attempt of some local jobs that ended (ID.3-7,12 too)
  list [--state S] [--json] grid jobs, newest first
  plan --dry-run (--rsl|--description|--jdl) [--json]   the plan, without recording anything
  handlers                  installed job types
  doctor                    check the configuration and the batch system
  serve [--host H] [--port N] | --socket [PATH] | --site --proxy-secret-file FILE
                            read-only web view of your jobs only (token URL, 0600 socket,
                            or site-wide behind an authenticating web server)
  advertise [--collector HOST] [--json]   the site's ClassAd: printed, or sent to a collector
  gram-install [...]        install the GRAM5 job manager glue (as root)
  arc-install [...]         install jim as a NorduGrid ARC CE backend, lrms=jim (as root)
  arc-backend submit|scan|cancel|info --config CFG ...   the ARC CE's calls (see docs/arc.md)

environment: JIM_HOME (data, default ~/.jim), JIM_CONFIG (TOML config, default /etc/jim/jim.toml)

jim refuses a home that another account owns or can write to (ERROR=47). As root,
--as-owner (or JIM_AS_OWNER=1) acts on a user's home as that user: jim switches
to the home's owner before it touches anything.
"""


class _Protocol:
    """Protocol output on the real stdout; fd 1 redirected to stderr meanwhile."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self.fd = os.dup(1)
        os.dup2(2, 1)
        self.lines: list[str] = []

    def emit(self, key: str, value: object) -> None:
        """One ``KEY=value`` line: the value on one line, printable, at most 2000 characters; what is
        not printable (a control character, a byte that was not UTF-8, a lone surrogate) escaped."""
        text = " ".join(str(value).split())
        if len(text) > 2000:
            text = text[:2000] + "..."
        if not (text.isascii() and text.isprintable()):
            text = "".join(
                c
                if c.isprintable()
                else f"\\x{ord(c) - 0xDC00:02x}"  # (a byte that was not UTF-8, as Python decodes it)
                if 0xDC80 <= ord(c) <= 0xDCFF
                else f"\\x{ord(c):02x}"
                if ord(c) < 0x100
                else f"\\u{ord(c):04x}"
                for c in text
            )
        self.lines.append(f"{key}={text}\n")

    def close(self, final: bool = True) -> None:
        """Write the lines to the real stdout, all of them or an OSError; ``final=False`` answers early
        (``jim submit``, before it confirms the grid job): fd 1 stays on stderr and lines emitted
        later (an error after the answer) are never written."""
        answered = getattr(self, "answered", False)
        data = b"" if answered else "".join(self.lines).encode()
        try:
            while data:
                data = data[os.write(self.fd, data) :]
            self.answered = answered or not final
        finally:
            if final:
                os.dup2(self.fd, 1)
                os.close(self.fd)


def _fast_poll(args: list[str]) -> int:
    """``jim poll --job-id ID`` without argparse, config parsing or lxml: the hot path."""
    if "--json" in args:
        return _bulk_poll(args, as_owner=False)
    job_id = None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--job-id", "-j") and i + 1 < len(args):
            job_id = args[i + 1]
            i += 2
        elif a.startswith("--job-id="):
            job_id = a.split("=", 1)[1]
            i += 1
        elif a in ("--description", "--rsl", "--jdl") and i + 1 < len(args):
            i += 2  # the GRAM module may hand the description again: not needed
        else:
            i += 1
    out = _Protocol()
    code = 0
    try:
        try:
            if not job_id:
                _not_found("poll needs --job-id ID", gram_error=46)
            home = _home_for_poll()
            _check_home(home, as_owner=_as_owner_env())
            _poll(home, job_id, out)
        except Exception as e:
            from jim.errors import JimError  # (lazy: a poll that answers never needs the error classes)

            if not isinstance(e, JimError):
                raise
            code = _report(out, e)
    except Exception as e:  # never a traceback on stdout
        out.lines = []
        out.emit("ERROR", 17)
        out.emit("MESSAGE", f"internal error in jim poll: {type(e).__name__}: {e}")
        _log_exception("poll")
        code = 1
    finally:
        out.close()
    return code


#: At most this many ``--job-id`` in one ``jim poll --json``.
MAX_BULK_IDS = 100_000


def _bulk_poll(args: list[str], *, as_owner: bool) -> int:
    """``jim poll --json --job-id A [--job-id B ...]`` or ``--json --active``: ONE JSON object
    ``{"<id>": {"JOB_STATE": .., "EXIT_CODE": .., "MESSAGE": ..}}`` read from the poll summaries (an id
    jim does not know: ``{"<id>": {"ERROR": 156, "MESSAGE": ..}}``); the background processes are started
    as ``jim poll`` starts them.  A problem with the home itself: ``{"ERROR": n, "MESSAGE": ..}``, exit 1."""
    import json  # (lazy: the single poll prints KEY=VALUE lines)

    ids: list[str] = []
    active = False
    bad = None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--job-id", "-j") and i + 1 < len(args):
            ids.append(args[i + 1])
            i += 2
            continue
        if a.startswith("--job-id="):
            ids.append(a.split("=", 1)[1])
        elif a == "--active":
            active = True
        elif a != "--json":
            bad = f"unknown argument {a[:80]!r} to jim poll --json"
        i += 1
    if not bad and not ids and not active:
        bad = "poll --json needs --job-id ID (one or more) or --active"
    if not bad and len(ids) > MAX_BULK_IDS:
        bad = f"poll --json takes at most {MAX_BULK_IDS} job ids"
    answer: dict[str, object] = {}
    code = 0
    out = _Protocol()  # (anything printed meanwhile goes to stderr)
    try:
        try:
            if bad:
                _not_found(bad, gram_error=46)
            home = _home_for_poll()
            _check_home(home, as_owner=as_owner or _as_owner_env())
            named = set(ids)
            if active:
                ids += [j for j in _summary_ids(home) if j not in named]
            now = time.time()
            for job_id in ids:
                if not valid_job_id(job_id):
                    answer[job_id] = {"ERROR": 156, "MESSAGE": f"no grid job {job_id[:80]!r} (not a jim job id)"}
                    continue
                found = summary.read(summary.path(home, job_id))
                if found is None:
                    answer[job_id] = {"ERROR": 156, "MESSAGE": f"no grid job {job_id}"}
                    continue
                if summary.terminal(found) and job_id not in named:
                    continue
                row: dict[str, object] = {}
                for key in summary.PROTOCOL_KEYS:
                    if key in found:
                        row[key] = int(found[key]) if key == "EXIT_CODE" and _is_int(found[key]) else found[key]
                answer[job_id] = row
                if not summary.terminal(found):
                    background.ensure_running(home, job_id, worker_needed=summary.unsubmitted(found, now))
        except Exception as e:
            from jim.errors import JimError  # (lazy: see _fast_poll)

            if not isinstance(e, JimError):
                raise
            answer, code = {"ERROR": e.gram_error, "MESSAGE": e.message}, 1
    except Exception as e:  # never a traceback on stdout
        answer, code = {"ERROR": 17, "MESSAGE": f"internal error in jim poll: {type(e).__name__}: {e}"}, 1
        _log_exception("poll --json")
    out.lines = [json.dumps(answer, sort_keys=True) + "\n"]
    out.close()
    return code


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit() and len(text) < 20


def _summary_ids(home: str) -> list[str]:
    """Every grid job id that has a poll summary in ``home``."""
    try:
        names = os.listdir(os.path.join(home, "db"))
    except FileNotFoundError:
        return []
    return sorted(n[: -len(".state")] for n in names if n.endswith(".state") and valid_job_id(n[: -len(".state")]))


def _home_for_poll() -> str:
    if os.environ.get("JIM_HOME"):
        return os.path.expanduser(os.environ["JIM_HOME"])
    from jim.config import load  # (lazy: only without $JIM_HOME does poll parse the config)

    return str(load().home)


def _poll(home: str, job_id: str, out: _Protocol) -> None:
    """Answer from the grid job's poll summary; start the background processes it still needs."""
    if not valid_job_id(job_id):
        _not_found(f"no grid job {job_id!r} (not a jim job id)")
    found = summary.read(summary.path(home, job_id))
    if found is None:
        _not_found(f"no grid job {job_id}")
    for key in summary.PROTOCOL_KEYS:
        if key in found:
            out.emit(key, found[key])
    if not summary.terminal(found):
        # (a worker for local jobs that may be submitted now: not for retries in their cool-off)
        background.ensure_running(home, job_id, worker_needed=summary.unsubmitted(found, time.time()))


def _as_owner_env() -> bool:
    return os.environ.get("JIM_AS_OWNER", "") in ("1", "true", "yes")


def _check_home(home: str, *, as_owner: bool) -> None:
    """Refuse a home that is not the caller's own (ERROR=47); as root with ``as_owner``, become its owner."""
    from jim.ownership import act_as_owner, home_problem  # (lazy: poll's fast path imports it when it runs)

    why = act_as_owner(home) if as_owner else None
    why = why or home_problem(home)
    if why:
        from jim.errors import ConfigError  # (lazy: see _fast_poll)

        raise ConfigError(why)


def _not_found(message: str, gram_error: int | None = None) -> NoReturn:
    from jim.errors import JobNotFound  # (lazy: see _fast_poll)

    raise JobNotFound(message, gram_error=gram_error)


def _log_exception(where: str) -> None:
    try:
        import logging  # (lazy: poll never logs unless something went wrong)

        logging.getLogger("jim.cli").exception("unexpected error in %s", where)
    except Exception:
        pass


# ---------------------------------------------------------------------------


def _parser(only: str | None = None) -> Any:
    """The argument parser; with ``only``, just that command's (building them all costs 20 ms)."""
    import argparse  # (lazy: poll parses its own arguments)

    names = (
        "submit",
        "poll",
        "cancel",
        "kill",
        "resubmit",
        "status",
        "list",
        "plan",
        "handlers",
        "doctor",
        "advertise",
        "serve",
        "gram-install",
        background.WORKER_COMMAND,
        background.MONITOR_COMMAND,
    )
    want = (lambda name: True) if only not in names else (lambda name: name == only)

    p = argparse.ArgumentParser(
        prog="jim",
        description="jim: a site-side grid job manager",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log to stderr too, with debug detail")
    p.add_argument("-q", "--quiet", action="store_true", help="log errors only")
    p.add_argument(
        "--as-owner",
        action="store_true",
        help="as root: act on a home another account owns, as that account (also JIM_AS_OWNER=1)",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add_desc(sp, required=True):
        g = sp.add_mutually_exclusive_group(required=required)
        g.add_argument("--rsl", help="the job description as GRAM RSL")
        g.add_argument(
            "--description", metavar="FILE", help="the job description as JSON (attribute -> list of strings)"
        )
        g.add_argument("--jdl", metavar="FILE", help="the job description as a JDL / ClassAd file")

    if want("submit"):
        sp = sub.add_parser("submit", help="record a grid job and start it")
        add_desc(sp)
    if want("poll"):
        sp = sub.add_parser("poll", help="the GRAM state of a grid job")
        sp.add_argument("--job-id", required=True)
    if want("cancel"):
        sp = sub.add_parser("cancel", help="stop every local job of a grid job")
        sp.add_argument("--job-id", required=True)
        sp.add_argument("--description", help=argparse.SUPPRESS)
    if want("kill"):
        sp = sub.add_parser("kill", help="stop some local jobs of a running grid job: ID.k, ID.3-7,12")
        sp.add_argument("selection", metavar="ID.k", help="the grid job id, a dot, local job indices (3, 3-7, 3-7,12)")
    if want("resubmit"):
        sp = sub.add_parser("resubmit", help="another attempt of some local jobs that ended: ID.k, ID --failed")
        sp.add_argument("selection", metavar="ID.k", help="ID.k, ID.3-7,12, or ID with --failed")
        sp.add_argument("--failed", action="store_true", help="every local job that ended FAILED, LOST or CANCELLED")
    if want("status"):
        sp = sub.add_parser("status", help="a grid job in detail")
        sp.add_argument("job_id", metavar="ID")
        sp.add_argument("--json", action="store_true", help="machine-readable")
    if want("list"):
        sp = sub.add_parser("list", help="grid jobs, newest first")
        sp.add_argument("--state", help="only grid jobs in this GRAM state")
        sp.add_argument("--json", action="store_true")
    if want("plan"):
        sp = sub.add_parser("plan", help="show the plan of a description without recording it")
        sp.add_argument("--dry-run", action="store_true", help="(the default and only mode)")
        sp.add_argument("--json", action="store_true")
        add_desc(sp)
    if want("handlers"):
        sub.add_parser("handlers", help="installed job types")
    if want("doctor"):
        sub.add_parser("doctor", help="check configuration, home and batch system")
    if want("advertise"):
        sp = sub.add_parser("advertise", help="the site's ClassAd: print it, or send it to an HTCondor collector")
        sp.add_argument("--collector", metavar="HOST[:PORT]", help="send the ad there (default: [advertise] collector)")
        sp.add_argument("--name", help="the ad's Name (default: [advertise] name, else the site's name)")
        sp.add_argument("--json", action="store_true", help="print the ad as ClassAd JSON")
    if want("serve"):
        sp = sub.add_parser("serve", help="read-only web view of the database (yours only: a token or a socket)")
        sp.add_argument(
            "--host",
            default="127.0.0.1",
            help="address to listen on (default 127.0.0.1: this machine only; the URL printed carries a token)",
        )
        sp.add_argument("--port", type=int, default=8642, help="port (default 8642; 0 picks a free one)")
        sp.add_argument(
            "--socket",
            nargs="?",
            const="",
            metavar="PATH",
            help="serve on a Unix socket only you can connect to (default $JIM_HOME/serve.sock), no token",
        )
        sp.add_argument(
            "--site",
            action="store_true",
            help="as root, behind the site's web server: each authenticated user sees their own grid jobs",
        )
        sp.add_argument("--proxy-secret-file", metavar="FILE", help="--site: the 0600 file of the proxy's secret")
        sp.add_argument("--homes", default="{home}/.jim", help="--site: each user's jim home (default {home}/.jim)")
        sp.add_argument("--user-header", default="X-Remote-User", help="--site: the header naming the user")
    if want("gram-install"):
        sub.add_parser("gram-install", help="install the GRAM5 glue (run as root)", add_help=False)
    if want(background.WORKER_COMMAND):
        sp = sub.add_parser(background.WORKER_COMMAND)
        sp.add_argument("job_id")
    if want(background.MONITOR_COMMAND):
        sub.add_parser(background.MONITOR_COMMAND)
    return p


def _load_description(args: Any) -> JobDescription:
    """The job description of ``--rsl``, ``--description`` or ``--jdl``, held to jim's description limits
    (``MAX_*`` in :mod:`jim.jobdesc`): only a regular file is read, and never more than the limit."""
    from jim.jobdesc import parse_jdl, parse_json, parse_rsl, read_description_file  # (lazy: submit and plan only)

    if args.rsl is not None:
        return parse_rsl(args.rsl)
    text = read_description_file(args.description or args.jdl)
    if args.description:
        return parse_json(text)
    from jim.handlers import discover  # (lazy: a JDL's names are checked against the job types before evaluation)

    declared = {name for cls in discover().values() if isinstance(cls, type) for name in cls.attributes}
    return parse_jdl(text, extra_known=declared)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.umask(0o077)  # everything jim writes is private to its user
    flags = []
    while argv and argv[0] in ("-v", "--verbose", "-q", "--quiet", "--as-owner"):
        flags.append(argv.pop(0))
    if argv and argv[0] == "poll" and not flags:
        return _fast_poll(argv[1:])
    if argv and argv[0] == "poll" and "--json" in argv:
        return _bulk_poll(argv[1:], as_owner="--as-owner" in flags)
    if argv and argv[0] in ("arc-install", "arc-backend"):
        from jim.arc import main as arc_main  # (lazy: the ARC CE's backend and its installer, never poll's)

        return arc_main(argv)
    if argv and argv[0] == "gram-install":
        from jim.gram import main as gram_main  # (lazy: an admin's command, never poll's)

        return gram_main(argv[1:])
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"jim {__version__}")
        return 0
    return _run(argv[0], flags + argv)


def _run(command: str, argv: list[str]) -> int:
    """Parse the arguments of ``command`` and run it; a protocol command's stdout is protocol lines only."""
    protocol = command in PROTOCOL
    if command != background.MONITOR_COMMAND:  # short-lived: garbage collection only costs time
        import gc  # (lazy: not poll's)

        gc.disable()
    if not protocol:  # a person piping into head: end quietly
        import signal  # (lazy: it imports enum; poll's hot path does without)

        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    out = _Protocol() if protocol else None
    try:
        try:
            args = _parser(command).parse_args(argv)
        except SystemExit as e:
            if out is not None and e.code:  # (not after --help)
                out.emit("ERROR", 46)
                out.emit("MESSAGE", f"bad arguments to jim {command} (see jim --help)")
            return 2 if e.code else 0
        return _dispatch(args, out)
    finally:
        if out is not None:
            out.close()


def _dispatch(args: Any, out: _Protocol | None) -> int:
    from jim.errors import BatchError, JimError  # (lazy: a poll that answers never needs the error classes)

    try:
        from jim.config import load  # (lazy: poll's hot path does without the config)
        from jim.log import setup  # (lazy: likewise)

        config = load()
        _check_home(str(config.home), as_owner=args.as_owner or _as_owner_env())
        setup(config.home, verbose=args.verbose, quiet=args.quiet)
    except JimError as e:
        return _report(out, e)
    try:
        return COMMANDS[args.command](config, args, out)
    except JimError as e:
        import logging  # (lazy: see _log_exception)

        details = e.details() if isinstance(e, BatchError) else e.message
        logging.getLogger("jim.cli").error("jim %s failed: %s", args.command, details)
        return _report(out, e)
    except Exception as e:
        _log_exception(args.command)
        if out is not None:
            out.lines = []
            out.emit("ERROR", 17)
            out.emit("MESSAGE", f"internal error in jim {args.command}: {type(e).__name__}: {e} (see jim's log)")
            return 1
        raise


def _report(out: _Protocol | None, e: JimError) -> int:
    if out is not None:
        out.lines = []
        out.emit("ERROR", e.gram_error)
        out.emit("MESSAGE", e.message)
    else:
        print(f"jim: error: {e.message}", file=sys.stderr)
    return 1


# ---------------------------------------------------------------------------
# commands: each imports its stage when it runs (``jim poll`` loads none of them)
# ---------------------------------------------------------------------------


def cmd_submit(config: Config, args: Any, out: _Protocol) -> int:
    from jim.submit import submit  # (lazy: not poll's)

    def announce(job_id: str) -> None:  # written before the grid job is confirmed: see jim.submit
        out.emit("JOB_ID", job_id)
        out.emit("JOB_STATE", "PENDING")
        out.close(final=False)

    submit(config, _load_description(args), announce=announce)
    return 0


def cmd_poll(config: Config, args: Any, out: _Protocol) -> int:  # with -v/-q; normally the fast path answers
    _poll(str(config.home), args.job_id, out)
    return 0


def cmd_cancel(config: Config, args: Any, out: _Protocol) -> int:
    from jim.cancel import cancel  # (lazy: not poll's)

    out.emit("JOB_STATE", cancel(config, args.job_id).name)
    return 0


def cmd_kill(config: Config, args: Any, out: None) -> int:
    from jim.cancel import kill  # (lazy: not poll's)
    from jim.ranges import parse_selection  # (lazy: not poll's)

    job_id, indices = parse_selection(args.selection)
    for index, state in kill(config, job_id, indices).items():
        print(f"{job_id}.{index} {state.name}")
    return 0


def cmd_resubmit(config: Config, args: Any, out: None) -> int:
    from jim.errors import JimError  # (lazy: not poll's)
    from jim.ranges import parse_selection  # (lazy: not poll's)
    from jim.resubmit import resubmit  # (lazy: not poll's)

    if "." in args.selection:
        job_id, indices = parse_selection(args.selection)
        chosen: list[int] | None = indices
    elif args.failed:
        job_id, chosen = args.selection, None
    else:
        raise JimError(f"{args.selection[:200]!r}: name local jobs (ID.k, ID.3-7,12) or give --failed")
    for index, attempt in resubmit(config, job_id, chosen, failed=args.failed).items():
        print(f"{job_id}.{index} attempt {attempt} PLANNED")
    return 0


def cmd_status(config: Config, args: Any, out: None) -> int:
    from jim.db import Database  # (lazy: not poll's)
    from jim.paths import Home  # (lazy: not poll's)
    from jim.status import dump, render_job, status_json  # (lazy: not poll's)

    home = Home(config.home)
    job = Database(home, config.deadlines.lock).read(home.check_id(args.job_id))
    if args.json:
        print(dump(status_json(job)))
    else:
        print(render_job(job), end="")  # (the text of render_status(status_json(job)), full rows only for those shown)
    return 0


def cmd_list(config: Config, args: Any, out: None) -> int:
    from jim.db import Database  # (lazy: not poll's)
    from jim.paths import Home  # (lazy: not poll's)
    from jim.status import dump, render_list  # (lazy: not poll's)

    home = Home(config.home)
    jobs = Database(home, config.deadlines.lock).list() if home.db.is_dir() else []
    if args.state:
        jobs = [j for j in jobs if j["state"] == args.state.upper()]
    if args.json:
        print(dump(jobs))
    else:
        print(render_list(jobs), end="")
    return 0


def cmd_plan(config: Config, args: Any, out: None) -> int:
    """``jim plan --dry-run``: validate, choose the queue and plan; record, write and submit nothing."""
    from jim.plan import dry_run_json, make_plan, render_dry_run  # (lazy: not poll's)

    desc = _load_description(args)
    _handler, plan, commands = make_plan(config, desc, dry_run=True)
    data = dry_run_json(desc, plan, commands)
    if args.json:
        import json  # (lazy: not poll's)

        print(json.dumps(data, indent=2, default=str))
    else:
        print(render_dry_run(data), end="")
    return 0


def cmd_handlers(config: Config, args: Any, out: None) -> int:
    from jim.handlers import discover  # (lazy: not poll's)

    for name, entry in sorted(discover().items()):
        if isinstance(entry, Exception):
            print(f"{name:<14} BROKEN: {type(entry).__name__}: {entry}")
        else:
            doc = (entry.__doc__ or "").strip().splitlines()
            print(f"{name:<14} {doc[0] if doc else ''}")
    return 0


def cmd_doctor(config: Config, args: Any, out: None) -> int:
    from jim.doctor import doctor  # (lazy: not poll's)

    return doctor(config)


def cmd_advertise(config: Config, args: Any, out: None) -> int:
    from jim.advertise import run  # (lazy: not poll's)

    return run(config, collector=args.collector, as_json=args.json, name=args.name)


def cmd_serve(config: Config, args: Any, out: None) -> int:
    from jim.web import serve  # (lazy: not poll's)

    return serve(
        config,
        host=args.host,
        port=args.port,
        socket_path=args.socket,
        site=args.site,
        secret_file=args.proxy_secret_file,
        homes=args.homes,
        user_header=args.user_header,
    )


def cmd_worker(config: Config, args: Any, out: None) -> int:
    from jim.worker import run  # (lazy: not poll's)

    return run(config, args.job_id)


def cmd_monitor(config: Config, args: Any, out: None) -> int:
    from jim.monitor import run  # (lazy: not poll's)

    return run(config)


COMMANDS: dict[str, Callable[[Config, Any, Any], int]] = {
    "submit": cmd_submit,
    "poll": cmd_poll,
    "cancel": cmd_cancel,
    "kill": cmd_kill,
    "resubmit": cmd_resubmit,
    "status": cmd_status,
    "list": cmd_list,
    "plan": cmd_plan,
    "handlers": cmd_handlers,
    "doctor": cmd_doctor,
    "serve": cmd_serve,
    "advertise": cmd_advertise,
    background.WORKER_COMMAND: cmd_worker,
    background.MONITOR_COMMAND: cmd_monitor,
}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
