"""The text of ``jim status ID`` made from ``jim status --json``'s full rows: the oracle of the tests.

:func:`jim.statustext.render_job`, the one renderer, reads only what it shows from the record.  The text
must be the same as the one made from every local job's full row (:func:`jim.status.status_json`):
:func:`render_status` builds that, with the renderer's own view of rows (``_View``, ``_render``), so a
test can compare the two, and can render crafted rows.
"""

from __future__ import annotations

import time
from typing import Any

from jim.status import phase_totals, sort_key
from jim.statustext import _attempt_count, _render, _View, _waits


def render_status(data: dict[str, Any], *, rows: int = 20, now: float | None = None) -> str:
    """The text of :func:`jim.statustext.render_job`, from the status JSON ``data``."""
    now = time.time() if now is None else now
    locals_ = data.get("localJobs") or []
    ordered = sorted(locals_, key=lambda lj: sort_key(lj, now))
    view = _View(
        reporting=sum(1 for lj in locals_ if lj.get("progress")),
        phases=phase_totals(locals_),
        by_hand=sum(1 for lj in locals_ for a in lj.get("attempts") or () if a.get("retryBy")),
        waiting=sum(1 for lj in locals_ if _waits(lj, now)),
        ordered=ordered,
        retried=[lj for lj in ordered if _attempt_count(lj) > 1],
        full=lambda row: row,
        attempts=lambda row: len(row.get("attempts") or ()),
    )
    return _render(data, view, rows, now)
