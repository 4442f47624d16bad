"""ARC's job semantics for files, end to end on fork: the local jobs see the job's directory, and
the declared outputs come back under their names (jim/keep.py, sandbox/jimworkdir.py).

* ``directoryview``: every local job runs in a private view of the job's directory: an input
  there is seen under its name; the declared outputs are each local job's own;
* ``keepfiles`` merged by ``outputmerge`` (``concat``, ``first``, ``indexed``) into the
  directory before the grid job ends, every local job's copy also in the output tar as
  ``kept/<k>/<name>``;
* refused at submit, nothing recorded: names that leave the directory, two outputs of one name
  after the merge, an indexed merge of a file the CE uploads;
* a symbolic link planted where a kept file goes is never followed.
"""

from __future__ import annotations

import os
import tarfile

import pytest

from jim import keep
from jim.arc import grami
from jim.handlers import get_handler_class
from jim.jobdesc import from_mapping

#: Each local job: reads the input through the view, writes its own out.dat and plots/p.txt.
SCRIPT = (
    "cat input.txt > out.dat && echo $JIM_INDEX >> out.dat && "
    "echo p$JIM_INDEX > plots/p.txt && test ! -e other.dat && echo private > other.dat"
)


def session(tmp_path):
    d = tmp_path / "session"
    d.mkdir()
    (d / "input.txt").write_text("hello\n")
    return d


def rsl(d, rule: str, extra: str = "") -> str:
    return (
        f'&(executable=/bin/sh)(arguments=-c "{SCRIPT}")(count=3)(directory={d})(directoryview=true)'
        f"(keepfiles=out.dat plots/)(outputmerge={rule}){extra}"
    )


def kept_members(tar_path: str, job: str) -> dict[str, bytes]:
    with tarfile.open(tar_path) as t:
        return {
            m.name[len(job) + 1 :]: t.extractfile(m).read()
            for m in t.getmembers()
            if m.name.startswith(f"{job}/kept/") and m.isfile()
        }


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ("concat", {"out.dat": "hello\n0\nhello\n1\nhello\n2\n", "plots/p.txt": "p0\np1\np2\n"}),
        ("first", {"out.dat": "hello\n0\n", "plots/p.txt": "p0\n"}),
        (
            "indexed",
            {f"out.{k}.dat": f"hello\n{k}\n" for k in range(3)} | {f"plots/p.{k}.txt": f"p{k}\n" for k in range(3)},
        ),
    ],
)
def test_local_jobs_see_the_directory_and_outputs_merge(jim_env, tmp_path, rule, expected):
    d = session(tmp_path)
    job = jim_env.submit(rsl(d, rule))
    assert jim_env.wait(job)["JOB_STATE"] == "DONE", jim_env.run("status", job).stdout
    merged = {
        str(p.relative_to(d)): p.read_text() for p in sorted(d.rglob("*")) if p.is_file() and p.name != "input.txt"
    }
    assert merged == expected
    assert (d / "input.txt").read_text() == "hello\n"  # (read through the view, never written)
    assert not (d / "other.dat").exists()  # (an undeclared file stays the local job's)
    members = kept_members(jim_env.status(job)["outputTar"], job)
    assert members == {
        **{f"kept/{k}/out.dat": f"hello\n{k}\n".encode() for k in range(3)},
        **{f"kept/{k}/plots/p.txt": f"p{k}\n".encode() for k in range(3)},
    }


def test_the_job_type_gives_the_default_rule(jim_env, tmp_path):
    assert get_handler_class("generic").output_merge == "concat"
    assert get_handler_class("concat").output_merge == "concat"
    for jobtype in ("montecarlo", "reprocessing", "parametric"):
        assert get_handler_class(jobtype).output_merge == "indexed"
    d = session(tmp_path)
    job = jim_env.submit(
        f'&(executable=/bin/sh)(arguments=-c "echo $JIM_INDEX > out.dat")(jimtype=montecarlo)(events=2)'
        f"(eventsperjob=1)(directory={d})(directoryview=true)(keepfiles=out.dat)"
    )
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    assert {p.name: p.read_text() for p in d.glob("out*")} == {"out.0.dat": "0\n", "out.1.dat": "1\n"}


