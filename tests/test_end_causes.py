"""Why a local job ended, as the batch system says it (:class:`jim.states.EndCause`): the site's
fault (node failure, preemption, boot or launch failure) or the job's own (time, deadline,
memory).  Parsers on recorded outputs (tests/data) and on lines written in the exact format of
those recordings for what the test systems cannot stage; the monitor's reason text; and the fake
Slurm's node failure through the real CLI.  The cause never changes the state a job ends in.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jim.adapters.model import BatchStatus, LocalJobSpec, QueryResult, SubmitChunk
from jim.adapters.pbs import FLAVOURS, PBSPRO_EXEC_CODES, TORQUE_EXEC_CODES
from jim.adapters.pbs import parse_qstat as parse_pbs_qstat
from jim.adapters.sge import FAILED_CAUSES, parse_qacct, parse_qstat
from jim.adapters.slurm import STATE_CAUSES, STATE_MAP, SlurmAdapter, end_cause, parse_sacct, parse_squeue, tag_name
from jim.db import Database, validate
from jim.evidence import Rules
from jim.monitor import apply_local
from jim.paths import Home
from jim.states import EndCause, Evidence, LocalState, site_fault

from fake_sched import BIN as FAKE_BIN
from fake_sched import FakeSched
from support.jimcli import FAST_CONFIG
from support.records import queued_record

DATA = Path(__file__).parent / "data"
G = "20261122-070000-abcdef01"


def slurm_recorded(name: str) -> str:
    """A recording of tests/data/slurm, its ``jim-rec-mix`` array named like jim's (local jobs 100...)."""
    return (DATA / "slurm" / f"{name}.out").read_text().replace("jim-rec-mix", tag_name(G, 100))


def one_line(text: str, prefix: str) -> str:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    return line


# -- the causes --------------------------------------------------------------------


def test_site_fault_is_true_for_the_sites_causes_only():
    assert {c for c in EndCause if site_fault(c)} == {
        EndCause.NODE_FAIL,
        EndCause.PREEMPTED,
        EndCause.BOOT_FAIL,
        EndCause.LAUNCH_FAILED,
        EndCause.WRAPPER_FAILED,
        EndCause.NOT_STARTED,
    }
    assert not site_fault(None) and not site_fault("") and not site_fault("COMPLETED")
    assert site_fault("NODE_FAIL") and not site_fault("TIMEOUT")  # the stored text works too
    assert EndCause.NODE_FAIL.describe() == "node failure (NODE_FAIL)"
    assert all(c.words and c.describe().endswith(f"({c.value})") for c in EndCause)


def test_batch_status_keeps_its_cause_through_the_shared_cache():
    st = BatchStatus(LocalState.FAILED, None, "NodeDown", "NODE_FAIL", cause=EndCause.NODE_FAIL)
    assert BatchStatus.from_json(json.loads(json.dumps(st.to_json()))) == st
    assert BatchStatus.from_json(BatchStatus(LocalState.DONE).to_json()).cause is None
    old = BatchStatus(LocalState.FAILED, 3).to_json()[:8]  # an answer cached before causes were recorded
    assert BatchStatus.from_json(old) == BatchStatus(LocalState.FAILED, 3)


# -- Slurm -------------------------------------------------------------------------


def test_slurm_recorded_outputs_have_no_cause():
    """The recorded jobs ended COMPLETED, FAILED (exit 3) or CANCELLED: none says why beyond that."""
    for name in ("squeue-mix", "squeue-mix-final", "squeue-mix-cancelled"):
        assert all(st.cause is None for st in parse_squeue(slurm_recorded(name)).values()), name
    for name in ("sacct-mix-final", "sacct-mix-purged", "sacct-mix-live"):
        assert all(st.cause is None for st in parse_sacct(slurm_recorded(name)).values()), name


