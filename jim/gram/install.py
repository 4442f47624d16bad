"""``jim gram-install``: jim as a GRAM5 job manager type, installed (or removed) as root.

It writes, below ``--prefix-root`` (``/`` on a real site), the files of
:mod:`jim.gram`'s table, each through :class:`jim.rootfiles.RootFiles`
("install" or "unchanged", 0644 or 0755, missing directories 0755), creates
the push-mode SEG root (below), and enables the two services with the
toolkit's ``globus-gatekeeper-admin -e`` (below another root, the links it
would make).  Running it again changes nothing; ``--dry-run`` says what it
would do; ``--uninstall`` disables the services and removes the files, and
the SEG root when it holds only event logs.  Before writing, it checks that
the mapped users can run the jim command (every directory on the way, and
its ``#!`` interpreter); on a real root, it then has ``perl -c`` check the
installed module.

Push (SEG) mode and its directory
---------------------------------
In push mode (``-seg-module jim``) the job manager never polls: its
``job_manager`` SEG module tails ``<dir>/YYYYMMDD`` for lines
``001;<epoch>;<job id>;<state>;<exit code>``, and jim's monitor appends
them. The job manager runs as the mapped user, and so does jim, so the
directory must be writable by every mapped user. Two ways were weighed:

* one shared directory (the SEG default ``/var/lib/globus/globus-seg-jim``),
  sticky and world-writable, with world-writable day files. Simple, but any
  local account could then append events for anybody's jobs (job ids are
  readable in the same file) and make a grid job look DONE or FAILED;
* **one directory per mapped user (chosen)**: the service entry starts the
  job manager through a small wrapper that sets ``JOB_MANAGER_SEG_LOG_PATH``
  (the SEG module's documented override) to ``<seg_dir>/<user>``, a 0700
  directory the user owns, created on first use. Only that user's jim can
  write the events that user's job manager believes. The root ``seg_dir``
  (default ``/var/lib/jim/seg``) is root-owned ``1733``: anyone may create an
  entry, nobody may list, remove or rename another's; a name squatted by
  another account is refused by the wrapper (the job manager then does not
  start, and the gatekeeper log says why) rather than used. The cost is one
  extra exec per job manager start and one wrapper script to install.

The Perl module finds the directory itself and passes it to ``jim submit``
as ``JIM_SEG_DIR``. The job manager starts its Perl script processes with a
fixed environment (HOME, LOGNAME, PATH, GLOBUS_LOCATION, GLOBUS_SPOOL_DIR:
measured), so the module reads its parent's ``/proc/<pid>/cmdline`` for
``-seg-module NAME`` (absent: poll mode) and ``/proc/<pid>/environ`` for the
wrapper's ``JOB_MANAGER_SEG_LOG_PATH``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from jim.gram.rvf import render_rvf
from jim.rootfiles import InstallError, RootFiles, not_root, system_dirs

#: The gatekeeper services installed: name -> mode.
SERVICES = {"jobmanager-jim": "poll", "jobmanager-jim-seg": "push (SEG)"}

DEFAULT_TIMEOUT = 30
DEFAULT_SEG_DIR = "/var/lib/jim/seg"
DEFAULT_LOG_LEVELS = "FATAL|ERROR|WARN|INFO"
ADMIN_COMMAND = "globus-gatekeeper-admin"
SEG_WRAPPER = "/usr/libexec/jim/jim-seg-job-manager"
CONF = "/etc/globus/globus-jim.conf"
#: The toolkit's job manager scripts (package globus-gram-job-manager-scripts), which the module needs.
TOOLKIT_MODULE = "/usr/share/perl5/Globus/GRAM/JobManager.pm"


@dataclass(frozen=True)
class Layout:
    """Where everything goes, below ``root`` (``/`` on a real site)."""

    root: Path

    def _p(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    @property
    def module(self) -> Path:
        return self._p("/usr/share/perl5/Globus/GRAM/JobManager/jim.pm")

    @property
    def rvf(self) -> Path:
        return self._p("/usr/share/globus/globus_gram_job_manager/jim.rvf")

    @property
    def conf(self) -> Path:
        return self._p(CONF)

    @property
    def wrapper(self) -> Path:
        return self._p(SEG_WRAPPER)

    @property
    def services_dir(self) -> Path:
        return self._p("/etc/grid-services")

    def available(self, service: str) -> Path:
        return self.services_dir / "available" / service

    def enabled(self, service: str) -> Path:
        return self.services_dir / service

    def inside(self, path: str) -> Path:
        return self._p(path)


def _data(name: str) -> str:
    return resources.files("jim.gram").joinpath(name).read_text(encoding="utf-8")


def _render(template: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        template = template.replace(f"@{key}@", value)
    left = re.findall(r"@[A-Z_]+@", template)
    if left:
        raise InstallError(f"template value(s) missing: {', '.join(sorted(set(left)))}")
    return template


def _conf_value(text: str) -> str:
    """A value for ``key="value"`` lines as Globus::Core::Config reads them."""
    if any(c in text for c in '"\n'):
        raise InstallError(f"value {text!r} may not contain double quotes or newlines")
    return text


def _default_jim_command() -> str | None:
    """The jim next to this Python (a venv's bin/), else the one on PATH."""
    candidate = Path(sys.executable).parent / "jim"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which("jim")


def _not_runnable_by_others(path: str) -> list[str]:
    """Why a user other than the owner could not run ``path`` (empty: fine).

    Checks the "other" permission bits of the file, of every directory on the
    way to it, and of the interpreter named on its ``#!`` line (a venv built
    from a Python under /root is the usual trap).
    """
    problems: list[str] = []

    def check(p: str) -> None:
        real = Path(os.path.realpath(p))
        try:
            if not real.stat().st_mode & stat.S_IXOTH:
                problems.append(f"{real} is not executable by other users")
        except OSError as exc:
            problems.append(f"{real}: {exc.strerror}")
            return
        for parent in real.parents:
            try:
                if not parent.stat().st_mode & stat.S_IXOTH:
                    problems.append(f"directory {parent} is not searchable by other users")
            except OSError:
                pass

    check(path)
    try:
        with open(os.path.realpath(path), "rb") as fh:
            first = fh.readline(512)
    except OSError:
        first = b""
    if first.startswith(b"#!"):
        interpreter = first[2:].decode("utf-8", "replace").split()
        if interpreter and interpreter[0].startswith("/"):
            check(interpreter[0])
    return problems


class Installer(RootFiles):
    """Does (or, in dry-run mode, describes) each step, idempotently: the files (:class:`RootFiles`),
    removals, the SEG root, the toolkit's commands."""

    def __init__(self, layout: Layout, dry_run: bool):
        super().__init__(dry_run=dry_run)
        self.layout = layout

    def remove(self, path: Path) -> None:
        """Remove the file (or link) ``path``; "absent" when there is none."""
        if not (path.exists() or path.is_symlink()):
            self.say(f"absent     {path}")
            return
        self.changed += 1
        self.say(f"remove     {path}")
        if not self.dry_run:
            path.unlink()

    def seg_root(self, path: Path) -> None:
        """The push-mode SEG root ``path``: a root-owned directory, mode 1733."""
        mode = 0o1733
        if path.is_dir() and not path.is_symlink():
            st = path.stat()
            if stat.S_IMODE(st.st_mode) == mode and st.st_uid == 0:
                self.say(f"unchanged  {path}/ (SEG root, mode 1733)")
                return
        elif path.exists() or path.is_symlink():
            raise InstallError(f"{path} exists and is not a directory")
        self.changed += 1
        self.say(f"create     {path}/ (SEG root, mode 1733: users add their own 0700 entry)")
        if self.dry_run:
            return
        system_dirs(path.parent)
        path.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            os.chown(path, 0, 0)
        os.chmod(path, mode)

    def run(self, argv: list[str]) -> None:
        """Run one of the toolkit's commands; its failure is an :class:`InstallError`."""
        self.say("run        " + " ".join(argv))
        if self.dry_run:
            return
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise InstallError(
                f"{' '.join(argv)} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()}"
            )


def _enable(inst: Installer, service: str, admin: str | None) -> None:
    lay = inst.layout
    link = lay.enabled(service)
    target = f"available/{service}"
    if link.is_symlink() and os.readlink(link) == target:
        inst.say(f"enabled    {service} (already)")
        return
    inst.changed += 1
    if lay.root == Path("/"):
        if admin is None:
            raise InstallError(
                f"{ADMIN_COMMAND} not found (package globus-gatekeeper): cannot "
                f"enable {service}. The files are installed; install the "
                f"toolkit and run `{ADMIN_COMMAND} -e {service}`."
            )
        inst.run([admin, "-e", service])
    else:
        # globus-gatekeeper-admin only knows /etc; below another root do what it does.
        inst.say(f"enable     {service}: {link} -> {target}")
        if not inst.dry_run:
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target)


