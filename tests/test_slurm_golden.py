"""Golden tests of the Slurm adapter: rendered batch script, sbatch argv, and the
parsers on real outputs recorded from the test cluster (tests/data/slurm).

If a change to the rendering is intended, regenerate the golden file with
``JIM_ACCEPT_GOLDEN=1 pytest tests/test_slurm_golden.py`` and review the diff.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jim.adapters.model import Limits, LocalJobSpec, SubmitChunk
from jim.adapters.slurm import (
    STATE_MAP,
    SlurmAdapter,
    parse_sacct,
    parse_squeue,
    parse_tag_name,
    squeue_tasks,
    tag_name,
)
from jim.jobdesc import parse_rsl
from jim.jobid import TagName
from jim.paths import Home
from jim.ranges import array_spec
from jim.states import Evidence, LocalState

from support.golden import golden

DATA = Path(__file__).parent / "data" / "slurm"


def recorded(name: str) -> str:
    return (DATA / f"{name}.out").read_text()


def retag(text: str) -> str:
    """The recorded jobs are named jim-rec-<role>; make them look like jim's own arrays."""
    return text.replace("jim-rec-mix", tag_name("20261122-070000-abcdef01", 100)).replace(
        "jim-rec-array", tag_name("20261122-070000-abcdef02", 0)
    )


@pytest.fixture
def adapter(tmp_path):
    return SlurmAdapter(
        Home(tmp_path).ensure(),
        {
            "partition": "debug",
            "account": "d0",
            "sbatch_options": ["--mem=100", "--qos=low"],
            "python": "/usr/bin/python3",
            "max_array_size": 1001,
        },
    )


def test_rendered_script_and_sbatch_argv(adapter, tmp_path):
    job_dir = Path("/var/lib/jim/user/jobs/20261122-070000-abcdef01")
    chunk = SubmitChunk(
        "20261122-070000-abcdef01",
        [LocalJobSpec(k, f"x.{k}") for k in (3, 4, 5, 9)],
        job_dir=job_dir,
        wrapper=job_dir / "wrapper.py",
        sandbox=job_dir / "sandbox.tar.gz",
        outroot=job_dir / "local",
        queue="long",
        limits=Limits(wall_seconds=7200),
    )
    text = adapter.script(chunk, [3, 4, 5, 9])
    golden("slurm-script.sh", text)
    argv = adapter.submit_argv(chunk, [3, 4, 5, 9], Path("/x/slurm-3.sh"))
    golden("slurm-sbatch-argv.json", json.dumps(argv, indent=1) + "\n")
    assert "--array=0-2,6" in argv and "--partition=long" in argv and "--no-requeue" in argv
    assert argv[-3:] == ["--mem=100", "--qos=low", "/x/slurm-3.sh"]


#: GRAM's resource attributes, in GRAM's units (MB, minutes), as a grid job gives them.
GRAM_RESOURCES = "&(executable=/bin/true)(maxwalltime=120)(maxmemory=2048)(maxcputime=90)(project=d0)"


def test_gram_resources_reach_sbatch(tmp_path):
    """maxmemory (MB) becomes --mem, project --account over the site's default account; Slurm has
    no CPU-time limit of a job (the stock GRAM slurm module passes none either)."""
    site = SlurmAdapter(Home(tmp_path).ensure(), {"partition": "debug", "account": "cms", "python": "/usr/bin/python3"})
    job_dir = Path("/var/lib/jim/user/jobs/20261122-070000-abcdef01")
    chunk = SubmitChunk(
        "20261122-070000-abcdef01",
        [LocalJobSpec(k, f"x.{k}") for k in (0, 1)],
        job_dir=job_dir,
        wrapper=job_dir / "wrapper.py",
        sandbox=job_dir / "sandbox.tar.gz",
        outroot=job_dir / "local",
        limits=Limits.of(parse_rsl(GRAM_RESOURCES).resource_limits()),
    )
    argv = site.submit_argv(chunk, [0, 1], Path("/x/slurm-0.sh"))
    golden("slurm-sbatch-argv-resources.json", json.dumps(argv, indent=1) + "\n")
    assert "--mem=2048" in argv and "--account=d0" in argv and "--account=cms" not in argv
    assert "--time=120" in argv


def test_script_quotes_hostile_paths(adapter):
    text = adapter.render(
        "slurm.sh",
        grid_id="g",
        offset=0,
        python="python3",
        wrapper="/tmp/a b/$(rm -rf x)/w.py",
        sandbox="/tmp/'q'",
        outroot="/o;ls",
        attempt=2,
    )
    assert "'/tmp/a b/$(rm -rf x)/w.py'" in text
    assert "'/o;ls'" in text and "'/tmp/'\"'\"'q'\"'\"''" in text


