"""The grid job's credential through a real GRAM5 gatekeeper and the real Globus clients (docs/credentials.md).

The test site of tests/services/gram (``start.sh``, run by the module's first fixture as root: idempotent,
and it reinstalls the repository's jim into the site's venv when the sources changed): the client account
jimsubmit makes its proxies with ``grid-proxy-init`` and submits with ``globusrun``; the job manager, jim
and the local jobs (jim's fork backend) run as the mapped account jimgrid.

1. Every local job of a grid job (``count=2``) finds the client's delegated proxy through
   ``X509_USER_PROXY``, and that names jim's copy (``jobs/<id>/credentials/x509up``), not the job
   manager's ``x509_user_proxy`` the job's own environment names.
2. A proxy shorter than the local jobs' wall-time limit (``maxwalltime``) plus ``[credentials] margin``
   holds them PLANNED with the reason; ``globusrun -refresh-proxy`` with a longer proxy makes the job
   manager rewrite its file (in place), jim's monitor replaces its copy (the time from globusrun's return to
   that is printed), the held local jobs run with the new proxy, the job ends DONE.  In poll and push mode.

Without the site the tests skip with the reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import datetime
import json
import os
import pwd
import re
import shutil
import subprocess
import time
import tomllib
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from test_gram_e2e import START, STATE, TERMINAL, Site, _jim_ready, _unavailable, site  # noqa: F401

pytestmark = [pytest.mark.gram, pytest.mark.slow]

#: The local jobs' wall-time limit (minutes, GRAM's ``maxwalltime``) of the held job.
WALL_MINUTES = 10
#: What each local job prints: ``<index> <word>=<value>`` lines (the RSL's ``""`` is one ``"``).
REPORT = (
    'for w in subject issuer identity timeleft; do echo ""$JIM_INDEX $w=$(grid-proxy-info -$w)""; done; '
    'echo ""$JIM_INDEX proxy=$X509_USER_PROXY""; echo ""$JIM_INDEX job=$JIM_GRID_JOB_ID""'
)
WAITING = "waiting for a refresh"


@pytest.fixture(scope="module", autouse=True)
def _site_started() -> None:
    """The GRAM test site up, with this repository's jim (``start.sh`` does nothing more when it is)."""
    if os.geteuid() != 0:
        _unavailable("the GRAM credential tests run as root (they switch to jimsubmit and jimgrid)")
    try:
        done = subprocess.run([str(START)], capture_output=True, text=True, timeout=1200)
    except (OSError, subprocess.TimeoutExpired) as e:
        _unavailable(f"{START} did not finish: {e}")
    if done.returncode != 0:
        _unavailable(f"{START} failed: {(done.stdout + done.stderr).strip()[-800:]}")


# ---------------------------------------------------------------------------- helpers


def _margin() -> float:
    """The site's ``[credentials] margin`` (jim's default 300 s)."""
    try:
        conf = tomllib.loads((STATE / "jim.toml").read_text())
    except (OSError, ValueError):
        conf = {}
    return float(conf.get("credentials", {}).get("margin", 300.0))


def _job_dir(site: Site, job_id: str) -> Path:  # noqa: F811
    """The grid job's area in the mapped account's jim home (``~/.jim``: the job manager sets no JIM_HOME)."""
    return Path(site.env["JIM_GRAM_MAPPED_HOME"]) / ".jim" / "jobs" / job_id


def _cred_state(site: Site, job_id: str) -> dict:  # noqa: F811
    """The grid job's ``credentials/state.json``, its X.509 entry."""
    state = json.loads((_job_dir(site, job_id) / "credentials" / "state.json").read_text())
    return dict(state["x509"])


def _record_credential(site: Site, job_id: str) -> dict[str, str]:  # noqa: F811
    """The ``<credential>`` of the grid job's record, as the mapped account's jim wrote it."""
    record = Path(site.env["JIM_GRAM_MAPPED_HOME"]) / ".jim" / "db" / f"{job_id}.xml"
    found = ET.parse(record).getroot().findall(".//credentials/credential")
    assert len(found) == 1, f"{record}: {[c.attrib for c in found]}"
    return dict(found[0].attrib)


def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _proxy_end(path: Path) -> float:
    """The end of a proxy file: the earliest end of its certificates."""
    blocks = re.findall(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", path.read_bytes(), re.S)
    assert blocks, f"{path} holds no certificate"
    return min(x509.load_pem_x509_certificate(b).not_valid_after_utc.timestamp() for b in blocks)


def _contact(proc: subprocess.CompletedProcess) -> str:
    contact = next((line for line in proc.stdout.splitlines() if line.startswith("https://")), "")
    assert proc.returncode == 0 and contact, proc.stdout + proc.stderr
    return contact


def _reports(text: str, n: int) -> dict[int, dict[str, str]]:
    """The ``<index> <word>=<value>`` lines of the merged stdout, per local job; every one of the ``n``."""
    out: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"(\d+) (\w+)=(.*)", line)
        if m:
            out.setdefault(int(m.group(1)), {})[m.group(2)] = m.group(3)
    assert sorted(out) == list(range(n)), text
    return out


