"""jim's Debian package: built with Debian's own Python tools, installed with apt in a fresh Debian 13.

The test service tests/services/debian (its README says what each script
does) makes its own trixie chroots, never the HTCondor pool's: ``setup.sh``
(a pristine minbase and a copy with the packaging tools), ``build.sh`` (the
sdist becomes the upstream tarball, ``dpkg-buildpackage`` builds the source
and the binary package with ``dh --with python3 --buildsystem=pybuild``),
``install.sh`` (a fresh copy of the minbase, ``apt-get install ./<deb>``, its
dependencies from Debian's archive).  Then, inside that chroot: ``jim
--version``, ``jim doctor``, a Monte Carlo demo job on fork run to DONE with
the package's own examples, trixie's ``systemd-analyze verify`` of the
installed units, and ``apt-get purge``.  As root only (skipped otherwise,
failing under CI); several minutes (docs/install.md gives the times).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jim import __version__, siteinstall

from support.env import OUTPUT, REPO, require_service

pytestmark = pytest.mark.debian

SERVICE = REPO / "tests" / "services" / "debian"
PACKAGE = "jim-jobmanager"
UNIT_DIR = "/usr/lib/systemd/system"
EXAMPLES = f"/usr/share/doc/{PACKAGE}/examples"
#: pyproject.toml's dependencies -> Debian's package of each; HTCondor's bindings are only recommended.
DEBIAN_PACKAGES = {
    "lxml": "python3-lxml",
    "psutil": "python3-psutil",
    "tenacity": "python3-tenacity",
    "jinja2": "python3-jinja2",
    "cryptography": "python3-cryptography",
    "prometheus_client": "python3-prometheus-client",
}
RECOMMENDED = {"htcondor": "condor"}


@dataclass(frozen=True)
class Installed:
    deb: Path  # the package built
    root: Path  # the chroot it is installed in

    def run(
        self, *argv: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` in the chroot, with a clean environment (plus ``env``)."""
        clean = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"]
        extra = [f"{k}={v}" for k, v in (env or {}).items()]
        return subprocess.run(
            ["chroot", str(self.root), "/usr/bin/env", "-i", *clean, *extra, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _script(name: str, *args: str, timeout: float) -> str:
    """Run the service's script ``name``; its last line of output (a path). Its output goes to the log."""
    start = time.monotonic()
    proc = subprocess.run([str(SERVICE / name), *args], capture_output=True, text=True, timeout=timeout)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    with open(OUTPUT / "service-debian.log", "a") as log:
        log.write(f"== {name} {' '.join(args)}: exit {proc.returncode} after {time.monotonic() - start:.0f} s\n")
        log.write(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stderr[-3000:]}"
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    require_service(os.geteuid() == 0, "root, for the Debian package's chroots (tests/services/debian)")
    require_service((REPO / ".git").exists(), "a git checkout to build the Debian package from")
    _script("setup.sh", timeout=1800)
    deb = Path(_script("build.sh", timeout=1200))
    try:
        root = Path(_script("install.sh", str(deb), timeout=1200))
        yield Installed(deb, root)
    finally:
        subprocess.run([str(SERVICE / "stop.sh")], capture_output=True, timeout=300)


def _field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True).stdout


def _names(relations: str) -> set[str]:
    return {re.split(r"[\s(:]", r.strip(), maxsplit=1)[0] for r in relations.split(",") if r.strip()}


def test_the_package_depends_on_debians_packages_of_every_dependency(installed):
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower().replace("-", "_") for d in deps}
    unknown = names - set(DEBIAN_PACKAGES) - set(RECOMMENDED)
    assert not unknown, f"pyproject.toml depends on {unknown}: add Debian's package to debian/control and here"
    depends, recommends = _names(_field(installed.deb, "Depends")), _names(_field(installed.deb, "Recommends"))
    assert {DEBIAN_PACKAGES[n] for n in names if n in DEBIAN_PACKAGES} <= depends
    assert {RECOMMENDED[n] for n in names if n in RECOMMENDED} <= recommends
    assert not depends & set(RECOMMENDED.values())  # (the bindings only recommended)
    assert _field(installed.deb, "Version").strip() == f"{__version__}-1"
    assert _field(installed.deb, "Architecture").strip() == "all"


