"""What local jobs used, from Grid Engine's ``qacct`` (source ``qacct``) when the wrapper wrote nothing.

Unit tests on real ``qacct -j`` output of the test cell (tests/services/sge, Son of Grid Engine
8.1.9; ``tests/data/usage/sge-qacct.out``, the jobs of its README: task 1 burnt 2 s of CPU in a
child it waited for, task 2 exited 3, task 3 and its child were SIGKILLed from outside) and on the
recorded outputs of ``tests/data/sge``; then, on the real cell (marker ``sge``), a wrapper killed with
its payload: the record shows what qacct says.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
from test_sge import gjim, qacct_records, sge  # noqa: F401  (the cell's fixtures)

from jim.adapters.sge import parse_qacct
from jim.adapters.usage import qacct_usage
from jim.record import Source

DATA = Path(__file__).parent / "data"
REAL = (DATA / "usage" / "sge-qacct.out").read_text()


def _usages(text: str) -> dict[str, object]:
    return {bid: st.usage for bid, st in parse_qacct(text, usage=True).items()}


def test_real_qacct_of_a_finished_task_is_its_rusage():
    u = _usages(REAL)["10.1"]
    assert u is not None and u.source is Source.QACCT
    # ru_wallclock 7s, ru_utime 0.682s, ru_stime 1.454s, ru_maxrss 67.848KB (8.1.9 prints the kernel's KiB as bytes)
    assert (u.wall, u.cpu_user, u.cpu_system, u.cores, u.node) == (7.0, 0.682, 1.454, 1, "vm")
    assert u.max_rss_kb == round(67.848 * 1024)  # 69476 KiB: the 60 MiB the child held, and Python
    assert 60 * 1024 < u.max_rss_kb < 100 * 1024 and u.complete and not u.rejected


def test_real_qacct_of_a_task_that_exited_at_once():
    u = _usages(REAL)["10.2"]
    assert u is not None and (u.wall, u.cpu_user, u.cpu_system, u.max_rss_kb) == (0.0, 0.012, 0.003, 4520)


def test_real_qacct_of_a_killed_wrapper_has_wall_and_node_but_no_cpu():
    """The shepherd reaped the killed process only (ru_utime 0.034 s): the process data collector saw
    3.27 s (``cpu``) in the orphaned child: the rusage is not the job's, CPU and peak RSS unknown."""
    st = parse_qacct(REAL, usage=True)["10.3"]
    assert st.native == "failed 100, exit_status 137"
    u = st.usage
    assert u is not None and (u.wall, u.cores, u.node) == (9.0, 1, "vm")
    assert u.cpu_user is None and u.cpu_system is None and u.max_rss_kb is None and not u.rejected


def test_no_usage_without_asking_and_none_for_a_launch_failure():
    assert all(st.usage is None for st in parse_qacct(REAL).values())  # (find by tag does not need it)
    bad = parse_qacct((DATA / "sge" / "qacct-badout.out").read_text(), usage=True)
    launch = [st for st in bad.values() if st.native.startswith("failed 26,")]
    assert launch and all(st.usage is None for st in launch)  # (start_time -/-: it never ran)


def test_every_recorded_qacct_output_parses_to_checked_usage():
    for path in sorted((DATA / "sge").glob("qacct-*.out")):
        for bid, st in parse_qacct(path.read_text(), usage=True).items():
            if st.usage is not None:
                assert not st.usage.rejected and st.usage.wall is not None and st.usage.node == "vm", (path, bid)


def test_grid_engine_6_2_prints_plain_numbers():
    """6.2's qacct: ``ru_wallclock 7``, ``ru_utime 0.682``, ``ru_maxrss 69476`` (KiB), ``maxvmem 98.145M``."""
    old = re.sub(r"^(ru_wallclock|ru_utime|ru_stime|cpu)(\s+)([0-9.]+)s", r"\1\2\3", REAL, flags=re.M)
    old = old.replace("ru_maxrss    67.848KB", "ru_maxrss    69476").replace("98.145MB", "98.145M")
    u = _usages(old)["10.1"]
    assert u is not None and (u.wall, u.cpu_user, u.cpu_system, u.max_rss_kb) == (7.0, 0.682, 1.454, 69476)
    assert _usages(old)["10.3"].cpu_user is None  # type: ignore[union-attr]


def _fields(**over: str) -> dict[str, str]:
    f = {"start_time": "Sun Nov 29 06:44:53 2026", "slots": "1", "hostname": "vm", "ru_wallclock": "7s"}
    f.update({"ru_utime": "0.682s", "ru_stime": "1.454s", "ru_maxrss": "67.848KB", "cpu": "2.137s"})
    return {k: v for k, v in {**f, **over}.items() if v != "-"}


