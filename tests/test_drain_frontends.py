"""The drain switch behind the real front ends: the GRAM5 gatekeeper and the ARC CEs (6.17 and 7.0).

While the site drains, a new grid job is refused in the front end's own language (GRAM: error 3 and
the reason as the client's details; ARC: the job fails in the LRMS submit step with the reason in
``arccat -l``), and a grid job that was running before finishes with its output.  Each test points
``[site] drain_file`` of the service's jim configuration at a flag file of its own for as long as it
runs (the configuration is put back after), and turns it on and off with ``jim drain`` as root.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_arc import MC_SCRIPT, check_montecarlo, mc_xrsl
from test_gram_e2e import STATE, Site, _jim_ready, site  # noqa: F401  (the GRAM site fixture)

from jim.safeio import atomic_write

pytestmark = [pytest.mark.slow]

REASON = "jim's drain test: a downtime is coming"
REFUSAL = f"the site is draining: {REASON}"


def _wait(what, timeout: float, every: float = 0.5):
    """``what()`` once it is true (its value), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout:g} s: {what.__doc__ or what}")
        time.sleep(every)


def _jim_drain(action: str, flag: Path, tmp_path: Path) -> str:
    """``jim drain <action>`` of this checkout, as root, on the flag file ``flag`` (a path on this host)."""
    config = tmp_path / "drain.toml"
    config.write_text(f'[site]\ndrain_file = "{flag}"\n')
    env = {**os.environ, "JIM_CONFIG": str(config), "JIM_HOME": str(tmp_path / "admin-jim")}
    argv = [sys.executable, "-m", "jim", "drain", action, *(["--reason", REASON] if action == "on" else [])]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc
    return proc.stdout


@contextmanager
def _drained(config: Path, flag: str, host: Path, tmp_path: Path) -> Iterator[None]:
    """The service's jim configuration ``config`` (on this host) names the flag file ``flag`` (as the
    service sees it; ``host``: the same file on this host), which is on for the block; then off, and
    the configuration as it was."""
    original = config.read_text()
    line = f'drain_file = "{flag}"'
    if re.search(r"^\[site\]\s*$", original, re.M):
        text = re.sub(r"^\[site\]\s*$", f"[site]\n{line}", original, count=1, flags=re.M)
    else:
        text = f"[site]\n{line}\n\n{original}"
    host.parent.mkdir(mode=0o755, exist_ok=True)
    host.parent.chmod(0o755)  # (the mapped account looks for it there)
    atomic_write(config, text, mode=0o644)
    try:
        assert _jim_drain("on", host, tmp_path).startswith("draining since ")
        yield
    finally:
        _jim_drain("off", host, tmp_path)
        atomic_write(config, original, mode=0o644)
        host.parent.rmdir()


# -- GRAM5 ---------------------------------------------------------------------------------------


def _jim_jobs(gram: Site) -> list[dict]:
    proc = gram.jim("list", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.gram
def test_gram_refuses_a_new_job_with_error_3_while_a_running_one_finishes(site, tmp_path):  # noqa: F811
    _jim_ready(site)
    name = f"drain-{secrets.token_hex(4)}"
    rsl = (
        '&(executable=/bin/sh)(arguments=-c "sleep 5; echo event $JIM_FIRST_EVENT")'
        f"(jimtype=montecarlo)(events=2)(eventsperjob=1)(jobname={name})"
    )
    running = subprocess.Popen(
        [site.env["JIM_GRAM_AS_SUBMITTER"], "globusrun", "-s", "-r", site.poll, rsl],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:

        def active() -> str | None:
            """the grid job is ACTIVE in jim"""
            return next((j["id"] for j in _jim_jobs(site) if j["name"] == name and j["state"] == "ACTIVE"), None)

        job_id = _wait(active, timeout=120)
        flag = STATE / "drain-test" / "drain"
        with _drained(Path(site.env["JIM_GRAM_JIM_CONFIG"]), str(flag), flag, tmp_path):
            known = {j["id"] for j in _jim_jobs(site)}
            for service in (site.poll, site.push):
                refused = site.client("globus-job-run", service, "/bin/echo", "never", timeout=120)
                assert refused.returncode == 3 and "(error code 3)" in refused.stderr, refused
                details = re.search(r"^Details: (.*)$", refused.stderr, re.M)
                assert details and REFUSAL in details.group(1), refused.stderr
            assert {j["id"] for j in _jim_jobs(site)} == known  # (nothing recorded)
            out, err = running.communicate(timeout=180)
            assert running.returncode == 0, out + err
            assert out.splitlines() == ["event 1", "event 2"], out + err
            st = site.status(job_id)
            assert st["state"] == "DONE" and Path(st["outputTar"]).is_file(), st
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()


# -- ARC 6.17 and 7.0 ----------------------------------------------------------------------------


@pytest.mark.arc
def test_arc_fails_a_new_job_with_the_reason_while_a_running_one_finishes(each_arc, tmp_path):
    ce = each_arc
    job = ce.submit("drain-mc", mc_xrsl("drain-mc", 40, 20, sleep=15), {"mc.sh": MC_SCRIPT})
    refused = None
    try:

        def running() -> bool:
            """the two local jobs run"""
            return len(ce.processes(job.marker)) >= 2

        _wait(running, timeout=240)
        flag = ce.state / "drain-test" / "drain"
        with _drained(ce.host(ce.state / "etc" / "jim-fork.toml"), str(flag), ce.host(flag), tmp_path):
            never = '&(executable="/bin/echo")(arguments="never")(jobname="drain-refused")'
            refused = ce.submit("drain-refused", never)
            fields = ce.wait(refused, "Failed", timeout=240)
            log = ce.log(refused)
            # A-REX's Job Error is its own "Job submission to LRMS failed"; jim's reason is in the job's log
            assert fields.get("State") == "Failed" and f"jim: {REFUSAL}" in log, (fields, log)
            assert ce.jim_id(refused) is None, "jim recorded a grid job while the site drains"
            # the job that ran before: both local jobs end and A-REX gets its outputs, still drained
            check_montecarlo(ce, job, local_jobs=2, per_job=20)
    finally:
        ce.clean(job, *([refused] if refused else []))
