"""jim's command line: ``main(argv) -> int``.

Protocol commands (what the gatekeeper's module calls) print only
``KEY=VALUE`` lines on stdout::

    jim submit --rsl 'RSL' | --description FILE.json | --jdl FILE   -> JOB_ID=, JOB_STATE=
    jim poll --job-id ID                                            -> JOB_STATE= [EXIT_CODE=]
    jim cancel --job-id ID                                          -> JOB_STATE=FAILED
    on any error                                                    -> ERROR=<GRAM code>, MESSAGE=<one line>

While a protocol command runs, file descriptor 1 points at stderr: anything a
plug-in or library prints lands there, never in the protocol.  Exit status:
0 success, 1 failure (the protocol lines say which), 2 usage error.

Human commands: ``status``, ``list``, ``plan``, ``handlers``, ``doctor``,
``serve``, ``advertise``, ``gram-install``.

``poll`` runs every 10 s per grid job at a real site, so it takes a short
path: no argparse, no lxml, no config parsing when ``$JIM_HOME`` is set; it
reads the one-line summary of the grid job and starts the background
processes if they are needed.
"""

from __future__ import annotations

import os
import sys

PROTOCOL = ("submit", "poll", "cancel")
USAGE = """usage: jim [-v|-q] COMMAND ...

protocol commands (stdout is KEY=VALUE lines only):
  submit (--rsl RSL | --description FILE.json | --jdl FILE)   record a grid job, start it
  poll --job-id ID                                             the grid job's GRAM state
  cancel --job-id ID                                           stop every local job, gather outputs

commands for people:
  status ID [--json]        grid state, plan, every local job
  list [--state S] [--json] grid jobs, newest first
  plan --dry-run (--rsl|--description|--jdl) [--json]   the plan, without recording anything
  handlers                  installed job types
  doctor                    check the configuration and the batch system
  serve [--host H] [--port N]   read-only web view (loopback:8642 by default)
  advertise [--collector HOST] [--json]   the site's ClassAd: printed, or sent to a collector
  gram-install [...]        install the GRAM5 job manager glue (as root)

environment: JIM_HOME (data, default ~/.jim), JIM_CONFIG (TOML config, default /etc/jim/jim.toml)
"""


