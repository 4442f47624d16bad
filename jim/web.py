"""``jim serve``: a read-only web view of jim's database.

A separate, long-running process (``jim serve [--host H] [--port N]``, default
``127.0.0.1:8642``): the standard library's HTTP server (threads; a process
per connection for ``--site``), pages built
with jinja2 templates (``jim/templates/``, autoescaped: every value from a
record is HTML-escaped).  It only ever reads the database, without locks
(records are replaced atomically, so a read sees a whole file); nothing in it
can change a job.

Routes (GET and HEAD only; any other method is answered 405, or 403 without the token)::

    /                       grid jobs, newest first: ?state=ACTIVE&page=2&per_page=50
    /jobs/<id>              one grid job (HTML); refreshes itself while the grid job is
                            not DONE or FAILED; local jobs: ?state=FAILED&order=attention&page=..,
                            ?retried=1 for those tried more than once
    /jobs/<id>/<k>          local job k of a grid job (HTML): its state history, every attempt
    /api/jobs               JSON list of grid jobs as ``jim list --json`` prints it (?state=,
                            and ?page=&per_page= to page; X-Total-Count gives the total)
    /api/jobs/<id>          JSON: what ``jim status --json`` prints (compact; ?pretty to indent)
    /db/<id>.html           the record rendered to HTML on the server through jim.xsl (lxml): no
                            browser XSLT needed
    /db/<id>.xml            the raw record, with its stylesheet instruction (for tools, and for
                            browsers that still run XSLT)
    /db/jim.xsl             the stylesheet
    /db/index.html          the index rendered on the server through jim.xsl (links to <id>.html)
    /db/index.xml           the index, with the stylesheet instruction added
    /static/jim.css         the pages' style sheet

Who may look (docs/web.md): a grid job's environment and arguments may hold
passwords, so a request is answered only for the account that owns the jobs.

* By default (:class:`JimServer`) one user's home, for whoever shows the token
  printed on start (``secrets.token_urlsafe``; also in ``$JIM_HOME/serve.url``,
  0600): ``?token=`` on the first visit becomes an HttpOnly, SameSite=Strict
  cookie and a redirect to the same page without it; scripts send
  ``Authorization: token <token>``.  Every other request, whatever the route
  (the style sheet and jim.xsl too), is 403 with no job data.
* ``--socket [PATH]`` (:class:`UnixJimServer`): a 0600 Unix socket in a private
  directory, no token: only its owner can connect.
* ``--site`` (:class:`SiteJimServer`, as root): behind a web server that
  authenticates people and passes the account name with a shared secret; each
  connection is answered by a child process that becomes that account before
  it opens that account's home.  Nobody is shown another account's grid jobs.

Job ids in a path must be jim job ids (:mod:`jim.jobid`): no path
from a request is ever joined to a directory otherwise.  The index page reads
only ``db/index.xml`` (cached while the file is unchanged), never every
record.  HTML carries a strict Content-Security-Policy (no script at all) and
every response ``X-Content-Type-Options: nosniff``.  Bound to a loopback
address, the server also refuses requests whose Host header names another
host (DNS rebinding).

Tests and benchmarks start a :class:`JimServer` on port 0 in a thread
(:func:`start`) and read the bound port from ``server.url``, the token from
``server.token``.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import hmac
import html
import ipaddress
import json
import logging
import math
import os
import pwd
import re
import secrets
import signal
import socket
import stat
import sys
import threading
import time
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import resources
from pathlib import Path
from socketserver import ForkingMixIn, ThreadingMixIn
from typing import Any, TypeVar

import jinja2
from lxml import etree

from jim import __version__
from jim.db import Database
from jim.errors import JimError, JobNotFound
from jim.jobid import JOB_ID_PATTERN, valid_job_id
from jim.ownership import home_problem
from jim.paths import Home
from jim.record import STYLESHEET_PI, LocalJob, child
from jim.safeio import NotRegular, open_regular, read_regular
from jim.states import GramState
from jim.status import ORDER as LOCAL_ORDER
from jim.status import duration, elapsed, job_summary, local_row, parse_time, progress_of, sort_key, status_json

log = logging.getLogger("jim.web")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642
REFRESH_JOB_S = 5  # a job page refreshes itself this often while the grid job is active
REFRESH_INDEX_S = 15  # the index, while a grid job on the page is active
PER_PAGE = 50  # grid jobs per index page
MAX_PER_PAGE = 1000
LOCAL_PER_PAGE = 500  # local jobs per job page
MAX_LOCAL_PER_PAGE = 10000
GRID_STATES = [s.name for s in GramState]
LOCAL_STATES = sorted(LOCAL_ORDER, key=lambda state: LOCAL_ORDER[state])
TERMINAL_GRID = ("DONE", "FAILED")

_ID = JOB_ID_PATTERN
ROUTES = [
    (re.compile(r"/"), "index"),
    (re.compile(rf"/jobs/(?P<job_id>{_ID})"), "job"),
    (re.compile(rf"/jobs/(?P<job_id>{_ID})/(?P<index>[0-9]{{1,9}})"), "local_job"),
    (re.compile(r"/api/jobs"), "api_list"),
    (re.compile(rf"/api/jobs/(?P<job_id>{_ID})"), "api_job"),
    (re.compile(rf"/db/(?P<job_id>{_ID})\.xml"), "db_record"),
    (re.compile(rf"/db/(?P<job_id>{_ID})\.html"), "db_record_html"),
    (re.compile(r"/db/index\.html"), "db_index_html"),
    (re.compile(r"/db/jim\.xsl"), "db_stylesheet"),
    (re.compile(r"/db/index\.xml"), "db_index"),
    (re.compile(r"/static/jim\.css"), "static_css"),
]

COMMON_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
# HTML from the templates: no script at all, style only from /static/jim.css
CSP_HTML = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
# a record or the index rendered by the browser through jim.xsl: the stylesheet is loaded
# from this server (CSP governs XSLT through script-src), its output has an inline <style>
CSP_XML = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
CSP_OTHER = "default-src 'none'; frame-ancestors 'none'"
# a record or the index rendered on the server through jim.xsl: no script at all; its one inline
# <style> (constant, from the stylesheet) allowed by its hash, added per response
CSP_RENDERED = "default-src 'none'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
_STYLE_BLOCK = re.compile(rb"<style[^>]*>(.*?)</style>", re.S)
_RECORD_LINK = re.compile(rf"({_ID})\.xml")
# jim.xsl and the documents it transforms: no entities resolved, nothing fetched
_XSLT_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True, load_dtd=False)


# evaluated in C: the page of a grid job of 10,000 local jobs builds rows only for those it shows
_RETRIED = etree.XPath("count(localjobs/localjob/attempts)")  # (<attempts> holds one <attempt> or more)
_COOL_OFFS = etree.XPath("localjobs/localjob[@retryAfter]")


class HTTPError(Exception):
    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# ---------------------------------------------------------------------------
# Reading the database (read-only helpers)
# ---------------------------------------------------------------------------


class IndexCache:
    """``Database.list()`` (the index, newest first), re-read only when ``index.xml`` changed."""

    def __init__(self, db: Database):
        self.db = db
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._jobs: list[dict[str, str]] = []
        self._counts: dict[str, int] = {}

    def _signature(self) -> tuple | None:
        try:
            st = self.db.home.index.stat()
            return ("index", st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            try:  # no index: Database.list() rebuilds it from the records; redo when db/ changes
                st = self.db.home.db.stat()
                return ("records", st.st_ino, st.st_mtime_ns)
            except FileNotFoundError:
                return None

    def get(self) -> tuple[list[dict[str, str]], dict[str, int]]:
        key = self._signature()
        with self._lock:
            if key is not None and key == self._key:
                return self._jobs, self._counts
            jobs = self.db.list() if key is not None else []
            counts: dict[str, int] = {}
            for j in jobs:
                counts[j.get("state", "")] = counts.get(j.get("state", ""), 0) + 1
            self._key, self._jobs, self._counts = key, jobs, counts
            return jobs, counts


def _local_brief(el) -> dict:
    """What :func:`jim.status.sort_key` looks at, of one <localjob>."""
    return {
        "index": int(el.get("index")),
        "state": el.get("state"),
        "started": el.get("started"),
        "submitted": el.get("submitted"),
        "ended": el.get("ended"),
        "progress": progress_of(el),
    }


def _row(el, now: float) -> dict:
    """One local job as ``jim status --json`` shows it, plus its wall time so far."""
    row = local_row(LocalJob(el))
    row["_elapsed"] = elapsed(row, now)
    return row


def _retries(root, retries: int, now: float) -> dict[str, Any] | None:
    """The retries of a grid job for its page: how many, how many local jobs were tried more than
    once, how many wait for a cool-off (None when there were none)."""
    if not retries:
        return None
    retried = _RETRIED(root)
    found = _COOL_OFFS(root)
    waiting = (
        sum(1 for el in found if isinstance(el, etree._Element) and _cooling(el.attrib, now))
        if isinstance(found, list)
        else 0
    )
    return {"retries": retries, "retried": int(retried) if isinstance(retried, float) else 0, "waiting": waiting}


def _cooling(row: Any, now: float) -> bool:
    """Whether a local job (a row of :func:`jim.status.local_row`, or a <localjob>'s attributes)
    waits for a retry's cool-off."""
    return row.get("state") == "PLANNED" and (parse_time(row.get("retryAfter")) or 0.0) > now


def _package_bytes(package: str, *parts: str) -> bytes:
    return resources.files(package).joinpath(*parts).read_bytes()


class Renderer:
    """jim.xsl compiled once (per process), run by lxml on the server: a record or the index to HTML.

    The transformation may read, write or fetch nothing (``XSLTAccessControl.DENY_ALL``: no
    ``document()``, no ``xsl:include`` at run time, no output files), and the documents are parsed
    without entities or network."""

    def __init__(self, stylesheet: bytes):
        doc = etree.fromstring(stylesheet, _XSLT_PARSER).getroottree()
        deny_all = etree.XSLTAccessControl.DENY_ALL  # type: ignore[attr-defined]  # (missing from lxml-stubs)
        self._xslt = etree.XSLT(doc, access_control=deny_all)
        self._lock = threading.Lock()  # one transformation at a time with the shared compiled stylesheet

    def render(self, xml: bytes) -> tuple[bytes, str]:
        """The HTML page of an XML record or index, and the Content-Security-Policy it needs."""
        doc = etree.fromstring(xml, _XSLT_PARSER)
        with self._lock:
            result = self._xslt(doc)
        root = result.getroot()
        if root is None:
            raise JimError("jim.xsl gave no page for this document")
        for a in root.iter("a"):  # the index links each grid job to its rendered page, not to the raw XML
            m = _RECORD_LINK.fullmatch(a.get("href") or "")
            if m:
                a.set("href", m.group(1) + ".html")
        body = bytes(result)
        hashes = " ".join(
            "'sha256-" + base64.b64encode(hashlib.sha256(m.group(1)).digest()).decode() + "'"
            for m in _STYLE_BLOCK.finditer(body)
        )
        csp = CSP_RENDERED + (f"; style-src {hashes}" if hashes else "")
        return body, csp


def _with_stylesheet(xml: bytes) -> bytes:
    """An XML document with jim's ``xml-stylesheet`` instruction (for the index, which has none)."""
    if b"<?xml-stylesheet" in xml[:500]:
        return xml
    pi = b"<?xml-stylesheet " + STYLESHEET_PI.encode() + b"?>\n"
    if xml.startswith(b"<?xml "):
        end = xml.index(b"?>") + 2
        return xml[:end] + b"\n" + pi + xml[end:].lstrip(b"\r\n")
    return pi + xml


# ---------------------------------------------------------------------------
# Templates
# ---------------------------------------------------------------------------


def _ts(value: str | None) -> str:
    """``2026-11-22T07:17:52.529Z`` -> ``2026-11-22 07:17:52``."""
    if not value:
        return ""
    return value.replace("T", " ")[:19]


def _ago(value: str | None, now: float) -> str:
    t = parse_time(value)
    return "" if t is None else duration(now - t) + " ago"


def make_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("jim", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ts"] = _ts
    env.filters["duration"] = duration
    env.filters["pct"] = lambda f: "" if f is None else f"{100 * f:.1f}%"
    env.globals["version"] = __version__
    return env


def _page_links(path: str, params: dict[str, Any], page: int, pages: int) -> dict[str, str | None]:
    def url(p: int) -> str:
        q = {k: v for k, v in params.items() if v not in (None, "")}
        if p > 1:
            q["page"] = p
        return path + ("?" + urllib.parse.urlencode(q) if q else "")

    return {
        "first": url(1) if page > 1 else None,
        "prev": url(page - 1) if page > 1 else None,
        "next": url(page + 1) if page < pages else None,
        "last": url(pages) if page < pages else None,
        "self": url(page),
    }


def _url(path: str, **params: Any) -> str:
    q = {k: v for k, v in params.items() if v not in (None, "")}
    return path + ("?" + urllib.parse.urlencode(q) if q else "")


# ---------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------

TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 43 characters
MAX_CREDENTIAL = 512  # a token, cookie or secret longer than this is refused before it is compared
URL_FILE = "serve.url"  # in $JIM_HOME, 0600: the URL with the token, as printed on start
SECRET_HEADER = "X-Jim-Proxy-Secret"
USER_HEADER = "X-Remote-User"
DEFAULT_HOMES = "{home}/.jim"
_ACCOUNT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")


class View:
    """The jim home one request is answered from (whose owner the request was authenticated as)."""

    def __init__(self, home: Home, lock_timeout: float, user: str | None = None):
        self.home = home
        self.db = Database(home, lock_timeout)
        self.index_cache = IndexCache(self.db)
        self.user = user


class Redirect(Exception):
    def __init__(self, location: str, headers: dict[str, str]):
        super().__init__(location)
        self.location = location
        self.headers = headers


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison of a credential from a request with the expected one."""
    if not given or len(given) > MAX_CREDENTIAL:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8", "replace"))


def _cookie_values(handler: BaseHTTPRequestHandler, wanted: str) -> list[str]:
    """Every value the request's cookies give ``wanted`` (another port's page may have set one more)."""
    out: list[str] = []
    for header in handler.headers.get_all("Cookie") or []:
        for part in header.split(";"):
            name, sep, value = part.strip().partition("=")
            if sep and name == wanted and len(out) < 8:
                out.append(value.strip().strip('"'))
    return out


class _Base(HTTPServer):
    """What every ``jim serve`` has: templates, the stylesheet, the loopback check, stopping."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64
    loopback = True
    check_host = True  # refuse requests whose Host header names another host (DNS rebinding)
    one_request_per_connection = False

    def __init__(self, address: Any, lock_timeout: float):
        self.lock_timeout = lock_timeout
        self.env = make_env()
        self.stylesheet = _package_bytes("jim", "data", "jim.xsl")
        self.renderer = Renderer(self.stylesheet)
        self.css = _package_bytes("jim", "templates", "jim.css")
        self.thread: threading.Thread | None = None
        super().__init__(address, Handler)

    @property
    def url(self) -> str:
        address, port = self.server_address[:2]
        host = address.decode() if isinstance(address, bytes) else address
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}/"

    @property
    def login_url(self) -> str:
        """The URL to open (with the token, if there is one)."""
        return self.url

    def view_for(self, handler: Handler, parts: urllib.parse.SplitResult) -> View:
        """The home this request may read; raises HTTPError 403 (or Redirect) otherwise."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop a server started with :func:`start` (or serving in another thread)."""
        if self.thread is not None:
            self.shutdown()
            self.thread.join(10)
        self.server_close()

    def handle_error(self, request, client_address) -> None:
        log.exception("error while serving %s", client_address[0] if client_address else "?")