def test_sbatch_options_must_be_a_list(tmp_path):
    from jim.errors import ConfigError

    with pytest.raises(ConfigError):
        SlurmAdapter(Home(tmp_path), {"sbatch_options": "--mem=100; rm -rf /"})


def test_array_spec_and_tag_names():
    assert array_spec([0, 1, 2, 3]) == "0-3"
    assert array_spec([5, 0, 2, 3, 9, 10]) == "0,2-3,5,9-10"
    assert parse_tag_name(tag_name("20261122-070000-abcdef01", 42)) == TagName("20261122-070000-abcdef01", 42)
    assert parse_tag_name("jim-rec-mix") is None and parse_tag_name("jim.x.y") is None


def test_parse_squeue_recorded_mix():
    st = parse_squeue(retag(recorded("squeue-mix")))
    g1 = "20261122-070000-abcdef01"
    assert st["15_0"].state is LocalState.DONE and st["15_0"].tag == f"{g1}.100"
    assert st["15_1"].state is LocalState.FAILED and st["15_1"].reason == "NonZeroExitCode"
    assert st["15_5"].state is LocalState.QUEUED and st["15_9"].tag == f"{g1}.109"
    assert st["5_9"].tag == "20261122-070000-abcdef02.9"
    assert not any(k.startswith(("16", "17", "18", "4")) for k in st)  # not jim's jobs: ignored


def test_parse_squeue_states_and_held():
    g = "20261122-070000-abcdef01"
    lines = "\n".join(
        f"9_{k}|9|9|{k}|{state}|{reason}|{tag_name(g, 0)}|"
        for k, (state, reason) in enumerate(
            [
                ("PENDING", "JobHeldUser"),
                ("PENDING", "JobHeldAdmin"),
                ("PENDING", "Resources"),
                ("RUNNING", "None"),
                ("SUSPENDED", "None"),
                ("COMPLETING", "None"),
                ("TIMEOUT", "TimeLimit"),
                ("CANCELLED", "None"),
                ("WEIRD_NEW_STATE", "None"),
            ]
        )
    )
    st = parse_squeue(lines)
    assert [st[f"9_{k}"].state for k in range(8)] == [
        LocalState.HELD,
        LocalState.HELD,
        LocalState.QUEUED,
        LocalState.RUNNING,
        LocalState.SUSPENDED,
        LocalState.RUNNING,
        LocalState.FAILED,
        LocalState.CANCELLED,
    ]
    assert "9_8" not in st  # unknown state: a warning, never a guess
    # ... but it exists: reconciling by tag sees it in any state
    assert ("9_8", f"{g}.8", "WEIRD_NEW_STATE", "None") in squeue_tasks(lines)


def test_parse_squeue_folded_and_odd_names():
    assert parse_squeue(retag(recorded("squeue-mix-folded"))).get("15_5") is None  # folded range skipped
    odd = recorded("squeue-odd-name").replace("jim x|y z", tag_name("20261122-070000-abcdef01", 0) + "|x")
    # a '|' in the name must not shift the state field
    for st in parse_squeue(odd).values():
        assert st.state in (LocalState.QUEUED, LocalState.RUNNING, LocalState.CANCELLED)


def test_parse_sacct_recorded_final_and_purged():
    g1 = "20261122-070000-abcdef01"
    final = parse_sacct(retag(recorded("sacct-mix-final")))
    assert final["15_1"].state is LocalState.FAILED and final["15_1"].exit_code == 3
    assert final["15_1"].evidence is Evidence.ACCOUNTING and final["15_1"].tag == f"{g1}.101"
    assert final["15_2"].state is LocalState.CANCELLED  # "CANCELLED by 0": first word
    assert final["15_0"].state is LocalState.DONE and final["15_0"].exit_code == 0
    assert final["15_0"].submitted is not None
    assert "15_9" not in final  # cancelled while pending: no record at all
    purged = parse_sacct(retag(recorded("sacct-mix-purged")))
    assert purged["15_2"].exit_code == 128 + 15  # 0:15 after the purge


def test_parse_sacct_live_has_no_exit_codes_for_running():
    live = parse_sacct(retag(recorded("sacct-mix-live")))
    assert live["15_2"].state is LocalState.RUNNING and live["15_2"].exit_code is None
    assert "15_[5-9%3]" not in live


