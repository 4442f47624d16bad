"""Every command but ``jim poll``'s hot path: its arguments parsed, the configuration loaded, the command run.

:func:`run` parses the arguments (:mod:`jim.arguments`; a mistake: exit status
2), loads the configuration, refuses a home that is not the caller's own
(:func:`jim.poll.check_home`, as root with ``--as-owner`` become its owner),
sets up jim's log (``-v``: stderr too, ``-q``: errors only), and runs the
command.  A :class:`jim.errors.JimError` a command raises is logged (a batch
system's in full) and becomes its one-line answer:

* the protocol commands (``submit``, ``cancel``, and ``poll`` with ``-v`` or
  ``-q``) answer only through :class:`jim.protocol.Answer`, whose envelope makes
  every error ``ERROR=`` and ``MESSAGE=`` lines (bad arguments: ERROR=46, exit
  status 2);
* the commands for people print for people, and an error on stderr
  (``jim: error: <message>``, exit status 1); one jim did not expect is logged
  and raised, traceback and all.

A command that is not the monitor runs without garbage collection (it is
short-lived: collecting only costs time), and a command for people ends
quietly when its reader does (``jim list | head``).

Every command's stage is imported here, except four, each imported when its
command runs: jim's web view (``serve``: jinja2, http.server, ssl) and
HTCondor's ClassAd bindings (``advertise``) would add some 50 ms of CPU to
every ``jim submit`` and ``jim cancel``, and the bindings are never imported
with jim; the worker and the monitor (``_worker``, ``_monitor``, the
background processes) because ``jim submit`` answers before it loads the
worker (see :mod:`jim.submit`).  ``metrics`` and ``status --all-users``
import theirs when they run too (the Prometheus client library; root's count
of every home).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from jim import accounting, apel, background, doctor, drain, poll, purge
from jim.arguments import parser, usage_error
from jim.cancel import cancel, kill
from jim.config import load
from jim.errors import BatchError, GramError, JimError
from jim.handlers import discover
from jim.jobdesc import JobDescription, parse_jdl, parse_json, parse_rsl, read_description_file
from jim.log import setup
from jim.plan import dry_run_json, make_plan, render_dry_run
from jim.protocol import Answer
from jim.ranges import parse_selection
from jim.resubmit import resubmit
from jim.site import Site
from jim.status import dump, status_json
from jim.statustext import render_job, render_list
from jim.submit import submit

_log = logging.getLogger("jim.cli")

#: A protocol command: the site, its arguments, its answer -> its exit status.
ProtocolCommand = Callable[[Site, argparse.Namespace, Answer], int]
#: A command for people: the site, its arguments -> its exit status.
PeopleCommand = Callable[[Site, argparse.Namespace], int]


def run(command: str, argv: list[str]) -> int:
    """Parse ``argv`` (``jim``'s flags, then ``command`` and its arguments) and run ``command``; the exit status."""
    if command != background.MONITOR_COMMAND:  # short-lived: garbage collection only costs time
        gc.disable()
    if command in PROTOCOL:
        return _run_protocol(command, argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a person piping into head: end quietly
    args = _parse(command, argv)
    if isinstance(args, int):
        return args
    try:
        site = _setup(args)
        with _errors_logged(command, unexpected=True):
            return FOR_PEOPLE[command](site, args)
    except JimError as e:
        print(f"jim: error: {e.message}", file=sys.stderr)
        return 1


def _run_protocol(command: str, argv: list[str]) -> int:
    """A protocol command: its stdout is its :class:`Answer`, whatever happens."""
    with Answer(command) as out:
        args = _parse(command, argv)
        if isinstance(args, int):
            if args:  # (not after --help)
                out.fail(GramError.BAD_ARGUMENTS, f"bad arguments to jim {command} (see jim --help)")
            return args
        site = _setup(args)
        with _errors_logged(command, unexpected=False):  # (the answer's envelope logs what jim did not expect)
            out.code = PROTOCOL[command](site, args, out)
    return out.code


def _parse(command: str, argv: list[str]) -> argparse.Namespace | int:
    """The parsed arguments, or the exit status argparse chose (2 after a mistake, 0 after ``--help``)."""
    try:
        return parser(command).parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0


def _setup(args: argparse.Namespace) -> Site:
    """The site of the configuration, once its home is checked (become its owner with ``--as-owner``)
    and jim's log set up."""
    config = load()
    poll.check_home(str(config.home), as_owner=args.as_owner or poll.as_owner_requested())
    setup(config.home, verbose=args.verbose, quiet=args.quiet)
    return Site(config)


@contextmanager
def _errors_logged(command: str, *, unexpected: bool) -> Iterator[None]:
    """What the block raises, logged and raised again: a JimError in one line (a batch system's in
    full), with ``unexpected`` anything else with its traceback."""
    try:
        yield
    except JimError as e:
        _log.error("jim %s failed: %s", command, e.details() if isinstance(e, BatchError) else e.message)
        raise
    except Exception:
        if unexpected:
            _log.exception("unexpected error in %s", command)
        raise


def _load_description(args: argparse.Namespace) -> JobDescription:
    """The job description of ``--rsl``, ``--description`` or ``--jdl``, held to jim's description limits
    (``MAX_*`` in :mod:`jim.jobdesc`): only a regular file is read, and never more than the limit."""
    if args.rsl is not None:
        return parse_rsl(args.rsl)
    text = read_description_file(args.description or args.jdl)
    if args.description:
        return parse_json(text)
    # (a JDL's names are checked against the job types' attributes before evaluation)
    declared = {name for cls in discover().values() if isinstance(cls, type) for name in cls.attributes}
    return parse_jdl(text, extra_known=declared)


# ---- the protocol commands: each answers through ``out`` only


def cmd_submit(site: Site, args: argparse.Namespace, out: Answer) -> int:
    def announce(job_id: str) -> None:  # written before the grid job is confirmed: see jim.submit
        out.emit("JOB_ID", job_id)
        out.emit("JOB_STATE", "PENDING")
        out.close(final=False)

    submit(site, _load_description(args), announce=announce)
    return 0


def cmd_poll(site: Site, args: argparse.Namespace, out: Answer) -> int:
    """``jim -v poll`` and ``jim -q poll``; without them :func:`jim.poll.main` answers."""
    poll.answer(str(site.home.root), args.job_id, out)
    return 0


def cmd_cancel(site: Site, args: argparse.Namespace, out: Answer) -> int:
    out.emit("JOB_STATE", cancel(site, args.job_id).name)
    return 0


# ---- the commands for people


def cmd_kill(site: Site, args: argparse.Namespace) -> int:
    job_id, indices = parse_selection(args.selection)
    for index, state in kill(site, job_id, indices).items():
        print(f"{job_id}.{index} {state.name}")
    return 0


def cmd_resubmit(site: Site, args: argparse.Namespace) -> int:
    if "." in args.selection:
        job_id, indices = parse_selection(args.selection)
        chosen: list[int] | None = indices
    elif args.failed:
        job_id, chosen = args.selection, None
    else:
        raise JimError(f"{args.selection[:200]!r}: name local jobs (ID.k, ID.3-7,12) or give --failed")
    for index, attempt in resubmit(site, job_id, chosen, failed=args.failed).items():
        print(f"{job_id}.{index} attempt {attempt} PLANNED")
    return 0


def cmd_status(site: Site, args: argparse.Namespace) -> int:
    if (args.job_id is None) != bool(args.all_users) or (args.homes and not args.all_users):
        return usage_error("status", "give a grid job ID, or (as root) --all-users [--homes PATTERN]")
    if args.all_users:
        from jim.adminview import main  # (lazy: root's view of every home, never a user's command's)

        return main(args, site.config.home_pattern)
    job = site.db.read(site.home.check_id(args.job_id))
    if args.json:
        print(dump(status_json(job)))
    else:
        print(render_job(job), end="")
    return 0


def cmd_list(site: Site, args: argparse.Namespace) -> int:
    jobs = site.db.list() if site.home.db.is_dir() else []
    if args.state:
        jobs = [j for j in jobs if j["state"] == args.state.upper()]
    if args.json:
        print(dump(jobs))
    else:
        print(render_list(jobs), end="")
    return 0


def cmd_plan(site: Site, args: argparse.Namespace) -> int:
    """``jim plan --dry-run``: validate, choose the queue and plan; record, write and submit nothing."""
    desc = _load_description(args)
    _handler, plan, commands = make_plan(site.config, desc, dry_run=True)
    data = dry_run_json(desc, plan, commands)
    if args.json:
        print(json.dumps(data, indent=2, default=str))
    else:
        print(render_dry_run(data), end="")
    return 0


def cmd_handlers(site: Site, args: argparse.Namespace) -> int:
    for name, entry in sorted(discover().items()):
        if isinstance(entry, Exception):
            print(f"{name:<14} BROKEN: {type(entry).__name__}: {entry}")
        else:
            doc = (entry.__doc__ or "").strip().splitlines()
            print(f"{name:<14} {doc[0] if doc else ''}")
    return 0


def cmd_doctor(site: Site, args: argparse.Namespace) -> int:
    return doctor.doctor(site.config)


def cmd_accounting(site: Site, args: argparse.Namespace) -> int:
    """``jim accounting``: the figures of the home's records; ``--publish``: APEL's blah records."""
    if args.publish:
        published = apel.publish_configured(site.config, site.home, args.home or [])
        print(dump(published.to_json()) if args.json else published.render())
        return 0
    since, until = accounting.parse_time(args.since, "--since"), accounting.parse_time(args.until, "--until")
    found = accounting.summarize(accounting.records(site.db, since), args.by, since, until)
    if args.json:
        print(dump([s.to_json() for s in found]))
    else:
        print(accounting.render(found, args.by), end="")
    return 0


def cmd_drain(site: Site, args: argparse.Namespace) -> int:
    """``jim drain on [--reason TEXT] | off | status``: root's flag file written, removed or read (jim.drain)."""
    path = site.config.site.drain_file
    if args.reason is not None and args.action != "on":
        raise JimError("--reason goes with jim drain on only")
    if args.action == "on":
        state = drain.turn_on(path, args.reason or "")
    else:
        state = drain.turn_off(path) if args.action == "off" else drain.look(path)
    print(state.describe())
    return 0


def cmd_metrics(site: Site, args: argparse.Namespace) -> int:
    from jim.metrics import main  # (lazy: the Prometheus client library costs some 60 ms)

    if args.homes and not args.all_users:
        return usage_error("metrics", "--homes goes with --all-users")
    return main(site.home, args, site.config.home_pattern)


def cmd_purge(site: Site, args: argparse.Namespace) -> int:
    """``jim purge``: what ``[retention]`` (and ``--older-than``) says has expired, one line per grid job."""
    rules = purge.Rules.of(site.config.retention, purge.older_than(args.older_than))
    if args.homes is not None and not args.all_users:
        raise JimError("--homes goes with --all-users")
    if args.all_users:
        report = purge.all_users(site.config, rules, homes=args.homes, dry_run=args.dry_run)
    else:
        report = purge.purge_home(site.db, rules, dry_run=args.dry_run)
    for line in report.lines():
        print(line)
    print(report.total())
    return 0


def cmd_advertise(site: Site, args: argparse.Namespace) -> int:
    from jim.advertise import run  # (lazy: HTCondor's ClassAd bindings, never imported with jim: see above)

    return run(site.config, collector=args.collector, as_json=args.json, name=args.name)


def cmd_serve(site: Site, args: argparse.Namespace) -> int:
    from jim.web import ServeOptions, serve  # (lazy: jinja2, http.server and ssl, some 50 ms of every command)

    return serve(
        site.config,
        ServeOptions(
            host=args.host,
            port=args.port,
            socket_path=args.socket,
            site=args.site,
            secret_file=args.proxy_secret_file,
            homes=args.homes,
            user_header=args.user_header,
            metrics_token_file=args.metrics_token_file,
        ),
    )


def cmd_worker(site: Site, args: argparse.Namespace) -> int:
    from jim.worker import run  # (lazy: jim submit answers before it loads the worker: see above)

    return run(site, args.job_id)


def cmd_monitor(site: Site, args: argparse.Namespace) -> int:
    from jim.monitor import run  # (lazy: a background process's, like the worker: see above)

    return run(site)


PROTOCOL: dict[str, ProtocolCommand] = {"submit": cmd_submit, "poll": cmd_poll, "cancel": cmd_cancel}
FOR_PEOPLE: dict[str, PeopleCommand] = {
    "kill": cmd_kill,
    "resubmit": cmd_resubmit,
    "status": cmd_status,
    "list": cmd_list,
    "plan": cmd_plan,
    "handlers": cmd_handlers,
    "doctor": cmd_doctor,
    "purge": cmd_purge,
    "serve": cmd_serve,
    "advertise": cmd_advertise,
    "accounting": cmd_accounting,
    "metrics": cmd_metrics,
    "drain": cmd_drain,
    background.WORKER_COMMAND: cmd_worker,
    background.MONITOR_COMMAND: cmd_monitor,
}
