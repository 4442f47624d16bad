"""``jim metrics``, ``/metrics`` of ``jim serve`` and the admin's view (``jim status --all-users``), on fork.

Real jim processes: grid jobs that end DONE and FAILED and one that runs are
submitted, then the Prometheus text of ``jim metrics`` (a real process, and
``/metrics`` of a real ``jim serve``, per user and ``--site``) is parsed with
the Prometheus client library's own parser and its counts are compared with
``jim list --json`` and ``jim status --json``; no argument, environment
value, path or name of a job may appear in it.  The census's own rules
(what root accepts of a home's counts, the batch command counters, the
monitor's pass stamp) are tested on real files.  Two real accounts:
tests/test_metrics_users.py.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pwd
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jim import accounts, background, census, metrics, monitorpass
from jim.adapters.cache import AdapterCache, command_counts
from jim.errors import JimError
from jim.locks import SingleInstance
from jim.paths import Home
from jim.web import auth

from support.jimcli import FAST_CONFIG, Jim, kill_all, validate_home

SECRET_ARG = "--password=arg-value-5e1f9"
SECRET_ENV = "env-value-b7c3d"
JOB_NAME = "distinctive-name-4a2c"
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="--all-users and jim serve --site are root's")


def families(text: str) -> dict[str, list]:
    """name -> samples (name, labels, value) of the Prometheus text, by the client library's parser."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name, []).extend(family.samples)
    return out


def series(found: dict[str, list], name: str) -> list:
    """The samples of one family as sortable (labels, value) pairs."""
    return sorted((sorted(s.labels.items()), s.value) for s in found[name])


def sample_sum(found: dict[str, list], sample: str, **labels: str) -> float:
    """The sum of the samples named ``sample`` whose labels include ``labels``."""
    return sum(
        s.value
        for samples in found.values()
        for s in samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


def by_label(found: dict[str, list], sample: str, label: str, **where: str) -> dict[str, float]:
    out: Counter[str] = Counter()
    for samples in found.values():
        for s in samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in where.items()):
                out[s.labels[label]] += s.value
    return {k: v for k, v in out.items() if v}


def me() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture
def site_jim(tmp_path):
    """A jim whose home is ``<tmp>/<account>/jim``: ``--homes <tmp>/{user}/jim`` names it."""
    home = tmp_path / me() / "jim"
    home.parent.mkdir(mode=0o700)
    config = tmp_path / "jim.toml"
    config.write_text(FAST_CONFIG)
    jim = Jim(home, config)
    jim.pattern = f"{tmp_path}/{{user}}/jim"
    yield jim
    kill_all(home)
    errors = validate_home(home) if home.exists() else []
    assert not errors, "XML database files do not validate:\n" + "\n".join(errors)


@pytest.fixture
def jobs(site_jim):
    """One grid job DONE (with a distinctive argument, environment value and name), one FAILED,
    one ACTIVE with two local jobs running; their ids by state."""
    done = site_jim.submit(
        f'&(executable=/bin/echo)(arguments="{SECRET_ARG}")(environment=(DB_PASSWORD {SECRET_ENV}))'
        f'(jobname="{JOB_NAME}")'
    )
    failed = site_jim.submit("&(executable=/bin/false)")
    running = site_jim.submit("&(executable=/bin/sleep)(arguments=60)(count=2)")
    assert site_jim.wait(done)["JOB_STATE"] == "DONE"
    assert site_jim.wait(failed)["JOB_STATE"] == "FAILED"
    site_jim.wait_running(running, 2)
    return {"DONE": done, "FAILED": failed, "ACTIVE": running}


def listed(jim: Jim) -> tuple[dict[str, int], dict[str, int]]:
    """Grid jobs per state (``jim list --json``) and local jobs per state (``jim status --json``)."""
    done = jim.run("list", "--json")
    assert done.returncode == 0, done.stderr
    grid = Counter(j["state"] for j in json.loads(done.stdout))
    local: Counter[str] = Counter()
    for j in json.loads(done.stdout):
        local.update(jim.status(j["id"])["counts"])
    return dict(grid), {k: v for k, v in local.items() if v}


