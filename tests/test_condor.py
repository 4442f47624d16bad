"""The HTCondor adapter: submit description (golden), argument quoting, state map,
hold reasons, history for jobs that left the queue, reconciliation, and grid
jobs end to end through the CLI, against the fake schedd of ``condor_fake.py``.

If a change to the submit description is intended, regenerate the golden file
with ``JIM_ACCEPT_GOLDEN=1 pytest tests/test_condor.py`` and review the diff.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jim.adapters.condor import (
    JOB_STATUS,
    PROJECTION,
    CondorAdapter,
    CondorOptions,
    quote_arguments,
    status_of,
    submit_text,
)
from jim.adapters.model import Limits, LocalJobSpec, SubmitChunk
from jim.config import parse
from jim.errors import ConfigError, QueryError, SubmitError
from jim.jobdesc import parse_rsl
from jim.paths import Home
from jim.states import Evidence, LocalState

import condor_fake
from support.golden import golden
from support.jimcli import FAST_CONFIG

GRID = "20261122-070000-abcdef01"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake schedd, enabled in this process; every process it started is killed afterwards."""
    d = tmp_path / "condor-fake"
    for k, v in condor_fake.enable({"PYTHONPATH": os.environ.get("PYTHONPATH", "")}, d).items():
        monkeypatch.setenv(k, v)
    schedd = condor_fake.FakeSchedd(d)
    yield schedd
    schedd.kill_everything()


@pytest.fixture
def adapter(tmp_path, fake):
    return CondorAdapter(Home(tmp_path / "home").ensure(), {"python": sys.executable})


def chunk_for(job_dir: Path, indices, **kw) -> SubmitChunk:
    job_dir.mkdir(parents=True, exist_ok=True)
    return SubmitChunk(
        GRID,
        [LocalJobSpec(k, f"{GRID}.{k}") for k in indices],
        job_dir=job_dir,
        wrapper=job_dir / "wrapper.py",
        sandbox=job_dir / "sandbox.tar.gz",
        outroot=job_dir / "local",
        **kw,
    )