@pytest.mark.parametrize(
    ("state", "reason", "cause"),
    [
        ("NODE_FAIL", "NodeDown", EndCause.NODE_FAIL),
        ("BOOT_FAIL", "None", EndCause.BOOT_FAIL),
        ("PREEMPTED", "None", EndCause.PREEMPTED),
        ("TIMEOUT", "TimeLimit", EndCause.TIMEOUT),
        ("DEADLINE", "DeadLine", EndCause.DEADLINE),
        ("OUT_OF_MEMORY", "OutOfMemory", EndCause.OUT_OF_MEMORY),
        ("FAILED", "JobLaunchFailure", None),  # any script killed by a signal (adapters/slurm.py)
        ("FAILED", "NonZeroExitCode", None),
        ("CANCELLED", "None", None),
        ("COMPLETED", "None", None),
    ],
)
def test_slurm_squeue_end_states_give_their_cause(state, reason, cause):
    # the recorded line of task 1 (FAILED|NonZeroExitCode), in the state a test cluster cannot stage
    line = one_line(slurm_recorded("squeue-mix-final"), "15_1|")
    st = parse_squeue(line.replace("|FAILED|NonZeroExitCode|", f"|{state}|{reason}|"))["15_1"]
    assert st.state is STATE_MAP[state]  # the state is what it always was
    assert st.cause is cause
    assert st.state.terminal


def test_slurm_launch_failure_held_by_slurm_says_so():
    """A batch job whose launch (prolog) failed is requeued held by slurmctld: HELD, cause LAUNCH_FAILED."""
    line = one_line(slurm_recorded("squeue-mix"), "15_5|")  # 15_5|15|15|5|PENDING|JobArrayTaskLimit|...
    st = parse_squeue(line.replace("|JobArrayTaskLimit|", "|launch failed requeued held|"))["15_5"]
    assert st.state is LocalState.HELD and st.cause is EndCause.LAUNCH_FAILED
    queued = parse_squeue(line)["15_5"]
    assert queued.state is LocalState.QUEUED and queued.cause is None
    running = parse_squeue(line.replace("|PENDING|JobArrayTaskLimit|", "|RUNNING|JobLaunchFailure|"))["15_5"]
    assert running.state is LocalState.RUNNING and running.cause is None  # running: no end, no cause


@pytest.mark.parametrize(
    ("state", "exitcode", "cause"),
    [
        # NODE_FAIL 0:0 (1:0 after a node came back before it was declared DOWN) and PREEMPTED 0:0
        # of a --no-requeue job: as seen on the multi-node test cluster (tests/services/slurm-cluster)
        ("NODE_FAIL", "0:0", EndCause.NODE_FAIL),
        ("NODE_FAIL", "1:0", EndCause.NODE_FAIL),
        ("BOOT_FAIL", "0:0", EndCause.BOOT_FAIL),
        ("PREEMPTED", "0:0", EndCause.PREEMPTED),
        ("TIMEOUT", "0:0", EndCause.TIMEOUT),
        ("DEADLINE", "0:0", EndCause.DEADLINE),
        ("OUT_OF_MEMORY", "0:125", EndCause.OUT_OF_MEMORY),
        ("CANCELLED by 0", "0:0", None),
        ("FAILED", "3:0", None),
    ],
)
def test_slurm_sacct_end_states_give_their_cause(state, exitcode, cause):
    line = one_line(slurm_recorded("sacct-mix-final"), "15_1|")  # 15_1|20|FAILED|3:0|...
    st = parse_sacct(line.replace("|FAILED|3:0|", f"|{state}|{exitcode}|"))["15_1"]
    assert st.state is STATE_MAP[state.split()[0]] and st.evidence is Evidence.ACCOUNTING
    assert st.cause is cause


def test_slurm_states_with_a_cause_still_end_failed():
    assert {STATE_MAP[state] for state in STATE_CAUSES} == {LocalState.FAILED}
    # launch failure is a reason; the last two are jim's own evidence, not Slurm's
    assert set(STATE_CAUSES.values()) == set(EndCause) - {
        EndCause.LAUNCH_FAILED,
        EndCause.WRAPPER_FAILED,
        EndCause.NOT_STARTED,
    }


def test_slurm_end_cause_table():
    assert end_cause("NODE_FAIL") is EndCause.NODE_FAIL
    assert end_cause("CANCELLED by 0", "launch failed") is EndCause.LAUNCH_FAILED
    assert end_cause("PENDING", "JobHeldUser") is None and end_cause("", None) is None