@pytest.mark.parametrize(
    ("over", "rejected"),
    [
        ({"ru_utime": "-1s"}, ("cpu_user",)),
        ({"ru_utime": "1e9s"}, ("cpu_user",)),
        ({"ru_utime": "nan"}, ("cpu_user",)),
        ({"ru_utime": "99999s"}, ("cpu_user", "cpu_system")),  # (more CPU than 7 s of one slot)
        ({"ru_wallclock": "9" * 40}, ("wall", "cpu_user", "cpu_system")),
        ({"ru_maxrss": "9999TB"}, ("max_rss_kb",)),
        ({"ru_maxrss": "12XB"}, ("max_rss_kb",)),
        ({"slots": "0"}, ("cores", "cpu_user", "cpu_system")),
        ({"slots": "1.5"}, ("cores", "cpu_user", "cpu_system")),
        ({"hostname": "vm; rm -rf /"}, ("node",)),
        ({"hostname": "x" * 300}, ("node",)),
    ],
)
def test_hostile_qacct_fields_are_unknown_and_named(over, rejected):
    u = qacct_usage(_fields(**over), 0)
    assert u is not None and set(u.rejected) == set(rejected), u
    assert all(getattr(u, name) is None for name in rejected)


def test_large_values_as_qacct_prints_them():
    """A day-long job, as 8.1.9's qacct prints its record (``qacct -f`` of a record with ru_wallclock
    93725, ru_utime 90061.5, ru_maxrss 123456789 KiB)."""
    big = {"ru_wallclock": "93725s", "ru_utime": "90061.500s", "ru_stime": "3.250s", "ru_maxrss": "117.738MB"}
    u = qacct_usage(_fields(**big, cpu="90064.800s"), 0)
    assert u is not None and (u.wall, u.cpu_user, u.cpu_system) == (93725.0, 90061.5, 3.25) and not u.rejected
    assert u.max_rss_kb is not None and abs(u.max_rss_kb - 123456789) < 123456789 * 1e-5


def test_what_qacct_does_not_say_stays_unknown():
    u = qacct_usage(_fields(ru_utime="-", ru_stime="-", ru_maxrss="0.000B", cpu="-"), 0)
    assert u is not None and (u.cpu_user, u.cpu_system, u.max_rss_kb, u.wall) == (None, None, None, 7.0)
    assert qacct_usage(_fields(start_time="-/-"), 0) is None
    lost = qacct_usage(_fields(), 19)  # (the shepherd died: its rusage is no measure of the job)
    assert lost is not None and (lost.cpu_user, lost.wall, lost.max_rss_kb, lost.cores) == (None, None, None, 1)
    unsplit = qacct_usage(_fields(cpu="9.5s"), 0)  # (the collector saw CPU the rusage missed)
    assert unsplit is not None and unsplit.cpu is None and unsplit.max_rss_kb is None and unsplit.wall == 7.0


# -- on the real cell -----------------------------------------------------------------------------


@pytest.mark.sge
def test_sge_accounting_when_the_wrapper_wrote_nothing(gjim, sge, tmp_path):  # noqa: F811
    script = tmp_path / "spin.py"
    script.write_text("while True:\n    pass\n")
    job = gjim.submit(
        f"&(executable={sys.executable})(arguments={script})(jimtype=montecarlo)(events=1)(eventsperjob=1)"
        "(jobname=usage-sge)"
    )
    gjim.wait_running(job, 1, timeout=90)
    started = gjim.home / "jobs" / job / "local" / "0" / "started"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (started.exists() and time.time() - started.stat().st_mtime >= 3):
        time.sleep(0.2)
    # the wrapper and its payload SIGKILLed, as a node that dies would leave them: no exit-code file
    wrapper = json.loads(started.read_text())["pid"]
    group = os.getpgid(wrapper)
    assert group != os.getpgrp()  # (the shepherd gave the job a group of its own)
    os.killpg(group, signal.SIGKILL)
    out = gjim.wait(job, states=("DONE", "FAILED", "CANCELLED"), timeout=120)
    assert out["JOB_STATE"] == "FAILED", out
    lj = gjim.status(job)["localJobs"][0]
    assert not (gjim.home / "jobs" / job / "local" / "0" / "exit_code").exists()
    assert lj["evidence"] == "accounting", lj
    (rec,) = qacct_records(sge, job, 1)
    u = lj["usage"]
    assert u is not None and u["source"] == "qacct", lj
    assert u["wall"] == float(rec["ru_wallclock"].rstrip("s")) and u["wall"] >= 3, (u, rec)
    assert u["cores"] == int(rec["slots"]) == 1 and u["node"] == rec["hostname"]
    rusage = float(rec["ru_utime"].rstrip("s")) + float(rec["ru_stime"].rstrip("s"))
    if float(rec["cpu"].rstrip("s")) > rusage + 1.0:  # (the orphaned payload's CPU, which the rusage missed)
        assert u["cpuUser"] is None and u["cpuSystem"] is None and u["maxRssKb"] is None, (u, rec)
    else:
        assert abs(u["cpuUser"] + u["cpuSystem"] - rusage) < 0.01, (u, rec)
