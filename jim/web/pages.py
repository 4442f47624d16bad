"""The pages of ``jim serve``: what each path answers, read from one jim home.

Routes (:data:`ROUTES`; GET and HEAD: see :mod:`jim.web.handler`)::

    /                       grid jobs, newest first: ?state=ACTIVE&page=2&per_page=50
    /jobs/<id>              one grid job (HTML); refreshes itself while the grid job is
                            not DONE or FAILED; local jobs: ?state=FAILED&order=attention&page=..,
                            ?retried=1 for those tried more than once
    /jobs/<id>/<k>          local job k of a grid job (HTML): its state history, every attempt
    /api/jobs               JSON list of grid jobs as ``jim list --json`` prints it (?state=,
                            and ?page=&per_page= to page; X-Total-Count gives the total)
    /api/jobs/<id>          JSON: what ``jim status --json`` prints (compact; ?pretty to indent)
    /db/..., /static/...    the records, the index, the stylesheets: :mod:`jim.web.files`
    /metrics                jim's counts in the Prometheus text format (docs/metrics.md)

A page is a function of a :class:`~jim.web.view.Request` (the home it may
read, the server's assets, the query) and of the parts its path names; it
gives an :class:`~jim.web.answers.Answer`, or raises
:class:`~jim.web.answers.HTTPError` (a bad query: 400; no such page: 404),
:class:`~jim.errors.JobNotFound`, :class:`PermissionError` or
:class:`~jim.errors.JimError`.  Who may look is settled before a page runs
(:mod:`jim.web.auth`).

Job ids in a path must be jim job ids (:mod:`jim.jobid`): no path from a
request is ever joined to a directory otherwise.  The index page reads only
``db/index.xml`` (:class:`~jim.web.view.IndexCache`), never every record; the
page of a grid job of 10,000 local jobs builds rows only for those it shows
(counted and filtered in C by XPath).  Every value from a record is
HTML-escaped by the templates.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, NamedTuple

from lxml import etree

from jim.jobid import JOB_ID_PATTERN, valid_job_id
from jim.record import LocalJob, child, required
from jim.states import GramState
from jim.status import ORDER as LOCAL_ORDER
from jim.status import elapsed, job_summary, local_row, parse_time, progress_of, sort_key, status_json
from jim.statustext import duration
from jim.web import files
from jim.web.answers import CSP_HTML, CSP_OTHER, HTML, Answer, HTTPError
from jim.web.view import Request

REFRESH_JOB_S = 5  # a job page refreshes itself this often while the grid job is active
REFRESH_INDEX_S = 15  # the index, while a grid job on the page is active
PER_PAGE = 50  # grid jobs per index page
MAX_PER_PAGE = 1000
LOCAL_PER_PAGE = 500  # local jobs per job page
MAX_LOCAL_PER_PAGE = 10000
MAX_PAGE = 10**9
GRID_STATES = [s.name for s in GramState]
LOCAL_STATES = sorted(LOCAL_ORDER, key=lambda state: LOCAL_ORDER[state])
TERMINAL_GRID = ("DONE", "FAILED")
ENDED_LOCAL = ("DONE", "FAILED", "CANCELLED", "LOST")

# evaluated in C: the page of a grid job of 10,000 local jobs builds rows only for those it shows
_RETRIED = etree.XPath("count(localjobs/localjob/attempts)")  # (<attempts> holds one <attempt> or more)
_COOL_OFFS = etree.XPath("localjobs/localjob[@retryAfter]")


# ---------------------------------------------------------------------------
# Helpers of the pages
# ---------------------------------------------------------------------------


def _html(req: Request, template: str, **context: Any) -> Answer:
    body = req.assets.env.get_template(template).render(viewer=req.view.user, **context).encode()
    return Answer(HTTPStatus.OK, {"Content-Type": HTML, "Content-Security-Policy": CSP_HTML}, body)


def _json(obj: Any, query: dict[str, str]) -> Answer:
    # compact unless ?pretty: indenting costs 7x the time for a grid job of 10,000 local jobs
    text = json.dumps(obj, indent=2) if "pretty" in query else json.dumps(obj, separators=(",", ":"))
    headers = {"Content-Type": "application/json; charset=utf-8", "Content-Security-Policy": CSP_OTHER}
    return Answer(HTTPStatus.OK, headers, (text + "\n").encode())


def _int(query: dict[str, str], name: str, default: int, hi: int) -> int:
    """A whole number from 1 to ``hi`` in the query (``default`` when absent); 400 otherwise."""
    raw = query.get(name, "")
    if raw == "":
        return default
    if not raw.isdigit() or len(raw) > 10 or not 1 <= int(raw) <= hi:
        raise HTTPError(HTTPStatus.BAD_REQUEST, f"{name} must be a whole number from 1 to {hi}")
    return int(raw)


def _one_of(query: dict[str, str], name: str, allowed: list[str] | tuple[str, ...], why: str) -> str:
    """The query's ``name`` (``""`` when absent) if ``allowed``; 400 with ``why`` otherwise."""
    value = query.get(name, "")
    if value and value not in allowed:
        raise HTTPError(HTTPStatus.BAD_REQUEST, why)
    return value