class _Protocol:
    """Protocol output on the real stdout; fd 1 redirected to stderr meanwhile."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self.fd = os.dup(1)
        os.dup2(2, 1)
        self.lines: list[str] = []

    def emit(self, key: str, value: object) -> None:
        text = " ".join(str(value).split())
        self.lines.append(f"{key}={text}\n")

    def close(self) -> None:
        data = "".join(self.lines).encode()
        try:
            os.write(self.fd, data)
        finally:
            os.dup2(self.fd, 1)
            os.close(self.fd)


def _fast_poll(args: list[str]) -> int:
    """``jim poll --job-id ID``: the hot path (only ``os``, ``fcntl`` and jim.errors are imported)."""
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
        from jim.errors import JimError, JobNotFound
        try:
            if not job_id:
                raise JobNotFound("poll needs --job-id ID", gram_error=46)
            if not _looks_like_job_id(job_id):
                raise JobNotFound(f"no grid job {job_id!r} (not a jim job id)")
            if os.environ.get("JIM_HOME"):
                home = os.path.expanduser(os.environ["JIM_HOME"])
            else:
                from jim.config import load
                home = str(load().home)
            summary = _read_summary(os.path.join(home, "db", job_id + ".state"), job_id)
            out.emit("JOB_STATE", summary["JOB_STATE"])
            for key in ("EXIT_CODE", "MESSAGE"):
                if key in summary:
                    out.emit(key, summary[key])
            if summary["JOB_STATE"] not in ("DONE", "FAILED"):
                _ensure_background(home, job_id, summary)
        except JimError as e:
            out.emit("ERROR", e.gram_error)
            out.emit("MESSAGE", e.message)
            code = 1
    except Exception as e:  # never a traceback on stdout
        out.lines = []
        out.emit("ERROR", 17)
        out.emit("MESSAGE", f"internal error in jim poll: {type(e).__name__}: {e}")
        _log_exception("poll")
        code = 1
    finally:
        out.close()
    return code


def _looks_like_job_id(job_id: str) -> bool:
    """The check of :func:`jim.paths.valid_job_id`, without importing re (poll's hot path)."""
    parts = job_id.split("-")
    return (len(parts) == 3 and len(parts[0]) == 8 and parts[0].isdigit() and parts[0].isascii()
            and len(parts[1]) == 6 and parts[1].isdigit() and parts[1].isascii()
            and 6 <= len(parts[2]) <= 12 and all(c in "0123456789abcdef" for c in parts[2]))


def _read_summary(path: str, job_id: str) -> dict[str, str]:
    from jim.errors import JobNotFound
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        raise JobNotFound(f"no grid job {job_id}") from None
    out = {}
    for line in text.splitlines():
        k, sep, v = line.lstrip("#").partition("=")
        if sep:
            out[k] = v
    return out


def _lock_held(path: str) -> bool:
    """True when another process holds the flock on ``path`` (see jim.locks.SingleInstance)."""
    import fcntl
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _ensure_background(home: str, job_id: str, summary: dict[str, str]) -> None:
    """Start the monitor (and the worker, if local jobs await submission) when they are not running."""
    home = str(home)
    locks = os.path.join(home, "locks")
    need_monitor = not _lock_held(os.path.join(locks, "monitor.lock"))
    need_worker = (summary.get("UNSUBMITTED", "0") != "0" and summary.get("CANCEL") != "1"
                   and not _lock_held(os.path.join(locks, f"{job_id}.worker.lock")))
    if not (need_monitor or need_worker):
        return
    from jim.proc import jim_argv, spawn_detached

    env = dict(os.environ)
    env["JIM_HOME"] = home
    err = os.path.join(home, "log", "background.err")
    if need_monitor:
        spawn_detached(jim_argv("_monitor"), env=env, cwd=home, stderr=err)
    if need_worker:
        spawn_detached(jim_argv("_worker", job_id), env=env, cwd=home, stderr=err)


def _log_exception(where: str) -> None:
    try:
        import logging
        logging.getLogger("jim.cli").exception("unexpected error in %s", where)
    except Exception:
        pass


# ---------------------------------------------------------------------------

def _parser(only: str | None = None):
    """The argument parser; with ``only``, just that command's (building them all costs 20 ms)."""
    import argparse

    names = ("submit", "poll", "cancel", "status", "list", "plan", "handlers", "doctor", "advertise", "serve",
             "gram-install", "_worker", "_monitor")
    want = (lambda name: True) if only not in names else (lambda name: name == only)  # noqa: E731

    p = argparse.ArgumentParser(prog="jim", description="jim: a site-side grid job manager",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="log to stderr too, with debug detail")
    p.add_argument("-q", "--quiet", action="store_true", help="log errors only")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add_desc(sp, required=True):
        g = sp.add_mutually_exclusive_group(required=required)
        g.add_argument("--rsl", help="the job description as GRAM RSL")
        g.add_argument("--description", metavar="FILE", help="the job description as JSON (attribute -> list of strings)")
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
        sp = sub.add_parser("serve", help="read-only web view of the database")
        sp.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; there is no authentication)")
        sp.add_argument("--port", type=int, default=8642, help="port (default 8642; 0 picks a free one)")
    if want("gram-install"):
        sub.add_parser("gram-install", help="install the GRAM5 glue (run as root)", add_help=False)
    if want("_worker"):
        sp = sub.add_parser("_worker")
        sp.add_argument("job_id")
    if want("_monitor"):
        sub.add_parser("_monitor")
    return p


def _load_description(args):
    from jim.errors import DescriptionError
    from jim.jobdesc import parse_jdl, parse_json, parse_rsl

    if args.rsl is not None:
        return parse_rsl(args.rsl)
    path = args.description or args.jdl
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise DescriptionError(f"cannot read job description {path}: {getattr(e, 'strerror', None) or e}") from None
    return parse_json(text) if args.description else parse_jdl(text)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = []
    while argv and argv[0] in ("-v", "--verbose", "-q", "--quiet"):
        flags.append(argv.pop(0))
    if argv and argv[0] == "poll" and not flags:
        return _fast_poll(argv[1:])
    if argv and argv[0] == "gram-install":
        from jim.gram import main as gram_main
        return gram_main(argv[1:])
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0 if argv else 2
    if argv[0] == "--version":
        from jim import __version__
        print(f"jim {__version__}")
        return 0
    command = argv[0]
    protocol = command in PROTOCOL
    if command != "_monitor":  # short-lived: garbage collection only costs time (the monitor keeps it)
        import gc
        gc.disable()
    if not protocol:  # a person piping into head: end quietly
        import signal
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    out = _Protocol() if protocol else None
    try:
        try:
            args = _parser(command).parse_args(flags + argv)
        except SystemExit as e:
            if out is not None and e.code:  # (not after --help)
                out.emit("ERROR", 46)
                out.emit("MESSAGE", f"bad arguments to jim {command} (see jim --help)")
            return 2 if e.code else 0
        return _dispatch(args, out)
    finally:
        if out is not None:
            out.close()


