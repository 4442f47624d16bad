"""``jim advertise``: the site's ClassAd printed (old syntax, JSON) and sent to a
collector (the fake collector of ``condor_fake.py``; the real bindings for the
unreachable case), and the adapters' free slots it reports."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from jim.adapters.fork import ForkAdapter
from jim.adapters.slurm import SlurmAdapter
from jim.paths import Home

import condor_fake
from support.env import require_service
from support.jimcli import FAST_CONFIG
from support.services import SLURM_STATE, slurm_env

RESOURCES = """
[site]
name = "JIM.TEST.site"

[resources]
Site = "JIM.TEST.site"
Tag = ["cvmfs"]

[resources.ce.localhost]
MaxCPUTime = 86400

[resources.ce.localhost.queue.short]
WallTimeLimit = 3600
MaxRAM = 4096

[resources.ce.localhost.queue.long]
WallTimeLimit = inf
Tag = ["bigmem"]
Comment = "quotes \\" and\\nnewlines"
"""


def parse_old(text: str):
    """One ``Name = value`` per line, values in ClassAd syntax: read back exactly as a new-syntax record."""
    import classad2

    return classad2.parseOne("[" + ";".join(text.splitlines()) + "]", classad2.ParserType.New)


@pytest.fixture
def ajim(jim_env, tmp_path):
    jim_env.fake_dir = tmp_path / "condor-fake"
    jim_env.env = condor_fake.enable(jim_env.env, jim_env.fake_dir)
    base = FAST_CONFIG.replace("[site]\n", '[site]\nname = "JIM.TEST.site"\n')
    jim_env.config.write_text(base + RESOURCES.replace('[site]\nname = "JIM.TEST.site"\n', ""))
    return jim_env


def test_prints_the_site_as_an_old_classad(ajim):
    proc = ajim.run("advertise")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines == sorted(lines, key=str.lower) and all(" = " in line for line in lines)
    ad = parse_old(proc.stdout)
    assert ad["MyType"] == "Machine" and ad["TargetType"] == "Job" and ad.eval("Requirements") is True
    assert ad["Name"] == "JIM.TEST.site" and ad["JimSite"] == "JIM.TEST.site"
    assert ad["JimBatchSystem"] == "fork" and isinstance(ad["JimFreeSlots"], int)
    assert {"generic", "montecarlo", "reprocessing", "concat", "parametric"} <= set(ad.eval("JimJobTypes"))
    assert list(ad.eval("JimCEs")) == ["localhost"] and list(ad.eval("JimQueues")) == ["short", "long"]
    short, long = ad.eval("JimQueueParameters")
    assert (short["CE"], short["Queue"], short["WallTimeLimit"], short["MaxRAM"], short["MaxCPUTime"]) == (
        "localhost",
        "short",
        3600,
        4096,
        86400,
    )
    assert list(long.eval("Tag")) == ["cvmfs", "bigmem"] and long["Comment"] == 'quotes " and\nnewlines'
    assert long.eval("WallTimeLimit") == float("inf")
    assert ad["JimMaxLocalJobs"] == 500 and ad["JimMaxCPUPerJob"] == 36000.0


def test_prints_json(ajim):
    proc = ajim.run("advertise", "--json", "--name", "jim@gk.example.org")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["Name"] == "jim@gk.example.org" and data["MyType"] == "Machine"
    assert data["JimQueues"] == ["short", "long"]
    assert data["JimQueueParameters"][0]["WallTimeLimit"] == 3600
    assert data["JimQueueParameters"][1]["Tag"] == ["cvmfs", "bigmem"]


def test_broken_job_types_are_left_out(ajim, tmp_path):
    """A plug-in whose entry point cannot load is not advertised (the others are)."""
    site = tmp_path / "plugins"
    dist = site / "jim_broken_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jim-broken-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[jim.handlers]\nbrokentype = jim_no_such_module:Handler\n")
    env = {"PYTHONPATH": f"{site}{os.pathsep}{ajim.env['PYTHONPATH']}"}
    assert "BROKEN" in ajim.run("handlers", env=env).stdout  # it is installed, and broken
    data = json.loads(ajim.run("advertise", "--json", env=env).stdout)
    assert "brokentype" not in data["JimJobTypes"] and "generic" in data["JimJobTypes"]


def test_sends_to_the_collector_given(ajim):
    proc = ajim.run("advertise", "--collector", "cm.example.org:9618")
    assert proc.returncode == 0, proc.stderr
    assert "advertised JIM.TEST.site (2 queue(s)" in proc.stderr and "to cm.example.org:9618" in proc.stderr
    sent = condor_fake.FakeCollector(ajim.fake_dir).advertised()
    assert len(sent) == 1 and sent[0]["pool"] == "cm.example.org:9618"
    assert sent[0]["command"] == "UPDATE_AD_GENERIC"
    ad = sent[0]["ad"]
    assert ad["MyType"] == '"Machine"' and ad["Name"] == '"JIM.TEST.site"'
    assert parse_old(proc.stdout)["Name"] == "JIM.TEST.site"  # what was sent is printed too


def test_sends_to_the_configured_collector(ajim):
    ajim.config.write_text(
        ajim.config.read_text() + '\n[advertise]\ncollector = "cm.site.org"\ncontact = "gk.site.org/jobmanager-jim"\n'
    )
    proc = ajim.run("advertise", "--json")
    assert proc.returncode == 0, proc.stderr
    sent = condor_fake.FakeCollector(ajim.fake_dir).advertised()
    assert [s["pool"] for s in sent] == ["cm.site.org"]
    assert json.loads(proc.stdout)["JimContact"] == "gk.site.org/jobmanager-jim"


def test_an_unreachable_collector_is_one_line_and_exit_1(ajim):
    condor_fake.set_scenario(ajim.fake_dir, collector_error="Failed to advertise to collector.")
    proc = ajim.run("advertise", "--collector", "cm.example.org")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "jim: error: cannot advertise to the collector cm.example.org: Failed to advertise to collector."
    ]


def test_an_unreachable_collector_with_the_real_bindings(jim_env):
    """No fake: the real htcondor2.Collector, and nothing listens on port 1."""
    proc = jim_env.run("advertise", "--collector", "127.0.0.1:1")
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jim: error: cannot advertise to the collector 127.0.0.1:1: ")


def test_unknown_advertise_key_is_a_config_error(jim_env):
    jim_env.config.write_text(FAST_CONFIG + '\n[advertise]\ncolector = "x"\n')
    proc = jim_env.run("advertise")
    assert proc.returncode == 1 and "unknown key 'colector'" in proc.stderr


# ---------------------------------------------------------------------------
# free slots
# ---------------------------------------------------------------------------


def test_condor_free_slots_in_the_ad(ajim):
    ajim.config.write_text(ajim.config.read_text() + f'\n[batch]\nadapter = "condor"\npython = "{sys.executable}"\n')
    condor_fake.set_scenario(
        ajim.fake_dir,
        slots=[
            {"Name": "slot1@wn1", "Cpus": 8, "State": "Unclaimed", "Activity": "Idle"},
            {"Name": "slot1@wn2", "Cpus": 8, "State": "Claimed", "Activity": "Busy"},
        ],
    )
    data = json.loads(ajim.run("advertise", "--json").stdout)
    assert data["JimBatchSystem"] == "condor" and data["JimFreeSlots"] == 8
    condor_fake.set_scenario(ajim.fake_dir, collector_error="Failed communication with collector.")
    proc = ajim.run("advertise", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["JimFreeSlots"] is None  # unknown, not an error


def test_fork_free_slots_count_running_local_jobs(jim_env):
    jim_env.config.write_text(jim_env.config.read_text() + '\n[batch]\nadapter = "fork"\ncores = 8\n')
    adapter = ForkAdapter(Home(jim_env.home).ensure(), {"cores": 8})  # (the core slots no local job holds)
    before = adapter.free_slots()
    assert before == 8
    job = jim_env.submit("&(executable=/bin/sleep)(arguments=60)(count=3)")
    import time

    deadline = time.monotonic() + 300  # (a bound for a hung run, not a time goal: a loaded machine is slower)
    while time.monotonic() < deadline:
        if sum(lj["state"] == "RUNNING" for lj in jim_env.status(job)["localJobs"]) == 3:
            break
        time.sleep(0.2)
    assert _settled(adapter.free_slots, before - 3, within=120) == before - 3
    jim_env.protocol("cancel", "--job-id", job)
    # (cancel answers once every wrapper wrote its exit file; the processes end a moment later)
    assert _settled(adapter.free_slots, before, within=120) == before


def _settled(count, want: int, within: float = 10.0) -> int:
    """``count()`` once it equals ``want``, or its last value after ``within`` seconds."""
    import time

    deadline = time.monotonic() + within
    got = count()
    while got != want and time.monotonic() < deadline:
        time.sleep(0.1)
        got = count()
    return got


def _shim(tmp_path: Path, script: str) -> dict[str, str]:
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    sinfo = shim / "sinfo"
    sinfo.write_text("#!/bin/sh\n" + script)
    sinfo.chmod(sinfo.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{shim}:{os.environ['PATH']}"}


def test_slurm_free_slots_from_sinfo(tmp_path, monkeypatch):

    a = SlurmAdapter(Home(tmp_path / "h").ensure(), {"partition": "debug", "max_array_size": 1001})
    for k, v in _shim(tmp_path, 'echo "$@" > "$(dirname "$0")/argv"\necho 3/29/0/32\n').items():
        monkeypatch.setenv(k, v)
    assert a.free_slots() == 29
    assert (tmp_path / "shim" / "argv").read_text().split() == ["-h", "-o", "%C", "-p", "debug"]
    for k, v in _shim(
        tmp_path, "echo 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit 1\n"
    ).items():
        monkeypatch.setenv(k, v)
    assert a.free_slots() is None


@pytest.mark.slurm
def test_slurm_free_slots_on_the_test_cluster(tmp_path, monkeypatch):
    require_service(slurm_env() is not None, "the slurm batch system")
    monkeypatch.setenv("SLURM_CONF", str(SLURM_STATE / "slurm.conf"))
    free = SlurmAdapter(Home(tmp_path).ensure(), {"partition": "debug"}).free_slots()
    assert isinstance(free, int) and 0 <= free <= 32
    assert SlurmAdapter(Home(tmp_path).ensure(), {"partition": "no-such-partition"}).free_slots() is None
