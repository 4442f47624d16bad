"""DIRAC's JDL as DIRAC writes it: RFC #15's parametric manifest (planned, and run end to end on fork),
DIRAC's multi-parameter form (its own Test_ParametricJob.py cases), RFC #7's requirements, and the
attributes that mean nothing at a site (accepted and recorded)."""

from __future__ import annotations

import json
import tarfile

import pytest

from jim.config import SiteLimits
from jim.errors import DescriptionError, InvalidAttribute
from jim.handlers.base import Plan
from jim.handlers.parametric import ParametricHandler
from jim.jobdesc import parse_jdl

# DIRAC RFC #15 (the Splitter executor), its originating manifest exactly as written there.
RFC15 = """\
Executable = "/bin/echo";
JobName = "parametric_${SplitSourceJob}:${SplitID}";
Arguments = "$Parameter";
Parameters = 10;
ParameterStep = 1;
ParameterFactor = 1.3;
StdOutput = "StdOut_$SplitID";
StdError = "StdErr_$SplitID";
OutputSandbox = { "StdOut_$SplitID","StdErr_$SplitID" };
Splitter = Parametric;
"""
#: p[0] = 1, p[i] = p[i-1] * 1.3 + 1: the RFC's generated manifest 02 has Arguments = 3.99.
RFC15_VALUES = ["1.0", "2.3", "3.99", "6.187", "9.0431", "12.75603", "17.582839", "23.8576907"]

# DIRAC's Test_ParametricJob.py: TEST_JDL_MULTI gives the arguments "1 a", "3 b", "7 c" and names Test_0..2.
DIRAC_MULTI = """
[
    Executable = "my_executable";
    Arguments = "%(A)s %(B)s";
    JobName = "Test_%n";
    Parameters = 3;
    ParameterStart.A = 1;
    ParameterStep.A = 1;
    ParameterFactor.A = 2;
    Parameters.B = { "a","b","c" };
]
"""
DIRAC_MULTI_BAD = DIRAC_MULTI.replace('{ "a","b","c" }', '{ "a","b","c","d" }')


