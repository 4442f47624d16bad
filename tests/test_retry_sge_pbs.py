"""Grid Engine and PBS jobs whose node or its daemon failed get another attempt; a wall-time kill and
a plain non-zero exit do not.

Neither a real Grid Engine nor a real PBS can lose a node on this machine, so the node failure is
injected: the adapters' own parsers (``SgeAdapter.parse_accounting``, ``PbsAdapter.parse_status``
and ``parse_accounting`` per flavour) read the recorded outputs of tests/data/sge and the
``qstat -f`` samples and recordings of tests/data/pbs, rewritten to say how the job ended, and the
fault-injecting in-memory batch system (support.fake_adapter.FakeAdapter) stands in for the batch
system that would have said it.  It hands each parsed status to a real monitoring pass
(:func:`jim.monitor.refresh`, and through it :mod:`jim.retry`) the way each system delivers it:

* Grid Engine: the job leaves ``qstat``; ``qacct`` has its record (the accounting);
* PBS Pro: the job leaves ``qstat -f -t``; ``qstat -x -f -t`` has it (the accounting);
* Torque: ``qstat -f -t`` keeps the completed job, with its ``exit_status`` (the queue's answer);
* Slurm's torque wrappers: ``qstat -f`` shows every end as ``C`` with no exit status (the parser
  leaves it out, as absent): the wrapper's exit-code file decides, and without one the job is LOST
  once the grace period is over.
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pytest

from jim import background, worker
from jim.adapters.model import BatchStatus, QueryResult
from jim.adapters.pbs import PBSPRO_EXEC_CODES, TORQUE_EXEC_CODES, PbsAdapter
from jim.adapters.sge import FAILED_CAUSES, SgeAdapter
from jim.config import parse
from jim.db import Database, validate
from jim.jobdesc import parse_rsl
from jim.jobid import tag_name
from jim.memo import Memo
from jim.monitor import refresh
from jim.paths import Home
from jim.site import Site
from jim.states import EndCause, Evidence, GramState, LocalState, site_fault
from jim.submit import submit

from support.fake_adapter import FakeAdapter

DATA = Path(__file__).parent / "data"


class BatchSystem(FakeAdapter):
    """The in-memory batch system whose status answer can carry what a real ``qstat`` said of a job."""

    def __init__(self, home: Home):
        super().__init__(home)
        self.shown: dict[str, BatchStatus] = {}

    def show(self, tag: str, status: BatchStatus) -> str:
        """The queue shows the job of ``tag`` as ``status`` (a finished job kept in ``qstat``)."""
        bid = next(b for b, j in self.jobs.items() if j.tag == tag)
        self.shown[bid] = status
        return bid

    def query(self, batch_ids: list[str]) -> QueryResult:
        result = super().query(batch_ids)
        if not result.ok:
            return result
        statuses = {**result.statuses, **{b: s for b, s in self.shown.items() if b in result.statuses}}
        return dataclasses.replace(result, statuses=statuses)


@pytest.fixture
def site(tmp_path, monkeypatch):
    """3 attempts, a grace period of 60 s for a job gone without a word, one grid job of one local job."""
    config = parse(
        {
            "monitor": {"interval": 0.01, "lost_grace": 60.0},
            "retry": {"max_attempts": 3, "cool_off": 10.0},
        },
        env={"JIM_HOME": str(tmp_path / "home")},
    )
    home = Home(config.home)
    monkeypatch.setattr(background, "start_monitor", lambda home: None)
    monkeypatch.setattr(background, "start_worker", lambda home, job_id: None)

    class Bench:
        pass

    s = Bench()
    s.config, s.db, s.fake = config, Database(home.ensure()), BatchSystem(home)
    s.sge = SgeAdapter(home, {})
    s.pbs = {f: PbsAdapter(home, {"flavour": f}) for f in ("torque", "pbspro", "slurm")}
    s.job = submit(Site(config), parse_rsl("&(executable=/bin/true)(count=1)"), start_background=False)
    worker.submit_pending(Site(config, db=s.db, adapter=s.fake), s.job)
    s.tag = f"{s.job}.0"
    s.refresh = lambda **kw: refresh(Site(config, db=s.db, adapter=s.fake), **kw)
    return s


def _ran(site, exit_file: str | None = None) -> None:
    """The wrapper started on a node (its ``started`` file), and wrote ``exit_file`` if given."""
    d = site.db.home.local_dir(site.job, 0)
    d.mkdir(parents=True)
    (d / "started").write_text('{"host": "node07", "time": %f}' % time.time())
    if exit_file is not None:
        (d / "exit_code").write_text(exit_file)


def _qtime(epoch: float) -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(epoch))


def _first_attempt(site):
    rec = site.db.read(site.job)
    lj = rec.local(0)
    assert validate(site.db.home.record(site.job)) == []
    return rec, lj


def assert_another_attempt(site, cause: EndCause | None, evidence: Evidence) -> dict:
    rec, lj = _first_attempt(site)
    assert (lj.state, lj.attempt) == (LocalState.PLANNED, 2), lj.el.attrib
    (first,) = lj.past_attempts()
    assert first["state"] in ("FAILED", "LOST") and first["evidence"] == evidence.value
    if cause is not None:
        assert first["cause"] == cause.value and first["retryReason"] == cause.describe()
    assert rec.state not in (GramState.FAILED, GramState.DONE) and rec.retries() == 1  # a retry is no failure
    return first


def assert_no_other_attempt(site, exit_code: int | None, cause: EndCause | None) -> None:
    rec, lj = _first_attempt(site)
    assert (lj.state, lj.attempt, lj.past_attempts()) == (LocalState.FAILED, 1, []), lj.el.attrib
    assert lj.get("cause") == (cause.value if cause is not None else None)
    if exit_code is not None:
        assert lj.exit_code == exit_code
    assert rec.state is GramState.FAILED and rec.retries() == 0


# -- Grid Engine: the qacct record ----------------------------------------------------------

#: The recorded qacct record of a task that never started (failed 26, tests/data/sge/qacct-badout).
QACCT = (DATA / "sge" / "qacct-badout.out").read_text()

#: What qacct prints after the code (sge_status(5)), for the codes that say the site failed.
SGE_WORDS = {
    1: "assumedly before job",
    2: "on executing shepherd",
    3: "before writing config",
    4: "before writing pid",
    5: "on reading config file",
    6: "setting processor set",
    7: "before prolog",
    8: "in prolog",
    9: "before pestart",
    10: "in pestart",
    11: "before job",
    26: "opening input/output file",
    27: "searching requested shell",
    28: "changing into working directory",
    29: "setting up AFS credentials",
    38: "setting the additional group id",
}
SGE_SITE_FAULTS = sorted(code for code, cause in FAILED_CAUSES.items() if site_fault(cause))


def qacct(site, failed: int, words: str, exit_status: int) -> BatchStatus:
    """The recorded record, of this grid job's task, submitted a moment ago, with another ending;
    parsed by the Grid Engine adapter as it parses ``qacct -j``."""
    text = QACCT.replace("failed       26  : opening input/output file", f"failed       {failed:<3} : {words}")
    text = text.replace("exit_status  0   ", f"exit_status  {exit_status:<4}")
    text = re.sub(r"(?m)^jobname .*$", f"jobname      {tag_name(site.job, 0)}", text)
    text = re.sub(r"(?m)^qsub_time .*$", f"qsub_time    {_qtime(time.time() - 5)}", text)
    (status,) = site.sge.parse_accounting(text, {"42.1"}).values()
    assert status.tag == site.tag and status.evidence is Evidence.ACCOUNTING
    return status


def test_sge_site_fault_codes_are_the_launch_failures():
    assert set(SGE_SITE_FAULTS) == set(SGE_WORDS)
    assert {FAILED_CAUSES[c] for c in SGE_SITE_FAULTS} == {EndCause.LAUNCH_FAILED}


@pytest.mark.parametrize("failed", SGE_SITE_FAULTS)
def test_sge_execd_or_node_failure_gets_attempt_2(site, failed):
    """execd or the shepherd could not start the task on its host (failed 1-11, 26-29, 38)."""
    status = qacct(site, failed, SGE_WORDS[failed], 0)
    assert status.state is LocalState.FAILED and status.cause is EndCause.LAUNCH_FAILED
    site.fake.vanish(site.tag, status)
    site.refresh()
    first = assert_another_attempt(site, EndCause.LAUNCH_FAILED, Evidence.ACCOUNTING)
    assert first["reason"].startswith(f"failed {failed}, exit_status 0; ")
    assert site.fake.count("accounting") == 1


@pytest.mark.parametrize(
    ("failed", "words", "exit_status", "cause"),
    [
        (37, "qmaster enforced h_rt limit", 0, EndCause.TIMEOUT),  # qmaster killed it past h_rt
        (100, "assumedly after job", 137, None),  # execd's h_rt kill (SIGKILL): whose, qacct cannot say
    ],
)
def test_sge_wall_time_kill_gets_no_other_attempt(site, failed, words, exit_status, cause):
    status = qacct(site, failed, words, exit_status)
    assert status.cause is cause
    _ran(site)  # killed while running: the wrapper wrote no exit-code file
    site.fake.vanish(site.tag, status)
    site.refresh()
    assert_no_other_attempt(site, exit_status or None, cause)


@pytest.mark.parametrize("exit_file", [None, "3\nruntime=1.0\n"])
def test_sge_plain_non_zero_exit_gets_no_other_attempt(site, exit_file):
    status = qacct(site, 0, "", 3)
    assert (status.state, status.exit_code, status.cause) == (LocalState.FAILED, 3, None)
    _ran(site, exit_file)
    site.fake.vanish(site.tag, status)
    site.refresh()
    assert_no_other_attempt(site, 3, None)


# -- PBS: Torque, PBS Pro, Slurm's torque wrappers ------------------------------------------


def _sample(name: str, bid: str) -> str:
    """One job's record from a ``qstat -f`` sample or recording."""
    text = (DATA / "pbs" / name).read_text()
    (record,) = [r for r in re.split(r"\n(?=Job Id:)", text) if re.match(rf"Job Id:\s*{re.escape(bid)}\b", r)]
    return record.rstrip("\n") + "\n"


