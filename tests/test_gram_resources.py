"""GRAM's resource attributes (``maxmemory``, ``minmemory``, ``maxcputime``, ``project``,
``hostcount``): checked at submit with GRAM's own error numbers, as the stock job manager's failure
tests expect them (gram/jobmanager/source/test/jobmanager/failure_test), converted once into jim's
units, and handed by the worker to the batch system (the adapters' golden tests show each mapping;
here a grid job goes through the real CLI, worker and a fake Slurm whose sbatch is recorded)."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from jim import background, worker
from jim.adapters.model import Limits
from jim.config import parse
from jim.db import Database
from jim.errors import DescriptionError, GramError
from jim.jobdesc import MAX_MEMORY_MB, parse_rsl
from jim.paths import Home
from jim.site import Site
from jim.states import LocalState
from jim.submit import submit

from fake_sched import BIN, FakeSched
from support.fake_adapter import FakeAdapter
from support.jimcli import FAST_CONFIG

EXE = "&(executable=/bin/true)"

#: The stock failure tests' descriptions, each with the number the stock job manager answers.
GCT_FAILURES = [
    ("(max_memory=-1)", GramError.INVALID_MAX_MEMORY),
    ("(min_memory=-1)", GramError.INVALID_MIN_MEMORY),
    ("(maxcputime=-1)", GramError.INVALID_MAX_CPU_TIME),
    ("(max_memory=(1))", GramError.RSL_MAX_MEMORY),
    ("(min_memory=(1))", GramError.RSL_MIN_MEMORY),
    ("(maxcputime=(1))", GramError.RSL_MAX_CPU_TIME),
    ("(project=(a list))", GramError.RSL_PROJECT),
    ("(host_count=asdf)", GramError.INVALID_HOST_COUNT),
    ("(host_count=-1)", GramError.INVALID_HOST_COUNT),
    ("(host_count=(host_count))", GramError.RSL_HOST_COUNT),
]

#: More malformed values: not whole numbers, zero, out of bounds, several words, hostile names.
MALFORMED = [
    ("(maxmemory=abc)", GramError.INVALID_MAX_MEMORY),
    ("(maxmemory=2048.5)", GramError.INVALID_MAX_MEMORY),
    ("(maxmemory=0)", GramError.INVALID_MAX_MEMORY),
    ("(maxmemory=2GB)", GramError.INVALID_MAX_MEMORY),
    ('(maxmemory="+5")', GramError.INVALID_MAX_MEMORY),
    (f"(maxmemory={MAX_MEMORY_MB + 1})", GramError.INVALID_MAX_MEMORY),
    (f"(maxmemory={'9' * 70})", GramError.INVALID_MAX_MEMORY),
    ("(maxmemory=1 2)", GramError.RSL_MAX_MEMORY),
    ("(minmemory=0)", GramError.INVALID_MIN_MEMORY),
    ("(minmemory=4096)(maxmemory=2048)", GramError.INVALID_MIN_MEMORY),
    ("(maxcputime=1.5)", GramError.INVALID_MAX_CPU_TIME),
    ("(maxcputime=0)", GramError.INVALID_MAX_CPU_TIME),
    ("(maxcputime=99999999999)", GramError.INVALID_MAX_CPU_TIME),
    ("(maxcputime=1 2)", GramError.RSL_MAX_CPU_TIME),
    ("(project=two words)", GramError.RSL_PROJECT),
    ('(project="")', GramError.INVALID_PROJECT),
    ("(project=-A)", GramError.INVALID_PROJECT),
    ("(project=.hidden)", GramError.INVALID_PROJECT),
    ('(project="d0;rm -rf /")', GramError.INVALID_PROJECT),
    ('(project="d0 --mem=1")', GramError.INVALID_PROJECT),
    ('(project="$(HOME)")', GramError.INVALID_PROJECT),
    ('(project="a\nb")', GramError.INVALID_PROJECT),
    (f"(project={'p' * 65})", GramError.INVALID_PROJECT),
    ("(hostcount=0)", GramError.INVALID_HOST_COUNT),
]


def test_the_numbers_are_grams():
    """globus_gram_protocol_constants.h's values."""
    assert (GramError.INVALID_HOST_COUNT, GramError.INVALID_PROJECT) == (35, 38)
    assert (GramError.RSL_HOST_COUNT, GramError.RSL_PROJECT) == (56, 61)
    assert (GramError.RSL_MIN_MEMORY, GramError.RSL_MAX_MEMORY) == (84, 85)
    assert (GramError.INVALID_MIN_MEMORY, GramError.INVALID_MAX_MEMORY) == (86, 87)
    assert (GramError.RSL_MAX_CPU_TIME, GramError.INVALID_MAX_CPU_TIME) == (103, 104)


