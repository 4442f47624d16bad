"""The job types over the splitters: montecarlo against queue limits, reprocessing, concat, parametric.

Handlers are built directly, with a queue from a parsed ``[resources]`` table,
as ``make_plan`` builds them; each table row is one documented case.
"""

from __future__ import annotations

import json

import pytest

from jim.config import SiteLimits
from jim.errors import ConfigError, InvalidAttribute, PlanError
from jim.handlers.base import LocalSlice
from jim.handlers.concat import ConcatHandler
from jim.handlers.montecarlo import MonteCarloHandler
from jim.handlers.parametric import ParametricHandler
from jim.handlers.reprocessing import ReprocessingHandler
from jim.jobdesc import parse_rsl
from jim.requirements import parse_resources

SITE = SiteLimits(recommended_cpu_per_job=3600, max_cpu_per_job=36000, max_local_jobs=100, default_events_per_job=250)

TREE = parse_resources(
    {
        "ce": {
            "ce1": {
                "MaxCPUTime": 20000,
                "queue": {
                    "short": {"WallTimeLimit": 1000},
                    "long": {"WallTimeLimit": 100000},
                    "fast": {"WallTimeLimit": 100000, "CPUPower": 4},
                    "cpu": {"WallTimeLimit": 100000, "MaxCPUTime": 5000},
                    "text": {"WallTimeLimit": "2000"},
                    "bad": {"WallTimeLimit": "two hours"},
                },
            }
        }
    }
)


def queue(name):
    return TREE.find(name) if name else None


def mc(extra: str, q: str | None = None, **opts):
    h = MonteCarloHandler(SITE, opts, queue=queue(q))
    return h.getNumSubmissionTimes(parse_rsl(f"&(executable=/bin/mc)(jimtype=montecarlo){extra}"))


# --- montecarlo against the chosen queue ----------------------------------------------------


@pytest.mark.parametrize(
    "extra, q, n, binding, per_job, limit",
    [
        # floor(0.8 * 1000 / 10) = 80 events: the queue's wall time binds, not the site's recommendation (360)
        ("(events=1000)(cpuperevent=10)", "short", 13, "queue-wall-time", 80, "800"),
        # a long queue: the site's recommendation decides, the limit is the CE's MaxCPUTime x 0.8
        ("(events=1000)(cpuperevent=10)", "long", 3, "site-recommended-cpu", 360, "16000"),
        # CPUPower 4: an event takes 2.5 s there, 1440 events per recommended hour
        ("(events=3000)(cpuperevent=10)", "fast", 3, "site-recommended-cpu", 1440, "16000"),
        # the queue's MaxCPUTime (0.8 x 5000 = 4000 s) under the site's maximum
        ("(events=1000)(cpuperevent=10)(eventsperjob=900)", "cpu", 3, "queue-cpu-time", 400, "4000"),
        # the CE's MaxCPUTime is inherited (0.8 x 20000 = 16000 s)
        ("(events=5000)(cpuperevent=10)(eventsperjob=5000)", "long", 4, "queue-cpu-time", 1600, "16000"),
        # a limit written as a string of digits is a number
        ("(events=1000)(cpuperevent=10)", "text", 7, "queue-wall-time", 160, "1600"),
        # the user's wish within the limit wins
        ("(events=1000)(cpuperevent=10)(eventsperjob=50)", "short", 20, "user-events-per-job", 50, "800"),
        # no CPU hint: nothing to check against the queue
        ("(events=1000)", "short", 4, "default-events-per-job", 250, None),
        # too many jobs for the cap: widened only while it fits the queue (100 x 80 = 8000 >= 5000)
        ("(events=5000)(cpuperevent=10)(maxlocaljobs=70)", "short", 63, "queue-wall-time", 80, "800"),
        ("(events=20000)(cpuperevent=1)(maxlocaljobs=5)", "long", 5, "max-local-jobs", 4000, "16000"),
    ],
)
def test_montecarlo_against_queue_limits(extra, q, n, binding, per_job, limit):
    plan = mc(extra, q)
    assert (plan.n, plan.binding, plan.attrs["perJob"]) == (n, binding, per_job)
    assert plan.attrs.get("timeLimit") == limit
    if limit is not None:
        assert all(float(s.attrs["estSeconds"]) <= float(limit) for s in plan.slices)
        assert plan.attrs["timeLimitBy"] in ("site-max-cpu", "queue-wall-time", "queue-cpu-time")