def wait_until(check, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"not {what} after {timeout:g} s"
        time.sleep(0.1)


def assert_counts_match(found: dict[str, list], jim: Jim, user: str) -> None:
    grid, local = listed(jim)
    assert by_label(found, "jim_grid_jobs", "state", user=user) == grid
    assert by_label(found, "jim_local_jobs", "state", user=user) == local
    assert by_label(found, "jim_local_jobs", "adapter", user=user) == {"fork": sum(local.values())}
    assert sample_sum(found, "jim_attempts", user=user) == sum(local.values())


def assert_no_content(text: str, jim: Jim, job_ids: list[str]) -> None:
    for secret in (SECRET_ARG, "arg-value-5e1f9", SECRET_ENV, "DB_PASSWORD", JOB_NAME, "/bin/", str(jim.home)):
        assert secret not in text, secret
    for job_id in job_ids:
        assert job_id not in text


# ---------------------------------------------------------------------------
# jim metrics
# ---------------------------------------------------------------------------


def test_metrics_count_what_jim_list_shows_and_nothing_of_a_job(site_jim, jobs):
    done = site_jim.run("metrics")
    assert done.returncode == 0, done.stderr
    found = families(done.stdout)
    user = me()
    assert_counts_match(found, site_jim, user)
    assert by_label(found, "jim_grid_jobs", "state", user=user) == {"DONE": 1, "FAILED": 1, "ACTIVE": 1}
    assert_no_content(done.stdout, site_jim, list(jobs.values()))
    # the monitor follows the running grid job, and says when its last pass was
    assert sample_sum(found, "jim_monitor_running", user=user) == 1
    assert sample_sum(found, "jim_monitor_down", user=user) == 0
    assert 0 <= sample_sum(found, "jim_monitor_last_pass_age_seconds", user=user) < 30
    assert sample_sum(found, "jim_monitor_last_pass_ok", user=user) == 1
    assert sample_sum(found, "jim_grid_job_oldest_active_age_seconds", user=user) > 0
    assert sample_sum(found, "jim_batch_query_degraded", user=user, adapter="fork") == 0
    assert sample_sum(found, "jim_homes", result="counted") == 1
    # a second scrape reads what the first remembered, and says the same
    again = families(site_jim.run("metrics").stdout)
    for name in ("jim_grid_jobs", "jim_local_jobs", "jim_attempts"):
        assert series(again, name) == series(found, name)


def test_batch_commands_of_a_command_adapter(jim_env, tmp_path):
    """jim on the fake Slurm (tests/fake_sched: real commands): every sbatch and squeue is counted."""
    from fake_sched import FakeSched  # (lazy: this test alone drives the fake Slurm)

    fake = FakeSched(tmp_path / "fake-sched")
    jim_env.env.update(fake.env(jim_env.env))
    jim_env.config.write_text(
        FAST_CONFIG + f'\n[batch]\nadapter = "slurm"\npartition = "debug"\ncache_interval = 0.3\n'
        f'python = "{sys.executable}"\n'
    )
    try:
        job_id = jim_env.submit("&(executable=/bin/true)(count=2)")
        assert jim_env.wait(job_id)["JOB_STATE"] == "DONE"
        done = jim_env.run("metrics")
    finally:
        fake.kill_jobs()
    found = families(done.stdout)
    ran = by_label(found, "jim_batch_commands_total", "command", user=me(), adapter="slurm")
    assert ran.get("sbatch", 0) >= 1 and ran.get("squeue", 0) >= 1, ran
    assert by_label(found, "jim_local_jobs", "adapter", user=me()) == {"slurm": 2}
    assert sample_sum(found, "jim_batch_query_degraded", user=me(), adapter="slurm") == 0
    counted = command_counts(Home(jim_env.home), "slurm")
    assert all(failed <= n for n, failed in counted.values()) and counted["sbatch"][0] == ran["sbatch"]


def test_metrics_output_file_for_a_textfile_collector(site_jim, jobs, tmp_path):
    target = tmp_path / "textfile" / "jim.prom"
    target.parent.mkdir()
    done = site_jim.run("metrics", "--output", str(target))
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert target.stat().st_mode & 0o777 == 0o644
    assert by_label(families(target.read_text()), "jim_grid_jobs", "state", user=me())["DONE"] == 1


def test_metrics_follow_the_records_as_they_change(site_jim, jobs):
    site_jim.run("metrics")
    active = jobs["ACTIVE"]
    for argv in (["kill", f"{active}.0"], ["resubmit", f"{active}.0"]):  # (a person's new attempt)
        done = site_jim.run(*argv)
        assert done.returncode == 0, (argv, done.stderr)
    assert site_jim.protocol("cancel", "--job-id", active)["_rc"] == "0"
    site_jim.wait(active)
    found = families(site_jim.run("metrics").stdout)
    grid, local = listed(site_jim)
    assert by_label(found, "jim_grid_jobs", "state", user=me()) == grid
    assert by_label(found, "jim_local_jobs", "state", user=me()) == local
    assert by_label(found, "jim_grid_jobs", "state", user=me()).get("ACTIVE") is None
    assert sample_sum(found, "jim_grid_job_oldest_active_age_seconds") == 0
    assert sample_sum(found, "jim_attempts", user=me()) == sum(local.values()) + 1
    assert by_label(found, "jim_retries", "cause", user=me(), origin="resubmit") == {"cancelled": 1}
    assert sample_sum(found, "jim_retries", user=me(), origin="retry") == 0


def test_a_home_without_an_index_is_counted_from_its_records(site_jim, jobs):
    before = families(site_jim.run("metrics").stdout)
    (site_jim.home / "db" / "index.xml").unlink()
    (site_jim.home / "cache" / census.CACHE_FILE).unlink()
    after = families(site_jim.run("metrics").stdout)
    for name in ("jim_grid_jobs", "jim_local_jobs", "jim_attempts"):
        assert series(after, name) == series(before, name)


def test_monitor_down_while_grid_jobs_are_active(site_jim, jobs):
    lock = background.monitor_lock(site_jim.home)
    pid = wait_until(lambda: SingleInstance(lock).holder_pid(), "a monitor")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not background.running(lock), "the monitor gone")
    found = families(site_jim.run("metrics").stdout)
    assert sample_sum(found, "jim_monitor_running", user=me()) == 0
    assert sample_sum(found, "jim_monitor_down", user=me()) == 1
    if ROOT:
        view = json.loads(site_jim.run("status", "--all-users", "--homes", site_jim.pattern, "--json").stdout)
        assert view["monitors_not_running"] == [me()]
        text = site_jim.run("status", "--all-users", "--homes", site_jim.pattern).stdout
        assert "MONITOR NOT RUNNING" in text and f"monitors not running with active grid jobs: {me()}" in text


