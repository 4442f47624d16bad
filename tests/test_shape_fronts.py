"""Every front end's resource request becomes the same shape: golden cases per language.

ARC's grami (A-REX's ``write_grami``), DIRAC's JDL, jim's JSON and GRAM's RSL each
say "8 cores, 16 GB, a GPU, the whole node" in their own words; each case here is
one text of that language, the jim attributes it becomes and the shape
(:func:`jim.jobdesc.shape.stated_shape`) and plan (``cores`` per local job, how
many local jobs) it gives.  A refused text names its reason and carries GRAM's
error number.  The real gatekeepers are in tests/test_gram_e2e.py and
tests/test_arc.py.
"""

from __future__ import annotations

import pytest

from jim import config as jconfig
from jim.arc import grami
from jim.errors import DescriptionError, GramError
from jim.gram.rvf import render_rvf
from jim.jobdesc import JobDescription, parse_jdl, parse_json, parse_rsl
from jim.jobdesc.shape import Shape, stated_shape
from jim.plan import make_plan

#: A site whose one queue holds 16 cores, 64 GB and 2 GPUs per node (no host check: not fork).
SITE = {
    "site": {"recommended_cpu_per_job": 3600, "max_cpu_per_job": 360000},
    "resources": {
        "ce": {
            "ce1": {
                "queue": {
                    "big": {
                        "WallTimeLimit": 86400,
                        "NumberOfProcessors": 16,
                        "MaxRAM": 65536,
                        "GPUs": 2,
                        "Tag": ["GPU"],
                    }
                }
            }
        }
    },
}


def plan_of(tmp_path, desc: JobDescription):
    config = jconfig.parse(SITE, env={"JIM_HOME": str(tmp_path / "home")})
    return make_plan(config, desc, dry_run=True)[1]


def shape_tuple(desc: JobDescription) -> tuple[int, int, int | None, int, bool]:
    s = stated_shape(desc)
    return s.cores, s.min_cores, s.memory_mb, s.gpus, s.whole_node


# --- ARC: the grami A-REX writes ---------------------------------------------------------------

GRAMI_HEAD = """joboption_directory='/var/lib/arc/session/abc123'
joboption_controldir='/var/lib/arc/control'
joboption_arg_0='./run.sh'
joboption_stdin='/dev/null'
joboption_stdout='/var/lib/arc/session/abc123/out.txt'
joboption_stderr='/var/lib/arc/session/abc123/err.txt'
joboption_env_0=GRID_GLOBAL_JOBID='abc123'
joboption_cputime=
joboption_walltime=600
joboption_virtualmemory=
joboption_disk=
joboption_jobname='shape'
joboption_queue='jim'
joboption_gridid='abc123'
joboption_priority=50
"""


def grami_desc(body: str) -> JobDescription:
    return grami.to_description(GRAMI_HEAD + body, queues=set())[0]


@pytest.mark.parametrize(
    "body, attrs, shape",
    [
        # (no count in the xRSL: A-REX writes count=1 and nothing else)
        ("joboption_memory=\njoboption_count=1\n", {}, (1, 1, None, 0, False)),
        # (count=8): 8 slots of one job = 8 cores; countpernode -1 = not given
        (
            "joboption_memory=2000\njoboption_count=8\njoboption_countpernode=-1\n"
            "joboption_penv_type=\njoboption_penv_version=\n",
            {"cores": ["8"], "maxmemory": ["16000"]},
            (8, 8, 16000, 0, False),
        ),
        # (count=8)(countpernode=8): one node of 8 slots
        (
            "joboption_memory=1000\njoboption_count=8\njoboption_countpernode=8\njoboption_numnodes=1\n",
            {"cores": ["8"], "maxmemory": ["8000"]},
            (8, 8, 8000, 0, False),
        ),
        # (count=4)(countpernode=8): fewer slots than a node holds, still one node
        (
            "joboption_memory=\njoboption_count=4\njoboption_countpernode=8\njoboption_numnodes=1\n",
            {"cores": ["4"]},
            (4, 4, None, 0, False),
        ),
        # (exclusiveexecution=yes)
        (
            "joboption_memory=4000\njoboption_count=1\njoboption_exclusivenode=true\n",
            {"maxmemory": ["4000"], "wholenode": ["true"]},
            (1, 1, 4000, 0, True),
        ),
    ],
)
def test_grami_slots_memory_and_exclusive_node_become_the_shape(body, attrs, shape):
    desc = grami_desc(body)
    for name in ("cores", "maxmemory", "wholenode", "count", "gpus"):
        assert desc.attrs.get(name) == attrs.get(name), name
    assert shape_tuple(desc) == shape