def test_montecarlo_safety_option():
    assert mc("(events=1000)(cpuperevent=10)", "short", safety=0.5).attrs["perJob"] == 50
    assert mc("(events=1000)(cpuperevent=10)", "short", safety=1.0).attrs["perJob"] == 100
    with pytest.raises(ConfigError, match="safety"):
        mc("(events=1000)(cpuperevent=10)", "short", safety=1.5)


@pytest.mark.parametrize(
    "extra, q, fragment",
    [
        ("(events=10)(cpuperevent=900)", "short", "queue short's wall-time limit of 1000 s x safety 0.8"),
        ("(events=10)(cpuperevent=40000)", None, "the site's maximum of 36000 s"),
        ("(events=5000)(cpuperevent=10)(maxlocaljobs=5)", "short", "over the limit of 5"),
        ("(events=10)(cpuperevent=1)", "bad", "WallTimeLimit must be a positive number"),
    ],
)
def test_montecarlo_refusals_name_the_limit(extra, q, fragment):
    with pytest.raises((PlanError, ConfigError)) as e:
        mc(extra, q)
    assert fragment in e.value.message


def test_montecarlo_explanation_says_which_limit():
    plan = mc("(events=1000)(cpuperevent=10)", "short")
    assert "queue wall time" in plan.explanation and "1000 s x safety 0.8 = 800 s" in plan.explanation


def test_handler_option_types_are_checked():
    with pytest.raises(ConfigError, match="expected true or false"):
        MonteCarloHandler(SITE, {"balanced": "yes"})
    with pytest.raises(ConfigError, match="expected a number"):
        MonteCarloHandler(SITE, {"safety": "high"})
    MonteCarloHandler(SITE, {"safety": 1})  # an integer is a number


# --- reprocessing ----------------------------------------------------------------------------


def reco(extra: str, q: str | None = None, **opts):
    h = ReprocessingHandler(SITE, opts, queue=queue(q))
    desc = parse_rsl(f"&(executable=/bin/reco)(jimtype=reprocessing){extra}")
    plan = h.getNumSubmissionTimes(desc)
    return plan, [h.getCommandAndArguments(desc, plan, s) for s in plan.slices]


FILES = '(inputdata=(/d/a 1000 "1:1-10") (/d/b 500 "1:11-15" "2:1-5") (/d/c 0))'


@pytest.mark.parametrize(
    "extra, opts, groups, binding",
    [
        ("(inputdata=/d/a /d/b /d/c)", {}, [["/d/a", "/d/b", "/d/c"]], "default-files-per-job"),
        (
            "(inputdata=/d/a /d/b /d/c)(filesperjob=2)",
            {"balanced": False},
            [["/d/a", "/d/b"], ["/d/c"]],
            "user-files-per-job",
        ),
        (
            "(inputdata=/d/a /d/b /d/c /d/d /d/e)(filesperjob=2)",
            {},
            [["/d/a", "/d/b"], ["/d/c", "/d/d"], ["/d/e"]],
            "user-files-per-job",
        ),
        (
            "(inputdata=/d/a /d/b /d/c /d/d /d/e)(maxlocaljobs=2)",
            {"files_per_job": 1},
            [["/d/a", "/d/b", "/d/c"], ["/d/d", "/d/e"]],
            "max-local-jobs",
        ),
    ],
)
def test_reprocessing_by_files(extra, opts, groups, binding):
    plan, argvs = reco(extra, **opts)
    assert [s.env["JIM_INPUT_FILES"].split() for s in plan.slices] == groups
    assert plan.binding == binding
    assert [s.env["JIM_INPUT_FILE_LIST"] for s in plan.slices] == [f"jim-inputdata/{k}.txt" for k in range(plan.n)]
    assert argvs[0] == ["/bin/reco"]


def test_reprocessing_files_as_arguments_option():
    plan, argvs = reco("(inputdata=/d/a /d/b /d/c)(filesperjob=2)", files_as_arguments=True)
    assert argvs == [["/bin/reco", "/d/a", "/d/b"], ["/bin/reco", "/d/c"]]