class JimServer(ThreadingMixIn, _Base):
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
        self.token = token or secrets.token_urlsafe(TOKEN_BYTES)
        host = address[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.loopback = _is_loopback(host)
        super().__init__(address, lock_timeout)
        self.cookie = f"jim-token-{self.server_address[1]}"

    @property
    def login_url(self) -> str:
        return f"{self.url}?token={self.token}"

    def view_for(self, handler: Handler, parts: urllib.parse.SplitResult) -> View:
        given = _query_value(parts.query, "token")
        if given is not None:
            if not _same(given, self.token):
                raise HTTPError(HTTPStatus.FORBIDDEN, "wrong token: open the URL jim serve printed when it started")
            cookie = f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict"
            raise Redirect(_without_token(parts), {"Set-Cookie": cookie})
        scheme, _, credential = handler.headers.get("Authorization", "").strip().partition(" ")
        if scheme.lower() in ("token", "bearer") and _same(credential.strip(), self.token):
            return self.view
        if any(_same(value, self.token) for value in _cookie_values(handler, self.cookie)):
            return self.view
        raise HTTPError(
            HTTPStatus.FORBIDDEN,
            f"this view needs its token: open the URL jim serve printed when it started (also in $JIM_HOME/{URL_FILE})",
        )


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
        _Base.__init__(self, os.path.basename(self.path), lock_timeout)

    def server_bind(self) -> None:
        """Bind in the directory already checked (no path is resolved again), the socket 0600 from the start."""
        name = os.path.basename(self.path)
        try:
            st = os.stat(name, dir_fd=self._dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(st.st_mode):
                raise OSError(errno.EEXIST, f"{self.path} exists and is not a socket")
            if st.st_uid != os.geteuid():
                raise OSError(errno.EPERM, f"{self.path} belongs to another account")
            if _socket_answers(self._dir_fd, name):
                raise OSError(errno.EADDRINUSE, f"something already listens on {self.path}")
            os.unlink(name, dir_fd=self._dir_fd)
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

    @property
    def url(self) -> str:
        return f"http+unix://{urllib.parse.quote(self.path, safe='')}/"

    @property
    def login_url(self) -> str:
        return self.url

    def view_for(self, handler: Handler, parts: urllib.parse.SplitResult) -> View:
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


class SiteJimServer(ForkingMixIn, _Base):
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
        self.loopback = _is_loopback(address[0])
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, lock_timeout)

    def view_for(self, handler: Handler, parts: urllib.parse.SplitResult) -> View:
        secrets_given = handler.headers.get_all(SECRET_HEADER) or []
        if len(secrets_given) != 1 or not _same(secrets_given[0].strip(), self.secret):
            raise HTTPError(HTTPStatus.FORBIDDEN, "not through the site's web server")
        users = handler.headers.get_all(self.user_header) or []
        name = users[0].strip() if len(users) == 1 else ""  # (twice: the proxy did not set it alone)
        if not _ACCOUNT.fullmatch(name):
            raise HTTPError(HTTPStatus.FORBIDDEN, "no authenticated user")
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise HTTPError(HTTPStatus.FORBIDDEN, f"no local account {name}") from None
        if pw.pw_uid == 0:
            raise HTTPError(HTTPStatus.FORBIDDEN, "a site view does not serve root's jobs")
        if os.geteuid() != pw.pw_uid:
            if os.geteuid() != 0:
                raise HTTPError(HTTPStatus.FORBIDDEN, "this jim serve --site cannot act as other accounts")
            if not self.in_child:
                raise HTTPError(HTTPStatus.INTERNAL_SERVER_ERROR, "a site view answers in a child process only")
            os.setgroups(os.getgrouplist(pw.pw_name, pw.pw_gid))
            os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
            os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
        root = home_pattern(self.homes, pw.pw_name, pw.pw_dir)
        why = home_problem(root, pw.pw_uid)
        if why:
            log.warning("jim serve --site: %s: %s", name, why)
            raise HTTPError(HTTPStatus.FORBIDDEN, f"the jim home of {name} is not used: it is not private to {name}")
        return View(Home(root), self.lock_timeout, user=name)

    in_child = False

    def process_request(self, request, client_address) -> None:
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


def home_pattern(pattern: str, user: str, home: str) -> str:
    """A user's jim home from a pattern: ``{user}`` the account name, ``{home}`` its home directory."""
    return pattern.replace("{user}", user).replace("{home}", home.rstrip("/") or "/")


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_is_loopback_name(host_header: str) -> bool:
    """Host header of a request to a loopback server: localhost, 127.x.y.z or [::1], any port."""
    h = host_header.strip().lower()
    if h.startswith("["):
        name = h[1 : h.find("]")] if "]" in h else h
    else:
        name = h.rsplit(":", 1)[0] if h.count(":") == 1 else h
    if name in ("localhost", "localhost.") or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _route(path: str) -> tuple[str, re.Match[str]]:
    """The route of a request path and its match; 404 when there is none."""
    for pattern, name in ROUTES:
        m = pattern.fullmatch(path)
        if m:
            return name, m
    raise HTTPError(HTTPStatus.NOT_FOUND, "no such page")


def _query_value(qs: str, name: str) -> str | None:
    """The (first) value of one query parameter, or None."""
    for key, value in urllib.parse.parse_qsl(qs, keep_blank_values=True, max_num_fields=20):
        if key == name:
            return value
    return None


def _without_token(parts: urllib.parse.SplitResult) -> str:
    """Where a first visit with ``?token=`` is sent: the same page without the token (a known route, else /)."""
    try:
        _route(parts.path)
        path = parts.path
    except HTTPError:
        path = "/"
    pairs = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k != "token"]
    return path + ("?" + urllib.parse.urlencode(pairs) if pairs else "")


