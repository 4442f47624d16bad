"""Every attempt of a local job where people look: ``jim status ID`` (text), the record through
jim.xsl (lxml's XSLT 1.0, as a browser applies it) and the pages of ``jim serve``.

The record is made in process, by the real worker and monitor against the in-memory batch
system (tests/support/fake_adapter.py): a node failure and a preemption give local jobs
0 and 1 a second attempt (1 still in its cool-off), and local job 2 is resubmitted by hand
with a reason full of markup.
"""

from __future__ import annotations

import html
import html.parser
import http.client
import json
import re

import pytest
from lxml import etree

from jim import background, web, worker
from jim.config import parse
from jim.db import Database, validate
from jim.jobdesc import parse_rsl
from jim.jobid import local_tag
from jim.monitor import refresh
from jim.paths import Home
from jim.site import Site
from jim.states import EndCause, LocalState
from jim.status import status_json
from jim.submit import submit

from support.fake_adapter import FakeAdapter
from support.status_text import render_status

EVIL_REASON = """<script>alert("why")</script> & 'quotes' </td><img src=x onerror=alert(1)>"""
EVIL_USER = "<b>mallory</b>"


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

    @property
    def all_text(self) -> str:
        return " ".join(" ".join(self.text).split())


def assert_no_markup_from(page: str) -> None:
    """Nothing of EVIL_REASON or EVIL_USER became an element or an attribute: both are shown as text."""
    parsed = Elements(page)
    tags = [t for t, _ in parsed.tags]
    assert "script" not in tags and "img" not in tags
    assert not any(k.startswith("on") for _, a in parsed.tags for k in a)
    assert " ".join(EVIL_REASON.split()) in parsed.all_text
    assert EVIL_USER in parsed.all_text  # as text: a <b> element would leave "mallory" alone


def attempt_rows(page: str, index: int) -> list[str]:
    """The text of each attempt row under local job ``index`` (a nested table: no nested rows)."""
    m = re.search(rf'<tr class="attempts" id="lj-{index}-attempts">(.*?)</table>', page, re.S)
    assert m, f"no attempts under local job {index}"
    rows = re.findall(r'<tr class="attempt[^"]*">(.*?)</tr>', m.group(1), re.S)
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", r)).split()) for r in rows]


@pytest.fixture
def home(tmp_path):
    h = Home(tmp_path / "home")
    yield h
    errors = [f"{p.name}: {e}" for p in sorted(h.db.glob("*.xml")) for e in validate(p)] if h.db.exists() else []
    assert not errors, errors


@pytest.fixture
def retried(home, monkeypatch):
    """A grid job of 3 local jobs with attempts (see the module docstring); returns (db, job id)."""
    config = parse(
        {
            "monitor": {"interval": 0.01, "lost_grace": 60.0},
            "retry": {"max_attempts": 3, "cool_off": 3600.0, "cool_off_factor": 1.0, "max_cool_off": 3600.0},
        },
        env={"JIM_HOME": str(home.root)},
    )
    monkeypatch.setattr(background, "start_monitor", lambda home: None)
    monkeypatch.setattr(background, "start_worker", lambda home, job_id: None)
    db, fake = Database(home.ensure()), FakeAdapter(home)
    job = submit(Site(config), parse_rsl("&(executable=/bin/true)(count=3)(jobname=retried)"), start_background=False)
    worker.submit_pending(Site(config, db=db, adapter=fake), job)
    fake.set_state(f"{job}.0", LocalState.FAILED, cause=EndCause.NODE_FAIL)
    fake.set_state(f"{job}.1", LocalState.RUNNING)
    fake.set_state(f"{job}.2", LocalState.DONE, exit_code=0)
    refresh(Site(config, db=db, adapter=fake))
    with db.update(job) as rec:  # local job 0's cool-off is over: it is submitted again
        rec.local(0).set("retryAfter", "2000-01-01T00:00:00.000Z")
    worker.submit_pending(Site(config, db=db, adapter=fake), job)
    fake.set_state(local_tag(job, 0, 2), LocalState.RUNNING)
    fake.set_state(f"{job}.1", LocalState.CANCELLED, cause=EndCause.PREEMPTED)
    refresh(Site(config, db=db, adapter=fake))
    with db.update(job) as rec:
        rec.local(2).new_attempt(EVIL_REASON, by=EVIL_USER)
    rec = db.read(job)
    assert [(lj.attempt, lj.state) for lj in rec.local_jobs()] == [
        (2, LocalState.RUNNING),
        (2, LocalState.PLANNED),
        (2, LocalState.PLANNED),
    ]
    assert rec.retries() == 3
    return db, job


