"""The batch system's status answer as a long-lived caller (the monitor) sees it: the same command output
is parsed once, the same answer costs no conversion, and a changed answer shares every unchanged job's
status object with the previous one. Through the real SlurmAdapter against the project's fake Slurm."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from jim.adapters.slurm import SlurmAdapter
from jim.jobid import tag_name
from jim.paths import Home
from jim.states import LocalState

from fake_sched import FakeSched

GRID = "20261125-120000-0a0b0c0d"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    f = FakeSched(tmp_path / "state")
    f.set_faults(cpus=0)  # nothing starts: every task stays pending until this test changes it
    for k, v in f.env().items():
        monkeypatch.setenv(k, v)
    yield f
    f.kill_jobs()


def test_the_same_output_is_parsed_once_and_a_change_shares_the_unchanged_statuses(fake, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/sh\nsleep 30\n")
    job.chmod(0o755)
    out = subprocess.run(
        ["sbatch", "--parsable", "--array=0-2", "-J", tag_name(GRID, 0), "-o", "/dev/null", str(job)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    array = out.split(";")[0]
    home = Home(tmp_path / "home").ensure()
    adapter = SlurmAdapter(home, {"cache_interval": 1.0})
    parsed = []
    real = adapter.parse_status
    adapter.parse_status = lambda text: parsed.append(text) or real(text)  # type: ignore[method-assign]

    first = adapter.query_cached([])
    assert first.ok and len(first.statuses) == 3 and len(parsed) == 1
    cache_file = home.cache / "slurm-status.json"
    written = os.stat(cache_file)
    assert adapter.query_cached([], now=first.at + 0.5) is first  # within the interval: the very same answer
    again = adapter.query_cached([], now=first.at + 5)  # asked again: the same output, not parsed again
    assert again is not first and again.statuses is first.statuses and len(parsed) == 1
    assert again.at > first.at and again.generation == first.generation  # the same answer, dated again
    # ... and not written again: only its new date is, and every process of the user sees that date
    assert (os.stat(cache_file).st_ino, os.stat(cache_file).st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    assert os.stat(home.cache / "slurm-status.at").st_size < 100
    seen = SlurmAdapter(home, {"cache_interval": 1.0}).cache.cached()
    assert seen is not None and seen.at == again.at and seen.statuses == first.statuses

    subprocess.run(["scancel", f"{array}_1"], check=True, capture_output=True)
    changed = adapter.query_cached([], now=first.at + 10)
    assert len(parsed) == 2
    ids = sorted(changed.statuses)
    assert changed.statuses[ids[0]] is first.statuses[ids[0]]
    assert changed.statuses[ids[2]] is first.statuses[ids[2]]
    assert changed.statuses[ids[1]].state is LocalState.CANCELLED
    assert changed.generation == first.generation + 1 and changed.changed[ids[1]] == changed.generation
    assert changed.changed[ids[0]] == changed.changed[ids[2]] == first.generation  # unchanged since
    # another process reads the same answer from the shared cache file
    other = SlurmAdapter(home, {"cache_interval": 1.0}).cache.cached()
    assert other is not None and other.statuses == changed.statuses and other.at == changed.at
    # a date that confirms an older answer does not date the new one
    (home.cache / "slurm-status.at").write_text(json.dumps({"answer": first.at, "at": changed.at + 3600}))
    other = SlurmAdapter(home, {"cache_interval": 1.0}).cache.cached()
    assert other is not None and other.at == changed.at
