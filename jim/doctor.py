"""``jim doctor``: checks the configuration, jim's home (and its records' schema versions), the batch adapter, the
drain switch and the job types."""

from __future__ import annotations

import stat
from collections import Counter

from jim.config import Config
from jim.db import Database
from jim.drain import look
from jim.handlers import discover
from jim.record import SCHEMA_VERSION
from jim.site import Site


def doctor(config: Config) -> int:
    """Print what was checked; 0 when all is well, 1 when a problem was found."""
    ok = True
    print(f"config:   {config.source}")
    site = Site(config)
    home = site.home
    print(f"home:     {home.root}")
    if home.root.exists():
        mode = stat.S_IMODE(home.root.stat().st_mode)
        if mode & 0o077:
            ok = False
            print(f"  PROBLEM: {home.root} is readable by others (mode {mode:o}); run chmod 700")
    if home.db.is_dir():
        ok = schema_report(site.db) and ok
    print(f"adapter:  {config.batch.adapter} {config.batch.describe_options()}".rstrip())
    try:
        deg = site.adapter.cache.degraded() if home.cache.exists() else None
        print(f"  {'DEGRADED since ' + str(deg['since']) + ': ' + deg['reason'] if deg else 'healthy'}")
    except Exception as e:
        ok = False
        print(f"  PROBLEM: {e}")
    drained = look(config.site.drain_file)  # (draining is no problem; a flag file that does not count is)
    print(f"drain:    {'PROBLEM: ' if drained.ignored else ''}{drained.describe()}")
    ok = ok and not drained.ignored
    for name, entry in sorted(discover().items()):
        if isinstance(entry, Exception):
            ok = False
            print(f"handler {name}: BROKEN ({entry})")
    print("all good" if ok else "problems found")
    return 0 if ok else 1


def schema_report(db: Database) -> bool:
    """The schema versions of the home's records and index (docs/upgrades.md): how many need migration
    (older: brought up to date when next written; no problem) and how many a newer jim wrote (a
    problem: this jim leaves them alone).  False when there is a problem."""
    current = int(SCHEMA_VERSION)
    versions = db.schema_versions()
    counts = Counter(versions.values())
    older = sorted(v for v in counts if v is not None and v < current)
    newer = sorted(v for v in counts if v is not None and v > current)
    print(f"records:  {len(versions)}, {counts[current]} at schema {current} (this jim's)")
    if older:
        n = sum(counts[v] for v in older)
        print(f"  {n} need migration (schema {_listed(older)}): each is brought up to date when next written")
    too_new = [job_id for job_id, v in versions.items() if v is not None and v > current]
    unreadable = [job_id for job_id, v in versions.items() if v is None]
    if too_new:
        reads = f"this jim reads up to {current}"
        _problem(too_new, f"written by a newer jim (schema {_listed(newer)}; {reads}): upgrade jim")
    if unreadable:
        _problem(unreadable, "without a schema version jim can read (damaged, or a link): jim status ID says why")
    index = db.index_version()
    if index is not None and index != current:
        why = "brought up to date" if index < current else "rebuilt from the records"
        print(f"index:    schema {index}: {why} when next written")
    return not too_new and not unreadable


def _problem(ids: list[str], what: str) -> None:
    more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
    print(f"  PROBLEM: {len(ids)} {what}: {', '.join(ids[:3])}{more}")


def _listed(versions: list[int]) -> str:
    return ", ".join(map(str, versions))