def _dispatch(args, out) -> int:
    from jim.errors import JimError

    try:
        from jim.config import load
        config = load()
        from jim import log as jlog
        jlog.setup(config.home, verbose=args.verbose, quiet=args.quiet)
    except JimError as e:
        return _report(out, e)
    try:
        return COMMANDS[args.command](config, args, out)
    except JimError as e:
        import logging
        logging.getLogger("jim.cli").error("jim %s failed: %s", args.command,
                                           e.details() if hasattr(e, "details") else e.message)
        return _report(out, e)
    except Exception as e:
        _log_exception(args.command)
        if out is not None:
            out.lines = []
            out.emit("ERROR", 17)
            out.emit("MESSAGE", f"internal error in jim {args.command}: {type(e).__name__}: {e} (see jim's log)")
            return 1
        raise


def _report(out, e) -> int:
    if out is not None:
        out.lines = []
        out.emit("ERROR", e.gram_error)
        out.emit("MESSAGE", e.message)
    else:
        print(f"jim: error: {e.message}", file=sys.stderr)
    return 1


# ---------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------

def cmd_submit(config, args, out) -> int:
    from jim.manager import submit

    desc = _load_description(args)
    job_id = submit(config, desc)
    out.emit("JOB_ID", job_id)
    out.emit("JOB_STATE", "PENDING")
    return 0


def cmd_poll(config, args, out) -> int:  # with -v/-q; normally the fast path answers
    from jim.paths import Home

    home = Home(config.home)
    summary = _read_summary(str(home.summary(args.job_id)), args.job_id)
    out.emit("JOB_STATE", summary["JOB_STATE"])
    for key in ("EXIT_CODE", "MESSAGE"):
        if key in summary:
            out.emit(key, summary[key])
    if summary["JOB_STATE"] not in ("DONE", "FAILED"):
        _ensure_background(str(home.root), args.job_id, summary)
    return 0


def cmd_cancel(config, args, out) -> int:
    from jim.manager import cancel

    state = cancel(config, args.job_id)
    out.emit("JOB_STATE", state.name)
    return 0


def cmd_status(config, args, out) -> int:
    from jim.db import Database
    from jim.monitor import dump, status_json
    from jim.paths import Home
    from jim.status import render_status

    job = Database(Home(config.home), config.deadlines.lock).read(Home(config.home).check_id(args.job_id))
    data = status_json(job)
    if args.json:
        print(dump(data))
    else:
        print(render_status(data), end="")
    return 0


def cmd_list(config, args, out) -> int:
    import json

    from jim.db import Database
    from jim.paths import Home

    home = Home(config.home)
    if not home.db.is_dir():
        jobs = []
    else:
        jobs = Database(home, config.deadlines.lock).list()
    if args.state:
        jobs = [j for j in jobs if j["state"] == args.state.upper()]
    if args.json:
        print(json.dumps(jobs, indent=2))
        return 0
    if not jobs:
        print("no grid jobs")
        return 0
    print(f"{'ID':<25} {'STATE':<10} {'TYPE':<12} {'LOCAL':>6}  {'CREATED':<24} NAME")
    for j in jobs:
        print(f"{j['id']:<25} {j['state']:<10} {j['jobtype']:<12} {j['localJobs']:>6}  {j['created']:<24} {j['name']}")
    return 0