def test_the_package_holds_the_command_the_package_data_the_units_and_the_examples(installed):
    listing = subprocess.run(["dpkg-deb", "-c", str(installed.deb)], capture_output=True, text=True, check=True).stdout
    paths = {line.split()[-1].removeprefix(".") for line in listing.splitlines()}
    site = "/usr/lib/python3/dist-packages/jim"
    wanted = {
        "/usr/bin/jim",
        f"{site}/schema/jim.rng",
        f"{site}/data/jim.xsl",
        f"{site}/templates/job.html",
        f"{site}/adapters/templates/slurm.sh",
        f"{site}/sandbox/wrapper.py",
        f"{site}/data/systemd/jim-serve.service.in",
        f"{site}/gram/jim.pm",
        "/etc/jim/services.env",
        f"{EXAMPLES}/demo.toml",
        f"{EXAMPLES}/mc_driver.py",
    } | {f"{UNIT_DIR}/{unit}" for unit in siteinstall.UNITS}
    assert wanted <= paths, wanted - paths
    conffiles = subprocess.run(
        ["dpkg-deb", "--info", str(installed.deb), "conffiles"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert conffiles == ["/etc/jim/services.env"]


def test_apt_installed_it_with_debians_python_packages(installed):
    for package in [PACKAGE, *DEBIAN_PACKAGES.values()]:
        status = installed.run("dpkg-query", "-W", "-f=${Status} ${Version}", package)
        assert status.stdout.startswith("install ok installed"), (package, status.stdout, status.stderr)
    # (condor is recommended, not installed: --no-install-recommends)
    assert not installed.run("dpkg-query", "-W", "-f=${Status}", "condor").stdout.startswith("install ok installed")
    version = installed.run("jim", "--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"jim {__version__}")
    where = installed.run("python3", "-c", "import jim, lxml, psutil; print(jim.__file__)")
    assert where.stdout.strip() == "/usr/lib/python3/dist-packages/jim/__init__.py", where.stderr


def test_jim_doctor_finds_all_good(installed):
    proc = installed.run("jim", "doctor", env={"JIM_HOME": "/root/doctor-home"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "all good" and "adapter:  fork" in proc.stdout


def test_the_demo_runs_to_done_on_fork_from_the_installed_package(installed):
    env = {"JIM_HOME": "/root/demo-home", "JIM_CONFIG": f"{EXAMPLES}/demo.toml"}
    rsl = (
        f"&(executable={EXAMPLES}/mc_driver.py)(arguments=--seconds-per-event 0.01)"
        "(jimtype=montecarlo)(events=600)(cpuperevent=0.02)(outputs=*.dat)(jobname=debian-demo)"
    )
    submitted = installed.run("jim", "submit", "--rsl", rsl, env=env)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job_id = dict(line.split("=", 1) for line in submitted.stdout.splitlines())["JOB_ID"]
    deadline = time.monotonic() + 180
    while True:  # as a gatekeeper polls: until the grid job ends, or the deadline
        state = installed.run("jim", "poll", "--job-id", job_id, env=env).stdout
        if "JOB_STATE=DONE" in state or "JOB_STATE=FAILED" in state or time.monotonic() > deadline:
            break
        time.sleep(1)
    status = json.loads(installed.run("jim", "status", job_id, "--json", env=env).stdout)
    assert state.split() == ["JOB_STATE=DONE", "EXIT_CODE=0"], status
    assert len(status["localJobs"]) == 3 and {j["state"] for j in status["localJobs"]} == {"DONE"}
    tar = installed.root / status["outputTar"].lstrip("/")
    with tarfile.open(tar) as t:
        names = t.getnames()
    assert len([n for n in names if re.search(r"outputs/d0gstar\.\d+\.dat$", n)]) == 3, names


def test_trixies_systemd_finds_nothing_to_say_about_the_installed_units(installed):
    added = installed.run("apt-get", "install", "-y", "-q", "--no-install-recommends", "systemd", timeout=600)
    assert added.returncode == 0, added.stdout[-2000:] + added.stderr
    units = [f"{UNIT_DIR}/{unit}" for unit in siteinstall.UNITS]
    proc = installed.run("systemd-analyze", "verify", *units)
    assert (proc.returncode, proc.stderr, proc.stdout) == (0, "", "")
    text = (installed.root / UNIT_DIR.lstrip("/") / "jim-serve.service").read_text()
    assert "ExecStart=/usr/bin/jim serve --site " in text and siteinstall.MARKER in text
    enabled = installed.run("systemctl", "is-enabled", "jim-serve.service", "jim-purge.timer", "jim-advertise.timer")
    assert enabled.stdout.split() == ["disabled"] * 3  # (installed, not enabled)


def test_apt_purge_leaves_nothing_behind(installed):
    proc = installed.run("apt-get", "purge", "-y", "-q", PACKAGE, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    for path in (
        "/usr/bin/jim",
        "/usr/lib/python3/dist-packages/jim",
        "/etc/jim/services.env",
        UNIT_DIR + "/jim-serve.service",
    ):
        assert not (installed.root / path.lstrip("/")).exists(), path
