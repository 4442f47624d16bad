"""What every attempt of every local job used (jim/record/usage.py, sandbox/jimusage.py, docs/accounting.md).

End to end on the fork backend: local jobs that burn a known CPU time and touch a known memory are
measured by the wrapper (``os.wait4``) within 20 %, the record keeps one ``<usage>`` per attempt
(valid against the schema), and the grid job's totals are the sums.  Then the rules: usage fields
that are malformed or absurd are unknown and logged once; attempts keep their own measure; the
accounting's measure (Slurm's sacct) when the wrapper wrote none.
"""

from __future__ import annotations

import logging
import sys
import time

import pytest

from jim.adapters.model import BatchStatus
from jim.evidence import Facts, Rules, settle
from jim.localfiles import read_exit
from jim.record import GridJob, Source, Totals, Usage
from jim.record.usage import checked
from jim.states import Evidence, LocalState

from support.jimcli import validate_home
from support.records import queued_record

#: A local job that touches 200 MiB and burns 1 s of CPU, then says what it touched.
BURN = """\
import time
b = bytearray({mb} * 1024 * 1024)
for i in range(0, len(b), 4096):
    b[i] = 1
while time.process_time() < {cpu}:
    pass
"""
MIB_KB = 1024


def _within(value, expected, tolerance=0.2):
    return value is not None and abs(value - expected) <= tolerance * expected


def test_fork_local_jobs_measured_within_20_percent_and_totals_are_the_sums(jim_env, tmp_path):
    script = tmp_path / "burn.py"
    script.write_text(BURN.format(mb=200, cpu=1.0))
    rsl = (
        f"&(executable={sys.executable})(arguments={script})(jimtype=montecarlo)(events=2)(eventsperjob=1)"
        "(jobname=usage-test)"
    )
    job = jim_env.submit(rsl)
    out = jim_env.wait(job, timeout=90)
    assert out["JOB_STATE"] == "DONE", out
    st = jim_env.status(job)
    assert len(st["localJobs"]) == 2
    for lj in st["localJobs"]:
        u = lj["usage"]
        assert u is not None and u["source"] == "wrapper", lj
        cpu = u["cpuUser"] + u["cpuSystem"]
        assert _within(cpu, 1.0), u
        assert _within(u["maxRssKb"], 200 * MIB_KB), u
        assert u["cores"] == 1 and u["node"] and u["rejected"] == []
        assert u["wall"] >= cpu * 0.9 and u["wall"] < 30, u
        assert lj["attempts"][-1]["usage"] == u  # (the current attempt's, in the attempts too)
    totals = st["usage"]
    rows = [lj["usage"] for lj in st["localJobs"]]
    assert totals["measured"] == 2 and totals["unknown"] == 0
    assert totals["cpuUser"] == pytest.approx(sum(u["cpuUser"] for u in rows))
    assert totals["cpuSystem"] == pytest.approx(sum(u["cpuSystem"] for u in rows))
    assert totals["wall"] == pytest.approx(sum(u["wall"] for u in rows))
    assert totals["coreSeconds"] == pytest.approx(sum(u["wall"] * u["cores"] for u in rows))
    assert totals["maxRssKb"] == max(u["maxRssKb"] for u in rows)
    assert totals["nodes"] == sorted({u["node"] for u in rows})
    assert validate_home(jim_env.home) == []
    text = jim_env.run("status", job).stdout
    assert "used       CPU" in text and "(wrapper)" in text and "2 attempts measured" in text


# -- the rules, on records made by hand --------------------------------------------------------


def _exit_file(tmp_path, lines: str):
    d = tmp_path / "local" / "0"
    d.mkdir(parents=True, exist_ok=True)
    (d / "exit_code").write_text(lines)
    return d


def _end(lj, local_dir, now):
    facts = Facts(answered=True, status=None, answered_at=now, exit=read_exit(local_dir))
    settle(lj, facts, Rules(now))


GOOD = "0\nruntime=1.2\ncpu_user=1.000\ncpu_system=0.050\nmax_rss_kb=215000\nwall=1.100\ncores=1\nnode=cn1\n"


