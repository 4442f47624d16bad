"""The fork backend honours each local job's shape: its cores (core slots on this host) and its
memory limit (a cgroup v2 where jim may make one, else a watch of the job's resident memory).

Real processes on this host: the real ``jim`` command, the fork backend's launcher, jim's
wrapper and shell payloads that note when they start and end.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jim.adapters import fork
from jim.paths import Home

from support.jimcli import Jim, tagged, write_config


def _configure(jim_env: Jim, cores: int, *, attempts: int = 1) -> None:
    text = f'[batch]\nadapter = "fork"\ncores = {cores}\n'
    write_config(jim_env, text)
    if attempts != 1:
        jim_env.config.write_text(jim_env.config.read_text().replace("max_attempts = 1", f"max_attempts = {attempts}"))


def _timed_payload(tmp_path: Path, seconds: float) -> Path:
    """A payload that writes ``<start> <end>`` (epoch seconds) into times/<index> around a sleep."""
    (tmp_path / "times").mkdir()
    script = tmp_path / "job.sh"
    script.write_text(
        f'start=$(date +%s.%N)\nsleep {seconds}\necho "$start $(date +%s.%N)" > {tmp_path}/times/$JIM_INDEX\n'
    )
    return script


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans that overlap at any moment."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])  # (an end sorts before a start)
    most = running = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def _wait_for(what, timeout: float, describe):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"not within {timeout:g} s: {describe()}")


def _states(jim_env: Jim, job: str) -> list[str]:
    return [lj["state"] for lj in sorted(jim_env.status(job)["localJobs"], key=lambda lj: lj["index"])]


def test_no_more_payloads_at_once_than_the_adapters_cores(jim_env, tmp_path):
    _configure(jim_env, cores=2)
    script = _timed_payload(tmp_path, 1.0)
    job = jim_env.submit(f"&(executable=/bin/sh)(arguments={script})(count=5)")
    out = jim_env.wait(job, timeout=180)
    assert out["JOB_STATE"] == "DONE", out
    assert _states(jim_env, job) == ["DONE"] * 5
    spans = [tuple(map(float, p.read_text().split())) for p in sorted((tmp_path / "times").iterdir())]
    assert len(spans) == 5
    assert _most_at_once(spans) <= 2, spans


def test_a_two_core_local_job_holds_two_slots(jim_env, tmp_path):
    _configure(jim_env, cores=2)
    go = tmp_path / "go"
    wide = tmp_path / "wide.sh"
    wide.write_text(f"while [ ! -e {go} ]; do sleep 0.1; done\n")
    narrow = _timed_payload(tmp_path, 0.1)
    big = jim_env.submit(f"&(executable=/bin/sh)(arguments={wide})(cores=2)")
    assert jim_env.status(big)["plan"]["cores"] == "2"
    jim_env.wait_running(big, 1, timeout=120)
    adapter = fork.ForkAdapter(Home(jim_env.home), {"cores": 2})
    assert adapter.free_slots() == 0
    small = jim_env.submit(f"&(executable=/bin/sh)(arguments={narrow})")
    _wait_for(lambda: _states(jim_env, small) == ["QUEUED"], 120, lambda: _states(jim_env, small))
    # the 1-core job waits for as long as the 2-core job holds both slots: seen over a few monitor passes
    for _ in range(10):
        assert _states(jim_env, small) == ["QUEUED"] and not (tmp_path / "times" / "0").exists()
        time.sleep(0.3)
    go.touch()
    assert jim_env.wait(big, timeout=120)["JOB_STATE"] == "DONE"
    assert jim_env.wait(small, timeout=120)["JOB_STATE"] == "DONE"
    assert adapter.free_slots() == 2


def test_a_local_job_waiting_for_cores_is_cancelled_cleanly(jim_env, tmp_path):
    _configure(jim_env, cores=1)
    script = tmp_path / "job.sh"
    script.write_text(f"touch {tmp_path}/ran.$JIM_INDEX\nexec sleep 300\n")
    job = jim_env.submit(f"&(executable=/bin/sh)(arguments={script})(count=2)")
    _wait_for(lambda: sorted(_states(jim_env, job)) == ["QUEUED", "RUNNING"], 120, lambda: _states(jim_env, job))
    waiting = next(lj for lj in jim_env.status(job)["localJobs"] if lj["state"] == "QUEUED")
    assert tagged(waiting["tag"]), "the waiting local job has a process of its own"
    out = jim_env.protocol("cancel", "--job-id", job, timeout=300)
    assert out["JOB_STATE"] == "FAILED", out
    assert _states(jim_env, job) == ["CANCELLED", "CANCELLED"]
    for lj in jim_env.status(job)["localJobs"]:
        _wait_for(lambda tag=lj["tag"]: not tagged(tag), 60, lambda tag=lj["tag"]: tagged(tag))
    assert not (tmp_path / f"ran.{waiting['index']}").exists(), "the waiting job's payload never ran"
    assert fork.ForkAdapter(Home(jim_env.home), {"cores": 1}).free_slots() == 1


def test_a_local_job_over_its_memory_limit_is_stopped_and_fails_the_grid_job(jim_env, tmp_path):
    _configure(jim_env, cores=2, attempts=3)
    script = tmp_path / "job.sh"
    script.write_text(
        'if [ "$JIM_INDEX" = 0 ]; then\n'
        "  exec python3 -c \"import time; b = b'x' * (200 << 20); time.sleep(120)\"\n"
        "fi\nsleep 1\n"
    )
    job = jim_env.submit(f"&(executable=/bin/sh)(arguments={script})(count=2)(maxmemory=50)")
    out = jim_env.wait(job, timeout=180)
    assert out["JOB_STATE"] == "FAILED", out
    assert "OUT_OF_MEMORY" in out.get("MESSAGE", ""), out
    hog, neighbour = sorted(jim_env.status(job)["localJobs"], key=lambda lj: lj["index"])
    assert neighbour["state"] == "DONE"
    assert hog["state"] == "FAILED" and hog["cause"] == "OUT_OF_MEMORY", hog
    assert "out of memory" in hog["reason"]
    assert hog["attempt"] == 1 and len(hog["attempts"]) <= 1, "the job's own fault is not tried again"
    stderr = (jim_env.home / "jobs" / job / "local" / "0" / "stderr").read_text()
    assert "over the memory limit of 50 MB" in stderr