def pbs_record(site, flavour: str, exit_status: str | None) -> str:
    """A finished job of this grid job, as ``qstat -f`` of ``flavour`` shows it, owned by this user,
    submitted a moment ago; ``exit_status``: what the flavour's exit status attribute says."""
    name, bid, attr = {
        "torque": ("torque-qstat-f-t.txt", "1242", "exit_status"),
        "pbspro": ("pbspro-qstat-f-t.txt", "5690", "Exit_status"),
        "slurm": ("qstat-f-final.out", "4709", None),  # a recording: exit 3, shown as C and nothing more
    }[flavour]
    text = _sample(name, bid)
    text = re.sub(r"(?m)^(\s+Job_Name = ).*$", lambda m: m.group(1) + tag_name(site.job, 0), text)
    text = re.sub(r"(?m)^(\s+Job_Owner = )[^@\n]*", lambda m: m.group(1) + site.pbs[flavour].user, text)
    text = re.sub(r"(?m)^(\s+qtime = ).*$", lambda m: m.group(1) + _qtime(time.time() - 5), text)
    if attr is not None:
        text, n = re.subn(rf"(?m)^(\s+{attr} = ).*$", lambda m: m.group(1) + str(exit_status), text)
        assert n == 1
    return text


def deliver(site, flavour: str, text: str) -> BatchStatus | None:
    """What the PBS adapter of ``flavour`` makes of ``text``, delivered as that system does."""
    adapter = site.pbs[flavour]
    if flavour == "pbspro":  # gone from qstat -f -t, in qstat -x -f -t
        assert adapter.accounting_units(["1"]) == ["1"]
        (status,) = adapter.parse_accounting(text, set()).values()
        site.fake.vanish(site.tag, status)
        return status
    parsed = adapter.parse_status(text)
    if flavour == "torque":  # kept in qstat -f -t once completed
        assert adapter.accounting_units(["1"]) == ()
        (status,) = parsed.values()
        site.fake.show(site.tag, status)
        return status
    assert parsed == {}  # the wrappers' C says nothing of how it ended: absent
    site.fake.vanish(site.tag)
    return None