def test_slurm_submits_with_no_requeue_by_default(tmp_path):
    argv = SlurmAdapter(Home(tmp_path).ensure(), {"max_array_size": 1001}).submit_argv(
        _chunk(tmp_path), [0, 1], tmp_path / "s.sh"
    )
    assert "--no-requeue" in argv
    argv = SlurmAdapter(Home(tmp_path / "r").ensure(), {"max_array_size": 1001, "requeue": True}).submit_argv(
        _chunk(tmp_path), [0, 1], tmp_path / "s.sh"
    )
    assert "--no-requeue" not in argv


def _chunk(tmp_path):
    return SubmitChunk(
        G,
        [LocalJobSpec(k, f"{G}.{k}") for k in (0, 1)],
        job_dir=tmp_path,
        wrapper=tmp_path / "wrapper.py",
        sandbox=tmp_path / "sandbox.tar.gz",
        outroot=tmp_path / "local",
    )


# -- Grid Engine ---------------------------------------------------------------------


def sge_recorded(name: str) -> str:
    return (DATA / "sge" / f"{name}.out").read_text()


def sge_job(role: str) -> str:
    return json.loads((DATA / "sge" / "jobs.json").read_text())[role]["job"]


def test_sge_recorded_accounting_causes():
    badout = parse_qacct(sge_recorded("qacct-badout"))[f"{sge_job('badout')}.1"]  # failed 26: opening output
    assert badout.state is LocalState.FAILED and badout.cause is EndCause.LAUNCH_FAILED
    mix = parse_qacct(sge_recorded("qacct-mix"))
    assert mix[f"{sge_job('mix')}.3"].native.startswith("failed 100,")  # qdel'd while running: no cause
    assert all(st.cause is None for st in mix.values())  # exits 0 and 3, and that kill
    special = parse_qacct(sge_recorded("qacct-special"))
    assert all(st.cause is None for st in special.values())  # failed 30 (exit 100), a rerun's exit 0


def _qacct_with(failed_line: str, exit_status: str = "0") -> str:
    """The recorded failed-26 record, with another ``failed`` line in the same columns."""
    text = sge_recorded("qacct-badout")
    text = text.replace("failed       26  : opening input/output file", failed_line)
    return text.replace("exit_status  0   ", f"exit_status  {exit_status:<4}")


@pytest.mark.parametrize(
    ("failed_line", "exit_status", "cause"),
    [
        ("failed       1   : assumedly before job", "0", EndCause.LAUNCH_FAILED),
        ("failed       8   : in prolog", "0", EndCause.LAUNCH_FAILED),
        ("failed       11  : before job", "0", EndCause.LAUNCH_FAILED),
        ("failed       28  : changing into working directory", "0", EndCause.LAUNCH_FAILED),
        ("failed       37  : qmaster enforced h_rt limit", "0", EndCause.TIMEOUT),
        ("failed       15  : in epilog", "0", None),  # the job ran
        ("failed       100 : assumedly after job", "137", None),  # a kill: whose is unknown
        ("failed       0    ", "1", None),
    ],
)
def test_sge_failed_codes_give_their_cause(failed_line, exit_status, cause):
    st = parse_qacct(_qacct_with(failed_line, exit_status))[f"{sge_job('badout')}.1"]
    assert st.cause is cause
    assert st.state is LocalState.FAILED  # what it always was: failed != 0 or exit != 0


def test_sge_failed_causes_are_launch_failures_or_h_rt():
    assert set(FAILED_CAUSES.values()) == {EndCause.LAUNCH_FAILED, EndCause.TIMEOUT}
    assert FAILED_CAUSES[37] is EndCause.TIMEOUT and 25 not in FAILED_CAUSES and 100 not in FAILED_CAUSES


def test_sge_error_state_is_held_by_a_launch_failure():
    st = parse_qstat(sge_recorded("qstat-mix"))
    badout = st[f"{sge_job('badout')}.1"]  # Eqw: its output path could not be opened
    assert badout.state is LocalState.HELD and badout.cause is EndCause.LAUNCH_FAILED
    assert all(s.cause is None for s in st.values() if "E" not in s.native)