@pytest.mark.parametrize("rsl,code", GCT_FAILURES + MALFORMED)
def test_malformed_resources_in_process(rsl, code):
    with pytest.raises(DescriptionError) as e:
        parse_rsl(EXE + rsl).check_common()
    assert e.value.gram_error == code, e.value.message
    assert "\n" not in e.value.message and len(e.value.message) < 400


def _refused(jim_env, rsl: str, code: int) -> None:
    jobs = jim_env.job_ids()
    out = jim_env.protocol("submit", "--rsl", rsl)
    assert out.get("ERROR") == str(code), (rsl, out)
    assert set(out) == {"ERROR", "MESSAGE", "_rc", "_stderr"}, out
    assert out["MESSAGE"] and out["_rc"] == "1" and "Traceback" not in out["_stderr"]
    assert jim_env.job_ids() == jobs  # nothing recorded


@pytest.mark.parametrize("rsl,code", GCT_FAILURES)
def test_gct_failure_descriptions_through_submit(jim_env, rsl, code):
    _refused(jim_env, EXE + rsl, code)


def test_malformed_resources_through_submit(jim_env):
    for rsl, code in MALFORMED[::3]:
        _refused(jim_env, EXE + rsl, code)


def test_json_descriptions_answer_the_same_numbers(jim_env, tmp_path):
    cases = [
        ({"executable": "/bin/true", "maxmemory": "-1"}, GramError.INVALID_MAX_MEMORY),
        ({"executable": "/bin/true", "maxmemory": [["1"]]}, GramError.RSL_MAX_MEMORY),
        ({"executable": "/bin/true", "max_cpu_time": "x"}, GramError.INVALID_MAX_CPU_TIME),
        ({"executable": "/bin/true", "project": "a b"}, GramError.INVALID_PROJECT),
        ({"executable": "/bin/true", "project": ["a", "b"]}, GramError.RSL_PROJECT),
    ]
    for i, (data, code) in enumerate(cases):
        f = tmp_path / f"d{i}.json"
        f.write_text(json.dumps(data))
        jobs = jim_env.job_ids()
        out = jim_env.protocol("submit", "--description", str(f))
        assert out.get("ERROR") == str(code), (data, out)
        assert "\n" not in out["MESSAGE"] and "Traceback" not in out["_stderr"]
        assert jim_env.job_ids() == jobs


def test_gram_units_become_jims_once():
    """MB stay MB, minutes become seconds; only what is given; a project the batch system may not
    know (GRAM's failure test ``project=bogus``) is well formed: the batch system decides."""
    rsl = "(maxwalltime=120)(max_memory=2048)(minmemory= 512 )(max_cpu_time=90)(project=d0.mc_2-x)(hostcount=2)"
    assert parse_rsl(EXE + rsl).resource_limits() == {
        "wall_seconds": 7200,
        "memory_mb": 2048,
        "min_memory_mb": 512,
        "cpu_seconds": 5400,
        "project": "d0.mc_2-x",
    }
    assert parse_rsl(EXE).resource_limits() == {}
    assert parse_rsl(EXE + "(project=bogus)").resource_limits() == {"project": "bogus"}