# -- jim status ID ---------------------------------------------------------------------------


def test_status_text_counts_the_retries_and_lists_every_attempt(retried):
    db, job = retried
    text = render_status(status_json(db.read(job)))
    assert "  retries    3 (3 local jobs tried again; 1 by hand; 1 waiting for its cool-off)" in text
    head = next(line for line in text.splitlines() if "PROGRESS / REASON" in line)
    assert head.split()[:4] == ["#", "STATE", "TRY", "EXIT"]
    rows = {line.split()[0]: line.split() for line in text.splitlines() if re.match(r"\s+\d+ [A-Z]", line)}
    assert rows["0"][:3] == ["0", "RUNNING", "2"] and rows["2"][:3] == ["2", "PLANNED", "2"]
    section = text.split("attempts of the local jobs tried more than once", 1)[1]
    attempts = {line.split()[0]: line for line in section.splitlines() if re.match(r"\s+\d+\.\d+ ", line)}
    assert sorted(attempts) == ["0.1", "0.2", "1.1", "1.2", "2.1", "2.2"]
    assert attempts["0.1"].split()[1:3] == ["FAILED", "100"]
    assert "NODE_FAIL" in attempts["0.1"] and "next attempt: node failure (NODE_FAIL) (by jim," in attempts["0.1"]
    assert "PREEMPTED" in attempts["1.1"]
    assert "current attempt, waits for its cool-off until" in attempts["1.2"]
    assert attempts["0.2"].split()[1:3] == ["RUNNING", "103"] and "current attempt" in attempts["0.2"]
    assert attempts["2.1"].split()[1:3] == ["DONE", "0"]
    assert f"next attempt: {EVIL_REASON} (asked by {EVIL_USER}," in attempts["2.1"]


def test_status_text_attempts_are_bounded_like_the_table(retried):
    db, job = retried
    text = render_status(status_json(db.read(job)), rows=2)
    section = text.split("attempts of the local jobs tried more than once", 1)[1]
    assert len([line for line in section.splitlines() if re.match(r"\s+\d+\.\d+ ", line)]) == 2
    assert f"... 4 more attempts of 3 local jobs tried more than once (jim status {job} --json for all)" in section


def test_status_text_without_retries_has_no_attempt_column(home, monkeypatch):
    config = parse({}, env={"JIM_HOME": str(home.root)})
    monkeypatch.setattr(background, "start_monitor", lambda home: None)
    monkeypatch.setattr(background, "start_worker", lambda home, job_id: None)
    job = submit(Site(config), parse_rsl("&(executable=/bin/true)(count=2)"), start_background=False)
    text = render_status(status_json(Database(home.ensure()).read(job)))
    assert "retries" not in text and "TRY" not in text and "attempts of" not in text


def test_status_text_control_characters_in_an_attempt(retried):
    db, job = retried
    data = status_json(db.read(job))
    lj = next(lj for lj in data["localJobs"] if lj["index"] == 2)
    lj["attempts"][0]["retryReason"] = "bad\x1b]0;title\x07 \u2028next"
    lj["attempts"][0]["node"] = "cn\x9b1"
    text = render_status(data)
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text and "\u2028" not in text
    assert "bad?]0;title? ?next" in text and "cn?1" in text


