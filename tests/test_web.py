"""``jim serve``: routes, escaping, read-only-ness, headers, paths; the XSLT through lxml.

The server runs in a thread on port 0 (:func:`jim.web.start`) over a private
jim home whose grid jobs are recorded with the database API; one test runs the
real ``jim serve`` command.  The browser tests are in test_web_browser.py.
"""

from __future__ import annotations

import html.parser
import http.client
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lxml import etree

import jim
from jim import web
from jim.adapters.fork import ForkAdapter
from jim.adapters.model import Capacity
from jim.db import Database, validate
from jim.errors import JimError
from jim.jobid import new_job_id
from jim.paths import Home
from jim.record import NewJob, new_record
from jim.states import Evidence, LocalState
from jim.status import job_summary, status_json
from jim.web import ServeOptions, auth, command, pages

EVIL_NAME = """<script>alert("name")</script> & 'quotes' "too" </td><img src=x onerror=alert(1)>"""
EVIL_ARGS = ["<script>alert('arg')</script>", "a&b \"c\" 'd'", "&lt;already&gt; &amp;", "--x=</title><b>"]
T0 = 1_790_000_000.0


def record(
    db: Database, *, name="job", n=3, states=(), progress=None, created=None, args=("--request", "4711"), cancel=False
) -> str:
    """A grid job recorded with the database API: local job k gets states[k] (default RUNNING)."""
    created = T0 if created is None else created
    job_id = new_job_id(created)
    rec = new_record(
        job_id,
        NewJob(
            jobtype="montecarlo",
            name=name,
            owner="d0mc",
            adapter="fork",
            description={
                "executable": ["/opt/d0/mc_runjob"],
                "arguments": list(args),
                "environment": [["D0_RELEASE", "p21.26.00"]],
                "jobname": [name],
            },
            source_format="rsl",
            source_text=f"&(executable=/opt/d0/mc_runjob)(jobname={name!r})",
            plan={"localJobs": n, "binding": "site-recommended-cpu"},
            explanation=f"{n * 250} events",
            slices=[{"firstEvent": 250 * k + 1, "lastEvent": 250 * k + 250, "events": 250} for k in range(n)],
        ),
        created=created,
    )
    states = list(states) + ["RUNNING"] * (n - len(states))
    for lj, st in zip(rec.local_jobs(), states):
        if st == "PLANNED":
            continue
        lj.set_state(LocalState.SUBMITTING, at=created + 1)
        if st == "SUBMITTING":
            continue
        lj.batch_id = f"{5000 + lj.index}:1.0"
        lj.set_state(LocalState.QUEUED, at=created + 2)
        if st == "QUEUED":
            continue
        lj.set_state(LocalState.RUNNING, at=created + 3)
        if st == "DONE":
            lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0, at=created + 60)
        elif st == "FAILED":
            lj.set_state(
                LocalState.FAILED,
                evidence=Evidence.WRAPPER_EXIT_FILE,
                exit_code=3,
                reason="exit code 3 <b>bold</b>",
                at=created + 30,
            )
    for k, phases in (progress or {}).items():
        rec.local(k).set_progress(phases, at=created + 10)
    if all(s in ("DONE", "FAILED") for s in states):
        rec.set_outputs(Path(f"/tmp/{job_id}.tar.gz"))
    if cancel:
        rec.set("cancelRequested", "true")
    rec.recompute(at=created + 61)
    db.create(rec)
    return job_id


@pytest.fixture
def home(tmp_path):
    h = Home(tmp_path / "jimhome")
    yield h
    if h.db.exists():
        errors = [f"{p.name}: {e}" for p in sorted(h.db.glob("*.xml")) for e in validate(p)]
        assert not errors, errors


@pytest.fixture
def db(home):
    return Database(home.ensure(), lock_timeout=5)


@pytest.fixture
def server(home):
    s = web.start(home)
    yield s
    s.stop()


