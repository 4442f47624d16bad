"""jim's command line: ``main(argv) -> int``, the ``jim`` command.

The protocol commands (``submit``, ``poll``, ``cancel``: what the gatekeeper's
module calls) print only ``KEY=VALUE`` lines on stdout, ``ERROR=<GRAM error
number>`` and ``MESSAGE=<one line>`` on any error (:mod:`jim.protocol`).  The
commands for people print for people.  Exit status: 0 success, 1 failure (a
protocol command's lines say which), 2 bad arguments.  ``jim --help`` lists
every command (:mod:`jim.arguments`).

:func:`main` takes ``jim``'s flags (``-v``, ``-q``, ``--as-owner``) and
dispatches before it imports anything else:

* ``poll`` without ``-v`` or ``-q``, and every ``poll --json``, to
  :func:`jim.poll.main`: it runs every 10 s per grid job at a real site and
  loads only what its answer needs;
* ``arc-install`` and ``arc-backend`` to :func:`jim.arc.main`, ``gram-install``
  to :func:`jim.gram.main`, ``blah-install`` and ``blah-<step>`` (blahpd's
  scripts) to :func:`jim.blah.main`, ``site-install`` (jim's systemd units) to
  :func:`jim.siteinstall.main`: they read their own arguments;
* ``--version``; no command, ``-h``, ``--help`` or ``help`` to the help (exit
  status 2 without a command);
* every other command to :func:`jim.commands.run`.
"""

from __future__ import annotations

import os
import sys

from jim import __version__, poll

#: ``jim``'s own flags, before the command.
FLAGS = ("-v", "--verbose", "-q", "--quiet", "--as-owner")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.umask(0o077)  # everything jim writes is private to its user
    flags = []
    while argv and argv[0] in FLAGS:
        flags.append(argv.pop(0))
    command = argv[0] if argv else None
    if command == "poll" and (not flags or "--json" in argv):
        return poll.main(argv[1:], as_owner="--as-owner" in flags)
    if command in ("arc-install", "arc-backend"):
        from jim.arc import main as arc_main  # (lazy: the ARC CE's backend and its installer, never poll's)

        return arc_main(argv)
    if command is not None and command.startswith("blah-"):
        from jim.blah import main as blah_main  # (lazy: BLAH's steps and installer, never poll's)

        return blah_main(argv)
    if command == "gram-install":
        from jim.gram import main as gram_main  # (lazy: an administrator's command, never poll's)

        return gram_main(argv[1:])
    if command == "site-install":
        from jim.siteinstall import main as site_install  # (lazy: an administrator's command, never poll's)

        return site_install(argv[1:])
    if command == "--version":
        print(f"jim {__version__}")
        return 0
    if command is None or command in ("-h", "--help", "help"):
        from jim.arguments import parser  # (lazy: argparse alone costs poll as much as the interpreter's start)

        parser().print_help()
        return 0 if command else 2
    from jim.commands import run  # (lazy: poll's hot path loads no parser, configuration or stage)

    return run(command, flags + argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
