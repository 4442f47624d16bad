"""Timestamps in jim's files: ISO 8601 UTC with milliseconds, ``2026-11-22T07:17:52.529Z``.

The one owner of the format: the database, the status views and the web
pages write and read times only through :func:`now_iso` and :func:`parse_iso`.
"""

from __future__ import annotations

import datetime as _dt
import functools
import time

_UTC = _dt.UTC
_last: tuple[int, str] = (-1, "")


def now_iso(t: float | None = None) -> str:
    """``t`` (default: now) as jim writes times; formatted once per millisecond (it runs per local job)."""
    global _last
    ms = int((time.time() if t is None else t) * 1000)
    if ms != _last[0]:
        stamp = _dt.datetime.fromtimestamp(ms / 1000, _UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        _last = (ms, stamp)
    return _last[1]


@functools.lru_cache(maxsize=8192)
def _parse(text: str) -> float | None:
    try:
        when = _dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_UTC)
    return when.timestamp()


def parse_iso(text: str | None) -> float | None:
    """Seconds since the epoch of a time jim wrote; None for none and for text that is no time."""
    return _parse(text) if text else None
