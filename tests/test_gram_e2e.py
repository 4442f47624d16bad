"""jim behind a real GRAM5 gatekeeper, driven by the real Globus clients.

Needs the test site of tests/services/gram (``start.sh``, as root): a
gatekeeper on localhost, the services jobmanager-jim (poll mode) and
jobmanager-jim-seg (push mode) installed by ``jim gram-install``, the
submitting account jimsubmit (certificate and proxy; every client runs as it,
never as root, which GSI would treat as the host) and the mapped account
jimgrid (the job manager, jim and the local jobs run as it). start.sh writes
what these tests need to ``$JIM_GRAM_TEST_STATE/env.sh``.

Without that site the tests skip with the reason, except under ``CI=true``,
where they fail. The tests themselves run as root (to become those users).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gram, pytest.mark.slow]

STATE = Path(os.environ.get("JIM_GRAM_TEST_STATE", "/var/lib/jim-gram-test"))
START = Path(__file__).resolve().parent / "services" / "gram" / "start.sh"

MC_ARGS = ["-c", "echo event $JIM_FIRST_EVENT-$JIM_LAST_EVENT"]
MC_RSL = (
    '&(executable=/bin/sh)(arguments=-c "echo event $JIM_FIRST_EVENT-$JIM_LAST_EVENT")'
    "(jimtype=montecarlo)(events=1000)(eventsperjob=250)"
)
TERMINAL = {"DONE", "FAILED"}


def _unavailable(reason: str):
    reason += f" (run {START} as root first)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(reason)
    pytest.skip(reason)


class Site:
    """What start.sh wrote to env.sh, and how to use it."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.poll = env["JIM_GRAM_POLL_SERVICE"]
        self.push = env["JIM_GRAM_PUSH_SERVICE"]
        self.fork = env["JIM_GRAM_FORK_SERVICE"]
        self.seg_dir = Path(env["JIM_GRAM_SEG_DIR"])
        self.jm_log = {self.poll: Path(env["JIM_GRAM_JM_LOG_POLL"]), self.push: Path(env["JIM_GRAM_JM_LOG_PUSH"])}

    def client(self, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess:
        """A Globus client command, run as the submitting user."""
        return subprocess.run(
            [self.env["JIM_GRAM_AS_SUBMITTER"], *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def jim(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """The jim command, run as the mapped user with the job manager's jim settings."""
        return subprocess.run(
            [self.env["JIM_GRAM_AS_MAPPED"], self.env["JIM_GRAM_JIM"], *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def status(self, job_id: str) -> dict:
        proc = self.jim("status", job_id, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def wait_jim(self, job_id: str, states=TERMINAL, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            st = self.status(job_id)
            if st["state"] in states or time.monotonic() > deadline:
                return st
            time.sleep(1)

    def jim_id(self, service: str, contact: str, timeout: float = 60) -> str:
        """jim's grid job id for a GRAM job contact, from the job manager's log
        (INFO line ``msg="job submitted to lrm" gramid=/a/b/ lrm_id="<id>"``)."""
        gramid = re.sub(r"^https://[^/]+", "", contact.strip())
        pattern = re.compile(rf'gramid={re.escape(gramid)} lrm_id="([^"]+)"')
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                found = pattern.findall(self.jm_log[service].read_text(errors="replace"))
            except FileNotFoundError:
                found = []
            if found:
                return found[-1]
            time.sleep(0.5)
        raise AssertionError(f"no jim job id for {contact} in {self.jm_log[service]}")

    def last_jim_id(self, service: str) -> str:
        """jim's id of the job the service's job manager submitted last."""
        found = re.findall(
            r'msg="job submitted to lrm" gramid=\S+ lrm_id="([^"]+)"', self.jm_log[service].read_text(errors="replace")
        )
        assert found, f"no submitted job in {self.jm_log[service]}"
        return found[-1]

    def gram_state(self, contact: str) -> str:
        return self.client("globus-job-status", contact, timeout=60).stdout.strip().splitlines()[0]

    def wait_gram(self, contact: str, wanted: set[str], timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.gram_state(contact)
            if state in wanted:
                break
            time.sleep(1)
        return state


@pytest.fixture(scope="module")
def site() -> Site:
    if os.geteuid() != 0:
        _unavailable("the GRAM end-to-end tests run as root (they switch to jimsubmit and jimgrid)")
    env_file = STATE / "env.sh"
    if not env_file.is_file():
        _unavailable(f"no GRAM test site: {env_file} is missing")
    env = {}
    for line in env_file.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            env[key.strip()] = shlex.split(value)[0] if value else ""
    pid = env.get("JIM_GRAM_GATEKEEPER_PID", "")
    try:
        alive = os.readlink(f"/proc/{pid}/exe") == "/usr/sbin/globus-gatekeeper"
    except OSError:
        alive = False
    if not alive:
        _unavailable(f"the test gatekeeper (pid {pid or '?'}) is not running")
    s = Site(env)
    # a proxy good for the whole run
    if s.client("grid-proxy-info", "-exists", "-valid", "1:0").returncode != 0:
        made = s.client("grid-proxy-init", "-q", "-hours", "24", "-out", env["JIM_GRAM_PROXY"])
        assert made.returncode == 0, made.stderr
    ping = s.client("globusrun", "-a", "-r", s.poll)
    assert "Authentication test successful" in ping.stdout, ping.stdout + ping.stderr
    return s


def _jim_ready(s: Site) -> None:
    proc = s.jim("--help")
    if proc.returncode != 0:
        pytest.fail(
            f"{s.env['JIM_GRAM_JIM']} does not run as {s.env['JIM_GRAM_MAPPED_USER']}: "
            f"{proc.stderr.strip().splitlines()[-1:]}"
        )


# ---------------------------------------------------------------- (a)


def test_monte_carlo_through_globus_job_run(site):
    """The client streams back the merged output of the 4 local jobs, exit 0."""
    _jim_ready(site)
    t0 = time.monotonic()
    proc = site.client(
        "globus-job-run", site.poll, "-x", "(jimtype=montecarlo)(events=1000)(eventsperjob=250)", "/bin/sh", *MC_ARGS
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["event 1-250", "event 251-500", "event 501-750", "event 751-1000"], (
        proc.stdout + proc.stderr
    )
    print(f"globus-job-run through jobmanager-jim (poll): {elapsed:.1f} s")


def test_monte_carlo_through_globusrun_in_push_mode(site):
    _jim_ready(site)
    t0 = time.monotonic()
    proc = site.client("globusrun", "-s", "-r", site.push, MC_RSL)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["event 1-250", "event 251-500", "event 501-750", "event 751-1000"], (
        proc.stdout + proc.stderr
    )
    print(f"globusrun -s through jobmanager-jim-seg (push): {elapsed:.1f} s")


def test_fork_round_trip_for_comparison(site):
    t0 = time.monotonic()
    proc = site.client("globus-job-run", site.fork, "/bin/echo", "fork")
    assert proc.returncode == 0 and proc.stdout == "fork\n", proc.stdout + proc.stderr
    print(f"globus-job-run through jobmanager-fork: {time.monotonic() - t0:.1f} s")


# ---------------------------------------------------------------- (b)


def test_submit_status_cancel_leaves_no_local_job(site):
    _jim_ready(site)
    sub = site.client(
        "globus-job-submit", site.poll, "-x", "(jimtype=montecarlo)(events=40)(eventsperjob=10)", "/bin/sleep", "300"
    )
    contact = sub.stdout.strip().splitlines()[-1] if sub.stdout.strip() else ""
    assert sub.returncode == 0 and contact.startswith("https://"), sub.stdout + sub.stderr
    job_id = site.jim_id(site.poll, contact)
    assert site.wait_gram(contact, {"ACTIVE"}) == "ACTIVE"
    running = site.wait_jim(job_id, {"ACTIVE"}, timeout=60)
    assert len(running["localJobs"]) == 4

    cancel = site.client("globus-job-cancel", "-f", contact)
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    st = site.wait_jim(job_id, TERMINAL, timeout=60)
    assert st["state"] == "FAILED" and st.get("cancelRequested") is True, st
    for local in st["localJobs"]:
        assert local["state"] in {"CANCELLED", "DONE", "FAILED", "LOST"}, local
        assert local["state"] == "CANCELLED", local
        pid = str(local.get("batchId") or "").split(":")[0]
        if pid.isdigit():  # fork adapter: the batch id starts with the pid
            assert not _alive(int(pid)), f"local job {local['index']} (pid {pid}) still runs"
    assert st.get("outputTar") and Path(st["outputTar"]).is_file(), st.get("outputTar")
    # GRAM forgets a cancelled job: globus-job-status then prints DONE (or FAILED)
    assert site.gram_state(contact) in {"FAILED", "DONE"}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


# ---------------------------------------------------------------- (c)

FAILING_RSL = (
    '&(executable=/bin/sh)(arguments=-c "echo event $JIM_FIRST_EVENT; '
    'if [ $JIM_FIRST_EVENT = 251 ]; then echo broken >&2; exit 3; fi")'
    "(jimtype=montecarlo)(events=1000)(eventsperjob=250)"
)


def _check_failed_job(site, job_id):
    st = site.wait_jim(job_id, TERMINAL)
    assert st["state"] == "FAILED" and st["exitCode"] == 3, st
    codes = {lj["index"]: lj.get("exitCode") for lj in st["localJobs"]}
    assert codes[1] == 3 and all(codes[i] == 0 for i in (0, 2, 3)), codes
    return st


def test_failing_local_job_in_push_mode(site):
    """The client's callbacks end in FAILED; the SEG event carries the local exit code.

    GRAM5 (globus-gram-job-manager 15.8) takes only the state from a SEG FAILED
    event: it keeps failure code 0 and no exit code, so `globusrun` then exits
    0 without a reason (see test_failing_local_job_in_poll_mode for the mode
    where the module gives the reason). The exit code reaches the job manager
    in the event line and stays in jim's record.
    """
    _jim_ready(site)
    proc = site.client("globusrun", "-r", site.push, FAILING_RSL)  # verbose: prints callbacks
    assert "GLOBUS_GRAM_PROTOCOL_JOB_STATE_FAILED" in proc.stdout, proc.stdout + proc.stderr
    assert "GLOBUS_GRAM_PROTOCOL_JOB_STATE_DONE" not in proc.stdout
    job_id = site.last_jim_id(site.push)
    events = []
    for day in sorted(site.seg_dir.glob("[0-9]" * 8)):
        events += [ev.split(";") for ev in day.read_text().splitlines()]
    mine = [e for e in events if len(e) == 5 and e[2] == job_id]
    assert mine and mine[-1][3] == "4" and mine[-1][4] == "3", mine  # FAILED, exit code 3
    _check_failed_job(site, job_id)


def test_failing_local_job_in_poll_mode(site):
    """Poll mode: the module turns FAILED into error 17 plus jim's reason with the exit code."""
    _jim_ready(site)
    proc = site.client("globusrun", "-s", "-r", site.poll, FAILING_RSL)
    assert proc.returncode == 17, proc.stdout + proc.stderr
    assert "(error code 17)" in proc.stderr
    details = re.search(r"^Details: (.*)$", proc.stderr, re.M)
    assert details and "exit code 3" in details.group(1), proc.stderr
    _check_failed_job(site, site.last_jim_id(site.poll))


# ---------------------------------------------------------------- (d)


@pytest.mark.parametrize(
    "extra, words",
    [
        ("(jimtype=montecarlo)(events=-5)", ["events", "-5"]),
        ("(jimtype=nosuch)(events=10)", ["nosuch"]),
    ],
)
@pytest.mark.parametrize("mode", ["poll", "push"])
def test_bad_rsl_extension_gives_gram_error_and_reason(site, extra, words, mode):
    _jim_ready(site)
    service = site.poll if mode == "poll" else site.push
    proc = site.client("globus-job-run", service, "-x", extra, "/bin/true", timeout=120)
    assert proc.returncode == 134, proc.stdout + proc.stderr
    assert "(error code 134)" in proc.stderr, proc.stderr
    details = re.search(r"^Details: (.*)$", proc.stderr, re.M)
    assert details, proc.stderr
    for word in words:
        assert word in details.group(1), details.group(1)


def test_undeclared_attribute_is_refused_by_gram(site):
    proc = site.client("globusrun", "-b", "-r", site.poll, "&(executable=/bin/true)(jimfoo=1)")
    assert "error code 1)" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


# ---------------------------------------------------------------- (e)

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?$")
# attributes that are times or identities by nature
VOLATILE = {
    "id",
    "MasterJobID",
    "tag",
    "batchId",
    "created",
    "updated",
    "submitted",
    "started",
    "ended",
    "heartbeat",
    "at",
    "host",
    "tar",
    # what each attempt was measured to use: a measure, different for every run
    "cpuUser",
    "cpuSystem",
    "maxRssKb",
    "wall",
    "coreSeconds",
    "cpu",
    # the credential: its time left when asked, and the plan's record of its end (each run's own proxy)
    "secondsLeft",
    "credentialEnd",
    "notAfter",
}
# what GRAM itself puts in the description, different for every GRAM job
GRAM_KEYS = {"cachetag", "jobdir", "statefile", "uniqid", "stdout", "stderr", "filestreamout", "rslsubstitution"}
GRAM_ENV = {"X509_USER_PROXY", "GLOBUS_GRAM_JOB_CONTACT"}


def _normal_xml(path: Path, job_id: str) -> list:
    """The grid job record as nested lists, times and ids masked; the push-mode
    SEG directory and GRAM's per-job description values removed."""

    def mask(value: str) -> str:
        if TIME.match(value):
            return "<time>"
        return value.replace(job_id, "<id>")

    def walk(el: ET.Element) -> list:
        attrs = {k: ("<volatile>" if k in VOLATILE else mask(v)) for k, v in el.attrib.items()}
        if el.tag == "description":  # GRAM's per-job values, as attribute elements too
            kids = [c for c in el if not (c.tag == "attribute" and c.get("name") in GRAM_KEYS)]
            for c in kids:
                if c.tag == "attribute" and c.get("name") == "environment":
                    for pair in [p for p in c if p.findtext("value") in GRAM_ENV]:
                        c.remove(pair)
            return [el.tag, sorted(attrs.items()), "", [walk(c) for c in kids]]
        if el.tag == "meta":
            attrs = {k: v for k, v in attrs.items() if not k.startswith("gram") and k != "segDir"}
        text = (el.text or "").strip()
        if el.tag == "source" and text.startswith("{"):
            desc = json.loads(text)
            for key in GRAM_KEYS:
                desc.pop(key, None)
            desc["environment"] = [p for p in desc.get("environment", []) if p[0] not in GRAM_ENV]
            text = json.dumps(desc, sort_keys=True)
        return [el.tag, sorted(attrs.items()), mask(text), [walk(c) for c in el]]

    return walk(ET.parse(path).getroot())


def _normal_status(st: dict, job_id: str):
    def walk(v, key=""):
        if isinstance(v, dict):
            return {k: walk(x, k) for k, x in v.items() if k not in VOLATILE}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str):
            return "<time>" if TIME.match(v) else v.replace(job_id, "<id>")
        return v

    return walk(st)


def test_poll_and_push_modes_leave_the_same_record(site):
    """The same Monte Carlo job in both modes: the same record, times and ids aside.

    Each local job lasts a few monitor intervals, so that both modes see it
    RUNNING (an instant job may be seen RUNNING or not, by timing alone).
    """
    _jim_ready(site)
    rsl = MC_RSL.replace('(arguments=-c "', '(arguments=-c "sleep 5; ')
    ids = {}
    for service in (site.poll, site.push):
        sub = site.client("globusrun", "-b", "-r", service, rsl)
        contact = next((line_ for line_ in sub.stdout.splitlines() if line_.startswith("https://")), "")
        assert contact, sub.stdout + sub.stderr
        ids[service] = site.jim_id(service, contact)
    states = {s: site.wait_jim(i) for s, i in ids.items()}
    assert all(st["state"] == "DONE" for st in states.values()), states
    poll_id, push_id = ids[site.poll], ids[site.push]

    a = _normal_status(states[site.poll], poll_id)
    b = _normal_status(states[site.push], push_id)
    assert a == b

    home = Path(site.env["JIM_GRAM_MAPPED_HOME"]) / ".jim" / "db"
    xa, xb = home / f"{poll_id}.xml", home / f"{push_id}.xml"
    if xa.is_file() and xb.is_file():  # the database files themselves, if laid out so
        assert _normal_xml(xa, poll_id) == _normal_xml(xb, push_id)
    # and the push-mode job really went through the SEG file
    lines = "".join(p.read_text() for p in site.seg_dir.glob("[0-9]" * 8))
    assert re.search(rf"^001;\d+;{re.escape(push_id)};8;0$", lines, re.M), lines[-500:]
    assert poll_id not in lines


# ---------------------------------------------------------------- (f) the shape of each local job

CORES_ARGS = ["-c", 'echo "cores=$JIM_CORES index=$JIM_INDEX"']


def _host_cores() -> int:
    """The cores of the test site's fork backend: its ``[batch] cores`` (tests/services/gram/start.sh
    gives it 8), else this host's."""
    try:
        cores = tomllib.loads((STATE / "jim.toml").read_text()).get("batch", {}).get("cores", 0)
    except (OSError, ValueError):
        cores = 0
    return int(cores) or len(os.sched_getaffinity(0))


def _cores_job(site: Site, rsl: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Run ``rsl`` (its executable prints ``$JIM_CORES``) through globus-job-run; the output and jim's status."""
    _jim_ready(site)
    proc = site.client("globus-job-run", site.poll, "-x", rsl, "/bin/sh", *CORES_ARGS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, site.wait_jim(site.last_jim_id(site.poll))


def test_xcount_gives_local_jobs_of_that_many_cores(site):
    """GRAM's xcount is the cores of each local job; count stays the copies (jobtype multiple)."""
    cores = min(4, _host_cores())  # (4 on the test site)
    proc, st = _cores_job(site, f"(xcount={cores})(count=2)")
    assert sorted(proc.stdout.split("\n")[:2]) == [f"cores={cores} index=0", f"cores={cores} index=1"], proc.stdout
    assert st["plan"]["cores"] == str(cores) and st["plan"]["shapeBy"] == "cores=xcount", st["plan"]
    assert st["counts"] == {"DONE": 2}, st["counts"]


def test_single_job_count_is_the_cores_of_one_local_job(site):
    """The gatekeeper passes jobtype=single and count to jim unchanged: one local job of count cores."""
    cores = min(4, _host_cores())
    proc, st = _cores_job(site, f"(jobtype=single)(count={cores})")
    assert proc.stdout.splitlines() == [f"cores={cores} index=0"], proc.stdout
    assert st["plan"]["cores"] == str(cores) and st["plan"]["shapeBy"] == "cores=count (jobtype=single)"
    assert st["counts"] == {"DONE": 1}, st["counts"]


def test_single_job_of_more_cores_than_the_host_has_is_refused(site):
    """(jobtype=single)(count=N) reaches jim as N cores of one local job; the fork backend's host
    must have them (else 134 naming both), as a batch system's node must."""
    _jim_ready(site)
    too_many = _host_cores() + 1
    rsl = f"(jobtype=single)(count={too_many})"
    proc = site.client("globus-job-run", site.poll, "-x", rsl, "/bin/sh", *CORES_ARGS)
    assert "(error code 134)" in proc.stderr, proc.stdout + proc.stderr
    assert f"{too_many} cores per local job asked; this host has {_host_cores()}" in proc.stderr, proc.stderr


@pytest.mark.parametrize("mode", ["poll", "push"])
def test_hostcount_2_is_refused_with_invalid_host_count(site, mode):
    _jim_ready(site)
    service = site.poll if mode == "poll" else site.push
    proc = site.client("globusrun", "-b", "-r", service, "&(executable=/bin/true)(hostcount=2)")
    assert "error code 35)" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