def test_reprocessing_by_events_never_spans_files_and_keeps_empty_files():
    plan, _ = reco(f"(splitting=events)(eventsperjob=400){FILES}", balanced=False)
    got = [(s.env["JIM_INPUT_FILES"], s.env["JIM_FIRST_EVENT"], s.env["JIM_LAST_EVENT"]) for s in plan.slices]
    assert got == [
        ("/d/a", "1", "400"),
        ("/d/a", "401", "800"),
        ("/d/a", "801", "1000"),
        ("/d/b", "1", "400"),
        ("/d/b", "401", "500"),
        ("/d/c", "1", ""),
    ]
    assert plan.binding == "user-events-per-job"


def test_reprocessing_by_events_from_the_queue_limit():
    plan, _ = reco(f"(splitting=events)(cpuperevent=2){FILES}", "short")
    assert plan.binding == "queue-wall-time" and plan.attrs["perJob"] == 400
    assert plan.attrs["timeLimit"] == "800" and plan.attrs["estSecondsPerJob"] == "668"  # 1000 as 334+333+333


def test_reprocessing_by_lumis_with_mask_and_whitelist():
    mask = '(lumimask="{""1"": [[3, 12]], ""2"": [[1, 2]]}")'
    plan, _ = reco(f"(splitting=lumis)(lumisperjob=4){FILES}{mask}")
    assert [json.loads(s.env["JIM_LUMI_MASK"]) for s in plan.slices] == [
        {"1": [[3, 6]]},
        {"1": [[7, 10]]},
        {"1": [[11, 12]]},
        {"2": [[1, 2]]},
    ]
    assert [s.env["JIM_RUNS"] for s in plan.slices] == ["1", "1", "1", "2"]
    plan, _ = reco(f"(splitting=lumis)(lumisperjob=100)(runwhitelist=2){FILES}")
    assert [json.loads(s.env["JIM_LUMI_MASK"]) for s in plan.slices] == [{"2": [[1, 5]]}]


def test_reprocessing_event_aware_fails_a_too_long_lumi_on_creation():
    files = '(inputdata=(/d/a 1000 "1:1-10") (/d/big 500 "3:1"))'
    plan, _ = reco(f"(splitting=eventaware)(eventsperjob=300)(cpuperevent=1){files}", "short")
    ok = [s for s in plan.slices if not s.failed_on_creation]
    assert sum(s.attrs["lumis"] for s in ok) == 11 and all(float(s.attrs["estSeconds"]) <= 800 for s in ok)
    plan, _ = reco(f"(splitting=eventaware)(eventsperjob=300)(cpuperevent=2){files}", "short")
    failed = [s for s in plan.slices if s.failed_on_creation]
    assert len(failed) == 1 and "run 3 lumi 1" in failed[0].failed_on_creation
    assert "over the job time limit of 800 s" in failed[0].failed_on_creation
    assert plan.attrs["failedOnCreation"] == 1


@pytest.mark.parametrize(
    "extra, exc, fragment",
    [
        ("", InvalidAttribute, "needs inputdata"),
        ("(inputdata=/d/a)(splitting=random)", InvalidAttribute, "splitting must be one of"),
        ("(inputdata=/d/a /d/b)(splitting=events)", InvalidAttribute, "missing for /d/a"),
        ("(inputdata=(/d/a x))(splitting=events)", InvalidAttribute, "events must be a non-negative integer"),
        ("(inputdata=(/d/a 10 1-5))(splitting=lumis)", InvalidAttribute, "RUN:1-10,12"),
        ("(inputdata=(/d/a 10 1:5-3))(splitting=lumis)", InvalidAttribute, "runs backwards"),
        ("(inputdata=/d/a)(splitting=lumis)", InvalidAttribute, "needs the files' lumi sections"),
        ("(inputdata=(/d/a 10 1:1))(splitting=lumis)(lumimask={)", InvalidAttribute, "lumimask is not JSON"),
        ("(inputdata=/d/a /d/a)", InvalidAttribute, "more than once"),
        ('(inputdata="/d/a b")', InvalidAttribute, "white space"),
        ("(inputdata=/d/a /d/b /d/c)(filesperjob=1)(maxlocaljobs=2)", PlanError, "more than the limit of 2"),
    ],
)
def test_reprocessing_refusals(extra, exc, fragment):
    with pytest.raises(exc) as e:
        reco(extra)
    assert fragment in e.value.message