def test_every_state_in_recordings_is_mapped():
    for name in ("squeue-mix", "squeue-mix-final", "sacct-mix-final", "sacct-mix-live"):
        for line in recorded(name).splitlines():
            f = line.split("|")
            state = (f[4] if name.startswith("squeue") else f[2]).split()[0]
            assert state in STATE_MAP, (name, state)


def test_transient_errors_classified(adapter):
    assert adapter.is_transient((DATA / "down-squeue.err").read_text())
    assert adapter.is_transient((DATA / "down-sbatch.err").read_text())
    assert not adapter.is_transient((DATA / "sbatch-bad-partition.err").read_text())
    assert not adapter.is_transient((DATA / "sbatch-array-too-big.err").read_text())


def test_sacct_folded_and_bare_array_records():
    """Tasks that never started are one record of their array: ``A_[0-3,7%2]``, or the bare ``A``
    when none of its tasks ever started (an array cancelled while pending)."""
    g = "20261122-070000-abcdef01"
    name = tag_name(g, 10)
    rows = "\n".join(
        [
            f"40_[0-2,5%2]|40|CANCELLED by 0|0:0|2026-11-22T07:00:00|None|2026-11-22T07:05:00|{name}|",
            f"41|41|CANCELLED by 0|0:0|2026-11-22T07:00:00|None|2026-11-22T07:05:00|{name}|",
            "42|42|COMPLETED|0:0|2026-11-22T07:00:00|None|2026-11-22T07:05:00|not-jims|",
        ]
    )
    st = parse_sacct(rows, {"41_0", "41_3", "42_0"})
    assert sorted(st) == ["40_0", "40_1", "40_2", "40_5", "41_0", "41_3"]
    assert st["40_5"].state is LocalState.CANCELLED and st["40_5"].tag == f"{g}.15"
    assert st["41_3"].tag == f"{g}.13" and st["41_3"].evidence is Evidence.ACCOUNTING
    assert "41_0" not in parse_sacct(rows)  # a bare record only counts for the tasks asked about


def _shape_chunk(limits: Limits) -> SubmitChunk:
    job_dir = Path("/var/lib/jim/user/jobs/20261122-070000-abcdef01")
    return SubmitChunk(
        "20261122-070000-abcdef01",
        [LocalJobSpec(k, f"x.{k}") for k in (0, 1)],
        job_dir=job_dir,
        wrapper=job_dir / "wrapper.py",
        sandbox=job_dir / "sandbox.tar.gz",
        outroot=job_dir / "local",
        limits=limits,
    )


#: Every combination of the shape's parts: cores, memory, GPUs, whole node.
SHAPES = [
    Limits(cores=cores, memory_mb=memory, gpus=gpus, whole_node=whole)
    for cores in (1, 8)
    for memory in (None, 16000)
    for gpus in (0, 2)
    for whole in (False, True)
]


def test_every_shape_reaches_sbatch(tmp_path):
    """One task of N CPUs (--cpus-per-task: sacct's AllocCPUS), --mem MB of the whole job, GPUs as
    --gres, a whole node as --exclusive; nothing for what the job does not ask."""
    site = SlurmAdapter(Home(tmp_path).ensure(), {"partition": "batch", "max_array_size": 1001})
    argvs = {}
    for limits in SHAPES:
        key = f"cores={limits.cores} memory_mb={limits.memory_mb} gpus={limits.gpus} whole_node={limits.whole_node}"
        argv = site.submit_argv(_shape_chunk(limits), [0, 1], Path("/x/slurm-0.sh"))
        argvs[key] = argv
        assert ("--cpus-per-task=8" in argv) is (limits.cores == 8)
        assert ("--mem=16000" in argv) is bool(limits.memory_mb)
        assert ("--gres=gpu:2" in argv) is bool(limits.gpus)
        assert ("--exclusive" in argv) is limits.whole_node
        assert not any(a.startswith("--ntasks") or a.startswith("--nodes") for a in argv)  # one task, one node
    golden("slurm-sbatch-argv-shapes.json", json.dumps(argvs, indent=1) + "\n")


def test_site_sbatch_options_come_after_the_shape_and_win(tmp_path):
    """sbatch takes the last of a repeated option: the site's own sbatch_options come last."""
    site = SlurmAdapter(
        Home(tmp_path).ensure(),
        {"max_array_size": 1001, "sbatch_options": ["--mem=4000", "--gres=gpu:tesla:1"], "gpu_gres": "gpu:a100"},
    )
    argv = site.submit_argv(_shape_chunk(Limits(cores=4, memory_mb=8000, gpus=1)), [0, 1], Path("/x/s.sh"))
    assert argv[-6:] == [
        "--cpus-per-task=4",
        "--mem=8000",
        "--gres=gpu:a100:1",
        "--mem=4000",
        "--gres=gpu:tesla:1",
        "/x/s.sh",
    ]