def test_degraded_batch_query(site_jim):
    AdapterCache(Home(site_jim.home).ensure(), "fork").mark_degraded(f"squeue failed: {SECRET_ARG} {site_jim.home}")
    found = families(site_jim.run("metrics").stdout)
    assert sample_sum(found, "jim_batch_query_degraded", user=me(), adapter="fork") == 1
    assert 0 <= sample_sum(found, "jim_batch_query_degraded_seconds", user=me(), adapter="fork") < 60
    assert SECRET_ARG not in site_jim.run("metrics").stdout  # (the reason is never shown)


# ---------------------------------------------------------------------------
# jim metrics --all-users and jim status --all-users (root's)
# ---------------------------------------------------------------------------


@needs_root
def test_all_users_metrics_and_admin_view(site_jim, jobs):
    done = site_jim.run("metrics", "--all-users", "--homes", site_jim.pattern)
    assert done.returncode == 0, done.stderr
    found = families(done.stdout)
    assert_counts_match(found, site_jim, "root")
    assert sample_sum(found, "jim_homes", result="counted") == 1
    assert_no_content(done.stdout, site_jim, list(jobs.values()))

    view = json.loads(site_jim.run("status", "--all-users", "--homes", site_jim.pattern, "--json").stdout)
    grid, local = listed(site_jim)
    (user,) = view["users"]
    assert user["user"] == "root" and user["grid"] == grid and user["local"] == local
    assert user["oldest_active"]["id"] == jobs["ACTIVE"] and user["oldest_active"]["age"] > 0
    assert view["oldest_active"]["id"] == jobs["ACTIVE"] and view["oldest_active"]["user"] == "root"
    assert user["monitor"]["running"] and view["monitors_not_running"] == [] and view["degraded"] == []
    text = site_jim.run("status", "--all-users", "--homes", site_jim.pattern).stdout
    assert re.search(r"^root\s+.*\b3$", text, re.M), text  # three grid jobs in all
    assert jobs["ACTIVE"] in text
    for secret in (SECRET_ARG, SECRET_ENV, JOB_NAME, str(site_jim.home)):
        assert secret not in text


