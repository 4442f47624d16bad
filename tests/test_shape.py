"""The resource shape of a local job: from the description's attributes, fitted to the queues, planned.

``stated_shape`` is table-tested (every attribute, every refusal with GRAM's number); ``fitting``
against queues that say what they offer; ``make_plan`` end to end: the chosen queue, the recorded
shape and where it came from, the splitter sizing in core-seconds, a job widened when one event is
too long for one core, and the refusals of a shape no queue can hold (nothing recorded: a dry run).
"""

from __future__ import annotations

import pytest

from jim import config as jconfig
from jim.errors import GramError, InvalidAttribute, JimError, PlanError
from jim.jobdesc import Shape, memory_mb, parse_json, parse_rsl, stated_shape
from jim.plan import dry_run_json, make_plan
from jim.requirements import NoEligibleQueue, parse_resources
from jim.requirements.offers import Offer, fitting

EXE = "(executable=/bin/true)"

RESOURCES = {
    "ce": {
        "c": {
            "queue": {
                "short": {"WallTimeLimit": 3600, "CoresPerNode": 8, "MaxRAM": 16000},
                "long": {"WallTimeLimit": 86400, "CoresPerNode": 8, "MaxRAM": 32000, "WholeNode": False},
                "gpu": {"WallTimeLimit": 172800, "CoresPerNode": 16, "NumberOfProcessors": 16, "GPUs": 2},
            }
        }
    }
}


def shape(rsl: str) -> Shape:
    return stated_shape(parse_rsl("&" + EXE + rsl))


def cfg(tmp_path, resources=True, **site):
    data = {"site": {"recommended_cpu_per_job": 3600, "max_cpu_per_job": 360000, **site}}
    if resources:
        data["resources"] = RESOURCES
    return jconfig.parse(data, env={"JIM_HOME": str(tmp_path / "home")})


def plan_of(tmp_path, rsl, resources=True, **site):
    return make_plan(cfg(tmp_path, resources, **site), parse_rsl("&" + EXE + rsl), dry_run=True)[1]


# --- the description's shape --------------------------------------------------------------------


@pytest.mark.parametrize(
    "rsl, cores, least, by",
    [
        ("", 1, 1, None),
        ("(count=8)", 1, 1, None),  # multiple (the default): copies, one core each
        ("(count=8)(jobtype=multiple)", 1, 1, None),
        ("(count=8)(jobtype=single)", 8, 8, "count (jobtype=single)"),
        ("(count=8)(jobtype=mpi)", 8, 8, "count (jobtype=mpi)"),
        ("(xcount=4)", 4, 4, "xcount"),
        ("(xcount=4)(count=3)", 4, 4, "xcount"),  # three copies of four cores
        ("(xcount=8)(count=8)(jobtype=mpi)", 8, 8, "xcount"),  # eight slots on one host of eight
        ("(cores=8)", 8, 8, "cores"),
        ("(cores=8)(xcount=8)", 8, 8, "cores"),
        ("(cores=8)(mincores=2)", 8, 2, "cores"),
        ("(hostcount=1)(xcount=2)", 2, 2, "xcount"),
    ],
)
def test_cores_of_each_local_job(rsl, cores, least, by):
    s = shape(rsl)
    assert (s.cores, s.min_cores, s.by.get("cores")) == (cores, least, by)


def test_the_other_dimensions_and_where_they_came_from():
    s = shape("(gpus=2)(wholenode=yes)(maxmemory=4000)(maxwalltime=60)")
    assert (s.gpus, s.whole_node, s.memory_mb, s.wall_seconds) == (2, True, 4000, 3600)
    by = {"gpus": "gpus", "wholeNode": "wholenode", "memoryMB": "maxmemory", "wallSeconds": "maxwalltime"}
    assert dict(s.by) == by
    assert shape("(wholenode=false)").whole_node is False
    assert s.record() == {
        "cores": "1",
        "memoryMB": "4000",
        "gpus": "2",
        "wholeNode": "true",
        "wallSeconds": "3600",
        "shapeBy": "gpus=gpus memoryMB=maxmemory wallSeconds=maxwalltime wholeNode=wholenode",
    }
    assert Shape.from_json(s.to_json()) == s
    assert Shape.from_json(None) == Shape()


