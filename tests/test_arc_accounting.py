"""The ARC diag's accounting keys (jim/arc/diag.py): what A-REX's accounting record (AAR) makes of them.

A-REX 6.17 and 7.0 read the diag line by line (``AAR::FetchJobData``): keys lower-cased, each
number the leading digits of its value (``WallTime=12s`` is 12, ``12.9s`` is 12), ``nodename``
lines collected, the last of any other key kept (the first ``Benchmark``).  ``_aar`` below reads a
diag the same way, so that each test checks what ARC's accounting database would hold: its
core-hours are ``UsedWalltime`` x ``CPUCount``, its CPU time ``UsedCPUUserTime`` +
``UsedCPUKernelTime``.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest
from lxml import etree

from jim.arc.diag import Attempt, accounting, attempts, benchmark_of, diag_text
from jim.arc.options import Options, parse_config
from jim.record import GridJob
from jim.record.usage import Source, Usage
from jim.states import Evidence, LocalState

from support.records import queued_record

T0 = 1_780_000_000.0  # (2026-05-28T20:26:40Z)


def _used(wall: float, cores: int = 1, user: float | None = None, system: float | None = 0.0, **kw) -> Usage:
    cpu_user = wall * 0.9 if user is None else user
    rss, node = kw.get("rss", 1000), kw.get("node", "n1")
    return Usage(
        Source.WRAPPER, cpu_user=cpu_user, cpu_system=system, max_rss_kb=rss, wall=wall, cores=cores, node=node
    )


def _aar(diag: str) -> dict[str, object]:
    """What A-REX's AAR::FetchJobData keeps of a diag's lines (its integer parsing included)."""
    out: dict[str, object] = {"nodenames": []}
    for line in diag.splitlines():
        key, sep, value = line.partition("=")
        if not sep or not key:
            continue
        key = key.lower()
        digits = ""
        for ch in value:
            if not ch.isdigit():
                break
            digits += ch
        if key == "nodename":
            out["nodenames"].append(value)  # type: ignore[attr-defined]
        elif key == "benchmark":
            out.setdefault("benchmark", value)
        elif digits:
            out[key] = int(digits)
    return out


def _core_seconds(aar: dict[str, object]) -> int:
    return int(aar["walltime"]) * int(aar["processors"])  # type: ignore[call-overload]


def test_parallel_split_job_is_its_cores_for_its_span_not_n_times_it():
    # 20 local jobs of one core, all at once, 100 s each: 20 cores for 100 s (the old keys: 2000 s x 20)
    tried = [Attempt(T0, T0 + 100, _used(100.0, user=95.0, system=1.5, node=f"n{k % 4}")) for k in range(20)]
    aar = _aar(diag_text(0, accounting(tried)))
    assert aar["processors"] == 20 and aar["walltime"] == 100
    assert _core_seconds(aar) == 2000  # (sum of wall x cores)
    assert aar["usertime"] == 1900 and aar["kerneltime"] == 30
    assert aar["nodenames"] == ["n0", "n1", "n2", "n3"]
    assert aar["lrmsstarttime"] and aar["lrmsendtime"]


def test_serial_local_jobs_are_one_core_for_their_sum():
    # one at a time: the widest moment is one core, and the wall time the sum (the job's span)
    tried = [Attempt(T0 + 50 * k, T0 + 50 * k + 40, _used(40.0)) for k in range(5)]
    keys = dict(accounting(tried))
    assert keys["Processors"] == "1" and keys["WallTime"] == "200s"
    assert keys["LRMSStartTime"] == time.strftime("%Y%m%d%H%M%SZ", time.gmtime(T0))
    assert keys["LRMSEndTime"] == time.strftime("%Y%m%d%H%M%SZ", time.gmtime(T0 + 240))


def test_multicore_local_jobs_and_a_failed_attempt_count_their_cores():
    # two 4-core local jobs overlapping for 50 s, and a 4-core attempt that failed before them
    tried = [
        Attempt(T0 - 30, T0 - 10, _used(20.0, cores=4)),
        Attempt(T0, T0 + 100, _used(100.0, cores=4)),
        Attempt(T0 + 50, T0 + 150, _used(100.0, cores=4)),
    ]
    keys = dict(accounting(tried))
    assert keys["Processors"] == "8"  # (the two at once)
    assert int(keys["WallTime"].rstrip("s")) * 8 == pytest.approx(4 * 220, rel=0.01)
    # the wall time is never longer than the job's span
    assert int(keys["WallTime"].rstrip("s")) <= 180


def test_an_attempt_ending_as_another_starts_is_not_a_wider_moment():
    tried = [Attempt(T0, T0 + 10, _used(10.0, cores=2)), Attempt(T0 + 10, T0 + 20, _used(10.0, cores=2))]
    assert dict(accounting(tried))["Processors"] == "2"


def test_keys_in_the_units_arex_reads():
    keys = accounting([Attempt(T0, T0 + 3, _used(2.6, user=2.4, system=0.6, rss=215040))], "HEPSPEC:12.5")
    assert keys == [
        ("WallTime", "3s"),  # (rounded: A-REX keeps the whole seconds before a dot)
        ("Processors", "1"),
        ("UserTime", "2s"),
        ("KernelTime", "1s"),
        ("MaxResidentMemory", "215040kB"),
        ("LRMSStartTime", time.strftime("%Y%m%d%H%M%SZ", time.gmtime(T0))),
        ("LRMSEndTime", time.strftime("%Y%m%d%H%M%SZ", time.gmtime(T0 + 3))),
        ("nodename", "n1"),
        ("Benchmark", "HEPSPEC:12.5"),
    ]
    assert diag_text(3, keys).splitlines()[:3] == ["exitcode=3", "WallTime=3s", "Processors=1"]


def test_memory_is_the_largest_peak():
    tried = [Attempt(T0, T0 + 5, _used(5.0, rss=r)) for r in (1000, 9000, 4000)]
    assert dict(accounting(tried))["MaxResidentMemory"] == "9000kB"


def test_unknown_stays_unknown():
    # an attempt that ran and that nobody measured: no sum is the job's, so none is written (A-REX's
    # record then says 0 rather than a part); its times and nodes still are
    tried = [Attempt(T0, T0 + 10, _used(10.0)), Attempt(T0, T0 + 10, None, node="n9")]
    keys = dict(accounting(tried))
    assert not {"WallTime", "Processors", "UserTime", "KernelTime", "MaxResidentMemory"} & set(keys), keys
    assert "LRMSStartTime" in keys and "LRMSEndTime" in keys
    assert [v for k, v in accounting(tried) if k == "nodename"] == ["n1", "n9"]
    # one field unknown in one attempt: only that key is left out
    tried = [Attempt(T0, T0 + 10, _used(10.0)), Attempt(T0, T0 + 10, _used(10.0, system=None))]
    keys = dict(accounting(tried))
    assert "KernelTime" not in keys and keys["UserTime"] == "18s" and keys["WallTime"] == "10s"
    # the wall unknown, the cores known: the width is, the wall time is not
    keys = dict(accounting([Attempt(T0, T0 + 10, Usage(Source.SACCT, cores=2))]))
    assert keys["Processors"] == "2" and "WallTime" not in keys and "UserTime" not in keys
    # an attempt without an end: no LRMSEndTime
    keys = dict(accounting([Attempt(T0, T0 + 10, _used(10.0)), Attempt(T0, None, _used(3.0))]))
    assert "LRMSEndTime" not in keys and keys["WallTime"] == "13s"
    # nothing ran: nothing but the benchmark
    assert accounting([]) == [] and accounting([], "HEPSPEC:2") == [("Benchmark", "HEPSPEC:2")]


def test_hostile_node_names_are_left_out():
    tried = [
        Attempt(T0, T0 + 1, None, node="bad\nnode"),
        Attempt(T0, T0 + 1, None, node="x" * 300),
        Attempt(T0, T0 + 1, None, node="ok"),
    ]
    assert [v for k, v in accounting(tried) if k == "nodename"] == ["ok"]
    assert all("\n" not in v for _k, v in accounting(tried))


def test_benchmark_from_the_queue_else_lrms_first_value_blanks_to_colons(tmp_path):
    cfg = tmp_path / "arex.cfg"
    cfg.write_text(
        "[lrms]\nlrms=jim\nbenchmark=HEPSPEC:1.0\n[queue:jim]\nbenchmark=HEPSPEC 12.26\nbenchmark=Si2k 3065\n"
        "[queue:other]\n[queue:bad]\nbenchmark=HEPSPEC \x07\n[custom:jim]\njim_command=/bin/jim\n"
    )
    opts = Options.load(str(cfg))
    assert benchmark_of(opts, "jim") == "HEPSPEC:12.26"  # (the first of the queue's: A-REX's accounting's)
    assert benchmark_of(opts, "other") == "HEPSPEC:1.0"  # ([lrms]'s)
    assert benchmark_of(opts, "") == "HEPSPEC:1.0"
    assert benchmark_of(opts, "bad") == ""  # (not printable: not written)
    assert benchmark_of(Options.load(None), "jim") == ""
    blocks = parse_config("[q]\nbenchmark=a 1\nbenchmark=b 2\nx=1\nx=2\n")
    assert blocks == {"": {}, "q": {"benchmark": "a 1", "x": "2"}}


def test_attempts_of_a_record_every_attempt_that_ran():
    rec = queued_record(3, now=T0)
    first, second, third = rec.local(0), rec.local(1), rec.local(2)
    first.set_state(LocalState.RUNNING, at=T0 + 10)
    first.set_usage(_used(50.0, node="cn1"))
    first.set_state(LocalState.FAILED, evidence=Evidence.BATCH, exit_code=1, at=T0 + 60)
    first.new_attempt("node failure", at=T0 + 61)
    first.set_state(LocalState.SUBMITTING, at=T0 + 62)
    first.batch_id = "78_0"
    first.set_state(LocalState.QUEUED, at=T0 + 63)
    first.set_state(LocalState.RUNNING, at=T0 + 70)
    first.set_usage(_used(30.0, node="cn2"))
    first.set_state(LocalState.DONE, evidence=Evidence.BATCH, exit_code=0, at=T0 + 100)
    second.set_state(LocalState.RUNNING, at=T0 + 10)
    second.set_state(LocalState.DONE, evidence=Evidence.BATCH, exit_code=0, at=T0 + 40)  # (nobody measured it)
    third.set_state(LocalState.CANCELLED, evidence=Evidence.CANCEL, at=T0 + 5)  # (cancelled while queued: never ran)
    got = attempts(rec)
    assert [(a.start, a.end, a.usage is not None) for a in got] == [
        (T0 + 10, T0 + 60, True),
        (T0 + 70, T0 + 100, True),
        (T0 + 10, T0 + 40, False),
    ]
    assert [a.usage.node for a in got if a.usage] == ["cn1", "cn2"]


# -- a real ARC CE: ARC's own accounting database ---------------------------------------------

#: Each local job burns one second of CPU, then sleeps: a wall time long enough that A-REX's whole
#: seconds lose little of it (WallTime is rounded over at most LOCAL_JOBS cores).
BURN_SCRIPT = """#!/bin/sh
/usr/bin/python3 -c 'import time
while time.process_time() < 1.0:
    pass'