# -- the record through jim.xsl --------------------------------------------------------------


def test_stylesheet_shows_every_attempt_with_why_and_who(retried, home):
    db, job = retried
    xslt = etree.XSLT(etree.parse(str(home.db / "jim.xsl")))
    out = str(xslt(etree.parse(str(home.record(job)))))
    assert_no_markup_from(out)
    assert re.search(r'id="retries">\s*3\s*\(3 local jobs tried more than once\)', out)
    assert re.findall(r'<tr class="localjob" id="lj-(\d+)"', out) == ["0", "1", "2"]  # attempts are not local jobs
    assert "attempt 2" in re.search(r'<tr class="localjob" id="lj-0">(.*?)</tr>', out, re.S).group(1)
    first, current = attempt_rows(out, 0)
    assert first.startswith("1 FAILED 100 ") and "NODE_FAIL" in first
    assert "node failure (NODE_FAIL)" in first and first.endswith(" jim")
    assert current.startswith("2 RUNNING 103 ") and current.endswith("current attempt")
    first, current = attempt_rows(out, 1)
    assert first.startswith("1 CANCELLED 101 ") and "preempted (PREEMPTED)" in first
    assert "current attempt: waits for its cool-off until" in current
    first, current = attempt_rows(out, 2)
    assert first.startswith("1 DONE 0 102 ") and EVIL_REASON in first and first.endswith(EVIL_USER)
    assert current.startswith("2 PLANNED")


def test_stylesheet_of_a_grid_job_without_retries_has_no_attempts(home, monkeypatch):
    config = parse({}, env={"JIM_HOME": str(home.root)})
    monkeypatch.setattr(background, "start_monitor", lambda home: None)
    monkeypatch.setattr(background, "start_worker", lambda home, job_id: None)
    job = submit(Site(config), parse_rsl("&(executable=/bin/true)(count=2)"), start_background=False)
    Database(home.ensure()).read(job)
    out = str(etree.XSLT(etree.parse(str(home.db / "jim.xsl")))(etree.parse(str(home.record(job)))))
    assert 'class="attempts"' not in out and 'id="retries"' not in out and "attempt 1" not in out


# -- jim serve --------------------------------------------------------------------------------


@pytest.fixture
def server(home):
    s = web.start(home)
    yield s
    s.stop()


def get(server, path: str, token: bool = True) -> tuple[int, str]:
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        headers = {"Authorization": f"token {server.token}"} if token else {}
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}", **headers})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_job_page_shows_every_attempt_under_its_local_job(retried, server):
    db, job = retried
    status, page = get(server, f"/jobs/{job}")
    assert status == 200
    assert_no_markup_from(page)
    assert re.search(r'id="retries">3 \(3 local jobs tried more than once; 1 waiting for its cool-off\) <a', page), page
    assert re.findall(r'<tr class="localjob" id="lj-(\d+)"', page) == ["0", "1", "2"]
    row0 = re.search(r'<tr class="localjob" id="lj-0">(.*?)</tr>', page, re.S).group(1)
    assert f'<a href="/jobs/{job}/0">0</a>' in row0 and "attempt 2" in row0
    first, current = attempt_rows(page, 0)
    assert first.startswith("1 FAILED 100 ") and "NODE_FAIL" in first
    assert "node failure (NODE_FAIL)" in first and first.endswith(" jim")
    assert current.startswith("2 RUNNING 103 ") and current.endswith("current attempt")
    assert "current attempt: waits for its cool-off until" in attempt_rows(page, 1)[1]
    first, _ = attempt_rows(page, 2)
    assert first.startswith("1 DONE 0 102 ") and EVIL_REASON in first and first.endswith(EVIL_USER)
    assert "&lt;script&gt;alert(&#34;why&#34;)&lt;/script&gt;" in page
    # only the rows shown: page 2 of one local job each has local job 1 and its attempts only
    status, paged = get(server, f"/jobs/{job}?per_page=1&page=2")
    assert re.findall(r'<tr class="(?:localjob|attempts)" id="(lj-[^"]+)"', paged) == ["lj-1", "lj-1-attempts"]
    # the JSON API has them too (jim status --json)
    status, body = get(server, f"/api/jobs/{job}")
    assert json.loads(body) == json.loads(json.dumps(status_json(db.read(job))))


