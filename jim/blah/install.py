"""``jim blah-install``: jim as a BLAH backend (``grid_resource = batch jim``), installed or removed as root.

It writes into ``--libexec`` (default ``/usr/libexec/blahp``, where blahpd
looks for ``<lrms>_<step>.sh``), 0755 root, each with the marker line
:data:`MARKER`, through :class:`jim.rootfiles.RootFiles` (a file there
without the marker is refused unless ``--force``; one that already holds the
content is "unchanged"):

* ``jim_submit.sh``, ``jim_status.sh``, ``jim_cancel.sh``, ``jim_hold.sh``,
  ``jim_resume.sh``, ``jim_ping.sh``: ``bash`` shims that load BLAH's
  configuration (``blah_load_config.sh``: ``/etc/blah.config`` and the
  account's ``~/.blah/user.config``), export ``JIM_CONFIG`` from
  ``jim_config`` and exec ``$jim_binpath/jim blah-<step> "$@"``;
* ``jim_local_submit_attributes.sh``: the hook (:mod:`jim.blah.hook`).

It then edits ``--blah-config`` (default ``/etc/blah.config``): ``jim`` is
added to ``supported_lrms``, and a block between two marker lines holds
``jim_binpath`` (the directory of ``--jim-command``) and, with
``--jim-config``, ``jim_config``.  Running it again changes nothing;
``--uninstall`` removes the files that carry the marker, the block and
``jim`` from ``supported_lrms``, and nothing else.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import sys
from importlib import resources
from pathlib import Path

from jim.rootfiles import InstallError, RootFiles
from jim.safeio import atomic_write

#: Every file jim blah-install writes holds this line; --uninstall removes only such files.
MARKER = "jim: installed by jim blah-install"
BEGIN = f"# {MARKER}: begin (jim blah-install --uninstall removes this block)"
END = f"# {MARKER}: end"
STEPS = ("submit", "status", "cancel", "hold", "resume", "ping")
HOOK_FILE = "jim_local_submit_attributes.sh"
DEFAULT_LIBEXEC = "/usr/libexec/blahp"
DEFAULT_BLAH_CONFIG = "/etc/blah.config"
LRMS = "jim"
_LRMS_LINE = re.compile(r"^(\s*supported_lrms\s*=\s*)(.*?)(\s*)$")
#: A value blah.config may hold without quoting (it is sourced by bash).
_PLAIN = re.compile(r"[A-Za-z0-9_./+-]{1,4096}")


def _data(name: str) -> str:
    return resources.files("jim.blah").joinpath("data", name).read_text(encoding="utf-8")


def files(bindir: str) -> dict[str, str]:
    """File name under ``--libexec`` -> content (every one 0755)."""
    shim = _data("shim.sh.in").replace("@MARKER@", MARKER).replace("@BINDIR@", bindir)
    out = {f"jim_{step}.sh": shim.replace("@STEP@", step) for step in STEPS}
    out[HOOK_FILE] = _data("local_submit_attributes.sh.in").replace("@MARKER@", MARKER)
    return out


def _plain(value: str, what: str) -> str:
    if not _PLAIN.fullmatch(value):
        raise InstallError(f"{what} {value!r} must be a plain path (letters, digits, . _ / + -)")
    return value


def edit_config(text: str, *, bindir: str | None, jim_config: str | None) -> str:
    """``text`` of blah.config with jim in ``supported_lrms`` and jim's block (``bindir`` None: without both)."""
    lines = _without_block(text.splitlines())
    out = []
    seen = False
    for line in lines:
        m = _LRMS_LINE.match(line)
        if m and not line.lstrip().startswith("#"):
            seen = True
            names = [n for n in m.group(2).split(",") if n.strip() and n.strip() != LRMS]
            if bindir is not None:
                names.append(LRMS)
            line = m.group(1) + ",".join(names)
        out.append(line)
    if bindir is not None:
        if not seen:
            out.append(f"supported_lrms={LRMS}")
        out += [BEGIN, f"jim_binpath={_plain(bindir, 'the jim directory')}"]
        if jim_config:
            out.append(f"jim_config={_plain(jim_config, 'the jim configuration')}")
        out.append(END)
    return "\n".join(out) + "\n"