@pytest.mark.parametrize(
    ("attrs", "why"),
    [
        ("(keepfiles=../x)", "leaves the job's directory"),
        ("(keepfiles=/etc/x)", "is absolute"),
        ("(keepfiles=a/../../b)", "leaves the job's directory"),
        ("(keepfiles=a.dat ./a.dat)", "twice"),
        ("(keepfiles=plots/ plots/a.png)", "is inside"),
        ("(keepfiles=a.dat a.1.dat)(outputmerge=indexed)", "indexed"),
        ("(keepfiles=out.txt)(stdout=out.txt)", "stdout"),
        ('(keepfiles=("up.dat" "http://127.0.0.1:1/up.dat"))(outputmerge=indexed)', "uploaded"),
        ("(keepfiles=a.dat)(outputmerge=sorted)", "outputmerge must be one of"),
        ("(directoryview=maybe)", "directoryview must be true or false"),
    ],
)
def test_refused_at_submit_nothing_recorded(jim_env, tmp_path, attrs, why):
    out = jim_env.protocol("submit", "--rsl", f"&(executable=/bin/true)(count=2)(directory={tmp_path}){attrs}")
    assert out["_rc"] != "0" and "JOB_ID" not in out, out
    assert why in out.get("ERROR_MESSAGE", "") + out.get("MESSAGE", "") + out["_stderr"], out
    assert jim_env.job_ids() == []


def test_indexed_collisions_are_within_the_local_jobs():
    desc = from_mapping({"executable": ["/bin/true"], "keepfiles": ["a.dat", "a.5.dat"], "outputmerge": ["indexed"]})
    keep.check(desc, "concat", 5)  # (local jobs 0..4: a.5.dat is no local job's)
    with pytest.raises(Exception, match="local job 4"):
        keep.check(
            from_mapping({"executable": ["/bin/true"], "keepfiles": ["a.dat", "a.4.dat"], "outputmerge": ["indexed"]}),
            "concat",
            5,
        )
    assert keep.indexed_name("sub/.hidden.tar.gz", 3) == "sub/.hidden.3.tar.gz"
    assert keep.indexed_name("out", 0) == "out.0"


def test_a_planted_link_is_never_followed(jim_env, tmp_path):
    d = session(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "out.dat").write_text("precious\n")
    (d / "plots").symlink_to(victim)  # (where the merged plots/p.txt would go)
    (d / "out.dat").symlink_to(victim / "out.dat")  # (where the merged out.dat goes)
    job = jim_env.submit(rsl(d, "concat"))
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    assert sorted(p.name for p in victim.iterdir()) == ["out.dat"]
    assert (victim / "out.dat").read_text() == "precious\n"
    assert not (d / "out.dat").is_symlink() and (d / "out.dat").read_text() == "hello\n0\nhello\n1\nhello\n2\n"
    assert (d / "plots").is_symlink()
    log = (jim_env.home / "jobs" / job / "jim.log").read_text()
    assert "plots/p.txt" in log and "symbolic link" in log


def test_the_grami_declares_kept_files_and_a_view(tmp_path):
    text = (
        f"joboption_directory='{tmp_path}'\njoboption_arg_0='./run.sh'\n"
        "joboption_stdout='{d}/out.txt'\njoboption_outputfile_0='/out.txt'\n"
        "joboption_outputfile_1='/result.root'\njoboption_outputfile_2='/up.dat'\n"
        "joboption_outputfile_3='/plots/'\n"
    ).replace("{d}", str(tmp_path))
    desc, _ = grami.to_description(text, queues=set())
    assert desc.attrs["keepfiles"] == ["result.root", "up.dat", "plots/"]
    assert desc.get("directoryview") == "true" and not desc.has("outputs")
    grami.with_upload_urls(desc, "/out.txt\n/result.root\n/up.dat http://127.0.0.1:8/u\\ p\n/plots/\n")
    assert desc.attrs["keepfiles"] == ["result.root", ["up.dat", "http://127.0.0.1:8/u p"], "plots/"]
    assert [k.url for k in keep.declared(desc)] == ["", "http://127.0.0.1:8/u p", ""]


def test_a_view_names_nothing_it_should_not(tmp_path):
    """The wrapper's helper refuses a declared name that leaves the directory."""
    from jim.sandbox import jimworkdir  # (lazy: the node's module, imported as the package's here)

    for bad in ("../x", "/etc/x", "a/../../b"):
        with pytest.raises(ValueError):
            jimworkdir.split_name(bad)
    assert jimworkdir.split_name("a/./b/") == (["a", "b"], True)
    assert os.path.basename(jimworkdir.VIEW) == ".jim-view"
