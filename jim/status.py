"""Status: a grid job as scripts and pages see it (``jim status --json``, ``jim list``, ``jim serve``).

:func:`status_json` is what ``jim status --json`` prints and the web view's
JSON API serves: the grid job's summary (:func:`job_summary`) and one row per
local job (:func:`local_row`, the one owner of that row's shape), written by
:func:`dump`.  The measures every view of a local job shares live here too:
its wall time (:func:`elapsed`), the fraction of its work done
(:func:`job_fraction`), the totals per phase (:func:`phase_totals`) and the
order in which local jobs need a look (:func:`sort_key`): by state group
(FAILED, LOST, CANCELLED, HELD, SUSPENDED, RUNNING, QUEUED, SUBMITTING,
PLANNED, DONE), and within a group the slowest first: for a running job the
wall time it is heading for (elapsed / fraction done, unknown counts as
slowest), for the others the wall time they took or have waited so far.

The text for a terminal is :mod:`jim.statustext`'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from json.encoder import encode_basestring_ascii as _json_str  # (json's own: C where available)
from typing import Any, cast

from lxml import etree

from jim.record import GridJob, LocalJob, Usage, child, required
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

#: every phase any local job reported, in the record's order
_PHASES = etree.XPath("localjobs/localjob/progress/phase")


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
    return order_key(state, lj.get, job_fraction(lj) if state == "RUNNING" else None, lj["index"], now)


def order_key(
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
        "waiting": get("waiting"),
        "waitingSince": get("waitingSince"),
        "attempts": _attempts(el, get, attempt, tag, exit_code),
        "usage": usage_of(el),
    }


def usage_of(el: Any) -> dict[str, Any] | None:
    """What the attempt of a <localjob> or an <attempt> element used (:class:`jim.record.Usage`), as JSON;
    None when nobody measured it."""
    found = el.find("usage")
    return Usage.of_element(found).to_json() if found is not None else None


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
                "usage": usage_of(past),
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
            "usage": usage_of(el),
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


def job_summary(job: GridJob) -> tuple[dict[str, Any], list[tuple[str, int, int, int]]]:
    """The grid-job part of ``status_json`` (everything but ``localJobs``), and the totals per phase
    (name, done, total, local jobs reporting), read straight from the record: the page of a grid
    job of 10,000 local jobs builds full rows only for the local jobs it shows."""
    return summary_with_counts(job, job.counts())


def summary_with_counts(job: GridJob, counts: dict[str, int]) -> tuple[dict[str, Any], list[tuple[str, int, int, int]]]:
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
        "identity": job.identity().as_json(),
        "credentials": [c.as_json() for c in job.credentials()],
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
        "usage": job.usage_totals().to_json(),
    }
    return data, [(name, a[0], a[1], a[2]) for name, a in acc.items()]
