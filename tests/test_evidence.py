"""The rules of evidence (:mod:`jim.evidence`), as a table: what is known of one local job -> its state.

Every row starts from a local job QUEUED 90 s ago under batch id ``77_0`` (submitted 100 s ago) and
applies one set of facts; the row says the state, exit code and evidence it must end with, and a piece
of its reason.  No file is read and no command run: the rules are pure.
"""

from __future__ import annotations

import time

import pytest

from jim.adapters.model import BatchStatus
from jim.evidence import Facts, Rules, ended_by_cancel, held_too_long, overdue_holds, own_record, settle
from jim.localfiles import ExitFile
from jim.states import EndCause, Evidence, LocalState

from support.records import queued_record

NOW = time.time()
L = LocalState
E = Evidence


def _record(n: int = 1):
    return queued_record(n, now=NOW)


@pytest.fixture
def lj():
    return _record().local(0)


def mine(lj, state, **kw):
    return BatchStatus(state, tag=lj.tag, **kw)


def acct(lj, state, code, **kw):
    return BatchStatus(state, exit_code=code, evidence=E.ACCOUNTING, tag=lj.tag, submitted=NOW - 95, **kw)


def facts(lj, status=None, *, answered=True, at=NOW, **kw):
    return Facts(answered=answered, status=status, answered_at=at, **kw)


ROWS = [
    # (name, facts(lj) -> Facts, expected (state, exit code, evidence), reason contains)
    (
        "a failed query is no news",
        lambda lj: facts(lj, answered=False, exit=ExitFile(0, {})),
        (L.QUEUED, None, None),
        "",
    ),
    ("running in the queue", lambda lj: facts(lj, mine(lj, L.RUNNING)), (L.RUNNING, None, None), ""),
    (
        "held, with the batch system's reason",
        lambda lj: facts(lj, mine(lj, L.HELD, reason="JobHeldUser")),
        (L.HELD, None, None),
        "JobHeldUser",
    ),
    (
        "the exit file beats a terminal batch state",
        lambda lj: facts(lj, mine(lj, L.FAILED), exit=ExitFile(4, {})),
        (L.FAILED, 4, "wrapper-exit-file"),
        "exit code 4",
    ),
    (
        "a good exit file is DONE",
        lambda lj: facts(lj, None, exit=ExitFile(0, {})),
        (L.DONE, 0, "wrapper-exit-file"),
        "",
    ),
    (
        "a signalled 0 is not success",
        lambda lj: facts(lj, None, exit=ExitFile(0, {"terminated_by": "15", "signal": "15"})),
        (L.FAILED, 1, "wrapper-exit-file"),
        "signal 15",
    ),
    (
        "the batch system's cause is kept with the exit file",
        lambda lj: facts(lj, mine(lj, L.FAILED, cause=EndCause.PREEMPTED), exit=ExitFile(143, {"signal": "15"})),
        (L.FAILED, 143, "wrapper-exit-file"),
        "preempt",
    ),
    (
        "a wrapper that failed is the node's fault",
        lambda lj: facts(lj, None, exit=ExitFile(1, {"wrapper_error": "no python"})),
        (L.FAILED, 1, "wrapper-exit-file"),
        "no python",
    ),
    (
        "still RUNNING after the exit file: the batch system is late",
        lambda lj: facts(lj, mine(lj, L.RUNNING), exit=ExitFile(0, {})),
        (L.QUEUED, None, None),
        "",
    ),
    (
        "accounting beats the batch state",
        lambda lj: facts(lj, mine(lj, L.FAILED), record=acct(lj, L.FAILED, 9)),
        (L.FAILED, 9, "accounting"),
        "",
    ),
    (
        "absent: the accounting record says",
        lambda lj: facts(lj, None, record=acct(lj, L.DONE, 0)),
        (L.DONE, 0, "accounting"),
        "",
    ),
    (
        "someone else's accounting record (another tag) is not evidence",
        lambda lj: facts(lj, None, record=BatchStatus(L.DONE, exit_code=0, evidence=E.ACCOUNTING, tag="x.0")),
        (L.QUEUED, None, None),
        "",
    ),
    (
        "an older job's accounting record (same id, long before) is not evidence",
        lambda lj: facts(lj, None, record=BatchStatus(L.DONE, 0, evidence=E.ACCOUNTING, submitted=NOW - 10_000)),
        (L.QUEUED, None, None),
        "",
    ),
    (
        "the batch system's end, with its cause",
        lambda lj: facts(lj, BatchStatus(L.FAILED, None, "NodeDown", "NODE_FAIL", cause=EndCause.NODE_FAIL)),
        (L.FAILED, None, "batch"),
        "node failure",
    ),
    (
        "failed before the wrapper started: not started",
        lambda lj: facts(lj, mine(lj, L.FAILED, native="FAILED"), started=False),
        (L.FAILED, None, "batch"),
        "never started (NOT_STARTED)",
    ),
    (
        "done by the batch system alone is exit 0",
        lambda lj: facts(lj, mine(lj, L.DONE, native="COMPLETED")),
        (L.DONE, 0, "batch"),
        "",
    ),
    (
        "a reused id (another tag) counts as absent",
        lambda lj: facts(lj, BatchStatus(L.RUNNING, tag="x.0")),
        (L.QUEUED, None, None),
        "",
    ),
    (
        "an answer older than the job's queueing says nothing",
        lambda lj: facts(lj, None, at=NOW - 200),
        (L.QUEUED, None, None),
        "",
    ),
    (
        "cancelled: a failed exit is CANCELLED",
        lambda lj: facts(lj, None, exit=ExitFile(143, {"signal": "15"}), cancelled=True),
        (L.CANCELLED, 143, "cancel"),
        "cancelled",
    ),
    (
        "cancelled: a job that had ended well stays DONE",
        lambda lj: facts(lj, None, exit=ExitFile(0, {}), cancelled=True),
        (L.DONE, 0, "wrapper-exit-file"),
        "",
    ),
]


