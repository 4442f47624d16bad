"""jim's fault-injecting fake batch system: see fakesched.py (the commands) and README.md."""

from __future__ import annotations

import json
import os
from pathlib import Path

BIN = Path(__file__).resolve().parent / "bin"


class FakeSched:
    """A test's handle on one fake batch system (its state directory)."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """What a process needs to use this fake: its directory, and its commands first on PATH."""
        base = dict(os.environ if base is None else base)
        return {"FAKE_SCHED_DIR": str(self.dir), "PATH": f"{BIN}:{base.get('PATH', '/usr/bin:/bin')}"}

    def kill_jobs(self) -> None:
        """Kill every job this fake started (each leads its own process group): none may outlive its test."""
        for pgid_file in (self.dir / "run").glob("*.pgid"):
            try:
                os.killpg(int(pgid_file.read_text()), 9)
            except (OSError, ValueError):
                pass

    def set_faults(self, **faults) -> None:
        """Replace faults.json (see fakesched.FAULTS); the commands read it on every run."""
        path = self.dir / "faults.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(faults))
        os.replace(tmp, path)

    def faults(self) -> dict:
        try:
            return json.loads((self.dir / "faults.json").read_text())
        except (OSError, ValueError):
            return {}

    def events(self) -> list[dict]:
        try:
            return [json.loads(line) for line in (self.dir / "events.log").read_text().splitlines() if line]
        except OSError:
            return []

    def fired(self, fault: str) -> int:
        return sum(1 for e in self.events() if e.get("fault") == fault)

    def state(self) -> dict:
        try:
            return json.loads((self.dir / "state.json").read_text())
        except (OSError, ValueError):
            return {"jobs": {}, "acct": []}

    def submissions(self, name_prefix: str = "") -> list[dict]:
        """Every sbatch that recorded a job (from the event log: purged jobs included)."""
        return [e for e in self.events() if "submitted" in e and e.get("name", "").startswith(name_prefix)]

    def tasks_started(self, name_prefix: str = "") -> int:
        """How many tasks of jobs named ``name_prefix...`` were started (each start is a real process)."""
        names: dict[int, str] = {}  # id -> name of the job holding it at the time (ids may be reused)
        n = 0
        for e in self.events():
            if "submitted" in e:
                names[int(e["submitted"])] = e.get("name", "")
            elif "started" in e:
                if names.get(int(str(e["started"]).split("_")[0]), "").startswith(name_prefix):
                    n += 1
        return n