def test_json_uses_jims_names():
    desc = parse_json('{"executable": "/bin/true", "cores": 8, "gpus": 1, "wholenode": "true", "maxmemory": 2000}')
    s = stated_shape(desc)
    assert (s.cores, s.gpus, s.whole_node, s.memory_mb) == (8, 1, True, 2000)


@pytest.mark.parametrize(
    "rsl, code, words",
    [
        ("(hostcount=2)", GramError.INVALID_HOST_COUNT, "each local job runs on one node"),
        ("(count=16)(xcount=8)(jobtype=mpi)", GramError.INVALID_HOST_COUNT, "need 2 hosts"),
        ("(cores=4)(xcount=8)", GramError.RSL_SCHEDULER_SPECIFIC, "say different things"),
        ("(mincores=2)", GramError.RSL_SCHEDULER_SPECIFIC, "mincores needs cores"),
        ("(cores=2)(mincores=4)", GramError.RSL_SCHEDULER_SPECIFIC, "must not be above"),
        ("(cores=0)", GramError.RSL_SCHEDULER_SPECIFIC, "at least 1"),
        ("(cores=5000)", GramError.RSL_SCHEDULER_SPECIFIC, "at most 4096"),
        ("(cores=eight)", GramError.RSL_SCHEDULER_SPECIFIC, "integer"),
        ("(gpus=65)", GramError.RSL_SCHEDULER_SPECIFIC, "at most 64"),
        ("(gpus=-1)", GramError.RSL_SCHEDULER_SPECIFIC, "at least 0"),
        ("(wholenode=perhaps)", GramError.RSL_SCHEDULER_SPECIFIC, "true or false"),
        ("(hostcount=two)", GramError.INVALID_HOST_COUNT, "hostcount"),
        ("(maxmemory=4GB)", GramError.INVALID_MAX_MEMORY, "maxmemory"),
        ("(count=two)", GramError.INVALID_COUNT, "count"),
    ],
)
def test_bad_shapes_are_refused_with_grams_number(rsl, code, words):
    with pytest.raises(JimError) as e:
        shape(rsl)
    assert e.value.gram_error == code
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "text, mb",
    [("4096", 4096), ("4GB", 4096), ("4 GiB", 4096), ("1.5G", 1536), ("512MiB", 512), ("1T", 1048576), ("100KB", 1)],
)
def test_memory_with_units(text, mb):
    assert memory_mb(text, "MaxRAM") == mb


@pytest.mark.parametrize("text", ["4XB", "", "GB", "-1", "4 G B", "0", "1e3", "9" * 80, "2P" * 2, "4iB"])
def test_memory_with_a_unit_jim_does_not_know_is_refused(text):
    with pytest.raises(InvalidAttribute) as e:
        memory_mb(text, "MaxRAM")
    assert "MaxRAM" in str(e.value) and e.value.gram_error == GramError.INVALID_MAX_MEMORY


# --- what queues offer --------------------------------------------------------------------------


def queues():
    return parse_resources(RESOURCES).queues


def test_offers_read_from_the_queues_parameters():
    short, long, gpu = (Offer.of(q) for q in queues())
    assert (short.cores, short.cores_per_node, short.memory_mb) == (8, 8, 16000)
    assert (short.gpus, short.whole_node) == (None, None)
    assert long.whole_node is False
    assert (gpu.cores, gpu.gpus) == (16, 2)


@pytest.mark.parametrize(
    "rsl, names, cores",
    [
        ("", ["short", "long", "gpu"], 1),
        ("(cores=8)", ["short", "long", "gpu"], 8),
        ("(cores=12)", ["gpu"], 12),
        ("(cores=12)(mincores=4)", ["short", "long", "gpu"], 8),  # a range: what each queue holds
        ("(gpus=1)", ["gpu"], 1),
        ("(maxmemory=20000)", ["long", "gpu"], 1),  # gpu says no MaxRAM: not checked
        ("(wholenode=true)", ["short", "gpu"], 8),  # long: WholeNode = false; cores: the node's
        ("(wholenode=true)(cores=4)", ["short", "gpu"], 4),  # stated cores kept, node exclusive
    ],
)
def test_the_queues_that_can_hold_a_shape(rsl, names, cores):
    fits = fitting(shape(rsl), queues())
    assert [q.name for q, _ in fits] == names
    assert fits[0][1].cores == cores


