"""``jim status ID`` and ``jim list`` for a person at a terminal.

:func:`render_job` makes the text of one grid job: the grid state, the plan,
the count of local jobs per state, an overall progress bar from the phases
the local jobs reported (and one per phase), then the local jobs that need a
look first (in :func:`jim.status.sort_key`'s order): failed and otherwise
stuck ones, then the slowest.  It reads straight from the record only what
the counts, the progress, the retries and the order need, and builds full
rows (:func:`jim.status.local_row`, the JSON rows) only for the local jobs it
shows (a grid job of 10,000 local jobs: 20 rows, not 10,000).

A grid job whose local jobs were tried more than once (jim.retry, ``jim resubmit``) also shows
how many retries there were, a TRY column in the table, and below it every attempt of those
local jobs (how it ended, why the next one was made and who asked), at most ``rows`` lines.

Every string from the record is shown with control characters replaced, so a
job name cannot drive the terminal.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from lxml import etree

from jim.credentials import KINDS
from jim.identity import Identity, describe
from jim.record import GridJob, LocalJob, child, required
from jim.status import (
    ORDER,
    TERMINAL,
    elapsed,
    job_fraction,
    local_row,
    order_key,
    parse_time,
    progress_of,
    summary_with_counts,
)
from jim.timestamps import parse_iso

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
        key = order_key(state, get, fraction, int(required(el, "index")), now)
        if state == "PLANNED":
            after = parse_iso(get("retryAfter"))
            waiting += after is not None and after > now
        attempt = get("attempt")
        keyed.append((key, {"attempt": int(attempt) if attempt else 1, "_el": el}))  # (LocalJob.attempt)
    keyed.sort(key=_first)
    ordered = [light for _key, light in keyed]
    data, phases = summary_with_counts(job, counts)
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
        f"  identity   {_identity(data.get('identity'))}",
        *(f"  credential {_credential(c, now)}" for c in data.get("credentials") or ()),
        f"  created {safe(data.get('created'))}, updated {safe(data.get('updated'))}{ago}",
        f"  plan: {safe(plan.get('localJobs'))} local jobs, binding limit {safe(plan.get('binding'))}",
        f"  each local job: {_shape(plan)}",
    ]
    if plan.get("explanation"):
        lines.append(f"        {safe(plan['explanation'])}")
    return lines


def _identity(found: dict[str, Any] | None) -> str:
    """The grid identity's line: subject, token, primary FQAN and the front end; ``unknown`` without one."""
    return safe(describe(Identity.from_json(found or {})))


def _credential(found: dict[str, Any], now: float) -> str:
    """``X.509 proxy /DC=org/CN=Jane, ends 2026-11-29T12:00:00Z (3h 10m left)``: never its content."""
    label = KINDS[found["kind"]][2] if found.get("kind") in KINDS else "credential"
    subject = f" {safe(found['subject'])}" if found.get("subject") else ""
    end = parse_time(found.get("notAfter"))
    if end is None:
        return f"{label}{subject}, end unknown"
    left = f"{duration(end - now)} left" if end > now else "ENDED"
    return f"{label}{subject}, ends {safe(found.get('notAfter'))} ({left})"


def _shape(plan: dict[str, Any]) -> str:
    """``8 cores, 4000 MB, 1 GPU, whole node``: the shape the plan recorded (one core when none)."""
    cores = safe(plan.get("cores") or "1")
    parts = [f"{cores} core{'' if cores == '1' else 's'}"]
    if plan.get("memoryMB"):
        parts.append(f"{safe(plan['memoryMB'])} MB")
    if plan.get("gpus"):
        parts.append(f"{safe(plan['gpus'])} GPU(s)")
    if plan.get("wholeNode") == "true":
        parts.append("whole node")
    return ", ".join(parts)


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
    lines += _usage_line(data.get("usage") or {})
    if data.get("outputTar"):
        lines.append(f"  output tar {safe(data['outputTar'])}")
    if data.get("failReason"):
        lines.append(f"  failed     {safe(data['failReason'])}")
    return lines


def _usage_line(totals: dict[str, Any]) -> list[str]:
    """``  used       CPU 2.1 s (user 2.0 s, system 0.1 s), 2.3 core-s, peak RSS 205 MB on cn1, cn2
    (2 attempts measured, 1 not)``: the grid job's totals (jim.record.usage.Totals), when any."""
    measured, unknown = totals.get("measured") or 0, totals.get("unknown") or 0
    if not measured and not unknown:
        return []
    parts = []
    if totals.get("cpu") is not None:
        parts.append(
            f"CPU {_seconds(totals['cpu'])} (user {_seconds(totals.get('cpuUser'))}, "
            f"system {_seconds(totals.get('cpuSystem'))})"
        )
    if totals.get("coreSeconds") is not None:
        parts.append(f"{_seconds(totals['coreSeconds'])} core-s")
    if totals.get("maxRssKb") is not None:
        parts.append(f"peak RSS {_megabytes(totals['maxRssKb'])}")
    nodes = [safe(n)[:40] for n in totals.get("nodes") or ()]
    where = f" on {', '.join(nodes[:5])}{' ...' if len(nodes) > 5 else ''}" if nodes else ""
    counted = f"{measured} attempt{'' if measured == 1 else 's'} measured" + (f", {unknown} not" if unknown else "")
    return [f"  used       {', '.join(parts) or 'unknown'}{where} ({counted})"]


def _seconds(value: Any) -> str:
    return f"{value:.1f} s" if isinstance(value, (int, float)) else "?"


def _megabytes(kb: Any) -> str:
    return f"{kb / 1024:.0f} MB" if isinstance(kb, (int, float)) else "?"


def _usage_info(usage: dict[str, Any] | None) -> str:
    """``cpu 1.0 s, rss 205 MB, wall 1.1 s (wrapper)``: what a local job's attempt used, when measured."""
    if not usage:
        return ""
    cpu = (usage.get("cpuUser") or 0.0) + (usage.get("cpuSystem") or 0.0)
    parts = [f"cpu {_seconds(cpu)}" if usage.get("cpuUser") is not None else "cpu ?"]
    parts.append(f"rss {_megabytes(usage['maxRssKb'])}" if usage.get("maxRssKb") is not None else "rss ?")
    parts.append(f"wall {_seconds(usage.get('wall'))}")
    return f"{', '.join(parts)} ({safe(usage.get('source'))})"


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
        reason = safe(lj.get("waiting") if lj["state"] == "PLANNED" and lj.get("waiting") else lj.get("reason"))[:160]
        used = _usage_info(lj.get("usage"))
        info = " | ".join(x for x in (reason if lj["state"] != "DONE" else "", ph, used) if x)
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