def _page_count(n: int, per_page: int, page: int, of: str = "") -> int:
    """How many pages ``n`` rows make (at least one); 404 when ``page`` is beyond them."""
    pages = max(1, math.ceil(n / per_page))
    if page > pages:
        there = "is 1 page" if pages == 1 else f"are {pages} pages"
        raise HTTPError(HTTPStatus.NOT_FOUND, f"no page {page}{of}: there {there}")
    return pages


def _url(path: str, **params: Any) -> str:
    q = {k: v for k, v in params.items() if v not in (None, "")}
    return path + ("?" + urllib.parse.urlencode(q) if q else "")


def _page_links(path: str, params: dict[str, Any], page: int, pages: int) -> dict[str, str | None]:
    def url(p: int) -> str:
        return _url(path, **params, **({"page": p} if p > 1 else {}))

    return {
        "first": url(1) if page > 1 else None,
        "prev": url(page - 1) if page > 1 else None,
        "next": url(page + 1) if page < pages else None,
        "last": url(pages) if page < pages else None,
        "self": url(page),
    }


def _ago(value: str | None, now: float) -> str:
    t = parse_time(value)
    return "" if t is None else duration(now - t) + " ago"


def _local_brief(el: etree._Element) -> dict[str, Any]:
    """What :func:`jim.status.sort_key` looks at, of one <localjob>."""
    return {
        "index": int(required(el, "index")),
        "state": el.get("state"),
        "started": el.get("started"),
        "submitted": el.get("submitted"),
        "ended": el.get("ended"),
        "progress": progress_of(el),
    }


def _row(el: etree._Element, now: float) -> dict[str, Any]:
    """One local job as ``jim status --json`` shows it, plus its wall time so far."""
    row = local_row(LocalJob(el))
    row["_elapsed"] = elapsed(row, now)
    return row


def _cooling(row: Any, now: float) -> bool:
    """Whether a local job (a row of :func:`jim.status.local_row`, or a <localjob>'s attributes)
    waits for a retry's cool-off."""
    return bool(row.get("state") == "PLANNED" and (parse_time(row.get("retryAfter")) or 0.0) > now)


def _retries(root: etree._Element, retries: int, now: float) -> dict[str, Any] | None:
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


# ---------------------------------------------------------------------------
# The grid jobs: the index page and the list in JSON
# ---------------------------------------------------------------------------


def _grid_jobs(req: Request) -> tuple[list[dict[str, str]], dict[str, int], str]:
    """The grid jobs of the index (of ``?state=`` only, if given), the counts per state, that state."""
    state = req.query.get("state", "").upper()
    if state and state not in GRID_STATES:
        raise HTTPError(HTTPStatus.BAD_REQUEST, "state must be one of " + ", ".join(GRID_STATES))
    jobs, counts = req.view.index_cache.get()
    if state:
        jobs = [j for j in jobs if j.get("state") == state]
    return jobs, counts, state


def index(req: Request) -> Answer:
    """``/``: a page of grid jobs, newest first."""
    jobs, counts, state = _grid_jobs(req)
    per_page = _int(req.query, "per_page", PER_PAGE, MAX_PER_PAGE)
    page = _int(req.query, "page", 1, MAX_PAGE)
    pages = _page_count(len(jobs), per_page, page)
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
    return _html(
        req,
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
        home=str(req.view.home.root),
        site=_site(req, now=time.time()),
    )


def _site(req: Request, now: float) -> dict[str, object] | None:
    """The batch system's capacity for the index page (last known; see :meth:`View.capacity`), dated."""
    known = req.view.capacity()
    if known is None:
        return None
    at = known["at"]
    age = duration(max(0.0, now - at)) if isinstance(at, float) else ""
    return {**known, "age": age}


