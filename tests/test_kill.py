"""``jim kill ID.k``: people stop some local jobs of a running grid job (Ganga's ``j.k`` ids), on fork."""

from __future__ import annotations

import time

import psutil
import pytest

from jim.errors import GramError, JimError
from jim.ranges import parse_selection

from support.jimcli import tagged, write_config


def _all_running(jim_env, job: str, n: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = jim_env.status(job)
        if sum(lj["state"] == "RUNNING" for lj in st["localJobs"]) == n:
            return st
        assert time.monotonic() < deadline, st
        time.sleep(0.2)


def test_kill_stops_the_chosen_local_jobs_and_the_others_go_on(jim_env):
    write_config(jim_env, '[batch]\nadapter = "fork"\ncores = 8\n')  # (4 sleeping local jobs at once)
    job = jim_env.submit("&(executable=/bin/sleep)(arguments=120)(count=4)")
    st = _all_running(jim_env, job, 4)
    tags = {lj["index"]: lj["tag"] for lj in st["localJobs"]}
    assert all(tagged(tags[k]) for k in tags)

    done = jim_env.run("kill", f"{job}.1-2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{job}.1 CANCELLED", f"{job}.2 CANCELLED"]

    rows = {lj["index"]: lj for lj in jim_env.status(job)["localJobs"]}
    user = psutil.Process().username()
    for k in (1, 2):
        assert rows[k]["state"] == "CANCELLED" and rows[k]["reason"] == f"killed by {user}", rows[k]
        assert rows[k]["evidence"] == "cancel"
        assert tagged(tags[k]) == []
    for k in (0, 3):
        assert rows[k]["state"] == "RUNNING" and tagged(tags[k])
    assert jim_env.poll(job)["JOB_STATE"] == "ACTIVE"

    again = jim_env.run("kill", f"{job}.2")  # (already ended: left as it is)
    assert again.returncode == 0 and again.stdout.splitlines() == [f"{job}.2 CANCELLED"]

    jim_env.protocol("cancel", "--job-id", job)
    out = jim_env.wait(job)
    assert out["JOB_STATE"] == "FAILED"


def test_kill_is_refused_once_the_grid_job_has_ended_or_names_no_local_job(jim_env):
    job = jim_env.submit("&(executable=/bin/true)(count=2)")
    jim_env.wait(job)
    ended = jim_env.run("kill", f"{job}.0")
    assert ended.returncode == 1 and ended.stdout == ""
    assert f"grid job {job} is DONE: its local jobs can no longer be killed" in ended.stderr

    running = jim_env.submit("&(executable=/bin/sleep)(arguments=120)(count=2)")
    _all_running(jim_env, running, 2)
    nosuch = jim_env.run("kill", f"{running}.2")
    assert nosuch.returncode == 1 and f"grid job {running} has no local job 2 (its local jobs are 0-1)" in nosuch.stderr
    assert [lj["state"] for lj in jim_env.status(running)["localJobs"]] == ["RUNNING", "RUNNING"]
    jim_env.protocol("cancel", "--job-id", running)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("20261125-131500-0c5f9e2a.3", ("20261125-131500-0c5f9e2a", [3])),
        ("20261125-131500-0c5f9e2a.3-7,12", ("20261125-131500-0c5f9e2a", [3, 4, 5, 6, 7, 12])),
        ("20261125-131500-0c5f9e2a.7,3,3", ("20261125-131500-0c5f9e2a", [3, 7])),
    ],
)
def test_selections(text, expected):
    assert parse_selection(text) == expected


@pytest.mark.parametrize(
    "text", ["20261125-131500-0c5f9e2a", "20261125-131500-0c5f9e2a.", "x.-1", "x.1-", "x.a", "x.1:2", "x.0-99999999"]
)
def test_selections_refused(text):
    with pytest.raises(JimError, match="does not name local jobs") as e:
        parse_selection(text)
    assert e.value.gram_error == GramError.BAD_ARGUMENTS
