"""``jim serve`` on a shared host: a user's jobs are shown to that user only.

Two real accounts (tests/support/users.py): alice runs the installed
``jim serve`` as herself; bob, as his own account, tries to read her grid
jobs through the loopback port, through a Unix socket, and through a
site-wide instance behind a (simulated) authenticating web server.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from support import users as unix

pytestmark = pytest.mark.users

PY = str(unix.VENV / "bin" / "python")
JIM = str(unix.VENV / "bin" / "jim")
SECRET_VALUE = "hunter2-env-value-7c1f"
SECRET_ARG = "--password=arg-value-94d2"
RSL = f'&(executable=/bin/echo)(arguments="{SECRET_ARG}")(environment=(DB_PASSWORD {SECRET_VALUE}))'

# what bob (or alice) runs to fetch URLs: prints one JSON object per URL
FETCH = r"""
import json, socket, sys, urllib.request, urllib.error, http.client

class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None

def fetch(url, headers):
    req = urllib.request.Request(url, headers=headers)
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode("utf-8", "replace")
    except OSError as e:
        return -1, {}, f"{type(e).__name__}: {e}"

headers = json.loads(sys.argv[1])
for url in sys.argv[2:]:
    status, hdrs, body = fetch(url, headers)
    print(json.dumps({"url": url, "status": status, "headers": hdrs, "body": body}))
"""


def fetch_as(user: unix.UnixUser, urls: list[str], headers: dict[str, str] | None = None) -> list[dict]:
    """GET each URL as ``user`` (its own account): status, headers and body of each."""
    done = user.run([PY, "-c", FETCH, json.dumps(headers or {}), *urls], timeout=60)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def submit_as(user: unix.UnixUser, home: Path, rsl: str = RSL) -> str:
    done = user.jim("submit", "--rsl", rsl, home=home)
    m = re.search(r"^JOB_ID=(\S+)$", done.stdout, re.M)
    assert m, (done.stdout, done.stderr)
    job_id = m.group(1)
    deadline = time.monotonic() + 60
    while True:
        state = user.jim("poll", "--job-id", job_id, home=home).stdout
        if "JOB_STATE=DONE" in state or "JOB_STATE=FAILED" in state:
            return job_id
        assert time.monotonic() < deadline, state
        time.sleep(0.2)


class Served:
    """``jim serve`` running in the background as one account; stopped by :meth:`stop`."""

    def __init__(self, user: unix.UnixUser, home: Path, *args: str, as_root: bool = False):
        env = user.env({"JIM_HOME": str(home), "JIM_CONFIG": str(user.config())})
        kw: dict = {} if as_root else {"user": user.uid, "group": user.gid, "extra_groups": []}
        self.proc = subprocess.Popen(
            [JIM, "serve", *args],
            env=env,
            cwd="/",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kw,
        )
        self.line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not self.line.startswith("jim serve: "):
            self.stop()
            raise AssertionError(f"jim serve did not start: {self.line!r} {self.proc.stderr.read()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()


@pytest.fixture
def alice_job(unix_users):
    alice = unix_users.alice
    home = alice.home / "jimhome"
    return home, submit_as(alice, home)


def test_other_account_cannot_read_jobs_through_the_loopback_port(unix_users, alice_job):
    alice, bob = unix_users.alice, unix_users.bob
    home, job_id = alice_job
    served = Served(alice, home, "--port", "0")
    try:
        m = re.search(r"(http://127\.0\.0\.1:\d+)/", served.line)
        assert m, served.line
        base = m.group(1)
        paths = ["/", "/api/jobs", f"/jobs/{job_id}", f"/api/jobs/{job_id}", f"/db/{job_id}.xml", "/db/index.xml"]
        paths += [f"/jobs/{job_id}/0", f"/jobs/{job_id}?retried=1"]
        for who in (bob, alice):  # bob; and alice herself without the token
            for r in fetch_as(who, [base + p for p in paths]):
                assert r["status"] == 403, (who.name, r["url"], r["status"])
                assert job_id not in r["body"] and SECRET_VALUE not in r["body"] and SECRET_ARG not in r["body"]
    finally:
        served.stop()


def test_the_owner_with_the_token_reads_her_jobs(unix_users, alice_job):
    alice = unix_users.alice
    home, job_id = alice_job
    served = Served(alice, home, "--port", "0")
    try:
        login = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", served.line).group(1)
        base, token = login.split("/?token=")
        url_file = home / "serve.url"
        assert url_file.read_text().strip() == login and url_file.stat().st_mode & 0o777 == 0o600
        assert url_file.stat().st_uid == alice.uid
        # first visit: the token becomes a cookie and leaves the URL
        first = fetch_as(alice, [f"{base}/jobs/{job_id}?token={token}"])[0]
        assert first["status"] == 303 and first["headers"]["Location"] == f"/jobs/{job_id}"
        cookie = first["headers"]["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and token in cookie
        with_cookie = fetch_as(alice, [f"{base}/jobs/{job_id}"], {"Cookie": cookie.split(";")[0]})[0]
        assert with_cookie["status"] == 200 and SECRET_VALUE in with_cookie["body"]
        api = fetch_as(alice, [f"{base}/api/jobs/{job_id}"], {"Authorization": f"token {token}"})[0]
        assert api["status"] == 200 and job_id in api["body"]
        xml = fetch_as(alice, [f"{base}/db/{job_id}.xml"], {"Authorization": f"token {token}"})[0]
        assert xml["status"] == 200 and SECRET_VALUE in xml["body"]
        # the token is no use to a guess: a wrong one is refused
        wrong = fetch_as(unix_users.bob, [f"{base}/api/jobs/{job_id}?token={token[:-1]}x"])[0]
        assert wrong["status"] == 403 and SECRET_VALUE not in wrong["body"]
    finally:
        served.stop()
    assert not (home / "serve.url").exists()


FETCH_UNIX = r"""
import http.client, json, socket, sys

