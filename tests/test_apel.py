"""APEL blah records (jim.apel): the line read by APEL's blah parser's rules, one per local job of an
ended grid job, once; on Slurm, ``lrmsID`` is what ``sacct`` prints as the job's ``JobID``.

The ``apel`` client is neither on PyPI nor in Debian, so :func:`apel_blah_parse` applies the rules
of APEL's ``BlahParser.parse`` (apel/parsers/blah.py) as its source states them: the line is split at
every ``"`` (its expression ``"|"_"``), parts of one character or less are dropped (the spaces
between fields), each part is split at its first ``=``, and the first value of each key is kept
(the first ``userFQAN`` is the primary one); the timestamp is read as UTC without a zone, the VO is
the first component of the FQAN.  A missing key fails the line (a KeyError in APEL).
"""

from __future__ import annotations

import datetime as dt
import os
import pwd
import re
import subprocess
import sys
import time

import pytest

from jim import apel
from jim.apel import BlahRecord, field, lrms_id
from jim.db import Database
from jim.identity import Identity
from jim.paths import Home

from support.jimcli import FAST_CONFIG

DN = "/DC=org/DC=example/CN=Jane Doe"
FQANS = ("/atlas/Role=production/Capability=NULL", "/atlas/Capability=NULL")


def apel_blah_parse(line: str) -> dict[str, object]:
    """What APEL's BlahParser makes of one line (see the module docstring)."""
    parts = [x.split("=", 1) for x in (y for y in re.split(r'"|"_"', line) if len(y) > 1)]
    data: dict[str, str] = {}
    for key, value in parts:  # (a part without "=" fails the unpacking, as in APEL)
        data.setdefault(key, value)
    fqan = data["userFQAN"].split(";")[0]
    return {
        "TimeStamp": dt.datetime.fromisoformat("T".join(data["timestamp"].split())),
        "GlobalUserName": data["userDN"],
        "FQAN": data["userFQAN"],
        "VO": fqan.split("/")[1] if fqan.startswith("/") else fqan,
        "CE": data["ceID"],
        "GlobalJobId": data["jobID"],
        "LrmsId": data["lrmsID"],
        "localUser": data.get("localUser"),
    }


def test_a_line_reads_back_field_for_field():
    rec = BlahRecord(1795933196.4, DN, FQANS, "ce.example.org:2119/jim-slurm-long", "grid-1", "4242_7", "1001")
    line = rec.line()
    assert line.endswith("\n") and line.count("\n") == 1
    assert line.startswith('"timestamp=2026-11-29 ') and '" "' in line and "  " not in line
    got = apel_blah_parse(line)
    assert got["TimeStamp"] == dt.datetime(2026, 11, 29, 6, 19, 56)
    assert got["GlobalUserName"] == DN and got["FQAN"] == FQANS[0] and got["VO"] == "atlas"
    assert (got["CE"], got["GlobalJobId"], got["LrmsId"], got["localUser"]) == (
        "ce.example.org:2119/jim-slurm-long",
        "grid-1",
        "4242_7",
        "1001",
    )


def test_a_hostile_dn_cannot_add_or_move_a_field():
    evil = 'CN=x" "jobID=stolen" "lrmsID=1\n"timestamp=1999-01-01 00:00:00'
    line = BlahRecord(0.0, evil, (), "ce", "mine", "77", "1001").line()
    assert line.count("\n") == 1 and line.count('"') == 14  # 7 fields, two quotes each
    got = apel_blah_parse(line)
    assert (got["GlobalJobId"], got["LrmsId"]) == ("mine", "77")
    assert got["TimeStamp"] == dt.datetime(1970, 1, 1)
    assert got["FQAN"] == ""  # no FQAN known: the key is there, empty
    assert field("k", "a\x00b\x1fc") == '"k=abc"'


@pytest.mark.parametrize(
    ("adapter", "batch_id", "expected"),
    [
        ("slurm", "4242_7", "4242_7"),  # sacct's JobID of an array task
        ("slurm", "4243", "4243"),
        ("sge", "77.3", "77"),  # APEL's SGE parser reads the job_number alone
        ("pbs", "123[4].server", "123[4].server"),
        ("condor", "12.0", "12.0"),
        ("fork", "fork-1234", "fork-1234"),
        ("slurm", "1 2", None),
        ("slurm", "-x", None),
        ("slurm", "", None),
        ("slurm", None, None),
    ],
)
def test_lrms_id_per_batch_system(adapter, batch_id, expected):
    assert lrms_id(adapter, batch_id) == expected


def _accounting_config(jim, logs, extra: str = "") -> None:
    jim.config.write_text(
        FAST_CONFIG + extra + f'\n[accounting]\nblah_log_dir = "{logs}"\nce_id = "ce.example.org:2119/jim-{{queue}}"\n'
    )


def _set_identity(jim, job_id: str) -> None:
    db = Database(Home(jim.home))
    with db.update(job_id) as rec:
        rec.set_identity(Identity(subject=DN, fqans=FQANS, source="test"))


def _published_lines(logs) -> list[str]:
    return [ln for p in sorted(logs.glob("blahp.log-*")) for ln in p.read_text().splitlines()]