class Client:
    """Requests to a server started in a thread, with its token (``auth=False``: without)."""

    def __init__(self, server, auth: bool = True):
        self.host, self.port = server.server_address[:2]
        self.auth = {"Authorization": f"token {server.token}"} if auth else {}

    def request(self, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            hdrs = {"Host": f"127.0.0.1:{self.port}", **self.auth, **(headers or {})}
            if body is not None:
                hdrs["Content-Length"] = str(len(body))
            for k, v in hdrs.items():
                conn.putheader(k, v)
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def get(self, path: str, **kw):
        return self.request("GET", path, **kw)

    def ok(self, path: str) -> str:
        status, headers, body = self.get(path)
        assert status == 200, (path, status, body[:500])
        return body.decode()


@pytest.fixture
def client(server):
    return Client(server)


class Elements(html.parser.HTMLParser):
    """Tags and text of a page, as a browser's parser sees them."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def by_id(self, ident: str) -> dict | None:
        return next((a for t, a in self.tags if a.get("id") == ident), None)

    @property
    def all_text(self) -> str:
        return " ".join(" ".join(self.text).split())


def text_of(page: str, element_id: str) -> str:
    """Text inside the element with that id (simple: up to its closing tag of the same name)."""
    m = re.search(rf'<(\w+)[^>]*\bid="{re.escape(element_id)}"[^>]*>(.*?)</\1>', page, re.S)
    assert m, f"no element {element_id}"
    inner = re.sub(r"</?(span|b|code|small|a|time)\b[^>]*>", "", m.group(2))  # inline: no space
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", inner)).split())


# ---------------------------------------------------------------------------
# index
# ---------------------------------------------------------------------------


def test_index_newest_first_filter_and_pages(db, client):
    ids = [
        record(db, name=f"job {k}", n=1, states=["DONE" if k % 3 == 0 else "RUNNING"], created=T0 + k) for k in range(7)
    ]
    page = client.ok("/")
    listed = re.findall(r'href="/jobs/([0-9a-f-]+)"', page)
    assert listed == ids[::-1]  # newest first
    assert text_of(page, "total") == "7"
    assert "DONE (3)" in Elements(page).all_text and "ACTIVE (4)" in Elements(page).all_text
    assert '<meta http-equiv="refresh" content="15">' in page  # active jobs on the page

    done = client.ok("/?state=DONE")
    assert re.findall(r'href="/jobs/([0-9a-f-]+)"', done) == [ids[6], ids[3], ids[0]]
    assert 'http-equiv="refresh"' not in done
    assert re.findall(r'href="/jobs/([0-9a-f-]+)"', client.ok("/?state=done")) == [ids[6], ids[3], ids[0]]

    p2 = client.ok("/?per_page=3&page=2")
    assert re.findall(r'href="/jobs/([0-9a-f-]+)"', p2) == [ids[3], ids[2], ids[1]]
    assert text_of(p2, "page") == "page 2 of 3"
    assert 'href="/?per_page=3&amp;page=3" rel="next"' in p2 and 'href="/?per_page=3" rel="first"' in p2
    p3 = client.ok("/?per_page=3&page=3")
    assert re.findall(r'href="/jobs/([0-9a-f-]+)"', p3) == [ids[0]]
    assert client.get("/?per_page=3&page=4")[0] == 404
    for bad in ("/?state=NOPE", "/?page=0", "/?page=x", "/?per_page=100000", "/?page=" + "9" * 5000, "/?state=%00"):
        assert client.get(bad)[0] == 400, bad


def test_index_of_an_empty_home(server, client, home):
    assert not home.root.exists()
    page = client.ok("/")
    assert "No grid jobs" in page
    assert json.loads(client.ok("/api/jobs")) == []
    assert not home.root.exists()  # serving creates nothing


def test_index_reads_only_the_index_and_follows_it(db, server, client, monkeypatch):
    first = record(db, name="first", n=2)
    calls = []
    real_read = Database.read
    monkeypatch.setattr(Database, "read", lambda self, job_id: calls.append(job_id) or real_read(self, job_id))
    assert first in client.ok("/")
    second = record(db, name="second", n=2, created=T0 + 5)
    page = client.ok("/")
    assert re.findall(r'href="/jobs/([0-9a-f-]+)"', page) == [second, first]
    assert calls == []  # the index page never parses a record
    client.ok(f"/jobs/{first}")
    assert calls == [first]


# ---------------------------------------------------------------------------
# the page of one grid job
# ---------------------------------------------------------------------------


def test_job_page_running(db, client):
    job_id = record(
        db,
        name="D0 MC request 4711",
        n=4,
        states=["RUNNING", "RUNNING", "DONE", "FAILED"],
        progress={
            0: {"generation": (250, 250), "d0gstar": (117, 250)},
            1: {"generation": (100, 250)},
            2: {"generation": (250, 250), "d0gstar": (250, 250)},
        },
    )
    page = client.ok(f"/jobs/{job_id}")
    assert text_of(page, "grid-state") == "ACTIVE"
    assert text_of(page, "jobname") == "D0 MC request 4711"
    assert text_of(page, "local-count") == "4"
    assert '<meta http-equiv="refresh" content="5">' in page
    assert len(re.findall(r'<tr class="localjob"', page)) == 4
    row0 = text_of(page, "lj-0")
    assert "RUNNING" in row0 and "generation: 250 of 250" in row0 and "d0gstar: 117 of 250" in row0
    assert '<progress value="117" max="250">' in page
    row3 = text_of(page, "lj-3")
    assert "FAILED" in row3 and "exit code 3 <b>bold</b>" in row3 and "wrapper-exit-file" in row3
    assert text_of(page, "overall-count") == "967 of 1250"
    assert text_of(page, "ended-count") == "2 of 4"
    filters = text_of(page, "local-filters")
    assert "FAILED (1)" in filters and "RUNNING (2)" in filters and "DONE (1)" in filters and "all (4)" in filters
    # the arguments and the environment are shown
    assert "--request 4711" in text_of(page, "description") and "(D0_RELEASE p21.26.00)" in text_of(page, "description")

    failed_only = client.ok(f"/jobs/{job_id}?state=FAILED")
    assert re.findall(r'<tr class="localjob" id="lj-(\d+)"', failed_only) == ["3"]
    attention = client.ok(f"/jobs/{job_id}?order=attention")
    assert re.findall(r'<tr class="localjob" id="lj-(\d+)"', attention)[0] == "3"
    paged = client.ok(f"/jobs/{job_id}?per_page=3&page=2")
    assert re.findall(r'<tr class="localjob" id="lj-(\d+)"', paged) == ["3"]
    for bad in ("?state=BOGUS", "?order=random", "?page=0", "?per_page=0"):
        assert client.get(f"/jobs/{job_id}{bad}")[0] == 400, bad
    assert client.get(f"/jobs/{job_id}?page=9")[0] == 404


def test_page_data_is_status_json(db):
    """The job page reads the record directly (fast for 10,000 local jobs): the same values as status_json."""
    from jim.status import phase_totals

    job_id = record(
        db,
        n=5,
        states=["RUNNING", "DONE", "FAILED", "QUEUED", "PLANNED"],
        progress={0: {"gen": (250, 250), "sim": (300, 250)}, 1: {"gen": (250, 250)}},
    )
    job = db.read(job_id)
    full = status_json(job)
    data, phases = job_summary(job)
    assert data == {k: v for k, v in full.items() if k != "localJobs"}
    assert phases == phase_totals(full["localJobs"]) == [("gen", 500, 500, 2), ("sim", 250, 250, 1)]
    for el, lj in zip(job.root.find("localjobs"), full["localJobs"]):
        row = pages._row(el, time.time())
        assert {k: v for k, v in row.items() if k != "_elapsed"} == lj


def test_job_page_finished_does_not_refresh(db, client):
    job_id = record(db, n=2, states=["DONE", "DONE"], progress={0: {"sim": (250, 250)}, 1: {"sim": (250, 250)}})
    page = client.ok(f"/jobs/{job_id}")
    assert text_of(page, "grid-state") == "DONE" and text_of(page, "grid-exit") == "0"
    assert 'http-equiv="refresh"' not in page
    assert "no longer refreshes" in text_of(page, "refresh-note")
    assert text_of(page, "output-tar") == f"/tmp/{job_id}.tar.gz"
    assert text_of(page, "overall-count") == "500 of 500"


def test_unknown_and_malformed_job_ids(db, client):
    record(db)
    for path in (
        "/jobs/20200101-000000-deadbeef",
        "/api/jobs/20200101-000000-deadbeef",
        "/db/20200101-000000-deadbeef.xml",
        "/jobs/nope",
        "/jobs/20200101-000000-DEADBEEF",
    ):
        status, headers, body = client.get(path)
        assert status == 404, path
        assert headers["content-type"].startswith("text/html")


def test_damaged_record_is_a_server_error_not_a_crash(db, client, home):
    job_id = record(db)
    good = home.record(job_id).read_bytes()
    home.record(job_id).write_text("<gridjob")
    try:
        status, _, body = client.get(f"/jobs/{job_id}")
        assert status == 500 and b"damaged" in body
        assert client.get("/")[0] == 200  # the server goes on
    finally:
        home.record(job_id).write_bytes(good)


# ---------------------------------------------------------------------------
# escaping
# ---------------------------------------------------------------------------


def test_name_and_arguments_are_escaped_in_the_html_views(db, client):
    job_id = record(db, name=EVIL_NAME, n=2, args=EVIL_ARGS, progress={0: {"d0gstar": (1, 2)}})
    for path in ("/", f"/jobs/{job_id}"):
        page = client.ok(path)
        parsed = Elements(page)
        tags = [t for t, _ in parsed.tags]
        assert "script" not in tags and "img" not in tags, path
        assert not any(k.startswith("on") for _, a in parsed.tags for k in a), path
        assert " ".join(EVIL_NAME.split()) in parsed.all_text, path
        assert "&lt;script&gt;alert(&#34;name&#34;)&lt;/script&gt; &amp; &#39;quotes&#39;" in page, path
    page = client.ok(f"/jobs/{job_id}")
    text = Elements(page).all_text
    for arg in EVIL_ARGS:
        assert arg in text, arg
    assert "&amp;lt;already&amp;gt; &amp;amp;" in page  # escaped once more: shown as typed
    assert "--x=&lt;/title&gt;&lt;b&gt;" in page
    assert "alert(" in text_of(page, "source")


def test_name_and_arguments_are_escaped_by_the_stylesheet(db, home):
    """jim.xsl through lxml (XSLT 1.0 like the browsers): values come out as text, never markup."""
    job_id = record(
        db,
        name=EVIL_NAME,
        n=2,
        args=EVIL_ARGS,
        states=["RUNNING", "DONE"],
        progress={0: {"generation": (250, 250), "d0gstar": (117, 250)}},
    )
    xslt = etree.XSLT(etree.parse(str(home.db / "jim.xsl")))
    out = str(xslt(etree.parse(str(home.record(job_id)))))
    parsed = Elements(out)
    tags = [t for t, _ in parsed.tags]
    assert "script" not in tags and "img" not in tags
    assert not any("onerror" in a for _, a in parsed.tags)
    assert etree.parse(str(home.db / "jim.xsl")).xpath("//@disable-output-escaping") == []
    text = parsed.all_text
    assert " ".join(EVIL_NAME.split()) in text
    for arg in EVIL_ARGS:
        assert arg in text, arg
    assert text_of(out, "local-count") == "2"
    assert "d0gstar: 117 of 250" in text_of(out, "lj-0")
    assert text_of(out, "overall-count") == "367 of 500"
    assert '<meta http-equiv="refresh" content="5">' in out


# ---------------------------------------------------------------------------
# JSON and raw files
# ---------------------------------------------------------------------------


def test_json_endpoints(db, client):
    a = record(db, name="a", n=2, states=["DONE", "DONE"])
    b = record(db, name="b", n=3, created=T0 + 1)
    assert json.loads(client.ok(f"/api/jobs/{b}")) == status_json(db.read(b))
    listed = json.loads(client.ok("/api/jobs"))
    assert listed == db.list() and [j["id"] for j in listed] == [b, a]
    assert [j["id"] for j in json.loads(client.ok("/api/jobs?state=DONE"))] == [a]
    status, headers, body = client.get("/api/jobs?per_page=1&page=2")
    assert status == 200 and [j["id"] for j in json.loads(body)] == [a] and headers["x-total-count"] == "2"
    assert headers["content-type"] == "application/json; charset=utf-8"
    assert client.ok(f"/api/jobs/{b}?pretty").startswith('{\n  "id": ')


def test_json_is_what_jim_status_json_prints(jim_env):
    db = Database(Home(jim_env.home).ensure())
    job_id = record(db, name=EVIL_NAME, n=2, progress={1: {"sim": (3, 9)}})
    s = web.start(Home(jim_env.home))
    try:
        assert json.loads(Client(s).ok(f"/api/jobs/{job_id}")) == jim_env.status(job_id)
    finally:
        s.stop()


def test_raw_record_stylesheet_and_index(db, client, home):
    job_id = record(db)
    status, headers, body = client.get(f"/db/{job_id}.xml")
    assert status == 200 and body == home.record(job_id).read_bytes()
    assert headers["content-type"] == "application/xml; charset=utf-8"
    assert "script-src 'self'" in headers["content-security-policy"]
    status, headers, body = client.get("/db/jim.xsl")
    assert status == 200 and headers["content-type"].startswith("text/xsl")
    assert body == (Path(jim.__file__).parent / "data" / "jim.xsl").read_bytes()
    status, headers, body = client.get("/db/index.xml")
    assert body.startswith(
        b"<?xml version='1.0' encoding='UTF-8'?>\n<?xml-stylesheet type=\"text/xsl\" href=\"jim.xsl\"?>"
    )
    doc = etree.fromstring(body)
    assert doc.tag == "index" and [j.get("id") for j in doc] == [job_id]
    xslt = etree.XSLT(etree.parse(str(home.db / "jim.xsl")))
    assert job_id in str(xslt(etree.ElementTree(doc)))
    assert client.get("/static/jim.css")[0] == 200


# ---------------------------------------------------------------------------
# read-only, paths, headers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "PROPFIND", "FOO"])
def test_only_get_and_head(db, client, home, method):
    job_id = record(db)
    before = {p.name: p.read_bytes() for p in home.db.iterdir()}
    for path in ("/", f"/jobs/{job_id}", f"/api/jobs/{job_id}", f"/db/{job_id}.xml"):
        status, headers, _ = client.request(method, path, body=b"state=FAILED&cancel=1")
        assert status == 405, (method, path)
        assert headers["allow"] == "GET, HEAD"
    assert {p.name: p.read_bytes() for p in home.db.iterdir()} == before


def test_head_is_get_without_body(db, client):
    job_id = record(db)
    for path in ("/", f"/jobs/{job_id}", f"/api/jobs/{job_id}", f"/db/{job_id}.xml", "/nope"):
        gs, gh, gb = client.get(path)
        hs, hh, hb = client.request("HEAD", path)
        assert hs == gs and hb == b"" and hh["content-length"] == str(len(gb)), path
        assert hh["content-type"] == gh["content-type"]


@pytest.mark.parametrize(
    "path",
    [
        "/db/../jim.toml",
        "/db/..%2f..%2fjim.toml",
        "/db/%2e%2e/%2e%2e/etc/passwd",
        "/jobs/../../etc/passwd",
        "/jobs/..%2F..%2Fetc%2Fpasswd",
        "/db/{id}.xml/../../log/jim.log",
        "/db/{id}%0a.xml",
        "/jobs/{id}%0a",
        "/db/{id}.state",
        "/db/{id}.xml%00",
        "/static/../web.py",
        "/static/%2e%2e/web.py",
        "//etc/passwd",
        "/db/",
        "/db/index.xml/../../jim.toml",
        "/jobs/{id}/../../log/jim.log",
        "/../../../../etc/passwd",
        "/log/jim.log",
        "/db/.index.xml.1.tmp",
        "/api/jobs/{id}/..",
    ],
)
def test_no_path_escapes(db, client, path):
    job_id = record(db)
    status, _, body = client.get(path.format(id=job_id))
    assert status in (400, 404), (path, status)
    assert b"root:" not in body and b"JOB_STATE" not in body


def test_security_headers(db, client):
    job_id = record(db)
    for path in ("/", f"/jobs/{job_id}", "/nope", "/?state=X"):
        _, headers, _ = client.get(path)
        csp = headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
        assert "default-src 'none'" in csp and "script-src" not in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
    for path in (f"/api/jobs/{job_id}", f"/db/{job_id}.xml", "/db/jim.xsl", "/static/jim.css"):
        _, headers, _ = client.get(path)
        assert (
            headers["x-content-type-options"] == "nosniff"
            and "default-src 'none'" in headers["content-security-policy"]
        ), path


def test_foreign_host_header_refused_on_loopback(db, client):
    assert client.get("/", headers={"Host": "evil.example:8642"})[0] == 400  # DNS rebinding
    assert client.get("/", headers={"Host": "localhost:8642"})[0] == 200
    assert client.get("/", headers={"Host": "[::1]:8642"})[0] == 200
    assert client.get("/", headers={"Host": "127.0.0.1"})[0] == 200


def test_requests_are_logged_to_jims_logger(db, client):
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("jim.web")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        job_id = record(db)
        client.ok(f"/jobs/{job_id}")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    assert any(f"GET /jobs/{job_id}" in r.getMessage() for r in records)


def test_many_local_jobs_are_paged(db, client):
    job_id = record(db, n=1200, progress={k: {"sim": (k % 250, 250)} for k in range(0, 1200, 7)})
    page = client.ok(f"/jobs/{job_id}")
    assert len(re.findall(r'<tr class="localjob"', page)) == pages.LOCAL_PER_PAGE
    assert text_of(page, "local-count") == "1200"
    assert text_of(page, "page") == "page 1 of 3"
    last = client.ok(f"/jobs/{job_id}?page=3")
    assert len(re.findall(r'<tr class="localjob"', last)) == 200


# ---------------------------------------------------------------------------
# the real command
# ---------------------------------------------------------------------------


def test_jim_serve_command(jim_env):
    db = Database(Home(jim_env.home).ensure())
    job_id = record(db, name="served")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jim", "serve", "--port", "0"],
        env=jim_env.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.match(r"jim serve: http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]{43}) ", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        port, token = int(m.group(1)), m.group(2)
        url_file = jim_env.home / "serve.url"
        assert url_file.read_text() == f"http://127.0.0.1:{port}/?token={token}\n"
        assert url_file.stat().st_mode & 0o777 == 0o600
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", f"/jobs/{job_id}", headers={"Authorization": f"token {token}"})
        resp = conn.getresponse()
        assert resp.status == 200 and b"served" in resp.read()
        conn.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert out == "" and err == ""  # requests went to jim's log, not to the terminal
        log = (jim_env.home / "log" / "jim.log").read_text()
        assert f'"GET /jobs/{job_id} HTTP/1.1" 200' in log
        assert not url_file.exists()  # removed on a clean stop
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_jim_serve_survives_dropped_connections(jim_env):
    """A browser that goes away before its answer costs that answer only (jim's CLI lets SIGPIPE kill)."""
    db = Database(Home(jim_env.home).ensure())
    job_id = record(db, n=300)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jim", "serve", "--port", "0"],
        env=jim_env.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        m = re.search(r":(\d+)/\?token=(\S+)", proc.stdout.readline())
        port, token = int(m.group(1)), m.group(2)
        for _ in range(5):  # the request, then gone: the server's first write is answered by a reset
            with socket.create_connection(("127.0.0.1", port)) as c:
                c.sendall(
                    f"GET /jobs/{job_id} HTTP/1.1\r\nHost: localhost\r\nAuthorization: token {token}\r\n\r\n".encode()
                )
        time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/", headers={"Authorization": f"token {token}"})
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_url_file_is_private_and_never_written_through_a_link(tmp_path):
    home = Home(tmp_path / "jimhome")
    home.root.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("not yours\n")
    (home.root / "serve.url").symlink_to(victim)
    path = command._write_url_file(home, "http://127.0.0.1:1/?token=abc")
    assert path == home.root / "serve.url" and not path.is_symlink()
    assert path.read_text() == "http://127.0.0.1:1/?token=abc\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert victim.read_text() == "not yours\n"
    assert sorted(p.name for p in home.root.iterdir()) == ["serve.url"]  # no temporary file left
    command._remove_url_file(path, "http://127.0.0.1:2/?token=other")  # another server's URL: kept
    assert path.exists()
    command._remove_url_file(path, "http://127.0.0.1:1/?token=abc")
    assert not path.exists()


@pytest.mark.parametrize(
    ("options", "euid", "message"),
    [
        (ServeOptions(site=True, socket_path=""), 0, "not with --socket"),
        (ServeOptions(secret_file="/etc/jim/serve.secret"), 0, "--proxy-secret-file is for jim serve --site"),
        (ServeOptions(site=True, secret_file="/s"), 1000, "runs as root"),
        (ServeOptions(site=True), 0, "needs --proxy-secret-file"),
        (ServeOptions(site=True, secret_file="/s", homes="/var/lib/jim"), 0, "must be an absolute path"),
        (ServeOptions(site=True, secret_file="/s", homes="{user}/jim"), 0, "must be an absolute path"),
        (ServeOptions(site=True, secret_file="/s", user_header="X Remote User"), 0, "is not a header name"),
    ],
)
def test_serve_options_that_do_not_go_together(monkeypatch, options, euid, message):
    monkeypatch.setattr(command.os, "geteuid", lambda: euid)
    with pytest.raises(JimError, match=message):
        command.check(options)


def test_serve_options_that_do():
    command.check(ServeOptions())
    command.check(ServeOptions(socket_path=""))
    if os.geteuid() == 0:
        command.check(ServeOptions(site=True, secret_file="/s", homes="/var/lib/jim/{user}", user_header="X-User"))


def test_jim_serve_port_in_use(jim_env):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = jim_env.run("serve", "--port", str(port), timeout=20)
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr


# ---------------------------------------------------------------------------
# who may look: the token, the Unix socket
# ---------------------------------------------------------------------------

ALL_ROUTES = ("/", "/api/jobs", "/jobs/{id}", "/api/jobs/{id}", "/db/{id}.xml", "/db/index.xml", "/db/jim.xsl")
ALL_ROUTES += ("/static/jim.css", "/nope", "/jobs/{id}?state=FAILED", "/jobs/{id}/0", "/jobs/{id}?retried=1")
ALL_ROUTES += ("/db/{id}.html", "/db/index.html", "/metrics")


def test_the_403_tests_reach_every_route():
    """A new route is checked for 403 too: every pattern of the route table is among ALL_ROUTES."""
    job_id = new_job_id(T0)
    paths = {p.format(id=job_id).partition("?")[0] for p in ALL_ROUTES}
    for pattern, page in pages.ROUTES:
        assert any(pattern.fullmatch(p) for p in paths), (pattern.pattern, page.__name__)


def test_without_the_token_every_route_is_403(db, server):
    job_id = record(db, name="private job")
    anonymous = Client(server, auth=False)
    for credentials in (
        {},
        {"Authorization": "token " + server.token[:-1] + ("a" if server.token[-1] != "a" else "b")},
        {"Authorization": "token "},
        {"Authorization": "Basic " + server.token},
        {"Cookie": f"{server.cookie}=wrong"},
        {"Cookie": f"jim-token-1={server.token}"},  # another port's cookie
        {"Authorization": "token " + "é" * 40},
        {"Cookie": f"{server.cookie}=" + "x" * 5000},
    ):
        for path in ALL_ROUTES:
            for method in ("GET", "HEAD"):
                status, headers, body = anonymous.request(method, path.format(id=job_id), headers=credentials)
                assert status == 403, (credentials, method, path)
                assert job_id.encode() not in body and b"private job" not in body and b"D0_RELEASE" not in body
                assert "set-cookie" not in headers
    status, _, body = anonymous.request("POST", f"/jobs/{job_id}", body=b"x=1")
    assert status == 403 and job_id.encode() not in body
    status, _, _ = anonymous.get(f"/jobs/{job_id}?token=" + server.token[:-1])
    assert status == 403


def test_first_visit_with_the_token_sets_a_cookie_and_drops_it_from_the_url(db, server):
    job_id = record(db, name="mine")
    anonymous = Client(server, auth=False)
    status, headers, body = anonymous.get(f"/jobs/{job_id}?state=FAILED&token={server.token}&order=attention")
    assert status == 303
    assert headers["location"] == f"/jobs/{job_id}?state=FAILED&order=attention"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{server.cookie}={server.token};")
    attrs = {a.strip().lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/"} <= attrs
    assert server.token.encode() not in body and b"mine" not in body
    with_cookie = {"Cookie": f"other=1; {server.cookie}=shadow; {server.cookie}={server.token}"}
    status, _, body = anonymous.get(f"/jobs/{job_id}?state=FAILED&order=attention", headers=with_cookie)
    assert status == 200 and b"mine" in body
    for path in ("/db/jim.xsl", "/static/jim.css", f"/db/{job_id}.xml", "/api/jobs"):
        assert anonymous.get(path, headers=with_cookie)[0] == 200, path
    # a token on a path that is no page sends to the index, never elsewhere
    for odd in ("//evil.example/", "/nope", "/jobs/..%2f"):
        status, headers, _ = anonymous.get(f"{odd}?token={server.token}")
        assert status == 303 and headers["location"] == "/", odd
    assert server.url + "?token=" + server.token == server.login_url


def test_each_server_has_its_own_token(home):
    a, b = web.start(home), web.start(home)
    try:
        assert a.token != b.token and len(a.token) >= 43
        assert Client(a).get("/")[0] == 200
        assert Client(a, auth=False).get("/", headers={"Authorization": f"token {b.token}"})[0] == 403
    finally:
        a.stop()
        b.stop()


class UnixClient(Client):
    def __init__(self, path: Path):
        self.path = str(path)
        self.port = 0
        self.auth = {}

    def request(self, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(self.path)
            s.sendall(f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        head, _, payload = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
        return int(lines[0].split()[1]), headers, payload


def test_unix_socket(db, home, tmp_path):
    job_id = record(db, name="over the socket")
    private = tmp_path / "run"
    sock = private / "jim.sock"
    s = web.start(home, socket_path=str(sock))
    try:
        assert private.stat().st_mode & 0o777 == 0o700  # created private
        st = sock.lstat()
        assert stat.S_ISSOCK(st.st_mode) and st.st_mode & 0o777 == 0o600
        client = UnixClient(sock)
        assert "over the socket" in client.ok(f"/jobs/{job_id}")
        assert client.get("/api/jobs")[0] == 200
        assert client.get("/", headers={})[0] == 200
        assert s.url.startswith("http+unix://")
    finally:
        s.stop()
    assert not sock.exists()
    # a stale socket of ours (nothing listening) is replaced
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock))
    stale.close()
    s = web.start(home, socket_path=str(sock))
    try:
        assert UnixClient(sock).get("/")[0] == 200
        with pytest.raises(OSError, match="already listens"):  # a live one is not
            web.start(home, socket_path=str(sock))
    finally:
        s.stop()


def test_unix_socket_refuses_unsafe_places(home, tmp_path):
    # an existing file that is not a socket: refused, and left alone
    private = tmp_path / "run"
    private.mkdir(mode=0o700)
    victim = private / "notes.txt"
    victim.write_text("keep me")
    with pytest.raises(OSError, match="not a socket"):
        web.start(home, socket_path=str(victim))
    assert victim.read_text() == "keep me"
    # a symbolic link where the socket would be: not followed
    target = tmp_path / "elsewhere.sock"
    (private / "link.sock").symlink_to(target)
    with pytest.raises(OSError, match="not a socket"):
        web.start(home, socket_path=str(private / "link.sock"))
    assert not target.exists() and (private / "link.sock").is_symlink()
    # a directory other accounts can enter, or a link to a directory
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    with pytest.raises(OSError, match="must be private"):
        web.start(home, socket_path=str(shared / "jim.sock"))
    (tmp_path / "dirlink").symlink_to(private)
    with pytest.raises(OSError, match="symbolic link"):
        web.start(home, socket_path=str(tmp_path / "dirlink" / "jim.sock"))
    assert sorted(p.name for p in private.iterdir()) == ["link.sock", "notes.txt"]
    assert list(shared.iterdir()) == []


# ---------------------------------------------------------------------------
# the site instance (two real accounts: test_web_users.py)
# ---------------------------------------------------------------------------


def test_proxy_secret_file_must_be_private_and_ours(tmp_path):
    good = tmp_path / "secret"
    good.write_text("a-long-enough-shared-secret\n")
    good.chmod(0o600)
    assert auth.read_secret(str(good)) == "a-long-enough-shared-secret"
    loose = tmp_path / "loose"
    loose.write_text("a-long-enough-shared-secret\n")
    loose.chmod(0o640)
    with pytest.raises(JimError, match="chmod 600"):
        auth.read_secret(str(loose))
    link = tmp_path / "link"
    link.symlink_to(good)
    with pytest.raises(JimError, match="symbolic link"):
        auth.read_secret(str(link))
    short = tmp_path / "short"
    short.write_text("abc\n")
    short.chmod(0o600)
    with pytest.raises(JimError, match="16 to"):
        auth.read_secret(str(short))
    with pytest.raises(JimError, match="not a regular file"):
        auth.read_secret(str(tmp_path))


def test_site_instance_refuses_requests_without_the_secret(db):
    job_id = record(db)
    s = web.start_site("the-right-secret-0123456789", homes=str(db.home.root) + "/{user}")
    try:
        client = Client(s, auth=False)
        for headers in (
            {},
            {"X-Remote-User": "nobody"},
            {"X-Remote-User": "nobody", "X-Jim-Proxy-Secret": "the-wrong-secret-0123456789"},
            {"X-Jim-Proxy-Secret": "the-right-secret-0123456789"},
            {"X-Jim-Proxy-Secret": "the-right-secret-0123456789", "X-Remote-User": "root"},
            {"X-Jim-Proxy-Secret": "the-right-secret-0123456789", "X-Remote-User": "no/such"},
        ):
            for path in ("/", f"/jobs/{job_id}", f"/db/{job_id}.xml", "/static/jim.css"):
                status, headers_out, body = client.get(path, headers=headers)
                assert status == 403 and job_id.encode() not in body, (headers, path)
                assert headers_out["connection"] == "close"
    finally:
        s.stop()


def test_serve_refuses_mixed_modes(jim_env, tmp_path):
    done = jim_env.run("serve", "--site", "--socket", timeout=20)
    assert done.returncode == 1 and "not with --socket" in done.stderr
    done = jim_env.run("serve", "--proxy-secret-file", str(tmp_path / "s"), timeout=20)
    assert done.returncode == 1 and "--site" in done.stderr


# ---------------------------------------------------------------------------
# the batch system's capacity, as jim last learned it
# ---------------------------------------------------------------------------


def test_index_shows_the_batch_systems_capacity_without_asking_it(db, client, home, monkeypatch):
    assert 'id="capacity"' not in client.ok("/")  # never asked in this home: nothing said
    adapter = ForkAdapter(home, {})
    monkeypatch.setattr(adapter, "ask_capacity", lambda: Capacity(96, 32, 40, 192000, 8, 4))
    adapter.capacity()  # (what jim advertise or the ARC information provider does)
    monkeypatch.setattr(ForkAdapter, "ask_capacity", lambda self: pytest.fail("the web view asked the batch system"))
    page = client.ok("/")
    assert text_of(page, "capacity").startswith(
        "fork: 96 cores, 40 free; nodes of up to 32 cores and 192000 MB; 8 GPUs (4 per node) (asked"
    )
    (home.cache / "fork-capacity.json").write_text(json.dumps({"at": time.time(), "key": "", "value": None}))
    assert "its capacity is unknown" in text_of(client.ok("/"), "capacity")
