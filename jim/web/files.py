"""The files ``jim serve`` shows as they are, and the records rendered on the server.

::

    /db/<id>.xml            the raw record, byte for byte, with its stylesheet instruction
    /db/<id>.html           the record through jim.xsl, rendered here (:mod:`jim.web.render`)
    /db/index.xml           the index, with the stylesheet instruction added
    /db/index.html          the index through jim.xsl, rendered here (links to <id>.html)
    /db/jim.xsl             the stylesheet (the package's ``jim/data/jim.xsl``)
    /static/jim.css         the pages' style sheet

Separate paths, not content negotiation: a tool gets the same bytes whatever
it sends, and people can still look at the raw XML.  A record that is not
well-formed XML is a :class:`~jim.errors.JimError` (500, with a one-line
reason); a missing record is :class:`~jim.errors.JobNotFound`.  Each answer
carries the Content-Security-Policy of its kind (:mod:`jim.web.answers`).
"""

from __future__ import annotations

from http import HTTPStatus

from lxml import etree

from jim.errors import JimError, JobNotFound
from jim.record import SCHEMA_VERSION
from jim.web.answers import CSP_OTHER, CSP_XML, HTML, XML, Answer
from jim.web.render import with_stylesheet
from jim.web.view import Request

EMPTY_INDEX = f"<?xml version='1.0' encoding='UTF-8'?>\n<index schemaVersion=\"{SCHEMA_VERSION}\"/>\n".encode()


def _record_bytes(req: Request, job_id: str) -> bytes:
    try:
        return req.view.home.record(job_id).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise JobNotFound(job_id) from None


def _rendered(req: Request, xml: bytes) -> Answer:
    try:
        body, csp = req.assets.renderer.render(xml)
    except etree.XMLSyntaxError:
        raise JimError("the record is not well-formed XML") from None
    return Answer(HTTPStatus.OK, {"Content-Type": HTML, "Content-Security-Policy": csp}, body)


def db_record(req: Request, job_id: str) -> Answer:
    """``/db/<id>.xml``: the record, byte for byte."""
    return Answer(HTTPStatus.OK, {"Content-Type": XML, "Content-Security-Policy": CSP_XML}, _record_bytes(req, job_id))


def db_record_html(req: Request, job_id: str) -> Answer:
    """``/db/<id>.html``: the record through jim.xsl, rendered here."""
    return _rendered(req, _record_bytes(req, job_id))


def _index_xml(req: Request) -> bytes:
    try:
        data = req.view.home.index.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        data = EMPTY_INDEX
    return with_stylesheet(data)


def db_index(req: Request) -> Answer:
    """``/db/index.xml``: the index, with the stylesheet instruction."""
    return Answer(HTTPStatus.OK, {"Content-Type": XML, "Content-Security-Policy": CSP_XML}, _index_xml(req))


def db_index_html(req: Request) -> Answer:
    """``/db/index.html``: the index through jim.xsl, rendered here."""
    return _rendered(req, _index_xml(req))


def db_stylesheet(req: Request) -> Answer:
    """``/db/jim.xsl``: the stylesheet."""
    headers = {"Content-Type": "text/xsl; charset=utf-8", "Content-Security-Policy": CSP_OTHER}
    return Answer(HTTPStatus.OK, headers, req.assets.stylesheet)


def static_css(req: Request) -> Answer:
    """``/static/jim.css``: the pages' style sheet."""
    headers = {"Content-Type": "text/css; charset=utf-8", "Content-Security-Policy": CSP_OTHER}
    return Answer(HTTPStatus.OK, {**headers, "Cache-Control": "max-age=300"}, req.assets.css)