@pytest.mark.parametrize(("name", "make", "expected", "reason"), ROWS, ids=[r[0] for r in ROWS])
def test_the_order_of_evidence(lj, name, make, expected, reason):
    settle(lj, make(lj), Rules(NOW, lost_grace=60))
    assert (lj.state, lj.exit_code, lj.evidence) == expected
    assert reason in (lj.get("reason") or "")


def test_absent_without_evidence_is_lost_only_after_the_grace_period(lj):
    settle(lj, facts(lj), Rules(NOW, lost_grace=60))
    assert lj.state is L.QUEUED and lj.get("absentSince")
    settle(lj, facts(lj), Rules(NOW + 59, lost_grace=60))
    assert lj.state is L.QUEUED
    settle(lj, facts(lj), Rules(NOW + 61, lost_grace=60))
    assert (lj.state, lj.evidence) == (L.LOST, "absent-after-grace")


def test_seen_in_the_queue_again_ends_the_absence(lj):
    settle(lj, facts(lj), Rules(NOW, lost_grace=60))
    settle(lj, facts(lj, mine(lj, L.RUNNING)), Rules(NOW + 30, lost_grace=60))
    assert lj.state is L.RUNNING and lj.get("absentSince") is None


def test_a_killed_local_job_is_cancelled_by_whom(lj):
    lj.set("killedBy", "alice")
    settle(lj, facts(lj, None, exit=ExitFile(143, {"signal": "15"})), Rules(NOW))
    assert (lj.state, lj.get("reason")) == (L.CANCELLED, "killed by alice")


def test_terminal_states_never_change(lj):
    settle(lj, facts(lj, None, exit=ExitFile(3, {})), Rules(NOW))
    settle(lj, facts(lj, mine(lj, L.RUNNING)), Rules(NOW))
    settle(lj, facts(lj, None, exit=ExitFile(0, {})), Rules(NOW))
    assert (lj.state, lj.exit_code) == (L.FAILED, 3)


@pytest.mark.parametrize(
    ("ec", "expected"),
    [
        (None, (L.CANCELLED, None, "cancel")),
        (ExitFile(0, {}), (L.DONE, 0, "wrapper-exit-file")),
        (ExitFile(143, {"signal": "15", "terminated_by": "15"}), (L.CANCELLED, 143, "cancel")),
    ],
)
def test_what_a_cancel_records(lj, ec, expected):
    """One rule for the monitor and jim cancel/kill: DONE if the wrapper says it ended well first."""
    ended_by_cancel(lj, ec, "cancelled by the user")
    assert (lj.state, lj.exit_code, lj.evidence) == expected


def test_own_record_is_the_same_tag_and_not_older_than_the_submission(lj):
    assert own_record(lj, None, 300) is None
    assert own_record(lj, acct(lj, L.DONE, 0), 300) is not None
    assert own_record(lj, BatchStatus(L.DONE, tag="x.0"), 300) is None
    assert own_record(lj, BatchStatus(L.DONE, submitted=NOW - 500), 300) is None
    assert own_record(lj, BatchStatus(L.DONE, submitted=NOW - 350), 300) is not None


def test_holds_past_the_timeout_are_overdue_and_cancelled_saying_why():
    rec = _record(2)
    rec.local(0).set_state(L.HELD, reason="JobHeldUser", at=NOW - 1000)
    rec.local(1).set_state(L.HELD, at=NOW - 10)
    overdue = overdue_holds(rec, NOW, 600)
    assert [lj.index for lj in overdue] == [0]
    held_too_long(overdue[0], 600)
    assert overdue[0].state is L.CANCELLED
    assert overdue[0].get("reason") == "held for more than 600 s (JobHeldUser); cancelled by jim"