def _node_failures(codes) -> list[tuple[int, EndCause, bool]]:
    return sorted(((k, cause, started) for k, (_n, cause, started) in codes.items() if site_fault(cause)), reverse=True)


@pytest.mark.parametrize(
    ("flavour", "code", "cause", "started"),
    [("torque", *c) for c in _node_failures(TORQUE_EXEC_CODES)]
    + [("pbspro", *c) for c in _node_failures(PBSPRO_EXEC_CODES)],
)
def test_pbs_node_or_launch_failure_gets_attempt_2(site, flavour, code, cause, started):
    """A JOB_EXEC code of MOM or the server: it could not start the job (launch), or the job's MOM
    restarted under it or a sister node failed (node)."""
    text = pbs_record(site, flavour, str(code))
    if started:
        _ran(site)  # the wrapper was running when its node went: no exit-code file
    status = deliver(site, flavour, text)
    assert status is not None and status.cause is cause and status.exit_code is None
    site.refresh()
    evidence = Evidence.ACCOUNTING if flavour == "pbspro" else Evidence.BATCH
    first = assert_another_attempt(site, cause, evidence)
    assert first["reason"].startswith(f"{'C exit_status' if flavour == 'torque' else 'F Exit_status'}={code}")
    if flavour == "torque":  # the queue's answer: its reason too (an accounting record gives its native line)
        assert TORQUE_EXEC_CODES[code][0] in first["reason"] and ("never ran" in first["reason"]) is not started


