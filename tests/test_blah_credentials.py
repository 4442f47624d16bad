"""The grid job's credential through Condor-G -> blahpd -> jim, on the HTCondor test pool (docs/credentials.md).

A ``grid_resource = batch jim`` job with an ``x509userproxy`` made by ``grid-proxy-init`` (as the
submitting account, on a throwaway CA): blahpd passes that very file with ``-x``, jim keeps a private
copy (``jobs/<id>/credentials/x509up``) and every local job finds the copy as ``X509_USER_PROXY``.

* The copy reaches the local jobs: each of two local jobs (on fork, and on the pool itself through jim's
  ``condor`` adapter) prints ``$X509_USER_PROXY``, whether it can read it, its mode, the proxy's
  identity and its time left (``grid-proxy-info`` where the local job runs, else ``openssl``): jim's
  copy under the grid job's area, 0600, the submitter's subject; the record and ``jim status --json``
  carry the credential (subject, end), never its content.
* Refresh: a proxy shorter than the local jobs' wall time (``+BatchRuntime``) + ``[credentials] margin``
  holds every local job PLANNED with the ``waiting`` reason (``jim status --json`` as the account);
  ``grid-proxy-init`` then writes a longer proxy of the same subject over the ``x509userproxy`` file
  (what a user's refresh is: Condor-G's own refresh does nothing at blahpd; grid-proxy-init unlinks the
  file and creates it again, so the inode may change or be reused) and the schedd is told to look
  (``condor_reconfig -daemon schedd``). jim's monitor notices the new version by itself: the copy gets
  the new end (state.json, record, status, jim's log), the local jobs run and see the longer time
  left, the gridmanager forwards the refresh (``DelegatedProxyExpiration``), the Condor-G job
  completes. The time from the overwrite to the copy's replacement is printed (``-s``).

The margin is the test's (``LONG_MARGIN``), not the default 300 s: the short proxy must stay clear of
the gridmanager's own limit (``GRIDMANAGER_MINIMUM_PROXY_TIME``, 180 s) until the refresh, or the
gridmanager would hold the Condor-G job for its proxy before jim is asked anything.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from lxml import etree
from test_blah_htcondor import TIMEOUT, Account, account, blah_jim  # noqa: F401  (the Condor-G fixtures)

from support.env import require_service
from support.services import HTC_USER, chroot_env, in_htcondor_root

pytestmark = [pytest.mark.htcondor, pytest.mark.slow]

#: The submitter's subject (the proxy's end-entity certificate, issued by the test's own CA).
DN = "/DC=org/DC=example/O=Test/CN=Jim BLAH Credential Tester"
#: The refresh test's ``[credentials] margin`` and the local jobs' wall time (``+BatchRuntime``, seconds).
LONG_MARGIN, WALLTIME = 1200, 60
#: The short proxy (``grid-proxy-init -valid``): less than WALLTIME + LONG_MARGIN, more than the gridmanager's 180 s.
SHORT_VALID, SHORT_SECONDS = "0:15", 900
#: The longer proxy of the refresh, and of the first test.
LONG_HOURS = 4

#: Each local job: where X509_USER_PROXY points, whether it can read it, its mode, the proxy's identity
#: and seconds left, each on a line of its own tagged with the local job's index.
REPORT = r"""
p="$X509_USER_PROXY"
say() { echo "cred $JIM_INDEX $1=$2"; }
say proxy "$p"
if [ -r "$p" ]; then say readable yes; else say readable no; fi
say mode "$(stat -c %a "$p")"
if command -v grid-proxy-info >/dev/null 2>&1; then
  say tool grid-proxy-info
  say identity "$(grid-proxy-info -file "$p" -identity)"
  say left "$(grid-proxy-info -file "$p" -timeleft)"
else
  say tool openssl
  say identity "$(openssl x509 -in "$p" -noout -issuer -nameopt compat | sed 's/^issuer=//')"
  end=$(openssl x509 -in "$p" -noout -enddate | sed 's/^notAfter=//')
  say left "$(( $(date -d "$end" +%s) - $(date +%s) ))"
