"""Status: a grid job as people and scripts see it (``jim status``, ``jim list``, ``jim serve``).

:func:`status_json` is what ``jim status --json`` prints and the web view's
JSON API serves: the grid job's summary (:func:`job_summary`) and one row per
local job (:func:`local_row`, the one owner of that row's shape).
:func:`render_job` (``jim status ID``) makes the text for a person at a terminal: the grid
state, the plan, the count of local jobs per state, an overall progress bar from the phases the local
jobs reported (and one per phase), then the local jobs that need a look first: failed and otherwise
stuck ones, then the slowest.  It reads straight from the record only what the counts, the progress,
the retries and the order need, and builds full rows (the JSON rows) only for the local jobs it shows
(a grid job of 10,000 local jobs: 20 rows, not 10,000).

Order of the local jobs: by state group (FAILED, LOST, CANCELLED, HELD,
SUSPENDED, RUNNING, QUEUED, SUBMITTING, PLANNED, DONE), and within a group
the slowest first: for a running job the wall time it is heading for
(elapsed / fraction done, unknown counts as slowest), for the others the
wall time they took or have waited so far.

A grid job whose local jobs were tried more than once (jim.retry, ``jim resubmit``) also shows
how many retries there were, a TRY column in the table, and below it every attempt of those
local jobs (how it ended, why the next one was made and who asked), at most ``rows`` lines.

Every string from the record is shown with control characters replaced, so a
job name cannot drive the terminal.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from json.encoder import encode_basestring_ascii as _json_str  # (json's own: C where available)
from typing import Any, NamedTuple, cast

from lxml import etree

from jim.record import GridJob, LocalJob, child, required
from jim.timestamps import parse_iso

ORDER = {
    "FAILED": 0,
    "LOST": 1,
    "CANCELLED": 2,
    "HELD": 3,
    "SUSPENDED": 4,
    "RUNNING": 5,
    "QUEUED": 6,
    "SUBMITTING": 7,
    "PLANNED": 8,
    "DONE": 9,
}
TERMINAL = ("DONE", "FAILED", "CANCELLED", "LOST")

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def safe(value: object) -> str:
    """Text for a terminal: control characters (C0, DEL, C1, line separators) become '?'."""
    s = "" if value is None else str(value)
    return _CONTROL.sub("?", s)


def bar(fraction: float | None, width: int = 30) -> str:
    """``[#####.....]  50.0%`` (an unknown fraction shows as an empty bar and ``  ?``)."""
    if fraction is None or (isinstance(fraction, float) and math.isnan(fraction)):
        return "[" + "." * width + "]     ?"
    fraction = min(max(float(fraction), 0.0), 1.0)
    full = int(fraction * width)  # never a full bar before it is 100 %
    return "[" + "#" * full + "." * (width - full) + f"] {fraction * 100:5.1f}%"


def duration(seconds: float | None) -> str:
    """A short wall time: ``42s``, ``12m05s``, ``3h02m``, ``2d04h``."""
    if seconds is None:
        return "-"
    s = int(max(seconds, 0))
    if s < 100:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def parse_time(value: str | None) -> float | None:
    """Seconds since the epoch of a timestamp of the database (None for none)."""
    return parse_iso(value)


def elapsed(lj: dict[str, Any], now: float) -> float | None:
    """Wall time of a local job: from start (else submission) to its end (else now)."""
    start = parse_time(lj.get("started")) or parse_time(lj.get("submitted"))
    if not start:
        return None
    end = parse_time(lj.get("ended")) or now
    return max(end - start, 0.0)


def job_fraction(lj: dict[str, Any]) -> float | None:
    """Fraction of the work one local job reported done (over all its phases), or None."""
    done = total = 0
    for p in lj.get("progress") or ():
        total += p["total"]
        done += min(p["done"], p["total"])
    return done / total if total else None


def phase_totals(locals_: list[dict[str, Any]]) -> list[tuple[str, int, int, int]]:
    """Per phase, in order of first appearance: (name, done, total, local jobs reporting it)."""
    out: dict[str, list[int]] = {}
    for lj in locals_:
        for p in lj.get("progress") or ():
            acc = out.setdefault(p["name"], [0, 0, 0])
            acc[0] += min(p["done"], p["total"])
            acc[1] += p["total"]
            acc[2] += 1
    return [(name, d, t, n) for name, (d, t, n) in out.items()]


def sort_key(lj: dict[str, Any], now: float) -> tuple[int, float, float, int]:
    """Failed and stuck first, then the slowest (see the module docstring)."""
    state = lj["state"]
    return _order_key(state, lj.get, job_fraction(lj) if state == "RUNNING" else None, lj["index"], now)


def _order_key(
    state: Any, get: Callable[[str], Any], fraction: float | None, index: int, now: float
) -> tuple[int, float, float, int]:
    """:func:`sort_key` of a local job in that state, with ``get`` its times (of a row, or of a <localjob>),
    that fraction done (of a running job) and that index."""
    start = parse_iso(get("started")) or parse_iso(get("submitted"))  # its wall time (elapsed), 0 when unknown
    e0 = max((parse_iso(get("ended")) or now) - start, 0.0) if start else 0.0
    if state == "RUNNING":
        heading_for = e0 / fraction if fraction else math.inf
    else:
        heading_for = e0
    return (ORDER.get(state, 99), -heading_for, -e0, index)


def render_job(job: GridJob, *, rows: int = 20, now: float | None = None) -> str:
    """What ``jim status ID`` prints: the grid job, its counts and progress, then the local jobs that need
    a look first (see the module docstring), at most ``rows`` of them.  Read straight from the record: of
    every local job only what the counts, the progress, the retries and the order need, full rows
    (:func:`local_row`, as ``jim status --json`` prints them) only for the local jobs shown: ``jim status
    ID`` of 10,000 local jobs builds 20."""
    now = time.time() if now is None else now
    # the elements in a list of its own, not GridJob.local_jobs()'s kept with the record: lxml frees 10,000
    # element proxies at a third of the cost while their document is still held (here) than after it
    elements = list(child(job.root, "localjobs"))
    found = _REPORTING(job.root)  # (the same proxies as in elements: lxml keeps one per element)
    reporting = set(found) if isinstance(found, list) else set()
    counts: dict[str, int] = {}  # (GridJob.counts(): every state in the order of its first local job)
    keyed = []
    n_reporting = waiting = 0
    for el in elements:
        get = el.get
        state = get("state")
        if state is not None:
            counts[state] = counts.get(state, 0) + 1
        reports = el in reporting
        n_reporting += reports
        fraction = job_fraction({"progress": progress_of(el)}) if reports and state == "RUNNING" else None
        key = _order_key(state, get, fraction, int(required(el, "index")), now)
        if state == "PLANNED":
            after = parse_iso(get("retryAfter"))
            waiting += after is not None and after > now
        attempt = get("attempt")
        keyed.append((key, {"attempt": int(attempt) if attempt else 1, "_el": el}))  # (LocalJob.attempt)
    keyed.sort(key=_first)
    ordered = [light for _key, light in keyed]
    data, phases = _summary(job, counts)
    by_hand = _BY_HAND(job.root)
    view = _View(
        reporting=n_reporting,
        phases=phases,
        by_hand=int(by_hand) if isinstance(by_hand, float) else 0,
        waiting=waiting,
        ordered=ordered,
        retried=[light for light in ordered if _attempt_count(light) > 1],
        full=_full_row,
        attempts=_Attempts(job),
    )
    return _render(data, view, rows, now)


class _View(NamedTuple):
    """What the text view needs of the local jobs besides the grid job's summary."""

    reporting: int  # local jobs that reported progress
    phases: list[tuple[str, int, int, int]]  # :func:`phase_totals`
    by_hand: int  # attempts followed by another that someone asked for
    waiting: int  # local jobs waiting for a retry's cool-off
    ordered: list[dict[str, Any]]  # rows in the table's order (full rows, or light ones: ``attempt`` and more)
    retried: list[dict[str, Any]]  # those of them tried more than once, in the same order
    full: Callable[[dict[str, Any]], dict[str, Any]]  # the full row (:func:`local_row`) of one of them
    attempts: Callable[[dict[str, Any]], int]  # how many attempts one of them has (its full row's ``attempts``)


def _first(kv: tuple[Any, Any]) -> Any:
    return kv[0]


#: attempts followed by another that someone asked for (a row's ``attempts`` with a ``retryBy``)
_BY_HAND = etree.XPath("count(localjobs/localjob/attempts/attempt[@retryBy != ''])")
#: the local jobs that reported progress (at least one phase)
_REPORTING = etree.XPath("localjobs/localjob[progress/phase]")
#: every attempt before a local job's current one
_EARLIER = etree.XPath("localjobs/localjob/attempts/attempt")
#: every phase any local job reported, in the record's order
_PHASES = etree.XPath("localjobs/localjob/progress/phase")


def _full_row(light: dict[str, Any]) -> dict[str, Any]:
    """The :func:`local_row` of a light row (made once)."""
    row = light.get("_row")
    if row is None:
        row = light["_row"] = local_row(LocalJob(light["_el"]))
    return row


class _Attempts:
    """``len(local_row(lj)["attempts"])`` of a light row of ``job``: the attempts before the current one, and it
    (the earlier ones counted for every local job at the first call, in one pass over the record)."""

    def __init__(self, job: GridJob):
        self.job = job
        self.earlier: dict[Any, int] | None = None

    def __call__(self, light: dict[str, Any]) -> int:
        row = light.get("_row")
        if row is not None:
            return len(row["attempts"])
        if self.earlier is None:
            self.earlier = {}
            found = _EARLIER(self.job.root)
            for a in cast("list[etree._Element]", found) if isinstance(found, list) else ():
                lj = a.getparent().getparent()  # type: ignore[union-attr]  # (<localjob>/<attempts>/<attempt>)
                self.earlier[lj] = self.earlier.get(lj, 0) + 1
        return self.earlier.get(light["_el"], 0) + 1


def _render(data: dict[str, Any], view: _View, rows: int, now: float) -> str:
    lines = _header(data, now) + _counts_and_progress(data, view, now) + _local_table(data, view, rows, now)
    return "\n".join(lines) + "\n"


def _header(data: dict[str, Any], now: float) -> list[str]:
    exit_part = f" (exit code {data['exitCode']})" if data.get("exitCode") is not None else ""
    cancel = ", cancel requested" if data.get("cancelRequested") and data["state"] not in ("DONE", "FAILED") else ""
    updated = parse_time(data.get("updated"))
    ago = f" ({duration(now - updated)} ago)" if updated else ""
    plan = data.get("plan") or {}
    lines = [
        f"grid job {safe(data['id'])}  {safe(data['state'])}{exit_part}{cancel}",
        f"  name       {safe(data.get('name')) or '-'}",
        f"  type {safe(data.get('jobtype'))}, owner {safe(data.get('owner'))}, "
        f"batch system {safe(data.get('adapter'))}",
        f"  created {safe(data.get('created'))}, updated {safe(data.get('updated'))}{ago}",
        f"  plan: {safe(plan.get('localJobs'))} local jobs, binding limit {safe(plan.get('binding'))}",
    ]
    if plan.get("explanation"):
        lines.append(f"        {safe(plan['explanation'])}")
    return lines


def _counts_and_progress(data: dict[str, Any], view: _View, now: float) -> list[str]:
    counts = data.get("counts") or {}
    n = sum(counts.values())
    by_state = ", ".join(f"{c} {safe(s)}" for s, c in sorted(counts.items(), key=lambda kv: ORDER.get(kv[0], 99)))
    lines = ["  local jobs " + (by_state or "none") + (f"  ({n} in all)" if len(counts) > 1 else "")]
    prog = data.get("progress") or {}
    if prog.get("total"):
        fraction = prog.get("fraction")
        if fraction is None:
            fraction = prog["done"] / prog["total"]
        lines.append(
            f"  progress   {bar(fraction)}  ({prog['done']} of {prog['total']} units reported"
            f" by {view.reporting} of {n} local jobs)"
        )
        phases = view.phases
        if len(phases) > 1:
            width = max(len(safe(p[0])) for p in phases)
            lines += [
                f"    {safe(name):<{width}} {bar(d / t if t else None, 20)}  {d} of {t}" for name, d, t, _ in phases
            ]
    finished = sum(c for s, c in counts.items() if s in TERMINAL)
    lines.append(f"  ended      {bar(finished / n if n else None)}  ({finished} of {n} local jobs)")
    lines += _retries_line(data, view, now)
    if data.get("outputTar"):
        lines.append(f"  output tar {safe(data['outputTar'])}")
    if data.get("failReason"):
        lines.append(f"  failed     {safe(data['failReason'])}")
    return lines


def _attempt_count(lj: dict[str, Any]) -> int:
    """The current attempt's number of a row (1 for a row without one)."""
    n = lj.get("attempt")
    return n if isinstance(n, int) and n > 0 else 1


def _waits(lj: dict[str, Any], now: float) -> bool:
    """Whether a local job waits for a retry's cool-off."""
    after = parse_time(lj.get("retryAfter"))
    return lj.get("state") == "PLANNED" and after is not None and after > now


def _retries_line(data: dict[str, Any], view: _View, now: float) -> list[str]:
    """``  retries    4 (3 local jobs tried again; 1 waiting for its cool-off)``, when there were any."""
    locals_ = view.ordered
    retries = data.get("retries")
    if not isinstance(retries, int):
        retries = sum(_attempt_count(lj) - 1 for lj in locals_)
    if retries <= 0:
        return []
    again = len(view.retried)
    by_hand = view.by_hand
    waiting = view.waiting
    parts = [f"{again} local job{'' if again == 1 else 's'} tried again"]
    if by_hand:
        parts.append(f"{by_hand} by hand")
    if waiting:
        parts.append(f"{waiting} waiting for {'its' if waiting == 1 else 'their'} cool-off")
    return [f"  retries    {retries} ({'; '.join(parts)})"]


def _local_table(data: dict[str, Any], view: _View, rows: int, now: float) -> list[str]:
    ordered = view.ordered
    if not ordered:
        return []
    tried = bool(view.retried)  # the TRY column only when some were retried
    try_head = f" {'TRY':>3}" if tried else ""
    lines = [
        "",
        f"  {'#':>5} {'STATE':<10}{try_head} {'EXIT':>4} {'TIME':>7}  {'BATCH ID':<22} {'EVIDENCE':<18} "
        "PROGRESS / REASON",
    ]
    for lj in map(view.full, ordered[:rows]):
        ph = "; ".join(f"{safe(p['name'])} {p['done']}/{p['total']}" for p in lj.get("progress") or ())
        reason = safe(lj.get("reason"))[:120]
        info = " | ".join(x for x in (reason if lj["state"] != "DONE" else "", ph) if x)
        code = "" if lj.get("exitCode") is None else str(lj["exitCode"])
        attempt = f" {_attempt_count(lj):>3}" if tried else ""
        lines.append(
            f"  {lj['index']:>5} {safe(lj['state']):<10}{attempt} {code:>4} {duration(elapsed(lj, now)):>7}  "
            f"{safe(lj.get('batchId') or '-'):<22} {safe(lj.get('evidence')):<18} {info}".rstrip()
        )
    if len(ordered) > rows:
        lines.append(f"  ... {len(ordered) - rows} more local jobs (jim status {safe(data['id'])} --json for all)")
    if tried:
        lines += _attempts_section(data, view, view.retried, rows, now)
    return lines


def _attempt_info(a: dict[str, Any], lj: dict[str, Any], current: bool, now: float) -> str:
    """How one attempt ended, then why the next one was made and who asked (or that it is the current one)."""
    reason = safe(a.get("reason"))[:120]
    cause = safe(a.get("cause"))[:40]
    ended = [cause] if cause and cause not in reason else []
    if reason and reason != a.get("state"):
        ended.append(reason)
    if a.get("killedBy"):
        ended.append(f"killed by {safe(a['killedBy'])[:40]}")
    if current:
        after = "current attempt"
        if _waits(lj, now):
            left = duration((parse_time(lj.get("retryAfter")) or now) - now)
            after += f", waits for its cool-off until {safe(lj.get('retryAfter'))} ({left} left)"
    else:
        who = f"asked by {safe(a['retryBy'])[:40]}" if a.get("retryBy") else "by jim"
        after = f"next attempt: {safe(a.get('retryReason'))[:120]} ({who}, {safe(a.get('retryAt'))})"
    return " | ".join([*ended, after])


def _attempts_section(
    data: dict[str, Any], view: _View, retried: list[dict[str, Any]], rows: int, now: float
) -> list[str]:
    """Every attempt of the local jobs tried more than once, in the table's order, at most ``rows`` lines."""
    lines = [
        "",
        "  attempts of the local jobs tried more than once (ID.k.n: local job k, attempt n)",
        f"  {'k.n':>9} {'STATE':<10} {'EXIT':>4}  {'BATCH ID':<22} {'NODE':<16} ENDED | WHY THE NEXT ATTEMPT",
    ]
    shown = total = 0
    for lj in retried:
        if shown >= rows:  # (only counted: no full row for it)
            total += view.attempts(lj)
            continue
        lj = view.full(lj)
        attempts = lj.get("attempts") or []
        for i, a in enumerate(attempts):
            total += 1
            if shown >= rows:
                continue
            shown += 1
            code = "" if a.get("exitCode") is None else str(a["exitCode"])
            label = f"{lj['index']}.{safe(a.get('n'))}"
            info = _attempt_info(a, lj, i == len(attempts) - 1, now)
            lines.append(
                f"  {label:>9} {safe(a.get('state')):<10} {code:>4}  {safe(a.get('batchId') or '-'):<22} "
                f"{safe(a.get('node') or '-'):<16} {info}".rstrip()
            )
    if total > shown:
        lines.append(
            f"  ... {total - shown} more attempts of {len(retried)} local jobs tried more than once"
            f" (jim status {safe(data['id'])} --json for all)"
        )
    return lines


def local_row(lj: LocalJob) -> dict[str, Any]:
    """One local job as ``jim status --json`` and the web view show it."""
    el = lj.el
    get = dict(el.items()).get  # (every attribute at once: a dict lookup costs less than an element's)
    index, tag = int(required(el, "index")), required(el, "tag")  # (LocalJob.index, LocalJob.tag)
    code = get("exitCode")
    exit_code = int(code) if code not in (None, "") else None  # (LocalJob.exit_code)
    n = get("attempt")
    attempt = int(n) if n else 1  # (LocalJob.attempt)
    return {
        "index": index,
        "tag": tag,
        "state": get("state"),
        "batchId": get("batchId"),
        "queue": get("queue"),
        "submitted": get("submitted"),
        "started": get("started"),
        "ended": get("ended"),
        "exitCode": exit_code,
        "evidence": get("evidence"),
        "reason": get("reason"),
        "host": get("host"),
        "heartbeat": get("heartbeat"),
        "slice": lj.slice,
        "progress": progress_of(el),
        "MasterJobID": get("MasterJobID"),
        "SplitID": get("SplitID"),
        "HerdState": get("HerdState"),
        "node": get("node"),
        "cause": get("cause"),
        "killedBy": get("killedBy"),
        "attempt": attempt,
        "retryAfter": get("retryAfter"),
        "attempts": _attempts(el, get, attempt, tag, exit_code),
    }


def attempts_of(lj: LocalJob) -> list[dict[str, Any]]:
    """Every attempt of a local job, oldest first, the current (last) one included: the one
    shape ``jim status --json``, the text view and the web view show."""
    return _attempts(lj.el, lj.el.get, lj.attempt, lj.tag, lj.exit_code)


def _attempts(
    el: Any, get: Callable[[str], Any], attempt: int, tag: str, exit_code: int | None
) -> list[dict[str, Any]]:
    """:func:`attempts_of` of a <localjob>, ``get`` its attributes, with its current attempt's number, tag and
    exit code."""
    out: list[dict[str, Any]] = []
    for past in el.iterfind("attempts/attempt"):  # (LocalJob.past_attempts)
        a = dict(past.items())
        code = a.get("exitCode")
        out.append(
            {
                "n": int(a["n"]),
                "tag": a.get("tag"),
                "batchId": a.get("batchId"),
                "node": a.get("node") or a.get("host"),
                "submitted": a.get("submitted"),
                "started": a.get("started"),
                "ended": a.get("ended"),
                "state": a.get("state"),
                "exitCode": int(code) if code not in (None, "") else None,
                "evidence": a.get("evidence"),
                "reason": a.get("reason"),
                "cause": a.get("cause"),
                "killedBy": a.get("killedBy"),
                "retryReason": a.get("retryReason"),
                "retryBy": a.get("retryBy"),
                "retryAt": a.get("retryAt"),
            }
        )
    out.append(
        {
            "n": attempt,
            "tag": tag,
            "batchId": get("batchId"),
            "node": get("node") or get("host"),
            "submitted": get("submitted"),
            "started": get("started"),
            "ended": get("ended"),
            "state": get("state"),
            "exitCode": exit_code,
            "evidence": get("evidence"),
            "reason": get("reason"),
            "cause": get("cause"),
            "killedBy": get("killedBy"),
            "retryReason": None,
            "retryBy": None,
            "retryAt": None,
        }
    )
    return out


def progress_of(el: Any) -> list[dict[str, Any]]:
    """The reported phases of a <localjob> element."""
    return [
        {"name": p.get("name"), "done": int(p.get("done")), "total": int(p.get("total"))}
        for p in el.iterfind("progress/phase")
    ]


def status_json(job: GridJob) -> dict[str, Any]:
    """What ``jim status --json`` prints for one grid job."""
    summary, _phases = job_summary(job)
    # (not GridJob.local_jobs(), kept with the record: see render_job)
    return {**summary, "localJobs": [local_row(LocalJob(el)) for el in child(job.root, "localjobs")]}


def dump(obj: Any) -> str:
    """``json.dumps(obj, indent=2)``, byte for byte, without the json module's indenting encoder, which is
    pure Python (``jim status --json`` of 10,000 local jobs is some 16 MB of it): dicts with string keys,
    lists, strings, integers, booleans and None here, anything else by json itself.  It earns its place:
    ``bench/bench_status_json.py`` measures 0.6x the standard library's time to serialize, 0.76x for the
    whole command, at 10,000 local jobs."""
    out: list[str] = []
    _dump_into(obj, "\n", out)
    return "".join(out)


def _dump_into(value: Any, nl: str, out: list[str]) -> None:
    """Append the JSON of ``value`` at the indentation that ``nl`` (a newline and indentation) has."""
    kind = type(value)
    if kind is str:
        out.append(_json_str(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is int:
        out.append(int.__repr__(value))
    elif kind is dict and all(type(k) is str for k in value):
        if not value:
            out.append("{}")
            return
        inner = nl + "  "
        sep = "{" + inner
        for k, v in value.items():
            out.append(sep + _json_str(k) + ": ")
            _dump_into(v, inner, out)
            sep = "," + inner
        out.append(nl + "}")
    elif kind is list:
        if not value:
            out.append("[]")
            return
        inner = nl + "  "
        sep = "[" + inner
        for v in value:
            out.append(sep)
            _dump_into(v, inner, out)
            sep = "," + inner
        out.append(nl + "]")
    else:  # (floats, tuples, other keys: json's own text, its lines indented as deep as this value)
        out.append(json.dumps(value, indent=2, sort_keys=False).replace("\n", nl))


def render_list(jobs: list[dict[str, str]]) -> str:
    """What ``jim list`` prints: one line per grid job (as the index has them), newest first."""
    if not jobs:
        return "no grid jobs\n"
    lines = [f"{'ID':<25} {'STATE':<10} {'TYPE':<12} {'LOCAL':>6}  {'CREATED':<24} NAME"]
    for j in jobs:
        lines.append(
            f"{safe(j['id']):<25} {safe(j['state']):<10} {safe(j['jobtype']):<12} {safe(j['localJobs']):>6}  "
            f"{safe(j['created']):<24} {safe(j['name'])}"
        )
    return "\n".join(lines) + "\n"


def job_summary(job: GridJob) -> tuple[dict[str, Any], list[tuple[str, int, int, int]]]:
    """The grid-job part of ``status_json`` (everything but ``localJobs``), and the totals per phase
    (name, done, total, local jobs reporting), read straight from the record: the page of a grid
    job of 10,000 local jobs builds full rows only for the local jobs it shows."""
    return _summary(job, job.counts())


def _summary(job: GridJob, counts: dict[str, int]) -> tuple[dict[str, Any], list[tuple[str, int, int, int]]]:
    """:func:`job_summary` with the record's ``counts`` (:meth:`GridJob.counts`) as the caller counted them."""
    acc: dict[str, list[int]] = {}
    found = _PHASES(job.root)
    for p in cast("list[etree._Element]", found) if isinstance(found, list) else ():  # (a path of elements)
        name = required(p, "name")
        a = acc.get(name)
        if a is None:
            a = acc[name] = [0, 0, 0]
        done, total = int(required(p, "done")), int(required(p, "total"))
        a[0] += done if done < total else total  # done counts up to total
        a[1] += total
        a[2] += 1
    done_sum = sum(a[0] for a in acc.values())
    total_sum = sum(a[1] for a in acc.values())
    data = {
        "id": job.id,
        "state": job.state.name,
        "exitCode": job.exit_code,
        "jobtype": job.jobtype,
        "name": job.get("name"),
        "owner": job.get("owner"),
        "adapter": job.get("adapter"),
        "created": job.get("created"),
        "updated": job.get("updated"),
        "cancelRequested": job.cancel_requested,
        "HerdState": job.get("HerdState"),
        "plan": {**job.plan, "explanation": job.root.findtext("plan/explanation")},
        "counts": counts,
        "progress": {"done": done_sum, "total": total_sum, "fraction": (done_sum / total_sum) if total_sum else None},
        "outputTar": job.output_tar,
        "failReason": job.fail_reason,
        "retries": job.retries(),
    }
    return data, [(name, a[0], a[1], a[2]) for name, a in acc.items()]
