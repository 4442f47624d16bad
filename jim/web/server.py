"""The servers of ``jim serve``: where each listens, and which home each request may read.

Three kinds, on the standard library's HTTP server, each answering with
:class:`jim.web.handler.RequestHandler`:

* :class:`JimServer` (the default): one user's home, on a TCP port (a thread
  per connection), for whoever shows the token printed on start
  (:func:`jim.web.auth.check_token`);
* :class:`UnixJimServer` (``--socket``): one user's home on a Unix socket
  that only its owner can connect to, no token.  The socket's directory must
  be the caller's and private (created 0700 when missing), is opened once
  (``O_NOFOLLOW``) and the socket bound relative to it, under umask 0177 (it
  is never open for a moment).  A path that is not a socket, a socket of
  another account or one something still listens on is refused; a leftover
  socket of an earlier run is replaced; on stop only the socket this server
  made is removed;
* :class:`SiteJimServer` (``--site``, as root): every user's own grid jobs,
  behind the site's web server; each connection is answered by a child
  process that becomes the account the request is for before it opens that
  account's home (:func:`jim.web.auth.site_account`, :func:`jim.web.auth.become`).

Every server loads its :class:`~jim.web.view.Assets` once (in ``--site``
mode before the children fork).  Tests and benchmarks start a
:class:`JimServer` on port 0 in a thread (:func:`start`, :func:`start_site`)
and read the bound port from ``server.url``, the token from ``server.token``.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import threading
import urllib.parse
from email.message import Message
from http.server import HTTPServer
from socketserver import ForkingMixIn, ThreadingMixIn
from typing import Any, TypeVar

from jim.paths import Home
from jim.web.auth import (
    DEFAULT_HOMES,
    USER_HEADER,
    become,
    check_metrics_token,
    check_token,
    is_loopback,
    new_token,
    site_account,
    site_home,
)
from jim.web.handler import RequestHandler
from jim.web.view import Assets, View

log = logging.getLogger("jim.web")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642


class WebServer(HTTPServer):
    """What every ``jim serve`` has: its assets, the loopback check, who may look, stopping."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64
    loopback = True
    check_host = True  # refuse requests whose Host header names another host (DNS rebinding)
    one_request_per_connection = False

    def __init__(self, address: Any, lock_timeout: float):
        self.lock_timeout = lock_timeout
        self.assets = Assets.load()
        self.thread: threading.Thread | None = None
        super().__init__(address, RequestHandler)

    @property
    def url(self) -> str:
        address, port = self.server_address[:2]
        host = address.decode() if isinstance(address, bytes) else str(address)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}/"

    @property
    def login_url(self) -> str:
        """The URL to open (with the token, if there is one)."""
        return self.url

    def view_for(self, headers: Message, parts: urllib.parse.SplitResult) -> View:
        """The home this request may read; raises HTTPError 403 (or Redirect) otherwise."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop a server started with :func:`start` (or serving in another thread)."""
        if self.thread is not None:
            self.shutdown()
            self.thread.join(10)
        self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("error while serving %s", client_address[0] if client_address else "?")