def test_pbs_node_failure_codes_cover_both_kinds():
    assert {c for _k, c, _s in _node_failures(TORQUE_EXEC_CODES)} == {EndCause.LAUNCH_FAILED, EndCause.NODE_FAIL}
    assert {c for _k, c, _s in _node_failures(PBSPRO_EXEC_CODES)} == {EndCause.LAUNCH_FAILED, EndCause.NODE_FAIL}
    assert {-4, -5, -6} <= {k for k, c, _s in _node_failures(TORQUE_EXEC_CODES) if c is EndCause.NODE_FAIL}
    assert {-14, -20} <= {k for k, c, _s in _node_failures(PBSPRO_EXEC_CODES) if c is EndCause.NODE_FAIL}


@pytest.mark.parametrize(
    ("flavour", "exit_status", "exit_code", "cause"),
    [
        ("torque", "-11", None, EndCause.TIMEOUT),  # JOB_EXEC_OVERLIMIT_WT
        ("pbspro", "-29", None, EndCause.TIMEOUT),  # JOB_EXEC_KILL_WALLTIME
        ("torque", "271", 143, None),  # MOM's SIGTERM (256 + 15), walltime on older Torque, or qdel
        ("pbspro", "265", 137, None),  # SIGKILL (256 + 9)
    ],
)
def test_pbs_wall_time_kill_gets_no_other_attempt(site, flavour, exit_status, exit_code, cause):
    _ran(site)  # killed while running, before the wrapper could write its exit-code file
    status = deliver(site, flavour, pbs_record(site, flavour, exit_status))
    assert status is not None and status.cause is cause and status.exit_code == exit_code
    site.refresh()
    assert_no_other_attempt(site, exit_code, cause)


@pytest.mark.parametrize("flavour", ["torque", "pbspro"])
@pytest.mark.parametrize("exit_file", [None, "3\nruntime=1.0\n"])
def test_pbs_plain_non_zero_exit_gets_no_other_attempt(site, flavour, exit_file):
    _ran(site, exit_file)
    status = deliver(site, flavour, pbs_record(site, flavour, "3"))
    assert status is not None and (status.state, status.exit_code, status.cause) == (LocalState.FAILED, 3, None)
    site.refresh()
    assert_no_other_attempt(site, 3, None)


# -- Slurm's torque wrappers: no exit status, the exit-code file or its absence decides -------


def _gone_after_grace(site) -> None:
    memo = Memo()
    t0 = site.db.read(site.job).local(0).entered(LocalState.QUEUED) + 1
    site.refresh(now=t0, memo=memo)
    site.refresh(now=t0 + 80, memo=memo)


def test_slurm_wrappers_node_failure_is_lost_and_gets_attempt_2(site):
    """The node went down with the job: ``C``, no exit status, no exit-code file."""
    _ran(site)
    assert deliver(site, "slurm", pbs_record(site, "slurm", None)) is None
    _gone_after_grace(site)
    first = assert_another_attempt(site, None, Evidence.ABSENT_AFTER_GRACE)
    assert first["state"] == "LOST" and first["retryReason"].startswith("lost: gone from the batch system")


@pytest.mark.parametrize(
    ("exit_file", "exit_code"),
    [
        ("143\nruntime=3600.0\nsignal=15\nterminated_by=15\n", 143),  # Slurm's TERM at the time limit
        ("3\nruntime=1.0\n", 3),
    ],
)
def test_slurm_wrappers_wall_time_kill_or_exit_gets_no_other_attempt(site, exit_file, exit_code):
    _ran(site, exit_file)
    assert deliver(site, "slurm", pbs_record(site, "slurm", None)) is None
    _gone_after_grace(site)
    assert_no_other_attempt(site, exit_code, None)
    lj = site.db.read(site.job).local(0)
    assert lj.evidence == Evidence.WRAPPER_EXIT_FILE.value


def test_parsers_feed_the_monitor_and_not_a_shortcut(site):
    """What the fake is handed is exactly the adapter's parse, tag and submission time included."""
    status = qacct(site, 1, SGE_WORDS[1], 0)
    assert status.submitted is not None and abs(status.submitted - (time.time() - 5)) < 60
    stale = dataclasses.replace(status, submitted=time.time() - 86400)  # another job that had the id
    site.fake.vanish(site.tag, stale)
    site.refresh()
    _rec, lj = _first_attempt(site)
    assert lj.attempt == 1 and lj.state is not LocalState.PLANNED  # an older record says nothing
