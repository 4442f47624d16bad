"""``jim status`` for a terminal: the text of crafted status rows, of records, and the real command."""

from __future__ import annotations

import json
import random
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from jim.db import Database
from jim.jobid import new_job_id
from jim.paths import Home
from jim.record import NewJob, new_record
from jim.states import Evidence, LocalState
from jim.status import attempts_of, dump, job_fraction, phase_totals, sort_key, status_json
from jim.statustext import bar, duration, render_job, safe
from jim.timestamps import now_iso

from support.status_text import render_status

NOW = 1_800_000_000.0


def iso(seconds_ago: float) -> str:
    return now_iso(NOW - seconds_ago)


def lj(
    index,
    state,
    *,
    started=None,
    ended=None,
    submitted=None,
    exit_code=None,
    progress=(),
    reason=None,
    evidence=None,
    batch_id=None,
):
    return {
        "index": index,
        "tag": f"x.{index}",
        "state": state,
        "batchId": batch_id or f"{1000 + index}:1.0",
        "queue": None,
        "submitted": iso(submitted) if submitted is not None else None,
        "started": iso(started) if started is not None else None,
        "ended": iso(ended) if ended is not None else None,
        "exitCode": exit_code,
        "evidence": evidence,
        "reason": reason,
        "host": None,
        "heartbeat": None,
        "slice": {},
        "progress": [{"name": n, "done": d, "total": t} for n, d, t in progress],
        "MasterJobID": "x",
        "SplitID": str(index),
        "HerdState": "Splitted",
    }


def status(locals_, state="ACTIVE", **extra):
    counts: dict[str, int] = {}
    done = total = 0
    for j in locals_:
        counts[j["state"]] = counts.get(j["state"], 0) + 1
        for p in j["progress"]:
            done += min(p["done"], p["total"])
            total += p["total"]
    data = {
        "id": "20260101-000000-abcdef12",
        "state": state,
        "exitCode": None,
        "jobtype": "montecarlo",
        "name": "D0 MC request 4711",
        "owner": "d0mc",
        "adapter": "fork",
        "created": iso(600),
        "updated": iso(5),
        "cancelRequested": False,
        "HerdState": "Splitted",
        "plan": {
            "localJobs": str(len(locals_)),
            "binding": "site-recommended-cpu",
            "explanation": "1000 events in 4 local jobs",
        },
        "counts": counts,
        "progress": {"done": done, "total": total, "fraction": done / total if total else None},
        "outputTar": None,
        "localJobs": locals_,
    }
    data.update(extra)
    return data


def table_indices(text: str) -> list[int]:
    """The local job numbers of the table rows, in the order printed."""
    rows = text.split("PROGRESS / REASON\n", 1)[1].splitlines()
    return [int(r.split()[0]) for r in rows if r.strip() and r.split()[0].isdigit()]


def test_failed_first_then_slowest():
    locals_ = [
        # running: 0 is heading for 100 s (50 % after 50 s), 1 for 400 s (25 % after 100 s): 1 is slower
        lj(0, "RUNNING", started=50, progress=[("d0gstar", 125, 250)]),
        lj(1, "RUNNING", started=100, progress=[("d0gstar", 62, 250), ("reco", 0, 0)]),
        lj(
            2,
            "DONE",
            started=300,
            ended=200,
            exit_code=0,
            evidence="wrapper-exit-file",
            progress=[("d0gstar", 250, 250)],
        ),
        lj(
            3,
            "FAILED",
            started=90,
            ended=10,
            exit_code=3,
            evidence="wrapper-exit-file",
            reason="exit code 3",
            progress=[("d0gstar", 117, 250)],
        ),
        lj(4, "QUEUED", submitted=30),
        lj(
            5,
            "DONE",
            started=300,
            ended=250,
            exit_code=0,
            evidence="wrapper-exit-file",
            progress=[("d0gstar", 250, 250)],
        ),
        lj(6, "LOST", started=500, ended=100, evidence="absent-after-grace"),
        # running without any progress reported: unknown, so it counts as the slowest running job
        lj(7, "RUNNING", started=20),
    ]
    text = render_status(status(locals_), now=NOW)
    assert table_indices(text) == [3, 6, 7, 1, 0, 4, 2, 5]
    # the failed job shows why, and how far it came
    row = next(r for r in text.splitlines() if r.split()[:2] == ["3", "FAILED"])
    assert "exit code 3" in row and "d0gstar 117/250" in row and "wrapper-exit-file" in row
    assert "    80s  " in row  # from 90 s ago to 10 s ago


