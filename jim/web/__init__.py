"""``jim serve``: a read-only web view of jim's database.

A separate, long-running process (``jim serve [--host H] [--port N]``,
default ``127.0.0.1:8642``): the standard library's HTTP server (threads; a
process per connection for ``--site``), pages built with jinja2 templates, a
record or the index rendered through jim.xsl on the server.  It only ever
reads the database; nothing in it can change a job.  Who may look, and the
paths it answers: docs/web.md.

One module per job, each importing only those above it in this list:

* :mod:`jim.web.answers`: what a request is answered with (an answer, an
  error page, a redirect) and the headers every answer carries;
* :mod:`jim.web.render`: jim.xsl run on the server (a record or the index to
  HTML, and the policy the page needs);
* :mod:`jim.web.view`: what a page reads (the home a request may read, the
  index cache) and is made with (templates, stylesheet, style sheet);
* :mod:`jim.web.files`: the records, the index and the stylesheet as they
  are, and rendered;
* :mod:`jim.web.pages`: the pages of grid jobs and local jobs (HTML and
  JSON), and the route table;
* :mod:`jim.web.auth`: who may look: the token, the site's web server and
  the account a request is for, the Host check;
* :mod:`jim.web.handler`: the HTTP side: checks in order, dispatch, errors;
* :mod:`jim.web.server`: the three servers (token, Unix socket, site-wide),
  and :func:`start` / :func:`start_site` for tests;
* :mod:`jim.web.command`: ``jim serve`` itself (:func:`serve` with one
  :class:`ServeOptions`).
"""

from __future__ import annotations

from jim.web.command import ServeOptions, serve
from jim.web.server import start, start_site

__all__ = ["ServeOptions", "serve", "start", "start_site"]