def test_all_users_is_roots(site_jim, monkeypatch):
    monkeypatch.setattr(metrics.os, "geteuid", lambda: 1000)
    with pytest.raises(JimError, match="--all-users is root's"):
        metrics.check_all_users(argparse.Namespace(all_users=True, homes=None), "")
    monkeypatch.undo()
    if ROOT:
        with pytest.raises(JimError, match="must be an absolute path"):
            metrics.check_all_users(argparse.Namespace(all_users=True, homes="{user}/jim"), "")
        assert metrics.check_all_users(argparse.Namespace(all_users=True, homes=None), "") == ""
        assert metrics.check_all_users(argparse.Namespace(all_users=True, homes=None), "/j/$USER") == "/j/$USER"
    for argv in (
        ["metrics", "--homes", "/x/{user}"],
        ["status"],
        ["status", "20261129-101338-eece53bb", "--all-users"],
        ["status", "20261129-101338-eece53bb", "--homes", "/x/{user}"],
    ):
        done = site_jim.run(*argv)
        assert done.returncode == 2 and f"usage: jim {argv[0]}" in done.stderr, (argv, done.stderr)
        assert "--all-users" in done.stderr


# ---------------------------------------------------------------------------
# /metrics of jim serve
# ---------------------------------------------------------------------------