def _without_block(lines: list[str]) -> list[str]:
    out, inside = [], False
    for line in lines:
        if line == BEGIN:
            inside = True
        elif line == END and inside:
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise InstallError(f"blah.config has the line {BEGIN!r} but not its end line: fix it by hand")
    return out


def _write_config(path: Path, new: str, installed: RootFiles) -> None:
    old = path.read_text(encoding="utf-8") if path.exists() else None
    if old == new:
        installed.say(f"unchanged  {path}")
        return
    mode = stat.S_IMODE(path.stat().st_mode) if old is not None else 0o644
    installed.changed += 1
    installed.say(f"update     {path}")
    atomic_write(path, new, mode=mode)


def jim_command(given: str | None) -> str:
    """The jim blahpd's shims run: ``--jim-command``, else the jim next to this Python."""
    jim = given or str(Path(sys.executable).parent / "jim")
    if not os.path.isabs(jim):
        raise InstallError(f"--jim-command must be an absolute path, not {jim!r}")
    if os.path.basename(jim) != "jim":
        raise InstallError(f"--jim-command must name a file called jim (blah.config holds its directory): {jim!r}")
    if not (os.path.isfile(jim) and os.access(jim, os.X_OK)):
        print(f"WARNING: {jim} is not an executable file", file=sys.stderr)
    return jim


def install(args: argparse.Namespace) -> int:
    libexec, config = Path(args.libexec), Path(args.blah_config)
    bindir = _plain(os.path.dirname(jim_command(args.jim_command)), "the jim directory")
    if args.jim_config and not os.path.isabs(args.jim_config):
        raise InstallError(f"--jim-config must be an absolute path, not {args.jim_config!r}")
    if not config.is_file():
        raise InstallError(f"{config} does not exist: is BLAH (blahpd) installed? (--blah-config)")
    installed = RootFiles(out=sys.stderr)
    for name, content in files(bindir).items():
        installed.install(libexec / name, content, 0o755, marker=MARKER, force=args.force)
    text = config.read_text(encoding="utf-8")
    _write_config(config, edit_config(text, bindir=bindir, jim_config=args.jim_config), installed)
    print(
        f"changed {installed.changed} file(s); Condor-G jobs reach jim with grid_resource = batch jim", file=sys.stderr
    )
    return 0


def uninstall(args: argparse.Namespace) -> int:
    libexec, config = Path(args.libexec), Path(args.blah_config)
    installed = RootFiles(out=sys.stderr)
    for name in files("/"):
        installed.remove_marked(libexec / name, MARKER)
    if config.is_file():
        _write_config(config, edit_config(config.read_text(encoding="utf-8"), bindir=None, jim_config=None), installed)
    print(f"changed {installed.changed} file(s).", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jim blah-install",
        description="Install (or remove) jim as a BLAH backend (Condor-G's grid_resource = batch jim, "
        "HTCondor-CE's routes): the jim_*.sh scripts and the blah.config lines. Run as root; safe to repeat.",
    )
    p.add_argument(
        "--libexec", default=DEFAULT_LIBEXEC, metavar="DIR", help=f"BLAH's scripts (default {DEFAULT_LIBEXEC})"
    )
    p.add_argument("--blah-config", default=DEFAULT_BLAH_CONFIG, metavar="FILE", help=f"default {DEFAULT_BLAH_CONFIG}")
    p.add_argument("--jim-command", metavar="PATH", help="the jim the scripts run (default: this jim)")
    p.add_argument("--jim-config", metavar="FILE", help="jim's configuration for blahpd's jim (JIM_CONFIG)")
    p.add_argument("--force", action="store_true", help="replace files at those paths that are not jim's")
    p.add_argument("--uninstall", action="store_true", help="remove what jim blah-install wrote")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        return uninstall(args) if args.uninstall else install(args)
    except (InstallError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