def cmd_plan(config, args, out) -> int:
    """``jim plan --dry-run``: validate, choose the queue and plan; record, write and submit nothing."""
    import json

    from jim.manager import make_plan

    desc = _load_description(args)
    handler, plan, commands = make_plan(config, desc, dry_run=True)
    attrs = {k: v for k, v in plan.record_attrs().items()}
    jobs = [{"index": k, "queue": s.queue, "slice": s.attrs, "params": s.params, "env": s.env,
             "estSeconds": s.attrs.get("estSeconds"), "failedOnCreation": s.failed_on_creation,
             "argv": commands[k]} for k, s in enumerate(plan.slices)]
    if args.json:
        print(json.dumps({"dryRun": True, "jobtype": desc.jimtype, "localJobs": plan.n, "binding": plan.binding,
                          "queue": plan.queue, "timeLimit": attrs.get("timeLimit"),
                          "timeLimitBy": attrs.get("timeLimitBy"), "explanation": plan.explanation,
                          "plan": attrs, "jobs": jobs}, indent=2, default=str))
        return 0
    failed = sum(1 for s in plan.slices if s.failed_on_creation)
    print(f"job type {desc.jimtype}: {plan.n} local job(s){f' ({failed} failed on creation)' if failed else ''}; "
          f"binding limit: {plan.binding}")
    queue = plan.queue or "(the batch system's default)"
    extra = f" on CE {attrs['ce']}" if attrs.get("ce") else ""
    print(f"queue: {queue}{extra}" + (f"; requirements: {attrs['requirements']}" if attrs.get("requirements") else ""))
    if attrs.get("timeLimit"):
        longest = attrs.get("estSecondsPerJob")
        print(f"time limit per local job: {attrs['timeLimit']} s ({attrs['timeLimitBy']})"
              + (f"; longest local job about {longest} s" if longest else ""))
    print(plan.explanation)
    print(f"  {'#':>5}  {'queue':<12} {'est. s':>8}  slice")
    for job in jobs[:50]:
        sl = " ".join(f"{a}={v}" for a, v in {**job["slice"], **job["params"]}.items() if a != "estSeconds")
        extra = f"  [failed on creation: {job['failedOnCreation']}]" if job["failedOnCreation"] else ""
        print(f"  {job['index']:>5}  {job['queue'] or '-':<12} {job['estSeconds'] or '-':>8}  {sl}{extra}")
    if plan.n > 50:
        print(f"  ... and {plan.n - 50} more")
    print("(dry run: nothing recorded or submitted)")
    return 0


def cmd_handlers(config, args, out) -> int:
    from jim.handlers import discover

    for name, entry in sorted(discover().items()):
        if isinstance(entry, Exception):
            print(f"{name:<14} BROKEN: {type(entry).__name__}: {entry}")
        else:
            doc = (entry.__doc__ or "").strip().splitlines()
            print(f"{name:<14} {doc[0] if doc else ''}")
    return 0


def cmd_doctor(config, args, out) -> int:
    import stat

    from jim.adapters import get_adapter
    from jim.handlers import discover
    from jim.paths import Home

    ok = True
    print(f"config:   {config.source}")
    home = Home(config.home)
    print(f"home:     {home.root}")
    if home.root.exists():
        mode = stat.S_IMODE(home.root.stat().st_mode)
        if mode & 0o077:
            ok = False
            print(f"  PROBLEM: {home.root} is readable by others (mode {mode:o}); run chmod 700")
    print(f"adapter:  {config.batch.adapter} {config.batch.options or ''}")
    try:
        adapter = get_adapter(config, home)
        deg = adapter.degraded() if home.cache.exists() else None
        print(f"  {'DEGRADED since ' + str(deg['since']) + ': ' + deg['reason'] if deg else 'healthy'}")
    except Exception as e:
        ok = False
        print(f"  PROBLEM: {e}")
    for name, entry in sorted(discover().items()):
        if isinstance(entry, Exception):
            ok = False
            print(f"handler {name}: BROKEN ({entry})")
    print("all good" if ok else "problems found")
    return 0 if ok else 1


def cmd_advertise(config, args, out) -> int:
    from jim.advertise import run
    return run(config, collector=args.collector, as_json=args.json, name=args.name)


def cmd_serve(config, args, out) -> int:
    from jim.web import serve
    return serve(config, host=args.host, port=args.port)


def cmd_worker(config, args, out) -> int:
    from jim.worker import run
    return run(config, args.job_id)


def cmd_monitor(config, args, out) -> int:
    from jim.monitor import run
    return run(config)


COMMANDS = {
    "submit": cmd_submit, "poll": cmd_poll, "cancel": cmd_cancel, "status": cmd_status, "list": cmd_list,
    "plan": cmd_plan, "handlers": cmd_handlers, "doctor": cmd_doctor, "serve": cmd_serve,
    "advertise": cmd_advertise,
    "_worker": cmd_worker, "_monitor": cmd_monitor,
}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