def test_an_exit_file_measure_is_recorded_with_the_end(tmp_path):
    now = time.time()
    rec = queued_record(1, now=now)
    lj = rec.local(0)
    _end(lj, _exit_file(tmp_path, GOOD), now)
    assert lj.state is LocalState.DONE
    u = lj.usage()
    assert u == Usage(Source.WRAPPER, 1.0, 0.05, 215000, 1.1, 1, "cn1")
    assert u.cpu == pytest.approx(1.05) and u.core_seconds == pytest.approx(1.1) and u.complete
    assert lj.usages() == [(1, u)]
    assert rec.usage_totals() == Totals(1.0, 0.05, 1.1, 1.1, 215000, ("cn1",), 1, 0)


@pytest.mark.parametrize(
    ("lines", "unknown"),
    [
        ("cpu_user=-1\ncpu_system=0\nwall=2\n", {"cpu_user"}),  # negative
        ("cpu_user=1e3\ncpu_system=0\nwall=2\n", {"cpu_user"}),  # not plain digits
        ("cpu_user=nan\ncpu_system=0\nwall=2\n", {"cpu_user"}),
        ("cpu_user=１\ncpu_system=0\nwall=2\n", {"cpu_user"}),  # another script's digit
        ("cpu_user=100\ncpu_system=1\nwall=2\n", {"cpu_user", "cpu_system"}),  # more CPU than wall x cores
        ("cpu_user=1\ncpu_system=0\nwall=99999999999\n", {"wall", "cpu_user", "cpu_system"}),  # over a year
        ("cpu_user=1\ncpu_system=0\nwall=2\nmax_rss_kb=999999999999999\n", {"max_rss_kb"}),
        ("cpu_user=1\ncpu_system=0\nwall=2\nmax_rss_kb=1.5\n", {"max_rss_kb"}),
        ("cpu_user=1\ncpu_system=0\nwall=2\nnode=a b;rm\n", {"node"}),
        ("cpu_user=1\ncpu_system=0\nwall=2\ncores=0\n", set()),  # (rejected; the plan's 1 core stands)
    ],
)
def test_malformed_or_absurd_usage_is_unknown_and_logged_once(tmp_path, caplog, lines, unknown):
    now = time.time()
    rec = queued_record(1, now=now)
    lj = rec.local(0)
    d = _exit_file(tmp_path, "0\n" + lines)
    with caplog.at_level(logging.WARNING, logger="jim.evidence"):
        for _ in range(3):  # (three passes: one end, one log line)
            _end(lj, d, now)
    assert lj.state is LocalState.DONE  # (the measure never decides the state)
    u = lj.usage()
    assert u is not None
    for name in unknown:
        assert getattr(u, name) is None, name
    assert u.rejected and set(u.rejected) >= unknown
    assert u.cores == 1  # (the plan's)
    warnings = [r for r in caplog.records if "malformed or absurd" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert rec.usage_totals().unknown == 1  # (an incomplete measure: the totals say so)
    # the record keeps what was not trusted, by name, and reads back the same
    assert lj.usage() == u


def test_no_measure_is_no_usage_not_zero(tmp_path):
    now = time.time()
    rec = queued_record(1, now=now)
    lj = rec.local(0)
    _end(lj, _exit_file(tmp_path, "1\nwrapper_error=OSError: disk\n"), now)
    assert lj.state is LocalState.FAILED and lj.usage() is None
    lj.set("node", "cn1")  # (its wrapper started: it ran, and nobody measured it)
    assert rec.usage_totals() == Totals(nodes=(), measured=0, unknown=1)


def test_each_attempt_keeps_its_own_measure():
    now = time.time()
    rec = queued_record(1, now=now)
    lj = rec.local(0)
    first = Usage(Source.SACCT, None, None, None, 3600.0, 2, "cn1")
    lj.set_state(LocalState.FAILED, evidence=Evidence.ACCOUNTING, exit_code=1)
    lj.set_usage(first)
    lj.new_attempt("node failure")
    assert lj.usage() is None and lj.usage(1) == first
    lj.set_state(LocalState.SUBMITTING)
    lj.batch_id = "78_0"
    lj.set_state(LocalState.QUEUED)
    second = Usage(Source.WRAPPER, 7000.0, 10.0, 1000, 3700.0, 2, "cn2")
    lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0)
    lj.set_usage(second)
    assert lj.usages() == [(1, first), (2, second)]
    t = rec.usage_totals()
    assert t.cpu_user == 7000.0 and t.wall == 7300.0 and t.core_seconds == 2 * 7300.0
    assert t.max_rss_kb == 1000 and t.nodes == ("cn1", "cn2") and t.measured == 2 and t.unknown == 1
    assert _valid(rec)


