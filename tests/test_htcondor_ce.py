"""HTCondor-CE's path into jim, on the real test pool: the job router's route ``Jim``.

An incoming vanilla job that asks for jim (``+WantJim = true``) is turned by
``condor_job_router`` (tests/services/htcondor/config.d/jim-router.config)
into a grid-universe ``batch jim`` job with the job's cores and memory and
its ``JIM_*`` attributes; Condor-G hands it to blahpd, which runs jim's
BLAH scripts (``jim blah-install``) inside the pool's chroot; jim splits it
into local jobs on fork, inside the chroot.
Everything runs as the unprivileged test account; nothing is faked.
"""

from __future__ import annotations

import pwd
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from support.env import require_service
from support.services import HTC_JIM_VENV, HTC_USER, htcondor_account_lock, htcondor_env, in_htcondor_root

pytestmark = [pytest.mark.htcondor]

T = TypeVar("T")
JIM = str(HTC_JIM_VENV / "bin" / "jim")
JIM_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{8}\b")


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 300.0, every: float = 2.0) -> T:
    """Poll ``check`` until it returns something true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def ads(constraint: str, *attrs: str, history: bool = False) -> list[dict[str, str]]:
    """Job ads (queue, or history) matching ``constraint``: the named attributes as condor_q prints them."""
    tool = "condor_history" if history else "condor_q"
    argv = [tool, *([] if history else ["-allusers"]), "-constraint", constraint, "-af:jt", *attrs]
    p = in_htcondor_root(*argv)
    assert p.returncode == 0, p.stderr
    rows = []
    for line in p.stdout.splitlines():
        jobid, _, rest = line.partition("\t")
        values = rest.split("\t") if attrs else []
        rows.append({"id": jobid.strip(), **{a: v.strip() for a, v in zip(attrs, values, strict=False)}})
    return rows


@pytest.fixture(scope="module")
def pool() -> Iterator[Path]:
    """The pool, its job router and jim as its ``batch jim`` BLAH backend inside the chroot; blahpd's jim
    configured (fork, a home of its own) through the account's ``~/.blah/user.config``; that home."""
    require_service(htcondor_env() is not None, "the HTCondor test pool")
    routes = in_htcondor_root("condor_config_val", "JOB_ROUTER_ROUTE_NAMES")
    require_service(
        routes.returncode == 0 and "Jim" in routes.stdout.split(),
        "the pool's job router route Jim (tests/services/htcondor/start.sh installs config.d/jim-router.config)",
    )
    with htcondor_account_lock():
        yield from _configured_pool()


def _configured_pool() -> Iterator[Path]:
    p = in_htcondor_root(JIM, "blah-install", "--jim-command", JIM, "--force")
    assert p.returncode == 0, p.stdout + p.stderr
    site = account_dir("/tmp/jim-htc-ce-site.XXXXXX")
    config = write(site / "jim.toml", f'[jim]\nhome = "{site}/home"\n[batch]\nadapter = "fork"\n')
    blah = Path(pwd.getpwnam(HTC_USER).pw_dir) / ".blah"
    if not blah.exists():
        blah.mkdir(mode=0o755)
        subprocess.run(["chown", HTC_USER, str(blah)], check=True)
    user_config = write(blah / "user.config", f"jim_config={config}\n")
    yield site / "home"
    if user_config.exists() and str(config) in user_config.read_text():
        user_config.unlink()
    subprocess.run(["rm", "-rf", str(site)], check=False)


