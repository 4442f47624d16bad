"""WMCore's cases end to end on fork: the 7-file EventAware plan, and local jobs kept to one location."""

from __future__ import annotations

import json
import tarfile

from support.jimcli import write_config

# EventAwareLumiBased_t.testD_NoFileSplitNoHardLimit: (name, events, run, lumis) -> run R, lumis R*n .. R*n+n-1
SEVEN = [("file1", 250, 0, 5), ("file2", 600, 1, 1), ("file3", 1200, 2, 2), ("file4", 100, 3, 1)]
SEVEN += [("file5", 30, 4, 1), ("file6", 10, 5, 1), ("file7", 151, 6, 3)]


def test_wmcore_seven_file_event_aware_plan_has_seven_jobs(jim_env):
    write_config(jim_env, "[handlers.reprocessing]\nsplit_on_run = false\n")
    files = " ".join(f'(/this/is/{n} {ev} "{r}:{r * k}-{r * k + k - 1}")' for n, ev, r, k in SEVEN)
    rsl = f"&(executable=/bin/true)(jimtype=reprocessing)(splitting=eventaware)(eventsperjob=150)(inputdata={files})"
    plan = json.loads(jim_env.run("plan", "--dry-run", "--json", "--rsl", rsl).stdout)
    assert len(plan["jobs"]) == 7
    assert [j["env"]["JIM_LUMI_MASK"] for j in plan["jobs"]] == [
        '{"0":[[0,2]]}',
        '{"0":[[3,4]]}',
        '{"1":[[1,1]]}',
        '{"2":[[4,4]]}',
        '{"2":[[5,5]]}',
        '{"3":[[3,3]],"4":[[4,4]],"5":[[5,5]]}',
        '{"6":[[18,20]]}',
    ]
    assert plan["jobs"][-1]["slice"]["estimatedEvents"] == "150"


def test_local_jobs_never_mix_locations(jim_env, tmp_path):
    places = {"a": "SE_A", "b": "SE_B", "c": "SE_A", "d": "SE_B"}
    for name in places:
        (tmp_path / name).write_text(f"{name}\n")
    files = " ".join(f"({tmp_path / n} 10 @{p})" for n, p in places.items())
    job = jim_env.submit(
        '&(executable=/bin/sh)(arguments=-c "cat $(cat $JIM_INPUT_FILE_LIST)")'
        f"(jimtype=reprocessing)(inputdata={files})(filesperjob=4)"
    )
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    st = jim_env.status(job)
    outs = {}
    with tarfile.open(st["outputTar"]) as t:
        for m in t.getmembers():
            if m.name.startswith(f"{job}/stdout."):
                outs[int(m.name.split("/")[-1].split(".")[1])] = t.extractfile(m).read().decode()
    assert outs == {0: "a\nc\n", 1: "b\nd\n"}
