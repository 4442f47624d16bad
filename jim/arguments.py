"""Every command's arguments: the argparse parser of ``jim``, and so the text of ``jim --help``.

:func:`parser` builds the parser of one command (building them all costs
about 20 ms, which ``jim submit`` does without) or, for ``jim --help`` and a
command it does not know, of every command.  ``gram-install``,
``arc-install``, ``arc-backend``, ``blah-install``, ``blah-submit`` (for
every ``blah-<step>``) and ``site-install`` are listed for the help only:
:mod:`jim.cli` hands their arguments to their own mains (:mod:`jim.gram`,
:mod:`jim.arc`, :mod:`jim.blah`, :mod:`jim.siteinstall`).
``jim poll`` is read by hand (:mod:`jim.poll`); its parser here serves
``jim -v poll`` and ``jim -q poll``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from jim import __version__, background

if TYPE_CHECKING:
    from typing import TypeAlias

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]  # (what add_subparsers returns)

EPILOG = """\
submit, poll and cancel are the gatekeeper's: their stdout is KEY=VALUE lines only,
ERROR=<GRAM error number> and MESSAGE=<one line> on an error. Exit status: 0 success,
1 failure, 2 bad arguments.

environment: JIM_HOME (data, default ~/.jim), JIM_CONFIG (TOML config, default /etc/jim/jim.toml)

