"""Root's ``jim metrics --all-users`` and ``jim status --all-users`` over two real accounts.

Two real accounts (tests/support/users.py) run the installed jim on fork in
homes of their own; root counts both, each home read as its owner, and the
counts per user must equal what each user's own ``jim list --json`` and
``jim status --json`` say, with nothing of a job in them.  Then bob plants
what a hostile user would (a FIFO for his index, records that are a FIFO and
a link to alice's record): root's census still ends at once, counts alice as
before and never reads alice's record through bob's link.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import users as unix

pytestmark = pytest.mark.users

JIM = str(unix.VENV / "bin" / "jim")
HOMES = "{home}/.jim-metrics-test"
SECRET_ARG = "--password=arg-value-31c7"
SECRET_ENV = "env-value-9d0e"


def home_of(user: unix.UnixUser) -> Path:
    return user.home / ".jim-metrics-test"


def submit(user: unix.UnixUser, rsl: str) -> str:
    done = user.jim("submit", "--rsl", rsl, home=home_of(user))
    m = re.search(r"^JOB_ID=(\S+)$", done.stdout, re.M)
    assert m, (done.stdout, done.stderr)
    return m.group(1)


def wait_state(user: unix.UnixUser, job_id: str, states: tuple[str, ...], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = user.jim("poll", "--job-id", job_id, home=home_of(user)).stdout
        m = re.search(r"^JOB_STATE=(\S+)$", out, re.M)
        if m and m.group(1) in states:
            return m.group(1)
        assert time.monotonic() < deadline, out
        time.sleep(0.2)


def wait_running(user: unix.UnixUser, job_id: str, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        st = json.loads(user.jim("status", job_id, "--json", home=home_of(user)).stdout)
        if st["counts"].get("RUNNING", 0) >= n:
            return
        assert time.monotonic() < deadline, st["counts"]
        time.sleep(0.2)


def listed(user: unix.UnixUser) -> tuple[dict[str, int], dict[str, int]]:
    """Grid jobs per state and local jobs per state, as the user's own jim says."""
    jobs = json.loads(user.jim("list", "--json", home=home_of(user)).stdout)
    local: Counter[str] = Counter()
    for j in jobs:
        local.update(json.loads(user.jim("status", j["id"], "--json", home=home_of(user)).stdout)["counts"])
    return dict(Counter(j["state"] for j in jobs)), {k: v for k, v in local.items() if v}


def as_root(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "root.toml").touch()
    env = {
        "PATH": f"{unix.VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "JIM_HOME": str(tmp_path / "roothome"),
        "JIM_CONFIG": str(tmp_path / "root.toml"),
        "LANG": "C.UTF-8",
    }
    return subprocess.run([JIM, *args], env=env, capture_output=True, text=True, timeout=120, cwd="/")


