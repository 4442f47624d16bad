"""make_plan: requirements choose the local queue, the plan records why, the cache persists between calls.

Also ``jim plan --dry-run`` through the real CLI (it records nothing) and the
GRAM error of a job no queue can take.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from jim import config as jconfig
from jim.errors import InvalidAttribute, PlanError
from jim.jobdesc import parse_jdl, parse_json, parse_rsl
from jim.plan import make_plan
from jim.requirements import (
    InvalidRequirement,
    NoEligibleQueue,
    QueueCache,
    choose_queue,
    requirements_of_description,
)

from support.jimcli import write_config

REPO = Path(__file__).resolve().parent.parent
SITE_TOML = Path(__file__).parent / "data" / "requirements" / "site.toml"
SITE = tomllib.loads(SITE_TOML.read_text())
LIMITS = {"site": {"recommended_cpu_per_job": 3600, "max_cpu_per_job": 360000}}


def cfg(tmp_path, resources=True, **extra):
    data = {**LIMITS, **extra}
    if resources:
        data["resources"] = SITE["resources"]
    return jconfig.parse(data, env={"JIM_HOME": str(tmp_path / "home")})


def plan_of(tmp_path, rsl, resources=True, dry_run=True, **extra):
    return make_plan(cfg(tmp_path, resources, **extra), parse_rsl(rsl), dry_run=dry_run)[1]


# --- which queue, for which requirement form ---------------------------------------------------


@pytest.mark.parametrize(
    "reqs, queue",
    [
        ("", "short"),  # none: smallest WallTimeLimit
        ('(requirements="WallTimeLimit=7200")', "gpu"),  # number: capacity >= 7200
        ('(requirements="WallTimeLimit=7200" "Tag=bigmem")', "long"),  # every pair must hold
        ("(requirements=(Tag cvmfs gpu))", "gpu"),  # nested pair, a list of tags: all of them
        ('(requirements="Tag=cvmfs,bigmem")', "long"),
        ('(requirements="Site = ""JIM.TEST.site""")', "short"),  # quoted value
        ('(requirements="WallTimeLimit >= 100000")', "long"),  # ClassAd expression
        ('(requirements="member(""gpu"", Tag) && GPU >= 1")', "gpu"),
        ('(requirements="TARGET.MaxRAM > 5000" "WallTimeLimit=7200")', "gpu"),  # pairs and expression together
        ("(queue=long)", "long"),  # GRAM queue: a requirement on Queue
        ('(queue=long)(requirements="Tag=cvmfs")', "long"),
    ],
)
def test_requirement_forms_choose_the_queue(tmp_path, reqs, queue):
    plan = plan_of(tmp_path, f"&(executable=/bin/true)(count=2){reqs}")
    assert plan.queue == queue
    assert [s.queue for s in plan.slices] == [queue, queue]
    assert plan.attrs["ce"] == ("gpuce" if queue == "gpu" else "localhost")
    assert plan.attrs["queueChosenBy"] == ("requirements" if reqs else "site-preference")
    assert f"Queue {queue} on CE" in plan.explanation


def test_jdl_requirements_expression_and_record(tmp_path):
    config = cfg(tmp_path)
    expr = parse_jdl('[ Executable = "/bin/true"; Requirements = other.WallTimeLimit >= 100000 ]')
    assert make_plan(config, expr, dry_run=True)[1].queue == "long"
    record = parse_jdl('[ Executable = "/bin/true"; Requirements = [ Tag = {"bigmem"}; MaxRAM = 8000 ] ]')
    assert make_plan(config, record, dry_run=True)[1].queue == "long"


def test_json_description_requirements(tmp_path):
    desc = parse_json(json.dumps({"executable": ["/bin/true"], "requirements": [["MaxRAM", "20000"]]}))
    assert make_plan(cfg(tmp_path), desc, dry_run=True)[1].queue == "gpu"