def plan_json(jim_env, tmp_path, text: str) -> dict:
    path = tmp_path / "job.jdl"
    path.write_text(text)
    proc = jim_env.run("plan", "--dry-run", "--jdl", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def plan_error(jim_env, tmp_path, text: str) -> str:
    path = tmp_path / "job.jdl"
    path.write_text(text)
    proc = jim_env.run("plan", "--dry-run", "--jdl", str(path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, (proc.stdout, proc.stderr)
    return proc.stderr


def test_rfc15_manifest_plans_as_written(jim_env, tmp_path):
    plan = plan_json(jim_env, tmp_path, RFC15)
    assert plan["jobtype"] == "parametric" and plan["localJobs"] == 10
    jobs = plan["jobs"]
    assert [j["slice"]["splitId"] for j in jobs] == [f"{k:02d}" for k in range(10)]
    assert [j["params"]["Parameter"] for j in jobs[:8]] == RFC15_VALUES
    two = jobs[2]
    assert two["slice"]["jobname"] == "parametric_DRYRUN:02"
    assert (two["slice"]["stdout"], two["slice"]["stderr"]) == ("StdOut_02", "StdErr_02")
    # the local job's own stdout and stderr go to its StdOut_02 and StdErr_02, the command is the RFC's
    assert two["argv"][3:] == ["jim-stdio", "StdOut_02", "StdErr_02", "/bin/echo", "3.99"]


def test_rfc15_manifest_end_to_end_on_fork(jim_env, tmp_path):
    path = tmp_path / "rfc15.jdl"
    path.write_text(RFC15)
    out = jim_env.protocol("submit", "--jdl", str(path))
    assert out["JOB_STATE"] == "PENDING", out
    job = out["JOB_ID"]
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    st = jim_env.status(job)
    local = sorted(st["localJobs"], key=lambda lj: lj["index"])
    assert len(local) == 10 and all(lj["state"] == "DONE" for lj in local)
    assert [lj["slice"]["splitId"] for lj in local] == [f"{k:02d}" for k in range(10)]
    assert local[2]["slice"]["jobname"] == f"parametric_{job}:02"
    with tarfile.open(st["outputTar"]) as t:
        files = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
    names = sorted(files)
    for k in range(10):
        # (the wrapper adds the local job's index to an output's name, as to every output)
        (stdout,) = [n for n in names if n.split(".")[:2] == [f"{job}/outputs/StdOut_{k:02d}", str(k)]]
        (stderr,) = [n for n in names if n.split(".")[:2] == [f"{job}/outputs/StdErr_{k:02d}", str(k)]]
        assert files[stderr] == b""
        if k < len(RFC15_VALUES):
            assert files[stdout] == f"{RFC15_VALUES[k]}\n".encode()
    assert not any("StdOut_2." in n or "$SplitID" in n for n in names)


def test_dirac_multi_parameter_jdl_plans_as_dirac_expects(jim_env, tmp_path):
    plan = plan_json(jim_env, tmp_path, DIRAC_MULTI.replace("my_executable", "/bin/echo"))
    assert plan["localJobs"] == 3
    assert [j["argv"][1:] for j in plan["jobs"]] == [["1", "a"], ["3", "b"], ["7", "c"]]
    assert [j["slice"]["jobname"] for j in plan["jobs"]] == ["Test_0", "Test_1", "Test_2"]
    assert [(j["params"]["A"], j["params"]["B"]) for j in plan["jobs"]] == [("1", "a"), ("3", "b"), ("7", "c")]
    # DIRAC's TEST_JDL_MULTI_BAD: vectors of different lengths
    assert "different length of parameter vectors" in plan_error(jim_env, tmp_path, DIRAC_MULTI_BAD)


def test_percent_n_is_padded_as_dirac_pads_it_and_split_id_as_the_rfc(jim_env, tmp_path):
    """DIRAC's %n: the width of the last index (10 jobs: 0..9); $SplitID: the width of N (00..09)."""
    jdl = '[ Executable = "/bin/echo"; Arguments = "%n $SplitID"; JobName = "j_%n"; Parameters = 10; ]'
    plan = plan_json(jim_env, tmp_path, jdl)
    assert [j["argv"][1:] for j in plan["jobs"]] == [[str(k), f"{k:02d}"] for k in range(10)]
    assert [j["slice"]["jobname"] for j in plan["jobs"]][-1] == "j_9"
    eleven = plan_json(jim_env, tmp_path, jdl.replace("Parameters = 10", "Parameters = 11"))
    assert [j["argv"][1] for j in eleven["jobs"]] == [f"{k:02d}" for k in range(11)]


def test_dotted_names_parse_as_jdl():
    d = parse_jdl(DIRAC_MULTI)
    assert d.attrs["parameters.B"] == ["a", "b", "c"]
    assert (d.attrs["parameterstart.A"], d.attrs["parameterfactor.A"]) == (["1"], ["2"])
    # a dotted name elsewhere in an expression is not a definition
    d = parse_jdl('[ Executable = "/bin/true"; Requirements = other.Platform == "el9"; ]')
    assert d.attrs["requirements"] == ['other.Platform == "el9"']


def test_dirac_vocabulary_maps_to_jim():
    d = parse_jdl(
        """[
        Executable = "run.sh"; StdOutput = "std.out"; StdError = "std.err";
        InputSandbox = { "run.sh", "data.txt" }; OutputSandbox = { "std.out", "*.root" };
        Site = { "JIM.TEST.site", "LCG.Other.org" }; BannedSite = "LCG.Bad.org";
        Platform = "x86_64-el9"; CPUTime = 3600; Tags = { "cvmfs" };
        JobGroup = "g1"; Priority = 3; JobType = "User"; OwnerGroup = "lhcb_user"; LogLevel = "DEBUG";
        ]"""
    )
    a = d.attrs
    assert (a["stdout"], a["stderr"]) == (["std.out"], ["std.err"])
    assert (a["inputfiles"], a["outputs"]) == (["run.sh", "data.txt"], ["std.out", "*.root"])
    assert sorted(a["requirements"]) == sorted(
        [
            "Site=JIM.TEST.site,LCG.Other.org",
            'Site =!= "LCG.Bad.org"',
            "Platform=x86_64-el9",
            "MaxCPUTime=3600",
            "Tag=cvmfs",
        ]
    )
    # what means nothing at a site is kept as given (DIRAC's JobType apart from GRAM's jobtype)
    assert (a["jobgroup"], a["priority"], a["diracjobtype"]) == (["g1"], ["3"], ["User"])
    assert a["ownergroup"] == ["lhcb_user"]
    assert "jobtype" not in a
    d.check_known()


def test_recorded_attributes_are_accepted_by_plan(jim_env, tmp_path):
    plan = plan_json(
        jim_env,
        tmp_path,
        '[ Executable = "/bin/true"; JobGroup = "g"; Priority = 1; JobType = "User"; OwnerGroup = "vo_user"; ]',
    )
    assert plan["localJobs"] == 1


RESOURCES = """
[resources]
Site = "JIM.TEST.site"
[resources.ce.localhost.queue.el8]
Platform = ["x86_64-el8"]
MaxCPUTime = 7200
[resources.ce.localhost.queue.el9]
Platform = ["x86_64-el9"]
MaxCPUTime = 3600
"""


def test_rfc7_requirements_choose_the_queue(jim_env, tmp_path):
    jim_env.config.write_text(jim_env.config.read_text() + RESOURCES)
    exe = 'Executable = "/bin/true";'
    assert plan_json(jim_env, tmp_path, f'[ {exe} Platform = "x86_64-el9"; ]')["queue"] == "el9"
    assert plan_json(jim_env, tmp_path, f"[ {exe} CPUTime = 5000; ]")["queue"] == "el8"
    assert plan_json(jim_env, tmp_path, f'[ {exe} Site = "JIM.TEST.site"; CPUTime = 100; ]')["queue"] is not None
    assert "Site" in plan_error(jim_env, tmp_path, f'[ {exe} Site = "LCG.Other.org"; ]')
    assert "Site" in plan_error(jim_env, tmp_path, f'[ {exe} BannedSite = {{ "JIM.TEST.site" }}; ]')


@pytest.mark.parametrize(
    "jdl, fragment",
    [
        ('Executable = "/bin/true"; Splitter = ByInputData;', "Splitter must be Parametric"),
        ('Executable = "/bin/true"; Splitter = Parametric; JimType = "generic";', "both give jimtype"),
        ('Executable = "/bin/true"; StdOutput = "a"; Stdout = "b";', "both give stdout"),
        ('Executable = "/bin/true"; Site = "A\\" || true || \\"";', "values must be names"),
        ('Executable = "/bin/true"; Platform = { "el9", "a,b" };', "values must be names"),
        ('Executable = "/bin/true"; CPUTime = "lots";', "must be a number of seconds"),
        ('Executable = "/bin/true"; OwnerGroups = "x";', "not supported"),
    ],
)
def test_bad_dirac_jdl_is_refused_with_a_reason(jdl, fragment):
    with pytest.raises(DescriptionError) as e:
        d = parse_jdl(f"[ {jdl} ]")
        d.check_known()
    assert fragment in e.value.message


@pytest.mark.parametrize(
    "stdout, fragment",
    [('"../StdOut_$SplitID"', "one plain file name"), ('"same"', None)],
)
def test_parametric_stdout_names(jim_env, tmp_path, stdout, fragment):
    jdl = f'[ Executable = "/bin/echo"; Parameters = 2; Splitter = Parametric; StdOutput = {stdout}; ]'
    if fragment:
        assert fragment in plan_error(jim_env, tmp_path, jdl)
    else:  # the same for every local job: the grid job's merged stdout, as GRAM's
        jobs = plan_json(jim_env, tmp_path, jdl)["jobs"]
        assert [j["argv"] for j in jobs] == [["/bin/echo"], ["/bin/echo"]]


def test_splitter_refusal_is_a_gram_error(jim_env, tmp_path):
    path = tmp_path / "bad.jdl"
    path.write_text('[ Executable = "/bin/true"; Splitter = Nope; ]')
    out = jim_env.protocol("submit", "--jdl", str(path))
    assert out["ERROR"] == "134" and "Splitter must be Parametric" in out["MESSAGE"], out
    assert InvalidAttribute.gram_error == 134


def test_every_attribute_of_a_one_line_jdl_is_read():
    # old-style JDL with its definitions on one line: the ClassAd library alone reads only the first
    d = parse_jdl('Executable = "/bin/echo"; Arguments = "a b"; Splitter = Parametric; Parameters = 2;')
    assert (d.attrs["arguments"], d.attrs["jimtype"], d.attrs["parameters"]) == (["a", "b"], ["parametric"], ["2"])
    for text in ('Executable = "/bin/true"\nExecutable = "/bin/false"\n', '[ Executable = "a"; executable = "b"; ]'):
        with pytest.raises(DescriptionError, match="2 attribute definitions, 1 read"):
            parse_jdl(text)


def test_a_fresh_handler_gives_the_same_commands_from_the_recorded_description():
    desc = parse_jdl(RFC15)
    first = ParametricHandler(SiteLimits(max_local_jobs=100), grid_job_id="20260101-000000-abcdef")
    plan = first.getNumSubmissionTimes(desc)
    argvs = [first.getCommandAndArguments(desc, plan, s) for s in plan.slices]
    assert "stdout" not in desc.attrs and "StdOut_02" in desc.attrs["outputs"]
    recorded = type(desc)(json.loads(json.dumps(desc.to_json())), source_format="jdl")
    again = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    fresh = ParametricHandler(SiteLimits(max_local_jobs=100), grid_job_id="20260101-000000-abcdef")
    assert [fresh.getCommandAndArguments(recorded, again, s) for s in again.slices] == argvs


def test_stdinput_is_every_local_jobs_stdin_on_fork(jim_env, tmp_path):
    """DIRAC's ``StdInput`` is jim's ``stdin``: the file's bytes reach every local job, as from RSL."""
    data = b"first line\n\xff\xfe not UTF-8\x00\nlast line, no newline"
    work = tmp_path / "work"
    work.mkdir()
    (work / "in.txt").write_bytes(data)
    assert parse_jdl('[ Executable = "/bin/cat"; StdInput = "in.txt"; ]').attrs["stdin"] == ["in.txt"]
    path = tmp_path / "cat.jdl"
    path.write_text(
        f'[ Executable = "/bin/cat"; StdInput = "in.txt"; Directory = "{work}"; StdOutput = "{tmp_path / "out"}";'
        " Parameters = 2; Splitter = Parametric; ]"
    )
    out = jim_env.protocol("submit", "--jdl", str(path))
    assert out["JOB_STATE"] == "PENDING", out
    job = out["JOB_ID"]
    assert jim_env.wait(job)["JOB_STATE"] == "DONE", jim_env.run("status", job).stdout
    for k in range(2):
        assert (jim_env.home / "jobs" / job / "local" / str(k) / "stdout").read_bytes() == data, f"local job {k}"
    assert (tmp_path / "out").read_bytes() == data + data  # the grid job's stdout: the local jobs' concatenated


def test_stdinput_and_stdin_together_are_refused():
    with pytest.raises(DescriptionError, match="both give stdin"):
        parse_jdl('[ Executable = "/bin/cat"; StdInput = "a"; Stdin = "b"; ]')


TAGGED = """
[resources]
Site = "JIM.TEST.site"
[resources.ce.localhost.queue.ab]
WallTimeLimit = 100
Tag = ["a", "b"]
[resources.ce.localhost.queue.abc]
WallTimeLimit = 200
Tag = ["a", "b", "c"]
[resources.ce.localhost.queue.mp]
WallTimeLimit = 50
Tag = ["a", "b", "c", "mp"]
RequiredTag = "mp"
"""


def test_tags_need_every_tag_and_required_tags_refuse_other_jobs(jim_env, tmp_path):
    """DIRAC's matcher: the job's Tags all among the queue's Tag; the queue's RequiredTag all among the job's Tags."""
    exe = 'Executable = "/bin/true";'
    jim_env.config.write_text(jim_env.config.read_text() + TAGGED)
    assert plan_json(jim_env, tmp_path, f'[ {exe} Tags = {{ "a", "b" }}; ]')["queue"] == "ab"
    assert plan_json(jim_env, tmp_path, f'[ {exe} Tags = {{ "a", "c" }}; ]')["queue"] == "abc"
    assert plan_json(jim_env, tmp_path, f'[ {exe} Tags = {{ "c", "mp" }}; ]')["queue"] == "mp"
    assert plan_json(jim_env, tmp_path, f"[ {exe} ]")["queue"] == "ab"  # mp, the shortest, requires "mp"
    assert 'Tag has all of ["a", "d"]' in plan_error(jim_env, tmp_path, f'[ {exe} Tags = {{ "a", "d" }}; ]')


def test_a_job_no_queue_takes_for_its_tags_is_refused_at_submit(jim_env, tmp_path):
    jim_env.config.write_text(
        jim_env.config.read_text() + '\n[resources.ce.localhost.queue.mp]\nTag = ["mp"]\nRequiredTag = "mp"\n'
    )
    path = tmp_path / "job.jdl"
    path.write_text('[ Executable = "/bin/true"; ]')
    jobs = jim_env.job_ids()
    out = jim_env.protocol("submit", "--jdl", str(path))
    assert out["ERROR"] == "134", out
    assert out["MESSAGE"].endswith(
        'no queue takes a job without tags: each has a RequiredTag the job does not ask for (mp: ["mp"])'
    ), out
    assert "Traceback" not in out["_stderr"] and jim_env.job_ids() == jobs
    path.write_text('[ Executable = "/bin/true"; Tags = { "mp" }; ]')
    assert jim_env.protocol("submit", "--jdl", str(path))["JOB_STATE"] == "PENDING"