def start(home: Home, host: str = DEFAULT_HOST, port: int = 0, *, socket_path: str | None = None, **kw) -> JimServer:
    """A :class:`JimServer` serving in a daemon thread (``server.url``, ``server.token``; ``server.stop()``).

    With ``socket_path``, a :class:`UnixJimServer` on that Unix socket instead.
    """
    server: JimServer = (
        UnixJimServer(home, socket_path, **kw) if socket_path is not None else JimServer(home, (host, port), **kw)
    )
    return _in_thread(server)


def start_site(secret: str, host: str = DEFAULT_HOST, port: int = 0, **kw) -> SiteJimServer:
    """A :class:`SiteJimServer` serving in a daemon thread (its children answer the requests)."""
    return _in_thread(SiteJimServer((host, port), secret, **kw))


_S = TypeVar("_S", bound=_Base)


def _in_thread(server: _S) -> _S:
    server.thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="jim-web", daemon=True
    )
    server.thread.start()
    return server


def read_secret(path: str) -> str:
    """The shared secret of a site instance: a regular file of ours that no other account can read."""
    try:
        fd, st = open_regular(path, follow=False)
    except NotRegular:
        raise JimError(f"the proxy secret file {path} is not a regular file") from None
    except OSError as e:
        raise JimError(f"cannot read the proxy secret file {path}: {e.strerror} (a symbolic link is refused)") from None
    try:
        if st.st_uid != os.geteuid():
            raise JimError(f"the proxy secret file {path} does not belong to the account jim serve runs as")
        if st.st_mode & 0o077:
            raise JimError(f"the proxy secret file {path} is open to other accounts: chmod 600 it")
        data = os.read(fd, MAX_CREDENTIAL + 2)
    finally:
        os.close(fd)
    secret = data.decode("utf-8", "replace").strip()
    if len(secret) < 16 or len(secret) > MAX_CREDENTIAL or any(c.isspace() or not c.isprintable() for c in secret):
        raise JimError(
            f"the proxy secret in {path} must be one line of 16 to {MAX_CREDENTIAL} printable characters "
            f"(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return secret


def _write_url_file(home: Home, url: str) -> Path:
    """``$JIM_HOME/serve.url``: the URL with the token, 0600, replaced atomically (never through a link)."""
    home.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    final = home.root / URL_FILE
    tmp = home.root / f".{URL_FILE}.{os.getpid()}.tmp"
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (url + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, final)
    return final


def _remove_url_file(path: Path, url: str) -> None:
    try:
        text = read_regular(path, 4096)
        if (
            text is not None and text.decode(errors="replace").strip() == url
        ):  # another jim serve of this home may have written its own since
            path.unlink()
    except OSError:
        pass


def serve(
    config,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    socket_path: str | None = None,
    site: bool = False,
    secret_file: str | None = None,
    homes: str = DEFAULT_HOMES,
    user_header: str = USER_HEADER,
) -> int:
    """``jim serve``: serve until SIGINT or SIGTERM; 0 on a clean stop, 1 if it cannot start."""
    home = Home(config.home)
    where = (socket_path or str(home.root / "serve.sock")) if socket_path is not None else f"{host}:{port}"
    server: _Base
    try:
        if socket_path is not None and site:
            raise JimError("jim serve --site listens on TCP for the site's web server: not with --socket")
        if secret_file and not site:
            raise JimError("--proxy-secret-file is for jim serve --site")
        if site:
            if os.geteuid() != 0:
                raise JimError("jim serve --site runs as root: it answers each user as that user")
            if not secret_file:
                raise JimError("jim serve --site needs --proxy-secret-file (the secret the site web server sends)")
            if "{user}" not in homes and "{home}" not in homes or not home_pattern(homes, "u", "/h").startswith("/"):
                raise JimError(f"--homes {homes!r} must be an absolute path with {{user}} or {{home}} in it")
            if not _ACCOUNT.fullmatch(user_header.replace("-", "_")):
                raise JimError(f"--user-header {user_header!r} is not a header name")
            server = SiteJimServer(
                (host, port),
                read_secret(secret_file),
                homes=homes,
                user_header=user_header,
                lock_timeout=config.deadlines.lock,
            )
        elif socket_path is not None:
            path = socket_path or str(home.root / "serve.sock")
            home.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            server = UnixJimServer(home, path, lock_timeout=config.deadlines.lock)
        else:
            server = JimServer(home, (host, port), lock_timeout=config.deadlines.lock)
    except JimError as e:
        print(f"jim: error: {e.message}", file=sys.stderr)
        log.error("jim serve: %s", e.message)
        return 1
    except OSError as e:
        print(f"jim: error: cannot listen on {where}: {e.strerror or e}", file=sys.stderr)
        log.error("jim serve: cannot listen on %s: %s", where, e)
        return 1

    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    # jim's human commands die quietly on SIGPIPE (for `| head`); a server must not: a browser
    # that drops a connection mid-answer is an EPIPE for that request only
    previous[signal.SIGPIPE] = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    url_file = None
    if isinstance(server, SiteJimServer):
        what = f"each user's own grid jobs ({homes}), behind the site's web server"
        if not server.loopback:
            msg = f"jim serve --site listens on {host}: only the site's web server should be able to reach it"
            log.warning(msg)
            print(f"jim: warning: {msg}", file=sys.stderr)
    else:
        what = f"read-only view of {home.db}"
        if not isinstance(server, UnixJimServer):
            url_file = _write_url_file(home, server.login_url)
            if not server.loopback:
                msg = (
                    f"jim serve listens on {host}, not on a loopback address: its token travels unencrypted "
                    f"(prefer the default, or --socket, and ssh -L)"
                )
                log.warning(msg)
                print(f"jim: warning: {msg}", file=sys.stderr)
    log.info("jim serve: %s (%s)", server.url, what)
    print(f"jim serve: {server.login_url}  ({what}; Ctrl-C stops)", flush=True)
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


class Handler(BaseHTTPRequestHandler):
    server: _Base
    server_version = f"jim/{__version__}"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = 30  # s a connection may sit idle or half-sent before its thread gives up
    view: View

    def handle(self) -> None:
        try:
            if self.server.one_request_per_connection:
                self.close_connection = True
                self.handle_one_request()
            else:
                super().handle()
        except (BrokenPipeError, ConnectionResetError, TimeoutError) as e:
            log.debug("%s went away: %s", self.address_string(), e)

    def address_string(self) -> str:
        return self.client_address[0] if isinstance(self.client_address, tuple) else "unix-socket"

    # -- methods -------------------------------------------------------------
    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def __getattr__(self, name: str):
        # every other method (POST, PUT, DELETE, PATCH, OPTIONS, TRACE, anything): 405
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        # a small request body is read and dropped (so the answer is not lost to a reset);
        # otherwise the connection is closed: a body is never read as the next request
        length = self.headers.get("Content-Length", "")
        if length.isdigit() and int(length) <= 65536 and "Transfer-Encoding" not in self.headers:
            self.rfile.read(int(length))
        elif length or "Transfer-Encoding" in self.headers:
            self.close_connection = True
        try:
            self._authorize(urllib.parse.urlsplit(self.path))
        except (HTTPError, Redirect):
            self._send_error(HTTPStatus.FORBIDDEN, "not allowed", head=False)
            return
        self._send_error(
            HTTPStatus.METHOD_NOT_ALLOWED,
            "jim serve is read-only: only GET and HEAD",
            head=False,
            extra={"Allow": "GET, HEAD"},
        )

    # -- logging: to jim's logger, never stdout/stderr ------------------------
    def log_message(self, format: str, *args) -> None:
        log.info("%s %s", self.address_string(), format % args)

    def log_error(self, format: str, *args) -> None:
        # an idle keep-alive connection closed by its timeout is routine, not a warning
        level = logging.DEBUG if format.startswith("Request timed out") else logging.WARNING
        log.log(level, "%s %s", self.address_string(), format % args)

    # -- dispatch ---------------------------------------------------------------
    def _respond(self, head: bool) -> None:
        try:
            parts = urllib.parse.urlsplit(self.path)
            self._authorize(parts)
            route, m = _route(parts.path)
            job_id = m.groupdict().get("job_id")
            if job_id is not None and not valid_job_id(job_id):  # belt and braces: the route already did
                raise HTTPError(HTTPStatus.NOT_FOUND, "not a jim job id")
            query = self._query(parts.query)
            status, headers, body = getattr(self, "route_" + route)(query, **m.groupdict())
        except HTTPError as e:
            self._send_error(e.status, e.message, head=head)
            return
        except Redirect as r:
            body = b"See <a href='" + html.escape(r.location, quote=True).encode() + b"'>this page</a>.\n"
            headers = {"Location": r.location, "Content-Type": "text/html; charset=utf-8", **r.headers}
            self._send(HTTPStatus.SEE_OTHER, {"Content-Security-Policy": CSP_OTHER, **headers}, body, head=head)
            return
        except JobNotFound:
            self._send_error(HTTPStatus.NOT_FOUND, "no such grid job", head=head)
            return
        except PermissionError:  # (--site: a link to what the account itself may not read)
            self._send_error(HTTPStatus.FORBIDDEN, "not readable by you", head=head)
            return
        except JimError as e:
            log.error("%s: %s", self.path, e.message)
            self._send_error(HTTPStatus.INTERNAL_SERVER_ERROR, e.message, head=head)
            return
        except Exception:
            log.exception("error while answering %s", self.path)
            self._send_error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error (see jim's log)", head=head)
            return
        self._send(status, headers, body, head=head)

    def _viewer(self) -> str | None:
        """The account a site instance answers this request for (shown in the page header)."""
        view = getattr(self, "view", None)
        return view.user if view is not None else None

    def _authorize(self, parts: urllib.parse.SplitResult) -> None:
        """Sets ``self.view`` (the home this request may read); HTTPError 400/403 or Redirect otherwise."""
        if (
            self.server.check_host
            and self.server.loopback
            and not _host_is_loopback_name(self.headers.get("Host", "localhost"))
        ):
            raise HTTPError(HTTPStatus.BAD_REQUEST, "unexpected Host header for a server on a loopback address")
        vars(self).pop("view", None)  # (a kept-alive connection: nothing from its previous request)
        try:
            self.view = self.server.view_for(self, parts)
        except ValueError:  # a query with too many fields
            raise HTTPError(HTTPStatus.FORBIDDEN, "not allowed") from None

    @staticmethod
    def _query(qs: str) -> dict[str, str]:
        try:
            pairs = urllib.parse.parse_qsl(qs, keep_blank_values=True, strict_parsing=False, max_num_fields=20)
        except ValueError:
            raise HTTPError(HTTPStatus.BAD_REQUEST, "too many query parameters") from None
        return dict(pairs)

    def _send(self, status: HTTPStatus, headers: dict[str, str], body: bytes, *, head: bool) -> None:
        self.send_response(status)
        if self.server.one_request_per_connection:
            headers = {**headers, "Connection": "close"}
        for k, v in {**COMMON_HEADERS, **headers}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _send_error(self, status: HTTPStatus, message: str, *, head: bool, extra: dict[str, str] | None = None) -> None:
        try:
            body = (
                self.server.env.get_template("error.html")
                .render(status=int(status), phrase=status.phrase, message=message, refresh=None, viewer=self._viewer())
                .encode()
            )
        except Exception:  # never fail to report a failure
            log.exception("cannot render the error page")
            body = f"{int(status)} {status.phrase}\n".encode()
        headers = {"Content-Type": "text/html; charset=utf-8", "Content-Security-Policy": CSP_HTML, **(extra or {})}
        self._send(status, headers, body, head=head)

    # -- pages -----------------------------------------------------------------
    def _html(self, template: str, **context) -> tuple[HTTPStatus, dict[str, str], bytes]:
        body = self.server.env.get_template(template).render(viewer=self._viewer(), **context).encode()
        return HTTPStatus.OK, {"Content-Type": "text/html; charset=utf-8", "Content-Security-Policy": CSP_HTML}, body

    @staticmethod
    def _json(obj, query: dict[str, str]) -> tuple[HTTPStatus, dict[str, str], bytes]:
        # compact unless ?pretty: indenting costs 7x the time for a grid job of 10,000 local jobs
        text = json.dumps(obj, indent=2) if "pretty" in query else json.dumps(obj, separators=(",", ":"))
        return (
            HTTPStatus.OK,
            {"Content-Type": "application/json; charset=utf-8", "Content-Security-Policy": CSP_OTHER},
            (text + "\n").encode(),
        )

    @staticmethod
    def _int(query: dict[str, str], name: str, default: int, lo: int, hi: int) -> int:
        raw = query.get(name, "")
        if raw == "":
            return default
        if not raw.isdigit() or len(raw) > 10 or not lo <= int(raw) <= hi:
            raise HTTPError(HTTPStatus.BAD_REQUEST, f"{name} must be a whole number from {lo} to {hi}")
        return int(raw)

    def _grid_jobs(self, query: dict[str, str]) -> tuple[list[dict], dict[str, int], str]:
        state = query.get("state", "").upper()
        if state and state not in GRID_STATES:
            raise HTTPError(HTTPStatus.BAD_REQUEST, "state must be one of " + ", ".join(GRID_STATES))
        jobs, counts = self.view.index_cache.get()
        if state:
            jobs = [j for j in jobs if j.get("state") == state]
        return jobs, counts, state

    def route_index(self, query: dict[str, str]):
        jobs, counts, state = self._grid_jobs(query)
        per_page = self._int(query, "per_page", PER_PAGE, 1, MAX_PER_PAGE)
        pages = max(1, math.ceil(len(jobs) / per_page))
        page = self._int(query, "page", 1, 1, 10**9)
        if page > pages:
            raise HTTPError(
                HTTPStatus.NOT_FOUND, f"no page {page}: there {'is 1 page' if pages == 1 else f'are {pages} pages'}"
            )
        rows = jobs[(page - 1) * per_page : page * per_page]
        params = {"state": state, "per_page": per_page if per_page != PER_PAGE else None}
        active = any(j.get("state") not in TERMINAL_GRID for j in rows)
        filters = [
            {"state": "", "label": "all", "count": sum(counts.values()), "url": _url("/", per_page=params["per_page"])}
        ]
        filters += [
            {"state": s, "label": s, "count": counts.get(s, 0), "url": _url("/", state=s, per_page=params["per_page"])}
            for s in GRID_STATES
            if counts.get(s)
        ]
        return self._html(
            "index.html",
            jobs=rows,
            total=len(jobs),
            all_total=sum(counts.values()),
            state=state,
            page=page,
            pages=pages,
            per_page=per_page,
            first_row=(page - 1) * per_page + 1 if rows else 0,
            links=_page_links("/", params, page, pages),
            filters=filters,
            refresh=REFRESH_INDEX_S if active else None,
            home=str(self.view.home.root),
        )

    def route_job(self, query: dict[str, str], job_id: str):
        job = self.view.db.read(job_id)
        now = time.time()
        lstate = query.get("state", "").upper()
        if lstate and lstate not in LOCAL_STATES:
            raise HTTPError(HTTPStatus.BAD_REQUEST, "state must be one of " + ", ".join(LOCAL_STATES))
        order = query.get("order", "index")
        if order not in ("index", "attention"):
            raise HTTPError(HTTPStatus.BAD_REQUEST, "order must be index or attention")
        retried = query.get("retried", "")
        if retried not in ("", "1"):
            raise HTTPError(HTTPStatus.BAD_REQUEST, "retried must be 1 (only the local jobs tried more than once)")
        per_page = self._int(query, "per_page", LOCAL_PER_PAGE, 1, MAX_LOCAL_PER_PAGE)
        page = self._int(query, "page", 1, 1, 10**9)

        data, phases = job_summary(job)
        elements = list(child(job.root, "localjobs"))
        shown = [el for el in elements if not lstate or el.get("state") == lstate]
        if retried:
            shown = [el for el in shown if el.find("attempts") is not None]
        if order == "attention":
            keyed = [(sort_key(_local_brief(el), now), el) for el in shown]
            keyed.sort(key=lambda kv: kv[0])
            shown = [el for _, el in keyed]
        pages = max(1, math.ceil(len(shown) / per_page))
        if page > pages:
            raise HTTPError(
                HTTPStatus.NOT_FOUND,
                f"no page {page} of local jobs: there {'is 1 page' if pages == 1 else f'are {pages} pages'}",
            )
        rows = [_row(el, now) for el in shown[(page - 1) * per_page : page * per_page]]

        params = {
            "state": lstate,
            "retried": retried,
            "order": order if order != "index" else None,
            "per_page": per_page if per_page != LOCAL_PER_PAGE else None,
        }
        base = f"/jobs/{job_id}"
        counts = data["counts"]
        n = len(elements)
        filters = [{"state": "", "label": "all", "count": n, "url": _url(base, order=params["order"], retried=retried)}]
        filters += [
            {
                "state": s,
                "label": s,
                "count": counts[s],
                "url": _url(base, state=s, order=params["order"], retried=retried),
            }
            for s in LOCAL_STATES
            if counts.get(s)
        ]
        orders = [
            {"order": "index", "label": "by index", "url": _url(base, state=lstate, retried=retried)},
            {
                "order": "attention",
                "label": "failed and slowest first",
                "url": _url(base, state=lstate, order="attention", retried=retried),
            },
        ]
        retries = _retries(job.root, data.get("retries") or 0, now)
        if retries is not None:  # the filter that shows only them, or all again
            retries["url"] = _url(base, state=lstate, order=params["order"], retried="" if retried else "1")
        ended = sum(counts.get(s, 0) for s in ("DONE", "FAILED", "CANCELLED", "LOST"))
        history = [{"state": g.get("state"), "at": g.get("at")} for g in job.root.findall("history/grid")]
        active = data["state"] not in TERMINAL_GRID
        return self._html(
            "job.html",
            job=data,
            rows=rows,
            shown=len(shown),
            lstate=lstate,
            order=order,
            orders=orders,
            page=page,
            pages=pages,
            links=_page_links(base, params, page, pages),
            filters=filters,
            phases=phases,
            ended=ended,
            n=n,
            description=job.description(),
            source=job.root.findtext("description/source") or "",
            source_format=job.source_format,
            history=history,
            updated_ago=_ago(data.get("updated"), now),
            refresh=REFRESH_JOB_S if active else None,
            retries=retries,
            retried=retried,
            every_url=_url(base, state=lstate, order=params["order"]),
            waiting=frozenset(r["index"] for r in rows if _cooling(r, now)),
        )

    def route_local_job(self, query: dict[str, str], job_id: str, index: str):
        job = self.view.db.read(job_id)
        now = time.time()
        elements = child(job.root, "localjobs")
        k = int(index)
        if k >= len(elements):
            n = len(elements)
            which = f"{n} (0 to {n - 1})" if n else "none"
            raise HTTPError(HTTPStatus.NOT_FOUND, f"no local job {k}: grid job {job_id} has {which}")
        el = elements[k]
        row = _row(el, now)
        history = [
            {"state": h.get("name"), "at": h.get("at"), "evidence": h.get("evidence"), "reason": h.get("reason")}
            for h in el.iterfind("history/state")
        ]
        state = job.state.name
        return self._html(
            "local.html",
            job={"id": job.id, "name": job.get("name"), "state": state},
            lj=row,
            history=history,
            waits=_cooling(row, now),
            refresh=REFRESH_JOB_S if state not in TERMINAL_GRID else None,
        )

    def route_api_list(self, query: dict[str, str]):
        jobs, _, _ = self._grid_jobs(query)
        total = len(jobs)
        if "page" in query or "per_page" in query:
            per_page = self._int(query, "per_page", PER_PAGE, 1, MAX_PER_PAGE)
            page = self._int(query, "page", 1, 1, 10**9)
            jobs = jobs[(page - 1) * per_page : page * per_page]
        status, headers, body = self._json(jobs, query)
        headers["X-Total-Count"] = str(total)
        return status, headers, body

    def route_api_job(self, query: dict[str, str], job_id: str):
        return self._json(status_json(self.view.db.read(job_id)), query)

    def route_db_record(self, query: dict[str, str], job_id: str):
        try:
            data = self.view.home.record(job_id).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise JobNotFound(job_id) from None
        return (
            HTTPStatus.OK,
            {"Content-Type": "application/xml; charset=utf-8", "Content-Security-Policy": CSP_XML},
            data,
        )

    def route_db_record_html(self, query: dict[str, str], job_id: str):
        try:
            data = self.view.home.record(job_id).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise JobNotFound(job_id) from None
        return self._rendered(data)

    def route_db_index_html(self, query: dict[str, str]):
        status, headers, data = self.route_db_index(query)
        return self._rendered(data)

    def _rendered(self, xml: bytes) -> tuple[HTTPStatus, dict[str, str], bytes]:
        try:
            body, csp = self.server.renderer.render(xml)
        except etree.XMLSyntaxError:
            raise JimError("the record is not well-formed XML") from None
        return HTTPStatus.OK, {"Content-Type": "text/html; charset=utf-8", "Content-Security-Policy": csp}, body

    def route_db_stylesheet(self, query: dict[str, str]):
        return (
            HTTPStatus.OK,
            {"Content-Type": "text/xsl; charset=utf-8", "Content-Security-Policy": CSP_OTHER},
            self.server.stylesheet,
        )

    def route_db_index(self, query: dict[str, str]):
        try:
            data = self.view.home.index.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            data = b"<?xml version='1.0' encoding='UTF-8'?>\n<index schemaVersion=\"1\"/>\n"
        return (
            HTTPStatus.OK,
            {"Content-Type": "application/xml; charset=utf-8", "Content-Security-Policy": CSP_XML},
            _with_stylesheet(data),
        )

    def route_static_css(self, query: dict[str, str]):
        return (
            HTTPStatus.OK,
            {
                "Content-Type": "text/css; charset=utf-8",
                "Content-Security-Policy": CSP_OTHER,
                "Cache-Control": "max-age=300",
            },
            self.server.css,
        )