@pytest.mark.parametrize(
    "reqs, message",
    [
        ('(requirements="GPU_Model=A100")', "no queue has parameter GPU_Model"),
        (
            '(requirements="WallTimeLimit=999999")',
            "no queue satisfies WallTimeLimit >= 999999 (largest: long with 172800)",
        ),
        ('(requirements="Tag=tape")', 'no queue satisfies "tape" in Tag'),
        ('(queue=long)(requirements="GPU=1")', "no single queue satisfies all requirements"),
        ("(queue=nosuch)", 'no queue satisfies Queue == "nosuch"'),
    ],
)
def test_no_eligible_queue_names_the_unmet_requirement(tmp_path, reqs, message):
    with pytest.raises(NoEligibleQueue) as e:
        plan_of(tmp_path, f"&(executable=/bin/true){reqs}")
    assert message in e.value.message and "\n" not in e.value.message
    assert e.value.gram_error == 134 and isinstance(e.value, PlanError)


@pytest.mark.parametrize(
    "reqs, message",
    [
        ('(requirements="Tag=a" "Tag=b")', "given twice"),
        ('(queue=long)(requirements="Queue=short")', "queue is given twice"),
        ('(requirements="WallTimeLimit >= ")', "does not parse"),
        ('(requirements="1x=2")', "does not parse"),
        ("(requirements=(Tag))", "(NAME value ...)"),
    ],
)
def test_malformed_requirements(tmp_path, reqs, message):
    with pytest.raises(InvalidRequirement) as e:
        plan_of(tmp_path, f"&(executable=/bin/true){reqs}")
    assert message in e.value.message


def test_without_resources_the_batch_default_or_the_gram_queue(tmp_path):
    plan = plan_of(tmp_path, "&(executable=/bin/true)", resources=False)
    assert plan.queue is None and plan.attrs["queueChosenBy"] == "batch-default" and "ce" not in plan.attrs
    plan = plan_of(tmp_path, "&(executable=/bin/true)(count=2)(queue=batch)", resources=False)
    assert plan.queue == "batch" and [s.queue for s in plan.slices] == ["batch", "batch"]
    assert plan.attrs["queueChosenBy"] == "gram-queue"
    with pytest.raises(NoEligibleQueue, match="no queue has parameter WallTimeLimit"):
        plan_of(tmp_path, '&(executable=/bin/true)(requirements="WallTimeLimit=60")', resources=False)


def test_the_chosen_queue_sizes_montecarlo_jobs(tmp_path):
    rsl = "&(executable=/bin/mc)(jimtype=montecarlo)(events=10000)(cpuperevent=10)"
    short = plan_of(tmp_path, rsl)  # 0.8 x 3600 s / 10 s = 288 events
    assert (short.queue, short.binding, short.attrs["perJob"]) == ("short", "queue-wall-time", 288)
    long = plan_of(tmp_path, rsl + '(requirements="Tag=bigmem")')  # the site's recommended 3600 s
    assert (long.queue, long.binding, long.attrs["perJob"]) == ("long", "site-recommended-cpu", 360)
    assert "requirements" not in short.attrs
    assert long.attrs["requirements"] == "Tag=bigmem"


def test_parameters_make_a_parametric_job_and_other_types_refuse_them(tmp_path):
    config = cfg(tmp_path, resources=False)
    desc = parse_rsl('&(executable=/bin/echo)(arguments="$Parameter")(parameters=3)')
    _, plan, commands = make_plan(config, desc, dry_run=True)
    assert desc.jimtype == "parametric" and commands == [["/bin/echo", "1"]] * 3
    with pytest.raises(InvalidAttribute, match="use jimtype=parametric"):
        make_plan(config, parse_rsl("&(executable=/bin/echo)(jimtype=generic)(parameters=3)"), dry_run=True)
    named = parse_rsl('&(executable=/bin/echo)(arguments="${Parameter.x}")(parameters.x=a b)')
    assert make_plan(config, named, dry_run=True)[2] == [["/bin/echo", "a"], ["/bin/echo", "b"]]


# --- the persistent cache --------------------------------------------------------------------