def test_slowest_done_first_and_row_limit():
    locals_ = [lj(k, "DONE", started=1000, ended=1000 - 10 * (k + 1), exit_code=0, evidence="batch") for k in range(30)]
    text = render_status(status(locals_, state="DONE", exitCode=0), rows=5, now=NOW)
    assert table_indices(text) == [29, 28, 27, 26, 25]
    assert "... 25 more local jobs" in text
    assert text.splitlines()[0] == "grid job 20260101-000000-abcdef12  DONE (exit code 0)"


def test_counts_and_progress_bars():
    locals_ = [
        lj(
            0,
            "RUNNING",
            started=60,
            progress=[("generation", 250, 250), ("d0gstar", 117, 250), ("reconstruction", 0, 250)],
        ),
        lj(
            1,
            "DONE",
            started=100,
            ended=50,
            exit_code=0,
            evidence="batch",
            progress=[("generation", 250, 250), ("d0gstar", 250, 250), ("reconstruction", 250, 250)],
        ),
        lj(2, "QUEUED", submitted=10),
        lj(3, "FAILED", started=100, ended=90, exit_code=1, evidence="batch"),
    ]
    text = render_status(status(locals_), now=NOW)
    lines = text.splitlines()
    counts = next(line for line in lines if line.startswith("  local jobs "))
    # failed first, in the order of attention, with the total
    assert counts == "  local jobs 1 FAILED, 1 RUNNING, 1 QUEUED, 1 DONE  (4 in all)"
    # overall: (250 + 117 + 0 + 750) of 1500 units
    progress = next(line for line in lines if line.startswith("  progress "))
    assert "(1117 of 1500 units reported by 2 of 4 local jobs)" in progress
    assert "[" + "#" * 22 + "." * 8 + "]  74.5%" in progress
    # one bar per phase
    d0 = next(line for line in lines if line.strip().startswith("d0gstar"))
    assert d0.rstrip().endswith("367 of 500") and " 73.4%" in d0
    ended = next(line for line in lines if line.startswith("  ended "))
    assert "[" + "#" * 15 + "." * 15 + "]  50.0%" in ended and "(2 of 4 local jobs)" in ended


def test_no_progress_reported_shows_ended_bar_only():
    text = render_status(status([lj(0, "QUEUED", submitted=5), lj(1, "PLANNED")], state="PENDING"), now=NOW)
    assert "  progress " not in text
    assert "[" + "." * 30 + "]   0.0%  (0 of 2 local jobs)" in text


def test_bar_and_duration():
    assert bar(0.0, 10) == "[..........]   0.0%"
    assert bar(0.999, 10) == "[#########.]  99.9%"  # never full before 100 %
    assert bar(1.0, 10) == "[##########] 100.0%"
    assert bar(1.7, 10) == "[##########] 100.0%" and bar(-1, 10) == "[..........]   0.0%"
    assert bar(None, 10) == "[..........]     ?"
    assert [duration(s) for s in (None, 0, 59, 99, 100, 3599, 3600, 7322, 90000)] == [
        "-",
        "0s",
        "59s",
        "99s",
        "1m40s",
        "59m59s",
        "1h00m",
        "2h02m",
        "1d01h",
    ]


def test_fraction_and_phase_totals_cap_done_at_total():
    a = lj(0, "RUNNING", progress=[("gen", 300, 250), ("sim", 50, 250)])
    b = lj(1, "RUNNING", progress=[("sim", 100, 250)])
    assert job_fraction(a) == (250 + 50) / 500
    assert job_fraction(lj(2, "RUNNING")) is None
    assert phase_totals([a, b]) == [("gen", 250, 250, 1), ("sim", 150, 500, 2)]
    assert sort_key(lj(3, "FAILED"), NOW) < sort_key(lj(4, "RUNNING", started=5), NOW)


def test_control_characters_cannot_drive_the_terminal():
    evil = "name\x1b[2J\x9b31m\nsecond line\u2028"
    locals_ = [
        lj(
            0,
            "FAILED",
            started=10,
            ended=5,
            exit_code=1,
            evidence="batch",
            reason="bad\x1b]0;title\x07",
            progress=[("ph\x1base", 1, 2)],
        )
    ]
    text = render_status(status(locals_, name=evil), now=NOW)
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text and "\u2028" not in text
    assert "name?[2J?31m?second line?" in text
    assert safe(None) == "" and safe(12) == "12"