def test_reprocessing_puts_file_lists_into_the_sandbox():
    class Area:
        def __init__(self):
            self.files = {}

        def add_bytes(self, name, data, executable=False):
            self.files[name] = data

    h = ReprocessingHandler(SITE, {"files_per_job": 2})
    desc = parse_rsl("&(executable=/bin/reco)(inputdata=/d/a /d/b /d/c)")
    plan = h.getNumSubmissionTimes(desc)
    area = Area()
    h.prepareWorkArea(desc, plan, area)
    assert area.files == {"jim-inputdata/0.txt": b"/d/a\n/d/b\n", "jim-inputdata/1.txt": b"/d/c\n"}


# --- concat ----------------------------------------------------------------------------------


def cat(extra: str, q: str | None = None, **opts):
    h = ConcatHandler(SITE, opts, queue=queue(q))
    return h.getNumSubmissionTimes(parse_rsl(f"&(executable=/bin/merge)(jimtype=concat){extra}"))


@pytest.mark.parametrize(
    "extra, groups, binding, flags",
    [
        (
            "(inputdata=(a 40) (b 50) (c 30) (d 5))(maxmergesize=100)(minmergesize=10)",
            [["a", "b"], ["c", "d"]],
            "max-merge-size",
            [{}, {}],
        ),
        (
            "(inputdata=(a 40) (b 500) (c 30))(maxmergesize=100)(minmergesize=35)",
            [["a"], ["b"], ["c"]],
            "oversize-input",
            [{}, {"oversize": "true"}, {"forced": "true"}],
        ),
        (
            "(inputdata=(a 10 60) (b 10 60) (c 10 10))(maxmergesize=100)(maxmergeevents=100)(minmergesize=0)",
            [["a"], ["b", "c"]],
            "max-merge-events",
            [{}, {}],
        ),
        ("(inputdata=(a 10) (b 10))(minmergesize=0)", [["a", "b"]], "single-merge", [{}]),
    ],
)
def test_concat_groups_and_binding(extra, groups, binding, flags):
    plan = cat("(directory=/data)" + extra)
    assert [s.env["JIM_INPUT_FILES"].split() for s in plan.slices] == [[f"/data/{f}" for f in g] for g in groups]
    assert plan.binding == binding
    assert [{k: v for k, v in s.attrs.items() if k in ("oversize", "forced")} for s in plan.slices] == flags
    assert [int(s.env["JIM_MERGE_SIZE"]) for s in plan.slices] == [s.attrs["size"] for s in plan.slices]


def test_concat_reads_sizes_it_is_not_given(tmp_path):
    (tmp_path / "x.dat").write_bytes(b"0" * 1234)
    plan = cat(f"(directory={tmp_path})(inputdata=x.dat (y.dat 10) (root://se//y.dat 5))")
    assert plan.slices[0].attrs["size"] == 1249
    assert plan.slices[0].env["JIM_INPUT_FILES"].split() == [
        str(tmp_path / "x.dat"),
        str(tmp_path / "y.dat"),
        "root://se//y.dat",
    ]
    with pytest.raises(InvalidAttribute) as e:
        cat(f"(directory={tmp_path})(inputdata=missing.dat)")
    assert "cannot read its size" in e.value.message and e.value.gram_error == 135


def test_concat_estimate_against_the_queue_limit():
    plan = cat("(inputdata=(a 2000000000))", "short")
    assert plan.slices[0].attrs["estSeconds"] == "1900"  # 300 s + 4 x 2 GB / 5 MB/s
    assert plan.attrs["timeLimit"] == "800" and "OVER the limit" in plan.explanation


# --- parametric ------------------------------------------------------------------------------


def param(extra: str, grid_job_id: str | None = "20260101-000000-abcdef", **opts):
    h = ParametricHandler(SITE, opts, grid_job_id=grid_job_id)
    desc = parse_rsl(f"&(jimtype=parametric){extra}")
    plan = h.getNumSubmissionTimes(desc)
    return desc, plan, [h.getCommandAndArguments(desc, plan, s) for s in plan.slices]


