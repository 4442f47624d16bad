"""``jim serve`` renders a grid job's XML record (and the index) to HTML on the server.

The same stylesheet as the browsers use (``jim/data/jim.xsl``), run by lxml in
the server: ``/db/<id>.html`` and ``/db/index.html`` need no XSLT in the
browser; ``/db/<id>.xml`` stays the raw record with its stylesheet instruction.
The Chromium check loads the rendered page without the flag that keeps XSLT on.
"""

# ruff: noqa: F811 (the fixtures of test_web and test_web_browser, imported, are parameters here)

from __future__ import annotations

import base64
import hashlib
import re
import time

import pytest
import test_web_browser
from lxml import etree
from test_web import EVIL_ARGS, EVIL_NAME, Client, Elements, client, db, home, record, server, text_of  # noqa: F401 (fixtures)
from test_web_browser import Page, chromium, mc_rsl, served  # noqa: F401 (fixtures)

from jim import web
from jim.web.render import Renderer


def test_record_page_rendered_on_the_server(db, client, home):
    job_id = record(
        db,
        name=EVIL_NAME,
        n=2,
        args=EVIL_ARGS,
        states=["RUNNING", "DONE"],
        progress={0: {"generation": (250, 250), "d0gstar": (117, 250)}},
    )
    status, headers, body = client.get(f"/db/{job_id}.html")
    assert status == 200, body[:500]
    assert headers["content-type"] == "text/html; charset=utf-8"
    page = body.decode()
    assert not page.startswith("<?xml") and "xml-stylesheet" not in page
    assert page.lower().startswith("<!doctype html")
    parsed = Elements(page)
    tags = [t for t, _ in parsed.tags]
    assert "script" not in tags and "img" not in tags
    assert not any(k.startswith("on") for _, a in parsed.tags for k in a)
    assert " ".join(EVIL_NAME.split()) in parsed.all_text
    for arg in EVIL_ARGS:
        assert arg in parsed.all_text, arg
    assert text_of(page, "local-count") == "2"
    assert "d0gstar: 117 of 250" in text_of(page, "lj-0")
    assert "DONE" in text_of(page, "lj-1")
    assert text_of(page, "overall-count") == "367 of 500"
    assert '<meta http-equiv="refresh" content="5">' in page  # the grid job is active: it reloads itself

    # no script may run; the one inline <style> is allowed by its hash, nothing else inline
    csp = headers["content-security-policy"]
    assert "script-src" not in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
    style = re.search(r"<style>(.*?)</style>", page, re.S)
    assert style, "the stylesheet's <style> is in the page"
    digest = base64.b64encode(hashlib.sha256(style.group(1).encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in csp

    # the raw record stays as it is, for tools
    status, headers, body = client.get(f"/db/{job_id}.xml")
    assert status == 200 and body == home.record(job_id).read_bytes()
    assert b"<?xml-stylesheet" in body[:300] and headers["content-type"] == "application/xml; charset=utf-8"


def test_index_page_rendered_on_the_server_links_to_rendered_records(db, client):
    a = record(db, name="first", n=1, states=["DONE"])
    b = record(db, name="second <b>x</b>", n=2, created=time.time())
    status, headers, body = client.get("/db/index.html")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    page = body.decode()
    assert text_of(page, "total") == "2"
    assert sorted(re.findall(r'href="([0-9a-f-]+)\.html"', page)) == sorted([a, b])
    assert ".xml" not in page
    assert "second &lt;b&gt;x&lt;/b&gt;" in page
    assert "script-src" not in headers["content-security-policy"]
    # an empty home has an index page too
    for job_id in (a, b):
        assert client.get(f"/db/{job_id}.html")[0] == 200


def test_empty_index_page(server, client):
    status, _, body = client.get("/db/index.html")
    assert status == 200 and text_of(body.decode(), "total") == "0"


def test_the_html_views_link_to_the_rendered_record(db, client):
    job_id = record(db)
    assert f'href="/db/{job_id}.html"' in client.ok(f"/jobs/{job_id}")
    assert f'href="/db/{job_id}.html"' in client.ok("/")


def test_rendered_pages_need_the_token(db, server):
    job_id = record(db, name="private job")
    anonymous = Client(server, auth=False)
    for path in (f"/db/{job_id}.html", "/db/index.html"):
        for method in ("GET", "HEAD"):
            status, headers, body = anonymous.request(method, path)
            assert status == 403, (method, path)
            assert job_id.encode() not in body and b"private job" not in body
    status, _, _ = anonymous.get(f"/db/{job_id}.html", headers={"Cookie": f"{server.cookie}=wrong"})
    assert status == 403


def test_site_instance_refuses_rendered_pages_without_the_secret(db):
    job_id = record(db)
    s = web.start_site("the-right-secret-0123456789", homes=str(db.home.root) + "/{user}")
    try:
        client = Client(s, auth=False)
        for headers in ({}, {"X-Remote-User": "nobody", "X-Jim-Proxy-Secret": "the-wrong-secret-0123456789"}):
            for path in (f"/db/{job_id}.html", "/db/index.html"):
                status, _, body = client.get(path, headers=headers)
                assert status == 403 and job_id.encode() not in body, (headers, path)
    finally:
        s.stop()


def test_unknown_malformed_and_damaged_records(db, client, home):
    job_id = record(db)
    assert client.get("/db/20260101-000000-abcdef.html")[0] == 404
    for bad in ("/db/..%2Fjim.html", "/db/x.html", "/db/index.htm", f"/db/{job_id}.html/x"):
        assert client.get(bad)[0] == 404, bad
    good = home.record(job_id).read_bytes()
    home.record(job_id).write_text("<gridjob")
    try:
        status, headers, body = client.get(f"/db/{job_id}.html")
        assert status == 500 and b"not well-formed" in body and b"Traceback" not in body
        assert client.get("/db/index.html")[0] == 200  # the server goes on
    finally:
        home.record(job_id).write_bytes(good)


def test_entities_in_a_record_are_not_resolved(db, client, home, tmp_path):
    """A record naming an external entity (a file of the server's account) renders without it."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT\n")
    job_id = record(db, name="n", args=("PLACEHOLDER",))
    good = home.record(job_id).read_text()
    decl = f'<!DOCTYPE gridjob [<!ENTITY x SYSTEM "{secret.as_uri()}">]>\n'
    text = re.sub(r"(<\?xml-stylesheet[^>]*\?>\n?)", lambda m: m.group(1) + decl, good, count=1)
    home.record(job_id).write_text(text.replace("<value>PLACEHOLDER</value>", "<value>&x;</value>"))
    try:
        status, _, body = client.get(f"/db/{job_id}.html")
        assert status == 200 and b"TOP-SECRET-CONTENT" not in body and b"Traceback" not in body
    finally:
        home.record(job_id).write_text(good)


def test_the_renderer_may_read_nothing(tmp_path):
    """The compiled transformation runs with DENY_ALL: a stylesheet's document() reads no file."""
    secret = tmp_path / "secret.txt"
    secret.write_text("<x>TOP-SECRET-CONTENT</x>")
    xsl = (
        '<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">'
        '<xsl:output method="html"/>'
        f'<xsl:template match="/"><html><body><xsl:copy-of select="document(\'{secret.as_uri()}\')"/></body></html>'
        "</xsl:template></xsl:stylesheet>"
    ).encode()
    renderer = Renderer(xsl)
    try:
        body, _ = renderer.render(b"<gridjob/>")
    except etree.XSLTApplyError:
        return
    assert b"TOP-SECRET-CONTENT" not in body


# ---------------------------------------------------------------------------
# in Chromium, without browser XSLT
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_rendered_record_in_chromium_has_no_xslt_banner(jim_env, chromium, served, monkeypatch):
    """Chromium without ``--enable-features=XSLT`` and with its deprecation banner left on: the
    server-rendered page shows the grid job and every local job, and no banner."""
    job_id = jim_env.submit(mc_rsl(30, 10, 0.002, "browser test: rendered on the server"))
    out = jim_env.wait(job_id, timeout=90)
    assert out["JOB_STATE"] == "DONE", out
    plain = [f for f in test_web_browser.FLAGS if "XSLT" not in f]  # Chromium as people get it
    monkeypatch.setattr(test_web_browser, "FLAGS", plain)
    flags = ("--disable-features=XSLT",)  # and even with XSLT off
    page = Page(chromium.load(served.url(f"/db/{job_id}.html"), "rendered-record", *flags))
    assert "XSLT" not in page.text and "xslt" not in page.text.lower()
    assert page.by_id("grid-state") == "DONE"
    assert page.by_id("jobname") == "browser test: rendered on the server"
    assert page.by_id("local-count") == "3"
    rows = page.rows()
    assert sorted(rows) == [0, 1, 2]
    for row in rows.values():
        assert "DONE" in row and "generation: 10 of 10" in row, row
    assert page.by_id("overall-count") == "90 of 90"
    index = Page(chromium.load(served.url("/db/index.html"), "rendered-index", *flags))
    assert "xslt" not in index.text.lower()
    assert re.findall(r'href="([0-9a-f-]+)\.html"', index.dom) == [job_id]