def test_jim_status_command(jim_env):
    """The real ``jim status`` on a grid job recorded through the database API."""
    home = Home(jim_env.home)
    db = Database(home.ensure())
    job_id = new_job_id()
    rec = new_record(
        job_id,
        NewJob(
            jobtype="montecarlo",
            name="status <test> & more",
            owner="u",
            adapter="fork",
            description={"executable": ["/bin/mc"]},
            source_format="rsl",
            source_text="&(executable=/bin/mc)",
            plan={"localJobs": 3, "binding": "user-events-per-job"},
            explanation="30 events in 3 jobs",
            slices=[{"firstEvent": 10 * k + 1, "lastEvent": 10 * k + 10, "events": 10} for k in range(3)],
        ),
    )
    for j in rec.local_jobs():
        j.set_state(LocalState.SUBMITTING)
        j.batch_id = f"{4000 + j.index}:1.0"
        j.set_state(LocalState.RUNNING)
    rec.local(0).set_progress({"generation": (10, 10), "d0gstar": (4, 10)})
    rec.local(1).set_state(LocalState.FAILED, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=3, reason="exit code 3")
    rec.local(2).set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0)
    rec.recompute()
    db.create(rec)

    proc = jim_env.run("status", job_id)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith(f"grid job {job_id}  ACTIVE\n")
    assert "  name       status <test> & more\n" in out
    assert "  local jobs 1 FAILED, 1 RUNNING, 1 DONE  (3 in all)" in out
    assert re.search(r"progress   \[#+\.+\]  70\.0%  \(14 of 20 units reported by 1 of 3 local jobs\)", out)
    assert table_indices(out)[0] == 1  # the failed one first
    assert "d0gstar 4/10" in out
    assert status_json(db.read(job_id)) == jim_env.status(job_id)

    bad = jim_env.run("status", "../../etc/passwd")
    assert bad.returncode == 1 and "not a jim job id" in bad.stderr


def mixed_record(n: int, seed: int):
    """A grid job of ``n`` local jobs in every state, made through the database API: some tried more
    than once (by jim or by hand, some waiting for a cool-off), progress in several phases (some over
    their totals), failures with causes and reasons, held and suspended ones, equal wall times."""
    rng = random.Random(seed)
    job_id = new_job_id()
    rec = new_record(
        job_id,
        NewJob(
            jobtype="montecarlo",
            name=f"mixed {seed}",
            owner="u",
            adapter="fork",
            description={"executable": ["/bin/mc"]},
            source_format="rsl",
            source_text="&(executable=/bin/mc)",
            plan={"localJobs": n, "binding": "count"},
            explanation=f"{n} local jobs",
            slices=[{"firstEvent": k + 1, "lastEvent": k + 1, "events": 1} for k in range(n)],
        ),
    )
    phases = ["generation", "d0gstar", "reconstruction\x1b[1m"]
    ends = [
        (LocalState.DONE, Evidence.WRAPPER_EXIT_FILE, 0, None),
        (LocalState.FAILED, Evidence.WRAPPER_EXIT_FILE, 3, "exit code 3"),
        (LocalState.FAILED, Evidence.BATCH, None, "NODE_FAIL (NodeDown); node failure (NODE_FAIL)"),
        (LocalState.CANCELLED, Evidence.CANCEL, None, "cancelled\x1b]0;x\x07"),
        (LocalState.LOST, Evidence.ABSENT_AFTER_GRACE, None, "gone"),
    ]
    for j in rec.local_jobs():
        at = NOW - rng.choice([3600, 1800, 600, 600, 60])  # equal times: the index breaks the tie
        for _ in range(rng.choice([0, 0, 0, 1, 2])):  # earlier attempts
            j.set_state(LocalState.SUBMITTING, at=at)
            j.batch_id = f"{rng.randrange(10**6)}"
            j.set_state(LocalState.RUNNING, at=at + 5)
            j.set("node", f"node{rng.randrange(9)}")
            state, evidence, code, reason = rng.choice(ends[1:])
            j.set_state(state, evidence=evidence, exit_code=code, reason=reason, at=at + 60)
            if rng.random() < 0.5:
                j.set("cause", rng.choice(["NODE_FAIL", "PREEMPTED"]))
            if rng.random() < 0.3:
                j.set("killedBy", "root\x1b")
            by = rng.choice([None, None, "alice", "<b>mallory</b>"])
            wait = rng.choice([None, NOW - 10, NOW + 600])
            j.new_attempt(rng.choice(["node failure", "preempted"]), by=by, retry_after=wait, at=at + 70)
            at += 100
        kind = rng.choice(["planned", "queued", "held", "running", "running", "suspended", "ended", "ended"])
        if kind == "planned":
            continue
        j.set_state(LocalState.SUBMITTING, at=at)
        j.batch_id = f"{rng.randrange(10**6)}.batch"
        j.set_state(LocalState.QUEUED, at=at + 1)
        if kind == "held":
            j.set_state(LocalState.HELD, reason="held by admin", at=at + 2)
            continue
        if kind == "queued":
            continue
        j.set_state(LocalState.RUNNING, at=at + rng.choice([2, 10]))
        if rng.random() < 0.7:
            names = rng.sample(phases, rng.randrange(1, 4))
            done = {p: (rng.randrange(0, 300), rng.choice([0, 100, 250])) for p in names}
            j.set_progress(done, at=at + 20)
        if kind == "suspended":
            j.set_state(LocalState.SUSPENDED, at=at + 30)
        elif kind == "ended":
            state, evidence, code, reason = rng.choice(ends)
            j.set_state(state, evidence=evidence, exit_code=code, reason=reason, at=at + rng.choice([30, 40]))
    rec.recompute(at=NOW - 30)
    return rec