sleep 12
echo "burnt $JIM_FIRST_EVENT {marker}"
"""
LOCAL_JOBS = 5
BURN_XRSL = f"""&(executable="burn.sh")(inputfiles=("burn.sh" "{{dir}}/burn.sh"))
 (jobname="arc-accounting")(stdout="out.txt")(stderr="err.txt")
 (runtimeenvironment="ENV/JIM/MONTECARLO" "events={LOCAL_JOBS * 10}" "eventsperjob=10")
 (walltime="30 minutes")
"""
#: The benchmark the test CEs' queue is configured with (tests/services/arc*/start.sh: ``HEPSPEC 12.5``).
ARC_BENCHMARK = "HEPSPEC:12.5"


def _arcctl_job(ce: Any, arc_id: str) -> dict[str, Any]:
    """``arcctl accounting job info <id> -o json`` on the CE (as root; in the chroot for ARC 7): A-REX's
    accounting record of the job, once it is no longer in progress."""
    argv = ["arcctl", "-c", str(ce.state / "etc" / "arc.conf"), "accounting", "job", "info", arc_id, "-o", "json"]
    if ce.version == 7:
        argv = ["chroot", str(ce.root), "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", *argv]
    deadline = time.monotonic() + 120
    last = ""
    while time.monotonic() < deadline:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        last = p.stdout + p.stderr
        if p.returncode == 0 and p.stdout.lstrip().startswith("{"):
            record: dict[str, Any] = json.loads(p.stdout)
            if record.get("Status") != "in-progress":
                return record
        time.sleep(2)
    raise AssertionError(f"{ce.name}: no finished accounting record of {arc_id}: {last[-2000:]}")


@pytest.mark.arc
@pytest.mark.slow
def test_arc_accounting_database_shows_the_cpu_and_core_hours_the_local_jobs_used(each_arc):
    ce = each_arc
    job = ce.submit("arc-accounting", BURN_XRSL, {"burn.sh": BURN_SCRIPT}, broker="Null")
    try:
        fields = ce.wait(job, "Finished", timeout=300)
        assert fields.get("Exit Code") == "0", (fields, ce.diagnostics(job))
        record = _arcctl_job(ce, job.id)
        jim_id = ce.jim_id(job)
        assert jim_id, ce.diagnostics(job)
        home = ce.mapped.home / f".jim-arc-{ce.mode.removeprefix('jim-')}"
        rec = GridJob(etree.parse(str(ce.host(home / "db" / f"{jim_id}.xml"))).getroot())
    finally:
        ce.clean(job)
    tried = attempts(rec)
    totals = rec.usage_totals()
    assert len(tried) == LOCAL_JOBS and totals.unknown == 0, (tried, totals)
    assert totals.cpu is not None and totals.core_seconds is not None, totals
    # the CPU time: the local jobs' sum (each burnt a second)
    cpu = record["UsedCPUUserTime"] + record["UsedCPUKernelTime"]
    assert cpu == pytest.approx(totals.cpu, rel=0.1, abs=1), (record, totals)
    assert cpu == pytest.approx(LOCAL_JOBS * 1.0, rel=0.3), (record, totals)
    # the core-hours: the sum of wall x cores, not N times it; the wall time within the job's span
    assert record["UsedWalltime"] * record["CPUCount"] == pytest.approx(totals.core_seconds, rel=0.1), (record, totals)
    span = max(a.end for a in tried if a.end) - min(a.start for a in tried if a.start)
    assert record["UsedWalltime"] <= span + 1, (record, span)
    # the peak memory, the nodes, the benchmark of the configuration (ARC 7: a field of its own)
    assert record["UsedMemory"] == totals.max_rss_kb, (record, totals)
    extra = record.get("JobExtraInfo") or {}
    assert set(str(extra.get("nodenames", "")).split(":")) == set(totals.nodes), (record, totals)
    assert (record.get("Benchmark") or extra.get("benchmark")) == ARC_BENCHMARK, record
