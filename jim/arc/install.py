"""``jim arc-install``: jim as the ARC CE's ``lrms=jim`` backend.

A-REX has no path option for a backend: ``lrms=jim`` makes it run
``$ARC_LOCATION/share/arc/{submit,scan,cancel}-jim-job`` and makes its
information provider load ``JIMmod.pm`` from the same directory.  This
command writes them into ``--prefix`` (default ``/usr/share/arc``), 0755/0644
root, each with the marker line :data:`MARKER`, through
:class:`jim.rootfiles.RootFiles` (a file there without the marker is refused
unless ``--force``; one that already holds the content is "unchanged"):

* ``submit-jim-job``, ``scan-jim-job``, ``cancel-jim-job``: ``sh`` shims that
  exec ``<jim> arc-backend submit|scan|cancel "$@"``;
* ``JIMmod.pm``: the information-provider module (``jim arc-backend info``);
* ``rte/ENV/JIM/<TYPE>``: one runtime environment per installed job type, so
  that the CE publishes the job types it runs once enabled
  (``arcctl rte enable ENV/JIM/<TYPE>``); a job asks for one with
  ``(runtimeenvironment="ENV/JIM/MONTECARLO" "events=1000")``.

It then prints (or writes with ``--write-conf FILE``) the arc.conf blocks:
``[lrms] lrms=jim``, a ``[queue:<name>]`` per queue of jim's configuration
(else ``[queue:jim]``) and ``[custom:jim]`` with ``jim_command``,
``jim_timeout``, ``jim_home``, ``jim_config``.  Running it again changes
nothing; ``--uninstall`` removes exactly the files that carry the marker.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from importlib import resources
from pathlib import Path

from jim.arc.options import DEFAULT_HOME_PATTERN, DEFAULT_TIMEOUT, own_jim_command
from jim.config import config_path, load
from jim.handlers import discover
from jim.requirements import parse_resources
from jim.rootfiles import InstallError, RootFiles

#: Every file jim arc-install writes holds this line; --uninstall removes only such files.
MARKER = "jim: installed by jim arc-install"
STEPS = ("submit", "scan", "cancel")
DEFAULT_PREFIX = "/usr/share/arc"
_BLOCK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")

_SHIM = """#!/bin/sh
# {marker} (the ARC CE's lrms=jim {step} step; run it again to update)
exec {jim} arc-backend {step} "$@"
"""

_RTE = """# description: jim job type {jimtype}: options are jim attributes name=value (events=1000 ...)
# {marker}
# jim reads this runtime environment's name and options from the grami; nothing runs here.
true
"""


def shim(step: str, jim: str) -> str:
    return _SHIM.format(marker=MARKER, step=step, jim=shlex.quote(jim))


def module_text(jim: str) -> str:
    text = resources.files("jim.arc").joinpath("JIMmod.pm").read_text(encoding="utf-8")
    if "'" in jim or "\\" in jim:
        raise InstallError(f"the jim command {jim!r} may not hold a quote or a backslash")
    return text.replace("@JIM@", jim)


def _jobtypes() -> list[str]:
    return sorted(n for n, e in discover().items() if isinstance(e, type) and _BLOCK_NAME.fullmatch(n))


def files(jim: str) -> dict[str, tuple[str, int]]:
    """Relative path under the prefix -> (content, mode)."""
    out = {f"{step}-jim-job": (shim(step, jim), 0o755) for step in STEPS}
    out["JIMmod.pm"] = (module_text(jim), 0o644)
    for jimtype in _jobtypes():
        out[f"rte/ENV/JIM/{jimtype.upper()}"] = (_RTE.format(marker=MARKER, jimtype=jimtype), 0o644)
    return out


def queue_names(config_file: str | None) -> list[str]:
    """The queues of jim's configuration (``[resources]``), else ``["jim"]``."""
    env = dict(os.environ)
    if config_file:
        env["JIM_CONFIG"] = config_file
    config = load(env)
    names: list[str] = []
    if config.resources:
        tree = parse_resources(config.resources)
        for q in tree:
            if not _BLOCK_NAME.fullmatch(q.name):
                print(f"WARNING: jim queue {q.name!r} cannot be an ARC queue name: left out", file=sys.stderr)
            elif q.name not in names:
                names.append(q.name)
    return names or ["jim"]


