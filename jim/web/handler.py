"""The HTTP side of ``jim serve``: one request in, one answer out, in this order.

1. **Who may look** first, whatever the path or method: on a server bound to
   a loopback address a Host header naming another host is 400 (DNS
   rebinding, :func:`jim.web.auth.host_is_loopback_name`); then the server
   names the home this request may read (``view_for``) or refuses it: 403
   with no job data, or the token's redirect (303).
2. **GET and HEAD only**: any other method is 405 (``Allow: GET, HEAD``) for
   a request let in, 403 for one that is not.  HEAD is GET without the body.
3. **The page** (:func:`jim.web.pages.find`: 404 when the path is none),
   with the query (at most 20 fields, else 400).

Failures become error pages (:mod:`jim.web.answers`): a bad query 400, no
such page or grid job 404, a file the account itself may not read 403, a
:class:`~jim.errors.JimError` 500 with its one-line message, anything else
500 (logged).  Every answer carries the common headers; a site instance's
answers ``Connection: close`` (one request per connection: a proxy's
kept-alive connection may carry different people's requests).  Requests are
logged to jim's logger (``jim.web``), never to stdout or stderr; a client
that goes away costs its own answer only.
"""

from __future__ import annotations

import html
import logging
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from jim import __version__
from jim.errors import JimError, JobNotFound
from jim.web import pages
from jim.web.answers import COMMON_HEADERS, CSP_HTML, CSP_OTHER, HTML, Answer, HTTPError, Redirect
from jim.web.auth import MAX_QUERY_FIELDS, host_is_loopback_name
from jim.web.view import Request, View

if TYPE_CHECKING:
    from jim.web.server import WebServer

log = logging.getLogger("jim.web")

MAX_DROPPED_BODY = 65536  # a refused method's body up to this size is read and dropped


class RequestHandler(BaseHTTPRequestHandler):
    """Answers the requests of one connection (one only, for a site instance)."""

    server: WebServer
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

    def __getattr__(self, name: str) -> Callable[[], None]:
        # every other method (POST, PUT, DELETE, PATCH, OPTIONS, TRACE, anything): 405
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        # a small request body is read and dropped (so the answer is not lost to a reset);
        # otherwise the connection is closed: a body is never read as the next request
        length = self.headers.get("Content-Length", "")
        if length.isdigit() and int(length) <= MAX_DROPPED_BODY and "Transfer-Encoding" not in self.headers:
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
    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)

    def log_error(self, format: str, *args: Any) -> None:
        # an idle keep-alive connection closed by its timeout is routine, not a warning
        level = logging.DEBUG if format.startswith("Request timed out") else logging.WARNING
        log.log(level, "%s %s", self.address_string(), format % args)

    # -- dispatch ---------------------------------------------------------------
    def _respond(self, head: bool) -> None:
        try:
            answer = self._answer()
        except HTTPError as e:
            self._send_error(e.status, e.message, head=head)
        except Redirect as r:
            body = b"See <a href='" + html.escape(r.location, quote=True).encode() + b"'>this page</a>.\n"
            headers = {"Location": r.location, "Content-Type": HTML, **r.headers}
            self._send(HTTPStatus.SEE_OTHER, {"Content-Security-Policy": CSP_OTHER, **headers}, body, head=head)
        except JobNotFound:
            self._send_error(HTTPStatus.NOT_FOUND, "no such grid job", head=head)
        except PermissionError:  # (--site: a link to what the account itself may not read)
            self._send_error(HTTPStatus.FORBIDDEN, "not readable by you", head=head)
        except JimError as e:
            log.error("%s: %s", self.path, e.message)
            self._send_error(HTTPStatus.INTERNAL_SERVER_ERROR, e.message, head=head)
        except Exception:
            log.exception("error while answering %s", self.path)
            self._send_error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error (see jim's log)", head=head)
        else:
            self._send(*answer, head=head)

    def _answer(self) -> Answer:
        """The answer of the page this request names, once it is let in."""
        parts = urllib.parse.urlsplit(self.path)
        self._authorize(parts)
        page, path_parts = pages.find(parts.path)
        query = self._query(parts.query)
        return page(Request(self.view, self.server.assets, query), **path_parts)

    def _viewer(self) -> str | None:
        """The account a site instance answers this request for (shown in the page header)."""
        view = getattr(self, "view", None)
        return view.user if view is not None else None

    def _authorize(self, parts: urllib.parse.SplitResult) -> None:
        """Sets ``self.view`` (the home this request may read); HTTPError 400/403 or Redirect otherwise."""
        if (
            self.server.check_host
            and self.server.loopback
            and not host_is_loopback_name(self.headers.get("Host", "localhost"))
        ):
            raise HTTPError(HTTPStatus.BAD_REQUEST, "unexpected Host header for a server on a loopback address")
        vars(self).pop("view", None)  # (a kept-alive connection: nothing from its previous request)
        try:
            self.view = self.server.view_for(self.headers, parts)
        except ValueError:  # a query with too many fields
            raise HTTPError(HTTPStatus.FORBIDDEN, "not allowed") from None

    @staticmethod
    def _query(qs: str) -> dict[str, str]:
        try:
            pairs = urllib.parse.parse_qsl(
                qs, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_QUERY_FIELDS
            )
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
                self.server.assets.env.get_template("error.html")
                .render(status=int(status), phrase=status.phrase, message=message, refresh=None, viewer=self._viewer())
                .encode()
            )
        except Exception:  # never fail to report a failure
            log.exception("cannot render the error page")
            body = f"{int(status)} {status.phrase}\n".encode()
        headers = {"Content-Type": HTML, "Content-Security-Policy": CSP_HTML, **(extra or {})}
        self._send(status, headers, body, head=head)
