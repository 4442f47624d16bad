"""``jim serve``: the command that runs a server until it is stopped.

:func:`serve` takes the configuration and one :class:`ServeOptions` (what
``jim serve``'s options said), and:

1. checks the options (:func:`check`): ``--site`` is root's, needs
   ``--proxy-secret-file``, a ``--homes`` pattern that is an absolute path
   naming the user, a ``--user-header`` that is a header name, and is not
   with ``--socket``; ``--proxy-secret-file`` and ``--metrics-token-file``
   are for ``--site`` only;
2. makes the server (:mod:`jim.web.server`): the token's, the Unix
   socket's, or the site's;
3. says where it listens, on stdout (the URL to open) and in jim's log, and
   warns when it listens beyond a loopback address; the token's server
   writes its URL to ``$JIM_HOME/serve.url`` (0600, replaced atomically,
   never through a link; removed on a clean stop unless another ``jim
   serve`` of the home has written its own since);
4. serves until SIGINT or SIGTERM.  SIGPIPE is ignored meanwhile: jim's
   human commands die quietly on it (for ``| head``), a server must not (a
   browser that drops a connection mid-answer is an EPIPE for that request
   only).

It answers 0 on a clean stop, 1 (with one line on stderr) when it cannot start.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from jim.config import Config
from jim.errors import JimError
from jim.paths import Home
from jim.safeio import atomic_write, read_regular
from jim.web.auth import ACCOUNT, DEFAULT_HOMES, URL_FILE, USER_HEADER, home_pattern, read_secret
from jim.web.server import DEFAULT_HOST, DEFAULT_PORT, JimServer, SiteJimServer, UnixJimServer, WebServer

log = logging.getLogger("jim.web")

SOCKET_FILE = "serve.sock"  # in $JIM_HOME: the Unix socket of ``--socket`` without a path


@dataclass(frozen=True)
class ServeOptions:
    """What ``jim serve``'s options say."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    socket_path: str | None = None  # --socket: None without it, "" for $JIM_HOME/serve.sock
    site: bool = False  # --site
    secret_file: str | None = None  # --proxy-secret-file
    homes: str = DEFAULT_HOMES  # --homes
    user_header: str = USER_HEADER  # --user-header
    metrics_token_file: str | None = None  # --metrics-token-file


def serve(config: Config, options: ServeOptions) -> int:
    """``jim serve``: serve until SIGINT or SIGTERM; 0 on a clean stop, 1 if it cannot start."""
    home = Home(config.home)
    try:
        check(options)
        server = _make_server(home, options, config.deadlines.lock)
    except JimError as e:
        print(f"jim: error: {e.message}", file=sys.stderr)
        log.error("jim serve: %s", e.message)
        return 1
    except OSError as e:
        where = _where(home, options)
        print(f"jim: error: cannot listen on {where}: {e.strerror or e}", file=sys.stderr)
        log.error("jim serve: cannot listen on %s: %s", where, e)
        return 1
    previous = _take_signals()
    url_file = _announce(server, home, options)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if url_file is not None:
            _remove_url_file(url_file, server.login_url)
        for s, h in previous.items():
            signal.signal(s, h)
        log.info("jim serve: stopped")
    return 0


def check(options: ServeOptions) -> None:
    """:class:`JimError` when the options do not go together (see the module's docstring)."""
    if options.socket_path is not None and options.site:
        raise JimError("jim serve --site listens on TCP for the site's web server: not with --socket")
    if options.secret_file and not options.site:
        raise JimError("--proxy-secret-file is for jim serve --site")
    if options.metrics_token_file and not options.site:
        raise JimError("--metrics-token-file is for jim serve --site (a user's own jim serve answers /metrics)")
    if not options.site:
        return
    if os.geteuid() != 0:
        raise JimError("jim serve --site runs as root: it answers each user as that user")
    if not options.secret_file:
        raise JimError("jim serve --site needs --proxy-secret-file (the secret the site web server sends)")
    homes = options.homes
    if "{user}" not in homes and "{home}" not in homes or not home_pattern(homes, "u", "/h").startswith("/"):
        raise JimError(f"--homes {homes!r} must be an absolute path with {{user}} or {{home}} in it")
    if not ACCOUNT.fullmatch(options.user_header.replace("-", "_")):
        raise JimError(f"--user-header {options.user_header!r} is not a header name")


def _where(home: Home, options: ServeOptions) -> str:
    """Where the server was to listen, for a message."""
    if options.socket_path is None:
        return f"{options.host}:{options.port}"
    return options.socket_path or str(home.root / SOCKET_FILE)


def _make_server(home: Home, options: ServeOptions, lock_timeout: float) -> WebServer:
    """The server the (checked) options ask for; OSError when it cannot listen."""
    if options.site:
        token = read_secret(options.metrics_token_file) if options.metrics_token_file else None
        site = SiteJimServer(
            (options.host, options.port),
            read_secret(options.secret_file or ""),
            homes=options.homes,
            user_header=options.user_header,
            lock_timeout=lock_timeout,
        )
        site.metrics_token = token  # (/metrics: every account's counts, for whoever shows it)
        return site
    if options.socket_path is not None:
        home.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        return UnixJimServer(home, _where(home, options), lock_timeout=lock_timeout)
    return JimServer(home, (options.host, options.port), lock_timeout=lock_timeout)


def _stop(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt


def _take_signals() -> dict[int, Any]:
    """SIGINT and SIGTERM stop the server, SIGPIPE is ignored; the handlers they had before."""
    previous: dict[int, Any] = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
    previous[signal.SIGPIPE] = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    return previous


def _announce(server: WebServer, home: Home, options: ServeOptions) -> Path | None:
    """Say where the server listens and what it shows (warn when beyond a loopback address); the
    URL file written, if any."""
    url_file = None
    warning = None
    if isinstance(server, SiteJimServer):
        what = f"each user's own grid jobs ({options.homes}), behind the site's web server"
        if not server.loopback:
            warning = (
                f"jim serve --site listens on {options.host}: only the site's web server should be able to reach it"
            )
    else:
        what = f"read-only view of {home.db}"
        if not isinstance(server, UnixJimServer):
            url_file = _write_url_file(home, server.login_url)
            if not server.loopback:
                warning = (
                    f"jim serve listens on {options.host}, not on a loopback address: its token travels unencrypted "
                    f"(prefer the default, or --socket, and ssh -L)"
                )
    if warning:
        log.warning(warning)
        print(f"jim: warning: {warning}", file=sys.stderr)
    log.info("jim serve: %s (%s)", server.url, what)
    print(f"jim serve: {server.login_url}  ({what}; Ctrl-C stops)", flush=True)
    return url_file


def _write_url_file(home: Home, url: str) -> Path:
    """``$JIM_HOME/serve.url``: the URL with the token, 0600, replaced atomically (never through a link)."""
    home.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = home.root / URL_FILE
    atomic_write(path, url + "\n", mode=0o600, sync=False)  # (lost in a crash with the server it names)
    return path


def _remove_url_file(path: Path, url: str) -> None:
    """Remove the URL file, unless another ``jim serve`` of this home has written its own since."""
    try:
        text = read_regular(path, 4096)
        if text is not None and text.decode(errors="replace").strip() == url:
            path.unlink()
    except OSError:
        pass
