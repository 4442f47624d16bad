"""What every ``jim arc-backend`` step shares: ``[custom:jim]``, an account's jim environment, the log line.

A-REX passes each step its pre-processed runtime configuration
(``--config CFG``, arc.conf syntax).  :meth:`Options.load` reads it, bounded
(:data:`MAX_CONFIG_BYTES`), into the few values the backend uses:

==================  ===============================================  =============================
arc.conf            meaning                                          default
==================  ===============================================  =============================
``jim_command``     the jim every step runs (absolute path)           this installation's jim
``jim_timeout``     seconds one jim call as an owner may take         :data:`DEFAULT_TIMEOUT`
``jim_home``        each account's ``JIM_HOME``: ``{user}``,          :data:`DEFAULT_HOME_PATTERN`
                    ``{home}`` and a leading ``~`` expanded
``jim_config``      ``JIM_CONFIG`` of every jim run (optional)        jim's own
``scan_passes``,    the scan's passes per run and the seconds         1, 2.0
``scan_interval``   between them
``[arex]``          ``controldir``: the info step's default;
                    ``runtimedir``: where the site's own RTEs are
``[queue:NAME]``    the CE's queues
``benchmark``       of ``[lrms]`` and each ``[queue:NAME]``: the
                    first value (A-REX's accounting takes the first)
==================  ===============================================  =============================

A value that is not what it must be is a :class:`BackendError` with a
one-line reason.  :func:`user_env` is the environment of a jim run for an
account (the user steps put it in their own environment, the root steps give
it to each owner's jim), and :func:`log` the one line on stderr every step
writes.
"""

from __future__ import annotations

import os
import pwd
import sys
import time
from dataclasses import dataclass, field

from jim.safeio import NotRegular, open_regular, read_at_most

#: The runtime configuration jim reads (A-REX's pre-processed arc.conf), at most.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
DEFAULT_HOME_PATTERN = "~/.jim"
DEFAULT_TIMEOUT = 30.0


class BackendError(Exception):
    """A one-line reason the backend step cannot go on."""


def read_config(path: str) -> dict[str, dict[str, str]]:
    """Block name -> option -> value of an arc.conf-style file (the last value of an option wins)."""
    try:
        fd, _st = open_regular(path)
    except (OSError, NotRegular) as e:
        raise BackendError(f"cannot read the ARC configuration {path}: {e}") from None
    try:
        data = read_at_most(fd, MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise BackendError(f"the ARC configuration {path} is longer than {MAX_CONFIG_BYTES} bytes")
    return parse_config(data.decode("utf-8", "replace"))


#: Multivalued options whose first value is the one that counts (A-REX's accounting takes the first benchmark).
FIRST_WINS = ("benchmark",)


def parse_config(text: str) -> dict[str, dict[str, str]]:
    """Block name -> option -> value of arc.conf text (options before any block are under ``""``): the
    last value of an option, the first of one of :data:`FIRST_WINS`."""
    blocks: dict[str, dict[str, str]] = {}
    current: dict[str, str] = blocks.setdefault("", {})
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = blocks.setdefault(line[1:-1].strip(), {})
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and not (key in FIRST_WINS and key in current):
            current[key] = _unquoted(value.strip())
    return blocks


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


@dataclass
class Options:
    """``[custom:jim]`` of the runtime configuration."""

    jim_command: str
    timeout: float = DEFAULT_TIMEOUT
    home_pattern: str = DEFAULT_HOME_PATTERN
    jim_config: str = ""
    scan_passes: int = 1
    scan_interval: float = 2.0
    controldir: str = ""
    queues: list[str] = field(default_factory=list)
    runtimedirs: list[str] = field(default_factory=list)
    #: ``lrms`` or ``queue:NAME`` -> its (first) ``benchmark`` (``HEPSPEC 12.26``)
    benchmarks: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | None) -> Options:
        """The options of the runtime configuration ``path`` (None: every default)."""
        blocks = read_config(path) if path else {}
        custom = blocks.get("custom:jim", {})
        opts = cls(
            jim_command=custom.get("jim_command") or own_jim_command(),
            timeout=_number(custom, "jim_timeout", DEFAULT_TIMEOUT, float),
            home_pattern=custom.get("jim_home") or DEFAULT_HOME_PATTERN,
            jim_config=custom.get("jim_config", ""),
            scan_passes=int(_number(custom, "scan_passes", 1, int)),
            scan_interval=_number(custom, "scan_interval", 2.0, float),
            controldir=blocks.get("arex", {}).get("controldir", ""),
            queues=[b[len("queue:") :] for b in blocks if b.startswith("queue:")],
            runtimedirs=[d for d in [blocks.get("arex", {}).get("runtimedir", "")] if d],
            benchmarks={b: o["benchmark"] for b, o in blocks.items() if "benchmark" in o},
        )
        if not os.path.isabs(opts.jim_command):
            raise BackendError(f"[custom:jim] jim_command must be an absolute path, not {opts.jim_command[:200]!r}")
        return opts


def _number(block: dict[str, str], key: str, default: float, kind: type[int] | type[float]) -> float:
    raw = block.get(key, "")
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise BackendError(f"[custom:jim] {key} must be a number, not {raw[:80]!r}") from None
    if value <= 0 or value > 1e6:
        raise BackendError(f"[custom:jim] {key} must be positive, not {raw[:80]!r}")
    return float(value)


def own_jim_command() -> str:
    """The jim console script of this installation (next to this Python), else the running one."""
    candidate = os.path.join(os.path.dirname(sys.executable), "jim")
    if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return candidate
    return os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else candidate


def expand_home(pattern: str, pw: pwd.struct_passwd) -> str:
    """The jim home of the account ``pw``: ``{user}``, ``{home}`` and a leading ``~`` expanded."""
    text = pattern.replace("{user}", pw.pw_name).replace("{home}", pw.pw_dir)
    if text == "~" or text.startswith("~/"):
        text = pw.pw_dir.rstrip("/") + text[1:]
    if not os.path.isabs(text):
        raise BackendError(f"[custom:jim] jim_home must give an absolute path, not {pattern[:200]!r}")
    return os.path.normpath(text)


def user_env(opts: Options, pw: pwd.struct_passwd) -> dict[str, str]:
    """The environment of a jim run for the account ``pw``."""
    env = {
        "HOME": pw.pw_dir,
        "USER": pw.pw_name,
        "LOGNAME": pw.pw_name,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "JIM_HOME": expand_home(opts.home_pattern, pw),
    }
    if opts.jim_config:
        env["JIM_CONFIG"] = opts.jim_config
    return env


def log(message: str) -> None:
    """One line on stderr (A-REX appends the scan step's stderr to its helper log)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        print(f"[{stamp}] jim arc-backend: {message}", file=sys.stderr, flush=True)
    except OSError:
        pass