def account_dir(template: str) -> Path:
    """A new private directory of the test account (under /tmp: bound into the chroot at the same path)."""
    p = subprocess.run(["runuser", "-u", HTC_USER, "--", "mktemp", "-d", template], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return Path(p.stdout.strip())


@pytest.fixture
def work() -> Iterator[Path]:
    """A private directory of the test account for one test."""
    path = account_dir("/tmp/jim-htc-ce.XXXXXX")
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def jim_as_account(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The chroot's jim as the test account, on the home blahpd's jim records in."""
    return in_htcondor_root("env", f"JIM_HOME={home}", JIM, *argv, user=HTC_USER)  # type: ignore[no-any-return]


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    """A file of the test account."""
    path.write_text(text)
    path.chmod(mode)
    subprocess.run(["chown", HTC_USER, str(path)], check=True)
    return path


def submit(sub: Path) -> str:
    """condor_submit as the test account inside the chroot; the cluster id."""
    p = in_htcondor_root("condor_submit", "-terse", str(sub), user=HTC_USER)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.split(".")[0].strip()


def test_a_vanilla_job_asking_for_jim_is_routed_to_jim_and_completes(pool: Path, work: Path) -> None:
    script = write(work / "mc.sh", '#!/bin/sh\necho "routed local job $JIM_LOCAL_INDEX cores=$JIM_CORES"\n', 0o755)
    # a job that does not ask for jim: never routed (and never run: no slot meets its requirements)
    plain = submit(
        write(
            work / "plain.sub",
            f"executable = /bin/true\ninitialdir = {work}\nlog = {work}/plain.log\n"
            "requirements = (TARGET.JimTestNever =?= true)\nqueue\n",
        )
    )
    cluster = submit(
        write(
            work / "job.sub",
            f"""universe = vanilla
executable = {script}
initialdir = {work}
output = out
error = err
log = log
request_cpus = 2
request_memory = 200
+WantJim = true
+JIM_JOBTYPE = "montecarlo"
+JIM_EVENTS = 4
+JIM_EVENTSPERJOB = 2
queue
""",
        )
    )
    try:
        # the router made a grid-universe batch jim job of it, with its cores and memory
        routed = wait_for(
            "the routed job",
            lambda: ads(
                f'RoutedFromJobId == "{cluster}.0"',
                "JobUniverse",
                "GridResource",
                "remote_NodeNumber",
                "RequestMemory",
                "CERequirements",
            ),
            timeout=120,
        )[0]
        assert routed["JobUniverse"] == "9" and routed["GridResource"] == "batch jim", routed
        assert routed["remote_NodeNumber"] == "2" and routed["RequestMemory"] == "200", routed
        # jim's attributes: the job's JIM_* attributes named in CERequirements (BLAH's local submit
        # attributes hook; the job type a ClassAd string there)
        assert routed["CERequirements"].split(",")[1:] == ["JIM_JOBTYPE", "JIM_EVENTS", "JIM_EVENTSPERJOB"], routed
        # the job that did not ask for jim was seen by the same router pass and left alone
        assert ads(f"ClusterId == {plain}", "RoutedToJobId")[0]["RoutedToJobId"] == "undefined"
        assert not ads(f'RoutedFromJobId == "{plain}.0"', "JobUniverse")

        # jim recorded the grid job (blahpd's job id holds jim's id) and split it as the attributes say
        def jim_id() -> str | None:
            for row in ads(f'RoutedFromJobId == "{cluster}.0"', "GridJobId", "JobStatus", "HoldReason"):
                assert row["JobStatus"] != "5", f"the routed job is held: {row['HoldReason']}"
                if m := JIM_ID.search(row["GridJobId"]):
                    return m.group(0)
            return None

        grid_id = wait_for("blahpd's job id from jim", jim_id, timeout=300)
        status = wait_for(
            "jim's record of the grid job",
            lambda: (s := jim_as_account(pool, "status", grid_id)).returncode == 0 and s.stdout,
            timeout=60,
        )
        assert "montecarlo" in status and "2 local jobs" in status, status
        assert "2 cores" in status, status

        # the vanilla job completes with exit code 0, its output back in its own output file
        done = wait_for(
            "the vanilla job to complete",
            lambda: (
                ads(f"ClusterId == {cluster} && JobStatus == 4", "ExitCode")
                or ads(f"ClusterId == {cluster} && JobStatus == 4", "ExitCode", history=True)
            ),
            timeout=600,
            every=5,
        )[0]
        assert done["ExitCode"] == "0", done
        out = (work / "out").read_text()
        assert out.count("routed local job") == 2, out
    finally:
        in_htcondor_root("condor_rm", plain, cluster)
