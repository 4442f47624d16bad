"""``jim site-install``: jim's systemd units, installed (or removed) as root.

The units are package data (``jim/data/systemd/*.in``), filled in with the
jim command the services run and the environment file they read:

=========================  ===============================================================
unit                       runs
=========================  ===============================================================
``jim-serve.service``      ``jim serve --site`` (docs/web.md), its options ``JIM_SERVE_*``
``jim-advertise.service``  ``jim advertise``, every 5 minutes by ``jim-advertise.timer``
``jim-purge.service``      ``jim purge --all-users``, daily by ``jim-purge.timer``
=========================  ===============================================================

They go into ``--unit-dir`` (default ``/etc/systemd/system``, where an
administrator's units live; the Debian package puts them in
``/usr/lib/systemd/system``), 0644, each with the marker line
:data:`MARKER`, through :class:`jim.rootfiles.RootFiles`: a file already
holding the content is "unchanged", a file at the path without the marker is
refused unless ``--force``.  The environment file (``/etc/jim/services.env``)
is written only when it is missing: it is the administrator's.  ``--root``
puts everything below another directory (packaging, tests); ``--dry-run``
says what would be done.  A run that changed a unit on a host where systemd
runs ends with ``systemctl daemon-reload``.

Nothing is enabled unless asked: ``--enable serve`` (``advertise``,
``purge``; repeat) has ``systemctl enable --now`` start the service or the
timer (below ``--root``, ``systemctl --root DIR enable``: the links only).
``--uninstall`` disables the units, removes the files that carry the
marker, and the environment file when it still holds what jim wrote.
Running either again changes nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from jim.rootfiles import InstallError, RootFiles, carries_marker, not_root

#: Every file jim site-install writes holds this line; --uninstall removes only such files.
MARKER = "jim: written by jim site-install"
#: The unit files, in the order they are installed.
UNITS = (
    "jim-serve.service",
    "jim-advertise.service",
    "jim-advertise.timer",
    "jim-purge.service",
    "jim-purge.timer",
)
#: What ``--enable`` names -> the unit enabled (a service, or the timer that starts it).
ENABLE = {"serve": "jim-serve.service", "advertise": "jim-advertise.timer", "purge": "jim-purge.timer"}
DEFAULT_UNIT_DIR = "/etc/systemd/system"
DEFAULT_ENV_FILE = "/etc/jim/services.env"
ENV_TEMPLATE = "services.env.in"
#: A value that may stand in a unit file as it is: no space, quote, ``%`` specifier or ``$`` expansion.
_PLAIN = re.compile(r"/[A-Za-z0-9_./+-]{0,4095}")
_SYSTEMCTL_TIMEOUT = 120


@dataclass(frozen=True)
class Values:
    """What the templates are filled with (``@JIM@``, ``@ENV_FILE@``, ``@JIM_CONFIG_LINE@``)."""

    jim: str
    env_file: str = DEFAULT_ENV_FILE
    jim_config: str | None = None

    def render(self, template: str) -> str:
        config = f"Environment=JIM_CONFIG={self.jim_config}" if self.jim_config else "#Environment=JIM_CONFIG="
        text = (
            template.replace("@MARKER@", MARKER)
            .replace("@JIM@", self.jim)
            .replace("@ENV_FILE@", self.env_file)
            .replace("@JIM_CONFIG_LINE@", config)
        )
        left = re.findall(r"@[A-Z_]+@", text)
        if left:
            raise InstallError(f"template value(s) missing: {', '.join(sorted(set(left)))}")
        return text


def template(name: str) -> str:
    """The package's template ``name`` (``jim/data/systemd/<name>``)."""
    return resources.files("jim.data").joinpath("systemd").joinpath(name).read_text(encoding="utf-8")


def units(values: Values) -> dict[str, str]:
    """Unit file name -> its content."""
    return {name: values.render(template(f"{name}.in")) for name in UNITS}


def env_file_text() -> str:
    """The environment file as jim writes it when it is missing."""
    return template(ENV_TEMPLATE).replace("@MARKER@", MARKER)


def plain_path(value: str, what: str) -> str:
    """``value`` when it is an absolute path a unit file can hold as it is; else an :class:`InstallError`."""
    if not _PLAIN.fullmatch(value):
        raise InstallError(f"{what} {value[:200]!r} must be an absolute path of letters, digits and . _ / + -")
    return value


def below(root: Path, path: str) -> Path:
    """``path`` (absolute) below ``root``."""
    return root / path.lstrip("/")


def default_jim_command() -> str | None:
    """The jim next to this Python (a venv's ``bin/``, ``/usr/bin``), else the one on PATH."""
    candidate = Path(sys.executable).parent / "jim"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which("jim")


def jim_command(given: str | None, root: Path) -> str:
    """The jim the units run: ``--jim-command``, else this installation's; checked runnable on a real root."""
    jim = given or default_jim_command()
    if not jim:
        raise InstallError("no jim command found; give its absolute path with --jim-command")
    plain_path(jim, "--jim-command")
    if not any(p.is_file() and os.access(p, os.X_OK) for p in (Path(jim), below(root, jim))):
        if root == Path("/"):
            raise InstallError(f"{jim} is not an executable file (--jim-command)")
        print(f"WARNING: {jim} is not an executable file (yet)", file=sys.stderr)
    return jim


