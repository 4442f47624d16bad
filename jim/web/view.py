"""What a page of ``jim serve`` reads and is made with.

* :class:`View`: the jim home one request is answered from, chosen by who
  the request was authenticated as (:mod:`jim.web.auth`), with its database
  and its :class:`IndexCache`;
* :class:`IndexCache`: the index, newest first, re-read only when
  ``db/index.xml`` changed (the index page never reads every record);
* :class:`Assets`: what every page of one server is made with, loaded once:
  the jinja2 templates (``jim/templates/``, autoescaped: every value from a
  record is HTML-escaped; an undefined name is an error), jim.xsl as served
  and compiled (:class:`jim.web.render.Renderer`), the style sheet;
* :class:`Request`: the three together with the query, what a page
  (:mod:`jim.web.pages`, :mod:`jim.web.files`) is given.

Nothing here writes: the database is read without locks (records are
replaced atomically, so a read sees a whole file).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib import resources

import jinja2

from jim import __version__
from jim.adapters.cache import AdapterCache
from jim.db import Database
from jim.paths import Home
from jim.statustext import duration
from jim.web.render import Renderer


class IndexCache:
    """``Database.list()`` (the index, newest first), re-read only when ``index.xml`` changed."""

    def __init__(self, db: Database):
        self.db = db
        self._lock = threading.Lock()
        self._key: tuple[object, ...] | None = None
        self._jobs: list[dict[str, str]] = []
        self._counts: dict[str, int] = {}

    def _signature(self) -> tuple[object, ...] | None:
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
        """The grid jobs of the index, newest first, and how many there are in each state."""
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


class View:
    """The jim home one request is answered from (whose owner the request was authenticated as;
    ``user``: that account's name, shown in the page header, for a site instance).  ``homes``: a
    site instance's ``/metrics`` only, every account's home of that pattern (no home of its own)."""

    def __init__(self, home: Home, lock_timeout: float, user: str | None = None, homes: str | None = None):
        self.home = home
        self.db = Database(home, lock_timeout)
        self.index_cache = IndexCache(self.db)
        self.user = user
        self.homes = homes

    def capacity(self) -> dict[str, object] | None:
        """What the batch system had when a jim command of this home last asked it (``jim advertise``,
        the ARC information provider...: ``cache/<adapter>-capacity.json``, the newest): the adapter,
        when, and the figures (None: it could not say).  Never asks the batch system: a page must
        not wait on it."""
        try:
            found = sorted(self.home.cache.glob("*-capacity.json"), key=lambda p: p.stat().st_mtime)
        except OSError:
            return None
        for path in reversed(found):
            adapter = path.name[: -len("-capacity.json")]
            last = AdapterCache(self.home, adapter).last_capacity()
            if last is not None:
                return {"adapter": adapter, "at": last[0], "capacity": last[1]}
        return None


def _ts(value: str | None) -> str:
    """``2026-11-22T07:17:52.529Z`` -> ``2026-11-22 07:17:52``."""
    if not value:
        return ""
    return value.replace("T", " ")[:19]


def _pct(fraction: float | None) -> str:
    return "" if fraction is None else f"{100 * fraction:.1f}%"


def make_env() -> jinja2.Environment:
    """The templates (``jim/templates/``): autoescaped, and an undefined name is an error."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("jim", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ts"] = _ts
    env.filters["duration"] = duration
    env.filters["pct"] = _pct
    env.globals["version"] = __version__
    return env


@dataclass(frozen=True)
class Assets:
    """What every page of one server is made with, loaded once: the templates, jim.xsl (as served
    and compiled), the style sheet."""

    env: jinja2.Environment
    stylesheet: bytes
    renderer: Renderer
    css: bytes

    @classmethod
    def load(cls) -> Assets:
        stylesheet = resources.files("jim").joinpath("data", "jim.xsl").read_bytes()
        css = resources.files("jim").joinpath("templates", "jim.css").read_bytes()
        return cls(make_env(), stylesheet, Renderer(stylesheet), css)


@dataclass(frozen=True)
class Request:
    """One request a page answers: the home it may read, the server's assets, the query."""

    view: View
    assets: Assets
    query: dict[str, str]