@pytest.mark.parametrize(
    "rsl, words",
    [
        ("(cores=32)", "no queue can hold 32 cores per local job: the largest queue offers 16 (c/gpu)"),
        ("(gpus=4)", "no queue has 4 GPU(s) per node: the largest queue offers 2 (c/gpu)"),
        ("(wholenode=true)(cores=32)", "32 cores per local job on a whole node"),
    ],
)
def test_a_shape_no_queue_holds_names_what_was_asked_and_the_largest(rsl, words):
    with pytest.raises(NoEligibleQueue) as e:
        fitting(shape(rsl), queues())
    assert words in str(e.value)


def test_memory_no_queue_gives():
    res = {"ce": {"c": {"queue": {"a": {"MaxRAM": 2000}, "b": {"MaxRAM": 4000}}}}}
    with pytest.raises(NoEligibleQueue) as e:
        fitting(shape("(maxmemory=8000)"), parse_resources(res).queues)
    assert "no queue gives 8000 MB to one local job: the largest queue offers 4000 (c/b) MB (MaxRAM)" in str(e.value)


# --- the plan -----------------------------------------------------------------------------------


def test_the_plan_records_the_shape_and_why(tmp_path):
    plan = plan_of(tmp_path, "(xcount=8)(count=3)(maxmemory=8000)")
    assert plan.n == 3 and plan.queue == "short"
    assert plan.shape.cores == 8
    attrs = plan.record_attrs()
    assert (attrs["cores"], attrs["memoryMB"], attrs["shapeBy"]) == ("8", "8000", "cores=xcount memoryMB=maxmemory")
    assert "Each local job: 8 cores, 8000 MB (cores from xcount, memoryMB from maxmemory)." in plan.explanation
    assert all(s.env["JIM_CORES"] == "8" and s.env["OMP_NUM_THREADS"] == "8" for s in plan.slices)


def test_the_jobs_own_omp_num_threads_wins(tmp_path):
    plan = plan_of(tmp_path, "(cores=4)(environment=(OMP_NUM_THREADS 2))")
    assert plan.slices[0].env["JIM_CORES"] == "4" and "OMP_NUM_THREADS" not in plan.slices[0].env


def test_the_queue_is_chosen_by_shape(tmp_path):
    assert plan_of(tmp_path, "(gpus=1)").queue == "gpu"
    assert plan_of(tmp_path, "(cores=12)").queue == "gpu"
    plan = plan_of(tmp_path, "(wholenode=true)")
    assert (plan.queue, plan.shape.cores, plan.shape.by["cores"]) == ("short", 8, "whole node (CoresPerNode)")


@pytest.mark.parametrize("rsl", ["(cores=32)", "(gpus=3)", "(wholenode=true)(cores=17)"])
def test_a_shape_no_queue_holds_is_refused_at_submit_with_134(tmp_path, rsl):
    with pytest.raises(NoEligibleQueue) as e:
        plan_of(tmp_path, rsl)
    assert e.value.gram_error == GramError.RSL_SCHEDULER_SPECIFIC
    assert not (tmp_path / "home" / "jobs").exists()


def test_requirements_and_shape_together(tmp_path):
    with pytest.raises(NoEligibleQueue) as e:
        plan_of(tmp_path, '(requirements="WallTimeLimit=80000")(gpus=4)')
    assert "meeting the requirements" in str(e.value) and "(c/gpu)" in str(e.value)


def test_without_queues_the_site_cap_and_the_fork_host_bound_the_shape(tmp_path):
    with pytest.raises(PlanError) as e:
        plan_of(tmp_path, "(cores=9)", resources=False, max_cores_per_job=8)
    assert "over the site's max_cores_per_job of 8" in str(e.value)
    with pytest.raises(PlanError) as e:
        plan_of(tmp_path, "(cores=4096)", resources=False)
    assert "this host has" in str(e.value)
    with pytest.raises(PlanError) as e:
        plan_of(tmp_path, "(gpus=64)", resources=False)
    assert "GPU" in str(e.value)
    assert plan_of(tmp_path, "(cores=1)", resources=False).shape.cores == 1


# --- the splitter in core-seconds ---------------------------------------------------------------


def mc(events: int, cpe: float, extra: str = "") -> str:
    return f"(jimtype=montecarlo)(events={events})(cpuperevent={cpe:g}){extra}"