def _disable(inst: Installer, service: str, admin: str | None) -> None:
    lay = inst.layout
    link = lay.enabled(service)
    if not link.is_symlink():
        inst.say(f"disabled   {service} (already)")
        return
    inst.changed += 1
    if lay.root == Path("/") and admin is not None:
        inst.run([admin, "-d", service])
    else:
        if lay.root == Path("/"):
            inst.say(f"{ADMIN_COMMAND} not found: removing the link myself")
        inst.say(f"disable    {service}: remove {link}")
        if not inst.dry_run:
            link.unlink()


def _installed_seg_dir(conf: Path) -> str | None:
    try:
        text = conf.read_text(encoding="utf-8")
    except OSError:
        return None
    found = re.findall(r"^[ \t]*seg_dir=(.*)$", text, re.M)
    return found[-1].strip().strip('"').strip() if found else None


def _remove_seg_root(inst: Installer, root: Path) -> None:
    """Remove the SEG tree if it holds only what jim puts there."""
    if not root.is_dir() or root.is_symlink():
        inst.say(f"absent     {root}/")
        return
    unexpected = []
    for entry in root.iterdir():
        if not entry.is_dir() or entry.is_symlink():
            unexpected.append(entry)
            continue
        unexpected += [
            f for f in entry.iterdir() if not re.fullmatch(r"\d{8}", f.name) or not f.is_file() or f.is_symlink()
        ]
    if unexpected:
        inst.say(f"kept       {root}/: it holds more than SEG event logs (e.g. {unexpected[0]}); remove it by hand")
        return
    inst.changed += 1
    inst.say(f"remove     {root}/ (SEG event logs)")
    if not inst.dry_run:
        shutil.rmtree(root)