def by_user(text: str, sample: str, label: str) -> dict[str, dict[str, float]]:
    out: dict[str, Counter[str]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == sample and s.value:
                out.setdefault(s.labels["user"], Counter())[s.labels[label]] += s.value
    return {u: dict(c) for u, c in out.items()}


@pytest.fixture
def two_users(unix_users):
    """alice: one grid job DONE (a distinctive argument and environment value), one FAILED; bob: one
    DONE, one ACTIVE with two local jobs running."""
    alice, bob = unix_users.alice, unix_users.bob
    ids = {
        "alice_done": submit(
            alice, f'&(executable=/bin/echo)(arguments="{SECRET_ARG}")(environment=(DB_PASSWORD {SECRET_ENV}))'
        ),
        "alice_failed": submit(alice, "&(executable=/bin/false)"),
        "bob_done": submit(bob, "&(executable=/bin/true)"),
        "bob_active": submit(bob, "&(executable=/bin/sleep)(arguments=60)(count=2)"),
    }
    assert wait_state(alice, ids["alice_done"], ("DONE", "FAILED")) == "DONE"
    assert wait_state(alice, ids["alice_failed"], ("DONE", "FAILED")) == "FAILED"
    assert wait_state(bob, ids["bob_done"], ("DONE", "FAILED")) == "DONE"
    wait_running(bob, ids["bob_active"], 2)
    return unix_users, ids


def test_root_counts_every_users_jobs(two_users, tmp_path):
    users, ids = two_users
    alice, bob = users.alice, users.bob
    expected = {u.name: listed(u) for u in (alice, bob)}

    done = as_root(tmp_path, "metrics", "--all-users", "--homes", HOMES)
    assert done.returncode == 0, done.stderr
    grid = by_user(done.stdout, "jim_grid_jobs", "state")
    local = by_user(done.stdout, "jim_local_jobs", "state")
    for u in (alice, bob):
        assert grid[u.name] == expected[u.name][0], u.name
        assert local[u.name] == expected[u.name][1], u.name
    assert grid[bob.name] == {"DONE": 1, "ACTIVE": 1} and grid[alice.name] == {"DONE": 1, "FAILED": 1}
    assert by_user(done.stdout, "jim_monitor_down", "user").get(bob.name) is None  # (0: bob's monitor runs)
    for secret in (SECRET_ARG, SECRET_ENV, "DB_PASSWORD", str(alice.home), str(bob.home), *ids.values()):
        assert secret not in done.stdout, secret
    # each home was read as its owner: what the census remembered is the owner's, and private
    for u in (alice, bob):
        st = (home_of(u) / "cache" / "metrics.json").stat()
        assert (st.st_uid, st.st_mode & 0o777) == (u.uid, 0o600)

    view = as_root(tmp_path, "status", "--all-users", "--homes", HOMES, "--json")
    assert view.returncode == 0, view.stderr
    data = json.loads(view.stdout)
    mine = {u["user"]: u for u in data["users"] if u["user"] in (alice.name, bob.name)}
    for u in (alice, bob):
        assert mine[u.name]["grid"] == expected[u.name][0] and mine[u.name]["local"] == expected[u.name][1]
    assert mine[bob.name]["oldest_active"]["id"] == ids["bob_active"] and mine[alice.name]["oldest_active"] is None
    assert data["oldest_active"]["user"] == bob.name
    text = as_root(tmp_path, "status", "--all-users", "--homes", HOMES).stdout
    assert alice.name in text and bob.name in text and ids["bob_active"] in text
    for secret in (SECRET_ARG, SECRET_ENV, str(alice.home)):
        assert secret not in text and secret not in view.stdout


def test_a_users_jim_cannot_count_for_others(two_users):
    users, _ids = two_users
    done = users.alice.jim("metrics", "--all-users", "--homes", HOMES, home=home_of(users.alice))
    assert done.returncode == 1 and "--all-users is root's" in done.stderr
    done = users.alice.jim("status", "--all-users", home=home_of(users.alice))
    assert done.returncode == 1 and "--all-users is root's" in done.stderr


def test_a_site_instance_serves_every_users_counts(two_users, tmp_path):
    users, _ids = two_users
    expected = {u.name: listed(u)[0] for u in (users.alice, users.bob)}
    secret, token = tmp_path / "proxy.secret", tmp_path / "metrics.token"
    for path, value in ((secret, "the-proxy-secret-5566778899"), (token, "the-scraper-token-5566778899")):
        path.write_text(value + "\n")
        path.chmod(0o600)
    (tmp_path / "root.toml").touch()
    env = {"PATH": "/usr/bin:/bin", "JIM_HOME": str(tmp_path / "roothome"), "JIM_CONFIG": str(tmp_path / "root.toml")}
    argv = [JIM, "serve", "--site", "--port", "0", "--proxy-secret-file", str(secret)]
    argv += ["--metrics-token-file", str(token), "--homes", HOMES]
    proc = subprocess.Popen(argv, env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        m = re.match(r"jim serve: http://127\.0\.0\.1:(\d+)/", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        conn = http.client.HTTPConnection("127.0.0.1", int(m.group(1)), timeout=60)
        conn.request("GET", "/metrics", headers={"Authorization": "Bearer the-scraper-token-5566778899"})
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
    assert resp.status == 200, text[:500]
    grid = by_user(text, "jim_grid_jobs", "state")
    for name, counts in expected.items():
        assert grid[name] == counts


def test_a_hostile_home_neither_blocks_nor_leaks(two_users, tmp_path):
    users, ids = two_users
    alice, bob = users.alice, users.bob
    alice_expected = listed(alice)
    bob_grid = listed(bob)[0]
    db = home_of(bob) / "db"
    index = db / "index.xml"
    alices_record = home_of(alice) / "db" / f"{ids['alice_done']}.xml"
    for argv in (
        ["rm", "-f", str(index)],
        ["mkfifo", str(index)],
        ["mkfifo", str(db / "20261129-000000-aaaaaaaa.xml")],
        ["ln", "-s", str(alices_record), str(db / alices_record.name)],
    ):
        assert bob.run(argv).returncode == 0, argv
    started = time.monotonic()
    done = as_root(tmp_path, "metrics", "--all-users", "--homes", HOMES)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60
    grid = by_user(done.stdout, "jim_grid_jobs", "state")
    assert grid[alice.name] == alice_expected[0]
    assert by_user(done.stdout, "jim_local_jobs", "state")[alice.name] == alice_expected[1]
    assert grid[bob.name] == bob_grid  # (from bob's records: his index is no file)
    unreadable = by_user(done.stdout, "jim_records_unreadable", "user")
    assert unreadable[bob.name] == {bob.name: 2}
    assert SECRET_ARG not in done.stdout and SECRET_ENV not in done.stdout
    os.unlink(index)  # (the fixture's clean-up must not wait on it either)