def test_grami_count_8_is_one_local_job_of_8_cores_not_8_copies(tmp_path):
    plan = plan_of(tmp_path, grami_desc("joboption_memory=\njoboption_count=8\njoboption_countpernode=-1\n"))
    assert plan.n == 1
    assert plan.attrs["cores"] == "8"
    assert plan.slices[0].env["JIM_CORES"] == "8"


def test_grami_copies_travel_as_a_runtime_environment_option(tmp_path):
    desc = grami_desc(
        "joboption_memory=\njoboption_count=2\n"
        "joboption_runtime_0='ENV/JIM/GENERIC'\njoboption_runtime_0_1='count=3'\njoboption_runtime_0_2='gpus=1'\n"
    )
    assert shape_tuple(desc) == (2, 2, None, 1, False)
    plan = plan_of(tmp_path, desc)
    assert plan.n == 3 and plan.attrs["cores"] == "2" and plan.attrs["gpus"] == "1"


@pytest.mark.parametrize(
    "body, reason, code",
    [
        (
            "joboption_count=16\njoboption_countpernode=8\njoboption_numnodes=2\n",
            "count=16 slots with countpernode=8 need 2 nodes",
            GramError.INVALID_HOST_COUNT,
        ),
        ("joboption_count=eight\n", "joboption_count must be a whole number", GramError.RSL_SCHEDULER_SPECIFIC),
        ("joboption_count=1234567890123\n", "joboption_count must be a whole number", GramError.RSL_SCHEDULER_SPECIFIC),
        (
            "joboption_count=4096\njoboption_memory=999999999\n",
            "joboption_memory=999999999 MB per slot x count=4096",
            GramError.INVALID_MAX_MEMORY,
        ),
        ("joboption_count=5000\n", "cores must be at most 4096", GramError.RSL_SCHEDULER_SPECIFIC),
    ],
)
def test_grami_shape_refusals_name_the_reason_and_gram_error(body, reason, code):
    with pytest.raises(DescriptionError) as e:
        stated_shape(grami_desc(body))
    assert reason in e.value.message
    assert e.value.gram_error == code


def test_grami_cores_cannot_also_come_from_a_runtime_environment():
    with pytest.raises(DescriptionError, match="'cores' may not be given as a runtime environment option"):
        grami_desc("joboption_count=4\njoboption_runtime_0='ENV/JIM/GENERIC'\njoboption_runtime_0_1='cores=2'\n")


