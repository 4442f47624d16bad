"""Each local job's shape (cores, memory, GPUs, whole node) as Grid Engine, PBS and HTCondor are asked
for it: golden qsub argv and submit descriptions, the refusals a site can understand, the options'
checks, and HTCondor's job ad through the fake schedd (``condor_fake.py``).  No batch system needed;
the real ones: ``test_sge.py``, ``test_pbs.py``.

If a change to a rendering is intended: ``JIM_ACCEPT_GOLDEN=1 pytest tests/test_shape_requests.py``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from jim.adapters.condor import CondorAdapter
from jim.adapters.model import Limits, LocalJobSpec, SubmitChunk
from jim.adapters.pbs import FLAVOURS, PbsAdapter
from jim.adapters.sge import SgeAdapter
from jim.adapters.shapes import pbs_shape_args, per_slot_mb, sge_shape_args
from jim.config import parse
from jim.errors import ConfigError, SubmitError
from jim.paths import Home

import condor_fake
from support.golden import golden

G = "20261122-070000-abcdef01"
JOB_DIR = Path("/var/lib/jim/user/jobs") / G
#: The site of the golden Grid Engine argv: a PE, two memory resources, a GPU and an exclusive complex.
SGE_SITE = {
    "parallel_environment": "smp",
    "memory_resources": ["h_vmem", "mem_free"],
    "gpu_resource": "gpu",
    "exclusive_resource": "exclusive",
}
#: 8 cores, 10000 MB in all (1250 per slot), 2 GPUs, a whole node, 2 h.
FULL = Limits(wall_seconds=7200, memory_mb=10000, cores=8, gpus=2, whole_node=True)


def chunk(limits: Limits, job_dir: Path = JOB_DIR, indices=(0, 1)) -> SubmitChunk:
    return SubmitChunk(
        G,
        [LocalJobSpec(k, f"{G}.{k}") for k in indices],
        job_dir=job_dir,
        wrapper=job_dir / "wrapper.py",
        sandbox=job_dir / "sandbox.tar.gz",
        outroot=job_dir / "local",
        limits=limits,
    )


def opt(argv: list[str], flag: str) -> list[str]:
    """Every value given after ``flag`` in ``argv``."""
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


# -- Grid Engine -------------------------------------------------------------------------------


def sge(tmp_path, **options) -> SgeAdapter:
    return SgeAdapter(Home(tmp_path).ensure(), {"qsub_options": ["-p", "-10"], **options})


def test_sge_full_shape_is_golden(tmp_path):
    argv = sge(tmp_path, **SGE_SITE).submit_argv(chunk(FULL), [0, 1], Path("/x/sge-0.sh"))
    golden("sge-qsub-argv-shape.json", json.dumps(argv, indent=1) + "\n")
    assert argv[argv.index("-pe") : argv.index("-pe") + 3] == ["-pe", "smp", "8"]
    # Grid Engine counts memory per slot: 10000 MB over 8 slots
    assert opt(argv, "-l") == ["h_rt=7200", "h_vmem=1250M", "mem_free=1250M", "gpu=2", "exclusive=true"]
    assert argv[-3:] == ["-p", "-10", "/x/sge-0.sh"]  # the site's own options still come last


def test_sge_one_core_is_as_before(tmp_path):
    """One core: no -pe, and the memory as h_data of the whole job (today's default)."""
    argv = sge(tmp_path).submit_argv(chunk(Limits(memory_mb=2048)), [0, 1], Path("s"))
    assert "-pe" not in argv and opt(argv, "-l") == ["h_data=2048M"]
    argv = sge(tmp_path, parallel_environment="smp").submit_argv(chunk(Limits(memory_mb=3000, cores=4)), [0], Path("s"))
    assert opt(argv, "-pe") == ["smp"] and opt(argv, "-l") == ["h_data=750M"]


def test_sge_memory_per_slot_rounds_up():
    assert per_slot_mb(1000, 3) == 334 and per_slot_mb(1000, 1) == 1000 and per_slot_mb(7, 8) == 1
    args = sge_shape_args(
        Limits(memory_mb=1000, cores=3), pe="mpi", memory_resources=("h_vmem",), gpu_resource="", exclusive_resource=""
    )
    assert args == ["-pe", "mpi", "3", "-l", "h_vmem=334M"]


@pytest.mark.parametrize(
    ("limits", "option"),
    [
        (Limits(cores=4), "parallel_environment"),
        (Limits(gpus=1), "gpu_resource"),
        (Limits(whole_node=True), "exclusive_resource"),
    ],
)
def test_sge_refuses_what_the_site_did_not_configure(tmp_path, limits, option):
    """A shape the site named no Grid Engine object for: refused for good, naming the option."""
    with pytest.raises(SubmitError) as e:
        sge(tmp_path).submit_argv(chunk(limits), [0], Path("s"))
    assert not e.value.transient and f"[batch] {option}" in e.value.message


def test_sge_shape_options_are_checked():
    batch = parse({"batch": {"adapter": "sge", **SGE_SITE}}).batch
    assert batch.options.memory_resources == ("h_vmem", "mem_free")  # type: ignore[attr-defined]
    for bad in (
        {"parallel_environment": "smp 4"},
        {"parallel_environment": "-smp"},
        {"gpu_resource": "gpu=1"},
        {"exclusive_resource": "excl,h_vmem"},
        {"memory_resources": ["h_vmem", ""]},
        {"memory_resources": "h_vmem"},
    ):
        with pytest.raises(ConfigError):
            parse({"batch": {"adapter": "sge", **bad}})


# -- PBS ---------------------------------------------------------------------------------------


def pbs(tmp_path, flavour: str) -> PbsAdapter:
    return PbsAdapter(Home(tmp_path / flavour).ensure(), {"flavour": flavour, "qsub_options": ["-p", "5"]})


@pytest.mark.parametrize("flavour", ["pbspro", "torque"])
def test_pbs_full_shape_is_golden(tmp_path, flavour):
    argv = pbs(tmp_path, flavour).qsub_argv(chunk(FULL), f"jim.{G}.0", "/x/pbs-0.sh", "/x/pbs-0.out")
    golden(f"pbs-{flavour}-qsub-shape.json", json.dumps(argv, indent=1) + "\n")
    assert argv[-3:] == ["-p", "5", "/x/pbs-0.sh"]


def test_pbs_flavours_spell_the_shape():
    """PBS Pro: one select chunk with the memory in it, place=excl; Torque and Slurm's wrappers:
    nodes=1:ppn=N with the job's mem; Torque's whole node is -n."""
    assert pbs_shape_args(FULL, flavour="pbspro") == (["select=1:ncpus=8:mem=10000mb:ngpus=2", "place=excl"], [])
    assert pbs_shape_args(Limits(cores=4), flavour="pbspro") == (["select=1:ncpus=4"], [])
    assert pbs_shape_args(FULL, flavour="torque") == (["nodes=1:ppn=8:gpus=2", "mem=10000mb"], ["-n"])
    assert pbs_shape_args(Limits(cores=4, gpus=1), flavour="slurm") == (["nodes=1:ppn=4:gpus=1"], [])
    for flavour in FLAVOURS:  # one plain core: as before the shape existed
        assert pbs_shape_args(Limits(memory_mb=2048), flavour=flavour) == (["mem=2048mb"], [])
        assert pbs_shape_args(Limits(), flavour=flavour) == ([], [])


def test_slurm_wrappers_get_every_resource_in_one_list(tmp_path):
    """Their qsub keeps only its last -l: wall time, cores and memory go in one."""
    limits = Limits(wall_seconds=7200, cpu_seconds=60, memory_mb=400, cores=4)
    argv = pbs(tmp_path, "slurm").qsub_argv(chunk(limits), "n", "/x/s.sh", "/x/o.out")
    assert opt(argv, "-l") == ["walltime=02:00:00,cput=00:01:00,nodes=1:ppn=4,mem=400mb"]
    argv = pbs(tmp_path, "torque").qsub_argv(chunk(limits), "n", "/x/s.sh", "/x/o.out")
    assert opt(argv, "-l") == ["walltime=02:00:00", "cput=00:01:00", "nodes=1:ppn=4", "mem=400mb"]


def test_slurm_wrappers_cannot_ask_for_a_whole_node(tmp_path):
    with pytest.raises(SubmitError) as e:
        pbs(tmp_path, "slurm").qsub_argv(chunk(Limits(whole_node=True)), "n", "/x/s.sh", "/x/o.out")
    assert not e.value.transient and "slurm adapter" in e.value.message


# -- HTCondor ----------------------------------------------------------------------------------


def condor(tmp_path, **options) -> CondorAdapter:
    return CondorAdapter(Home(tmp_path).ensure(), {"python": "/usr/bin/python3", **options})


def test_condor_shape_is_golden(tmp_path):
    shaped = Limits(wall_seconds=7200, memory_mb=10000, cores=8, gpus=2)
    text = str(condor(tmp_path).submit_description(chunk(shaped), 0))
    golden("condor-submit-shape.sub", text)
    desc = condor(tmp_path).description(chunk(shaped), 0)
    assert (desc["request_cpus"], desc["request_gpus"], desc["request_memory"]) == ("8", "2", "10000")
    plain = condor(tmp_path).description(chunk(Limits()), 0)
    assert not {"request_cpus", "request_gpus", "request_memory"} & set(plain)  # one core: as before


def test_condor_whole_node_is_the_whole_partitionable_slot(tmp_path):
    desc = condor(tmp_path).description(chunk(FULL), 0)
    assert desc["request_cpus"] == "TotalSlotCpus" and desc["request_memory"] == "TotalSlotMemory"
    assert desc["request_gpus"] == "2"
    str(condor(tmp_path).submit_description(chunk(FULL), 0))  # (HTCondor reads it as written)


def test_condor_site_commands_win(tmp_path):
    site = condor(tmp_path, submit_commands={"request_cpus": 1, "request_gpus": 0, "request_memory": "2GB"})
    desc = site.description(chunk(FULL), 0)
    assert (desc["request_cpus"], desc["request_gpus"], desc["request_memory"]) == ("1", "0", "2GB")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    d = tmp_path / "condor-fake"
    for k, v in condor_fake.enable({"PYTHONPATH": os.environ.get("PYTHONPATH", "")}, d).items():
        monkeypatch.setenv(k, v)
    schedd = condor_fake.FakeSchedd(d)
    yield schedd
    schedd.kill_everything()


def test_condor_job_ads_carry_the_shape(tmp_path, fake):
    """Through the schedd: every proc's ad asks for the cores, GPUs and memory (a whole node: the
    slot's totals, an expression matched against the machine)."""
    a = CondorAdapter(Home(tmp_path / "home").ensure(), {"python": sys.executable})
    job_dir = tmp_path / G
    job_dir.mkdir()
    ids = a.submit_chunk(chunk(Limits(memory_mb=4096, cores=4, gpus=1), job_dir, indices=(0, 1)))
    whole = a.submit_chunk(chunk(Limits(cores=4, whole_node=True), job_dir, indices=(2,)))
    ads = fake.jobs()
    for bid in ids.values():
        ad = ads[bid]["ad"]
        assert (ad["RequestCpus"], ad["RequestGPUs"], ad["RequestMemory"]) == ("4", "1", "4096")
    ad = ads[whole[2]]["ad"]
    assert ad["RequestCpus"] == "TotalSlotCpus" and ad["RequestMemory"] == "TotalSlotMemory"
    a.cancel(list(ids.values()) + list(whole.values()))