def api_list(req: Request) -> Answer:
    """``/api/jobs``: the grid jobs as ``jim list --json`` prints them (a page of them with ``?page=``
    or ``?per_page=``); ``X-Total-Count``: how many in all."""
    jobs, _, _ = _grid_jobs(req)
    total = len(jobs)
    if "page" in req.query or "per_page" in req.query:
        per_page = _int(req.query, "per_page", PER_PAGE, MAX_PER_PAGE)
        page = _int(req.query, "page", 1, MAX_PAGE)
        jobs = jobs[(page - 1) * per_page : page * per_page]
    answer = _json(jobs, req.query)
    answer.headers["X-Total-Count"] = str(total)
    return answer


# ---------------------------------------------------------------------------
# One grid job: its page, its local jobs, its JSON
# ---------------------------------------------------------------------------


class _LocalQuery(NamedTuple):
    """Which local jobs a grid job's page shows, and how."""

    state: str  # only those in this state ("": all)
    order: str  # "index", or "attention": failed and slowest first
    retried: str  # "1": only those tried more than once
    per_page: int
    page: int

    @classmethod
    def of(cls, query: dict[str, str]) -> _LocalQuery:
        state = query.get("state", "").upper()
        if state and state not in LOCAL_STATES:
            raise HTTPError(HTTPStatus.BAD_REQUEST, "state must be one of " + ", ".join(LOCAL_STATES))
        order = query.get("order", "index")
        if order not in ("index", "attention"):
            raise HTTPError(HTTPStatus.BAD_REQUEST, "order must be index or attention")
        retried = _one_of(query, "retried", ("1",), "retried must be 1 (only the local jobs tried more than once)")
        per_page = _int(query, "per_page", LOCAL_PER_PAGE, MAX_LOCAL_PER_PAGE)
        return cls(state, order, retried, per_page, _int(query, "page", 1, MAX_PAGE))

    @property
    def order_param(self) -> str | None:
        return self.order if self.order != "index" else None

    def params(self) -> dict[str, Any]:
        """The query of this view, without the page and without defaults (for the pager's links)."""
        per_page = self.per_page if self.per_page != LOCAL_PER_PAGE else None
        return {"state": self.state, "retried": self.retried, "order": self.order_param, "per_page": per_page}

    def select(self, elements: list[etree._Element], now: float) -> list[etree._Element]:
        """The <localjob> elements this view shows, in its order."""
        shown = [el for el in elements if not self.state or el.get("state") == self.state]
        if self.retried:
            shown = [el for el in shown if el.find("attempts") is not None]
        if self.order == "attention":
            keyed = [(sort_key(_local_brief(el), now), el) for el in shown]
            keyed.sort(key=lambda kv: kv[0])
            shown = [el for _, el in keyed]
        return shown


def _local_filters(base: str, q: _LocalQuery, counts: dict[str, int], n: int) -> list[dict[str, Any]]:
    """The filters of a grid job's page: all local jobs, and those of each state there are."""
    order, retried = q.order_param, q.retried
    filters: list[dict[str, Any]] = [
        {"state": "", "label": "all", "count": n, "url": _url(base, order=order, retried=retried)}
    ]
    filters += [
        {"state": s, "label": s, "count": counts[s], "url": _url(base, state=s, order=order, retried=retried)}
        for s in LOCAL_STATES
        if counts.get(s)
    ]
    return filters


def _local_orders(base: str, q: _LocalQuery) -> list[dict[str, str]]:
    return [
        {"order": "index", "label": "by index", "url": _url(base, state=q.state, retried=q.retried)},
        {
            "order": "attention",
            "label": "failed and slowest first",
            "url": _url(base, state=q.state, order="attention", retried=q.retried),
        },
    ]


