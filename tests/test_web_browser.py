"""The two browsable views in a real headless Chromium (Debian's ``chromium`` package).

Grid jobs run for real on the fork backend with ``examples/mc_driver.py``;
the pages are loaded by Chromium:

* the per-job page of ``jim serve`` (jinja2);
* the raw XML record rendered by the browser through ``jim.xsl``, served by
  ``jim serve`` (``/db/<id>.xml``), by a static web server
  (``python -m http.server`` on the db directory) and from disk (``file://``,
  which Chromium allows only with ``--allow-file-access-from-files``).

Chromium is driven from the command line: ``--dump-dom`` prints the DOM after
the XSLT ran, ``--screenshot`` writes a PNG under
``$JIM_TEST_OUTPUT/screenshots/``.  It is started with ``--enable-features=XSLT``
(Chromium is phasing XSLT out; the flag keeps it on while the code is there)
and without the deprecation banner, which would cover the page in screenshots.

tests/services/chromium/start.sh installs Chromium; in CI a missing Chromium
fails these tests, elsewhere they are skipped.
"""

from __future__ import annotations

import html
import html.parser
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from support.env import OUTPUT, REPO, require_service

MC = REPO / "examples" / "mc_driver.py"
SHOTS = OUTPUT / "screenshots"
CHROMIUM = os.environ.get("JIM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
    "--enable-features=XSLT",
    "--disable-features=GenerateXSLTWarningBanner",
]

pytestmark = pytest.mark.slow


