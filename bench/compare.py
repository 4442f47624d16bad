#!/usr/bin/env python3
"""One benchmark of this checkout and of an earlier commit, side by side in one run.

    python bench/compare.py --before REF [--rounds 3] SCRIPT [ARGS...]

``SCRIPT`` is one of this directory's benchmarks (``bench_cli.py``,
``bench_slurm.py`` ...).  The commit ``REF`` is extracted into a temporary
directory and set up with its own ``scripts/setup.sh`` (its own venv, its own
wheel install in the benchmark); then the benchmark runs ``--rounds`` times
for each tree, alternating (before, after, before, after ...), so that both
see the same machine at the same time.  Every round's results file
(``bench/results/<script>.json`` of that tree) is kept, and the medians of
every number are printed side by side with their ratio (after / before).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def extract(ref: str, into: Path) -> Path:
    """The tree of commit ``ref``, set up with its own venv."""
    tree = into / f"before-{ref}"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    subprocess.run([str(tree / "scripts" / "setup.sh")], check=True, stdout=subprocess.DEVNULL)
    return tree


def run(tree: Path, script: str, args: list[str]) -> dict:
    """One run of ``script`` in ``tree``: its results file, else (a benchmark that prints its results,
    run with ``--json``) the JSON it printed."""
    py = tree / ".venv" / "bin" / "python"
    results = tree / "bench" / "results" / f"{Path(script).stem}.json"
    before = results.stat().st_mtime_ns if results.exists() else None
    proc = subprocess.run(
        [str(py), str(tree / "bench" / script), *args], check=True, cwd=str(tree), stdout=subprocess.PIPE, text=True
    )
    print(proc.stdout, end="", flush=True)
    if results.exists() and results.stat().st_mtime_ns != before:
        return json.loads(results.read_text())
    return json.loads(proc.stdout[proc.stdout.index("{") :])


def numbers(data: object, prefix: str = "") -> dict[str, float]:
    """Every number of a results document, by its path (``B3 poll with 10000 local jobs / p50 ms``)."""
    out: dict[str, float] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(numbers(v, f"{prefix} / {k}" if prefix else str(k)))
    elif isinstance(data, list):
        for k, v in enumerate(data):
            out.update(numbers(v, f"{prefix} [{k}]"))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        out[prefix] = float(data)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the git ref to compare against")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="jim-compare-"))
    trees = {"before": extract(a.before, tmp), "after": REPO}
    rounds: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for k in range(a.rounds):
        for name, tree in trees.items():
            print(f"== round {k + 1}/{a.rounds}: {name} ({tree})", flush=True)
            rounds[name].append(numbers(run(tree, a.script, a.args)))
    keys = [key for key in rounds["after"][0] if key in rounds["before"][0]]
    table = {}
    width = max(len(key) for key in keys)
    print(f"\n{'':<{width}}  {'before':>12}  {'after':>12}  after/before   (medians of {a.rounds} rounds)")
    for key in keys:
        before = statistics.median(r[key] for r in rounds["before"] if key in r)
        after = statistics.median(r[key] for r in rounds["after"] if key in r)
        ratio = after / before if before else float("nan")
        table[key] = {"before": before, "after": after, "after/before": round(ratio, 3)}
        print(f"{key:<{width}}  {before:>12g}  {after:>12g}  {ratio:>12.3f}")
    out = HERE / "results" / f"compare-{Path(a.script).stem}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "before": a.before,
                "rounds": a.rounds,
                "script": a.script,
                "args": a.args,
                "medians": table,
                "raw": rounds,
            },
            indent=2,
        )
    )
    print(f"\n(written to {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
