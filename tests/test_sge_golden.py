"""Golden tests of the Grid Engine adapter: rendered job script, qsub argv, and the
parsers and error handling on real outputs recorded from the test cell (tests/data/sge).
No Grid Engine needed.

If a change to the rendering is intended, regenerate the golden files with
``JIM_ACCEPT_GOLDEN=1 pytest tests/test_sge_golden.py`` and review the diff (see support/golden.py).
Re-record the outputs with ``tests/services/sge/record-outputs.sh`` (see its README).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from jim.adapters.model import Limits, LocalJobSpec, SubmitChunk
from jim.adapters.sge import (
    STATE_MAP,
    SgeAdapter,
    SgeOptions,
    parse_cluster_queues,
    parse_qacct,
    parse_qstat,
    parse_terse,
    split_batch_id,
    task_ranges,
)
from jim.config import parse
from jim.errors import CancelError, ConfigError, QueryError, SubmitError
from jim.jobdesc import parse_rsl
from jim.jobid import TagName, parse_tag_name, tag_name
from jim.paths import Home
from jim.states import Evidence, LocalState

from support.env import DATA as TEST_DATA
from support.golden import golden

DATA = TEST_DATA / "sge"
JOBS = json.loads((DATA / "jobs.json").read_text())
G1, G2, G3 = (JOBS["grid_ids"][k] for k in ("mix", "held", "special"))


def recorded(name: str, part: str = "out") -> str:
    return (DATA / f"{name}.{part}").read_text()


def job(role: str) -> str:
    return JOBS[role]["job"]


@pytest.fixture
def adapter(tmp_path):
    return SgeAdapter(
        Home(tmp_path).ensure(),
        {
            "queue": "all.q",
            "project": "d0mc",
            "qsub_options": ["-l", "mem_free=1G", "-p", "-10"],
            "python": "/usr/bin/python3",
        },
    )


class Recorded:
    """Stands in for subprocess.run: answers each command with a recorded output."""

    def __init__(self, answers: dict[str, str]):
        self.answers = answers  # command name -> recorded NAME
        self.calls: list[list[str]] = []

    def __call__(self, argv, **kw):
        self.calls.append(list(argv))
        name = self.answers[argv[0]]
        return subprocess.CompletedProcess(argv, int(recorded(name, "rc")), recorded(name), recorded(name, "err"))


@pytest.fixture
def replay(monkeypatch):
    def install(**answers: str) -> Recorded:
        fake = Recorded(answers)
        monkeypatch.setattr(subprocess, "run", fake)  # adapters import subprocess when they first run a command
        return fake

    return install


# -- rendering ---------------------------------------------------------------------


def _chunk(indices, **kw) -> SubmitChunk:
    job_dir = Path("/var/lib/jim/user/jobs/20261122-070000-abcdef01")
    return SubmitChunk(
        "20261122-070000-abcdef01",
        [LocalJobSpec(k, f"x.{k}") for k in indices],
        job_dir=job_dir,
        wrapper=job_dir / "wrapper.py",
        sandbox=job_dir / "sandbox.tar.gz",
        outroot=job_dir / "local",
        **kw,
    )


def test_rendered_script_and_qsub_argv(adapter):
    chunk = _chunk([3, 4, 5], queue="long", limits=Limits(wall_seconds=7200))
    text = adapter.script(chunk, [3, 4, 5])
    golden("sge-script.sh", text)
    assert "--index-env SGE_TASK_ID --index-offset 2" in text  # task 1 is local job 3
    assert not any(line.startswith("#$") for line in text.splitlines())
    argv = adapter.submit_argv(chunk, [3, 4, 5], Path("/x/sge-3.sh"))
    golden("sge-qsub-argv.json", json.dumps(argv, indent=1) + "\n")
    assert argv[:5] == ["qsub", "-terse", "-t", "1-3", "-N"] and argv[5] == tag_name(chunk.grid_id, 3)
    assert argv[6:8] == ["-C", ""]  # no "#$" option lines read from the script
    assert argv[argv.index("-q") : argv.index("-q") + 2] == ["-q", "long"]  # the chunk's queue wins
    assert argv[argv.index("-P") : argv.index("-P") + 2] == ["-P", "d0mc"]
    assert "h_rt=7200" in argv and argv[argv.index("-r") : argv.index("-r") + 2] == ["-r", "n"]
    assert argv[argv.index("-o") + 1].endswith("/batch/sge-$JOB_ID.$TASK_ID.out")
    assert argv[-5:] == ["-l", "mem_free=1G", "-p", "-10", "/x/sge-3.sh"]


#: GRAM's resource attributes, in GRAM's units (MB, minutes), as a grid job gives them.
GRAM_RESOURCES = "&(executable=/bin/true)(maxwalltime=120)(maxmemory=2048)(maxcputime=90)(project=d0)"


def test_gram_resources_reach_qsub(adapter):
    """As the stock GRAM sge module: maxcputime becomes -l h_cpu, maxmemory -l h_data (MB), project -P
    (over the site's default project); the site's qsub_options still come last."""
    chunk = _chunk([0, 1], limits=Limits.of(parse_rsl(GRAM_RESOURCES).resource_limits()))
    argv = adapter.submit_argv(chunk, [0, 1], Path("/x/sge-0.sh"))
    golden("sge-qsub-argv-resources.json", json.dumps(argv, indent=1) + "\n")
    assert argv[argv.index("-P") : argv.index("-P") + 2] == ["-P", "d0"] and "d0mc" not in argv
    assert "h_cpu=5400" in argv and "h_data=2048M" in argv and "h_rt=7200" in argv
    assert argv[-5:] == ["-l", "mem_free=1G", "-p", "-10", "/x/sge-0.sh"]


def test_queue_from_config_and_default_queue(tmp_path):
    def q(argv):
        return argv[argv.index("-q") + 1] if "-q" in argv else None

    a = SgeAdapter(Home(tmp_path).ensure(), {"queue": "short"})
    assert q(a.submit_argv(_chunk([0]), [0], Path("s"))) == "short"
    assert q(a.submit_argv(_chunk([0], queue="long"), [0], Path("s"))) == "long"
    assert q(a.submit_argv(_chunk([0], queue="default"), [0], Path("s"))) is None  # the site's "default" queue: no -q
    b = SgeAdapter(Home(tmp_path).ensure(), {})
    plain = b.submit_argv(_chunk([0]), [0], Path("s"))
    assert q(plain) is None and "-P" not in plain


def test_output_paths_with_a_colon_or_comma(tmp_path):
    a = SgeAdapter(Home(tmp_path).ensure(), {})
    chunk = _chunk([0])
    chunk.job_dir = Path("/data/a:b/job")
    out = a.submit_argv(chunk, [0], Path("s"))
    assert out[out.index("-o") + 1] == ":/data/a:b/job/batch/sge-$JOB_ID.$TASK_ID.out"  # empty host name first
    chunk.job_dir = Path("/data/a,b/job")
    with pytest.raises(SubmitError, match="comma"):
        a.submit_argv(chunk, [0], Path("s"))


def test_script_quotes_hostile_paths(adapter):
    text = adapter.render(
        "sge.sh",
        grid_id="g",
        offset=0,
        index_offset=-1,
        python="python3",
        wrapper="/tmp/a b/$(rm -rf x)/w.py",
        sandbox="/tmp/'q'",
        outroot="/o;ls\n#$ -q evil",
        attempt=2,
    )
    assert "'/tmp/a b/$(rm -rf x)/w.py'" in text
    assert "'/tmp/'\"'\"'q'\"'\"''" in text
    # a value with a newline stays inside its quotes; and qsub is told not to read "#$" lines anyway
    assert "'/o;ls\n#$ -q evil'" in text


def test_qsub_options_must_be_a_list(tmp_path):
    with pytest.raises(ConfigError):
        SgeAdapter(Home(tmp_path), {"qsub_options": "-l h_rt=1; rm -rf /"})
    with pytest.raises(ConfigError):
        SgeAdapter(Home(tmp_path), {"no_such_option": 1})
    with pytest.raises(ConfigError):
        SgeAdapter(Home(tmp_path), {"rerun": "yes"})
    a = SgeAdapter(Home(tmp_path), {"qsub_options": ["-l", "mem_free=1G"], "queue": "all.q"})
    assert a.options == SgeOptions(qsub_options=("-l", "mem_free=1G"), queue="all.q")
    assert a.options.cache_interval == 30.0 and a.status_interval == 30.0


def test_options_are_checked_when_the_config_loads():
    batch = parse({"batch": {"adapter": "sge", "queue": "all.q"}}).batch
    assert isinstance(batch.options, SgeOptions) and batch.options.queue == "all.q"
    assert parse({"batch": {"adapter": "gridengine"}}).batch.options == SgeOptions()
    with pytest.raises(ConfigError, match="qsub_options"):
        parse({"batch": {"adapter": "sge", "qsub_options": "-h"}})


def test_reserved_exit_codes_and_user_wide_query():
    assert SgeAdapter.reserved_exit_codes == (99, 100)
    assert SgeAdapter.user_wide_query


def test_helpers(tmp_path):
    # one array job per run of consecutive local jobs (qsub -t takes one range), at most a chunk long
    assert SgeAdapter(Home(tmp_path), {}).groups([5, 1, 2, 3, 9, 10]) == [[1, 2, 3], [5], [9, 10]]
    assert SgeAdapter(Home(tmp_path), {"chunk_size": 2}).groups(range(5)) == [[0, 1], [2, 3], [4]]
    assert task_ranges([1, 2, 3, 7, 9, 10]) == ["1-3", "7", "9-10"]
    assert split_batch_id("38.7") == ("38", 7) and split_batch_id("99999999_0") is None
    assert split_batch_id("38") is None and split_batch_id("x.1") is None
    assert parse_tag_name(tag_name(G1, 42)) == TagName(G1, 42, 1)
    assert parse_tag_name(tag_name(G1, 42, 3)) == TagName(G1, 42, 3) and tag_name(G1, 42, 3) == f"jim.{G1}.42.3"
    assert TagName(G1, 42, 3).tag(2) == f"{G1}.44.3" and TagName(G1, 42).tag(2) == f"{G1}.44"
    assert parse_tag_name(f"jim.{G1}.42.1") is None and parse_tag_name(f"jim.{G1}.4.2.1") is None
    assert parse_tag_name("other-job") is None and parse_tag_name("jim.x.y") is None
    assert parse_terse(recorded("qsub-array")) == JOBS["array10"]
    assert parse_terse(recorded("qsub-array-one")) == JOBS["array1"]
    assert parse_terse(recorded("qsub-plain")) == JOBS["plain"]
    assert parse_terse("") is None and parse_terse("Your job 5 has been submitted") is None
    assert parse_terse("warning: something\n77.1-3:1\n") == "77"


def test_grid_ids_that_cannot_name_a_job(tmp_path):
    a = SgeAdapter(Home(tmp_path).ensure(), {})
    chunk = _chunk([0])
    chunk.grid_id = "bad:id"
    with pytest.raises(SubmitError, match="job name") as e:
        a.submit_argv(chunk, [0], Path("s"))
    assert not e.value.transient


# -- qstat -------------------------------------------------------------------------


def test_parse_qstat_recorded_mix():
    st = parse_qstat(recorded("qstat-mix"))
    mix, held, susp, special, badout = job("mix"), job("held"), job("suspended"), job("special"), job("badout")
    # tasks 1 and 2 ended: gone from qstat; 3-5 run; 6-10 wait
    assert f"{mix}.1" not in st and f"{mix}.2" not in st
    assert [st[f"{mix}.{t}"].state for t in (3, 4, 5)] == [LocalState.RUNNING] * 3
    assert [st[f"{mix}.{t}"].state for t in range(6, 11)] == [LocalState.QUEUED] * 5
    assert st[f"{mix}.3"].tag == f"{G1}.102" and st[f"{mix}.10"].tag == f"{G1}.109"  # offset + task - 1
    assert st[f"{mix}.3"].host == "vm" and st[f"{mix}.6"].host is None
    assert st[f"{mix}.3"].evidence is Evidence.BATCH and st[f"{mix}.3"].native == "r"
    assert [st[f"{held}.{t}"].state for t in (1, 2, 3)] == [LocalState.HELD] * 3
    assert st[f"{held}.1"].reason == "held (hqw)" and st[f"{held}.1"].tag == f"{G2}.0"
    assert st[f"{susp}.1"].state is LocalState.SUSPENDED and st[f"{susp}.2"].state is LocalState.RUNNING
    # exit 100 without jim's wrapper: error state, waits for an admin: HELD with the reason
    assert st[f"{special}.1"].state is LocalState.HELD and st[f"{special}.1"].native == "Eqw"
    assert "error state (Eqw)" in st[f"{special}.1"].reason and f"qstat -j {special}" in st[f"{special}.1"].reason
    # exit 99 without jim's wrapper: requeued
    assert st[f"{special}.2"].native == "Rq" and st[f"{special}.2"].state is LocalState.QUEUED
    assert st[f"{badout}.1"].state is LocalState.HELD
    assert job("other") not in {k.split(".")[0] for k in st}  # not jim's: ignored
    assert len(st) == 8 + 3 + 2 + 2 + 1


def test_parse_qstat_folded_rerun_and_deleting():
    folded = parse_qstat(recorded("qstat-mix-folded"))
    assert f"{job('mix')}.6" not in folded and f"{job('mix')}.3" in folded  # a folded range is skipped
    rerun = parse_qstat(recorded("qstat-rerun"))
    task2 = rerun[f"{job('special')}.2"]
    assert task2.native in ("Rr", "r") and task2.state is LocalState.RUNNING
    deleting = parse_qstat(recorded("qstat-deleting"))
    assert deleting[f"{job('mix')}.3"].native == "dr" and deleting[f"{job('mix')}.3"].state is LocalState.CANCELLED
    assert deleting[f"{job('mix')}.3"].reason == "being deleted (dr: qdel)"
    assert f"{job('mix')}.9" not in deleting  # a pending task is deleted at once


def test_parse_qstat_empty_and_garbage():
    assert parse_qstat(recorded("qstat-empty")) == {}
    for bad in ("", recorded("down-qstat"), "<html>502</html>", "<?xml version='1.0'?><job_info><job_list>"):
        with pytest.raises(ValueError):
            parse_qstat(bad)


def test_unknown_state_is_left_out_never_guessed(caplog):
    xml = recorded("qstat-mix").replace("<state>hqw</state>", "<state>Xyz</state>", 1)
    st = parse_qstat(xml)
    assert f"{job('held')}.1" not in st and f"{job('held')}.2" in st
    assert "unknown Grid Engine state 'Xyz'" in caplog.text


def test_find_by_tag_sees_a_task_in_a_state_jim_cannot_map(adapter, replay, tmp_path, monkeypatch):
    """Status leaves such a task out; reconciling must not: it exists, so it is never submitted again."""
    xml = recorded("qstat-mix").replace("<state>hqw</state>", "<state>Xyz</state>", 1)
    (tmp_path / "qstat.xml").write_text(xml)
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: real_run(["cat", str(tmp_path / "qstat.xml")], **kw))
    assert adapter.find_by_tag(G2, [f"{G2}.0"]) == {f"{G2}.0": f"{job('held')}.1"}


def test_every_state_in_recordings_is_mapped():
    import re

    for path in DATA.glob("qstat-*.out"):
        for state in re.findall(r"<state>([^<]*)</state>", path.read_text()):
            assert state in STATE_MAP, (path.name, state)


def test_state_map_covers_sge_status_5():
    documented = [
        "qw",
        "Rq",
        "hqw",
        "hRwq",
        "r",
        "hr",
        "t",
        "Rr",
        "Rt",
        "s",
        "ts",
        "S",
        "tS",
        "T",
        "tT",
        "Rs",
        "Rts",
        "RS",
        "RtS",
        "RT",
        "RtT",
        "Eqw",
        "Ehqw",
        "EhRqw",
        "dr",
        "dt",
        "dRr",
        "dRt",
        "ds",
        "dS",
        "dT",
        "dRs",
        "dRS",
        "dRT",
    ]
    assert set(documented) <= set(STATE_MAP)
    assert all(STATE_MAP[s] is LocalState.CANCELLED for s in STATE_MAP if s.startswith("d"))
    assert all(STATE_MAP[s] is LocalState.HELD for s in STATE_MAP if s[0] in "Eh" and s.endswith(("qw", "wq")))


# -- qacct -------------------------------------------------------------------------


def test_parse_qacct_recorded_mix():
    mix = job("mix")
    acct = parse_qacct(recorded("qacct-mix"))
    assert acct[f"{mix}.1"].state is LocalState.DONE and acct[f"{mix}.1"].exit_code == 0
    assert acct[f"{mix}.2"].state is LocalState.FAILED and acct[f"{mix}.2"].exit_code == 3
    assert acct[f"{mix}.2"].tag == f"{G1}.101" and acct[f"{mix}.2"].evidence is Evidence.ACCOUNTING
    killed = acct[f"{mix}.3"]  # qdel'd while running
    assert killed.state is LocalState.FAILED and killed.exit_code == 137
    assert "failed 100 (assumedly after job)" in killed.reason
    assert f"{mix}.9" not in acct  # deleted while pending: no record
    assert all(acct[f"{mix}.{t}"].state is LocalState.DONE for t in (4, 5, 6, 7, 8, 10))
    assert acct[f"{mix}.1"].submitted is not None and acct[f"{mix}.1"].host == "vm"
    import time

    assert (
        abs(
            acct[f"{mix}.1"].submitted
            - time.mktime(
                time.strptime(
                    [ln for ln in recorded("qacct-mix").splitlines() if ln.startswith("qsub_time")][0][13:].strip(),
                    "%a %b %d %H:%M:%S %Y",
                )
            )
        )
        < 1
    )


def test_parse_qacct_special_exit_codes():
    special = job("special")
    acct = parse_qacct(recorded("qacct-special"))
    # exit 100 (without jim's wrapper): failed 30, the job sat in Eqw until deleted
    assert acct[f"{special}.1"].state is LocalState.FAILED and acct[f"{special}.1"].exit_code == 100
    assert "application error" in acct[f"{special}.1"].reason
    # exit 99: a "failed 25 rescheduling" record, then the rerun's: the last one counts
    assert acct[f"{special}.2"].state is LocalState.DONE and acct[f"{special}.2"].exit_code == 0
    only_requeue = recorded("qacct-special").rsplit("=" * 62, 1)[0]
    assert f"{special}.2" not in parse_qacct(only_requeue)  # requeued: not an end


def test_parse_qacct_failures_before_the_job_and_others():
    acct = parse_qacct(recorded("qacct-badout"))
    st = acct[f"{job('badout')}.1"]
    assert st.state is LocalState.FAILED and st.exit_code is None
    assert "opening input/output file" in st.reason
    assert parse_qacct(recorded("qacct-plain")) == {}  # not an array job, not jim's
    assert parse_qacct(recorded("qacct-unknown-id")) == {}
    held = parse_qacct(recorded("qacct-held"))
    assert sorted(held) == [f"{job('held')}.1", f"{job('held')}.2"]
    by_name = parse_qacct(recorded("qacct-by-name"))
    assert {s.tag.rsplit(".", 1)[0] for s in by_name.values()} == {G3}
    assert parse_qacct(recorded("after-restart-qacct"))[f"{job('outage')}.1"].exit_code == 3


# -- errors ------------------------------------------------------------------------


def test_transient_errors_classified(adapter):
    for name in ("down-qstat", "down-qsub", "down-qdel"):
        assert adapter.is_transient(recorded(name, "err")), name
    for name in ("qsub-bad-queue", "qsub-array-too-big", "qsub-bad-name", "qsub-bad-project"):
        assert not adapter.is_transient(recorded(name, "err")), name
    assert adapter.is_transient("Unable to run job: job rejected: only 100 jobs are allowed per user (current: 100)")


def test_query_with_qmaster_down_is_a_failed_query(adapter, replay):
    fake = replay(qstat="down-qstat")
    res = adapter.query(["38.1"])
    assert not res.ok and "commlib error" in res.error
    assert fake.calls == [["qstat", "-u", adapter.user, "-xml", "-g", "d"]]
    with pytest.raises(RuntimeError):
        res.lookup("38.1")


def test_query_recorded(adapter, replay):
    replay(qstat="qstat-mix")
    res = adapter.query([])
    assert res.ok and res.lookup(f"{job('mix')}.3").state is LocalState.RUNNING
    assert res.lookup("99999999_0") is None


def test_submit_recorded_and_refused(adapter, replay, tmp_path):
    chunk = _chunk([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    chunk.job_dir = tmp_path / "job"
    chunk.job_dir.mkdir()
    fake = replay(qsub="qsub-array")
    ids = adapter.submit_chunk(chunk)
    assert ids == {k: f"{JOBS['array10']}.{k + 1}" for k in range(10)}
    assert len(fake.calls) == 1 and (chunk.job_dir / "batch" / "sge-0.sh").exists()
    replay(qsub="qsub-bad-queue")
    with pytest.raises(SubmitError) as e:
        adapter.submit_chunk(chunk)
    assert not e.value.transient and "unknown queue" in e.value.message
    replay(qsub="down-qsub")
    with pytest.raises(SubmitError) as e:
        adapter.submit_chunk(chunk)
    assert e.value.transient


def test_submit_splits_non_consecutive_local_jobs(adapter, replay, tmp_path):
    chunk = _chunk([0, 1, 2, 5, 6])
    chunk.job_dir = tmp_path / "job"
    chunk.job_dir.mkdir()
    fake = replay(qsub="qsub-array")
    ids = adapter.submit_chunk(chunk)
    assert [c[c.index("-t") + 1] for c in fake.calls] == ["1-3", "1-2"]
    assert [c[c.index("-N") + 1] for c in fake.calls] == [tag_name(chunk.grid_id, 0), tag_name(chunk.grid_id, 5)]
    a = JOBS["array10"]
    assert ids == {0: f"{a}.1", 1: f"{a}.2", 2: f"{a}.3", 5: f"{a}.1", 6: f"{a}.2"}
    assert "--index-offset 4" in (chunk.job_dir / "batch" / "sge-5.sh").read_text()


def test_cancel_tolerates_jobs_already_gone(adapter, replay):
    fake = replay(qdel="qdel-gone-task")
    adapter.cancel(["38.1", "38.2", "38.3", "38.7", "39.3", "99999999_0"])
    assert fake.calls == [["qdel", "38", "-t", "1-3", "38", "-t", "7", "39", "-t", "3"]]
    replay(qdel="qdel-unknown")
    adapter.cancel(["999999.1"])
    replay(qdel="down-qdel")
    with pytest.raises(CancelError) as e:
        adapter.cancel(["38.1"])
    assert e.value.transient


def test_accounting_recorded(adapter, replay):
    mix = job("mix")
    fake = replay(qacct="qacct-mix")
    got = adapter.accounting([f"{mix}.2", f"{mix}.3", f"{mix}.9"])
    assert fake.calls == [["qacct", "-j", mix]]
    assert sorted(got) == [f"{mix}.2", f"{mix}.3"]  # only those asked for; 9 has no record
    replay(qacct="qacct-unknown-id")
    assert adapter.accounting(["999999.1"]) == {}


def test_tasks_jim_deleted_are_cancelled_not_failed(adapter, replay):
    """qdel'd running tasks end "failed 100 : assumedly after job", 137, like any killed task:
    those jim deleted itself are CANCELLED."""
    mix = job("mix")
    replay(qdel="qdel-tasks", qacct="qacct-mix")
    assert adapter.accounting([f"{mix}.3"])[f"{mix}.3"].state is LocalState.FAILED  # killed, not by jim
    adapter.cancel([f"{mix}.3", f"{mix}.9"])
    got = adapter.accounting([f"{mix}.2", f"{mix}.3"])
    assert got[f"{mix}.3"].state is LocalState.CANCELLED and "deleted by jim" in got[f"{mix}.3"].reason
    assert got[f"{mix}.3"].evidence is Evidence.ACCOUNTING
    assert got[f"{mix}.2"].state is LocalState.FAILED  # ended by itself (exit 3)
    log = (Path(adapter.home.cache) / "sge-deleted.log").read_text().split()
    assert log[1:] == [mix, "3", str(int(log[0])), mix, "9"]
    # a record of an older job that had the same id (submitted after the deletion: not ours) stays FAILED
    (Path(adapter.home.cache) / "sge-deleted.log").write_text(f"1000 {mix} 3\n")
    assert adapter.accounting([f"{mix}.3"])[f"{mix}.3"].state is LocalState.FAILED


def test_find_by_tag_asks_qstat_then_qacct_by_name(adapter, replay):
    special, badout, susp = job("special"), job("badout"), job("suspended")
    fake = replay(qstat="qstat-mix", qacct="qacct-by-name")
    found = adapter.find_by_tag(G3, [f"{G3}.0", f"{G3}.1", f"{G3}.10"])
    assert found == {f"{G3}.0": f"{special}.1", f"{G3}.1": f"{special}.2", f"{G3}.10": f"{badout}.1"}
    assert len(fake.calls) == 1  # all in qstat: no qacct
    fake = replay(qstat="qstat-empty", qacct="qacct-by-name")  # gone from qstat: by name in the accounting
    found = adapter.find_by_tag(G3, [f"{G3}.0", f"{G3}.1", f"{G3}.10", f"{G3}.30", f"{G3}.31", f"{G3}.29"])
    assert found == {
        f"{G3}.0": f"{special}.1",
        f"{G3}.1": f"{special}.2",
        f"{G3}.10": f"{badout}.1",
        f"{G3}.30": f"{susp}.1",
        f"{G3}.31": f"{susp}.2",
    }
    assert fake.calls[1] == ["qacct", "-o", adapter.user, "-j", f"jim.{G3}.*"]
    replay(qstat="qstat-empty", qacct="qacct-by-name-none")
    assert adapter.find_by_tag(G3, [f"{G3}.0"]) == {}


def test_reconcile_knows_a_task_that_left_qstat_before_its_accounting_record(adapter, replay):
    """Grid Engine writes its accounting file a few seconds after a task leaves qstat: in between
    only the wrapper's ``started`` file says that the task was submitted (and ran)."""
    replay(qstat="qstat-empty", qacct="qacct-by-name-none")
    local = adapter.home.local_dir(G3, 4)
    local.mkdir(parents=True)
    (local / "started").write_text(json.dumps({"pid": 7, "batch_id": "812.5"}) + "\n")
    assert adapter.find_by_tag(G3, [f"{G3}.4", f"{G3}.5"]) == {}
    assert adapter.reconcile(G3, [f"{G3}.4", f"{G3}.5"]) == {f"{G3}.4": "812.5"}
    (local / "started").write_text(json.dumps({"pid": 7, "batch_id": ""}) + "\n")  # unusable: not found
    assert adapter.reconcile(G3, [f"{G3}.4"]) == {}


def test_find_by_tag_with_qmaster_down_raises(adapter, replay):
    replay(qstat="down-qstat")
    with pytest.raises(QueryError) as e:
        adapter.find_by_tag(G3, [f"{G3}.0"])
    assert e.value.transient


def test_free_slots_from_the_cluster_queue_summary(adapter, replay):
    text = recorded("qstat-g-c")
    header, _dashes, row = text.splitlines()[:3]
    avail = int(row.split()[header.split().index("AVAIL") - 1])
    assert parse_cluster_queues(text) == avail
    assert parse_cluster_queues(text + row.replace("all.q", "long.q") + "\n") == 2 * avail
    assert parse_cluster_queues("") is None and parse_cluster_queues(recorded("down-qstat")) is None
    fake = replay(qstat="qstat-g-c")
    assert adapter.free_slots() == avail
    assert fake.calls == [["qstat", "-g", "c", "-q", "all.q"]]
    replay(qstat="down-qstat")
    assert adapter.free_slots() is None