def test_job_page_shows_only_the_local_jobs_tried_more_than_once_when_asked(retried, server):
    db, job = retried
    with db.update(job) as rec:  # local job 2 was never resubmitted: a grid job with one more local job
        del rec.local(2).el.attrib["attempt"]
        rec.local(2).el.remove(rec.local(2).el.find("attempts"))
    status, page = get(server, f"/jobs/{job}")
    assert re.findall(r'<tr class="localjob" id="lj-(\d+)"', page) == ["0", "1", "2"]
    link = html.unescape(re.search(r'<a id="retried-filter" href="([^"]+)">show only those</a>', page).group(1))
    assert link == f"/jobs/{job}?retried=1"
    status, page = get(server, link)
    assert status == 200 and re.findall(r'<tr class="localjob" id="lj-(\d+)"', page) == ["0", "1"]
    assert 'id="retried-only"' in page
    assert re.search(r'<a id="retried-filter" href="/jobs/[^"?]+">show every local job</a>', page)
    status, page = get(server, f"/jobs/{job}?retried=1&state=RUNNING&order=attention")
    assert re.findall(r'<tr class="localjob" id="lj-(\d+)"', page) == ["0"]
    assert f'href="/jobs/{job}?state=PLANNED&amp;order=attention&amp;retried=1"' in page  # the filter is kept
    status, page = get(server, f"/jobs/{job}?retried=1&state=DONE")
    assert status == 200 and "No local jobs in state DONE tried more than once." in page
    assert get(server, f"/jobs/{job}?retried=yes")[0] == 400


def test_local_job_page_shows_its_attempts_and_history(retried, server):
    db, job = retried
    status, page = get(server, f"/jobs/{job}/2")
    assert status == 200
    assert_no_markup_from(page)
    assert f'<code id="local-id">{job}.2</code>' in page and '<span id="attempt">attempt 2</span>' in page
    assert f'<code id="tag">{local_tag(job, 2, 2)}</code>' in page
    first, current = attempt_rows_in(page)
    assert first.startswith("1 DONE 0 102 ") and EVIL_REASON in first and first.endswith(EVIL_USER)
    assert current.startswith("2 PLANNED") and current.endswith("current attempt")
    history = re.search(r'<ol class="history" id="history">(.*?)</ol>', page, re.S).group(1)
    assert "attempt 2: &lt;script&gt;" in history
    status, page = get(server, f"/jobs/{job}/1")
    assert re.search(r'<dd id="cool-off">waits until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</dd>', page)
    assert "current attempt: waits for its cool-off until" in attempt_rows_in(page)[1]


def test_local_job_page_errors_and_token(retried, server):
    db, job = retried
    assert get(server, f"/jobs/{job}/3")[0] == 404
    assert get(server, f"/jobs/{job}/99999999")[0] == 404
    for bad in (f"/jobs/{job}/-1", f"/jobs/{job}/0x1", f"/jobs/{job}/1/", f"/jobs/{job}/1234567890"):
        assert get(server, bad)[0] == 404, bad
    assert get(server, "/jobs/20990101-000000-abcdef12/0")[0] == 404
    status, body = get(server, f"/jobs/{job}/0", token=False)
    assert status == 403 and job not in body and "NODE_FAIL" not in body


def attempt_rows_in(page: str) -> list[str]:
    m = re.search(r'<div id="attempts">(.*?)</table>', page, re.S)
    assert m, "no attempts table"
    rows = re.findall(r'<tr class="attempt[^"]*">(.*?)</tr>', m.group(1), re.S)
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", r)).split()) for r in rows]
