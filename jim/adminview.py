"""``jim status --all-users``: the admin's view across every account's jim home (root's).

From one census (:func:`jim.census.census`, each home read as its owner):
per user and per state, how many grid jobs and local jobs; each user's
oldest active grid job (its id and age) and the site's; the users whose
monitor is not running while they have active grid jobs; the batch status
queries that are degraded; the homes skipped and why.  Nothing of a job's
content (arguments, environment, paths, names) is read or shown.

:func:`view` is the JSON (``--json``), :func:`render` the text.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from jim.census import GRID_STATES, LOCAL_STATES, Counts, census
from jim.metrics import active, check_all_users
from jim.statustext import duration


def view(counts: list[Counts], skipped: list[dict[str, str]], now: float) -> dict[str, Any]:
    """The admin's view as JSON-able data (see the module docstring)."""
    users = [_user(c, now) for c in sorted(counts, key=lambda c: str(c["user"]))]
    oldest = [
        {"user": u["user"], **u["oldest_active"]} for u in users if u["oldest_active"] is not None
    ]  # (each user's; the site's is the one with the greatest age)
    return {
        "users": users,
        "oldest_active": max(oldest, key=lambda o: o["age"]) if oldest else None,
        "monitors_not_running": [u["user"] for u in users if u["monitor"]["down"]],
        "degraded": [
            {"user": u["user"], "adapter": a, "since": s, "for": max(0.0, now - s)}
            for u in users
            for a, s in sorted(u["degraded"].items())
        ],
        "skipped": skipped,
    }


def _user(c: Counts, now: float) -> dict[str, Any]:
    local: dict[str, int] = {}
    for (state, _queue, _adapter), n in c["local"].items():
        local[state] = local.get(state, 0) + n
    oldest = c["oldest_active"]
    mon = c["monitor"]
    return {
        "user": c["user"],
        "grid": dict(sorted(c["grid"].items())),
        "local": dict(sorted(local.items())),
        "active": active(c),
        "oldest_active": None if oldest is None else {"id": oldest["id"], "age": max(0.0, now - oldest["created"])},
        "monitor": {
            "running": mon["running"],
            "down": active(c) > 0 and not mon["running"],
            "last_pass_age": None if mon["at"] is None else max(0.0, now - mon["at"]),
            "last_pass_duration": mon["duration"],
        },
        "degraded": {a: i["degraded_since"] for a, i in c["adapters"].items() if i["degraded_since"] is not None},
    }


def _table(title: str, users: list[dict[str, Any]], key: str, order: tuple[str, ...]) -> list[str]:
    """Per user (rows) and per state (columns: those any user has, in ``order``), with totals."""
    states = [s for s in order if any(u[key].get(s) for u in users)]
    states += sorted({s for u in users for s in u[key]} - set(states))
    width = max([len(title), *(len(u["user"]) for u in users)]) + 2
    head = title.ljust(width) + "".join(f"{s:>11}" for s in states) + f"{'total':>9}"
    lines = [head]
    for u in [*users, {"user": "all", key: _sum(users, key)}]:
        row = u[key]
        lines.append(
            u["user"].ljust(width) + "".join(f"{row.get(s, 0):>11}" for s in states) + f"{sum(row.values()):>9}"
        )
    return lines


def _sum(users: list[dict[str, Any]], key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for u in users:
        for state, n in u[key].items():
            out[state] = out.get(state, 0) + n
    return out


def render(data: dict[str, Any]) -> str:
    """The admin's view as text."""
    users = data["users"]
    if not users:
        lines = ["no jim home found"]
    else:
        lines = [*_table("grid jobs", users, "grid", GRID_STATES), ""]
        lines += [*_table("local jobs", users, "local", LOCAL_STATES), ""]
        lines.append("oldest active grid job, monitor")
        for u in users:
            oldest = u["oldest_active"]
            what = f"{oldest['id']}  {duration(oldest['age'])} old" if oldest else "-"
            mon = u["monitor"]
            if mon["running"]:
                state = "monitor running"
                if mon["last_pass_age"] is not None:
                    state += f", last pass {duration(mon['last_pass_age'])} ago ({mon['last_pass_duration']:.2f} s)"
            else:
                state = "MONITOR NOT RUNNING" if mon["down"] else "no monitor (nothing active)"
            lines.append(f"  {u['user']}: {what}; {state}")
    if data["oldest_active"]:
        o = data["oldest_active"]
        lines.append(f"oldest active grid job of the site: {o['id']} of {o['user']}, {duration(o['age'])} old")
    down = data["monitors_not_running"]
    lines.append("monitors not running with active grid jobs: " + (", ".join(down) if down else "none"))
    degraded = [f"{d['user']} ({d['adapter']}, for {duration(d['for'])})" for d in data["degraded"]]
    lines.append("degraded batch queries: " + (", ".join(degraded) if degraded else "none"))
    for s in data["skipped"]:
        lines.append(f"skipped: {s['user']}: {s['why']}")
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace, homes: str) -> int:
    """``jim status --all-users [--homes PATTERN] [--json]`` (root's; ``homes``: ``[jim] home`` as
    written, the pattern without ``--homes``)."""
    counts, skipped = census(None, check_all_users(args, homes))
    data = view(counts, skipped, time.time())
    print(json.dumps(data, indent=2) if args.json else render(data), end="\n" if args.json else "")
    return 0
