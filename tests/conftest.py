"""Fixtures: a private jim home per test, the real CLI, clean-up, schema checks.

Every test that uses ``jim_env`` gets its own ``JIM_HOME`` and config; on
teardown every XML file the test wrote is validated against the shipped
schema, and every process the test started (monitor, workers, wrappers,
local jobs: they all carry that ``JIM_HOME`` in their environment) is killed.
The helpers live in ``tests/support/``.
"""

from __future__ import annotations

import signal

import pytest

from support import users as unix
from support.env import require_service
from support.jimcli import FAST_CONFIG, Jim, kill_all, validate_home


def pytest_configure(config):
    """The tests' processes start with the stop signals as a terminal gives them, whatever started pytest:
    a run under ``nohup`` or ``cmd &`` in a script inherits SIGHUP, SIGINT or SIGQUIT ignored, and a shell
    cannot trap a signal ignored when it started (the RTE tests forward them)."""
    for signum in (signal.SIGHUP, signal.SIGQUIT):
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def jim_env(tmp_path):
    home = tmp_path / "jimhome"
    config = tmp_path / "jim.toml"
    config.write_text(FAST_CONFIG)
    jim = Jim(home, config)
    yield jim
    kill_all(home)
    errors = validate_home(home) if home.exists() else []
    assert not errors, "XML database files do not validate:\n" + "\n".join(errors)


@pytest.fixture(scope="session")
def _unix_users_ready():
    return unix.available()


@pytest.fixture
def unix_users(_unix_users_ready):
    """The two test accounts (``.alice``, ``.bob``): see tests/support/users.py."""
    ok, why = _unix_users_ready
    require_service(ok, f"the test accounts ({why})")
    users = unix.Users(unix.UnixUser.lookup(unix.NAMES[0]), unix.UnixUser.lookup(unix.NAMES[1]))
    for u in (users.alice, users.bob):
        u.kill_all()
        u.snapshot()
    yield users
    for u in (users.alice, users.bob):
        u.kill_all()
        u.clean()


@pytest.fixture(scope="module")
def arc():
    """The ARC CE test service, jim on fork behind it (tests/support/arc.py; start.sh switches its mode)."""
    from support import arc as arc_ce  # (lazy: only the ARC tests need it)

    ok, why = arc_ce.available()
    require_service(ok, f"the ARC CE test service ({why})")
    return arc_ce.start("jim-fork")


def _arc_ce(name: str):
    from support import arc as arc_ce  # (lazy: only the ARC tests need it)

    ok, why = arc_ce.available(name)
    require_service(ok, f"the ARC CE test service {name} ({why})")
    return arc_ce.connect(name, "jim-fork")


@pytest.fixture(scope="module", params=["arc6", "arc7"])
def each_arc(request):
    """Each ARC CE test service in turn, jim on fork behind it: A-REX 6.17 (tests/services/arc) and
    A-REX 7.0 (tests/services/arc7, in the trixie chroot); a test using it runs once per CE."""
    return _arc_ce(request.param)


@pytest.fixture(scope="module")
def arc7():
    """The ARC 7 CE test service (tests/services/arc7), jim on fork behind it."""
    return _arc_ce("arc7")


@pytest.fixture(scope="session")
def _slurm_cluster_session():
    from support.slurm_cluster import session_cluster  # (lazy: only the slurm_cluster tests need it)

    yield from session_cluster()


@pytest.fixture
def slurm_cluster(_slurm_cluster_session):
    """The multi-node test Slurm (tests/support/slurm_cluster.py); all its nodes are up again after the test."""
    with _slurm_cluster_session.lock():
        yield _slurm_cluster_session
        _slurm_cluster_session.revive_all()