class Conn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.unix_path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(10)
        self.sock.connect(self.unix_path)

for target in sys.argv[2:]:
    conn = Conn(sys.argv[1])
    try:
        conn.request("GET", target)
        r = conn.getresponse()
        print(json.dumps({"status": r.status, "body": r.read().decode("utf-8", "replace")}))
    except OSError as e:
        print(json.dumps({"status": -1, "body": f"{type(e).__name__}: {e}"}))
"""


def test_unix_socket_only_its_owner_connects(unix_users, alice_job):
    alice, bob = unix_users.alice, unix_users.bob
    home, job_id = alice_job
    served = Served(alice, home, "--socket")
    try:
        sock = home / "serve.sock"
        st = sock.lstat()
        assert st.st_uid == alice.uid and st.st_mode & 0o777 == 0o600
        paths = ["/", f"/db/{job_id}.xml"]

        def bob_tries() -> None:
            done = bob.run([PY, "-c", FETCH_UNIX, str(sock), *paths])
            for r in [json.loads(line) for line in done.stdout.splitlines()] or [done.stderr]:
                assert r["status"] == -1 and "PermissionError" in r["body"], r

        bob_tries()  # the socket's directory is private
        modes = {d: d.stat().st_mode & 0o777 for d in (alice.home, home)}
        try:  # and were it not, the socket itself is 0600
            for d in modes:
                d.chmod(0o711)
            bob_tries()
        finally:
            for d, mode in modes.items():
                d.chmod(mode)
        done = alice.run([PY, "-c", FETCH_UNIX, str(sock), *paths])
        results = [json.loads(line) for line in done.stdout.splitlines()]
        assert [r["status"] for r in results] == [200, 200], done.stderr
        assert job_id in results[0]["body"] and SECRET_VALUE in results[1]["body"]
    finally:
        served.stop()
    assert not (home / "serve.sock").exists()


@pytest.fixture
def site(unix_users, alice_job, tmp_path):
    """``jim serve --site`` as root over both accounts' homes ({home}/jimhome), and its secret."""
    bob = unix_users.bob
    bob_home = bob.home / "jimhome"
    bob_job = submit_as(bob, bob_home, "&(executable=/bin/echo)(arguments=bob)")
    secret = "s3cret-" + "x" * 30
    secret_file = tmp_path / "proxy.secret"
    secret_file.write_text(secret + "\n")
    secret_file.chmod(0o600)
    root_home = tmp_path / "root-jimhome"
    served = Served(
        unix_users.alice,
        root_home,
        "--site",
        "--proxy-secret-file",
        str(secret_file),
        "--homes",
        "{home}/jimhome",
        "--port",
        "0",
        as_root=True,
    )
    try:
        base = re.search(r"(http://127\.0\.0\.1:\d+)/", served.line).group(1)
        yield base, secret, bob_job
    finally:
        served.stop()


