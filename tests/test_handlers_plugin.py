"""A site adds a job type: the example plug-in package, installed with pip, runs a grid job end to end.

``examples/handler-plugin`` is installed with ``pip install --no-deps --target``
into a private directory put on the PYTHONPATH of every jim process (the CLI,
its detached worker and monitor inherit it).  Nothing is mocked: pip builds the
package from its pyproject.toml, jim finds it through its entry point.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from support.jimcli import write_config

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "handler-plugin"


def _can_build_without_isolation() -> bool:
    """setuptools builds wheels by itself from 70.1 on; before that it needs the wheel package."""
    try:
        import setuptools
    except ImportError:
        return False
    version = tuple(int(x) for x in setuptools.__version__.split(".")[:2] if x.isdigit())
    return version >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The example package installed by pip into its own directory (once per module)."""
    root = tmp_path_factory.mktemp("plugin")
    source = root / "src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = root / "site"
    argv = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--quiet",
        "--disable-pip-version-check",
        "--target",
        str(target),
        str(source),
    ]
    if _can_build_without_isolation():
        argv.insert(4, "--no-build-isolation")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"pip install of the example plug-in failed:\n{proc.stdout}\n{proc.stderr}"
    assert (target / "jim_example_handler" / "__init__.py").is_file()
    assert list(target.glob("jim_example_handler-*.dist-info/entry_points.txt")) or list(
        target.glob("jim_example_handler*.dist-info/entry_points.txt")
    )
    return target


def env_with(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(site) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_installed_plugin_is_listed(jim_env, plugin_site):
    listing = jim_env.run("handlers", env=env_with(plugin_site))
    assert listing.returncode == 0, listing.stderr
    lines = {line.split()[0]: line for line in listing.stdout.splitlines()}
    assert "seeds" in lines and "One local job per random seed" in lines["seeds"]
    for builtin in ("generic", "montecarlo", "reprocessing", "concat", "parametric"):
        assert builtin in lines and "BROKEN" not in lines[builtin]
    # without the package on the path the job type does not exist
    out = jim_env.protocol("submit", "--rsl", "&(executable=/bin/true)(jimtype=seeds)(seeds=2)")
    assert out["ERROR"] == "134" and "unknown job type 'seeds'" in out["MESSAGE"]


def test_plugin_job_type_runs_end_to_end(jim_env, plugin_site):
    write_config(jim_env, '[handlers.seeds]\nstride = 7\nseed_argument = "--seed"\n')
    env = env_with(plugin_site)
    rsl = (
        '&(executable=/bin/sh)(arguments=-c "echo seed=$JIM_PARAM_seed args=$*" job)'
        "(jimtype=seeds)(seeds=3)(firstseed=100)"
    )
    dry = json.loads(jim_env.run("plan", "--dry-run", "--json", "--rsl", rsl, env=env).stdout)
    assert [j["argv"][-2:] for j in dry["jobs"]] == [["--seed", "100"], ["--seed", "107"], ["--seed", "114"]]
    # its own attributes are known only to it; a typo is still refused
    bad = jim_env.protocol("submit", "--rsl", rsl + "(seedz=1)", env=env)
    assert bad["ERROR"] == "1" and "seedz" in bad["MESSAGE"]
    refused = jim_env.protocol("submit", "--rsl", "&(executable=/bin/true)(jimtype=seeds)", env=env)
    assert refused["ERROR"] == "134" and "need seeds=" in refused["MESSAGE"]

    job = jim_env.submit(rsl, env=env)
    out = jim_env.wait(job)
    assert out["JOB_STATE"] == "DONE", out
    st = jim_env.status(job)
    assert st["jobtype"] == "seeds" and st["plan"]["binding"] == "seeds" and st["plan"]["stride"] == "7"
    local = sorted(st["localJobs"], key=lambda lj: lj["index"])
    assert [lj["slice"]["seed"] for lj in local] == ["100", "107", "114"]
    with tarfile.open(st["outputTar"]) as tar:
        stdouts = {
            m.name.split("/")[-1].split(".")[1]: tar.extractfile(m).read().decode()
            for m in tar.getmembers()
            if m.name.split("/")[-1].startswith("stdout.")
        }
    assert stdouts == {
        "0": "seed=100 args=--seed 100\n",
        "1": "seed=107 args=--seed 107\n",
        "2": "seed=114 args=--seed 114\n",
    }


def test_an_empty_subclass_is_reported_with_what_it_lacks(jim_env, tmp_path):
    """Step one of the tutorial in docs/handlers.md: the error lists the methods to write."""
    pkg = tmp_path / "site" / "halfdone"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from jim.handlers.base import Handler\n\nclass Half(Handler):\n    name = 'half'\n"
    )
    dist = tmp_path / "site" / "halfdone-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: halfdone\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[jim.handlers]\nhalf = halfdone:Half\n")
    env = env_with(tmp_path / "site")
    lines = {line.split()[0]: line for line in jim_env.run("handlers", env=env).stdout.splitlines()}
    assert "BROKEN" in lines["half"]
    assert "getCommandAndArguments, getNumSubmissionTimes, prepareWorkArea" in lines["half"]
    out = jim_env.protocol("submit", "--rsl", "&(executable=/bin/true)(jimtype=half)", env=env)
    assert out["ERROR"] == "134" and "does not implement" in out["MESSAGE"]