def _chromium_works() -> bool:
    if not CHROMIUM:
        return False
    try:
        return subprocess.run([CHROMIUM, "--version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class Chromium:
    def __init__(self, path: str, tmp: Path):
        self.path = path
        self.tmp = tmp
        self.n = 0

    def load(self, url: str, shot: str, *args: str, timeout: float = 90) -> str:
        """Load ``url`` once: the DOM after loading (and, for XML, after the XSLT), serialized;
        and a screenshot, ``$JIM_TEST_OUTPUT/screenshots/<shot>.png``."""
        self.n += 1
        profile = self.tmp / f"profile{self.n}"
        SHOTS.mkdir(parents=True, exist_ok=True)
        png = SHOTS / f"{shot}.png"
        png.unlink(missing_ok=True)
        proc = subprocess.run(
            [
                self.path,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--window-size=1280,900",
                f"--screenshot={png}",
                "--dump-dom",
                *args,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.tmp,
        )
        shutil.rmtree(profile, ignore_errors=True)
        assert proc.returncode == 0, f"chromium failed on {url}: {proc.stderr[-2000:]}"
        assert png.exists() and png.stat().st_size > 5000, f"no screenshot of {url}: {proc.stderr[-2000:]}"
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        return proc.stdout


@pytest.fixture(scope="session")
def chromium(tmp_path_factory):
    require_service(
        _chromium_works(),
        f"Debian's chromium ({CHROMIUM or 'not on PATH'}; tests/services/chromium/start.sh installs it)",
    )
    return Chromium(CHROMIUM, tmp_path_factory.mktemp("chromium"))


def _first_line(proc: subprocess.Popen, pattern: str, what: str) -> re.Match:
    line = proc.stdout.readline()
    m = re.search(pattern, line)
    if not m:
        proc.kill()
        raise AssertionError(f"{what} did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return m


class Served(NamedTuple):
    base: str  # no trailing slash
    token: str

    def url(self, path: str) -> str:
        """``path`` with the token: the first visit trades it for a cookie and is redirected without it."""
        return f"{self.base}{path}{'&' if '?' in path else '?'}token={self.token}"


@pytest.fixture
def served(jim_env):
    """The real ``jim serve`` on a free port: its base URL and token."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "jim", "serve", "--port", "0"],
        env=jim_env.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    m = _first_line(proc, r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", "jim serve")
    yield Served(m.group(1), m.group(2))
    proc.terminate()
    proc.communicate(timeout=10)


@pytest.fixture
def static(jim_env):
    """``python -m http.server`` on jim's db directory: its base URL."""
    db = jim_env.home / "db"
    db.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "JIM_HOME"},
    )
    m = _first_line(proc, r"port (\d+)", "python -m http.server")
    yield f"http://127.0.0.1:{m.group(1)}"
    proc.terminate()
    proc.communicate(timeout=10)


# ---------------------------------------------------------------------------
# reading a dumped DOM
# ---------------------------------------------------------------------------


class Page(html.parser.HTMLParser):
    def __init__(self, dom: str):
        super().__init__(convert_charrefs=True)
        self.dom = dom
        self.tags: list[tuple[str, dict]] = []
        self.texts: list[str] = []
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.texts.append(data)

    @property
    def text(self) -> str:
        return " ".join(" ".join(self.texts).split())

    def by_id(self, ident: str) -> str:
        m = re.search(rf'<(\w+)[^>]*\bid="{re.escape(ident)}"[^>]*>(.*?)</\1>', self.dom, re.S)
        assert m, f"no element #{ident} in the page:\n{self.dom[:3000]}"
        inner = re.sub(r"</?(span|b|code|small|a|time)\b[^>]*>", "", m.group(2))
        return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", inner)).split())

    def rows(self) -> dict[int, str]:
        """Text of each local job row, by index."""
        return {int(i): self.by_id(f"lj-{i}") for i in re.findall(r'<tr class="localjob" id="lj-(\d+)"', self.dom)}


def views(jim_env, job_id: str, served: Served, static: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every way a person can look at the grid job in a browser: name -> (url, extra chromium flags)."""
    return {
        "serve-page": (served.url(f"/jobs/{job_id}"), ()),
        "serve-xslt": (served.url(f"/db/{job_id}.xml"), ()),
        "static-xslt": (f"{static}/{job_id}.xml", ()),
        "file-xslt": ((jim_env.home / "db" / f"{job_id}.xml").as_uri(), ("--allow-file-access-from-files",)),
    }


def mc_rsl(events: int, per_job: int, seconds_per_event: float, name: str) -> str:
    return (
        f"&(executable={MC})(arguments=--seconds-per-event {seconds_per_event})"
        f"(jimtype=montecarlo)(events={events})(eventsperjob={per_job})(outputs=*.dat)"
        f'(jobname="{name}")'
    )


# ---------------------------------------------------------------------------


def test_finished_grid_job(jim_env, chromium, served, static):
    job_id = jim_env.submit(mc_rsl(40, 10, 0.002, "browser test: finished"))
    out = jim_env.wait(job_id, timeout=90)
    assert out["JOB_STATE"] == "DONE", out
    for view, (url, flags) in views(jim_env, job_id, served, static).items():
        page = Page(chromium.load(url, f"finished-{view}", *flags))
        assert page.by_id("grid-state") == "DONE", view
        assert page.by_id("grid-exit") == "0", view
        assert page.by_id("jobname") == "browser test: finished", view
        assert page.by_id("local-count") == "4", view
        rows = page.rows()
        assert sorted(rows) == [0, 1, 2, 3], view
        for row in rows.values():
            assert "DONE" in row and "wrapper-exit-file" in row, (view, row)
            for phase in ("generation", "d0gstar", "reconstruction"):
                assert f"{phase}: 10 of 10" in row, (view, phase, row)
        assert page.by_id("overall-count") == "120 of 120", view
        assert page.by_id("ended-count") == "4 of 4", view
        assert len([t for t, a in page.tags if t == "progress"]) >= 3 * 4, view
        assert not any(t == "meta" and a.get("http-equiv") == "refresh" for t, a in page.tags), view


def test_running_grid_job(jim_env, chromium, served, static):
    # 2 local jobs of 40 events, 2 s an event: generation takes 8 s, d0gstar 56 s; the views ~20 s
    job_id = jim_env.submit(mc_rsl(80, 40, 2, "browser test: running"))
    deadline = time.monotonic() + 60
    while True:
        st = jim_env.status(job_id)
        d0 = [p for lj in st["localJobs"] for p in lj["progress"] if p["name"] == "d0gstar" and p["done"] >= 1]
        if d0 and all(lj["state"] == "RUNNING" for lj in st["localJobs"]):
            break
        assert time.monotonic() < deadline, f"no d0gstar progress in time: {st}"
        time.sleep(0.3)
    for view, (url, flags) in views(jim_env, job_id, served, static).items():
        page = Page(chromium.load(url, f"running-{view}", *flags))
        assert page.by_id("grid-state") == "ACTIVE", view
        assert page.by_id("local-count") == "2", view
        rows = page.rows()
        assert sorted(rows) == [0, 1], view
        for row in rows.values():
            assert "RUNNING" in row, (view, row)
            assert "generation: 40 of 40" in row, (view, row)
            assert "reconstruction: 0 of 40" in row, (view, row)
        done = [int(m) for row in rows.values() for m in re.findall(r"d0gstar: (\d+) of 40", row)]
        assert len(done) == 2 and 1 <= max(done) < 40, (view, rows)
        overall = re.fullmatch(r"(\d+) of 240", page.by_id("overall-count"))
        assert overall and 81 <= int(overall.group(1)) < 160, (view, page.by_id("overall-count"))
        assert page.by_id("ended-count") == "0 of 2", view
        refresh = [a.get("content") for t, a in page.tags if t == "meta" and a.get("http-equiv") == "refresh"]
        assert refresh == ["5"], view
    assert jim_env.poll(job_id)["JOB_STATE"] == "ACTIVE"  # it really was running all along


EVIL_NAME = """<script>document.title="pwned"</script> & 'single' "double" <img src=x onerror="document.title='img'">"""
EVIL_ARGS = ["<script>document.title='arg'</script>", "a&b&amp;c", 'q"uote', "<b>bold</b>"]


def _rsl_quote(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def test_script_quotes_and_ampersands_render_as_text(jim_env, chromium, served, static):
    rsl = (
        f"&(executable=/bin/echo)(arguments={' '.join(_rsl_quote(a) for a in EVIL_ARGS)})"
        f"(jobname={_rsl_quote(EVIL_NAME)})"
    )
    job_id = jim_env.submit(rsl)
    assert jim_env.wait(job_id, timeout=60)["JOB_STATE"] == "DONE"
    assert jim_env.status(job_id)["name"] == EVIL_NAME
    for view, (url, flags) in views(jim_env, job_id, served, static).items():
        dom = chromium.load(url, f"escaping-{view}", *flags)
        page = Page(dom)
        tags = [t for t, _ in page.tags]
        # nothing from the job became markup, so nothing ran: the title is jim's
        assert "script" not in tags and "img" not in tags, view
        assert not any(k.startswith("on") for _, a in page.tags for k in a), view
        title = re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
        assert title.startswith("jim grid job " + job_id), (view, title)
        assert page.by_id("jobname") == EVIL_NAME, view
        assert page.by_id("local-count") == "1", view
        description = page.by_id("description")
        for arg in EVIL_ARGS:
            assert arg in description, (view, arg, description)
        assert "&lt;script&gt;document.title=\"pwned\"&lt;/script&gt; &amp; 'single'" in dom, view


def test_index_pages_in_the_browser(jim_env, chromium, served):
    ids = [jim_env.submit('&(executable=/bin/true)(jobname="index <b>%d</b>")' % k) for k in range(3)]
    for job_id in ids:
        jim_env.wait(job_id, timeout=60)
    page = Page(chromium.load(served.url("/"), "index-serve"))
    listed = re.findall(r'href="/jobs/([0-9a-f-]+)"', page.dom)
    assert sorted(listed) == sorted(ids) and page.by_id("total") == "3"
    assert "index <b>2</b>" in page.text and "index &lt;b&gt;2&lt;/b&gt;" in page.dom
    xml_index = Page(chromium.load(served.url("/db/index.xml"), "index-xslt"))  # the index through jim.xsl
    assert xml_index.by_id("total") == "3"
    assert sorted(re.findall(r'href="([0-9a-f-]+)\.xml"', xml_index.dom)) == sorted(ids)
