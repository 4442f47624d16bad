"""Fault injection for tests: ``JIM_FAULT=<point>[:<n>]`` kills the process there.

With ``JIM_FAULT=worker-after-submit:2`` the second time the worker reaches
the point ``worker-after-submit`` it SIGKILLs itself, exactly as a crash
would.  Several faults may be given, comma separated.  Unset in production:
then :func:`point` is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

_hits: dict[str, int] = {}


def point(name: str) -> None:
    spec = os.environ.get("JIM_FAULT")
    if not spec:
        return
    for item in spec.split(","):
        where, _, nth = item.strip().partition(":")
        if where != name:
            continue
        _hits[name] = _hits.get(name, 0) + 1
        if _hits[name] == int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)