class Served:
    """A real ``jim serve`` process; its port (and its token, for a user's)."""

    def __init__(self, jim: Jim, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jim", "serve", "--port", "0", *args],
            env=jim.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        m = re.match(r"jim serve: http://127\.0\.0\.1:(\d+)/(?:\?token=([A-Za-z0-9_-]{43}))? ", line)
        assert m, (line, self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.port, self.token = int(m.group(1)), m.group(2)

    def get(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.communicate(timeout=20)


def test_served_metrics_of_a_users_jim_serve(site_jim, jobs):
    served = Served(site_jim)
    try:
        status, _, _ = served.get("/metrics", {})
        assert status == 403
        status, headers, text = served.get("/metrics", {"Authorization": f"Bearer {served.token}"})
    finally:
        served.stop()
    assert status == 200 and headers["content-type"] == metrics.CONTENT_TYPE
    assert_counts_match(families(text), site_jim, me())
    assert_no_content(text, site_jim, list(jobs.values()))


@needs_root
def test_served_metrics_of_a_site_instance(site_jim, jobs, tmp_path):
    secret, token = tmp_path / "proxy.secret", tmp_path / "metrics.token"
    for path, value in ((secret, "the-proxy-secret-0123456789"), (token, "the-scraper-token-0123456789")):
        path.write_text(value + "\n")
        path.chmod(0o600)
    served = Served(
        site_jim, "--site", "--proxy-secret-file", str(secret), "--metrics-token-file", str(token),
        "--homes", site_jim.pattern,
    )  # fmt: skip
    try:
        refused = [
            served.get("/metrics", headers)[0]
            for headers in (
                {},
                {"Authorization": "Bearer the-proxy-secret-0123456789"},
                {"X-Jim-Proxy-Secret": "the-proxy-secret-0123456789", "X-Remote-User": "root"},
                {"Authorization": "token the-scraper-token-0123456789"},
                {"Authorization": "Bearer the-scraper-token-012345678"},
            )
        ]
        status, headers, text = served.get("/metrics", {"Authorization": "Bearer the-scraper-token-0123456789"})
    finally:
        served.stop()
    assert refused == [403] * 5
    assert status == 200 and headers["content-type"] == metrics.CONTENT_TYPE
    found = families(text)
    assert_counts_match(found, site_jim, "root")
    assert_no_content(text, site_jim, list(jobs.values()))


@needs_root
def test_a_site_instance_without_a_token_has_no_metrics(site_jim, tmp_path):
    from jim import web

    s = web.start_site("the-right-secret-0123456789", homes=site_jim.pattern)
    try:
        conn = http.client.HTTPConnection(*s.server_address[:2], timeout=10)
        conn.request("GET", "/metrics", headers={"Authorization": "Bearer the-right-secret-0123456789"})
        assert conn.getresponse().status == 404
        conn.close()
    finally:
        s.stop()
    done = site_jim.run("serve", "--metrics-token-file", str(tmp_path / "t"), timeout=20)
    assert done.returncode == 1 and "--metrics-token-file is for jim serve --site" in done.stderr


# ---------------------------------------------------------------------------
# The census's rules, on real files
# ---------------------------------------------------------------------------


def test_root_accepts_only_counts_from_a_home():
    """What a fork running as a user answers is checked again: labels from known sets or bounded
    names, numbers bounded; anything else becomes "other" or 0."""
    hostile = {
        "grid": {"ACTIVE": 2, '"} 1\nevil{x="': 5, "DONE": -3, "FAILED": 1.5, "PENDING": True},
        "local": [
            ["RUNNING", "short", "slurm", 4],
            ["NOPE", "a queue with spaces", "Slurm!", 2],
            ["DONE", "/etc/passwd", "fork", 1],
            ["DONE"],
        ],
        "attempts": 10**30,
        "retries": [["node_failure", "retry", 1], ["secret", "x", 2]],
        "oldest_active": {"id": "../../etc", "created": 5},
        "adapters": {"slurm": {"degraded_since": "yes", "commands": {"sbatch": [3, 1], "a b": [1, 1]}}, "X": {}},
        "monitor": {"running": "yes", "at": float("nan"), "duration": -1},
    }
    c = census.clean("alice", hostile)
    assert c["grid"] == {"ACTIVE": 2, "other": 5, "DONE": 0, "FAILED": 0, "PENDING": 0}
    assert c["local"] == {
        ("RUNNING", "short", "slurm"): 4,
        ("other", "other", "other"): 2,
        ("DONE", "other", "fork"): 1,
    }
    assert c["attempts"] == 0
    assert c["retries"] == {("node_failure", "retry"): 1, ("other", "other"): 2}
    assert c["oldest_active"] is None
    assert c["adapters"] == {"slurm": {"degraded_since": None, "commands": {"sbatch": (3, 1)}}}
    assert c["monitor"] == {"running": False, "ok": False, "at": None, "duration": None, "slowest": None}
    text = metrics.exposition([c], [], 0.1, now=100.0).decode()
    assert "evil" not in text and "passwd" not in text
    families(text)  # (still valid text)
    assert census.clean("bob", "not a dict")["grid"] == {}


def test_the_homes_pattern_is_jim_serve_sites():
    for pattern in ("{home}/.jim", "/var/lib/jim/{user}", "/srv/{user}/{home}/x", "/h{home}"):
        for user, home in (("alice", "/home/alice"), ("b.o-b", "/"), ("c", "/x/y/")):
            pw = pwd.struct_passwd((user, "x", 1000, 1000, "", home, "/bin/sh"))
            assert accounts.home_of(pattern, pw) == auth.home_pattern(pattern, user, home)


def test_a_glob_of_homes(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        Home(tmp_path / name / "jim").ensure()
    (tmp_path / "c").mkdir()
    found = list(accounts.homes(f"{tmp_path}/*/jim"))
    assert [Path(p).parent.name for _pw, p, _why in found] == ["a", "b"]
    assert all(pw.pw_uid == os.geteuid() and why is None for pw, _p, why in found)


def test_a_fifo_or_a_link_in_a_home_never_blocks_a_census(tmp_path):
    home = Home(tmp_path / "jim").ensure()
    os.mkfifo(home.index)
    os.mkfifo(home.db / "20261129-101338-eece53bb.xml")
    os.symlink("/etc/passwd", home.db / "20261129-101339-6ef3be38.xml")
    os.mkfifo(home.cache / census.CACHE_FILE)
    os.mkfifo(monitorpass.path(home.root))
    os.mkfifo(home.cache / "slurm-commands.json")
    result: list = []
    t = threading.Thread(target=lambda: result.append(census.count_home(home)), daemon=True)
    t.start()
    t.join(30)
    assert result, "the census waited on a FIFO"
    c = census.clean("u", result[0])
    assert c["grid"] == {} and c["unreadable"] == 2 and c["adapters"]["slurm"]["commands"] == {}


def test_batch_commands_are_counted_at_the_seam(tmp_path):
    """Every command the adapters' one seam runs is counted, by every process of the user at once."""
    home = Home(tmp_path / "jim").ensure()
    cache = AdapterCache(home, "slurm")
    run = cache.counted(subprocess.run)
    assert run(["/bin/true"], capture_output=True).returncode == 0
    assert run(["/bin/false"], capture_output=True).returncode == 1
    with pytest.raises(subprocess.TimeoutExpired):
        run(["/bin/sleep", "5"], timeout=0.1)
    with pytest.raises(OSError):
        run(["/nonexistent/sbatch"])
    assert command_counts(home, "slurm") == {"true": (1, 0), "false": (1, 1), "sleep": (1, 1), "sbatch": (1, 1)}
    code = (
        "import sys; from jim.adapters.cache import AdapterCache; from jim.paths import Home\n"
        "c = AdapterCache(Home(sys.argv[1]), 'slurm')\n"
        "for k in range(200): c.count_command('/usr/bin/squeue', failed=k % 4 == 0)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(home.root)]) for _ in range(4)]
    assert all(p.wait(60) == 0 for p in procs)
    assert command_counts(home, "slurm")["squeue"] == (800, 200)
    found = families(metrics.exposition([census.clean("u", census.count_home(home))], [], 0.0).decode())
    assert sample_sum(found, "jim_batch_commands_total", adapter="slurm", command="squeue") == 800
    assert sample_sum(found, "jim_batch_command_failures_total", adapter="slurm", command="squeue") == 200
    cache.commands_path.write_text('{"squeue": [1, ' + "x" * 3000)  # (torn by a crash: counting starts again)
    cache.count_command("/usr/bin/sbatch", failed=False)
    assert command_counts(home, "slurm") == {"sbatch": (1, 0)}


def test_the_monitor_pass_stamp_is_written_at_most_every_ten_seconds(tmp_path):
    home = Home(tmp_path / "jim").ensure()
    stamp = monitorpass.PassStamp(home.root)
    stamp.passed(0.5, ok=True, now=1000.0)
    first = os.stat(monitorpass.path(home.root)).st_ino
    for k in range(1, 50):
        stamp.passed(0.01 * k, ok=True, now=1000.0 + k * 0.1)
    assert os.stat(monitorpass.path(home.root)).st_ino == first  # (not written again within 10 s)
    assert monitorpass.read(home.root) == {"at": 1000.0, "duration": 0.5, "slowest": 0.5, "ok": True}
    stamp.passed(0.2, ok=True, now=1010.5)
    assert monitorpass.read(home.root) == {"at": 1010.5, "duration": 0.2, "slowest": 0.49, "ok": True}
    stamp.passed(0.3, ok=False, now=1011.0)  # (a pass that failed is told at once)
    assert monitorpass.read(home.root)["ok"] is False


def test_every_metric_is_documented():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
    adapters = {"slurm": {"degraded_since": 1.0, "commands": {"sbatch": [2, 1]}}}
    c = census.clean("u", {"oldest_active": None, "adapters": adapters})
    c["monitor"].update(at=1.0, duration=0.1, slowest=0.1)
    c["oldest_active"] = {"id": "x", "created": 1.0}
    for family in text_string_to_metric_families(metrics.exposition([c], [], 0.0).decode()):
        for sample in {s.name for s in family.samples}:
            assert f"`{sample}`" in doc, sample