# --- DIRAC's JDL -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "jdl, attrs, shape",
    [
        ("NumberOfProcessors = 8;", {"cores": ["8"]}, (8, 8, None, 0, False)),
        # (DIRAC's Job.setNumberOfProcessors(8) writes both)
        ("NumberOfProcessors = 8; MaxNumberOfProcessors = 8;", {"cores": ["8"]}, (8, 8, None, 0, False)),
        # (NumberOfProcessors wins: DIRAC's JDL reader drops the minimum and maximum)
        ("NumberOfProcessors = 4; MinNumberOfProcessors = 2; MaxNumberOfProcessors = 8;", {"cores": ["4"]}, None),
        (
            "MinNumberOfProcessors = 2; MaxNumberOfProcessors = 8;",
            {"cores": ["8"], "mincores": ["2"]},
            (8, 2, None, 0, False),
        ),
        ("MinNumberOfProcessors = 4; MaxNumberOfProcessors = 4;", {"cores": ["4"]}, (4, 4, None, 0, False)),
        # (the minimum alone: DIRAC's job agent gives the job that many)
        ("MinNumberOfProcessors = 4;", {"cores": ["4"]}, (4, 4, None, 0, False)),
        # (the maximum alone: DIRAC's job description has the minimum 1)
        ("MaxNumberOfProcessors = 6;", {"cores": ["6"], "mincores": ["1"]}, (6, 1, None, 0, False)),
        ("MaxNumberOfProcessors = 1;", {"cores": ["1"]}, (1, 1, None, 0, False)),
        # (MaxRAM: GB without a unit, DIRAC's; with a unit, that unit)
        ("MaxRAM = 4;", {"maxmemory": ["4096"]}, (1, 1, 4096, 0, False)),
        ("MaxRAM = 1.5;", {"maxmemory": ["1536"]}, (1, 1, 1536, 0, False)),
        ('MaxRAM = "2500MB";', {"maxmemory": ["2500"]}, (1, 1, 2500, 0, False)),
        ('MaxRAM = "2GiB";', {"maxmemory": ["2048"]}, (1, 1, 2048, 0, False)),
        ("WholeNode = true;", {"wholenode": ["yes"]}, (1, 1, None, 0, True)),
        ('WholeNode = "no";', {"wholenode": ["no"]}, (1, 1, None, 0, False)),
        # (a GPU tag asks for one GPU, and stays a tag the queue must offer)
        ('Tags = {"GPU", "cvmfs"};', {"gpus": ["1"], "requirements": ["Tag=GPU,cvmfs"]}, (1, 1, None, 1, False)),
        ('Tags = "gpu"; Gpus = 2;', {"gpus": ["2"], "requirements": ["Tag=gpu"]}, (1, 1, None, 2, False)),
        # (DIRAC's derived tags stay tags: DIRAC itself does not read processors from them)
        ('Tags = {"8Processors", "MultiProcessor"};', {"requirements": ["Tag=8Processors,MultiProcessor"]}, None),
    ],
)
def test_jdl_dirac_resources_become_the_shape(jdl, attrs, shape):
    desc = parse_jdl(f'Executable = "/bin/true";\n{jdl}', extra_known=())
    desc.check_known()
    got = {k: v for k, v in desc.attrs.items() if k != "executable"}
    assert got == attrs
    if shape is not None:
        assert shape_tuple(desc) == shape


def test_jdl_multi_processor_job_plans_local_jobs_of_its_cores(tmp_path):
    desc = parse_jdl('Executable = "/bin/true"; NumberOfProcessors = 8; MaxRAM = 16; Tags = {"GPU"};')
    plan = plan_of(tmp_path, desc)
    assert (plan.n, plan.attrs["cores"], plan.attrs["memoryMB"], plan.attrs["gpus"]) == (1, "8", "16384", "1")
    assert plan.slices[0].env["JIM_CORES"] == "8"


def test_jdl_processor_range_gets_what_the_queue_holds(tmp_path):
    desc = parse_jdl('Executable = "/bin/true"; MinNumberOfProcessors = 2; MaxNumberOfProcessors = 64;')
    assert plan_of(tmp_path, desc).attrs["cores"] == "16"


@pytest.mark.parametrize(
    "jdl, reason, code",
    [
        ("NumberOfProcessors = 0;", "JDL NumberOfProcessors must be a whole number", GramError.RSL_SCHEDULER_SPECIFIC),
        (
            "NumberOfProcessors = 2.5;",
            "JDL NumberOfProcessors must be a whole number",
            GramError.RSL_SCHEDULER_SPECIFIC,
        ),
        (
            'NumberOfProcessors = "lots";',
            "JDL NumberOfProcessors must be a whole number",
            GramError.RSL_SCHEDULER_SPECIFIC,
        ),
        (
            "NumberOfProcessors = {2, 4};",
            "JDL NumberOfProcessors must be a whole number",
            GramError.RSL_SCHEDULER_SPECIFIC,
        ),
        ("MaxNumberOfProcessors = 99999;", "from 1 to 4096", GramError.RSL_SCHEDULER_SPECIFIC),
        (
            "MinNumberOfProcessors = 8; MaxNumberOfProcessors = 2;",
            "MaxNumberOfProcessors (2) must not be below MinNumberOfProcessors (8)",
            GramError.RSL_SCHEDULER_SPECIFIC,
        ),
        ("NumberOfProcessors = 8; Cores = 8;", "both give cores", GramError.BAD_RSL),
        ("MaxRAM = 4; MaxMemory = 4096;", "both give maxmemory", GramError.BAD_RSL),
        ("MaxRAM = 0;", "JDL MaxRAM is in GB", GramError.INVALID_MAX_MEMORY),
        ("MaxRAM = 99999999;", "JDL MaxRAM is in GB", GramError.INVALID_MAX_MEMORY),
        ('MaxRAM = "4 bananas";', "JDL MaxRAM must be a memory", GramError.INVALID_MAX_MEMORY),
        ('MaxRAM = "4XB";', "JDL MaxRAM must be a memory", GramError.INVALID_MAX_MEMORY),
        ('WholeNode = "sometimes";', "wholenode must be true or false", GramError.RSL_SCHEDULER_SPECIFIC),
    ],
)
def test_jdl_resource_refusals_name_the_reason_and_gram_error(jdl, reason, code):
    with pytest.raises(DescriptionError) as e:
        stated_shape(parse_jdl(f'Executable = "/bin/true";\n{jdl}', extra_known=()))
    assert reason in e.value.message
    assert e.value.gram_error == code


