"""jim.xsl run on the server: a record or the index as an HTML page, with the policy it needs.

A grid job's XML record names ``jim.xsl``, an XSLT 1.0 stylesheet, and
browsers used to render it; Chromium is removing XSLT, so ``jim serve``
renders it itself (``/db/<id>.html``, ``/db/index.html``: see docs/web.md).

* :class:`Renderer` compiles the stylesheet once (per process: in ``--site``
  mode before the children fork) and runs it with
  ``XSLTAccessControl.DENY_ALL``: it can read, write or fetch nothing (no
  ``document()``, no ``xsl:include`` at run time, no output files).  The
  stylesheet and the documents are parsed without resolving entities,
  without DTDs and without network access.
* The page has no script: its Content-Security-Policy is
  :data:`CSP_RENDERED`, and the stylesheet's one inline ``<style>`` is
  allowed by its SHA-256 hash, computed from the page as sent.
* In the rendered index each grid job links to its rendered page
  (``<id>.html``), not to the raw XML.

:func:`with_stylesheet` gives the index (which has none) jim's
``xml-stylesheet`` instruction, for browsers that still run XSLT.
"""

from __future__ import annotations

import base64
import hashlib
import re
import threading

from lxml import etree

from jim.errors import JimError
from jim.jobid import JOB_ID_PATTERN
from jim.record import STYLESHEET_PI

CSP_RENDERED = "default-src 'none'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
_STYLE_BLOCK = re.compile(rb"<style[^>]*>(.*?)</style>", re.S)
_RECORD_LINK = re.compile(rf"({JOB_ID_PATTERN})\.xml")
# jim.xsl and the documents it transforms: no entities resolved, nothing fetched
_XSLT_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True, load_dtd=False)


class Renderer:
    """jim.xsl compiled once, run by lxml on the server: a record or the index to HTML."""

    def __init__(self, stylesheet: bytes):
        doc = etree.fromstring(stylesheet, _XSLT_PARSER).getroottree()
        deny_all = etree.XSLTAccessControl.DENY_ALL  # type: ignore[attr-defined]  # (missing from lxml-stubs)
        self._xslt = etree.XSLT(doc, access_control=deny_all)
        self._lock = threading.Lock()  # one transformation at a time with the shared compiled stylesheet

    def render(self, xml: bytes) -> tuple[bytes, str]:
        """The HTML page of an XML record or index, and the Content-Security-Policy it needs
        (:class:`lxml.etree.XMLSyntaxError` when ``xml`` is not well-formed)."""
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
        return body, policy_for(body)


def policy_for(page: bytes) -> str:
    """:data:`CSP_RENDERED`, with the hash of each inline ``<style>`` of ``page`` allowed."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(m.group(1)).digest()).decode() + "'"
        for m in _STYLE_BLOCK.finditer(page)
    )
    return CSP_RENDERED + (f"; style-src {hashes}" if hashes else "")


def with_stylesheet(xml: bytes) -> bytes:
    """An XML document with jim's ``xml-stylesheet`` instruction (for the index, which has none)."""
    if b"<?xml-stylesheet" in xml[:500]:
        return xml
    pi = b"<?xml-stylesheet " + STYLESHEET_PI.encode() + b"?>\n"
    if xml.startswith(b"<?xml "):
        end = xml.index(b"?>") + 2
        return xml[:end] + b"\n" + pi + xml[end:].lstrip(b"\r\n")
    return pi + xml
