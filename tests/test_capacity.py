"""What the site reports is the batch system's: :meth:`Adapter.capacity` from each batch system's
one bulk query, parsed from real recorded outputs (``tests/data/*/capacity-*.out``, captured from
the test services) and asked of the running services, cached a minute as a site fact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from jim.adapters import capacity
from jim.adapters.cache import CAPACITY_MAX_AGE
from jim.adapters.condor import CondorAdapter
from jim.adapters.fork import ForkAdapter, host_capacity
from jim.adapters.model import Capacity
from jim.adapters.pbs import PbsAdapter
from jim.adapters.sge import SgeAdapter
from jim.adapters.slurm import SlurmAdapter
from jim.paths import Home

import condor_fake
from support.env import DATA, require_service
from support.jimcli import FAST_CONFIG
from support.services import PBS_BIN, SLURM_STATE, pbs_available, sge_env, sge_service_env, slurm_env


def recorded(system: str, name: str) -> str:
    return (DATA / system / f"capacity-{name}.out").read_text()


# ---------------------------------------------------------------------------
# parsing: the real outputs of the test services, and the forms other sites print
# ---------------------------------------------------------------------------


def test_slurm_sinfo_recorded():
    # one node, listed once per partition (debug, long): counted once
    assert capacity.parse_sinfo(recorded("slurm", "sinfo-idle")) == Capacity(32, 32, 32, 1000, 0, 0)
    assert capacity.parse_sinfo(recorded("slurm", "sinfo-busy")) == Capacity(32, 32, 29, 1000, 0, 0)


def test_slurm_sinfo_nodes_gpus_and_drained():
    text = (
        "wn1|8/56/0/64|257000|gpu:a100:4(S:0-1),shard:8\n"
        "wn2|0/0/64/64|257000|gpu:a100:4(S:0-1)\n"  # drained: its CPUs are "other"
        "wn3|0/32/0/32|128000|(null)\n"
        "wn1|8/56/0/64|257000|gpu:a100:4(S:0-1),shard:8\n"  # in a second partition
    )
    assert capacity.parse_sinfo(text) == Capacity(160, 64, 88, 257000, 8, 4)
    assert capacity.parse_sinfo("") is None  # no node (an unknown partition): unknown
    with pytest.raises(ValueError):
        capacity.parse_sinfo("wn1|8/56/0|257000|(null)\n")


def test_grid_engine_qhost_recorded():
    # the host has 2 CPUs but its queue instance 32 slots: the slots are what Grid Engine hands out
    assert capacity.parse_qhost(recorded("sge", "qhost-idle")) == Capacity(32, 32, 32, 24064, 0, 0)
    assert capacity.parse_qhost(recorded("sge", "qhost-busy")) == Capacity(32, 32, 31, 24064, 0, 0)
    assert capacity.parse_qhost(recorded("sge", "qhost-idle"), "long.q") is None


def test_grid_engine_qhost_gpus_and_unusable_instances():
    text = (
        "HOSTNAME                ARCH         NCPU NSOC NCOR NTHR  LOAD  MEMTOT  MEMUSE  SWAPTO  SWAPUS\n"
        "----------------------------------------------------------------------------------------------\n"
        "global                  -               -    -    -    -     -       -       -       -       -\n"
        "wn1                     lx-amd64       16    2    8   16  3.00   62.8G    9.1G    4.0G     0.0\n"
        "   all.q                BIP   1/4/16        \n"
        "    Host Resource(s):   hc:gpu=2.000000\n"
        "wn2                     lx-amd64       16    2    8   16  0.00   62.8G    1.1G    4.0G     0.0\n"
        "   all.q                BIP   0/0/16        d\n"
        "   short.q              BIP   0/0/8         \n"
    )
    got = capacity.parse_qhost(text.replace("    Host Resource(s):   hc:gpu", "   hc:gpu"))
    assert got == Capacity(32, 16, 11, 64307, 2, 2)  # wn2's all.q is disabled: no free slot there
    assert capacity.parse_qhost(text, "short.q") == Capacity(8, 8, 8, 64307, 0, 0)
    with pytest.raises(ValueError):
        capacity.parse_qhost("error: commlib error: got select error (Connection refused)\n")


def test_pbs_pbsnodes_recorded():
    # Slurm's Torque wrappers: "mixed" lists no jobs, so its free cores are unknown, not guessed
    assert capacity.parse_pbsnodes(recorded("pbs", "pbsnodes-idle")) == Capacity(32, 32, 32, 1000, 0, 0)
    assert capacity.parse_pbsnodes(recorded("pbs", "pbsnodes-busy")) == Capacity(32, 32, None, 1000, 0, 0)


def test_pbs_torque_and_pbs_pro_node_lists():
    torque = (
        "wn1\n     state = free\n     np = 8\n     ntype = cluster\n     jobs = 0/12.srv, 1/13.srv\n"
        "     status = opsys=linux,physmem=16318508kb,availmem=20000000kb\n     gpus = 2\n\n"
        "wn2\n     state = down,offline\n     np = 8\n     status = physmem=16318508kb\n\n"
    )
    assert capacity.parse_pbsnodes(torque) == Capacity(16, 8, 6, 15936, 2, 2)
    pro = (
        "cn01\n     Mom = cn01\n     state = free\n     resources_available.ncpus = 48\n"
        "     resources_available.mem = 196608000kb\n     resources_available.ngpus = 4\n"
        "     resources_assigned.ncpus = 12\n\n"
        "cn02\n     state = job-busy\n     resources_available.ncpus = 48\n     resources_assigned.ncpus = 48\n"
    )
    assert capacity.parse_pbsnodes(pro) == Capacity(96, 48, 36, 192000, 4, 4)


def test_condor_slots():
    slots = [
        {
            "Machine": "a",
            "Cpus": 10,
            "TotalCpus": 16,
            "TotalMemory": 64000,
            "TotalGPUs": 2,
            "SlotType": "Partitionable",
        },
        {"Machine": "a", "Cpus": 6, "TotalCpus": 16, "TotalMemory": 64000, "SlotType": "Dynamic", "State": "Claimed"},
        {"Machine": "b", "Cpus": 4, "TotalCpus": 8, "TotalMemory": 32000, "State": "Unclaimed", "Activity": "Idle"},
        {"Machine": "b", "Cpus": 4, "TotalCpus": 8, "TotalMemory": 32000, "State": "Claimed", "Activity": "Busy"},
    ]
    assert capacity.from_slots(slots) == Capacity(24, 16, 14, 64000, 2, 2)
    assert capacity.from_slots([]) is None


def test_memory_units_and_hostile_figures():
    assert [capacity.memory_mb(t) for t in ("1000", "23.5G", "671.4M", "16384kb", "2TiB", "-")] == [
        1000, 24064, 671, 16, 2 << 20, None,
    ]  # fmt: skip
    for bad in ("12 apples", "1e99G"):
        with pytest.raises(ValueError):
            capacity.memory_mb(bad)
    with pytest.raises(ValueError):
        capacity.parse_sinfo(f"wn1|0/{10**30}/0/{10**30}|1000|(null)\n")
    assert (
        capacity.from_json({"cores": -1, "node_cores": 1, "free_cores": 1, "memory_mb": 1, "gpus": 0, "node_gpus": 0})
        is None
    )
    assert capacity.from_json("garbage") is None


# ---------------------------------------------------------------------------
# the cache: one query a minute for every process of the user; a failure is cached too
# ---------------------------------------------------------------------------


def test_capacity_is_a_site_fact_asked_once_a_minute(tmp_path, monkeypatch):
    adapter = ForkAdapter(Home(tmp_path).ensure(), {})
    asked: list[int] = []

    def ask() -> Capacity | None:
        asked.append(1)
        return Capacity(7, 7, 3, 1024)

    monkeypatch.setattr(adapter, "ask_capacity", ask)
    assert adapter.capacity() == Capacity(7, 7, 3, 1024) == adapter.capacity()
    other = ForkAdapter(Home(tmp_path), {})  # another process of the same user: the file answers
    monkeypatch.setattr(other, "ask_capacity", ask)
    assert other.capacity() == Capacity(7, 7, 3, 1024) and len(asked) == 1
    path = tmp_path / "cache" / "fork-capacity.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "at": data["at"] - CAPACITY_MAX_AGE - 1}))
    assert adapter.capacity() == Capacity(7, 7, 3, 1024) and len(asked) == 2
    at, last = adapter.cache.last_capacity() or (0, None)
    assert last == Capacity(7, 7, 3, 1024) and abs(at - time.time()) < 60

    slurm = SlurmAdapter(Home(tmp_path), {"max_array_size": 1001})
    monkeypatch.setattr(slurm, "ask_capacity", lambda: asked.append(1))
    assert slurm.capacity() is None and slurm.capacity() is None and len(asked) == 3  # unknown, asked once


def test_a_failing_query_is_unknown(tmp_path, monkeypatch):
    shim = tmp_path / "bin"
    shim.mkdir()
    for name in ("sinfo", "qhost", "pbsnodes"):
        (shim / name).write_text("#!/bin/sh\necho 'Unable to contact the controller' >&2\nexit 1\n")
        (shim / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    home = Home(tmp_path / "h").ensure()
    assert SlurmAdapter(home, {"max_array_size": 1001}).capacity() is None
    assert SgeAdapter(home, {}).capacity() is None
    assert PbsAdapter(home, {"flavour": "torque", "bin_dir": str(shim)}).capacity() is None


# ---------------------------------------------------------------------------
# the running services: capacity() says what the batch system's own command shows
# ---------------------------------------------------------------------------


def _agree(ask, show, within: float = 60.0):
    """``ask()`` once it equals ``show()`` (other tests start and end jobs meanwhile); the last pair."""
    deadline = time.monotonic() + within
    while True:
        got, want = ask(), show()
        if got == want or time.monotonic() > deadline:
            return got, want
        time.sleep(0.5)


@pytest.mark.slurm
def test_slurm_capacity_on_the_test_cluster(tmp_path, monkeypatch):
    env = slurm_env()
    require_service(env is not None, "the slurm batch system")
    monkeypatch.setenv("SLURM_CONF", str(SLURM_STATE / "slurm.conf"))
    adapter = SlurmAdapter(Home(tmp_path).ensure(), {"partition": "debug"})

    def show() -> tuple[int, int, int]:
        cpus = subprocess.run(["sinfo", "-h", "-p", "debug", "-o", "%C|%m"], env=env, capture_output=True, text=True)
        states, memory = cpus.stdout.split("|")
        allocated, idle, other, total = (int(x) for x in states.split("/"))
        return total, idle, int(memory)

    got, want = _agree(lambda: (lambda c: c and (c.cores, c.free_cores, c.memory_mb))(adapter.ask_capacity()), show)
    assert got == want and want[0] == 32  # the cluster's 32 declared CPUs, not this host's
    assert adapter.capacity() is not None and adapter.capacity().node_cores == 32  # type: ignore[union-attr]
    assert SlurmAdapter(Home(tmp_path / "x").ensure(), {"partition": "no-such-partition"}).capacity() is None


@pytest.mark.sge
def test_grid_engine_capacity_on_the_test_cell(tmp_path, monkeypatch):
    env = sge_env()
    require_service(env is not None, "the test Grid Engine cell (tests/services/sge/start.sh)")
    for k in sge_service_env():
        monkeypatch.setenv(k, env[k])
    adapter = SgeAdapter(Home(tmp_path).ensure(), {"queue": "all.q"})

    def show() -> tuple[int, int]:
        out = subprocess.run(["qstat", "-g", "c"], env=env, capture_output=True, text=True).stdout.splitlines()
        row = next(line.split() for line in out if line.startswith("all.q"))
        return int(row[5]), int(row[4])  # TOTAL, AVAIL

    got, want = _agree(lambda: (lambda c: c and (c.cores, c.free_cores))(adapter.ask_capacity()), show)
    assert got == want and want[0] == 32
    hosts = subprocess.run(["qhost"], env=env, capture_output=True, text=True).stdout.splitlines()
    memtot = next(line.split()[7] for line in hosts[2:] if not line.startswith("global"))
    assert adapter.capacity().memory_mb == capacity.memory_mb(memtot)  # type: ignore[union-attr]


@pytest.mark.slurm
@pytest.mark.pbs
def test_pbs_capacity_through_the_torque_wrappers(tmp_path):
    require_service(pbs_available(), "the PBS wrappers over the test Slurm (tests/services/pbs/start.sh)")
    env = {**os.environ, "SLURM_CONF": str(SLURM_STATE / "slurm.conf")}
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]
    try:
        got = PbsAdapter(Home(tmp_path).ensure(), {"flavour": "slurm", "bin_dir": str(PBS_BIN)}).capacity()
    finally:
        os.environ.pop("SLURM_CONF")
    nodes = subprocess.run([str(PBS_BIN / "pbsnodes"), "-a"], env=env, capture_output=True, text=True).stdout
    np = sum(int(line.split("=")[1]) for line in nodes.splitlines() if line.strip().startswith("np ="))
    assert got is not None and got.cores == np == 32 and got.memory_mb == 1000


def test_fork_capacity_is_this_host_less_its_running_local_jobs(tmp_path):
    adapter = ForkAdapter(Home(tmp_path).ensure(), {})
    got = adapter.ask_capacity()
    host = host_capacity()
    assert got is not None and (got.cores, got.node_cores, got.memory_mb) == (len(os.sched_getaffinity(0)),) * 2 + (
        host.memory_mb,
    )
    assert got.free_cores is not None and 0 <= got.free_cores <= got.cores


def test_condor_capacity_from_the_collector(tmp_path, monkeypatch):
    fake = tmp_path / "fake"
    for k, v in condor_fake.enable({}, fake).items():
        monkeypatch.setenv(k, v)
    condor_fake.set_scenario(
        fake,
        slots=[
            {"Name": "slot1@a", "Machine": "a", "Cpus": 12, "TotalCpus": 16, "TotalMemory": 64000, "TotalGPUs": 1,
             "SlotType": "Partitionable", "State": "Unclaimed", "Activity": "Idle"},
            {"Name": "slot1_1@a", "Machine": "a", "Cpus": 4, "TotalCpus": 16, "TotalMemory": 64000, "TotalGPUs": 1,
             "SlotType": "Dynamic", "State": "Claimed", "Activity": "Busy"},
        ],
    )  # fmt: skip
    adapter = CondorAdapter(Home(tmp_path / "h").ensure(), {"python": sys.executable})
    assert adapter.ask_capacity() == Capacity(16, 16, 12, 64000, 1, 1)
    condor_fake.set_scenario(fake, collector_error="Failed communication with collector.")
    assert adapter.ask_capacity() is None


# ---------------------------------------------------------------------------
# jim advertise --json: the batch system's cores
# ---------------------------------------------------------------------------


@pytest.mark.slurm
def test_advertise_shows_the_slurm_clusters_cores(jim_env):
    env = slurm_env()
    require_service(env is not None, "the slurm batch system")
    jim_env.env["SLURM_CONF"] = env["SLURM_CONF"]
    jim_env.config.write_text(FAST_CONFIG + '\n[batch]\nadapter = "slurm"\npartition = "debug"\n')
    proc = jim_env.run("advertise", "--json")
    assert proc.returncode == 0, proc.stderr
    ad = json.loads(proc.stdout)
    assert ad["JimBatchSystem"] == "slurm" and ad["JimTotalCores"] == 32 and ad["JimCoresPerNode"] == 32
    assert ad["JimMemoryPerNodeMB"] == 1000 and ad["JimGPUs"] == 0 and 0 <= ad["JimFreeCores"] <= 32


def test_advertise_leaves_out_what_the_batch_system_cannot_say(jim_env, tmp_path):
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "sinfo").write_text("#!/bin/sh\necho 'Unable to contact slurm controller' >&2\nexit 1\n")
    (shim / "sinfo").chmod(0o755)
    jim_env.env["PATH"] = f"{shim}:{jim_env.env['PATH']}"
    jim_env.config.write_text(FAST_CONFIG + '\n[batch]\nadapter = "slurm"\nmax_array_size = 1001\n')
    proc = jim_env.run("advertise", "--json")
    assert proc.returncode == 0, proc.stderr
    ad = json.loads(proc.stdout)
    assert ad["JimBatchSystem"] == "slurm" and not any(k.startswith(("JimTotal", "JimFreeC", "JimGPU")) for k in ad)
    assert "JimCoresPerNode" not in ad and "JimMemoryPerNodeMB" not in ad  # never this host's CPUs instead