def test_the_accountings_measure_when_the_wrapper_wrote_none():
    now = time.time()
    rec = queued_record(1, now=now)
    lj = rec.local(0)
    used = checked(Source.SACCT, {"wall": "61", "cores": "4", "node": "jimnode"})
    record = BatchStatus(LocalState.CANCELLED, evidence=Evidence.ACCOUNTING, tag=lj.tag, submitted=now - 95, usage=used)
    settle(lj, Facts(answered=True, status=None, answered_at=now, record=record), Rules(now))
    assert lj.state is LocalState.CANCELLED
    u = lj.usage()
    assert u is not None and u.source is Source.SACCT and u.wall == 61 and u.cores == 4 and u.cpu is None
    assert _valid(rec)


def test_the_plans_cores_bound_the_cpu():
    # a wrapper that says 64 cores does not make 60 s of CPU in 1 s believable on a 1-core plan
    u = checked(Source.WRAPPER, {"cpu_user": "60", "cpu_system": "0", "wall": "1", "cores": "64"}, cores=1)
    assert u.cpu_user is None and u.cores == 1 and "cpu_user" in u.rejected
    u = checked(Source.WRAPPER, {"cpu_user": "7.5", "cpu_system": "0.5", "wall": "1", "cores": "8"}, cores=8)
    assert u.cpu == 8.0 and u.rejected == ()


def test_sacct_usage_fields():
    from jim.adapters.slurm import USAGE_ACCT_FIELDS, parse_sacct

    tag = "jim.20261122-070000-abcdef01.0"
    text = (
        f"41_0|42|COMPLETED|0:0|2026-11-26T22:33:18|2026-11-26T22:33:18|2026-11-26T22:33:20|100M||"
        f"3|00:01.500|00:00.250|2|jimnode|{tag}|\n"
        f"41_0.batch|42.batch|COMPLETED|0:0|2026-11-26T22:33:18|2026-11-26T22:33:18|2026-11-26T22:33:20||"
        f"210000K|3|00:01.500|00:00.250|2|jimnode|batch|\n"
        f"41_1|41|CANCELLED by 0|0:15|2026-11-26T22:33:18|2026-11-26T22:33:18|2026-11-26T22:34:20|100M||"
        f"62|1-00:00:00|-5|1|jimnode|{tag}|\n"
    )
    assert len(USAGE_ACCT_FIELDS.split(",")) == text.splitlines()[0].count("|") + 1
    found = parse_sacct(text, {"41_0", "41_1"}, usage=True)
    u = found["41_0"].usage
    assert u == Usage(Source.SACCT, 1.5, 0.25, 210000, 3.0, 2, "jimnode")
    u = found["41_1"].usage  # a day of CPU in 62 s on one core, and a malformed one: not trusted
    assert u is not None and u.cpu_user is None and u.cpu_system is None and u.wall == 62
    assert {"cpu_user", "cpu_system"} <= set(u.rejected)


def _valid(rec: GridJob) -> bool:
    from importlib import resources

    from lxml import etree

    schema = etree.RelaxNG(etree.parse(str(resources.files("jim").joinpath("schema", "jim.rng"))))
    ok = schema.validate(rec.root.getroottree())
    assert ok, schema.error_log
    return ok