def wait_for(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# ---------------------------------------------------------------------------
# the submit description
# ---------------------------------------------------------------------------


def test_submit_description_is_golden(tmp_path):
    a = CondorAdapter(
        Home(tmp_path).ensure(),
        {
            "python": "/usr/bin/python3",
            "requirements": 'OpSysAndVer == "AlmaLinux9" && Memory >= 2000',
            "submit_commands": {"request_memory": "2GB", "request_cpus": 1, "+AccountingGroup": '"group_d0.mc"'},
        },
    )
    job_dir = Path("/var/lib/jim/user/jobs") / GRID
    chunk = SubmitChunk(
        GRID,
        [LocalJobSpec(k, f"{GRID}.{k}") for k in (3, 4, 5)],
        job_dir=job_dir,
        wrapper=job_dir / "wrapper.py",
        sandbox=job_dir / "sandbox.tar.gz",
        outroot=job_dir / "local",
        queue="long",
        limits=Limits(wall_seconds=7200),
    )
    text = str(a.submit_description(chunk, 3))
    golden("condor-submit.sub", text)
    desc = a.description(chunk, 3)
    assert desc["My.JimGridJob"] == f'"{GRID}"' and desc["My.JimOffset"] == "3"
    assert desc["My.JimTag"] == f'"{GRID}.3"' and desc["My.JimQueue"] == '"long"'
    assert desc["environment"] == '"JIM_INDEX_ARRAY=$(Process) JIM_BATCH_ID=$(Cluster).$(Process)"'
    assert "--index-env JIM_INDEX_ARRAY --index-offset 3" in desc["arguments"]
    assert desc["allowed_job_duration"] == "7200" and desc["request_memory"] == "2GB"


#: GRAM's resource attributes, in GRAM's units (MB, minutes), as a grid job gives them.
GRAM_RESOURCES = "&(executable=/bin/true)(maxwalltime=120)(maxmemory=2048)(maxcputime=90)(project=d0)"


def test_gram_resources_reach_the_submit_description(tmp_path):
    """maxmemory (MB) becomes request_memory, maxcputime a hold once the job has used that CPU
    time (as allowed_job_duration holds a job past its wall time), project the accounting group;
    a site's own submit_commands win."""
    a = CondorAdapter(Home(tmp_path).ensure(), {"python": "/usr/bin/python3"})
    chunk = chunk_for(tmp_path / GRID, [0, 1], limits=Limits.of(parse_rsl(GRAM_RESOURCES).resource_limits()))
    text = str(a.submit_description(chunk, 0))
    golden("condor-submit-resources.sub", text.replace(str(tmp_path), "/TMP"))
    desc = a.description(chunk, 0)
    assert desc["request_memory"] == "2048" and desc["accounting_group"] == "d0"
    assert desc["periodic_hold"] == "RemoteUserCpu + RemoteSysCpu > 5400"
    assert desc["allowed_job_duration"] == "7200"
    site = CondorAdapter(
        Home(tmp_path).ensure(),
        {"python": "/usr/bin/python3", "submit_commands": {"request_memory": "4GB", "accounting_group": "group_cms"}},
    )
    desc = site.description(chunk, 0)
    assert desc["request_memory"] == "4GB" and desc["accounting_group"] == "group_cms"
    # a site that sets the group as an attribute, or its own hold policy: jim's commands give way whole
    site = CondorAdapter(
        Home(tmp_path).ensure(),
        {"python": "/usr/bin/python3", "submit_commands": {"+AccountingGroup": '"group_d0.mc"', "periodic_hold": "0"}},
    )
    desc = site.description(chunk, 0)
    assert desc["+AccountingGroup"] == '"group_d0.mc"'
    assert "accounting_group" not in desc and "periodic_hold_reason" not in desc and desc["periodic_hold"] == "0"
    str(site.submit_description(chunk, 0))  # (HTCondor reads it as written)
    least = Limits.of(parse_rsl("&(executable=/bin/true)(minmemory=512)").resource_limits())
    assert a.description(chunk_for(tmp_path / GRID, [0], limits=least), 0)["request_memory"] == "512"
    assert "request_memory" not in a.description(chunk_for(tmp_path / GRID, [0]), 0)


HOSTILE = [
    "plain",
    "",
    "two words",
    "it's",
    'say "hi"',
    "both ' and \"",
    "''",
    '""',
    "$HOME",
    "${HOME}",
    "$",
    "cost $5",
    "a$b",
    "$ (x)",
    "$'('",
    '$"("',
    "$)",
    "back\\slash",
    "tab\there",
    "  lead and trail  ",
    "x;rm -rf /",
    "`id`",
    "%s %d",
    "ünïcødé ✓",
    "--opt='a b'",
    "'",
    '"',
    "=",
    "#not a comment",
    "[ClassAd]",
    "{a,b}",
]


@pytest.mark.parametrize("arg", HOSTILE)
def test_hostile_arguments_round_trip_through_the_submit_language(arg):
    """quote_arguments, then the real submit language's macro expansion, then HTCondor's V2 parsing."""
    import htcondor2

    argv = ["--before", arg, "--after"]
    value = quote_arguments(argv)
    sub = htcondor2.Submit({"executable": "/bin/true", "arguments": value})
    assert dict(htcondor2.Submit(f"executable = /bin/true\narguments = {value}\n").items()) == dict(sub.items())
    assert condor_fake.parse_arguments(sub.expand("arguments")) == argv


@pytest.mark.parametrize(
    "arg",
    ["line\nbreak", "carriage\rreturn", "a$$b", "nul\x00", "$(HOME)", "$(DOLLAR)", "$ENV(HOME)", "x$F(y)", "$INT(3)"],
)
def test_arguments_the_submit_language_cannot_carry_are_refused(arg):
    with pytest.raises(ValueError):
        quote_arguments(["x", arg])


def test_a_job_directory_that_cannot_be_described_refuses_the_submit(tmp_path, adapter):
    chunk = chunk_for(tmp_path / "bad$$dir", [0])
    with pytest.raises(SubmitError) as e:
        adapter.submit_chunk(chunk)
    assert not e.value.transient and "$$" in e.value.message


def test_the_fake_parses_arguments_as_the_htcondor_manual_says():
    """The examples of condor_submit(1) for the new arguments syntax (guards the fake's parser)."""
    parse = condor_fake.parse_arguments
    assert parse('"3 simple arguments"') == ["3", "simple", "arguments"]
    assert parse("\"one 'two with spaces' 3\"") == ["one", "two with spaces", "3"]
    assert parse("\"one \"\"two\"\" 'spacey ''quoted'' argument'\"") == ["one", '"two"', "spacey 'quoted' argument"]
    with pytest.raises(ValueError):
        parse('"unbalanced \'quote"')
    with pytest.raises(ValueError):
        parse('"a" b')


def test_submit_text_escapes_dollars():
    import htcondor2

    sub = htcondor2.Submit({"executable": "/bin/true", "initialdir": submit_text("/x/$Cluster/${HOME}/$")})
    assert sub.expand("initialdir") == "/x/$Cluster/${HOME}/$"
    with pytest.raises(ValueError):
        submit_text("/x/$(Cluster)")


# ---------------------------------------------------------------------------
# options
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, words",
    [
        ({"python": "python3"}, "absolute path"),
        ({"submit_commands": "request_memory = 2GB"}, "table"),
        ({"submit_commands": {"executable": "/bin/evil"}}, "jim sets"),
        ({"submit_commands": {"+JimTag": '"x"'}}, "jim sets"),
        ({"submit_commands": {"MY.JimAnything": '"x"'}}, "jim sets"),
        ({"submit_commands": {"requirements": "true"}}, "requirements option"),
        ({"submit_commands": {"request_memory": "1\nqueue 100"}}, "one line"),
        ({"submit_commands": {"bad name": "1"}}, "not a submit command"),
        ({"requirements": "Memory >="}, "not a ClassAd expression"),
        ({"nonsense": 1}, "unknown key 'nonsense'"),
    ],
)
def test_bad_options_are_config_errors(tmp_path, options, words):
    with pytest.raises(ConfigError) as e:
        CondorAdapter(Home(tmp_path).ensure(), options)
    assert words in e.value.message


