"""Job-type plug-ins found through the ``jim.handlers`` entry points; a broken one breaks only itself."""

from __future__ import annotations

import os


def fake_distribution(root, name: str, entry_points: str) -> None:
    d = root / f"{name}-0.1.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (d / "entry_points.txt").write_text(entry_points)


def test_broken_plugin_breaks_only_its_own_job_type(jim_env, tmp_path):
    site = tmp_path / "site"
    fake_distribution(
        site, "brokenplug", "[jim.handlers]\nbroken = no_such_module_anywhere:Handler\nnotahandler = os:getcwd\n"
    )
    env = {"PYTHONPATH": str(site) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    listing = jim_env.run("handlers", env=env)
    assert listing.returncode == 0
    lines = {line.split()[0]: line for line in listing.stdout.splitlines()}
    assert "BROKEN" in lines["broken"] and "No module named" in lines["broken"]
    assert "BROKEN" in lines["notahandler"] and "not a subclass" in lines["notahandler"]
    assert "BROKEN" not in lines["generic"] and "BROKEN" not in lines["montecarlo"]

    out = jim_env.protocol("submit", "--rsl", "&(executable=/bin/true)(jimtype=broken)", env=env)
    assert out["ERROR"] == "134" and "installed but broken" in out["MESSAGE"], out
    job = jim_env.submit("&(executable=/bin/true)(count=2)", env=env)
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    doctor = jim_env.run("doctor", env=env)
    assert doctor.returncode == 1 and "handler broken: BROKEN" in doctor.stdout
