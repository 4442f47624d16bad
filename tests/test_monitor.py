"""The monitor's rules of evidence, on records and batch answers made by hand."""

from __future__ import annotations

import time

import pytest

from jim.adapters.model import BatchStatus, QueryResult
from jim.db import Database
from jim.evidence import Rules
from jim.localfiles import read_progress
from jim.monitor import apply_local
from jim.paths import Home
from jim.states import Evidence, LocalState

from support.records import queued_record


@pytest.fixture
def lj(tmp_path):
    db = Database(Home(tmp_path / "h"))
    rec = queued_record()
    db.create(rec)
    return db.read(rec.id).local(0)


def apply(lj, tmp_path, result, accounting=None, **kw):
    d = tmp_path / "local0"
    d.mkdir(exist_ok=True)
    rules = Rules(time.time(), lost_grace=kw.pop("grace", 60), **kw)
    apply_local(lj, d, result, accounting or {}, rules, cancelled=False)
    return d


def test_failed_query_changes_nothing(lj, tmp_path):
    (tmp_path / "local0").mkdir()
    (tmp_path / "local0" / "exit_code").write_text("0\n")
    apply(lj, tmp_path, QueryResult(ok=False, error="down"))
    assert lj.state is LocalState.QUEUED


def test_reused_id_with_other_tag_counts_as_absent(lj, tmp_path):
    other = BatchStatus(LocalState.RUNNING, tag="someone-else.0")
    apply(lj, tmp_path, QueryResult(ok=True, statuses={"77_0": other}))
    assert lj.state is LocalState.QUEUED and lj.get("absentSince")


def test_absent_becomes_lost_only_after_grace(lj, tmp_path):
    res = QueryResult(ok=True, statuses={})
    apply(lj, tmp_path, res, grace=60)
    assert lj.state is LocalState.QUEUED
    lj.set("absentSince", "2020-01-01T00:00:00.000Z")
    apply(lj, tmp_path, res, grace=60)
    assert lj.state is LocalState.LOST and lj.evidence == "absent-after-grace"


@pytest.mark.parametrize(
    "exit_file,expected",
    [
        ("4\n", (LocalState.FAILED, 4, "wrapper-exit-file")),  # the wrapper's file beats everything
        (None, (LocalState.FAILED, 9, "accounting")),  # without it, the accounting beats the batch
    ],
)
def test_exit_file_beats_accounting_beats_batch(lj, tmp_path, exit_file, expected):
    """The batch system says the job ended FAILED (no exit code); accounting says exit 9."""
    done_by_batch = BatchStatus(LocalState.FAILED, native="FAILED")
    acct = {
        "77_0": BatchStatus(
            LocalState.FAILED, exit_code=9, evidence=Evidence.ACCOUNTING, tag=lj.tag, submitted=time.time() - 95
        )
    }
    d = tmp_path / "local0"
    d.mkdir()
    if exit_file is not None:
        (d / "exit_code").write_text(exit_file)
    apply(lj, tmp_path, QueryResult(ok=True, statuses={"77_0": done_by_batch}), acct)
    assert (lj.state, lj.exit_code, lj.evidence) == expected


def test_the_batch_system_decides_when_nothing_better_says(lj, tmp_path):
    apply(lj, tmp_path, QueryResult(ok=True, statuses={"77_0": BatchStatus(LocalState.FAILED, native="TIMEOUT")}))
    assert (lj.state, lj.exit_code, lj.evidence, lj.get("reason")) == (LocalState.FAILED, None, "batch", "TIMEOUT")


def test_accounting_older_than_our_submission_is_ignored(lj, tmp_path):
    stale = {
        "77_0": BatchStatus(
            LocalState.DONE, exit_code=0, evidence=Evidence.ACCOUNTING, tag=None, submitted=time.time() - 10000
        )
    }
    apply(lj, tmp_path, QueryResult(ok=True, statuses={}), stale, accounting_slack=300)
    assert lj.state is LocalState.QUEUED
    fresh = {
        "77_0": BatchStatus(
            LocalState.FAILED, exit_code=2, evidence=Evidence.ACCOUNTING, tag=lj.tag, submitted=time.time() - 95
        )
    }
    apply(lj, tmp_path, QueryResult(ok=True, statuses={}), fresh, accounting_slack=300)
    assert (lj.state, lj.exit_code, lj.evidence) == (LocalState.FAILED, 2, "accounting")


def test_progress_file_parsing(tmp_path):
    p = tmp_path / "progress"
    p.write_text("gen 10 250\nd0gstar 117 250\ngarbage line\nreco x 3\ngen 250 250\n")
    assert read_progress(tmp_path) == {"gen": (250, 250), "d0gstar": (117, 250)}
    assert read_progress(tmp_path / "missing") == {}
