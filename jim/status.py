"""``jim status ID``: a grid job for a person at a terminal."""

from __future__ import annotations

import time

from jim.db import parse_iso

ORDER = {"FAILED": 0, "LOST": 1, "CANCELLED": 2, "HELD": 3, "SUSPENDED": 4, "RUNNING": 5, "QUEUED": 6,
         "SUBMITTING": 7, "PLANNED": 8, "DONE": 9}


def bar(fraction: float, width: int = 30) -> str:
    fraction = min(max(fraction, 0.0), 1.0)
    full = int(round(fraction * width))
    return "[" + "#" * full + "." * (width - full) + f"] {fraction * 100:5.1f}%"


def _elapsed(lj: dict, now: float) -> float:
    start = parse_iso(lj.get("started")) or parse_iso(lj.get("submitted"))
    end = parse_iso(lj.get("ended")) or now
    return (end - start) if start else 0.0


def render_status(data: dict, *, rows: int = 20, now: float | None = None) -> str:
    now = time.time() if now is None else now
    lines = []
    exit_part = f" (exit code {data['exitCode']})" if data.get("exitCode") is not None else ""
    lines.append(f"grid job {data['id']}  {data['state']}{exit_part}")
    lines.append(f"  type {data['jobtype']}, name {data.get('name') or '-'}, owner {data.get('owner')}, "
                 f"batch system {data.get('adapter')}")
    lines.append(f"  created {data['created']}, updated {data['updated']}")
    plan = data.get("plan", {})
    lines.append(f"  plan: {plan.get('localJobs')} local jobs, binding limit {plan.get('binding')}")
    if plan.get("explanation"):
        lines.append(f"        {plan['explanation']}")
    counts = data.get("counts", {})
    lines.append("  local jobs: " + ", ".join(f"{n} {s}" for s, n in
                                               sorted(counts.items(), key=lambda kv: ORDER.get(kv[0], 99))))
    prog = data.get("progress") or {}
    if prog.get("total"):
        lines.append(f"  progress   {bar(prog['fraction'])}  ({prog['done']} of {prog['total']} units reported)")
    else:
        total = sum(counts.values()) or 1
        finished = sum(n for s, n in counts.items() if s in ("DONE", "FAILED", "CANCELLED", "LOST"))
        lines.append(f"  finished   {bar(finished / total)}")
    if data.get("outputTar"):
        lines.append(f"  output tar {data['outputTar']}")
    locals_ = sorted(data.get("localJobs", []),
                     key=lambda lj: (ORDER.get(lj["state"], 99), -_elapsed(lj, now), lj["index"]))
    lines.append("")
    lines.append(f"  {'#':>5} {'STATE':<10} {'EXIT':>4} {'TIME':>8}  {'BATCH ID':<22} {'EVIDENCE':<18} PROGRESS / REASON")
    for lj in locals_[:rows]:
        ph = "; ".join(f"{p['name']} {p['done']}/{p['total']}" for p in lj.get("progress", []))
        info = ph or (lj.get("reason") or "")
        code = "" if lj.get("exitCode") is None else str(lj["exitCode"])
        lines.append(f"  {lj['index']:>5} {lj['state']:<10} {code:>4} {_elapsed(lj, now):>7.0f}s  "
                     f"{(lj.get('batchId') or '-'):<22} {(lj.get('evidence') or ''):<18} {info}")
    if len(locals_) > rows:
        lines.append(f"  ... {len(locals_) - rows} more local jobs (jim status {data['id']} --json for all)")
    return "\n".join(lines) + "\n"
