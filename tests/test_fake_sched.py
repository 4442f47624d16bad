"""The fake batch system itself (tests/fake_sched), through its commands: it must behave like
the Slurm subset jim uses, or the fault tests built on it prove nothing."""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from fake_sched import BIN, FakeSched

FMT = "%i|%A|%F|%K|%T|%r|%j|%k"


@pytest.fixture
def fake(tmp_path):
    f = FakeSched(tmp_path / "state")
    yield f
    f.kill_jobs()


def sh(fake, *argv, check=True, timeout=30):
    env = {**os.environ, **fake.env()}
    p = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert p.returncode == 0, (argv, p.stdout, p.stderr)
    return p


def script(tmp_path, body, name="job.sh"):
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(0o755)
    return str(p)


def squeue(fake):
    out = sh(fake, "squeue", "-h", "-r", "-t", "all", "-o", FMT).stdout
    return {line.split("|")[0]: line.split("|") for line in out.splitlines()}


def wait_states(fake, want, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = squeue(fake)
        if {k: r[4] for k, r in rows.items() if k in want} == want:
            return rows
        time.sleep(0.1)
    raise AssertionError(f"{want} not reached: {squeue(fake)}")


def test_commands_are_executables_with_a_shebang():
    for c in ("sbatch", "squeue", "sacct", "scancel", "scontrol", "fake-sched"):
        p = BIN / c
        assert os.access(p, os.X_OK) and p.read_text().startswith("#!")


def test_needs_its_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FAKE_SCHED_DIR"}
    p = subprocess.run([str(BIN / "squeue")], env=env, capture_output=True, text=True)
    assert p.returncode == 1 and "FAKE_SCHED_DIR" in p.stderr


def test_array_runs_as_real_processes_with_slurm_variables(fake, tmp_path):
    s = script(
        tmp_path, 'echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID job $SLURM_JOB_ID"; exit $SLURM_ARRAY_TASK_ID'
    )
    jid = sh(
        fake,
        "sbatch",
        "--parsable",
        "--array=0-2",
        "--job-name=jim.g.10",
        "--comment=c",
        "-D",
        str(tmp_path),
        "-o",
        str(tmp_path / "o-%A_%a.out"),
        "--no-requeue",
        s,
    ).stdout.strip()
    assert jid.isdigit()
    rows = wait_states(fake, {f"{jid}_0": "COMPLETED", f"{jid}_1": "FAILED", f"{jid}_2": "FAILED"})
    assert rows[f"{jid}_1"][5] == "NonZeroExitCode" and rows[f"{jid}_1"][6] == "jim.g.10"
    assert (tmp_path / f"o-{jid}_2.out").read_text() == f"task 2 of {jid} job {jid}\n"
    acct = sh(fake, "sacct", "-n", "-X", "-P", "-o", "JobID,State,ExitCode,JobName", "-j", jid).stdout
    assert f"{jid}_2|FAILED|2:0|jim.g.10" in acct.splitlines()
    # and jim's own parsers read it
    from jim.adapters.slurm import parse_squeue

    st = parse_squeue(sh(fake, "squeue", "-h", "-r", "-t", "all", "-o", FMT).stdout)
    assert st[f"{jid}_0"].tag == "g.10" and st[f"{jid}_2"].tag == "g.12"


def test_ended_tasks_leave_squeue_after_min_job_age_but_stay_in_sacct(fake, tmp_path):
    fake.set_faults(min_job_age=0.3)
    jid = sh(fake, "sbatch", "--parsable", "-J", "x", "-D", str(tmp_path), script(tmp_path, "true")).stdout.strip()
    wait_states(fake, {jid: "COMPLETED"})
    time.sleep(0.5)
    assert jid not in squeue(fake)
    assert sh(fake, "squeue", "-h", "-j", jid, check=False).returncode == 1  # one unknown id: rc 1, like Slurm
    assert f"{jid}|COMPLETED" in sh(fake, "sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", jid).stdout


def test_scancel_signals_the_job_and_records_cancelled(fake, tmp_path):
    flag = tmp_path / "got-term"
    ready = tmp_path / "ready"
    s = script(
        tmp_path, f"trap 'echo term > {flag}; exit 143' TERM; touch {ready}.$SLURM_ARRAY_TASK_ID; sleep 30 & wait"
    )
    jid = sh(fake, "sbatch", "--parsable", "--array=0-1", "-J", "x", "-D", str(tmp_path), s).stdout.strip()
    wait_states(fake, {f"{jid}_0": "RUNNING", f"{jid}_1": "RUNNING"})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (tmp_path / "ready.0").exists():
        time.sleep(0.05)  # the shell has installed its trap
    sh(fake, "scancel", f"{jid}_0")
    rows = squeue(fake)
    assert rows[f"{jid}_0"][4] == "CANCELLED" and rows[f"{jid}_1"][4] == "RUNNING"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not flag.exists():
        time.sleep(0.05)
    assert flag.exists()
    p = sh(fake, "scancel", "99999")  # unknown id: an error message, rc 0 (like Slurm)
    assert "Invalid job id" in p.stderr
    sh(fake, "scancel", jid)


def test_submissions_in_parallel_get_distinct_ids(fake, tmp_path):
    s = script(tmp_path, "true")
    with ThreadPoolExecutor(8) as pool:
        ids = list(
            pool.map(
                lambda k: sh(fake, "sbatch", "--parsable", "-J", f"j{k}", "-D", str(tmp_path), s).stdout.strip(),
                range(16),
            )
        )
    assert len(set(ids)) == 16


def test_faults_count_down_and_are_logged(fake, tmp_path):
    fake.set_faults(fail={"squeue": 2, "sbatch": 1})
    for _ in range(2):
        p = sh(fake, "squeue", check=False)
        assert p.returncode == 1 and "Unable to contact slurm controller" in p.stderr
    assert sh(fake, "squeue", check=False).returncode == 0
    p = sh(fake, "sbatch", "--parsable", "-J", "x", script(tmp_path, "true"), check=False)
    assert p.returncode == 1 and not fake.submissions()  # refused: nothing recorded
    assert fake.fired("fail.squeue") == 2 and fake.fired("fail.sbatch") == 1
    assert fake.faults()["fail"] == {"squeue": 0, "sbatch": 0}


def test_slow_submit_records_the_job_before_keeping_the_caller_waiting(fake, tmp_path):
    fake.set_faults(slow_submit={"seconds": 30, "count": 1})
    with pytest.raises(subprocess.TimeoutExpired):
        sh(fake, "sbatch", "--parsable", "-J", "jim.g.0", "-D", str(tmp_path), script(tmp_path, "sleep 5"), timeout=2)
    rows = squeue(fake)  # not blocked by the sleeping sbatch: it released the lock
    assert [r[6] for r in rows.values()] == ["jim.g.0"]
    assert sh(fake, "sbatch", "--parsable", "-J", "y", script(tmp_path, "true"), timeout=5).stdout.strip()


def test_duplicate_and_out_of_order_rows(fake, tmp_path):
    jid = sh(
        fake, "sbatch", "--parsable", "--array=0-1", "-J", "x", "-D", str(tmp_path), script(tmp_path, "true")
    ).stdout.strip()
    wait_states(fake, {f"{jid}_0": "COMPLETED", f"{jid}_1": "COMPLETED"})
    fake.set_faults(duplicate=1)
    out = sh(fake, "squeue", "-h", "-r", "-t", "all", "-o", "%i|%T").stdout.splitlines()
    assert sorted(out) == sorted([f"{jid}_0|COMPLETED", f"{jid}_1|COMPLETED"] * 2)
    fake.set_faults(out_of_order=4)
    seen = [sh(fake, "squeue", "-h", "-r", "-t", "all", "-o", "%i|%T").stdout.splitlines() for _ in range(4)]
    assert [f"{jid}_1|RUNNING", f"{jid}_0|RUNNING"] in seen  # ended tasks shown running again, reversed
    assert [f"{jid}_0|COMPLETED", f"{jid}_1|COMPLETED"] in seen


def test_reused_id_and_its_old_accounting(fake, tmp_path):
    fake.set_faults(min_job_age=0.2)
    old = sh(
        fake, "sbatch", "--parsable", "-J", "jim.old.0", "-D", str(tmp_path), script(tmp_path, "true")
    ).stdout.strip()
    wait_states(fake, {old: "COMPLETED"})
    time.sleep(0.3)
    sh(fake, "fake-sched", "tick")
    fake.set_faults(min_job_age=0.2, reuse_ids=1)
    new = sh(
        fake, "sbatch", "--parsable", "-J", "jim.new.0", "-D", str(tmp_path), script(tmp_path, "sleep 5")
    ).stdout.strip()
    assert new == old
    acct = sh(fake, "sacct", "-n", "-X", "-P", "-o", "JobID,State,JobName", "-j", new).stdout.splitlines()
    assert acct == [f"{new}|RUNNING|jim.new.0", f"{new}|COMPLETED|jim.old.0"]
    nxt = sh(fake, "sbatch", "--parsable", "-J", "z", "-D", str(tmp_path), script(tmp_path, "true")).stdout.strip()
    assert int(nxt) == int(old) + 1  # the fault fired once
    sh(fake, "scancel", new)


def test_vanish_leaves_no_trace(fake, tmp_path):
    flag = tmp_path / "exited"
    s = script(tmp_path, f"trap 'touch {flag}' TERM; sleep 30 & wait")
    jid = sh(fake, "sbatch", "--parsable", "-J", "x", "-D", str(tmp_path), s).stdout.strip()
    wait_states(fake, {jid: "RUNNING"})
    sh(fake, "fake-sched", "vanish", jid)
    assert jid not in squeue(fake)
    assert sh(fake, "sacct", "-n", "-X", "-P", "-j", jid).stdout == ""
    time.sleep(0.3)
    assert not flag.exists()  # SIGKILL: nothing ran on the way out


def test_scontrol_show_config_and_array_limit(fake, tmp_path):
    fake.set_faults(max_array_size=77)
    assert "MaxArraySize            = 77" in sh(fake, "scontrol", "show", "config").stdout
    p = sh(fake, "sbatch", "--array=0-77", script(tmp_path, "true"), check=False)
    assert p.returncode == 1 and "Invalid job array specification" in p.stderr