class Proxies:
    """Proxies of the client account made by ``grid-proxy-init`` in a private directory of its own."""

    def __init__(self, site: Site):  # noqa: F811
        self.site = site
        pw = pwd.getpwnam(site.env["JIM_GRAM_SUBMIT_USER"])
        self.dir = Path(pw.pw_dir) / ".globus" / f"jim-credtest-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir(mode=0o700)
        os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    def make(self, name: str, valid: str) -> Path:
        """A proxy valid ``valid`` (``H:M``) from now."""
        path = self.dir / f"{name}.pem"
        made = self.site.client("grid-proxy-init", "-q", "-valid", valid, "-out", str(path))
        assert made.returncode == 0, made.stdout + made.stderr
        return path

    def client(self, proxy: Path, *argv: str) -> subprocess.CompletedProcess:
        """A Globus client command as the client account, with ``proxy`` as its credential."""
        return self.site.client("env", f"X509_USER_PROXY={proxy}", *argv)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def proxies(site: Site) -> Iterator[Proxies]:  # noqa: F811
    p = Proxies(site)
    yield p
    p.remove()


def _wait(what: str, check, timeout: float, step: float = 0.5):
    """``check()`` until it returns something true; that, or an AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(step)


# ---------------------------------------------------------------------------- 1. every local job


def test_every_local_job_gets_the_clients_proxy_through_jims_copy(site):  # noqa: F811
    """``globusrun -s``: the merged stdout of 2 local jobs, each reporting the proxy it finds."""
    _jim_ready(site)
    me = {w: site.client("grid-proxy-info", f"-{w}").stdout.strip() for w in ("subject", "identity")}
    assert all(me.values()), me
    rsl = (
        f'&(executable=/bin/sh)(arguments=-c "{REPORT}")(count=2)'
        "(environment=(X509_USER_PROXY /etc/hostname))"  # (the job's own: never what it gets)
    )
    proc = site.client("globusrun", "-s", "-r", site.poll, rsl)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reports = _reports(proc.stdout, 2)
    (job_id,) = {got["job"] for got in reports.values()}  # (jim's id, whatever else the site runs meanwhile)
    copy = _job_dir(site, job_id) / "credentials" / "x509up"
    jm_file = _cred_state(site, job_id)["path"]  # the job manager's delegated proxy jim copied
    assert re.fullmatch(r"/home/[^/]+/\.globus/job/[^/]+/[^/]+/x509_user_proxy", jm_file), jm_file

    for index, got in reports.items():
        # the delegated proxy: a proxy of the client's proxy, of the client's identity
        assert got["identity"] == me["identity"], (index, got)
        assert got["issuer"] == me["subject"], (index, got)
        assert got["subject"].startswith(me["subject"] + "/CN="), (index, got)
        assert int(got["timeleft"]) > 3600, (index, got)
        assert got["proxy"] == str(copy) != jm_file, (index, got)

    # the job's environment named the job manager's file (GRAM's) and /etc/hostname (the RSL's): the wrapper
    # put jim's copy over both
    record = Path(site.env["JIM_GRAM_MAPPED_HOME"]) / ".jim" / "db" / f"{job_id}.xml"
    named = [
        pair[1].text
        for attr in ET.parse(record).getroot().iter("attribute")
        if attr.get("name") == "environment"
        for pair in attr.findall("list")
        if pair[0].text == "X509_USER_PROXY"
    ]
    assert sorted(named) == sorted([jm_file, "/etc/hostname"]), named
    assert (copy.stat().st_mode & 0o777, copy.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    st = site.wait_jim(job_id)
    assert st["state"] == "DONE" and st["counts"] == {"DONE": 2}, st
    (cred,) = st["credentials"]
    assert cred["kind"] == "x509" and cred["subject"] == me["identity"], cred
    assert cred["secondsLeft"] > 3600, cred


# ---------------------------------------------------------------------------- 2. held, refreshed, run


def _gram_terminal(site: Site, contact: str) -> str | None:  # noqa: F811
    """GRAM's state of the job once it is DONE or FAILED (``globus-job-status``)."""
    lines = site.client("globus-job-status", contact, timeout=60).stdout.split()
    return lines[0] if lines and lines[0] in TERMINAL else None


def _held(site: Site, job_id: str, n: int) -> dict | None:  # noqa: F811
    """jim's status once all ``n`` local jobs wait PLANNED for a refresh (None before)."""
    st = site.status(job_id)
    assert st["state"] not in TERMINAL, st
    assert all(lj["state"] == "PLANNED" for lj in st["localJobs"]), [lj["state"] for lj in st["localJobs"]]
    locals_ = st["localJobs"]
    return st if len(locals_) == n and all(WAITING in (lj.get("waiting") or "") for lj in locals_) else None


