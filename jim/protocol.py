"""The answer of a protocol command (``jim submit``, ``jim poll``, ``jim cancel``): what the gatekeeper reads.

The one owner of two rules:

* **stdout is the protocol.**  While a protocol command runs, file descriptor 1
  points at stderr, so anything a plug-in or a library prints lands there.  The
  command's answer is collected (:meth:`Answer.emit`: ``KEY=VALUE``, one
  printable line each) and written to the real stdout when it closes, all of it
  or an ``OSError`` (:meth:`Answer.close`).
* **the error envelope.**  ``with Answer(command) as out:`` turns what the
  block raises into the answer, and the exit status into 1 (:attr:`Answer.code`):

  - a :class:`jim.errors.JimError`: ``ERROR=<its gram_error>`` and
    ``MESSAGE=<its message>``;
  - anything else: ``ERROR=17`` and ``MESSAGE=internal error in jim <command>:
    <type>: <text> (see jim's log)``, with the traceback in jim's log.

  Never a traceback on stdout.  What the block emitted before is dropped: an
  answer is the command's lines or the error's, never both.

``jim poll --json`` answers with one JSON object instead of lines
(:class:`jim.poll.JsonAnswer` overrides :meth:`Answer.fail` and :meth:`Answer.close`).

Only ``os`` and ``sys`` are imported: ``jim poll`` answers through this every
10 s per grid job; the error classes and logging only when something failed.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: poll's hot path imports this module)
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

#: The GRAM number of an error jim did not expect (JOB_EXECUTION_FAILED, :class:`jim.errors.GramError`).
INTERNAL_ERROR = 17

#: The longest value of one protocol line, in characters.
MAX_VALUE = 2000


class Answer:
    """The answer of one protocol command; fd 1 points at stderr from here until :meth:`close`."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.code = 0
        self.lines: list[str] = []
        #: A checked jim home whose log takes an internal error's traceback if the command has not set
        #: up jim's log itself (``jim poll`` never does).
        self.log_home: str | None = None
        self.answered = False
        sys.stdout.flush()
        self.fd = os.dup(1)
        os.dup2(2, 1)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> bool:
        """The envelope: an ``Exception`` becomes the answer (see the module docstring); then the answer is
        written.  Anything else (``KeyboardInterrupt``, ``SystemExit``) goes on once the answer is written."""
        try:
            if isinstance(error, Exception):
                self.fail_with(error)
        finally:
            self.close()
        return isinstance(error, Exception)

    def emit(self, key: str, value: object) -> None:
        """One ``KEY=value`` line: the value on one line, printable, at most 2000 characters; what is
        not printable (a control character, a byte that was not UTF-8, a lone surrogate) escaped."""
        self.lines.append(f"{key}={printable(value)}\n")

    def fail(self, gram_error: int, message: str) -> None:
        """The answer is an error: ``ERROR=<gram_error>`` and ``MESSAGE=<message>`` instead of every
        line emitted so far; the exit status 1."""
        self.lines = []
        self.emit("ERROR", gram_error)
        self.emit("MESSAGE", message)
        self.code = 1

    def fail_with(self, error: Exception) -> None:
        """The answer for ``error``: its own for a JimError, an internal error's for anything else."""
        from jim.errors import JimError  # (lazy: a poll that answers never needs the error classes)

        if isinstance(error, JimError):
            self.fail(error.gram_error, error.message)
            return
        _log_internal_error(self.command, error, self.log_home)
        self.fail(
            INTERNAL_ERROR, f"internal error in jim {self.command}: {type(error).__name__}: {error} (see jim's log)"
        )

    def close(self, final: bool = True) -> None:
        """Write the lines to the real stdout, all of them or an OSError; ``final=False`` answers early
        (``jim submit``, before it confirms the grid job): fd 1 stays on stderr and lines emitted
        later (an error after the answer) are never written."""
        data = b"" if self.answered else "".join(self.lines).encode()
        try:
            while data:
                data = data[os.write(self.fd, data) :]
            self.answered = self.answered or not final
        finally:
            if final:
                os.dup2(self.fd, 1)
                os.close(self.fd)


def printable(value: object) -> str:
    """``value`` as a protocol line's value: whitespace runs as one space, at most :data:`MAX_VALUE`
    characters, and what is not printable escaped (``\\xNN``, ``\\uNNNN``)."""
    text = " ".join(str(value).split())
    if len(text) > MAX_VALUE:
        text = text[:MAX_VALUE] + "..."
    if text.isascii() and text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def _escaped(c: str) -> str:
    if 0xDC80 <= ord(c) <= 0xDCFF:  # (a byte that was not UTF-8, as Python decodes it)
        return f"\\x{ord(c) - 0xDC00:02x}"
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def _log_internal_error(command: str, error: Exception, home: str | None) -> None:
    """The traceback of ``error`` in jim's log (set up in ``home`` first, if given); never raises."""
    try:
        import logging  # (lazy: only an internal error is logged from here)

        if home is not None:
            from pathlib import Path  # (lazy: likewise)

            from jim.log import setup  # (lazy: likewise; does nothing when the command set up the log)

            setup(Path(home))
        logging.getLogger("jim.cli").error("unexpected error in jim %s", command, exc_info=error)
    except Exception:
        pass