def test_a_grid_jobs_resources_reach_sbatch(jim_env, tmp_path):
    """Through the real CLI and worker: the fake Slurm's sbatch, recorded by a stand-in in front of
    it on PATH, is given the grid job's memory and project (over the site's account)."""
    fake = FakeSched(tmp_path / "fake-sched")
    shim = tmp_path / "shim"
    shim.mkdir()
    record = tmp_path / "sbatch-argv.jsonl"
    sbatch = shim / "sbatch"
    sbatch.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(record)!r}, 'a') as f:\n"
        "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"os.execv({str(BIN / 'sbatch')!r}, [{str(BIN / 'sbatch')!r}, *sys.argv[1:]])\n"
    )
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IXUSR)
    env = fake.env(jim_env.env)
    env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
    jim_env.env.update(env)
    jim_env.config.write_text(
        FAST_CONFIG
        + f"""
[batch]
adapter = "slurm"
partition = "debug"
account = "cms"
cache_interval = 0.3
python = "{sys.executable}"
"""
    )
    job = jim_env.submit("&(executable=/bin/true)(count=2)(maxwalltime=5)(maxmemory=2048)(maxcputime=90)(project=d0)")
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert calls and all("--mem=2048" in argv and "--account=d0" in argv for argv in calls), calls
    assert not any("--account=cms" in argv for argv in calls) and all("--time=5" in argv for argv in calls)


def _spied_worker(tmp_path, monkeypatch, rsl: str):
    """A grid job recorded by the real submit (no worker started), and an in-memory batch system
    that keeps the limits of every chunk it is given."""
    config = parse({"monitor": {"interval": 0.01}}, env={"JIM_HOME": str(tmp_path / "home")})
    job_id = submit(Site(config), parse_rsl(rsl), start_background=False)
    monkeypatch.setattr(background, "start_monitor", lambda home: None)
    db = Database(Home(config.home))
    fake = FakeAdapter(db.home)
    seen: list[Limits] = []
    submit_group = fake.submit_group

    def spy(chunk, group):
        seen.append(chunk.limits)
        return submit_group(chunk, group)

    monkeypatch.setattr(fake, "submit_group", spy)
    return config, db, job_id, fake, seen


def test_the_worker_hands_the_converted_limits_to_the_adapter(tmp_path, monkeypatch):
    config, db, job_id, fake, seen = _spied_worker(
        tmp_path, monkeypatch, EXE + "(count=2)(maxwalltime=10)(maxmemory=2048)(maxcputime=90)(project=d0)"
    )
    worker.submit_pending(Site(config, db=db, adapter=fake), job_id)
    assert seen == [Limits(wall_seconds=600, memory_mb=2048, cpu_seconds=5400, project="d0")]
    assert {lj.state for lj in db.read(job_id).local_jobs()} == {LocalState.QUEUED}


def test_a_record_from_before_the_checks_is_submitted_without_its_bad_limits(tmp_path, monkeypatch):
    """A grid job recorded by a jim that did not check these attributes yet (``maxmemory=2GB``):
    its local jobs are still submitted, with the wall time, and without the limits jim cannot read."""
    config, db, job_id, fake, seen = _spied_worker(
        tmp_path, monkeypatch, EXE + "(count=2)(maxwalltime=10)(maxmemory=2048)(project=d0)"
    )
    with db.update(job_id) as rec:
        for attr in rec.root.find("description").findall("attribute"):
            if attr.get("name") == "maxmemory":
                attr[0].text = "2GB"
    worker.submit_pending(Site(config, db=db, adapter=fake), job_id)
    assert seen == [Limits(wall_seconds=600)]
    assert {lj.state for lj in db.read(job_id).local_jobs()} == {LocalState.QUEUED}