# -- PBS: Torque, PBS Pro, Slurm's wrappers -------------------------------------------------


def pbs_sample(flavour: str) -> str:
    return (DATA / "pbs" / f"{flavour}-qstat-f-t.txt").read_text()


def test_pbs_samples_causes():
    torque = parse_pbs_qstat(pbs_sample("torque"), FLAVOURS["torque"], user="alice")
    assert torque["1242"].cause is EndCause.LAUNCH_FAILED  # exit_status -1: JOB_EXEC_FAIL1
    assert "never ran" in torque["1242"].reason and "JOB_EXEC_FAIL1" in torque["1242"].reason
    assert torque["1241"].cause is None and torque["1241"].exit_code == 128 + 15  # 271: SIGTERM (qdel)
    assert torque["1234[1]"].cause is None and torque["1234[0]"].cause is None  # exit 3, exit 0
    pbspro = parse_pbs_qstat(pbs_sample("pbspro"), FLAVOURS["pbspro"], user="alice")
    assert all(st.cause is None for st in pbspro.values())  # exits 0, 2 and 265 (SIGKILL)


@pytest.mark.parametrize(
    ("flavour", "status", "cause", "started"),
    [
        ("torque", "-1", EndCause.LAUNCH_FAILED, False),
        ("torque", "-3", EndCause.LAUNCH_FAILED, False),
        ("torque", "-4", EndCause.NODE_FAIL, True),
        ("torque", "-10", EndCause.OUT_OF_MEMORY, True),
        ("torque", "-11", EndCause.TIMEOUT, True),
        ("torque", "-12", None, True),
        ("torque", "-13", EndCause.LAUNCH_FAILED, False),
        ("torque", "-99", None, False),
        ("torque", "271", None, True),
        ("pbspro", "-2", EndCause.LAUNCH_FAILED, False),
        ("pbspro", "-10", EndCause.LAUNCH_FAILED, False),
        ("pbspro", "-11", None, True),
        ("pbspro", "-14", EndCause.NODE_FAIL, True),
        ("pbspro", "-20", EndCause.NODE_FAIL, True),
        ("pbspro", "-27", EndCause.OUT_OF_MEMORY, True),
        ("pbspro", "-29", EndCause.TIMEOUT, True),
        ("pbspro", "265", None, True),
    ],
)
def test_pbs_exit_statuses_give_their_cause(flavour, status, cause, started):
    """The finished records of the samples, with the exit status of a job that ended otherwise."""
    text, bid, attr, was = {
        "torque": (pbs_sample("torque"), "1242", "exit_status", "-1"),
        "pbspro": (pbs_sample("pbspro"), "5690", "Exit_status", "2"),
    }[flavour]
    text = text.replace(f"    {attr} = {was}\n", f"    {attr} = {status}\n")
    st = parse_pbs_qstat(text, FLAVOURS[flavour], user="alice")[bid]
    assert st.state is LocalState.FAILED and st.cause is cause
    assert ("never ran" in st.reason) is not started
    if int(status) < 0:
        assert st.exit_code is None  # never the job's own exit code


def test_pbs_exec_code_tables():
    assert TORQUE_EXEC_CODES[-11][0] == "JOB_EXEC_OVERLIMIT_WT"
    assert PBSPRO_EXEC_CODES[-29][0] == "JOB_EXEC_KILL_WALLTIME"
    assert all(k < 0 for k in (*TORQUE_EXEC_CODES, *PBSPRO_EXEC_CODES))
    assert not FLAVOURS["slurm"].exec_codes  # the wrappers never show an exit status


# -- the monitor ---------------------------------------------------------------------


@pytest.fixture
def record(tmp_path):
    db = Database(Home(tmp_path / "h"))
    rec = queued_record()
    db.create(rec)
    return db, rec.id