def test_cache_hit_miss_and_config_change(tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    reqs = requirements_of_description(["WallTimeLimit >= 100000"])
    first = choose_queue(SITE["resources"], reqs, cache=QueueCache(cache_dir))
    assert (first.name, first.cached) == ("long", False)
    # a new process, the same requirements written differently where pairs allow it: one evaluation
    again = choose_queue(
        SITE["resources"], requirements_of_description(["WallTimeLimit >= 100000"]), cache=QueueCache(cache_dir)
    )
    assert (again.name, again.cached) == ("long", True)
    pairs1 = requirements_of_description(["Tag=gpu,cvmfs", "WallTimeLimit=7200"])
    pairs2 = requirements_of_description([["wallTimeLimit", "7200"], ["TAG", "cvmfs", "gpu"]])
    assert pairs1.key == pairs2.key
    assert choose_queue(SITE["resources"], pairs1, cache=QueueCache(cache_dir)).cached is False
    assert choose_queue(SITE["resources"], pairs2, cache=QueueCache(cache_dir)).cached is True
    # the configuration changes: the old entry is not used
    changed = json.loads(json.dumps(SITE["resources"]))
    changed["ce"]["localhost"]["queue"]["long"]["WallTimeLimit"] = 150000
    moved = choose_queue(changed, reqs, cache=QueueCache(cache_dir))
    assert (moved.name, moved.cached) == ("long", False)
    data = json.loads((cache_dir / "requirements.json").read_text())
    assert data["v"] == 2 and len(data["entries"]) == 3
    assert oct((cache_dir / "requirements.json").stat().st_mode & 0o777) == "0o600"


def test_failures_are_not_cached(tmp_path):
    reqs = requirements_of_description(["GPU=9"])
    for _ in range(2):
        with pytest.raises(NoEligibleQueue):
            choose_queue(SITE["resources"], reqs, cache=QueueCache(tmp_path))
    assert not (tmp_path / "requirements.json").exists()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b"[]",
        b'{"v": 1, "entries": []}',
        b'{"v": 99, "entries": {}}',
        b"\xff\xfe",
        b'{"v": 1, "entries": {"k": {"queues": [1], "at": 0}}}',
    ],
)
def test_corrupt_cache_is_ignored_and_replaced(tmp_path, content):
    (tmp_path / "requirements.json").write_bytes(content)
    reqs = requirements_of_description(["WallTimeLimit >= 100000"])
    assert choose_queue(SITE["resources"], reqs, cache=QueueCache(tmp_path)).name == "long"
    assert choose_queue(SITE["resources"], reqs, cache=QueueCache(tmp_path)).cached is True


def test_cache_entry_naming_a_vanished_queue_is_a_miss(tmp_path):
    reqs = requirements_of_description(["WallTimeLimit >= 100000"])
    choose_queue(SITE["resources"], reqs, cache=QueueCache(tmp_path))
    path = tmp_path / "requirements.json"
    path.write_text(path.read_text().replace("localhost/long", "localhost/gone"))
    choice = choose_queue(SITE["resources"], reqs, cache=QueueCache(tmp_path))
    assert (choice.name, choice.cached) == ("long", False)


def test_unwritable_cache_is_not_fatal(tmp_path):
    reqs = requirements_of_description(["WallTimeLimit >= 100000"])
    missing = tmp_path / "no" / "such" / "dir"
    assert choose_queue(SITE["resources"], reqs, cache=QueueCache(missing)).name == "long"
    assert not missing.exists()


def test_cache_is_bounded(tmp_path):
    cache = QueueCache(tmp_path, max_entries=3)
    for n in range(6):
        choose_queue(SITE["resources"], requirements_of_description([f"MaxRAM={n}"]), cache=cache)
        time.sleep(0.002)
    entries = json.loads((tmp_path / "requirements.json").read_text())["entries"]
    assert len(entries) == 3


def test_submit_writes_the_cache_and_dry_run_does_not(tmp_path):
    config = cfg(tmp_path)
    rsl = '&(executable=/bin/true)(requirements="WallTimeLimit >= 100000")'
    make_plan(config, parse_rsl(rsl), dry_run=True)
    assert not (tmp_path / "home").exists()
    make_plan(config, parse_rsl(rsl), job_id="20260101-000000-abcdef")
    assert (tmp_path / "home" / "cache" / "requirements.json").is_file()