fi
echo "events $JIM_FIRST_EVENT-$JIM_LAST_EVENT"
"""


# ---------------------------------------------------------------------------- the submitter's proxies


class Issuer:
    """A throwaway CA and the submitter's certificate (DN), owned by the account, and its proxies made by
    ``grid-proxy-init`` run as the account (what a user does: the proxy is the account's own file)."""

    def __init__(self, acct: Account) -> None:
        for tool in ("grid-proxy-init", "openssl", "runuser"):
            require_service(shutil.which(tool) is not None, f"{tool} (globus-proxy-utils, openssl, util-linux)")
        self.acct = acct
        self.dir = acct.work / "ca"
        self.dir.mkdir(mode=0o700)
        (self.dir / "ext.cnf").write_text("subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
        self._run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
                  "-days", "2", "-subj", "/O=Grid/CN=jim BLAH credential test CA")  # fmt: skip
        self._run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "user.key", "-out", "user.csr",
                  "-subj", DN)  # fmt: skip
        self._run("openssl", "x509", "-req", "-in", "user.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                  "-out", "user.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
        (self.dir / "ca.key").unlink()
        os.chmod(self.dir / "user.key", 0o600)
        for path in (self.dir, *self.dir.iterdir()):
            os.chown(path, acct.pw.pw_uid, acct.pw.pw_gid)

    def _run(self, *argv: str, user: str | None = None) -> None:
        cmd = ["runuser", "-u", user, "--", *argv] if user else list(argv)
        done = subprocess.run(cmd, cwd=self.dir, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{argv[0]} failed: {done.stdout}{done.stderr}"

    def proxy(self, out: Path, *, valid: str) -> Path:
        """``grid-proxy-init -valid H:M -out out`` as the account (over an existing file: a refresh)."""
        self._run("grid-proxy-init", "-cert", "user.pem", "-key", "user.key", "-out", str(out), "-q", "-valid", valid,
                  user=HTC_USER)  # fmt: skip
        st = out.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (self.acct.pw.pw_uid, 0o600), st
        return out


def _end(proxy: Path) -> float:
    """The proxy's end: the earliest end of its certificates (as jim reads it)."""
    from cryptography import x509

    certs = x509.load_pem_x509_certificates(proxy.read_bytes())
    return min(c.not_valid_after_utc.timestamp() for c in certs)


def _epoch(iso: str) -> float:
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


# ---------------------------------------------------------------------------- jim's side, as the account


@pytest.fixture
def work(account: Account) -> Iterator[Account]:  # noqa: F811
    """The account, with every Condor-G job of its work directory removed afterwards (a failed test's too)."""
    try:
        yield account
    finally:
        from support.condor_pool import remove_jobs_under  # (lazy: it imports the pool's bindings)

        remove_jobs_under(account.work)


def _configure(acct: Account, batch: str, credentials: str = "") -> None:
    acct.configure(batch)
    if credentials:
        config = acct.work / "jim.toml"
        config.write_text(config.read_text() + f"[credentials]\n{credentials}\n")


def _submit(acct: Account, proxy: Path, environment: str, extra: str = "", name: str = "job") -> int:
    exe = acct.script(f"{name}.sh", REPORT)
    sub = acct.write(
        acct.work / f"{name}.sub",
        "universe = grid\ngrid_resource = batch jim\n"
        f'executable = {exe}\nenvironment = "{environment}"\nx509userproxy = {proxy}\n{extra}'
        f"initialdir = {acct.work}\noutput = {acct.work}/{name}.out\nerror = {acct.work}/{name}.err\n"
        f"log = {acct.work}/{name}.log\nqueue\n",
    )
    done = in_htcondor_root("condor_submit", "-terse", str(sub), user=HTC_USER, cwd="/")
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split(".")[0])


def _status(jim: str, acct: Account, job_id: str) -> dict[str, Any]:
    """``jim status ID --json`` as the account, with its configuration (blahpd's jim, in the chroot)."""
    env = {**chroot_env(), "JIM_CONFIG": str(acct.work / "jim.toml")}
    done = in_htcondor_root(jim, "status", job_id, "--json", user=HTC_USER, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def _one_job(acct: Account, cluster: int, timeout: float = TIMEOUT) -> str:
    """The jim grid job the Condor-G job became."""
    deadline = time.monotonic() + timeout
    while not acct.jim_ids():
        assert time.monotonic() < deadline, f"no jim grid job for Condor-G job {cluster}: {acct.ad(cluster)}"
        time.sleep(1)
    (job_id,) = acct.jim_ids()
    return job_id


def _record_credentials(acct: Account, job_id: str) -> list[dict[str, str]]:
    root = etree.parse(str(acct.home / "db" / f"{job_id}.xml")).getroot()
    return [dict(el.attrib) for el in root.iterfind("credentials/credential")]


def _reports(out: str) -> dict[int, dict[str, str]]:
    """What each local job printed (``cred INDEX key=value``), by local job."""
    found: dict[int, dict[str, str]] = {}
    for m in re.finditer(r"^cred (\d+) (\w+)=(.*)$", out, re.M):
        found.setdefault(int(m[1]), {})[m[2]] = m[3]
    return found


def _check_copy(acct: Account, job_id: str, reports: dict[int, dict[str, str]]) -> None:
    """Every local job read jim's copy (0600, the account's), of the submitter's subject."""
    copy = acct.home / "jobs" / job_id / "credentials" / "x509up"
    st = copy.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (acct.pw.pw_uid, 0o600), st
    assert (copy.parent.stat().st_mode & 0o777) == 0o700
    assert len(reports) >= 2, reports
    for index, seen in reports.items():
        assert seen["proxy"] == str(copy), (index, seen)
        assert seen["readable"] == "yes" and seen["mode"] == "600", (index, seen)
        assert seen["identity"] == DN, (index, seen)


# ---------------------------------------------------------------------------- the tests


@pytest.mark.parametrize(
    "batch", ['adapter = "fork"\ncores = 4', 'adapter = "condor"\npython = "/usr/bin/python3"'], ids=["fork", "condor"]
)
def test_the_proxy_blahpd_passes_reaches_every_local_job(work: Account, blah_jim: str, batch: str):  # noqa: F811
    acct = work
    _configure(acct, batch)
    proxy = Issuer(acct).proxy(acct.work / "proxy.pem", valid=f"{LONG_HOURS}:00")
    end = _end(proxy)
    # (the job's own X509_USER_PROXY names another file: jim's copy wins)
    cluster = _submit(acct, proxy, "JIM_JOBTYPE=montecarlo JIM_EVENTS=10 X509_USER_PROXY=/etc/hostname")
    ad = acct.wait(cluster, {4, 5})
    assert ad["JobStatus"] == 4 and ad.get("ExitCode") == 0, ad
    job_id = _one_job(acct, cluster)
    assert acct.record(job_id).count("<localjob ") == 2

    reports = _reports((acct.work / "job.out").read_text())
    _check_copy(acct, job_id, reports)
    for index, seen in reports.items():  # (what the local job saw: this proxy, less the seconds since)
        assert 0 < end - time.time() <= int(seen["left"]) <= end - ad.get("QDate", 0), (index, seen)
    assert (acct.home / "jobs" / job_id / "credentials" / "x509up").read_bytes() == proxy.read_bytes()

    (cred,) = _record_credentials(acct, job_id)
    assert cred == {"kind": "x509", "subject": DN, "notAfter": cred["notAfter"]}, cred
    assert _epoch(cred["notAfter"]) == end
    (shown,) = _status(blah_jim, acct, job_id)["credentials"]
    assert shown["kind"] == "x509" and shown["subject"] == DN and _epoch(shown["notAfter"]) == end, shown
    assert 0 < shown["secondsLeft"] <= LONG_HOURS * 3600
    state = json.loads((acct.home / "jobs" / job_id / "credentials" / "state.json").read_text())
    assert state["x509"]["path"] == str(proxy) and state["x509"]["subject"] == DN, state
    assert b"PRIVATE KEY" not in (acct.home / "db" / f"{job_id}.xml").read_bytes()


def _wait_held(jim: str, acct: Account, job_id: str, cluster: int) -> dict[str, Any]:
    """``jim status --json`` once every local job is PLANNED waiting for a refresh."""
    deadline = time.monotonic() + TIMEOUT
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = _status(jim, acct, job_id)
        local = status.get("localJobs") or []
        if local and all(lj["state"] == "PLANNED" and "waiting for a refresh" in (lj["waiting"] or "") for lj in local):
            return status
        time.sleep(1)
    raise AssertionError(f"the local jobs never waited for a refresh: {status}; Condor-G: {acct.ad(cluster)}")


def _wait_replaced(acct: Account, job_id: str, old_end: float) -> tuple[dict[str, Any], float]:
    """state.json once its end is no longer ``old_end``, and when that was seen (time.time())."""
    state_file = acct.home / "jobs" / job_id / "credentials" / "state.json"
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):  # (never half-written: atomic; but be patient)
            state = {}
        if state.get("x509", {}).get("notAfter") not in (None, old_end):
            return state, time.time()
        time.sleep(0.05)
    raise AssertionError(f"jim's copy was never replaced: {state_file.read_text()}")


def _wait_done(acct: Account, cluster: int, since: float) -> tuple[dict[str, Any], float | None]:
    """The Condor-G job's last ad once it left the queue completed or held, and when (time.time()) the test
    first saw its ``DelegatedProxyExpiration`` change from the one it had at ``since`` (None: never)."""
    deadline = time.monotonic() + TIMEOUT
    first = acct.ad(cluster).get("DelegatedProxyExpiration")
    changed: float | None = None
    ad: dict[str, Any] = {}
    while time.monotonic() < deadline:
        ad = acct.ad(cluster)
        if changed is None and ad.get("DelegatedProxyExpiration") not in (None, first):
            changed = time.time()
        if ad.get("JobStatus") in (4, 5):
            return ad, changed
        time.sleep(1)
    raise AssertionError(f"Condor-G job {cluster} never ended: {ad}")


def test_a_refreshed_x509userproxy_releases_the_local_jobs_waiting_for_it(work: Account, blah_jim: str):  # noqa: F811
    from jim.worker import CREDENTIAL_WAIT  # (how often the worker looks again while local jobs wait)

    acct = work
    _configure(acct, 'adapter = "fork"\ncores = 4', f"margin = {LONG_MARGIN}.0")
    issuer = Issuer(acct)
    proxy = issuer.proxy(acct.work / "proxy.pem", valid=SHORT_VALID)
    short_end = _end(proxy)
    assert SHORT_SECONDS - 60 < short_end - time.time() <= SHORT_SECONDS
    cluster = _submit(
        acct, proxy, "JIM_JOBTYPE=montecarlo JIM_EVENTS=10", extra=f"+BatchRuntime = {WALLTIME}\n", name="refresh"
    )
    job_id = _one_job(acct, cluster)

    # held: the proxy ends before the local jobs' wall time + the margin, and stays so while nothing changes
    status = _wait_held(blah_jim, acct, job_id, cluster)
    assert len(status["localJobs"]) == 2, status["localJobs"]
    since = [lj["waitingSince"] for lj in status["localJobs"]]
    time.sleep(CREDENTIAL_WAIT + 2)  # (the worker looked again at least once)
    status = _status(blah_jim, acct, job_id)
    for lj, first in zip(status["localJobs"], since):
        assert lj["state"] == "PLANNED" and lj["batchId"] is None and lj["waitingSince"] == first, lj
        assert f"before the local job's expected end ({WALLTIME} s) + {LONG_MARGIN} s" in lj["waiting"], lj
    (shown,) = status["credentials"]
    assert shown["subject"] == DN and _epoch(shown["notAfter"]) == short_end, shown
    assert shown["secondsLeft"] < WALLTIME + LONG_MARGIN
    assert acct.ad(cluster).get("JobStatus") == 1, acct.ad(cluster)  # (idle: jim's grid job is PENDING)
    assert acct.ad(cluster).get("DelegatedProxyExpiration") == short_end

    # the refresh: a longer proxy of the same subject written over the x509userproxy file
    old = os.stat(proxy)
    issuer.proxy(proxy, valid=f"{LONG_HOURS}:00")
    new = os.stat(proxy)
    long_end = _end(proxy)
    assert long_end > short_end + 3600
    reconfig = in_htcondor_root("condor_reconfig", "-daemon", "schedd")  # (the gridmanager looks at proxies now)
    assert reconfig.returncode == 0, reconfig.stderr
    state, seen_at = _wait_replaced(acct, job_id, short_end)
    copy = acct.home / "jobs" / job_id / "credentials" / "x509up"
    latency = copy.stat().st_mtime - new.st_mtime
    assert state["x509"]["notAfter"] == long_end and state["x509"]["subject"] == DN, state
    assert copy.read_bytes() == proxy.read_bytes()
    assert 0 <= latency < 30, latency

    # the local jobs run with the new proxy, Condor-G forwards the refresh, the Condor-G job completes
    ad, condor_saw = _wait_done(acct, cluster, new.st_mtime)
    assert ad["JobStatus"] == 4 and ad.get("ExitCode") == 0, ad
    assert ad.get("DelegatedProxyExpiration") == long_end, ad  # (the gridmanager's BLAH_JOB_REFRESH_PROXY)
    reports = _reports((acct.work / "refresh.out").read_text())
    _check_copy(acct, job_id, reports)
    for index, seen in reports.items():
        assert int(seen["left"]) > SHORT_SECONDS + 3600, (index, seen)  # (the short proxy never had this much)
    (cred,) = _record_credentials(acct, job_id)
    assert cred["subject"] == DN and _epoch(cred["notAfter"]) == long_end, cred
    status = _status(blah_jim, acct, job_id)
    (shown,) = status["credentials"]
    assert _epoch(shown["notAfter"]) == long_end and shown["secondsLeft"] > SHORT_SECONDS + 3600, shown
    assert [lj["state"] for lj in status["localJobs"]] == ["DONE", "DONE"], status["localJobs"]
    assert all(not lj["waiting"] for lj in status["localJobs"]), status["localJobs"]
    logged = (acct.home / "jobs" / job_id / "jim.log").read_text()
    assert f"grid job {job_id}: its X.509 proxy was refreshed" in logged, logged[-2000:]

    submitted = min(_epoch(lj["submitted"]) for lj in status["localJobs"])
    print(
        f"\nrefresh: grid-proxy-init rewrote the x509userproxy file (inode {old.st_ino} -> {new.st_ino}); "
        f"jim's copy replaced {latency:.3f} s later (seen by the test {seen_at - new.st_mtime:.3f} s after); "
        f"the local jobs, waiting {new.st_mtime - _epoch(since[0]):.0f} s, submitted {submitted - new.st_mtime:.1f} s "
        f"after it; Condor-G's DelegatedProxyExpiration seen new "
        f"{'never' if condor_saw is None else f'{condor_saw - new.st_mtime:.1f} s after'}; "
        f"the Condor-G job done {time.time() - new.st_mtime:.0f} s after"
    )
    for line in logged.splitlines():  # (a version read while grid-proxy-init wrote it, if the monitor saw one)
        if "is not used" in line:
            print(f"refresh: {line}")
