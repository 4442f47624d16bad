"""The Grid Community Toolkit's own GRAM job-manager test suite, against jim.

The suite (test/ of globus-gram-job-manager 15.8: the C clients of test/client and the Perl drivers of
test/jobmanager: submit, stdio, failure, RSL size, user) is built by tests/services/gram-suite/start.sh
from Debian's source package and run by its run.sh, as the submitting account, against two contacts of
the same test gatekeeper (tests/services/gram): the stock ``jobmanager-fork`` as the baseline, and
``jobmanager-jim`` (jim on its fork backend). Both runs go at once.

The rule: every test case the stock fork module passes, jim passes too, unless
tests/services/gram-suite/expected.txt lists it with the reason it is outside jim's scope. A listed
case that jim passes is reported too, so that the list stays true.

Without the site or the built suite the test skips with the reason, except under ``CI=true``, where it
fails. It runs as root (run.sh becomes the submitting account).
"""

from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gram, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
SUITE_DIR = HERE / "services" / "gram-suite"
STATE = Path(os.environ.get("JIM_GRAM_TEST_STATE", "/var/lib/jim-gram-test"))
RESULT = re.compile(r"^(not ok|ok)\b\s*(\d+)?\s*(?:-\s*)?(.*)$")


def parse_tap(text: str) -> dict[str, str]:
    """``{case: "pass" | "fail" | "skip"}`` of one driver's TAP output. A case is named by its position
    among the result lines (``#3``): some drivers print no numbers, and descriptions repeat. Cases the
    plan announces that never reported (a crash, a timeout) are failures."""
    cases: dict[str, str] = {}
    planned = 0
    for line in text.splitlines():
        plan = re.match(r"^1\.\.(\d+)", line)
        if plan:
            planned = int(plan.group(1))
            continue
        m = RESULT.match(line)
        if not m:
            continue
        rest = m.group(3)
        if re.search(r"#\s*skip", rest, re.IGNORECASE):
            verdict = "skip"
        elif m.group(1) == "ok":
            verdict = "pass"
        else:
            verdict = "fail"
        cases[f"#{len(cases) + 1}"] = verdict
    for n in range(len(cases) + 1, planned + 1):
        cases[f"#{n}"] = "fail"
    return cases


def results(outdir: Path) -> dict[str, str]:
    """Every case of every driver run into ``outdir``: ``{"driver#n": verdict}``."""
    out: dict[str, str] = {}
    for tap in sorted(outdir.glob("*.tap")):
        for case, verdict in parse_tap(tap.read_text(errors="replace")).items():
            out[tap.stem + case] = verdict
    return out


def expected_failures() -> dict[str, str]:
    """expected.txt: ``driver#n  reason`` lines (``#`` comments and blank lines ignored)."""
    listed: dict[str, str] = {}
    for line in (SUITE_DIR / "expected.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("# "):
            continue
        case, _, reason = line.partition(" ")
        assert reason.strip(), f"expected.txt: {case} has no reason"
        listed[case] = reason.strip()
    return listed


def test_parse_tap_names_cases_by_position_and_fails_the_missing_ones():
    text = "1..4\nok 1 - a\nnot ok 2 - b\n# comment\nok 3 # skip not here\n"
    assert parse_tap(text) == {"#1": "pass", "#2": "fail", "#3": "skip", "#4": "fail"}
    assert parse_tap("1..2\nok\nok  stdio\n") == {"#1": "pass", "#2": "pass"}


def _unavailable(reason: str):
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(reason)
    pytest.skip(reason)


def _site() -> dict[str, str]:
    env_file = STATE / "env.sh"
    if os.geteuid() != 0:
        _unavailable("the GRAM suite runs as root (it becomes the submitting account)")
    if not env_file.exists():
        _unavailable(f"no GRAM test site ({env_file}); run tests/services/gram/start.sh as root")
    if not (STATE / "suite" / "client" / "register-test").exists():
        _unavailable(f"the GRAM job-manager suite is not built; run {SUITE_DIR / 'start.sh'} as root")
    env: dict[str, str] = {}
    for line in env_file.read_text().splitlines():
        m = re.match(r"^([A-Z_]+)='(.*)'$", line)
        if m:
            env[m.group(1)] = m.group(2)
    return env


def test_jim_passes_every_case_the_stock_fork_module_passes(tmp_path):
    site = _site()
    runs = {"fork": (site["JIM_GRAM_FORK_SERVICE"], "fork"), "jim": (site["JIM_GRAM_POLL_SERVICE"], "jim")}
    out = os.environ.get("JIM_TEST_OUTPUT")
    base = Path(out) / "gram-suite" if out else tmp_path
    logs = {}

    def run(name: str) -> subprocess.CompletedProcess:
        contact, lrm = runs[name]
        return subprocess.run(
            [str(SUITE_DIR / "run.sh"), contact, lrm, str(base / name)],
            capture_output=True,
            text=True,
            timeout=3600,
            stdin=subprocess.DEVNULL,
        )

    with ThreadPoolExecutor(2) as pool:
        for name, proc in zip(runs, pool.map(run, runs)):
            logs[name] = proc.stdout + proc.stderr
            assert proc.returncode == 0, f"run.sh {name} failed:\n{logs[name][-2000:]}"
    fork, jim = results(base / "fork"), results(base / "jim")
    listed = expected_failures()
    assert sum(v == "pass" for v in fork.values()) > 100, f"the fork baseline passed too little:\n{logs['fork']}"

    missing = [
        f"{case} (see {base / 'jim' / case.split('#')[0]}.tap)"
        for case, verdict in fork.items()
        if verdict == "pass" and jim.get(case) != "pass" and case not in listed
    ]
    stale = [case for case in listed if jim.get(case) == "pass"]
    summary = (
        f"fork passed {sum(v == 'pass' for v in fork.values())} of {len(fork)}, "
        f"jim {sum(v == 'pass' for v in jim.values())} of {len(jim)}"
    )
    assert not missing, f"{summary}; jim fails what fork passes: {missing}\n{logs['jim']}"
    assert not stale, f"{summary}; listed in expected.txt but jim passes them now: {stale}"