def install(args: argparse.Namespace) -> int:
    lay = Layout(Path(args.prefix_root))
    inst = Installer(lay, args.dry_run)
    real_root = lay.root == Path("/")
    admin = shutil.which(ADMIN_COMMAND) if real_root else None

    jim_command = _jim_command(args)
    _warn_runnable(jim_command, lay, real_root and not args.dry_run)
    if real_root and not Path(TOOLKIT_MODULE).is_file():
        print(
            "WARNING: the GRAM5 job manager scripts are not installed "
            "(package globus-gram-job-manager-scripts); the module will not load until they are"
        )
    values = _values(args, jim_command)

    inst.install(lay.module, _data("jim.pm"), 0o644)
    inst.install(lay.rvf, render_rvf(), 0o644)
    inst.install(lay.conf, _render(_data("globus-jim.conf.in"), values), 0o644)
    inst.install(lay.wrapper, _render(_data("jim-seg-job-manager.in"), values), 0o755)
    for service in SERVICES:
        inst.install(lay.available(service), _render(_data(f"{service}.in"), values), 0o644)
    inst.seg_root(lay.inside(args.seg_dir))
    for service in SERVICES:
        _enable(inst, service, admin)

    if not args.dry_run and real_root:
        _check_module(lay.module)
    print(
        f"{'would change' if args.dry_run else 'changed'} {inst.changed} item(s). "
        f"Contacts: <host>[:port]/jobmanager-jim (poll), <host>[:port]/jobmanager-jim-seg (push)."
    )
    if inst.changed and not args.dry_run:
        print("Running job managers keep the old module until they restart (they exit 60 s after their last job).")
    return 0


def _jim_command(args: argparse.Namespace) -> str:
    """The absolute path of the jim the mapped users run (``--jim-command``, else this installation's)."""
    jim_command = args.jim_command or _default_jim_command()
    if not jim_command:
        raise InstallError("no jim command found; give its absolute path with --jim-command")
    if not os.path.isabs(jim_command):
        raise InstallError(f"--jim-command must be an absolute path, not {jim_command!r}")
    return str(jim_command)


def _warn_runnable(jim_command: str, lay: Layout, must_run: bool) -> None:
    """Warn when the mapped users may not be able to run ``jim_command``; refuse a jim that is not
    there when ``must_run`` (a real install)."""
    runs_at = next(
        (p for p in (Path(jim_command), lay.inside(jim_command)) if p.is_file() and os.access(p, os.X_OK)), None
    )
    if runs_at is None:
        message = f"{jim_command} is not an executable file"
        if must_run:
            raise InstallError(message)
        print(f"WARNING: {message}")
        return
    for problem in _not_runnable_by_others(str(runs_at)):
        print(f"WARNING: the mapped users may not be able to run jim: {problem}")