def job(req: Request, job_id: str) -> Answer:
    """``/jobs/<id>``: one grid job, and a page of its local jobs."""
    record = req.view.db.read(job_id)
    now = time.time()
    q = _LocalQuery.of(req.query)
    data, phases = job_summary(record)
    elements = list(child(record.root, "localjobs"))
    shown = q.select(elements, now)
    pages = _page_count(len(shown), q.per_page, q.page, " of local jobs")
    rows = [_row(el, now) for el in shown[(q.page - 1) * q.per_page : q.page * q.per_page]]
    base = f"/jobs/{job_id}"
    counts = data["counts"]
    retries = _retries(record.root, data.get("retries") or 0, now)
    if retries is not None:  # the filter that shows only them, or all again
        retries["url"] = _url(base, state=q.state, order=q.order_param, retried="" if q.retried else "1")
    return _html(
        req,
        "job.html",
        job=data,
        rows=rows,
        shown=len(shown),
        lstate=q.state,
        order=q.order,
        orders=_local_orders(base, q),
        page=q.page,
        pages=pages,
        links=_page_links(base, q.params(), q.page, pages),
        filters=_local_filters(base, q, counts, len(elements)),
        phases=phases,
        ended=sum(counts.get(s, 0) for s in ENDED_LOCAL),
        n=len(elements),
        description=record.description(),
        source=record.root.findtext("description/source") or "",
        source_format=record.source_format,
        history=[{"state": g.get("state"), "at": g.get("at")} for g in record.root.findall("history/grid")],
        updated_ago=_ago(data.get("updated"), now),
        refresh=REFRESH_JOB_S if data["state"] not in TERMINAL_GRID else None,
        retries=retries,
        retried=q.retried,
        every_url=_url(base, state=q.state, order=q.order_param),
        waiting=frozenset(r["index"] for r in rows if _cooling(r, now)),
    )


def local_job(req: Request, job_id: str, index: str) -> Answer:
    """``/jobs/<id>/<k>``: one local job, its state history and every attempt."""
    record = req.view.db.read(job_id)
    now = time.time()
    elements = child(record.root, "localjobs")
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
    state = record.state.name
    return _html(
        req,
        "local.html",
        job={"id": record.id, "name": record.get("name"), "state": state},
        lj=row,
        history=history,
        waits=_cooling(row, now),
        refresh=REFRESH_JOB_S if state not in TERMINAL_GRID else None,
    )


def api_job(req: Request, job_id: str) -> Answer:
    """``/api/jobs/<id>``: what ``jim status --json`` prints."""
    return _json(status_json(req.view.db.read(job_id)), req.query)


def metrics(req: Request) -> Answer:
    """``/metrics``: what ``jim metrics`` prints, of this view's home (a site instance's: of every
    account's home, ``jim metrics --all-users``); see docs/metrics.md."""
    from jim import metrics as prometheus  # (lazy: the Prometheus client library, for this page only)

    text = prometheus.scrape(None, req.view.homes) if req.view.homes else prometheus.scrape(req.view.home)
    return Answer(HTTPStatus.OK, {"Content-Type": prometheus.CONTENT_TYPE, "Content-Security-Policy": CSP_OTHER}, text)


# ---------------------------------------------------------------------------
# The routes
# ---------------------------------------------------------------------------

Page = Callable[..., Answer]  # (a Request, then the named groups of its path pattern)

_ID = JOB_ID_PATTERN
ROUTES: tuple[tuple[re.Pattern[str], Page], ...] = (
    (re.compile(r"/"), index),
    (re.compile(rf"/jobs/(?P<job_id>{_ID})"), job),
    (re.compile(rf"/jobs/(?P<job_id>{_ID})/(?P<index>[0-9]{{1,9}})"), local_job),
    (re.compile(r"/api/jobs"), api_list),
    (re.compile(rf"/api/jobs/(?P<job_id>{_ID})"), api_job),
    (re.compile(rf"/db/(?P<job_id>{_ID})\.xml"), files.db_record),
    (re.compile(rf"/db/(?P<job_id>{_ID})\.html"), files.db_record_html),
    (re.compile(r"/db/index\.html"), files.db_index_html),
    (re.compile(r"/db/jim\.xsl"), files.db_stylesheet),
    (re.compile(r"/db/index\.xml"), files.db_index),
    (re.compile(r"/static/jim\.css"), files.static_css),
    (re.compile(r"/metrics"), metrics),
)


def find(path: str) -> tuple[Page, dict[str, str]]:
    """The page of a request path and the parts the path names; 404 when there is none."""
    for pattern, page in ROUTES:
        m = pattern.fullmatch(path)
        if m:
            parts = m.groupdict()
            job_id = parts.get("job_id")
            if job_id is not None and not valid_job_id(job_id):  # belt and braces: the pattern already did
                raise HTTPError(HTTPStatus.NOT_FOUND, "not a jim job id")
            return page, parts
    raise HTTPError(HTTPStatus.NOT_FOUND, "no such page")


def is_page(path: str) -> bool:
    """Whether a request path names a page (whatever the query)."""
    return any(pattern.fullmatch(path) for pattern, _page in ROUTES)
