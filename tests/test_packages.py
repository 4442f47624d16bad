"""jim's sdist and wheel: built with ``python -m build``, installed into a clean virtual environment.

The sdist is built from the checkout and the wheel from the sdist (what
``python -m build`` does), so a file the sdist lacks is missing from the
wheel too.  The wheel is installed with pip into a new venv, its dependencies
from the package index; that jim, and nothing of the checkout, then runs
``jim --version``, ``jim doctor``, ``jim site-install --dry-run`` (the units
from the installed package data) and a Monte Carlo demo job on fork to DONE.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jim import __version__, siteinstall

from support.env import REPO
from support.jimcli import kill_all

pytestmark = pytest.mark.slow

#: The checkout's directories -> where their files are in the installed package.
PACKAGE_DIRS = {"jim": "jim", "adapters": "jim/adapters", "handlers": "jim/handlers", "sandbox": "jim/sandbox"}
#: What the sdist carries besides the packages, for building, testing and reading about jim.
SDIST_DIRS = ("docs", "tests", "examples", "bench", "scripts")


@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    assert (sdist.name, wheel.name) == (
        f"jim_jobmanager-{__version__}.tar.gz",
        f"jim_jobmanager-{__version__}-py3-none-any.whl",
    )
    return Built(sdist, wheel)


def _tracked(*dirs: str) -> set[str]:
    """The checkout's files in ``dirs`` that git knows (tracked, or new and not ignored) and that are there."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard", "--", *dirs],
        capture_output=True,
        text=True,
        check=True,
    )
    return {f for f in proc.stdout.splitlines() if (REPO / f).is_file()}


def test_the_sdist_holds_the_docs_tests_and_their_data_examples_and_package_data(built):
    with tarfile.open(built.sdist) as t:
        top = f"jim_jobmanager-{__version__}/"
        names = {n.removeprefix(top) for n in t.getnames()}
    wanted = _tracked(*SDIST_DIRS, *PACKAGE_DIRS) | {"README.md", "pyproject.toml", "MANIFEST.in", ".ci/run"}
    wanted = {f for f in wanted if not f.startswith("bench/results/")}
    assert not wanted - names, sorted(wanted - names)[:20]
    for f in (
        "tests/data",
        "tests/services/debian/build.sh",
        "jim/data/systemd/jim-serve.service.in",
        "docs/install.md",
    ):
        assert any(n == f or n.startswith(f + "/") for n in names), f
    assert not [n for n in names if n.startswith("debian/") or "__pycache__" in n or n.endswith(".pyc")]


def test_the_wheel_holds_every_file_of_the_packages(built):
    with zipfile.ZipFile(built.wheel) as z:
        names = set(z.namelist())
        entry_points = z.read(f"jim_jobmanager-{__version__}.dist-info/entry_points.txt").decode()
    expected = {PACKAGE_DIRS[f.split("/", 1)[0]] + "/" + f.split("/", 1)[1] for f in _tracked(*PACKAGE_DIRS)}
    assert not expected - names, sorted(expected - names)
    for unit in siteinstall.UNITS:
        assert f"jim/data/systemd/{unit}.in" in names
    assert "jim = jim.cli:main" in entry_points and "fork = jim.adapters.fork:ForkAdapter" in entry_points


@dataclass(frozen=True)
class Venv:
    root: Path
    work: Path

    @property
    def jim(self) -> str:
        return str(self.root / "bin" / "jim")

    def run(
        self, *argv: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` from the venv's bin/ first on PATH, in a directory of its own (nothing of the checkout)."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("JIM_", "PYTHON", "VIRTUAL_ENV"))}
        clean["PATH"] = f"{self.root / 'bin'}:{clean.get('PATH', '/usr/bin:/bin')}"
        return subprocess.run(
            list(argv), env={**clean, **(env or {})}, cwd=self.work, capture_output=True, text=True, timeout=timeout
        )


@pytest.fixture(scope="module")
def venv(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    base = tmp_path_factory.mktemp("clean")
    root, work = base / "venv", base / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300)
    installed = subprocess.run(
        [str(root / "bin" / "pip"), "install", "-q", str(built.wheel)], capture_output=True, text=True, timeout=900
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    yield Venv(root, work)
    kill_all(work / "home")


def test_the_clean_install_is_the_wheels_and_says_its_version(venv):
    where = venv.run(str(venv.root / "bin" / "python"), "-c", "import jim; print(jim.__file__)")
    assert Path(where.stdout.strip()).is_relative_to(venv.root), where.stdout + where.stderr
    version = venv.run("jim", "--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"jim {__version__}")


def test_jim_doctor_of_the_clean_install_finds_all_good(venv):
    proc = venv.run("jim", "doctor", env={"JIM_HOME": str(venv.work / "doctor-home")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "all good"


def test_site_install_of_the_clean_install_renders_its_units(venv):
    proc = venv.run("jim", "site-install", "--root", str(venv.work / "root"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert f"ExecStart={venv.jim} " not in proc.stdout  # (a dry run says, it does not show)
    assert proc.stdout.count("[dry run] install ") == len(siteinstall.UNITS) + 1
    real = venv.run("jim", "site-install", "--root", str(venv.work / "root"))
    unit = (venv.work / "root/etc/systemd/system/jim-purge.service").read_text()
    assert real.returncode == 0 and f"ExecStart={venv.jim} purge --all-users" in unit


def test_the_demo_runs_to_done_on_fork_from_the_clean_install(venv):
    env = {"JIM_HOME": str(venv.work / "home"), "JIM_CONFIG": str(REPO / "examples/demo.toml")}
    rsl = (
        f"&(executable={REPO / 'examples/mc_driver.py'})(arguments=--seconds-per-event 0.01)"
        "(jimtype=montecarlo)(events=600)(cpuperevent=0.02)(outputs=*.dat)(jobname=wheel-demo)"
    )
    submitted = venv.run("jim", "submit", "--rsl", rsl, env=env)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job_id = dict(line.split("=", 1) for line in submitted.stdout.splitlines())["JOB_ID"]
    deadline = time.monotonic() + 180
    while True:  # as a gatekeeper polls: until the grid job ends, or the deadline
        state = venv.run("jim", "poll", "--job-id", job_id, env=env).stdout
        if "JOB_STATE=DONE" in state or "JOB_STATE=FAILED" in state or time.monotonic() > deadline:
            break
        time.sleep(1)
    status = json.loads(venv.run("jim", "status", job_id, "--json", env=env).stdout)
    assert state.split() == ["JOB_STATE=DONE", "EXIT_CODE=0"], status
    assert {j["state"] for j in status["localJobs"]} == {"DONE"} and len(status["localJobs"]) == 3
    with tarfile.open(status["outputTar"]) as t:
        assert len([n for n in t.getnames() if re.search(r"outputs/d0gstar\.\d+\.dat$", n)]) == 3