def test_options_are_typed_and_checked_when_the_configuration_loads(tmp_path):
    batch = parse(
        {
            "batch": {
                "adapter": "htcondor",
                "python": "/opt/py/bin/python3",
                "history_days": 2,
                "submit_commands": {"request_memory": "2GB", "request_cpus": 1},
            }
        }
    ).batch
    options = batch.options
    assert isinstance(options, CondorOptions)
    assert (options.python, options.history_days, options.cache_interval) == ("/opt/py/bin/python3", 2.0, 30.0)
    assert options.submit_commands == {"request_memory": "2GB", "request_cpus": 1}
    a = CondorAdapter(Home(tmp_path).ensure(), options)  # the typed options, as the configuration gives them
    assert a.options is options and a.max_chunk == 1000 and a.status_interval == 30.0
    with pytest.raises(ConfigError) as e:  # refused when the configuration loads, before any adapter exists
        parse({"batch": {"adapter": "condor", "submit_commands": {"queue": "5"}}})
    assert "jim sets 'queue'" in e.value.message
    with pytest.raises(ConfigError) as e:
        parse({"batch": {"adapter": "condor", "history_days": "a week"}})
    assert "history_days" in e.value.message


def test_the_bindings_are_not_imported_with_jim():
    code = (
        "import sys, jim, jim.cli, jim.commands, jim.adapters, jim.adapters.condor; "
        "print(sorted(m for m in ('htcondor2', 'classad2', 'htcondor', 'classad') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_seam_refuses_a_module_that_is_not_a_fake(tmp_path, monkeypatch):
    monkeypatch.setenv("JIM_CONDOR_FAKE", "json")
    a = CondorAdapter(Home(tmp_path).ensure(), {})
    with pytest.raises(ConfigError) as e:
        a.schedd()
    assert "not a fake HTCondor layer" in e.value.message


def test_without_the_fake_the_real_bindings_are_used(tmp_path, monkeypatch):
    """No HTCondor here: the real bindings cannot find a schedd, and a query says so (no news)."""
    monkeypatch.delenv("JIM_CONDOR_FAKE", raising=False)
    a = CondorAdapter(Home(tmp_path).ensure(), {})
    res = a.query(["1.0"])
    assert not res.ok and res.error.startswith("HTCondor query failed:"), res.error


def test_transient_errors_classified(adapter, fake):
    for text in (
        "Failed to connect to schedd",
        "SECMAN:2007:Failed to end classad message.",
        "Timed out",
        "Failed to fetch ads from schedd: connection refused",
        "Unable to locate local daemon",
    ):
        assert adapter.is_transient(text), text
    for text in ("Submit validation failed: request_disk is invalid", "no such universe"):
        assert not adapter.is_transient(text), text
    condor_fake.set_scenario(fake.state.dir, query_error="Failed to connect to schedd")
    with pytest.raises(QueryError) as e:
        adapter.find_by_tag(GRID, [f"{GRID}.0"])
    assert e.value.transient and e.value.message == "HTCondor query failed: Failed to connect to schedd"
    condor_fake.set_scenario(fake.state.dir, query_error="Permission denied for owner bob")
    with pytest.raises(QueryError) as e:
        adapter.find_by_tag(GRID, [f"{GRID}.0"])
    assert not e.value.transient


def test_a_query_is_dated_once_the_bindings_are_loaded(tmp_path, fake):
    """The on-disk answer is dated when the schedd is asked, not before a fresh process imports the
    bindings and the seam: else the next query comes sooner than cache_interval after this one."""
    code = (
        "import sys\n"
        "from jim.adapters.condor import CondorAdapter\n"
        "from jim.paths import Home\n"
        "a = CondorAdapter(Home(sys.argv[1]).ensure(), {'cache_interval': 0.5})\n"
        "real, seen = a.query, []\n"
        "loaded = lambda: all(m in sys.modules for m in ('classad2', 'condor_fake'))\n"
        "a.query = lambda ids: seen.append(loaded()) or real(ids)\n"
        "print(seen, a.query_cached(['1.0']).ok)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "home")], capture_output=True, text=True, check=True, env=os.environ
    ).stdout
    assert out.split() == ["[True]", "True"]


# ---------------------------------------------------------------------------
# states
# ---------------------------------------------------------------------------


def ad(**attrs):
    import classad2

    base = {"ClusterId": 7, "ProcId": 2, "JimGridJob": GRID, "JimOffset": 10, "QDate": 1700000000}
    return classad2.ClassAd({**base, **attrs})


def test_state_map_is_complete_and_right():
    assert {k: v[1] for k, v in JOB_STATUS.items()} == {
        1: LocalState.QUEUED,
        2: LocalState.RUNNING,
        3: LocalState.CANCELLED,
        4: LocalState.DONE,
        5: LocalState.HELD,
        6: LocalState.RUNNING,
        7: LocalState.SUSPENDED,
    }
    st = status_of(ad(JobStatus=2, RemoteHost="slot1_3@wn17.example.org"))
    assert st.state is LocalState.RUNNING and st.host == "wn17.example.org"
    assert st.tag == f"{GRID}.12" and st.submitted == 1700000000.0 and st.native == "Running (2)"
    assert status_of(ad(JobStatus=4, ExitCode=0, ExitBySignal=False)).state is LocalState.DONE
    failed = status_of(ad(JobStatus=4, ExitCode=3, ExitBySignal=False))
    assert failed.state is LocalState.FAILED and failed.exit_code == 3
    killed = status_of(ad(JobStatus=4, ExitBySignal=True, ExitSignal=9))
    assert killed.state is LocalState.FAILED and killed.exit_code == 137 and "signal 9" in killed.reason
    removed = status_of(ad(JobStatus=3, RemoveReason="via condor_rm (by user admin)"))
    assert removed.state is LocalState.CANCELLED and "condor_rm" in removed.reason
    assert status_of(ad(JobStatus=99)) is None  # unknown: a warning, never a guess
    assert status_of(ad(JobStatus=2, JimGridJob=None)).tag is None


def test_no_htcondor_status_says_the_site_ended_a_job():
    """Removed is condor_rm's, Held is no end, an evicted job is Idle again: no cause, ever."""
    ads = [
        ad(JobStatus=3, RemoveReason="via condor_rm (by user admin)"),
        ad(JobStatus=4, ExitBySignal=True, ExitSignal=9),
        ad(JobStatus=4, ExitCode=3, ExitBySignal=False),
        ad(JobStatus=5, HoldReason="Job has gone over memory limit", HoldReasonCode=34),
        ad(JobStatus=1),
    ]
    assert [status_of(a).cause for a in ads] == [None] * len(ads)


def test_hold_reason_is_recorded():
    st = status_of(
        ad(
            JobStatus=5,
            HoldReason="Error from slot1@wn3: Failed to execute '/x': No such file",
            HoldReasonCode=6,
            HoldReasonSubCode=2,
        )
    )
    assert st.state is LocalState.HELD
    assert st.reason == "Error from slot1@wn3: Failed to execute '/x': No such file (HoldReasonCode 6, subcode 2)"


def test_scripted_states_through_one_projected_query(tmp_path, fake, adapter):
    condor_fake.set_scenario(
        fake.state.dir,
        rules=[
            {"when": "ProcId == 0", "hold": {"reason": "Job exceeded allowed_job_duration", "code": 46}},
            {"when": "ProcId == 1", "status": 6},
            {"when": "ProcId == 2", "status": 7},
            {"when": "ProcId == 3", "idle": True},
            {"when": "ProcId == 4", "exit": {"code": 0}, "leave_in_queue": True},
            {"when": "ProcId == 5", "exit": {"signal": 11}, "leave_in_queue": True},
        ],
    )
    ids = adapter.submit_chunk(chunk_for(tmp_path / "job", range(6)))
    assert ids == {k: f"1.{k}" for k in range(6)}
    res = adapter.query(list(ids.values()))
    assert res.ok
    states = {b: (s.state, s.exit_code) for b, s in res.statuses.items()}
    assert states == {
        "1.0": (LocalState.HELD, None),
        "1.1": (LocalState.RUNNING, None),
        "1.2": (LocalState.SUSPENDED, None),
        "1.3": (LocalState.QUEUED, None),
        "1.4": (LocalState.DONE, 0),
        "1.5": (LocalState.FAILED, 139),
    }
    assert res.statuses["1.0"].reason == "Job exceeded allowed_job_duration (HoldReasonCode 46)"
    assert all(res.statuses[f"1.{k}"].tag == f"{GRID}.{k}" for k in range(6))
    queries = fake.calls("query")
    assert len(queries) == 1 and queries[0]["projection"] == PROJECTION
    assert queries[0]["constraint"].startswith("JimGridJob =!= undefined && Owner == ")


def test_query_failure_is_no_news(adapter, fake):
    condor_fake.set_scenario(fake.state.dir, query_error="Failed to connect to schedd")
    res = adapter.query(["1.0"])
    assert not res.ok and "Failed to connect to schedd" in res.error


# ---------------------------------------------------------------------------
# submit, history, cancel, reconcile (in process, real jobs)
# ---------------------------------------------------------------------------


def write_wrapper(job_dir: Path, body: str = "") -> None:
    """A stand-in wrapper: exits with its index (from the environment HTCondor gives it)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "wrapper.py").write_text(
        "import os, sys, time\n"
        "i = int(os.environ['JIM_INDEX_ARRAY']) + int(sys.argv[sys.argv.index('--index-offset') + 1])\n"
        f"{body}\n"
        "print('local job', i, 'batch id', os.environ['JIM_BATCH_ID'], 'path', os.environ.get('PATH'))\n"
        "sys.exit(i)\n"
    )


def test_one_transaction_per_run_of_local_jobs(tmp_path, fake, adapter):
    job_dir = tmp_path / "job"
    chunk = chunk_for(job_dir, [0, 1, 2, 7, 8])
    write_wrapper(job_dir)
    ids = adapter.submit_chunk(chunk)
    assert ids == {0: "1.0", 1: "1.1", 2: "1.2", 7: "2.0", 8: "2.1"}
    submits = fake.calls("submit")
    assert [(s["cluster"], s["count"]) for s in submits] == [(1, 3), (2, 2)]
    assert submits[1]["description"]["My.JimOffset"] == "7"
    # the jobs ran for real, left the queue, and are found in the history
    wait_for(lambda: not fake.jobs(), what="the jobs to leave the queue")
    res = adapter.query(list(ids.values()))
    assert res.ok and res.statuses == {}
    acct = adapter.accounting(list(ids.values()))
    assert {b: (s.state, s.exit_code, s.evidence) for b, s in acct.items()} == {
        "1.0": (LocalState.DONE, 0, Evidence.ACCOUNTING),
        "1.1": (LocalState.FAILED, 1, Evidence.ACCOUNTING),
        "1.2": (LocalState.FAILED, 2, Evidence.ACCOUNTING),
        "2.0": (LocalState.FAILED, 7, Evidence.ACCOUNTING),
        "2.1": (LocalState.FAILED, 8, Evidence.ACCOUNTING),
    }
    assert acct["2.1"].tag == f"{GRID}.8"
    hist = fake.calls("history")[-1]
    assert hist["match"] == 5 and "member(ProcId, {0, 1, 2})" in hist["constraint"]
    out = (job_dir / "batch" / "condor-2.1.out").read_text()
    assert out.strip() == "local job 8 batch id 2.1 path None"  # a clean environment, as HTCondor gives


def test_groups_are_runs_of_consecutive_local_jobs(adapter):
    assert adapter.groups([8, 0, 2, 1, 7, 20]) == [[0, 1, 2], [7, 8], [20]]
    assert adapter.groups(range(5000)) == [list(range(5000))]  # no limit on a cluster's size


def test_a_refused_later_run_leaves_the_chunk_partly_submitted(tmp_path, fake, adapter, monkeypatch):
    """The first cluster went in, the second was refused: transient, so that the worker reconciles by tag."""
    describe = adapter.submit_description

    def refuse_the_second(chunk, offset):
        if offset == 7:
            condor_fake.set_scenario(
                fake.state.dir,
                submit_error="Submit validation failed: request_disk is invalid",
                rules=[{"when": "true", "idle": True}],
            )
        return describe(chunk, offset)

    condor_fake.set_scenario(fake.state.dir, rules=[{"when": "true", "idle": True}])
    monkeypatch.setattr(adapter, "submit_description", refuse_the_second)
    with pytest.raises(SubmitError) as e:
        adapter.submit_chunk(chunk_for(tmp_path / "job", [0, 1, 2, 7, 8]))
    assert e.value.transient and e.value.message.startswith("part of the chunk was submitted: ")
    assert "request_disk is invalid" in e.value.message
    assert sorted(fake.jobs()) == ["1.0", "1.1", "1.2"]
    tags = [f"{GRID}.{k}" for k in (0, 1, 2, 7, 8)]
    assert adapter.reconcile(GRID, tags) == {f"{GRID}.{k}": f"1.{k}" for k in range(3)}


def test_submit_reconciles_a_lost_answer_instead_of_submitting_again(tmp_path, fake, adapter):
    condor_fake.set_scenario(
        fake.state.dir,
        submit_error_after_commit="Failed to receive reply: connection reset",
        rules=[{"when": "true", "idle": True}],
    )
    assert adapter.submit(chunk_for(tmp_path / "job", range(2))) == {0: "1.0", 1: "1.1"}
    assert len(fake.calls("submit")) == 1


def test_history_and_remove_name_ids_per_command_clusters_at_a_time(tmp_path, fake, adapter, monkeypatch):
    condor_fake.set_scenario(fake.state.dir, rules=[{"when": "true", "exit": {"code": 0}}])
    ids = adapter.submit_chunk(chunk_for(tmp_path / "job", [0, 1, 2, 5, 9, 10]))
    assert sorted(ids.values()) == ["1.0", "1.1", "1.2", "2.0", "3.0", "3.1"]
    adapter.query([])  # lets the scripted jobs complete
    monkeypatch.setattr(adapter, "ids_per_command", 2)
    acct = adapter.accounting(list(ids.values()))
    assert sorted(acct) == sorted(ids.values()) and all(s.state is LocalState.DONE for s in acct.values())
    assert [h["match"] for h in fake.calls("history")] == [4, 2]
    assert adapter.cancel_units(["3.1", "1.0", "x", "3.0", "1.2"]) == [["1.0", "1.2"], ["3.0", "3.1"]]
    adapter.cancel(list(ids.values()))
    assert [c["job_spec"] for c in fake.calls("act")] == [["1.0", "1.1", "1.2", "2.0"], ["3.0", "3.1"]]


def test_cancel_removes_and_the_jobs_get_sigterm(tmp_path, fake, adapter):
    job_dir = tmp_path / "job"
    write_wrapper(
        job_dir,
        "import signal\n"
        "signal.signal(signal.SIGTERM, lambda *a: (open(os.environ['TMPDIR'] + '/../../term.' + str(i),"
        " 'w').close(), sys.exit(143)))\n"
        "open(os.environ['TMPDIR'] + '/../../ready.' + str(i), 'w').close()\ntime.sleep(60)",
    )
    ids = adapter.submit_chunk(chunk_for(job_dir, range(3)))
    wait_for(lambda: len(list(fake.state.dir.glob("ready.*"))) == 3, what="three running jobs")
    adapter.cancel(list(ids.values()), 1.0)
    res = adapter.query(list(ids.values()))
    assert all(s.state is LocalState.CANCELLED for s in res.statuses.values())
    wait_for(lambda: not fake.jobs(), what="the removed jobs to leave the queue")
    assert sorted(p.name for p in fake.state.dir.glob("term.*")) == ["term.0", "term.1", "term.2"]
    acct = adapter.accounting(list(ids.values()))
    assert all(s.state is LocalState.CANCELLED and "Python-initiated" in s.reason for s in acct.values())
    assert fake.calls("act")[0]["job_spec"] == ["1.0", "1.1", "1.2"]


def test_find_by_tag_in_queue_and_history(tmp_path, fake, adapter):
    condor_fake.set_scenario(
        fake.state.dir, rules=[{"when": "ProcId == 0", "exit": {"code": 0}}, {"when": "ProcId > 0", "idle": True}]
    )
    adapter.submit_chunk(chunk_for(tmp_path / "job", range(3)))
    adapter.query([])  # lets the scripted job 0 complete
    found = adapter.find_by_tag(GRID, [f"{GRID}.0", f"{GRID}.2", f"{GRID}.9"])
    assert found == {f"{GRID}.0": "1.0", f"{GRID}.2": "1.2"}
    assert fake.calls("history")[-1]["since"].startswith("EnteredCurrentStatus < ")


def test_refused_submit_is_permanent_and_creates_nothing(tmp_path, fake, adapter):
    condor_fake.set_scenario(fake.state.dir, submit_error="Submit validation failed: request_disk is invalid")
    with pytest.raises(SubmitError) as e:
        adapter.submit_chunk(chunk_for(tmp_path / "job", range(2)))
    assert not e.value.transient and "request_disk is invalid" in e.value.message
    assert fake.jobs() == {}


def test_lost_answer_after_commit_is_transient_and_found_by_tag(tmp_path, fake, adapter):
    condor_fake.set_scenario(
        fake.state.dir,
        submit_error_after_commit="Failed to receive reply: connection reset",
        rules=[{"when": "true", "idle": True}],
    )
    with pytest.raises(SubmitError) as e:
        adapter.submit_chunk(chunk_for(tmp_path / "job", range(2)))
    assert e.value.transient
    assert adapter.find_by_tag(GRID, [f"{GRID}.0", f"{GRID}.1"]) == {f"{GRID}.0": "1.0", f"{GRID}.1": "1.1"}


def test_free_slots_from_the_collector(adapter, fake):
    condor_fake.set_scenario(
        fake.state.dir,
        slots=[
            {"Name": "slot1@a", "Cpus": 6, "State": "Unclaimed", "Activity": "Idle"},
            {"Name": "slot2@a", "Cpus": 2, "State": "Claimed", "Activity": "Busy"},
            {"Name": "slot1@b", "Cpus": 1, "State": "Unclaimed", "Activity": "Idle"},
        ],
    )
    assert adapter.free_slots() == 7
    condor_fake.set_scenario(fake.state.dir, collector_error="Failed communication with collector.")
    assert adapter.free_slots() is None


# ---------------------------------------------------------------------------
# grid jobs end to end, through the CLI (worker and monitor are subprocesses)
# ---------------------------------------------------------------------------


@pytest.fixture
def cjim(jim_env, tmp_path):
    fake_dir = tmp_path / "condor-fake"
    jim_env.env = condor_fake.enable(jim_env.env, fake_dir)
    jim_env.config.write_text(
        FAST_CONFIG + f'\n[batch]\nadapter = "condor"\npython = "{sys.executable}"\n'
        f"cache_interval = 0.5\nchunk_size = 4\n"
    )
    jim_env.fake = condor_fake.FakeSchedd(fake_dir)
    yield jim_env
    jim_env.fake.kill_everything()


def test_grid_job_end_to_end(cjim):
    job = cjim.submit('&(executable=/bin/sh)(arguments=-c "echo hello from $JIM_INDEX")(count=10)')
    out = cjim.wait(job, timeout=60)
    assert out["JOB_STATE"] == "DONE", cjim.run("status", job).stdout
    st = cjim.status(job)
    assert [lj["state"] for lj in st["localJobs"]] == ["DONE"] * 10
    assert {lj["batchId"] for lj in st["localJobs"]} == {
        f"{c}.{p}" for c, n in ((1, 4), (2, 4), (3, 2)) for p in range(n)
    }
    submits = cjim.fake.calls("submit")
    assert [s["count"] for s in submits] == [4, 4, 2]  # chunk_size 4: one transaction per chunk
    # one projected query per interval for everything (never one per job)
    queries = cjim.fake.calls("query")
    spans = [
        q["at"]
        for q in queries
        if q["constraint"].startswith("JimGridJob =!= undefined") and "&& (" not in q["constraint"]
    ]  # the status query, not a search by tag
    assert len(spans) >= 2
    assert all(b - a >= 0.45 for a, b in zip(spans, spans[1:])), "more than one query per cache interval"
    import tarfile

    with tarfile.open(st["outputTar"]) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/stdout.3.1.3"))
        assert tar.extractfile(member).read().decode().strip() == "hello from 3"


def test_held_job_records_the_hold_reason(cjim):
    cjim.fake.state.dir.mkdir(parents=True, exist_ok=True)
    condor_fake.set_scenario(
        cjim.fake.state.dir,
        rules=[
            {
                "when": "JimOffset + ProcId == 1",
                "after": 0.5,
                "hold": {"reason": "Error from slot1@wn3: SHADOW at 10.0.0.1 failed to activate claim", "code": 12},
            }
        ],
    )
    job = cjim.submit('&(executable=/bin/sh)(arguments=-c "exit 0")(count=3)')

    def held():
        lj = cjim.status(job)["localJobs"]
        return lj if lj[1]["state"] == "HELD" and lj[0]["state"] == "DONE" and lj[2]["state"] == "DONE" else None

    lj = wait_for(held, timeout=40, what="local job 1 held, the others done")
    assert lj[1]["reason"] == "Error from slot1@wn3: SHADOW at 10.0.0.1 failed to activate claim (HoldReasonCode 12)"
    assert cjim.poll(job)["JOB_STATE"] == "SUSPENDED"  # every waiting local job is held
    out = cjim.protocol("cancel", "--job-id", job)
    assert out["JOB_STATE"] == "FAILED"
    assert any(c["job_spec"] == [lj[1]["batchId"]] for c in cjim.fake.calls("act"))


@pytest.mark.slow  # (waits for the fake schedd's history)
def test_jobs_that_left_the_queue_are_settled_from_the_history(cjim):
    """No wrapper ran (scripted exits), so no exit-code file: the history decides, never silence."""
    cjim.fake.state.dir.mkdir(parents=True, exist_ok=True)
    condor_fake.set_scenario(
        cjim.fake.state.dir,
        rules=[
            {"when": "ProcId == 0", "after": 0.5, "exit": {"code": 0}},
            {"when": "ProcId == 1", "after": 0.5, "exit": {"code": 3}},
            {"when": "ProcId == 2", "after": 0.5, "exit": {"code": 0}, "vanish": True},
        ],
    )
    job = cjim.submit("&(executable=/bin/true)(count=3)")
    out = cjim.wait(job, timeout=40)
    assert out["JOB_STATE"] == "FAILED"
    lj = cjim.status(job)["localJobs"]
    assert (lj[0]["state"], lj[0]["evidence"], lj[0]["exitCode"]) == ("DONE", "accounting", 0)
    assert (lj[1]["state"], lj[1]["evidence"], lj[1]["exitCode"]) == ("FAILED", "accounting", 3)
    # gone without a trace: LOST after the grace period, never DONE
    assert (lj[2]["state"], lj[2]["evidence"]) == ("LOST", "absent-after-grace")
    assert out["EXIT_CODE"] == "3"


def test_refused_submission_fails_the_local_jobs_with_the_reason(cjim):
    cjim.fake.state.dir.mkdir(parents=True, exist_ok=True)
    condor_fake.set_scenario(cjim.fake.state.dir, submit_error="Submit validation failed: no such universe")
    job = cjim.submit("&(executable=/bin/true)(count=2)")
    out = cjim.wait(job, timeout=30)
    assert out["JOB_STATE"] == "FAILED"
    lj = cjim.status(job)["localJobs"]
    assert all(x["state"] == "FAILED" and "no such universe" in x["reason"] for x in lj)


def test_the_fake_catches_a_description_that_smuggles_in_lines(tmp_path, fake):
    """What the adapter's refusals protect against: the bindings write ``key = value`` lines."""
    import htcondor2

    (tmp_path / "iwd").mkdir()
    sub = htcondor2.Submit({"executable": "/bin/true", "initialdir": str(tmp_path / "iwd")})
    sub["arguments"] = '"a"\nrequirements = false'  # item assignment keeps the newline; the dict form would not
    with pytest.raises(htcondor2.HTCondorException, match="changed when written out"):
        fake.submit(sub, count=1)
    bad = htcondor2.Submit({"executable": "/bin/true", "initialdir": str(tmp_path / "iwd"), "My.JimTag": "a b c"})
    with pytest.raises(htcondor2.HTCondorException, match="Parse error"):
        fake.submit(bad, count=1)
    assert fake.jobs() == {}


def test_the_adapter_checks_the_bindings_took_the_description_as_given(tmp_path, monkeypatch):
    """htcondor2.Submit(dict) parses its values as submit-file lines: the adapter checks nothing was re-read."""
    a = CondorAdapter(Home(tmp_path).ensure(), {})
    chunk = chunk_for(tmp_path / "job", [0])
    desc = a.description(chunk, 0)
    monkeypatch.setattr(a, "description", lambda c, o: {**desc, "notification": "never\nrequirements = false"})
    with pytest.raises(SubmitError) as e:
        a.submit_description(chunk, 0)
    assert not e.value.transient and "requirements" in e.value.message
