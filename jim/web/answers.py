"""What ``jim serve`` answers a request with.

An :class:`Answer` (status, headers, body) is what a page gives; two
exceptions stand for an answer wherever they are raised: :class:`HTTPError`
(an error page with that status and message) and :class:`Redirect` (303 to
another page, with headers such as the token's cookie).

Every answer carries :data:`COMMON_HEADERS`, and a Content-Security-Policy by
the kind of its body:

* :data:`CSP_HTML`: pages from the templates: no script at all, style only
  from ``/static/jim.css``;
* :data:`CSP_XML`: a record or the index for the browser to render through
  jim.xsl (CSP governs XSLT through ``script-src``; its output has an inline
  ``<style>``);
* :data:`CSP_OTHER`: everything else (JSON, the stylesheet, the style sheet,
  a redirect);
* a record or the index rendered on the server: :data:`jim.web.render.CSP_RENDERED`
  with its style's hash.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import NamedTuple

COMMON_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
CSP_HTML = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
CSP_XML = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
CSP_OTHER = "default-src 'none'; frame-ancestors 'none'"

HTML = "text/html; charset=utf-8"
XML = "application/xml; charset=utf-8"


class Answer(NamedTuple):
    """One response: its status, its own headers (the common ones are added when it is sent), its body."""

    status: HTTPStatus
    headers: dict[str, str]
    body: bytes


class HTTPError(Exception):
    """Answer with the error page: ``status`` and a one-line ``message`` (never job data)."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class Redirect(Exception):
    """Answer 303 See Other to ``location`` (a path of this server), with ``headers`` (e.g. Set-Cookie)."""

    def __init__(self, location: str, headers: dict[str, str]):
        super().__init__(location)
        self.location = location
        self.headers = headers