def test_parametric_substitutes_every_per_job_attribute():
    desc, plan, argvs = param(
        '(executable="/opt/$Parameter/run")(arguments="--x=${Parameter}" "$ParameterNumber/$SplitID" "$$HOME")'
        '(environment=(P "p$Parameter") (FIXED 1))(jobname="scan $Parameter")(outputs="out.$Parameter.txt" "*.log")'
        "(parameters=3)(parameterstart=0.1)(parameterstep=0.2)"
    )
    assert argvs == [
        ["/opt/0.1/run", "--x=0.1", "0/0", "$HOME"],
        ["/opt/0.3/run", "--x=0.3", "1/1", "$HOME"],
        ["/opt/0.5/run", "--x=0.5", "2/2", "$HOME"],
    ]
    assert [s.env for s in plan.slices] == [
        {"P": "p0.1", "FIXED": "1"},
        {"P": "p0.3", "FIXED": "1"},
        {"P": "p0.5", "FIXED": "1"},
    ]
    assert [s.params for s in plan.slices] == [{"Parameter": v} for v in ("0.1", "0.3", "0.5")]
    assert [s.attrs["jobname"] for s in plan.slices] == ["scan 0.1", "scan 0.3", "scan 0.5"]
    # the grid job gathers every local job's outputs
    assert desc.values("outputs") == ["out.0.1.txt", "*.log", "out.0.3.txt", "out.0.5.txt"]
    assert plan.binding == "parameters" and plan.attrs["total"] == 3
    assert "0.1, 0.3, 0.5" in plan.explanation


def test_parametric_named_sequences_and_split_ids():
    _, plan, argvs = param(
        '(executable=/bin/echo)(arguments="${Parameter.e}" "$SplitID" "$SplitSourceJob")'
        "(parameters.e=a b c d e f g h i j k)"
    )
    assert [a[1:3] for a in argvs][:2] == [["a", "00"], ["b", "01"]] and argvs[-1][1:3] == ["k", "10"]
    assert argvs[0][3] == "20260101-000000-abcdef"
    assert plan.slices[0].params == {"e": "a"}


def test_parametric_dry_run_has_no_grid_job_id():
    _, _, argvs = param('(executable=/bin/echo)(arguments="$SplitSourceJob")(parameters=2)', grid_job_id=None)
    assert argvs[0][1] == "DRYRUN"


def test_parametric_fresh_handler_gives_the_same_commands():
    desc, plan, argvs = param('(executable=/bin/echo)(arguments="$Parameter")(parameters=x y z)')
    fresh = ParametricHandler(SITE, grid_job_id="20260101-000000-abcdef")
    assert [fresh.getCommandAndArguments(desc, plan, s) for s in plan.slices] == argvs


@pytest.mark.parametrize(
    "extra, exc, fragment",
    [
        ("(executable=/bin/true)", InvalidAttribute, "need parameters"),
        ("(executable=/bin/true)(parameters=3)(count=2)", InvalidAttribute, "count must be 1"),
        ('(executable=/bin/true)(arguments="$Nope")(parameters=2)', InvalidAttribute, "unresolved placeholder $Nope"),
        ("(executable=/bin/true)(parameters=1 2)(parameters.x=a b c)", InvalidAttribute, "different length"),
        (
            '(executable=/bin/true)(parameters=2)(directory="/tmp/d.$Parameter")(parameterstep=1)',
            InvalidAttribute,
            "directory belongs to the whole grid job",
        ),
        (
            '(executable=/bin/true)(parameters=2)(stdout="sub/out.$Parameter")(parameterstep=1)',
            InvalidAttribute,
            "stdout varies between local jobs, so it must be one plain file name",
        ),
        ("(executable=/bin/true)(parameters=101)", PlanError, "more than the limit of 100"),
        ("(executable=/bin/true)(parameters=20)(maxlocaljobs=10)", PlanError, "user max local jobs"),
        ("(parameters=2)", InvalidAttribute, "no executable"),
    ],
)
def test_parametric_refusals(extra, exc, fragment):
    with pytest.raises(exc) as e:
        param(extra)
    assert fragment in e.value.message


def test_parametric_grid_wide_attribute_may_use_constant_placeholders():
    desc, plan, _ = param('(executable=/bin/true)(parameters=2)(stdout="out.$SplitSourceJob")')
    assert desc.values("stdout") == ["out.20260101-000000-abcdef"]


def test_parametric_max_jobs_option():
    with pytest.raises(PlanError, match="max_jobs for parametric jobs"):
        param("(executable=/bin/true)(parameters=6)", max_jobs=5)
    with pytest.raises(PlanError, match="site max local jobs"):
        param("(executable=/bin/true)(parameters=150)", max_jobs=200)  # the site's cap (100) is lower


def test_slices_record_their_facts():
    s = LocalSlice(attrs={"files": 2}, params={"Parameter": "0.1"}, failed_on_creation="too long", queue="short")
    assert s.record() == {
        "files": 2,
        "params": {"Parameter": "0.1"},
        "failed_on_creation": "too long",
        "queue": "short",
    }
