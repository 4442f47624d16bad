"""Condor-G in front of ARC 7 in front of jim: the grid level and the fabric level of jim's design, end to end.

An HTCondor job of the pool's unprivileged account, ``universe = grid`` and ``grid_resource = arc
https://localhost:41443/arex/rest/1.0``, submitted from the pool's schedd, goes through the gridmanager
and ``arc_gahp`` to A-REX 7 (tests/services/arc7, ``lrms=jim``), which hands it to jim, which splits it
into 4 local jobs (a Monte Carlo job of 20 events, 5 a job). The merged stdout and stderr and jim's
output tar come back to Condor-G, and the HTCondor job completes with exit code 0: once with an
X.509 proxy (``x509userproxy``), once with a JWT of the service's test issuer (``scitokens_file``).
The job type reaches jim as ``JIM_JOBTYPE`` in the job's environment (the proxy's case) or as
``arc_rte = ENV/JIM/MONTECARLO`` (the token's case); the event counts as ``JIM_*`` environment.

Needs both services running in the one chroot (tests/services/htcondor/start.sh, then
tests/services/arc7/start.sh) and the pool's schedd started with the service's CA directory
(config.d/jim-arc.config, which start.sh installs): outside CI a missing one skips, under CI it fails.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator

import pytest

from support.condor_arc import COMPLETED, Arc7, GridSubmitter, arc7_service, grid_submit_file, schedd_trust_problem
from support.condor_pool import pool_env
from support.env import require_service

pytestmark = [pytest.mark.arc, pytest.mark.htcondor, pytest.mark.slow]

MC = '#!/bin/sh\necho "events $JIM_FIRST_EVENT-$JIM_LAST_EVENT of $JIM_EVENTS: $*"\necho "err $JIM_FIRST_EVENT" >&2\n'
FIRSTS = (1, 6, 11, 16)


@pytest.fixture(scope="module")
def ce() -> Arc7:
    """The ARC 7 CE test service, behind the pool's Condor-G (not conftest's ``arc7``: this one checks the pool too)."""
    require_service(pool_env() is not None, "the HTCondor test pool (tests/services/htcondor/start.sh)")
    arc, why = arc7_service()
    require_service(arc is not None, why)
    assert arc is not None
    problem = schedd_trust_problem(arc)
    require_service(not problem, problem)
    return arc


@pytest.fixture
def submitter() -> Iterator[GridSubmitter]:
    s = GridSubmitter()
    try:
        yield s
    finally:
        s.cleanup()


def _credential(ce: Arc7, submitter: GridSubmitter, kind: str) -> str:
    """The submit file's credential line, its file made for the account."""
    if kind == "x509":
        proxy = ce.proxy(submitter.work / "proxy.pem", submitter.uid, submitter.gid)
        return f"x509userproxy = {proxy}"
    token = ce.token(submitter.work / "token.jwt", submitter.uid, submitter.gid)
    return f"scitokens_file = {token}"


#: credential -> (the job's environment, more submit lines): the job type by environment or by runtime environment
CASES = {
    "x509": ("JIM_JOBTYPE=montecarlo JIM_EVENTS=20 JIM_EVENTSPERJOB=5", ""),
    "token": ("JIM_EVENTS=20 JIM_EVENTSPERJOB=5", "arc_rte = ENV/JIM/MONTECARLO\n"),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_montecarlo_through_condor_g_and_arc7_is_4_local_jobs_of_jim(
    ce: Arc7, submitter: GridSubmitter, kind: str
) -> None:
    environment, extra = CASES[kind]
    submitter.write("mc.sh", MC, mode=0o755)
    sub = grid_submit_file(
        ce,
        submitter.work,
        executable=str(submitter.work / "mc.sh"),
        arguments="\"one 'two three'\"",
        environment=environment,
        credential=_credential(ce, submitter, kind),
        extra=extra,
    )
    cluster = submitter.submit(submitter.write("job.sub", sub))

    ad = submitter.wait(cluster, {COMPLETED})
    assert ad.get("ExitCode") == 0, ad
    grid = str(ad.get("GridJobId", "")).split()
    assert grid[:2] == ["arc", ce.rest] and len(grid) == 3, ad
    arc_id = grid[2]

    # what came back to Condor-G: jim's merged stdout and stderr (the 4 local jobs', in order) and its tar
    out = (submitter.work / "job.out").read_text().splitlines()
    assert out == [f"events {a}-{a + 4} of 5: one two three" for a in FIRSTS], out
    assert (submitter.work / "job.err").read_text().splitlines() == [f"err {a}" for a in FIRSTS]
    with tarfile.open(submitter.work / "jim-output.tar.gz") as tar:
        stdouts = [m.name for m in tar.getmembers() if m.name.rsplit("/", 1)[-1].startswith("stdout.")]
    assert len(stdouts) == 4, stdouts

    # who A-REX says submitted it: the proxy's DN, or the token's issuer and subject
    owner = ce.owner(arc_id)
    if kind == "x509":
        assert owner == ce.user_dn(), owner
    else:
        assert owner and owner.endswith("/" + ce.token_subject) and owner.startswith("https://"), owner

    # jim's side: one grid job of the ARC job, planned and run as 4 local jobs
    (record,) = ce.jim_records(arc_id)
    assert 'localJobs="4"' in record and record.count("<localjob ") == 4, record[:2000]
    assert "joboption_memory=256" in record  # (request_memory: MB, ARC's memory per slot)
