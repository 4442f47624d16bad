"""The grid job's credential on a shared host: each account's copy is its own, and its key shows nowhere.

Two real accounts (tests/support/users.py) each submit a grid job with their own proxy (made for them by a
throwaway CA: tests/support/proxies.py, in the place a GRAM job manager keeps it, owned by them) through
the installed jim.  The other account cannot open the copy; no file of either home but the proxy and its
copy, no answer of jim, no page of ``jim serve``, no output tar and nothing this test printed holds a line
of either private key.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
from lxml import etree

from support import users as unix
from support.proxies import KEY_MARK, Authority, UserCert, files_holding

pytestmark = pytest.mark.users

PY = str(unix.VENV / "bin" / "python")
JIM = str(unix.VENV / "bin" / "jim")
#: What each local job prints of its credential: where it is, who runs, whose it is (never its content).
JOB = (
    """#!/bin/sh
echo "proxy=$X509_USER_PROXY"
echo "uid=$(id -u)"
if command -v grid-proxy-info >/dev/null; then
    echo "subject=$(grid-proxy-info -identity)"
else
    echo "subject=$(%s -c 'import os; from jim.identity import from_proxy
print(from_proxy(os.environ["X509_USER_PROXY"], source="job").subject)')"
fi
"""
    % PY
)
OPEN = """import sys
try:
    open(sys.argv[1], "rb").close()
    print("opened")
except OSError as e:
    print(e.errno)
"""
FETCH = r"""
import json, sys, urllib.request, urllib.error
for url in sys.argv[2:]:
    req = urllib.request.Request(url, headers={"Authorization": "token " + sys.argv[1]})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, body = r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read().decode("utf-8", "replace")
    print(json.dumps({"url": url, "status": status, "body": body}))
