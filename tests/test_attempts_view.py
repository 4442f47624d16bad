"""Every attempt of a local job where people look: ``jim status ID`` (text), the record through
jim.xsl (lxml's XSLT 1.0, as a browser applies it) and the pages of ``jim serve``.

The record is made in process, by the real worker and monitor against the in-memory batch
system (tests/support/fake_adapter.py): a node failure and a preemption give local jobs
0 and 1 a second attempt (1 still in its cool-off), and local job 2 is resubmitted by hand
with a reason full of markup.
"""

from __future__ import annotations

import re

import pytest

from jim import background, worker
from jim.config import parse
from jim.db import Database, validate
from jim.jobdesc import parse_rsl
from jim.jobid import local_tag
from jim.monitor import refresh
from jim.paths import Home
from jim.states import EndCause, LocalState
from jim.status import render_status, status_json
from jim.submit import submit

from support.fake_adapter import FakeAdapter

EVIL_REASON = """<script>alert("why")</script> & 'quotes' </td><img src=x onerror=alert(1)>"""
EVIL_USER = "<b>mallory</b>"


@pytest.fixture
def home(tmp_path):
    h = Home(tmp_path / "home")
    yield h
    errors = [f"{p.name}: {e}" for p in sorted(h.db.glob("*.xml")) for e in validate(p)] if h.db.exists() else []
    assert not errors, errors


@pytest.fixture
def retried(home, monkeypatch):
    """A grid job of 3 local jobs with attempts (see the module docstring); returns (db, job id)."""
    config = parse(
        {
            "monitor": {"interval": 0.01, "lost_grace": 60.0},
            "retry": {"max_attempts": 3, "cool_off": 3600.0, "cool_off_factor": 1.0, "max_cool_off": 3600.0},
        },
        env={"JIM_HOME": str(home.root)},
    )
    monkeypatch.setattr(background, "start_monitor", lambda home: None)
    monkeypatch.setattr(background, "start_worker", lambda home, job_id: None)
    db, fake = Database(home.ensure()), FakeAdapter(home)
    job = submit(config, parse_rsl("&(executable=/bin/true)(count=3)(jobname=retried)"), start_background=False)
    worker.submit_pending(config, db, job, fake)
    fake.set_state(f"{job}.0", LocalState.FAILED, cause=EndCause.NODE_FAIL)
    fake.set_state(f"{job}.1", LocalState.RUNNING)
    fake.set_state(f"{job}.2", LocalState.DONE, exit_code=0)
    refresh(config, db, fake)
    with db.update(job) as rec:  # local job 0's cool-off is over: it is submitted again
        rec.local(0).set("retryAfter", "2000-01-01T00:00:00.000Z")
    worker.submit_pending(config, db, job, fake)
    fake.set_state(local_tag(job, 0, 2), LocalState.RUNNING)
    fake.set_state(f"{job}.1", LocalState.CANCELLED, cause=EndCause.PREEMPTED)
    refresh(config, db, fake)
    with db.update(job) as rec:
        rec.local(2).new_attempt(EVIL_REASON, by=EVIL_USER)
    rec = db.read(job)
    assert [(lj.attempt, lj.state) for lj in rec.local_jobs()] == [
        (2, LocalState.RUNNING),
        (2, LocalState.PLANNED),
        (2, LocalState.PLANNED),
    ]
    assert rec.retries() == 3
    return db, job


# -- jim status ID ---------------------------------------------------------------------------


def test_status_text_counts_the_retries_and_lists_every_attempt(retried):
    db, job = retried
    text = render_status(status_json(db.read(job)))
    assert "  retries    3 (3 local jobs resubmitted; 1 by hand; 1 waiting for its cool-off)" in text
    head = next(line for line in text.splitlines() if "PROGRESS / REASON" in line)
    assert head.split()[:4] == ["#", "STATE", "TRY", "EXIT"]
    rows = {line.split()[0]: line.split() for line in text.splitlines() if re.match(r"\s+\d+ [A-Z]", line)}
    assert rows["0"][:3] == ["0", "RUNNING", "2"] and rows["2"][:3] == ["2", "PLANNED", "2"]
    section = text.split("attempts of the local jobs tried more than once", 1)[1]
    attempts = {line.split()[0]: line for line in section.splitlines() if re.match(r"\s+\d+\.\d+ ", line)}
    assert sorted(attempts) == ["0.1", "0.2", "1.1", "1.2", "2.1", "2.2"]
    assert attempts["0.1"].split()[1:3] == ["FAILED", "100"]
    assert "NODE_FAIL" in attempts["0.1"] and "next attempt: node failure (NODE_FAIL) (by jim," in attempts["0.1"]
    assert "PREEMPTED" in attempts["1.1"]
    assert "current attempt, waits for its cool-off until" in attempts["1.2"]
    assert attempts["0.2"].split()[1:3] == ["RUNNING", "103"] and "current attempt" in attempts["0.2"]
    assert attempts["2.1"].split()[1:3] == ["DONE", "0"]
    assert f"next attempt: {EVIL_REASON} (asked by {EVIL_USER}," in attempts["2.1"]


def test_status_text_attempts_are_bounded_like_the_table(retried):
    db, job = retried
    text = render_status(status_json(db.read(job)), rows=2)
    section = text.split("attempts of the local jobs tried more than once", 1)[1]
    assert len([line for line in section.splitlines() if re.match(r"\s+\d+\.\d+ ", line)]) == 2
    assert f"... 4 more attempts of 3 local jobs tried more than once (jim status {job} --json for all)" in section


def test_status_text_without_retries_has_no_attempt_column(home, monkeypatch):
    config = parse({}, env={"JIM_HOME": str(home.root)})
    monkeypatch.setattr(background, "start_monitor", lambda home: None)
    monkeypatch.setattr(background, "start_worker", lambda home, job_id: None)
    job = submit(config, parse_rsl("&(executable=/bin/true)(count=2)"), start_background=False)
    text = render_status(status_json(Database(home.ensure()).read(job)))
    assert "retries" not in text and "TRY" not in text and "attempts of" not in text


def test_status_text_control_characters_in_an_attempt(retried):
    db, job = retried
    data = status_json(db.read(job))
    lj = next(lj for lj in data["localJobs"] if lj["index"] == 2)
    lj["attempts"][0]["retryReason"] = "bad\x1b]0;title\x07 \u2028next"
    lj["attempts"][0]["node"] = "cn\x9b1"
    text = render_status(data)
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text and "\u2028" not in text
    assert "bad?]0;title? ?next" in text and "cn?1" in text