@pytest.mark.parametrize(("n", "seed"), [(1, 1), (7, 2), (25, 3), (60, 4), (300, 5)])
def test_text_from_the_record_is_the_text_from_status_json(n, seed):
    """``jim status ID`` reads only what it shows from the record (render_job): the same bytes as the text
    made from the full ``jim status --json`` rows, with retries, phases, failures, held jobs, > 20 rows."""
    rec = mixed_record(n, seed)
    for rows in (20, 3, 1, 1000):
        expected = render_status(status_json(rec), rows=rows, now=NOW)
        assert render_job(rec, rows=rows, now=NOW) == expected
    if n >= 60:  # the record covers what the text shows
        text = render_job(rec, now=NOW)
        assert "more local jobs" in text and "more attempts of" in text and " TRY " in text
        assert "by hand" in text and "waiting for" in text and "HELD" in text and "reconstruction" in text
    # and from the record as written and read back
    home = Home(Path(tempfile.mkdtemp(prefix="jim-status-")))
    try:
        db = Database(home.ensure())
        db.create(rec)
        back = db.read(rec.id)
        assert render_job(back, now=NOW) == render_status(status_json(back), now=NOW)
    finally:
        shutil.rmtree(home.root, ignore_errors=True)


def test_jim_status_text_is_the_text_of_its_json(jim_env):
    """The real command: the text of ``jim status ID`` is what render_status makes of ``--json``'s output
    (at the command's own ``now``: the rows are compared without the wall times and ages)."""
    db = Database(Home(jim_env.home).ensure())
    rec = mixed_record(60, 7)
    db.create(rec)
    proc = jim_env.run("status", rec.id)
    assert proc.returncode == 0, proc.stderr
    expected = render_status(jim_env.status(rec.id))

    def timeless(text: str) -> list[str]:
        return [re.sub(r"\b\d+[smhd](\d+[smh])?\b", "T", line) for line in text.splitlines()]

    assert timeless(proc.stdout) == timeless(expected)


def test_json_rows_are_the_records_values():
    """``jim status --json``'s row of a local job: its values as the database API reads them."""
    rec = mixed_record(60, 8)
    rows = status_json(rec)["localJobs"]
    assert len(rows) == 60
    for lj, row in zip(rec.local_jobs(), rows, strict=True):
        past = lj.past_attempts()
        assert (row["index"], row["tag"], row["state"], row["exitCode"]) == (
            lj.index,
            lj.tag,
            lj.state.value,
            lj.exit_code,
        )
        assert (row["attempt"], row["slice"], row["batchId"], row["evidence"]) == (
            lj.attempt,
            lj.slice,
            lj.batch_id,
            lj.evidence,
        )
        assert [(p["name"], p["done"], p["total"]) for p in row["progress"]] == lj.progress
        assert [a["n"] for a in row["attempts"]] == [int(a["n"]) for a in past] + [lj.attempt]
        assert [a["retryBy"] for a in row["attempts"]] == [a.get("retryBy") for a in past] + [None]
        assert [a["node"] for a in row["attempts"][:-1]] == [a.get("node") or a.get("host") for a in past]
        assert row["attempts"][-1]["exitCode"] == lj.exit_code and row["attempts"][-1]["tag"] == lj.tag
        assert attempts_of(lj) == row["attempts"]
        assert {k: v for k, v in row.items() if k not in ("slice", "progress", "attempts")} == {
            k: lj.get(k) for k in row if k not in ("index", "exitCode", "attempt", "slice", "progress", "attempts")
        } | {"index": lj.index, "exitCode": lj.exit_code, "attempt": lj.attempt}


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        {"a": {}, "b": [], "c": [[], {}], "d": [{"x": [1, [2, {"y": None}]]}]},
        ['é\u2028\x1b"\\', 0, -1, 10**30, True, False, None, 1.5, float("nan"), float("inf"), -0.0],
        {"t": (1, "2", (3,)), 1: "int key", None: "none key", 2.5: "float key"},
        {"nested": {"t": (1, {"k": [2]}), "keys": {3: {4: [5]}}}},
    ],
)
def test_dump_is_json_dumps_indent_2(value):
    assert dump(value) == json.dumps(value, indent=2)


def test_status_json_dump_is_json_dumps_indent_2():
    for n, seed in ((1, 1), (60, 4)):
        data = status_json(mixed_record(n, seed))
        assert dump(data) == json.dumps(data, indent=2)