def test_one_line_per_local_job_of_an_ended_grid_job_once(jim_env, tmp_path):
    logs = tmp_path / "apel"
    logs.mkdir(mode=0o700)
    _accounting_config(jim_env, logs)
    job = jim_env.submit("&(executable=/bin/true)(count=3)")
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    _set_identity(jim_env, job)
    pub = jim_env.run("accounting", "--publish")
    assert pub.returncode == 0, pub.stderr
    lines = _published_lines(logs)
    assert len(lines) == 3, lines
    day = time.strftime("%Y%m%d", time.gmtime())
    assert [p.name for p in logs.glob("blahp.log-*")] == [f"blahp.log-{day}"]  # (root: the site's daily file)
    batch_ids = {lj["batchId"] for lj in jim_env.status(job)["localJobs"]}
    parsed = [apel_blah_parse(ln) for ln in lines]
    assert {p["LrmsId"] for p in parsed} == batch_ids
    assert {p["GlobalJobId"] for p in parsed} == {job}  # (submitted through jim submit: jim's own id)
    assert {p["GlobalUserName"] for p in parsed} == {DN} and {p["VO"] for p in parsed} == {"atlas"}
    assert all(p["CE"].startswith("ce.example.org:2119/jim-") for p in parsed)
    # published once: a second pass (a cron's next run) writes nothing
    again = jim_env.run("accounting", "--publish", "--json")
    assert again.returncode == 0 and '"lines": 0' in again.stdout, again.stdout
    assert len(_published_lines(logs)) == 3


def test_a_running_grid_job_and_one_without_identity_get_no_line(jim_env, tmp_path):
    logs = tmp_path / "apel"
    logs.mkdir(mode=0o700)
    _accounting_config(jim_env, logs)
    running = jim_env.submit("&(executable=/bin/sleep)(arguments=30)")
    nobody = jim_env.submit("&(executable=/bin/true)")
    assert jim_env.wait(nobody)["JOB_STATE"] == "DONE"
    assert jim_env.run("accounting", "--publish").returncode == 0
    assert _published_lines(logs) == []
    jim_env.protocol("cancel", "--job-id", running)


@pytest.mark.skipif(os.geteuid() != 0, reason="root's pass over the homes")
def test_roots_pass_reads_a_home_as_its_owner(tmp_path, monkeypatch):
    """A link planted among a user's records is never opened with root's rights: root's pass reads
    each home in a fork switched to its owner, and only the lines come back."""
    nobody = pwd.getpwnam("nobody")
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, nobody.pw_uid, nobody.pw_gid)

    def collect(_home, uid, _ce, done):
        return [("read-as", f"{os.geteuid()}:{os.getegid()}:{uid}:{sorted(done)}")]

    monkeypatch.setattr(apel, "_collect", collect)  # (the fork inherits it)
    got = apel._unpublished(Home(home), nobody.pw_uid, "ce", {"old"})
    assert got == [("read-as", f"{nobody.pw_uid}:{nobody.pw_gid}:{nobody.pw_uid}:['old']")]
    assert os.geteuid() == 0  # (the caller stays root)


def test_publish_without_a_log_dir_says_so(jim_env):
    out = jim_env.run("accounting", "--publish")
    assert out.returncode == 1 and "blah_log_dir" in out.stderr


# -- Slurm: lrmsID is sacct's JobID ------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm():
    import os

    from support.env import require_service
    from support.services import cluster_lock, slurm_env

    env = slurm_env()
    require_service(env is not None, "the test Slurm cluster (tests/services/slurm/start.sh)")
    if os.geteuid() != 0:
        pytest.skip("the test cluster's control commands need root")
    with cluster_lock():
        yield env


@pytest.mark.slurm
@pytest.mark.slow
def test_lrms_id_is_what_sacct_prints_for_the_same_job(jim_env, slurm, tmp_path):
    jim_env.env["SLURM_CONF"] = slurm["SLURM_CONF"]
    logs = tmp_path / "apel"
    logs.mkdir(mode=0o700)
    batch = f'\n[batch]\nadapter = "slurm"\npartition = "debug"\ncache_interval = 1.0\npython = "{sys.executable}"\n'
    _accounting_config(jim_env, logs, batch)
    job = jim_env.submit("&(executable=/bin/true)(count=3)")
    try:
        assert jim_env.wait(job, timeout=180)["JOB_STATE"] == "DONE"
    finally:
        subprocess.run(["scancel", "-n", f"jim.{job}.0"], env=slurm, capture_output=True)
    _set_identity(jim_env, job)
    assert jim_env.run("accounting", "--publish").returncode == 0
    lrms = sorted(str(apel_blah_parse(ln)["LrmsId"]) for ln in _published_lines(logs))
    assert len(lrms) == 3 and all("_" in b for b in lrms), lrms  # array tasks: JOBID_TASK
    arrays = ",".join(sorted({b.partition("_")[0] for b in lrms}))
    deadline = time.monotonic() + 60
    sacct: list[str] = []
    while len(sacct) < 3 and time.monotonic() < deadline:
        rows = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-o", "JobID,JobName", "-j", arrays],
            capture_output=True,
            text=True,
            env=slurm,
            timeout=30,
        ).stdout.split()
        sacct = sorted(r.split("|")[0] for r in rows if f"|jim.{job}." in r)
        if len(sacct) < 3:
            time.sleep(1)
    assert lrms == sacct, (lrms, sacct)  # what APEL's Slurm parser reads as JobName, from the site's sacct