jim refuses a home that another account owns or can write to (ERROR=47). As root,
--as-owner (or JIM_AS_OWNER=1) acts on a user's home as that user: jim switches
to the home's owner before it touches anything.
"""


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``jim``; with ``only`` (one of :data:`COMMANDS`), of that command alone."""
    p = argparse.ArgumentParser(
        prog="jim",
        description="jim: a site-side grid job manager",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log to stderr too, with debug detail")
    p.add_argument("-q", "--quiet", action="store_true", help="log errors only")
    p.add_argument(
        "--as-owner",
        action="store_true",
        help="as root: act on a home another account owns, as that account (also JIM_AS_OWNER=1)",
    )
    p.add_argument("--version", action="version", version=f"jim {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only not in COMMANDS else (only,):
        _ADD[name](sub)
    return p


def usage_error(command: str, message: str) -> int:
    """A mistake argparse cannot see (arguments that depend on each other): ``command``'s usage and
    ``message`` on stderr, as argparse says its own; exit status 2."""
    for action in parser(command)._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            sub = action.choices[command]
            sub.print_usage(sys.stderr)
            print(f"{sub.prog}: error: {message}", file=sys.stderr)
    return 2


def _add_description(sp: argparse.ArgumentParser) -> None:
    g = sp.add_mutually_exclusive_group(required=True)
    g.add_argument("--rsl", help="the job description as GRAM RSL")
    g.add_argument("--description", metavar="FILE", help="the job description as JSON (attribute -> list of strings)")
    g.add_argument("--jdl", metavar="FILE", help="the job description as a JDL / ClassAd file")


def _submit(sub: Subparsers) -> None:
    _add_description(sub.add_parser("submit", help="record a grid job and start it (JOB_ID=, JOB_STATE=)"))


def _poll(sub: Subparsers) -> None:
    sp = sub.add_parser(
        "poll",
        help="the GRAM state of a grid job (JOB_STATE=, EXIT_CODE=); --json: of many, in one JSON object",
        description="jim poll --job-id ID, or jim poll --json (--job-id A [--job-id B ...] | --active)",
    )
    sp.add_argument("--job-id", required=True)


def _cancel(sub: Subparsers) -> None:
    sp = sub.add_parser("cancel", help="stop every local job of a grid job (JOB_STATE=)")
    sp.add_argument("--job-id", required=True)
    sp.add_argument("--description", help=argparse.SUPPRESS)


def _kill(sub: Subparsers) -> None:
    sp = sub.add_parser("kill", help="stop some local jobs of a running grid job: ID.k, ID.3-7,12")
    sp.add_argument("selection", metavar="ID.k", help="the grid job id, a dot, local job indices (3, 3-7, 3-7,12)")


def _resubmit(sub: Subparsers) -> None:
    sp = sub.add_parser("resubmit", help="another attempt of some local jobs that ended: ID.k, ID --failed")
    sp.add_argument("selection", metavar="ID.k", help="ID.k, ID.3-7,12, or ID with --failed")
    sp.add_argument("--failed", action="store_true", help="every local job that ended FAILED, LOST or CANCELLED")


def _status(sub: Subparsers) -> None:
    sp = sub.add_parser("status", help="a grid job in detail; --all-users (root): counts of every account's jim")
    sp.add_argument("job_id", metavar="ID", nargs="?")
    sp.add_argument("--json", action="store_true", help="machine-readable")
    _add_all_users(sp, "per user and state: grid and local jobs, oldest active, monitors, degraded queries")


def _add_all_users(sp: argparse.ArgumentParser, what: str) -> None:
    """``--all-users`` and ``--homes`` (jim status, jim metrics: see jim.metrics, jim.adminview)."""
    sp.add_argument("--all-users", action="store_true", help=f"as root, every account's jim home: {what}")
    sp.add_argument(
        "--homes",
        metavar="PATTERN",
        help="--all-users: each account's jim home ({user}, {home}; default [jim] home), or a glob",
    )


def _metrics(sub: Subparsers) -> None:
    sp = sub.add_parser("metrics", help="counts in the Prometheus text format (docs/metrics.md)")
    _add_all_users(sp, "the site's counts")
    sp.add_argument(
        "--output", metavar="FILE", help="write them to FILE (replaced whole, 0644: a textfile collector's)"
    )


def _list(sub: Subparsers) -> None:
    sp = sub.add_parser("list", help="grid jobs, newest first")
    sp.add_argument("--state", help="only grid jobs in this GRAM state")
    sp.add_argument("--json", action="store_true")


def _plan(sub: Subparsers) -> None:
    sp = sub.add_parser("plan", help="show the plan of a description without recording it")
    sp.add_argument("--dry-run", action="store_true", help="(the default and only mode)")
    sp.add_argument("--json", action="store_true")
    _add_description(sp)


def _handlers(sub: Subparsers) -> None:
    sub.add_parser("handlers", help="installed job types")


def _doctor(sub: Subparsers) -> None:
    sub.add_parser("doctor", help="check configuration, home and batch system")


def _advertise(sub: Subparsers) -> None:
    sp = sub.add_parser("advertise", help="the site's ClassAd: print it, or send it to an HTCondor collector")
    sp.add_argument("--collector", metavar="HOST[:PORT]", help="send the ad there (default: [advertise] collector)")
    sp.add_argument("--name", help="the ad's Name (default: [advertise] name, else the site's name)")
    sp.add_argument("--json", action="store_true", help="print the ad as ClassAd JSON")


def _serve(sub: Subparsers) -> None:
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
    sp.add_argument(
        "--metrics-token-file",
        metavar="FILE",
        help="--site: the 0600 file of the bearer token a scraper sends for /metrics (every user's counts)",
    )


def _gram_install(sub: Subparsers) -> None:
    sub.add_parser("gram-install", help="install the GRAM5 glue (run as root; --help: its options)", add_help=False)


def _arc_install(sub: Subparsers) -> None:
    sub.add_parser(
        "arc-install",
        help="install jim as a NorduGrid ARC CE backend, lrms=jim (run as root; --help: its options)",
        add_help=False,
    )


def _arc_backend(sub: Subparsers) -> None:
    sub.add_parser(
        "arc-backend", help="the ARC CE's calls: submit|scan|cancel|info --config CFG ... (docs/arc.md)", add_help=False
    )


def _blah_install(sub: Subparsers) -> None:
    sub.add_parser(
        "blah-install",
        help="install jim as a BLAH backend, Condor-G's batch jim (run as root; --help: its options)",
        add_help=False,
    )


def _site_install(sub: Subparsers) -> None:
    sub.add_parser(
        "site-install",
        help="install jim's systemd units: jim serve --site, timers for advertise and purge (root; --help: options)",
        add_help=False,
    )


def _blah_steps(sub: Subparsers) -> None:
    sub.add_parser(
        "blah-submit",
        help="blahpd's calls: blah-submit|status|cancel|hold|resume|ping ... (docs/htcondor.md)",
        add_help=False,
    )


def _accounting(sub: Subparsers) -> None:
    sp = sub.add_parser(
        "accounting",
        help="core-hours, CPU efficiency, memory, events and wasted core-hours by cause; --publish: APEL records",
    )
    sp.add_argument("--by", choices=("grid-job", "user", "vo", "day"), default="grid-job", help="group by")
    sp.add_argument("--since", metavar="TIME", help="attempts that ended at or after (YYYY-MM-DD or ISO 8601, UTC)")
    sp.add_argument("--until", metavar="TIME", help="attempts that ended before")
    sp.add_argument("--json", action="store_true", help="machine-readable")
    sp.add_argument(
        "--publish",
        action="store_true",
        help="append the APEL blah records of ended grid jobs to [accounting] blah_log_dir (once each)",
    )
    sp.add_argument(
        "--home",
        action="append",
        metavar="DIR",
        help="--publish as root: a jim home to publish (a glob; repeat; default: this command's home)",
    )


def _drain(sub: Subparsers) -> None:
    sp = sub.add_parser(
        "drain",
        help="before a downtime: refuse new grid jobs while the others go on (on, off: as root), or say which (status)",
    )
    sp.add_argument("action", choices=("on", "off", "status"))
    sp.add_argument(
        "--reason", metavar="TEXT", help="on: the one line every refused submit carries (at most 200 characters)"
    )


def _purge(sub: Subparsers) -> None:
    sp = sub.add_parser(
        "purge",
        help="remove what [retention] says has expired of finished grid jobs (docs/housekeeping.md)",
        description="Removes the work areas, output tars and records of finished grid jobs whose "
        "[retention] has run out; nothing of a grid job still active. One line per grid job and a total.",
    )
    sp.add_argument(
        "--older-than",
        metavar="DURATION",
        help="also forget every finished grid job that ended more than DURATION ago (30d, 12h; units s m h d w)",
    )
    sp.add_argument("--dry-run", action="store_true", help="only say what would go, and how much it would free")
    sp.add_argument(
        "--all-users",
        action="store_true",
        help="as root: every account's jim home ([jim] home), each purged as its account",
    )
    sp.add_argument(
        "--homes", metavar="PATTERN", help="--all-users: each account's jim home ({user}, {home}; default [jim] home)"
    )


def _worker(sub: Subparsers) -> None:
    sub.add_parser(background.WORKER_COMMAND).add_argument("job_id")  # (no help: not listed)


def _monitor(sub: Subparsers) -> None:
    sub.add_parser(background.MONITOR_COMMAND)  # (no help: not listed)


_ADD = {
    "submit": _submit,
    "poll": _poll,
    "cancel": _cancel,
    "kill": _kill,
    "resubmit": _resubmit,
    "status": _status,
    "list": _list,
    "plan": _plan,
    "handlers": _handlers,
    "doctor": _doctor,
    "advertise": _advertise,
    "accounting": _accounting,
    "metrics": _metrics,
    "drain": _drain,
    "purge": _purge,
    "serve": _serve,
    "gram-install": _gram_install,
    "arc-install": _arc_install,
    "arc-backend": _arc_backend,
    "blah-install": _blah_install,
    "blah-submit": _blah_steps,
    "site-install": _site_install,
    background.WORKER_COMMAND: _worker,
    background.MONITOR_COMMAND: _monitor,
}

#: Every command, in the order ``jim --help`` lists them.
COMMANDS = tuple(_ADD)
