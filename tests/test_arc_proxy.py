"""ARC's ENV/PROXY through jim, on both test CEs: the job's proxy reaches every local job.

A job asks for ARC's own ``ENV/PROXY`` and the suite's ``ENV/JIMTEST/STAGES`` (with an option), as
two local jobs (``ENV/JIM/GENERIC`` ``count=2``); the CE adds its default ``ENV/JIMTEST/DEFAULT``.
Stage 0 runs in jim's submit step on the CE (ENV/PROXY copies the delegated proxy into the session
directory, through ARC 7's ``control_path`` on the ARC 7 CE), stages 1 and 2 around each local job
(jim/arc/rte.py).  Each local job must see ``X509_USER_PROXY`` set (to jim's copy of the job's delegated proxy, which
ENV/PROXY's stage 1 keeps since it only sets the variable when unset; never A-REX's control-directory
file) and readable, a proxy of the client's own identity.
"""

from __future__ import annotations

import re
import subprocess

import pytest

pytestmark = [pytest.mark.arc, pytest.mark.slow]

JOB = r"""#!/bin/sh
k=$JIM_INDEX
echo "job $k proxy=$X509_USER_PROXY"
[ -n "$X509_USER_PROXY" ] && [ -r "$X509_USER_PROXY" ] && echo "job $k readable"
echo "job $k stage0=$JIMTEST_STAGE0 stage1=$JIMTEST_STAGE1 default=$JIMTEST_DEFAULT_RTE"
env | grep '^X509_' | sed "s/^/job $k env /"
if [ "$k" = 0 ]; then
    echo "-----CERT {marker}"
    sed -n '/BEGIN CERTIFICATE/,/END CERTIFICATE/p' "$X509_USER_PROXY" | sed -n '1,/END CERTIFICATE/p'
    echo "-----END {marker}"
fi
"""

XRSL = """&(executable="job.sh")(inputfiles=("job.sh" "{dir}/job.sh"))
 (jobname="arc-proxy")(stdout="out.txt")(stderr="err.txt")
 (runtimeenvironment="ENV/PROXY")
 (runtimeenvironment="ENV/JIMTEST/STAGES" "e2e")
 (runtimeenvironment="ENV/JIM/GENERIC" "count=2")
 (outputfiles=("jimtest-stages.log" ""))
"""


@pytest.fixture(scope="module")
def proxy_job(each_arc):
    ce = each_arc
    job = ce.submit("arc-proxy", XRSL, {"job.sh": JOB})
    yield ce, job
    ce.clean(job)


def _names(pem: str) -> tuple[str, str]:
    """(subject, issuer) of a PEM certificate, in ARC's /C=.../CN=... form."""
    p = subprocess.run(
        ["openssl", "x509", "-noout", "-subject", "-issuer", "-nameopt", "compat"],
        input=pem, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    fields = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
    return fields["subject"].strip(), fields["issuer"].strip()


def test_every_local_job_has_the_clients_proxy_and_the_stages_ran(proxy_job):
    ce, job = proxy_job
    fields = ce.wait(job, "Finished", timeout=300)
    assert fields.get("Exit Code") == "0", (fields, ce.diagnostics(job))
    got = ce.get(job)
    out = (got / "out.txt").read_text()
    for k in (0, 1):
        m = re.search(rf"^job {k} proxy=(\S+)$", out, re.M)
        assert m and m.group(1).endswith("/credentials/x509up"), out  # (jim's copy: docs/credentials.md)
        assert f"job {k} readable" in out, out
        assert f"job {k} stage0=e2e stage1=yes default=1" in out, out
        assert f"job {k} env X509_USER_KEY=fake" not in out, out  # (A-REX's submit-step variables never leak)
        assert "/control/" not in m.group(1), out
    cert = out.split(f"-----CERT {job.marker}\n", 1)[1].split(f"-----END {job.marker}", 1)[0]
    subject, issuer = _names(cert)
    info = ce.run("arcproxy", "-I").stdout
    identity = re.search(r"^Identity:\s*(.+)$", info, re.M)
    assert identity, info
    assert subject.startswith(identity.group(1).strip()), (subject, info)
    assert issuer.startswith(identity.group(1).strip()), (issuer, info)
    stages = (got / "jimtest-stages.log").read_text().splitlines()
    assert sorted(stages) == ["stage1 e2e", "stage1 e2e", "stage2 e2e", "stage2 e2e"], stages
