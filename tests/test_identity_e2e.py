"""The grid identity recorded end to end, through each real front end (jim/identity.py).

* GRAM (marker ``gram``): a job submitted by the test client with ``globus-job-submit``, whose RSL
  environment names another proxy file and a ``JIM_IDENTITY``: jim records the delegated proxy's
  subject, the client's own (``grid-proxy-info -identity``).
* ARC 6 and ARC 7 (marker ``arc``): an X.509 job on each CE records the client's subject
  (``arcproxy -I``), as A-REX wrote it in the job's ``local`` file; a token job on ARC 7 records the
  token's issuer and subject and no certificate subject.
* BLAH (marker ``htcondor``): a Condor-G ``batch jim`` job with an ``x509userproxy`` made by
  ``grid-proxy-init`` on a throwaway CA records that proxy's end-entity subject (the job's own
  ``X509_USER_PROXY`` names another file).

Each test reads the identity from the grid job's record as the mapped account's jim wrote it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from lxml import etree
from test_blah_htcondor import Account, account, blah_jim  # noqa: F401  (the Condor-G fixtures)
from test_gram_e2e import _jim_ready, site  # noqa: F401  (the GRAM site fixture)
from test_gram_module import Harness, h  # noqa: F401  (the GRAM script host, no gatekeeper)

FORGED = "/DC=org/CN=forged by the job"


def _identity_of(record: Path | str) -> dict[str, str]:
    root = etree.parse(str(record)).getroot()
    el = root.find("identity")
    return dict(el.attrib) if el is not None else {}


# ---------------------------------------------------------------------------- GRAM


@pytest.mark.gram
def test_jim_pm_hands_jim_submit_the_jobs_delegated_proxy(h: Harness, tmp_path: Path):  # noqa: F811
    """The module, driven as the job manager drives it: ``jim submit`` gets the job directory's
    ``x509_user_proxy`` as X509_USER_PROXY (not the RSL's environment, not a default)."""
    log = tmp_path / "spy.log"
    spy = tmp_path / "spy-jim"
    spy.write_text(
        f'#!/bin/sh\necho "$1 X509_USER_PROXY=${{X509_USER_PROXY-<unset>}}" >> {log}\n'
        "echo JOB_ID=spy.1\necho JOB_STATE=PENDING\n"
    )
    spy.chmod(0o755)
    h.conf.write_text(f'jim_command="{spy}"\njim_timeout="10"\n')
    h.jobdir.mkdir(parents=True, exist_ok=True)
    (h.jobdir / "x509_user_proxy").write_text("(a proxy)\n")
    desc = h.description(environment=[["X509_USER_PROXY", "/forged/by/the/job"], ["JIM_IDENTITY", FORGED]])
    (ans,), _out, _ = h.run(("submit", desc))
    assert ans.changes.get("JOB_ID") == "spy.1", ans
    assert log.read_text().splitlines() == [f"submit X509_USER_PROXY={h.jobdir}/x509_user_proxy"]


@pytest.mark.gram
@pytest.mark.slow
def test_gram_records_the_delegated_proxys_subject_not_the_jobs(site):  # noqa: F811
    _jim_ready(site)
    who = site.client("grid-proxy-info", "-identity")
    assert who.returncode == 0, who.stderr
    subject = who.stdout.strip()
    rsl = f'(environment=(JIM_IDENTITY "{FORGED}")(X509_USER_PROXY /etc/hostname))'
    proc = site.client("globus-job-submit", site.poll, "-x", rsl, "/bin/true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job_id = site.jim_id(site.poll, proc.stdout.strip().splitlines()[-1])
    st = site.wait_jim(job_id)
    assert st["identity"]["subject"] == subject, st["identity"]
    assert st["identity"]["source"] == "gram"
    shown = site.jim("status", job_id)
    assert f"identity   {subject}" in shown.stdout, shown.stdout
    assert FORGED not in shown.stdout


# ---------------------------------------------------------------------------- ARC

ARC_XRSL = """&(executable="/bin/sh")(arguments="-c" "echo {marker}")(jobname="arc-identity")
 (stdout="out.txt")(stderr="err.txt")
"""


def _arc_record(ce, job) -> dict[str, str]:
    """The ``<identity>`` of the ARC job's jim record, in the mapped account's jim home."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        jim_id = ce.jim_id(job)
        if jim_id:
            found = list(ce.host(ce.mapped.home).glob(f".jim*/db/{jim_id}.xml"))
            if found:
                return _identity_of(found[0])
        time.sleep(1)
    raise AssertionError(f"{ce.name}: no jim record of {job.id}\n{ce.diagnostics(job)}")


@pytest.mark.arc
@pytest.mark.slow
def test_arc_x509_job_records_the_clients_subject(each_arc):
    ce = each_arc
    job = ce.submit("arc-identity", ARC_XRSL)
    try:
        ce.wait_terminal(job)
        me = ce.run("arcproxy", "-I")
        assert me.returncode == 0, me.stdout + me.stderr
        m = re.search(r"^Identity: (.+)$", me.stdout, re.M)
        assert m, me.stdout
        got = _arc_record(ce, job)
        assert got.get("subject") == m.group(1).strip() == ce.local(job).get("subject"), got
        assert got.get("source") == "arc" and "issuer" not in got, got
    finally:
        ce.clean(job)


@pytest.mark.arc
@pytest.mark.slow
def test_arc7_token_job_records_the_tokens_issuer_and_subject(arc7):
    ce = arc7
    job = ce.submit("arc7-token-identity", ARC_XRSL, token=True)
    try:
        ce.wait_terminal(job)
        local = ce.local(job)
        got = _arc_record(ce, job)
        assert got.get("issuer") == local["tokenclaim.iss"], (got, local)
        assert got.get("tokenSubject") == ce.env["TOKEN_SUBJECT"] == local["tokenclaim.sub"], (got, local)
        assert "subject" not in got and got.get("source") == "arc", got
    finally:
        ce.clean(job)


# ---------------------------------------------------------------------------- BLAH

BLAH_DN = "/DC=org/DC=example/O=Test/CN=Jim BLAH Tester"


def _proxy_for(account: Account) -> Path:  # noqa: F811
    """A proxy of BLAH_DN made by grid-proxy-init on a throwaway CA (openssl), owned by the account."""
    if shutil.which("grid-proxy-init") is None or shutil.which("openssl") is None:
        pytest.skip("grid-proxy-init and openssl are needed (globus-proxy-utils)")
    d = account.work / "ca"
    d.mkdir()

    def run(*argv: str) -> None:
        subprocess.run(argv, cwd=d, check=True, capture_output=True, timeout=60)

    (d / "ext.cnf").write_text("subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/O=Grid/CN=jim BLAH test CA")  # fmt: skip
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "user.key", "-out", "user.csr", "-subj", BLAH_DN)
    run("openssl", "x509", "-req", "-in", "user.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "user.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    os.chmod(d / "user.key", 0o600)
    proxy = account.work / "proxy.pem"
    run("grid-proxy-init", "-cert", "user.pem", "-key", "user.key", "-out", str(proxy), "-q", "-hours", "4")
    os.chown(proxy, account.pw.pw_uid, account.pw.pw_gid)
    shutil.rmtree(d)
    return proxy


@pytest.mark.htcondor
@pytest.mark.slow
def test_blah_records_the_subject_of_the_proxy_blahpd_passes(account: Account):  # noqa: F811
    from support.services import HTC_USER, in_htcondor_root  # (lazy: only this test needs the pool)

    account.configure('adapter = "fork"\ncores = 2')
    proxy = _proxy_for(account)
    exe = account.script("id.sh", "echo hello\n")
    sub = account.write(
        account.work / "id.sub",
        "universe = grid\ngrid_resource = batch jim\n"
        f'executable = {exe}\nenvironment = "X509_USER_PROXY=/etc/hostname"\nx509userproxy = {proxy}\n'
        f"initialdir = {account.work}\noutput = {account.work}/id.out\nerror = {account.work}/id.err\n"
        f"log = {account.work}/id.log\nqueue\n",
    )
    done = in_htcondor_root("condor_submit", "-terse", str(sub), user=HTC_USER, cwd="/")
    assert done.returncode == 0, done.stderr
    cluster = int(done.stdout.split(".")[0])
    ad = account.wait(cluster, {4, 5})
    (job_id,) = account.jim_ids()
    got = _identity_of(account.home / "db" / f"{job_id}.xml")
    assert got.get("subject") == BLAH_DN, (got, ad.get("HoldReason"))
    assert got.get("source") == "blah", got