class JimServer(ThreadingMixIn, WebServer):
    """One user's view of one jim home, for whoever shows its token.

    The token (``secrets.token_urlsafe``) is given on the first visit as
    ``?token=``; the answer sets an HttpOnly, SameSite=Strict cookie and
    redirects to the same page without it.  A script may send
    ``Authorization: token <token>`` instead.  Every other request is 403.
    """

    def __init__(
        self,
        home: Home,
        address: tuple[str, int] = (DEFAULT_HOST, 0),
        *,
        lock_timeout: float = 10.0,
        token: str | None = None,
    ):
        self.home = home
        self.view = View(home, lock_timeout)
        self.token = token or new_token()
        host = address[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.loopback = is_loopback(host)
        super().__init__(address, lock_timeout)
        self.cookie = f"jim-token-{self.server_address[1]}"

    @property
    def login_url(self) -> str:
        return f"{self.url}?token={self.token}"

    def view_for(self, headers: Message, parts: urllib.parse.SplitResult) -> View:
        check_token(headers, parts, self.token, self.cookie)
        return self.view


class UnixJimServer(JimServer):
    """One user's view on a Unix socket that only its owner can connect to (0600, in a private directory)."""

    address_family = socket.AF_UNIX

    def __init__(self, home: Home, path: str | os.PathLike[str], *, lock_timeout: float = 10.0):
        self.path = os.path.abspath(path)
        self.loopback = True
        self.home = home
        self.view = View(home, lock_timeout)
        self.token = ""
        self._bound: tuple[int, int] | None = None
        self._dir_fd = _private_socket_dir(self.path)
        self.cookie = ""
        WebServer.__init__(self, os.path.basename(self.path), lock_timeout)

    def server_bind(self) -> None:
        """Bind in the directory already checked (no path is resolved again), the socket 0600 from the start."""
        name = os.path.basename(self.path)
        self._clear_leftover(name)
        cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
        umask = os.umask(0o177)
        try:
            os.fchdir(self._dir_fd)
            self.socket.bind(name)
        finally:
            os.fchdir(cwd)
            os.umask(umask)
            os.close(cwd)
        st = os.stat(name, dir_fd=self._dir_fd, follow_symlinks=False)
        self._bound = (st.st_dev, st.st_ino)
        self.server_name, self.server_port = "localhost", 0

    def _clear_leftover(self, name: str) -> None:
        """Remove an earlier run's socket (ours, nothing listening); refuse anything else at the path."""
        try:
            st = os.stat(name, dir_fd=self._dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(errno.EEXIST, f"{self.path} exists and is not a socket")
        if st.st_uid != os.geteuid():
            raise OSError(errno.EPERM, f"{self.path} belongs to another account")
        if _socket_answers(self._dir_fd, name):
            raise OSError(errno.EADDRINUSE, f"something already listens on {self.path}")
        os.unlink(name, dir_fd=self._dir_fd)

    @property
    def url(self) -> str:
        return f"http+unix://{urllib.parse.quote(self.path, safe='')}/"

    @property
    def login_url(self) -> str:
        return self.url

    def view_for(self, headers: Message, parts: urllib.parse.SplitResult) -> View:
        return self.view  # whoever could connect is the socket's owner

    def server_close(self) -> None:
        super().server_close()
        if self._dir_fd >= 0:
            name = os.path.basename(self.path)
            try:  # only the socket this server made (never what was there before, nor a later one)
                st = os.stat(name, dir_fd=self._dir_fd, follow_symlinks=False)
                if stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == self._bound:
                    os.unlink(name, dir_fd=self._dir_fd)
            except OSError:
                pass
            os.close(self._dir_fd)
            self._dir_fd = -1


def _private_socket_dir(path: str) -> int:
    """An open descriptor of the socket's directory: created 0700 if missing, refused unless ours and private."""
    parent = os.path.dirname(path)
    try:
        os.mkdir(parent, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise OSError(e.errno, f"cannot create {parent}: {e.strerror}") from None
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        raise OSError(e.errno, f"{parent} is not a directory (or is a symbolic link)") from None
    st = os.fstat(fd)
    why = None
    if st.st_uid != os.geteuid():
        why = f"{parent} belongs to another account"
    elif st.st_mode & 0o077:
        why = f"{parent} is open to other accounts (mode {stat.S_IMODE(st.st_mode):04o}; chmod 700 it)"
    if why:
        os.close(fd)
        raise OSError(errno.EPERM, f"the socket's directory must be private: {why}")
    return fd


def _socket_answers(dir_fd: int, name: str) -> bool:
    cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fchdir(dir_fd)
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(1)
            s.connect(name)
        return True
    except OSError:
        return False
    finally:
        os.fchdir(cwd)
        os.close(cwd)


class SiteJimServer(ForkingMixIn, WebServer):
    """Every user's own grid jobs, behind a site web server that authenticates them.

    The web server (Apache, nginx) authenticates the person, then passes the
    account name in ``X-Remote-User`` (``user_header``) and the shared secret
    in ``X-Jim-Proxy-Secret``; a request without the right secret is 403.
    Each connection is answered by a child process that becomes the named
    account (root only: groups, gid, uid) before it opens that account's
    home (``homes``: ``{user}``, ``{home}`` = its passwd home directory), so
    it reads nothing the account itself could not; the home must belong to
    the account.  Nobody ever sees another account's grid jobs.
    """

    block_on_close = False
    check_host = False  # behind a proxy: the secret header is what a browser cannot forge
    one_request_per_connection = True  # a proxy's kept-alive connection may carry several users' requests
    in_child = False
    metrics_token: str | None = None  # /metrics: every account's counts, for a scraper showing this token

    def __init__(
        self,
        address: tuple[str, int],
        secret: str,
        *,
        homes: str = DEFAULT_HOMES,
        user_header: str = USER_HEADER,
        lock_timeout: float = 10.0,
    ):
        self.secret = secret
        self.homes = homes
        self.user_header = user_header
        self.loopback = is_loopback(address[0])
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, lock_timeout)

    def view_for(self, headers: Message, parts: urllib.parse.SplitResult) -> View:
        if parts.path == "/metrics":  # (root's: every home, each read as its owner; see jim.census)
            check_metrics_token(headers, self.metrics_token)
            return View(Home("/"), self.lock_timeout, homes=self.homes)
        name, pw = site_account(headers, self.secret, self.user_header)
        become(pw, in_child=self.in_child)
        return View(Home(site_home(self.homes, name, pw)), self.lock_timeout, user=name)

    def process_request(self, request: Any, client_address: Any) -> None:
        pid = os.fork()
        if pid:  # the parent: the child has the connection now
            if self.active_children is None:
                self.active_children = set()
            self.active_children.add(pid)
            self.close_request(request)
            return
        status = 1
        try:
            self.in_child = True
            self.socket.close()
            self.finish_request(request, client_address)
            status = 0
        except BaseException:
            self.handle_error(request, client_address)
        finally:
            try:
                self.shutdown_request(request)
            finally:
                os._exit(status)


def start(
    home: Home, host: str = DEFAULT_HOST, port: int = 0, *, socket_path: str | None = None, **kw: Any
) -> JimServer:
    """A :class:`JimServer` serving in a daemon thread (``server.url``, ``server.token``; ``server.stop()``).

    With ``socket_path``, a :class:`UnixJimServer` on that Unix socket instead.
    """
    server: JimServer = (
        UnixJimServer(home, socket_path, **kw) if socket_path is not None else JimServer(home, (host, port), **kw)
    )
    return _in_thread(server)


def start_site(secret: str, host: str = DEFAULT_HOST, port: int = 0, **kw: Any) -> SiteJimServer:
    """A :class:`SiteJimServer` serving in a daemon thread (its children answer the requests)."""
    return _in_thread(SiteJimServer((host, port), secret, **kw))


_S = TypeVar("_S", bound=WebServer)


def _in_thread(server: _S) -> _S:
    server.thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="jim-web", daemon=True
    )
    server.thread.start()
    return server
