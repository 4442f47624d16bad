"""The grid job's credential behind both test CEs: jim's copy in every local job, and ``arcrenew`` reaching it.

Without ARC's ``ENV/PROXY``, every local job finds the job's delegated proxy through
``X509_USER_PROXY``: jim's private copy in the grid job's area under the mapped account's jim home
(docs/credentials.md), a proxy of the client's own identity.  An ARC 7 job authenticated by a bearer
token alone finds its token through ``BEARER_TOKEN_FILE``, and jim records a credential of kind
``token``.

``arcrenew``: a job submitted with a proxy shorter than its wall-time limit plus jim's margin is held
PLANNED by jim (the local jobs' ``waiting`` reason).  After ``arcproxy`` makes a longer proxy and
``arcrenew`` renews the job's delegation in A-REX's store, jim's scan step writes it into the job's
control-directory ``proxy`` file (A-REX itself would not before the job leaves INLRMS:
jim/arc/renew.py), jim's monitor copies it, the held local jobs run and see the longer proxy, and the
job finishes.  The test prints how long after ``arcrenew`` returned the control directory's file and
jim's copy were replaced.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from jim.arc.options import parse_config

from support import arc as arc_ce

pytestmark = [pytest.mark.arc, pytest.mark.slow]

#: The short proxy of the renew test: less than the job's wall-time limit (30 min) plus jim's margin (300 s).
SHORT = "20m"

PROXY_JOB = r"""#!/bin/sh
k=$JIM_INDEX
p=$X509_USER_PROXY
echo "job $k proxy=$p"
[ -n "$p" ] && [ -r "$p" ] && echo "job $k readable"
echo "job $k subject=$(openssl x509 -in "$p" -noout -subject -nameopt compat | sed 's/^subject=//')"
echo "job $k end=$(date -u -d "$(openssl x509 -in "$p" -noout -enddate | sed 's/^notAfter=//')" +%s)"
echo "job $k now=$(date -u +%s)"
echo "job $k token=${BEARER_TOKEN_FILE:-none}"
"""

TOKEN_JOB = r"""#!/bin/sh
k=$JIM_INDEX
t=$BEARER_TOKEN_FILE
echo "job $k token=$t"
[ -n "$t" ] && [ -r "$t" ] && echo "job $k readable"
echo "job $k sha256=$(sha256sum < "$t" | cut -d' ' -f1)"
echo "job $k proxy=${X509_USER_PROXY:-none}"
"""


def xrsl(name: str, script: str = "job.sh") -> str:
    return f"""&(executable="{script}")(inputfiles=("{script}" "{{dir}}/{script}"))
 (jobname="{name}")(stdout="out.txt")(stderr="err.txt")(walltime="30 minutes")
 (runtimeenvironment="ENV/JIM/GENERIC" "count=2")
"""


# -- jim as the mapped account ------------------------------------------------------------------


def _custom_jim(ce: arc_ce.ArcCE) -> dict[str, str]:
    return parse_config(ce.host(ce.state / "etc" / "arc.conf").read_text()).get("custom:jim", {})


def jim_home(ce: arc_ce.ArcCE) -> Path:
    """The mapped account's jim home, as the account sees it (``jim_home`` of ``[custom:jim]``)."""
    pattern = _custom_jim(ce).get("jim_home", "~/.jim")
    home = str(ce.mapped.home)
    pattern = pattern.replace("{user}", ce.mapped.name).replace("{home}", home)
    return Path(home + pattern[1:] if pattern.startswith("~") else pattern)


