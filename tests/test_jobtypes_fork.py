"""reprocessing and concat end to end on fork: each local job reads its own files.

The local jobs read the file list jim put in their sandbox
(``$JIM_INPUT_FILE_LIST``); a lumi section too long for the queue is recorded
FAILED on creation and never runs.
"""

from __future__ import annotations

import json
import tarfile

from support.jimcli import write_config


def stdouts(tar_path: str, job: str) -> dict[int, str]:
    out = {}
    with tarfile.open(tar_path) as t:
        for m in t.getmembers():
            name = m.name.split("/")[-1]
            if m.name.startswith(f"{job}/stdout."):
                out[int(name.split(".")[1])] = t.extractfile(m).read().decode()
    return out


def test_reprocessing_local_jobs_read_their_own_files(jim_env, tmp_path):
    for name in "abcde":
        (tmp_path / f"{name}.txt").write_text(f"content of {name}\n")
    files = " ".join(str(tmp_path / f"{n}.txt") for n in "abcde")
    job = jim_env.submit(
        '&(executable=/bin/sh)(arguments=-c "cat $(cat $JIM_INPUT_FILE_LIST)")'
        f"(jimtype=reprocessing)(inputdata={files})(filesperjob=2)"
    )
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    st = jim_env.status(job)
    assert st["plan"]["binding"] == "user-files-per-job" and st["plan"]["localJobs"] == "3"
    assert stdouts(st["outputTar"], job) == {
        0: "content of a\ncontent of b\n",
        1: "content of c\ncontent of d\n",
        2: "content of e\n",
    }


def test_event_aware_lumi_too_long_for_the_queue_fails_on_creation(jim_env):
    write_config(jim_env, "[resources.ce.here.queue.short]\nWallTimeLimit = 100\n")
    # 25 events per lumi of /d/a: two lumis per job; /d/big's one lumi needs 200 s > 0.8 x 100 s
    rsl = (
        '&(executable=/bin/sh)(arguments=-c "echo $JIM_LUMI_MASK")(jimtype=reprocessing)(splitting=eventaware)'
        '(eventsperjob=50)(cpuperevent=1)(inputdata=(/d/a 100 "1:1-4") (/d/big 200 "2:7"))'
    )
    plan = json.loads(jim_env.run("plan", "--dry-run", "--json", "--rsl", rsl).stdout)
    assert plan["queue"] == "short" and plan["timeLimit"] == "80"
    assert [bool(j["failedOnCreation"]) for j in plan["jobs"]] == [False, False, True]
    job = jim_env.submit(rsl)
    out = jim_env.wait(job)
    assert out["JOB_STATE"] == "FAILED"  # the site tolerates no failed local job
    st = jim_env.status(job)
    local = sorted(st["localJobs"], key=lambda lj: lj["index"])
    assert [lj["state"] for lj in local] == ["DONE", "DONE", "FAILED"]
    assert local[2]["evidence"] == "creation" and "run 2 lumi 7" in local[2]["reason"]
    assert local[2]["batchId"] is None
    assert stdouts(st["outputTar"], job) == {0: '{"1":[[1,2]]}\n', 1: '{"1":[[3,4]]}\n'}


def test_concat_merges_groups_by_size(jim_env, tmp_path):
    sizes = {"a": 400, "b": 500, "c": 300, "d": 900}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(name.encode() * size)
    out_dir = tmp_path / "merged"
    out_dir.mkdir()
    job = jim_env.submit(
        f'&(executable=/bin/sh)(arguments=-c "cat $JIM_INPUT_FILES > {out_dir}/m$JIM_INDEX")'
        f"(jimtype=concat)(directory={tmp_path})(inputdata=a b c d)(maxmergesize=1000)"
        "(minmergesize=0)"
    )
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    st = jim_env.status(job)
    assert st["plan"]["binding"] == "max-merge-size"
    assert {p.name: p.read_bytes() for p in out_dir.iterdir()} == {
        "m0": b"a" * 400 + b"b" * 500,
        "m1": b"c" * 300,
        "m2": b"d" * 900,
    }