def test_a_cache_hit_needs_no_classad_import(tmp_path):
    """The point of persisting: the next submit with the same expression skips the ClassAd machinery."""
    code = (
        "import sys, time, tomllib\n"
        "t0 = time.perf_counter()\n"
        "from jim.requirements import QueueCache, choose_queue, requirements_of_description\n"
        f"res = tomllib.load(open({str(SITE_TOML)!r}, 'rb'))['resources']\n"
        "r = requirements_of_description(['WallTimeLimit >= 100000 && member(\"bigmem\", Tag)'])\n"
        f"c = choose_queue(res, r, cache=QueueCache({str(tmp_path)!r}))\n"
        "print(c.name, c.cached, 'classad2' in sys.modules or 'classad' in sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
        for _ in range(2)
    ]
    assert runs == [["long", "False", "True"], ["long", "True", "False"]]


# --- jim plan --dry-run, and submit, through the CLI -------------------------------------------

RESOURCES = SITE_TOML.read_text().split("[resources]", 1)[1]


def test_plan_dry_run_json_records_nothing(jim_env):
    write_config(jim_env, "[resources]" + RESOURCES)
    proc = jim_env.run(
        "plan",
        "--dry-run",
        "--json",
        "--rsl",
        '&(executable=/bin/mc)(jimtype=montecarlo)(events=1000)(cpuperevent=20)(requirements="Tag=bigmem")',
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["dryRun"] is True and data["localJobs"] == 6 and data["binding"] == "site-recommended-cpu"
    assert data["queue"] == "long" and data["plan"]["ce"] == "localhost"
    assert data["timeLimit"] == "36000" and data["timeLimitBy"] == "site-max-cpu"  # the test config's
    assert [j["queue"] for j in data["jobs"]] == ["long"] * 6
    assert data["jobs"][0]["slice"]["firstEvent"] == 1 and data["jobs"][0]["estSeconds"] == "3340"
    assert data["jobs"][0]["argv"] == ["/bin/mc"] and data["jobs"][0]["env"]["JIM_EVENTS"] == "167"
    assert not (jim_env.home / "db").exists() and not (jim_env.home / "cache" / "requirements.json").exists()
    text = jim_env.run(
        "plan", "--dry-run", "--rsl", "&(executable=/bin/mc)(jimtype=montecarlo)(events=1000)(cpuperevent=20)"
    ).stdout
    assert "binding limit: queue-wall-time" in text and "queue: short on CE localhost" in text
    assert "time limit per local job: 2880 s (queue-wall-time)" in text and "nothing recorded" in text


def test_submit_without_eligible_queue_is_a_gram_error_and_records_nothing(jim_env):
    write_config(jim_env, "[resources]" + RESOURCES)
    out = jim_env.protocol("submit", "--rsl", '&(executable=/bin/true)(requirements="WallTimeLimit >= 999999")')
    assert out["ERROR"] == "134" and out["_rc"] == "1"
    assert out["MESSAGE"].startswith("no queue satisfies WallTimeLimit >= 999999")
    assert jim_env.job_ids() == []


def test_submit_records_the_queue_and_why(jim_env):
    write_config(jim_env, "[resources]" + RESOURCES)
    job = jim_env.submit('&(executable=/bin/true)(count=2)(requirements="Tag=bigmem")')
    st = jim_env.status(job)
    assert st["plan"]["queue"] == "long" and st["plan"]["ce"] == "localhost"
    assert st["plan"]["queueChosenBy"] == "requirements" and st["plan"]["requirements"] == "Tag=bigmem"
    assert "Queue long on CE localhost (for Tag=bigmem; 1 eligible)" in st["plan"]["explanation"]
    assert [lj["queue"] for lj in st["localJobs"]] == ["long", "long"]
    assert (jim_env.home / "cache" / "requirements.json").is_file()
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