class Systemctl:
    """systemctl, for ``root`` (``/``: the running systemd, if any; else ``systemctl --root``)."""

    def __init__(self, root: Path, files: RootFiles):
        self.root = root
        self.files = files
        self.command = shutil.which("systemctl")
        self.running = root == Path("/") and Path("/run/systemd/system").is_dir()

    def _argv(self, *args: str) -> list[str]:
        if self.command is None:
            raise InstallError("systemctl not found: enable or disable the units by hand")
        return [self.command, *([] if self.root == Path("/") else [f"--root={self.root}"]), *args]

    def is_enabled(self, unit: str) -> bool:
        if self.command is None:
            return False
        proc = subprocess.run(
            self._argv("is-enabled", unit), capture_output=True, text=True, timeout=_SYSTEMCTL_TIMEOUT
        )
        return proc.stdout.strip() == "enabled"

    def run(self, *args: str) -> None:
        """``systemctl ARGS`` (said; not run in dry-run mode); a failure is an :class:`InstallError`."""
        argv = self._argv(*args)
        self.files.say("run        " + " ".join(argv))
        if self.files.dry_run:
            return
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=_SYSTEMCTL_TIMEOUT)
        if proc.returncode != 0:
            raise InstallError(
                f"{' '.join(argv)} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()}"
            )

    def enable(self, unit: str) -> None:
        if self.is_enabled(unit):
            self.files.say(f"enabled    {unit} (already)")
            return
        self.files.changed += 1
        self.run("enable", *(["--now"] if self.running else []), unit)

    def disable(self, unit: str) -> None:
        if not self.is_enabled(unit):
            self.files.say(f"disabled   {unit} (already)")
            return
        self.files.changed += 1
        self.run("disable", *(["--now"] if self.running else []), unit)


def _install_env_file(files: RootFiles, path: Path, text: str) -> None:
    """The environment file, only when there is none: once written it is the administrator's."""
    if path.exists() or path.is_symlink():
        files.say(f"kept       {path} (yours: never changed once it exists)")
        return
    files.install(path, text, 0o644)


def install(args: argparse.Namespace) -> int:
    root = Path(args.root)
    unit_dir = below(root, plain_path(args.unit_dir, "--unit-dir"))
    values = Values(
        jim=jim_command(args.jim_command, root),
        env_file=plain_path(args.env_file, "--env-file"),
        jim_config=plain_path(args.jim_config, "--jim-config") if args.jim_config else None,
    )
    files = RootFiles(dry_run=args.dry_run)
    systemctl = Systemctl(root, files)
    units_changed = sum(
        files.install(unit_dir / name, content, 0o644, marker=MARKER, force=args.force)
        for name, content in units(values).items()
    )
    _install_env_file(files, below(root, values.env_file), env_file_text())
    if units_changed and systemctl.running:
        systemctl.run("daemon-reload")
    for name in args.enable or []:
        systemctl.enable(ENABLE[name])
    _summary(files, args.dry_run)
    if not args.enable:
        print(
            "Nothing enabled (--enable serve|advertise|purge, or: systemctl enable --now "
            + " ".join(ENABLE.values())
            + ")"
        )
    return 0


def uninstall(args: argparse.Namespace) -> int:
    root = Path(args.root)
    unit_dir = below(root, plain_path(args.unit_dir, "--unit-dir"))
    files = RootFiles(dry_run=args.dry_run)
    systemctl = Systemctl(root, files)
    for unit in ENABLE.values():
        if carries_marker(unit_dir / unit, MARKER):
            systemctl.disable(unit)
    removed = sum(files.remove_marked(unit_dir / name, MARKER) for name in UNITS)
    env_file = below(root, plain_path(args.env_file, "--env-file"))
    if env_file.exists() or env_file.is_symlink():
        if carries_marker(env_file, MARKER) and env_file.read_text(encoding="utf-8") == env_file_text():
            files.remove_marked(env_file, MARKER)
        else:
            files.say(f"kept       {env_file} (it holds your settings)")
    if removed and systemctl.running:
        systemctl.run("daemon-reload")
    _summary(files, args.dry_run)
    return 0


def _summary(files: RootFiles, dry_run: bool) -> None:
    print(f"{'would change' if dry_run else 'changed'} {files.changed} item(s).")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jim site-install",
        description="Install (or remove) jim's systemd units: jim-serve.service (jim serve --site), "
        "jim-advertise.service and .timer, jim-purge.service and .timer, and the environment file they "
        "read. Enables nothing unless --enable. Run as root; safe to repeat.",
    )
    p.add_argument(
        "--root", default="/", metavar="DIR", help="install below this directory instead of / (packaging, tests)"
    )
    p.add_argument(
        "--unit-dir", default=DEFAULT_UNIT_DIR, metavar="DIR", help=f"where the units go (default {DEFAULT_UNIT_DIR})"
    )
    p.add_argument(
        "--jim-command",
        metavar="PATH",
        help="absolute path of the jim the units run (default: the jim next to this Python, else jim on PATH)",
    )
    p.add_argument("--jim-config", metavar="FILE", help="JIM_CONFIG for the services (default: jim's own)")
    p.add_argument(
        "--env-file",
        default=DEFAULT_ENV_FILE,
        metavar="FILE",
        help=f"the services' environment file, written when missing (default {DEFAULT_ENV_FILE})",
    )
    p.add_argument(
        "--enable",
        action="append",
        choices=sorted(ENABLE),
        help="enable (and, where systemd runs, start) jim-serve.service, jim-advertise.timer or jim-purge.timer",
    )
    p.add_argument("--force", action="store_true", help="replace unit files at those paths that are not jim's")
    p.add_argument("--uninstall", action="store_true", help="disable the units and remove what jim site-install wrote")
    p.add_argument("--dry-run", action="store_true", help="say what would be done, change nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    """``jim site-install [options]``; the exit status."""
    args = build_parser().parse_args(argv)
    why = not_root("site-install", args.root, "--root", args.dry_run)
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 1
    try:
        return uninstall(args) if args.uninstall else install(args)
    except (InstallError, OSError, subprocess.TimeoutExpired) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