def test_more_cores_per_local_job_mean_more_events_each(tmp_path):
    one = plan_of(tmp_path, mc(1000, 10))
    eight = plan_of(tmp_path, mc(1000, 10, "(cores=8)"))
    # 3600 s recommended against queue short's 3600 s x 0.8 = 2880 s: 288 events on one core,
    # 8 x 288 on eight
    assert (one.n, one.attrs["perJob"]) == (4, 288)
    assert (eight.n, eight.attrs["perJob"]) == (1, 1000)
    assert eight.attrs["estSecondsPerJob"] == "1250"
    assert "10 s/event / 8 cores" in eight.explanation


def test_core_efficiency_slows_multicore_jobs(tmp_path):
    plan = plan_of(tmp_path, mc(1000, 10, "(cores=8)"), core_efficiency=0.5)
    assert plan.attrs["estSecondsPerJob"] == "2500"
    assert "8 cores x efficiency 0.5" in plan.explanation


def test_an_event_too_long_for_one_core_widens_the_job(tmp_path):
    # one event of 20000 s; queue short allows 2880 s: 7 cores (20000 / 7 = 2857 s)
    plan = plan_of(tmp_path, mc(10, 20000))
    assert (plan.n, plan.shape.cores, plan.shape.by["cores"]) == (10, 7, "one event within the time limit")
    assert plan.attrs["cores"] == "7"
    assert dry_run_json(parse_rsl("&" + EXE + mc(10, 20000)), plan, [["x"]] * plan.n)["shape"]["cores"] == 7


def test_widening_stops_at_the_queues_cores_and_a_stated_count_is_kept(tmp_path):
    with pytest.raises(PlanError) as e:
        plan_of(tmp_path, mc(10, 30000))  # 30000 / 8 = 3750 s > 2880 s
    assert "one event needs 3750 s on 8 cores" in str(e.value)
    with pytest.raises(PlanError) as e:
        plan_of(tmp_path, mc(10, 20000, "(cores=2)"))
    assert "one event needs 10000 s on 2 cores" in str(e.value)


def test_without_queues_widening_needs_the_sites_max_cores(tmp_path):
    with pytest.raises(PlanError):
        plan_of(tmp_path, mc(10, 400000), resources=False)
    plan = plan_of(tmp_path, mc(10, 400000), resources=False, max_cores_per_job=2)
    assert plan.shape.cores == 2


# --- through jim itself -------------------------------------------------------------------------


def test_a_two_core_job_runs_with_its_cores_in_its_environment_and_status_shows_them(jim_env, tmp_path):
    """On the fork backend: the local job sees ``JIM_CORES`` and ``OMP_NUM_THREADS``, the record's plan
    has the shape, ``jim status`` shows it; a shape beyond this host is refused with 134, nothing recorded."""
    out = tmp_path / "env.txt"
    job = jim_env.submit(
        f'&(executable=/bin/sh)(arguments=-c "echo $JIM_CORES $OMP_NUM_THREADS > {out}")(xcount=2)(maxmemory=100)'
    )
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    assert out.read_text().split() == ["2", "2"]
    plan = jim_env.status(job)["plan"]
    assert (plan["cores"], plan["memoryMB"], plan["shapeBy"]) == ("2", "100", "cores=xcount memoryMB=maxmemory")
    text = jim_env.run("status", job).stdout
    assert "each local job: 2 cores, 100 MB" in text
    before = jim_env.job_ids()
    refused = jim_env.protocol("submit", "--rsl", "&(executable=/bin/true)(cores=4096)")
    assert (refused["ERROR"], refused["_rc"]) == ("134", "1")
    assert refused["MESSAGE"].startswith("4096 cores per local job asked; this host has")
    assert jim_env.job_ids() == before


@pytest.mark.parametrize("jobtype", ["single", "mpi"])
def test_grams_single_and_mpi_jobs_are_one_local_job_of_count_slots(tmp_path, jobtype):
    plan = plan_of(tmp_path, f"(count=8)(jobtype={jobtype})")
    assert (plan.n, plan.binding, plan.shape.cores) == (1, f"jobtype-{jobtype}", 8)
    copies = plan_of(tmp_path, "(count=8)(jobtype=multiple)(xcount=2)")
    assert (copies.n, copies.shape.cores) == (8, 2)