def _values(args: argparse.Namespace, jim_command: str) -> dict[str, str]:
    """The values the templates (``@KEY@``) are filled with, checked."""
    if not os.path.isabs(args.seg_dir):
        raise InstallError(f"--seg-dir must be an absolute path, not {args.seg_dir!r}")
    if args.timeout <= 0:
        raise InstallError("--timeout must be positive")
    return {
        "JIM_COMMAND": _conf_value(jim_command),
        "JIM_TIMEOUT": f"{args.timeout:g}",
        "JIM_HOME_LINE": f'jim_home="{_conf_value(args.jim_home)}"' if args.jim_home else "#jim_home=",
        "JIM_CONFIG_LINE": (f'jim_config="{_conf_value(args.jim_config)}"' if args.jim_config else "#jim_config="),
        "SEG_DIR": _conf_value(args.seg_dir),
        "SEG_WRAPPER": SEG_WRAPPER,
        "CONF": CONF,
        "LOG_LEVELS": args.log_levels,
    }


def _check_module(module: Path) -> None:
    """perl -c the installed module, when perl and the toolkit are there."""
    perl = shutil.which("perl")
    if perl is None or not Path(TOOLKIT_MODULE).is_file():
        return
    proc = subprocess.run([perl, "-c", str(module)], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise InstallError(f"the installed module does not compile: {proc.stderr.strip()}")
    print(f"checked    {module} compiles")


def uninstall(args: argparse.Namespace) -> int:
    lay = Layout(Path(args.prefix_root))
    inst = Installer(lay, args.dry_run)
    admin = shutil.which(ADMIN_COMMAND) if lay.root == Path("/") else None
    seg_dir = _installed_seg_dir(lay.conf) or args.seg_dir
    for service in SERVICES:
        _disable(inst, service, admin)
    for service in SERVICES:
        inst.remove(lay.available(service))
    for path in (lay.wrapper, lay.conf, lay.rvf, lay.module):
        inst.remove(path)
    if lay.wrapper.parent.is_dir() and not any(lay.wrapper.parent.iterdir()):
        inst.say(f"remove     {lay.wrapper.parent}/")
        if not args.dry_run:
            lay.wrapper.parent.rmdir()
    _remove_seg_root(inst, lay.inside(seg_dir))
    print(f"{'would change' if args.dry_run else 'changed'} {inst.changed} item(s).")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jim gram-install",
        description="Install (or remove) jim as a GRAM5 job manager type: the Perl module, "
        "jim.rvf, /etc/globus/globus-jim.conf, and the services jobmanager-jim "
        "(poll mode) and jobmanager-jim-seg (push mode). Run as root; safe to repeat.",
    )
    p.add_argument(
        "--jim-command",
        metavar="PATH",
        help="absolute path of the jim executable the mapped users run "
        "(default: the jim next to this Python, else jim on PATH)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds one submit/poll/cancel call may take (default {DEFAULT_TIMEOUT})",
    )
    p.add_argument(
        "--seg-dir",
        default=DEFAULT_SEG_DIR,
        metavar="DIR",
        help=f"root of the per-user push-mode event directories (default {DEFAULT_SEG_DIR})",
    )
    p.add_argument(
        "--jim-home",
        metavar="DIR",
        help="JIM_HOME for jim run by the job manager; %%u = the user name (default: jim's own, ~/.jim)",
    )
    p.add_argument(
        "--jim-config", metavar="FILE", help="JIM_CONFIG for jim run by the job manager (default: jim's own)"
    )
    p.add_argument(
        "--log-levels",
        default=DEFAULT_LOG_LEVELS,
        metavar="LEVELS",
        help="job manager -log-levels in the service entries "
        f"(default {DEFAULT_LOG_LEVELS}; add |DEBUG|TRACE to see every jim call)",
    )
    p.add_argument(
        "--prefix-root",
        default="/",
        metavar="DIR",
        help="install below this directory instead of / (for packaging and tests)",
    )
    p.add_argument("--uninstall", action="store_true", help="disable the services and remove the files")
    p.add_argument("--dry-run", action="store_true", help="say what would be done, change nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    """``jim gram-install [options]``; returns the exit code."""
    args = build_parser().parse_args(argv)
    if not re.fullmatch(r"[A-Z|]+", args.log_levels):
        print("error: --log-levels is a |-separated list such as FATAL|ERROR|WARN|INFO", file=sys.stderr)
        return 2
    why = not_root("gram-install", args.prefix_root, "--prefix-root", args.dry_run)
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 1
    try:
        return uninstall(args) if args.uninstall else install(args)
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