@pytest.mark.parametrize("gres", ["gpu --exclusive", "-gpu", "gpu:", "gpu;rm", "", "g" * 100])
def test_gpu_gres_must_be_a_gres_name(tmp_path, gres):
    from jim.errors import ConfigError

    with pytest.raises(ConfigError, match="gpu_gres"):
        SlurmAdapter(Home(tmp_path), {"gpu_gres": gres})


#: Recorded on the multi-node test Slurm (tests/services/slurm-cluster, Slurm 22.05, memory enforced
#: by ``JobAcctGatherParams=OverMemoryKill``, no cgroups): an array of two tasks with ``--mem=100``,
#: task 1 touching 300 MB.  squeue ``-o SQUEUE_FORMAT``, then ``sacct -n -P -o ACCT_FIELDS``.
OVER_MEMORY_SQUEUE = """\
263_0|264|263|0|COMPLETED|None|jim.20261122-070000-abcdef01.0|(null)
263_1|263|263|1|FAILED|JobLaunchFailure|jim.20261122-070000-abcdef01.0|(null)
"""
OVER_MEMORY_SACCT = """\
263_0|264|COMPLETED|0:0|2026-11-26T22:33:18|2026-11-26T22:33:18|2026-11-26T22:33:20|100M||jim.20261122-070000-abcdef01.0|
263_0.batch|264.batch|COMPLETED|0:0|2026-11-26T22:33:18|2026-11-26T22:33:18|2026-11-26T22:33:20||3028K|batch|
263_1|263|FAILED|0:9|2026-11-26T22:33:18|2026-11-26T22:33:18|2026-11-26T22:33:19|100M||jim.20261122-070000-abcdef01.0|
263_1.batch|263.batch|CANCELLED by 0|0:9|2026-11-26T22:33:18|2026-11-26T22:33:18|2026-11-26T22:33:19||322204K|batch|
"""


def test_a_job_killed_for_its_memory_is_out_of_memory_by_its_accounting():
    """Slurm 22.05 without cgroups records a job killed for its memory as FAILED 0:9 (squeue:
    JobLaunchFailure); its batch step's MaxRSS over its ReqMem makes it OUT_OF_MEMORY, the job's
    own fault.  squeue alone says nothing of why (JobLaunchFailure is any script killed by a signal)."""
    from jim.adapters.slurm import ACCT_FIELDS, over_memory
    from jim.states import EndCause

    queued = parse_squeue(OVER_MEMORY_SQUEUE)
    assert queued["263_1"].state is LocalState.FAILED and queued["263_1"].cause is None
    acct = parse_sacct(OVER_MEMORY_SACCT, {"263_0", "263_1"}, memory=True)
    assert sorted(acct) == ["263_0", "263_1"]  # the steps' lines are no jobs of their own
    assert acct["263_1"].state is LocalState.FAILED and acct["263_1"].cause is EndCause.OUT_OF_MEMORY
    assert acct["263_1"].exit_code == 128 + 9 and acct["263_1"].tag == "20261122-070000-abcdef01.1"
    assert acct["263_0"].state is LocalState.DONE and acct["263_0"].cause is None
    assert len(ACCT_FIELDS.split(",")) == OVER_MEMORY_SACCT.splitlines()[0].count("|") + 1
    # a script killed by a signal within its memory (kill -9 $$: MaxRSS 3244K of 100M) is not
    assert not over_memory("FAILED", "0:9", "100M", "3244K")
    assert over_memory("FAILED", "0:9", "1G", "1.5G") and over_memory("FAILED", "0:9", "100Mn", "200M")
    assert not over_memory("FAILED", "1:0", "100M", "322204K")  # an exit code of its own
    assert not over_memory("FAILED", "0:9", "", "322204K") and not over_memory("FAILED", "0:9", "4000Mc", "5G")
    assert not over_memory("COMPLETED", "0:0", "100M", "322204K")


def test_the_accounting_reads_the_steps_memory(adapter):
    argv = adapter.accounting_argv(["263", "270"])
    assert "-X" not in argv and argv[argv.index("-o") + 1].split(",")[7:9] == ["ReqMem", "MaxRSS"]