def conf_blocks(*, jim: str, home_pattern: str, config_file: str | None, timeout: float, queues: list[str]) -> str:
    for value in (jim, home_pattern, config_file or ""):
        if "\n" in value or "\r" in value:
            raise InstallError(f"{value!r} may not hold a newline")
    lines = ["[lrms]", "lrms=jim", ""]
    for q in queues:
        lines += [f"[queue:{q}]", ""]
    lines += [
        "[custom:jim]",
        f"jim_command={jim}",
        f"jim_timeout={timeout:g}",
        f"jim_home={home_pattern}",
        f"jim_config={config_file}" if config_file else "#jim_config=/etc/jim/jim.toml",
        "",
    ]
    return "\n".join(lines)


def _default_config() -> str | None:
    path = config_path()
    return str(path) if path is not None and Path(path).is_file() else None


def install(args: argparse.Namespace) -> int:
    prefix = Path(args.prefix)
    jim = args.jim or own_jim_command()
    if not os.path.isabs(jim):
        raise InstallError(f"--jim must be an absolute path, not {jim!r}")
    if not (os.path.isfile(jim) and os.access(jim, os.X_OK)):
        print(f"WARNING: {jim} is not an executable file", file=sys.stderr)
    config_file = args.config or _default_config()
    installed = RootFiles(out=sys.stderr)
    for rel, (content, mode) in files(jim).items():
        installed.install(prefix / rel, content, mode, marker=MARKER, force=args.force)
    text = conf_blocks(
        jim=jim,
        home_pattern=args.home_pattern,
        config_file=config_file,
        timeout=args.timeout,
        queues=queue_names(config_file),
    )
    if args.write_conf:
        Path(args.write_conf).write_text(text, encoding="utf-8")
        os.chmod(args.write_conf, 0o644)
        print(f"wrote the arc.conf blocks to {args.write_conf}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    print(
        f"changed {installed.changed} file(s). Publish the job types as runtime environments with: "
        "arcctl rte enable " + " ".join(f"ENV/JIM/{t.upper()}" for t in _jobtypes()),
        file=sys.stderr,
    )
    return 0


def uninstall(args: argparse.Namespace) -> int:
    prefix = Path(args.prefix)
    candidates = [prefix / f"{step}-jim-job" for step in STEPS] + [prefix / "JIMmod.pm"]
    rte = prefix / "rte" / "ENV" / "JIM"
    if rte.is_dir() and not rte.is_symlink():
        candidates += sorted(rte.iterdir())
    removed = RootFiles(out=sys.stderr)
    for path in candidates:
        removed.remove_marked(path, MARKER)
    if rte.is_dir() and not rte.is_symlink() and not any(rte.iterdir()):
        rte.rmdir()
    print(f"removed {removed.changed} file(s).", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jim arc-install",
        description="Install (or remove) jim as the NorduGrid ARC CE backend lrms=jim: the submit, scan and "
        "cancel shims and JIMmod.pm; prints the arc.conf blocks. Run as root; safe to repeat.",
    )
    p.add_argument("--prefix", default=DEFAULT_PREFIX, metavar="DIR", help=f"where (default {DEFAULT_PREFIX})")
    p.add_argument("--jim", metavar="PATH", help="the jim the shims run (default: this jim's console script)")
    p.add_argument(
        "--home-pattern",
        default=DEFAULT_HOME_PATTERN,
        metavar="PAT",
        help=f"each user's JIM_HOME; {{user}} and a leading ~ expanded (default {DEFAULT_HOME_PATTERN})",
    )
    p.add_argument("--config", metavar="FILE", help="jim's configuration for the ARC users (jim_config)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help=argparse.SUPPRESS)
    p.add_argument("--write-conf", metavar="FILE", help="write the arc.conf blocks to FILE instead of stdout")
    p.add_argument("--force", action="store_true", help="replace files at those paths that are not jim's")
    p.add_argument("--uninstall", action="store_true", help="remove the files jim arc-install wrote")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if Path(args.prefix) == Path(DEFAULT_PREFIX) and os.geteuid() != 0:
        print(f"error: jim arc-install writes into {DEFAULT_PREFIX}: run it as root (or --prefix)", file=sys.stderr)
        return 1
    if args.timeout <= 0:
        print("error: --timeout must be positive", file=sys.stderr)
        return 2
    try:
        return uninstall(args) if args.uninstall else install(args)
    except (InstallError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
