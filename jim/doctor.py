"""``jim doctor``: checks the configuration, jim's home, the batch adapter and the job types."""

from __future__ import annotations

import stat

from jim.config import Config
from jim.handlers import discover
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
    print(f"adapter:  {config.batch.adapter} {config.batch.describe_options()}".rstrip())
    try:
        deg = site.adapter.cache.degraded() if home.cache.exists() else None
        print(f"  {'DEGRADED since ' + str(deg['since']) + ': ' + deg['reason'] if deg else 'healthy'}")
    except Exception as e:
        ok = False
        print(f"  PROBLEM: {e}")
    for name, entry in sorted(discover().items()):
        if isinstance(entry, Exception):
            ok = False
            print(f"handler {name}: BROKEN ({entry})")
    print("all good" if ok else "problems found")
    return 0 if ok else 1