def test_site_instance_needs_the_proxy_secret(unix_users, alice_job, site):
    base, secret, _ = site
    _, job_id = alice_job
    urls = [base + p for p in ("/", "/api/jobs", f"/jobs/{job_id}", f"/db/{job_id}.xml", "/static/jim.css")]
    for headers in (
        {},
        {"X-Remote-User": unix_users.alice.name},
        {"X-Remote-User": unix_users.alice.name, "X-Jim-Proxy-Secret": secret[:-1] + "y"},
        {"X-Remote-User": unix_users.alice.name, "X-Jim-Proxy-Secret": ""},
        {"X-Jim-Proxy-Secret": secret},  # no user
        {"X-Jim-Proxy-Secret": secret, "X-Remote-User": "root"},
        {"X-Jim-Proxy-Secret": secret, "X-Remote-User": "../../etc"},
    ):
        for r in fetch_as(unix_users.bob, urls, headers):
            assert r["status"] == 403, (headers, r["url"], r["status"])
            assert job_id not in r["body"] and SECRET_VALUE not in r["body"]


def test_site_instance_shows_each_user_only_their_own_jobs(unix_users, alice_job, site):
    alice, bob = unix_users.alice, unix_users.bob
    base, secret, bob_job = site
    _, job_id = alice_job
    as_bob = {"X-Jim-Proxy-Secret": secret, "X-Remote-User": bob.name}
    as_alice = {"X-Jim-Proxy-Secret": secret, "X-Remote-User": alice.name}
    index, api_list, page, api, xml = fetch_as(
        bob,
        [base + p for p in ("/", "/api/jobs", f"/jobs/{job_id}", f"/api/jobs/{job_id}", f"/db/{job_id}.xml")],
        as_bob,
    )
    assert index["status"] == 200 and bob_job in index["body"] and job_id not in index["body"]
    assert f'<span id="viewer">{bob.name}</span>' in index["body"]
    assert [j["id"] for j in json.loads(api_list["body"])] == [bob_job]
    for r in (page, api, xml):  # alice's grid job is not in bob's home
        assert r["status"] == 404 and SECRET_VALUE not in r["body"] and SECRET_ARG not in r["body"]
    (local,) = fetch_as(bob, [f"{base}/jobs/{job_id}/0"], as_bob)  # nor any of its local jobs
    assert local["status"] == 404 and SECRET_VALUE not in local["body"] and job_id not in local["body"]
    index, page, xml = fetch_as(alice, [base + "/", f"{base}/jobs/{job_id}", f"{base}/db/{job_id}.xml"], as_alice)
    assert index["status"] == 200 and job_id in index["body"] and bob_job not in index["body"]
    assert page["status"] == 200 and SECRET_VALUE in page["body"]  # the owner sees her own environment
    assert xml["status"] == 200 and SECRET_VALUE in xml["body"]  # the owner sees her own environment


def test_site_instance_reads_a_home_as_its_owner(unix_users, alice_job, site):
    """bob's links into alice's home lead nowhere: his requests are answered as bob, and his home must be his."""
    bob = unix_users.bob
    base, secret, _ = site
    alice_home, job_id = alice_job
    as_bob = {"X-Jim-Proxy-Secret": secret, "X-Remote-User": bob.name}
    # a link in bob's own database to alice's record: read as bob, so not readable
    link = bob.home / "jimhome" / "db" / f"{job_id}.xml"
    bob.run(["ln", "-s", str(alice_home / "db" / f"{job_id}.xml"), str(link)])
    assert link.is_symlink()
    for r in fetch_as(bob, [f"{base}/db/{job_id}.xml", f"{base}/jobs/{job_id}"], as_bob):
        assert r["status"] in (403, 404), r["status"]
        assert SECRET_VALUE not in r["body"] and SECRET_ARG not in r["body"]
    # bob's jim home a link to alice's: it is not his, so nothing is shown
    bob.run(["mv", str(bob.home / "jimhome"), str(bob.home / "jimhome.real")])
    bob.run(["ln", "-s", str(alice_home), str(bob.home / "jimhome")])
    for r in fetch_as(bob, [f"{base}/", f"{base}/api/jobs", f"{base}/db/{job_id}.xml"], as_bob):
        assert r["status"] == 403, (r["url"], r["status"])
        assert job_id not in r["body"] and SECRET_VALUE not in r["body"]