@pytest.mark.parametrize("mode", ["poll", "push"])
def test_held_local_jobs_run_with_the_refreshed_proxy(site, proxies, mode):  # noqa: F811
    _jim_ready(site)
    service = site.poll if mode == "poll" else site.push
    margin = _margin()
    # a proxy that ends before the local jobs' wall-time limit + the margin, by 3 minutes
    short_minutes = int(WALL_MINUTES + margin // 60) - 3
    assert short_minutes > 1
    short = proxies.make("short", f"0:{short_minutes}")
    out = Path(site.env["JIM_GRAM_MAPPED_HOME"]) / f"jim-credtest-{proxies.dir.name[-8:]}"
    rsl = (
        f'&(executable=/bin/sh)(arguments=-c "{REPORT}")(count=2)(maxwalltime={WALL_MINUTES})'
        f"(stdout={out}.out)(stderr={out}.err)"
    )
    contact = _contact(proxies.client(short, "globusrun", "-b", "-r", service, rsl))
    job_id = site.jim_id(service, contact)
    try:
        _refresh_and_run(site, proxies, job_id, contact, margin, Path(f"{out}.out"))
    finally:
        if site.status(job_id)["state"] not in TERMINAL:  # (a failed test leaves no job waiting an hour)
            site.client("globus-job-cancel", "-f", contact, timeout=60)
            site.jim("cancel", "--job-id", job_id)
        for suffix in (".out", ".err"):
            Path(f"{out}{suffix}").unlink(missing_ok=True)


def _refresh_and_run(site, proxies, job_id, contact, margin, stdout):  # noqa: F811
    # held: both local jobs PLANNED with the reason, jim's copy the short proxy
    st = _wait(f"grid job {job_id}'s local jobs waiting for a refresh", lambda: _held(site, job_id, 2), 60)
    old = _cred_state(site, job_id)
    old_end = float(old["notAfter"])
    assert old_end - time.time() < WALL_MINUTES * 60 + margin, old
    for lj in st["localJobs"]:
        assert f"before the local job's expected end ({WALL_MINUTES * 60} s) + {margin:g} s" in lj["waiting"], lj
        assert lj["waitingSince"] and lj["batchId"] is None, lj
    (cred,) = st["credentials"]
    assert cred["notAfter"] == _iso(old_end) == _record_credential(site, job_id)["notAfter"], cred
    assert st["state"] == "PENDING", st["state"]

    # the refresh: a 3 h proxy, through the job manager
    long = proxies.make("long", "3:0")
    copy = _job_dir(site, job_id) / "credentials" / "x509up"
    before = copy.stat()
    t0 = time.monotonic()
    done = proxies.client(long, "globusrun", "-refresh-proxy", contact)
    returned, returned_at = time.monotonic(), time.time()
    assert done.returncode == 0, done.stdout + done.stderr
    jm = os.lstat(old["path"])  # the job manager's file, rewritten before globusrun returned
    assert (jm.st_size, jm.st_mtime_ns) != tuple(old["version"][2:4]), "the job manager's file did not change"
    in_place = (jm.st_dev, jm.st_ino) == tuple(old["version"][:2])

    def replaced() -> float | None:
        now = os.stat(copy)
        return time.monotonic() if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino) else None

    seen = _wait(f"jim's copy {copy} replaced", replaced, 30, step=0.005)
    print(
        f"globusrun -refresh-proxy: {returned - t0:.2f} s (job manager's file rewritten in place: {in_place}); "
        f"jim's copy replaced {seen - returned:.2f} s after globusrun returned"
    )

    def state_moved() -> dict | None:
        now = _cred_state(site, job_id)
        return now if now["version"] != old["version"] else None

    new = _wait("credentials/state.json of the new version", state_moved, 10, step=0.05)
    new_end, long_end = float(new["notAfter"]), _proxy_end(long)
    assert long_end - 120 < new_end <= long_end + 1, (new, _iso(long_end))
    assert new["path"] == old["path"] and new["subject"] == old["subject"], (old, new)
    assert copy.read_bytes() == Path(old["path"]).read_bytes()

    # the held local jobs run with it; the grid job ends DONE with the new end shown
    st = site.wait_jim(job_id, timeout=120)
    assert st["state"] == "DONE" and st["counts"] == {"DONE": 2}, st
    (cred,) = st["credentials"]
    assert cred["notAfter"] == _iso(new_end) == _record_credential(site, job_id)["notAfter"], cred
    assert cred["secondsLeft"] > 2 * 3600, cred
    assert all(not lj.get("waiting") for lj in st["localJobs"]), st["localJobs"]
    submitted = min(datetime.datetime.fromisoformat(lj["submitted"]).timestamp() for lj in st["localJobs"])
    print(f"held local jobs submitted {submitted - returned_at:.2f} s after globusrun returned")

    assert _wait("GRAM's DONE", lambda: _gram_terminal(site, contact), 90) == "DONE"
    text = _wait(f"the merged stdout in {stdout}", lambda: stdout.is_file() and stdout.read_text(), 30)
    for index, got in _reports(text, 2).items():
        left = int(got["timeleft"])
        assert left > 2 * 3600 and left > old_end - time.time(), (index, got, _iso(old_end))
        assert got["proxy"] == str(copy) and got["job"] == job_id, (index, got)
    print(f"local jobs' timeleft {sorted(int(r['timeleft']) for r in _reports(text, 2).values())} s")
