"""The monitor's passes as ``jim metrics`` and the admin's view see them: ``cache/monitor.pass``.

The monitor (:func:`jim.monitor.run`) tells a :class:`PassStamp` of every
pass it makes; the stamp writes one small JSON file when :data:`EVERY`
seconds have gone by since it last wrote (and after the first pass, and
after a pass that failed when the last one worked or the other way round),
so a monitor making a pass every few seconds costs one atomic write of some
80 bytes per :data:`EVERY` seconds, nothing per pass::

    {"at": 1764400000.2, "duration": 0.012, "slowest": 0.31, "ok": true}

``at``: when the last pass written ended (epoch); ``duration``: how long it
took; ``slowest``: the slowest pass since the previous write; ``ok``: whether
it worked.  The age of the last pass is therefore known to :data:`EVERY`
seconds.  :func:`read` is the reader (bounded, never through a link, no
waiting on a FIFO).
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

from jim.safeio import atomic_write, read_regular

#: Seconds between two writes of the stamp, at most one write per this many while passes go on.
EVERY = 10.0
FILE = "monitor.pass"


def path(home: str | os.PathLike[str]) -> str:
    return os.path.join(home, "cache", FILE)


class PassStamp:
    """What one monitor remembers of its passes between two writes of the stamp."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.path = path(home)
        self.written: float | None = None
        self.ok = True
        self.slowest = 0.0

    def passed(self, duration: float, *, ok: bool, now: float | None = None) -> None:
        """A pass of ``duration`` seconds ended now; the stamp is written when it is due."""
        now = time.time() if now is None else now
        self.slowest = max(self.slowest, duration)
        due = self.written is None or now - self.written >= EVERY or ok != self.ok
        self.ok = ok
        if not due:
            return
        data = {"at": round(now, 3), "duration": round(duration, 6), "slowest": round(self.slowest, 6), "ok": ok}
        try:
            atomic_write(self.path, json.dumps(data), sync=False)  # (lost in a crash: the next pass writes it)
        except OSError:
            return
        self.written, self.slowest = now, 0.0


def read(home: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The last stamp of the monitor of ``home`` (``at``, ``duration``, ``slowest``, ``ok``), or None."""
    data = read_regular(path(home), 4096)
    try:
        raw = json.loads(data) if data else None
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    out: dict[str, Any] = {"ok": raw.get("ok") is True}
    for key in ("at", "duration", "slowest"):
        value = raw.get(key)
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            return None
        out[key] = float(value)
    return out