def jim_status(ce: arc_ce.ArcCE, jim_id: str) -> dict:
    """``jim status --json`` of a grid job, asked of the CE's jim as the mapped account."""
    custom = _custom_jim(ce)
    env = {"JIM_HOME": str(jim_home(ce)), "JIM_CONFIG": custom.get("jim_config", "")}
    p = ce.mapped.run([custom["jim_command"], "status", jim_id, "--json"], env=env, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def jims_copy(ce: arc_ce.ArcCE, jim_id: str, name: str) -> Path:
    """jim's copy of the grid job's credential, as the mapped account (and its local jobs) see it."""
    return jim_home(ce) / "jobs" / jim_id / "credentials" / name


def wait_jim_id(ce: arc_ce.ArcCE, job: arc_ce.ArcJob, timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jim_id = ce.jim_id(job)
        if jim_id:
            return jim_id
        time.sleep(1)
    raise AssertionError(f"{ce.name}: jim never took {job.name}: A-REX {ce.arex_state(job)}\n{ce.diagnostics(job)}")


def cert_end(path: Path) -> float:
    """The end of the first certificate of a PEM file on this host, in seconds since the epoch."""
    p = subprocess.run(
        ["openssl", "x509", "-in", str(path), "-noout", "-enddate"], capture_output=True, text=True, timeout=30
    )
    assert p.returncode == 0, p.stderr
    when = p.stdout.strip().split("=", 1)[1]
    return calendar.timegm(time.strptime(when.replace("GMT", "").strip(), "%b %d %H:%M:%S %Y"))


def lines(out: str, k: int) -> dict[str, str]:
    """``job <k> key=value`` lines of the merged stdout: {key: value}."""
    found = {}
    for line in out.splitlines():
        m = re.match(rf"job {k} (\w+)(?:=(.*))?$", line)
        if m:
            found[m.group(1)] = m.group(2) if m.group(2) is not None else ""
    return found


def identity(ce: arc_ce.ArcCE) -> str:
    info = ce.run("arcproxy", "-I").stdout
    m = re.search(r"^Identity:\s*(.+)$", info, re.M)
    assert m, info
    return m.group(1).strip()


# -- jobs -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cred_jobs(each_arc):
    """On one CE: a job with a long proxy (a), then, with a short proxy, the job arcrenew is for (c)."""
    ce = each_arc
    plain = ce.submit("arc-cred-plain", xrsl("arc-cred-plain"), {"job.sh": PROXY_JOB})
    p = ce.run("arcproxy", "-c", f"validityPeriod={SHORT}")
    assert p.returncode == 0, p.stdout + p.stderr
    held = ce.submit("arc-cred-renew", xrsl("arc-cred-renew"), {"job.sh": PROXY_JOB})
    try:
        yield ce, plain, held
    finally:
        ce.run("arcproxy", "-c", "validityPeriod=12h")  # (the next submissions' proxy is a long one again)
        ce.clean(plain, held)


def test_every_local_job_has_jims_copy_of_the_proxy_without_env_proxy(cred_jobs):
    ce, job, _held = cred_jobs
    fields = ce.wait(job, "Finished", timeout=300)
    assert fields.get("Exit Code") == "0", (fields, ce.diagnostics(job))
    jim_id = ce.jim_id(job)
    assert jim_id
    out = (ce.get(job) / "out.txt").read_text()
    who = identity(ce)
    for k in (0, 1):
        seen = lines(out, k)
        assert seen.get("proxy") == str(jims_copy(ce, jim_id, "x509up")), out
        assert "readable" in seen, out
        assert seen.get("subject", "").startswith(who + "/CN="), (who, out)  # (a proxy of the client's identity)
        assert seen.get("token") == "none", out
    creds = jim_status(ce, jim_id)["credentials"]
    assert [(c["kind"], c["subject"]) for c in creds] == [("x509", who)], creds


def test_arcrenew_reaches_jims_copy_and_the_held_local_jobs_run(cred_jobs):
    ce, _plain, job = cred_jobs
    jim_id = wait_jim_id(ce, job)
    copy = ce.host(jims_copy(ce, jim_id, "x509up"))
    # held: every local job PLANNED with the reason, while the short proxy lasts less than 30 min + margin
    deadline, status = time.monotonic() + 120, {}
    while time.monotonic() < deadline:
        status = jim_status(ce, jim_id)
        local = status.get("localJobs") or []
        if len(local) == 2 and all("waiting for a refresh" in (j.get("waiting") or "") for j in local):
            break
        time.sleep(1)
    local = status.get("localJobs") or []
    assert len(local) == 2 and all(j["state"] == "PLANNED" for j in local), status
    assert all("waiting for a refresh" in (j.get("waiting") or "") for j in local), local
    old_end = cert_end(copy)
    assert old_end - time.time() < 1800 + 300, old_end

    control = ce.control_file(job, "proxy")
    assert control is not None
    before = (os.stat(control).st_ino, os.stat(copy).st_ino)
    p = ce.run("arcproxy", "-c", "validityPeriod=12h")
    assert p.returncode == 0, p.stdout + p.stderr
    p = ce.run("arcrenew", job.url)
    assert p.returncode == 0 and "renewed: 1" in p.stdout, p.stdout + p.stderr
    returned = time.monotonic()
    t_control = t_copy = None
    while time.monotonic() - returned < 180 and t_copy is None:
        if t_control is None and os.stat(control).st_ino != before[0]:
            t_control = time.monotonic() - returned
        if os.stat(copy).st_ino != before[1] and cert_end(copy) > old_end + 3600:
            t_copy = time.monotonic() - returned
        time.sleep(0.2)
    print(
        f"\n{ce.name}: arcrenew returned -> control-dir proxy replaced after {t_control} s, jim's copy after {t_copy} s"
    )
    assert t_copy is not None, f"jim's copy was never renewed\n{ce.diagnostics(job)}"
    new_end = cert_end(copy)

    fields = ce.wait(job, "Finished", timeout=300)
    assert fields.get("Exit Code") == "0", (fields, ce.diagnostics(job))
    out = (ce.get(job) / "out.txt").read_text()
    for k in (0, 1):
        seen = lines(out, k)
        assert seen.get("proxy") == str(jims_copy(ce, jim_id, "x509up")) and "readable" in seen, out
        end, now = int(seen["end"]), int(seen["now"])
        assert abs(end - new_end) <= 1 and end > old_end + 3600, (end, old_end, new_end, out)
        assert end - now > 3600 and end - now > old_end - now, out  # (the time left it saw: the longer proxy's)
    creds = jim_status(ce, jim_id)["credentials"]
    assert creds and creds[0]["kind"] == "x509" and creds[0]["secondsLeft"] > 3600, creds


# -- ARC 7: a token job ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def token_job(arc7):
    job = arc7.submit("arc7-cred-token", xrsl("arc7-cred-token"), {"job.sh": TOKEN_JOB}, token=True)
    yield arc7, job
    arc7.clean(job)


def test_token_job_local_jobs_have_bearer_token_file_and_jim_records_a_token(token_job):
    ce, job = token_job
    fields = ce.wait(job, "Finished", timeout=300)
    assert fields.get("Exit Code") == "0", (fields, ce.diagnostics(job))
    jim_id = ce.jim_id(job)
    assert jim_id
    out = (ce.get(job) / "out.txt").read_text()
    client_token = ce.host(ce.token_file()).read_bytes()
    for k in (0, 1):
        seen = lines(out, k)
        assert seen.get("token") == str(jims_copy(ce, jim_id, "token")), out
        assert "readable" in seen, out
        assert seen.get("proxy") == "none", out  # (a token job has no proxy: no X509_USER_PROXY)
        assert seen.get("sha256") in {hashlib.sha256(t).hexdigest() for t in (client_token, client_token.strip())}
    creds = jim_status(ce, jim_id)["credentials"]
    assert [c["kind"] for c in creds] == ["token"], creds