def _apply(db, job_id, tmp_path, status=None, accounting=None):
    d = tmp_path / "local0"
    d.mkdir(exist_ok=True)
    statuses = {"77_0": status} if status is not None else {}
    with db.update(job_id) as job:
        lj = job.local(0)
        result = QueryResult(ok=True, statuses=statuses)
        apply_local(lj, d, result, accounting or {}, Rules(time.time(), lost_grace=60), cancelled=False)
    return db.read(job_id).local(0)


def test_monitor_writes_the_cause_into_the_reason_of_a_batch_end(record, tmp_path):
    db, job_id = record
    st = BatchStatus(LocalState.FAILED, None, "NodeDown", "NODE_FAIL", Evidence.BATCH, cause=EndCause.NODE_FAIL)
    lj = _apply(db, job_id, tmp_path, status=st)
    assert lj.state is LocalState.FAILED and lj.evidence == "batch"  # the state it always ended in
    assert lj.get("reason") == "NODE_FAIL (NodeDown); node failure (NODE_FAIL)"
    assert validate(db.home.record(job_id)) == []


def test_monitor_writes_the_cause_of_an_accounting_record(record, tmp_path):
    db, job_id = record
    acct = BatchStatus(LocalState.FAILED, 0, "TIMEOUT", "TIMEOUT", Evidence.ACCOUNTING, cause=EndCause.TIMEOUT)
    lj = _apply(db, job_id, tmp_path, accounting={"77_0": acct})
    assert lj.state is LocalState.FAILED and lj.evidence == "accounting"
    assert lj.get("reason") == "TIMEOUT; wall-time limit reached (TIMEOUT)"
    assert validate(db.home.record(job_id)) == []


def test_monitor_without_a_cause_writes_the_reason_it_always_wrote(record, tmp_path):
    db, job_id = record
    st = BatchStatus(LocalState.FAILED, 3, "NonZeroExitCode", "FAILED", Evidence.BATCH)
    lj = _apply(db, job_id, tmp_path, status=st)
    assert lj.get("reason") == "FAILED (NonZeroExitCode)" and lj.exit_code == 3


def test_the_exit_file_still_wins_over_a_cause(record, tmp_path):
    """A job whose wrapper wrote its exit code ended by its own account, whatever the batch system adds."""
    db, job_id = record
    (tmp_path / "local0").mkdir()
    (tmp_path / "local0" / "exit_code").write_text("0\n")
    st = BatchStatus(LocalState.FAILED, None, None, "NODE_FAIL", Evidence.BATCH, cause=EndCause.NODE_FAIL)
    lj = _apply(db, job_id, tmp_path, status=st)
    assert lj.state is LocalState.DONE and lj.evidence == "wrapper-exit-file"
    assert "NODE_FAIL" not in (lj.get("reason") or "")


# -- through jim, on the fake Slurm ----------------------------------------------------


@pytest.fixture
def fake(tmp_path):
    return FakeSched(tmp_path / "fake-sched")


@pytest.fixture
def fjim(jim_env, fake):
    jim_env.env.update(fake.env(jim_env.env))
    jim_env.config.write_text(
        FAST_CONFIG
        + f"""
[batch]
adapter = "slurm"
partition = "debug"
cache_interval = 0.3
python = "{sys.executable}"
"""
    )
    return jim_env


def test_node_failure_shows_in_jim_status_json(fjim, fake):
    """With one attempt (the tests' configuration), a node failure fails the grid job, and says so."""
    job = fjim.submit("&(executable=/bin/sleep)(arguments=60)(count=1)")
    (lj,) = fjim.wait_running(job, 1)["localJobs"]
    proc = subprocess.run(
        [str(FAKE_BIN / "fake-sched"), "end", lj["batchId"], "NODE_FAIL", "NodeDown"],
        env=fake.env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    out = fjim.wait(job, timeout=60)
    assert out["JOB_STATE"] == "FAILED"  # what a node failure always made of it
    (lj,) = fjim.status(job)["localJobs"]
    assert lj["state"] == "FAILED" and lj["evidence"] in ("batch", "accounting")
    assert lj["reason"].startswith("NODE_FAIL") and lj["reason"].endswith("; node failure (NODE_FAIL)")