"""


class Submitted:
    """One account's grid job: its proxy (where the front end keeps it), jim's home, the grid job's id."""

    def __init__(self, user: unix.UnixUser, cert: UserCert, seen: list[str]):
        self.user, self.cert, self.seen = user, cert, seen
        self.proxy = cert.proxy(3 * 3600)
        where = ".globus"
        for part in ("job", "ce.example.org", "16217.1732872000"):
            user.mkdir(where)
            where += "/" + part
        user.mkdir(where)
        self.source = self.proxy.write(user.home / where / "x509_user_proxy", owner=(user.uid, user.gid))
        self.home = user.home / "jimhome"
        script = user.write("job.sh", JOB, 0o755)
        done = self.jim("submit", "--rsl", f'&(executable=/bin/sh)(arguments="{script}")(count=2)')
        m = re.search(r"^JOB_ID=(\S+)$", done.stdout, re.M)
        assert m, (done.stdout, done.stderr)
        self.job_id = m.group(1)
        self.copy = self.home / "jobs" / self.job_id / "credentials" / "x509up"

    def jim(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.user.jim(*args, home=self.home, env={"X509_USER_PROXY": str(self.source)})
        self.seen += [done.stdout, done.stderr]
        return done

    def finished(self) -> bool:
        out = self.jim("poll", "--job-id", self.job_id).stdout
        return "JOB_STATE=DONE" in out or "JOB_STATE=FAILED" in out


def _wait(what: str, check, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.2)


def _opens(user: unix.UnixUser, path: Path) -> str:
    """What ``open(path)`` gives as ``user``: ``opened``, or the errno."""
    return user.run([PY, "-c", OPEN, str(path)]).stdout.strip()


def _served_pages(job: Submitted) -> list[dict]:
    """The grid job's page, its JSON and its record through ``jim serve``, run as its owner and fetched by
    its owner with the token."""
    user = job.user
    env = user.env({"JIM_HOME": str(job.home), "JIM_CONFIG": str(user.config())})
    proc = subprocess.Popen(
        [JIM, "serve", "--port", "0"], env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        user=user.uid, group=user.gid, extra_groups=[],
    )  # fmt: skip
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        m = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
        assert m, line
        base, token = m.groups()
        urls = [f"{base}/jobs/{job.job_id}", f"{base}/api/jobs/{job.job_id}", f"{base}/db/{job.job_id}.xml"]
        done = user.run([PY, "-c", FETCH, token, *urls], timeout=60)
        assert done.returncode == 0, done.stderr
        return [json.loads(out) for out in done.stdout.splitlines()]
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _needles(jobs: list[Submitted]) -> dict[bytes, str]:
    """Every line of either private key (and the key's marker) -> whose it is."""
    out = {KEY_MARK.encode(): "a key's marker"}
    for job in jobs:
        out.update({line.encode(): job.user.name for line in job.proxy.key_lines()})
    return out


def test_each_account_has_its_own_copy_and_the_key_shows_nowhere(unix_users, capfd: pytest.CaptureFixture[str]):
    authority = Authority.make()
    seen: list[str] = []
    jobs = [Submitted(u, authority.user(f"jim test {u.name}"), seen) for u in (unix_users.alice, unix_users.bob)]
    for job in jobs:
        _wait(f"the grid job of {job.user.name} to end", job.finished)
    alice, bob = jobs
    for job, other in ((alice, bob), (bob, alice)):
        user = job.user
        st = job.jim("status", job.job_id, "--json")
        data = json.loads(st.stdout)
        assert data["state"] == "DONE", job.jim("status", job.job_id).stdout
        # the copy: the owner's, private, the proxy as handed over
        copy = job.copy.stat()
        assert (copy.st_uid, copy.st_gid, copy.st_mode & 0o777) == (user.uid, user.gid, 0o600)
        assert job.copy.parent.stat().st_mode & 0o777 == 0o700 and job.copy.parent.stat().st_uid == user.uid
        assert job.copy.read_bytes() == job.source.read_bytes() == job.proxy.data
        assert _opens(user, job.copy) == "opened"
        assert _opens(other.user, job.copy) == "13"  # EACCES
        assert _opens(other.user, job.source) == "13"
        # recorded and shown: whose it is, never what it is
        root = etree.parse(str(job.home / "db" / f"{job.job_id}.xml")).getroot()
        (cred,) = root.iterfind("credentials/credential")
        assert cred.get("subject") == job.cert.subject and cred.get("kind") == "x509"
        assert data["credentials"][0]["subject"] == job.cert.subject
        assert f"  credential X.509 proxy {job.cert.subject}, ends " in job.jim("status", job.job_id).stdout
        # every local job ran as the owner with the owner's copy
        with tarfile.open(data["outputTar"]) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
        outs = [v.decode() for k, v in members.items() if k.split("/")[-1].startswith("stdout.")]
        assert len(outs) == 2
        for out in outs:
            printed = dict(line.split("=", 1) for line in out.splitlines())
            assert printed == {"proxy": str(job.copy), "uid": str(user.uid), "subject": job.cert.subject}
        for name, content in members.items():
            assert not [n for n in _needles(jobs) if n in content], f"key material in {name} of the output tar"
        # through jim serve: the owner's pages
        pages = _served_pages(job)
        assert job.cert.subject in pages[-1]["body"]  # (the record, as served)
        for page in pages:
            assert page["status"] == 200 and job.job_id in page["body"], page["url"]
            assert not [n for n in _needles(jobs) if n.decode() in page["body"]], page["url"]
            seen.append(page["body"])
    # every file of both homes: a key only in its own proxy and its copy
    for job in jobs:
        holding = files_holding(job.user.home, list(_needles(jobs)))
        expected = {str(job.source.relative_to(job.user.home)), str(job.copy.relative_to(job.user.home))}
        assert set(holding) == expected, {k: v[:1] for k, v in holding.items() if k not in expected}
        for found in holding.values():
            assert {_needles(jobs)[n] for n in found if n != KEY_MARK.encode()} == {job.user.name}
    captured = capfd.readouterr()
    everything = "\n".join([*seen, captured.out, captured.err])
    leaked = [who for needle, who in _needles(jobs).items() if needle.decode() in everything]
    assert not leaked, f"key material in jim's answers, the served pages or this test's output: {leaked[:3]}"


def test_the_proxy_of_another_account_is_refused(unix_users):
    """bob hands over alice's proxy (a path he can read): jim, as bob, refuses it; nothing is recorded."""
    alice, bob = unix_users.alice, unix_users.bob
    shared = Path(tempfile.mkdtemp(prefix="jim-cred-"))
    try:
        shared.chmod(0o755)
        theirs = (
            Authority.make()
            .user("alice")
            .proxy(3600)
            .write(shared / "x509up", mode=0o644, owner=(alice.uid, alice.gid))
        )  # (readable by bob, even: not his)
        home = bob.home / "jimhome"
        done = bob.jim("submit", "--rsl", "&(executable=/bin/true)", home=home, env={"X509_USER_PROXY": str(theirs)})
        assert "ERROR=131" in done.stdout, (done.stdout, done.stderr)
        assert f"{theirs}: the X.509 proxy file is owned by uid {alice.uid}, not by this account" in done.stdout
        assert not list((home / "db").glob("*.xml"))
        assert not (home / "jobs").exists() or not list((home / "jobs").iterdir())
    finally:
        shutil.rmtree(shared)
