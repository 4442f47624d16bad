"""The multi-node test Slurm itself (tests/services/slurm-cluster): jobs spread over its nodes, a
crashed node ends its jobs NODE_FAIL, partition ``high`` preempts partition ``normal``.

Part of the whole suite (scripts/test.sh, CI); alone, as root:
``.venv/bin/python -m pytest -p no:cacheprovider -m slurm_cluster tests/test_slurm_cluster.py``
(the fixture starts the cluster and stops it again; ``JIM_TEST_SLURM_CLUSTER_KEEP=1`` keeps it).
"""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.slurm_cluster, pytest.mark.slow]

ENDED = {"COMPLETED", "NODE_FAIL", "FAILED", "CANCELLED", "PREEMPTED", "TIMEOUT", "BOOT_FAIL", "OUT_OF_MEMORY"}


@pytest.fixture
def cluster(slurm_cluster):
    names: list[str] = []
    yield slurm_cluster, names
    for name in names:
        slurm_cluster.run(["scancel", "-n", name])


def test_jobs_spread_over_the_nodes_and_a_killed_node_fails_its_jobs(cluster):
    c, names = cluster
    name = f"jim-spread-{time.time_ns()}"
    names.append(name)
    nodes = c.nodes()
    assert len(nodes) >= 3
    out = c.jobs_dir / name
    out.mkdir()
    ids = [
        c.sbatch("--no-requeue", "-J", name, "-o", f"{out}/%j.out", "--wrap", "hostname; sleep 5") for _ in range(12)
    ]

    def all_running():
        st = c.squeue_states(ids)
        return st if len(st) == len(ids) and all(s == "RUNNING" for s, _ in st.values()) else None

    running = c.wait_for("all 12 jobs running", all_running, timeout=60, every=0.2)
    on_node = {n: [i for i, (_, where) in running.items() if where == n] for n in nodes}
    victim = next(n for n in reversed(nodes) if on_node[n])
    t_kill = time.monotonic()
    c.kill_node(victim)
    c.wait_node_down(victim)  # slurmctld notices the silent node after SlurmdTimeout

    def all_ended():
        st = c.squeue_states(ids)
        return st if len(st) == len(ids) and all(s in ENDED for s, _ in st.values()) else None

    ended = c.wait_for("every job ended", all_ended, timeout=120)
    print(f"killed {victim}: its jobs NODE_FAIL after {time.monotonic() - t_kill:.1f} s")
    assert {i: s for i, (s, _) in ended.items() if i in on_node[victim]} == dict.fromkeys(on_node[victim], "NODE_FAIL")
    assert {s for i, (s, _) in ended.items() if i not in on_node[victim]} == {"COMPLETED"}

    def accounted():
        rows = c.sacct(ids)
        return rows if len(rows) == len(ids) and all(r["State"] in ENDED for r in rows) else None

    rows = c.wait_for("sacct has the final records", accounted, timeout=60)
    assert {r["NodeList"] for r in rows} == set(nodes), "every node ran some of the jobs"
    for r in rows:
        if r["NodeList"] == victim:
            assert r["State"] == "NODE_FAIL"
        else:
            assert r["State"] == "COMPLETED"
            # the job ran on that node: its host name is the node's
            assert (out / f"{r['JobID']}.out").read_text().strip() == r["NodeList"]

    c.revive_node(victim)
    again = c.sbatch("-J", name, "-w", victim, "-o", f"{out}/again.out", "--wrap", "hostname")
    c.wait_for("a job on the revived node", lambda: c.squeue_states([again]).get(again, ("", ""))[0] == "COMPLETED")
    assert (out / "again.out").read_text().strip() == victim


def test_partition_high_preempts_jobs_of_partition_normal(cluster):
    c, names = cluster
    name = f"jim-preempt-{time.time_ns()}"
    names.append(name)
    cpus = c.run(["sinfo", "-h", "-n", "cn1", "-o", "%c"]).stdout.split()[0]
    # fill cn1 with a requeueable job and cn2 with a --no-requeue one, both in "normal"
    normal = ("-J", name, "-p", "normal", "-c", cpus, "-o", "/dev/null", "--wrap", "sleep 300")
    requeueable = c.sbatch("-w", "cn1", *normal)
    one_shot = c.sbatch("-w", "cn2", "--no-requeue", *normal)
    c.wait_for(
        "the normal jobs running",
        lambda: {s for s, _ in c.squeue_states([requeueable, one_shot]).values()} == {"RUNNING"},
    )
    high = [
        c.sbatch("-J", name, "-p", "high", "-w", node, "-c", "1", "-o", "/dev/null", "--wrap", "hostname")
        for node in ("cn1", "cn2")
    ]

    def settled():
        st = {i: s for i, (s, _) in c.squeue_states([requeueable, one_shot, *high]).items()}
        return st if all(st.get(i) == "COMPLETED" for i in high) and st.get(one_shot) in ENDED else None

    st = c.wait_for("the high jobs done", settled)
    assert st[one_shot] == "PREEMPTED"  # PreemptMode=REQUEUE, but it may not be requeued: it ends
    assert st[requeueable] == "PENDING"  # requeued

    # sacct -D: the requeued job's first run is PREEMPTED, its new instance waits
    want = [(requeueable, "PENDING"), (requeueable, "PREEMPTED"), (one_shot, "PREEMPTED")]

    def preempted_in_sacct():
        return sorted((r["JobID"], r["State"]) for r in c.sacct([requeueable, one_shot], duplicates=True))

    assert c.wait_for("sacct's PREEMPTED records", lambda: preempted_in_sacct() == want, timeout=60)