# --- jim's JSON --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, shape",
    [
        ('{"executable": "/bin/true", "cores": 8}', (8, 8, None, 0, False)),
        ('{"executable": ["/bin/true"], "cores": ["8"], "mincores": ["2"]}', (8, 2, None, 0, False)),
        ('{"executable": "/bin/true", "gpus": 2, "wholenode": true, "maxmemory": 16000}', (1, 1, 16000, 2, True)),
        ('{"executable": "/bin/true", "wholenode": false}', (1, 1, None, 0, False)),
        ('{"executable": "/bin/true", "xcount": 4, "jobtype": "single", "count": 8}', None),
        ('{"executable": "/bin/true", "jobtype": "single", "count": 8}', (8, 8, None, 0, False)),
        ('{"executable": "/bin/true", "Max_Memory": "4096", "Whole_Node": "yes"}', (1, 1, 4096, 0, True)),
    ],
)
def test_json_names_become_the_shape(text, shape):
    desc = parse_json(text)
    desc.check_known()
    if shape is None:
        with pytest.raises(DescriptionError) as e:
            stated_shape(desc)
        assert e.value.gram_error == GramError.INVALID_HOST_COUNT
    else:
        assert shape_tuple(desc) == shape


@pytest.mark.parametrize(
    "text, reason",
    [
        ('{"executable": "/bin/true", "cores": 0}', "cores"),
        ('{"executable": "/bin/true", "cores": 2.5}', "cores"),
        ('{"executable": "/bin/true", "cores": true}', "cores"),
        ('{"executable": "/bin/true", "gpus": 65}', "gpus must be at most 64"),
        ('{"executable": "/bin/true", "wholenode": 2}', "wholenode must be true or false"),
        ('{"executable": "/bin/true", "mincores": 2}', "mincores needs cores"),
    ],
)
def test_json_bad_shape_values_are_refused(text, reason):
    with pytest.raises(DescriptionError, match=reason):
        stated_shape(parse_json(text))


# --- GRAM's RSL, and the attributes jim.rvf declares --------------------------------------------


@pytest.mark.parametrize(
    "rsl, cores, local_jobs",
    [
        ("(xcount=4)", 4, 1),
        ("(xcount=4)(count=3)", 4, 3),  # (multiple: 3 copies of 4 cores)
        ("(jobtype=single)(count=8)", 8, 1),
        ("(count=8)", 1, 8),
        ("(hostcount=1)(cores=2)", 2, 1),
    ],
)
def test_rsl_cores_and_copies(tmp_path, rsl, cores, local_jobs):
    plan = plan_of(tmp_path, parse_rsl(f"&(executable=/bin/true){rsl}"))
    assert (int(plan.attrs["cores"]), plan.n) == (cores, local_jobs)
    assert {s.env["JIM_CORES"] for s in plan.slices} == {str(cores)}


def test_rsl_hostcount_2_is_refused_with_invalid_host_count():
    with pytest.raises(DescriptionError) as e:
        stated_shape(parse_rsl("&(executable=/bin/true)(hostcount=2)"))
    assert e.value.gram_error == GramError.INVALID_HOST_COUNT == 35


def test_jim_rvf_declares_the_shape_attributes():
    text = render_rvf()
    for name in ("cores", "mincores", "xcount", "gpus", "wholenode"):
        assert f"Attribute: {name}\n" in text, name


def test_a_description_without_resources_is_one_core():
    assert stated_shape(parse_rsl("&(executable=/bin/true)")) == Shape()
