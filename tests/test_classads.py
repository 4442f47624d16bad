"""jim.classads: the one owner of which ClassAd and HTCondor bindings jim uses, loaded on first use."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from jim import classads

REPO = Path(__file__).resolve().parent.parent
BINDINGS = ("classad2", "classad", "htcondor2", "htcondor")


def test_importing_jim_loads_no_bindings():
    code = (
        "import sys, jim, jim.classads, jim.jobdesc, jim.requirements, jim.requirements.expressions, "
        "jim.advertise, jim.adapters.condor, jim.cli; "
        f"print(sorted(m for m in {BINDINGS!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_bindings_are_classad2_and_htcondor2():
    assert classads.classad_module().__name__ == "classad2"
    assert classads.htcondor_module().__name__ == "htcondor2"
    assert classads.classad_module() is classads.classad_module()  # (found once per process)


def test_the_older_classad_bindings_when_classad2_is_missing(monkeypatch):
    older = ModuleType("classad")

    def import_module(name: str) -> ModuleType:
        if name == "classad2":
            raise ImportError("No module named 'classad2'")
        assert name == "classad"
        return older

    monkeypatch.setattr(classads, "import_module", import_module)
    classads.classad_module.cache_clear()
    try:
        assert classads.classad_module() is older
    finally:
        classads.classad_module.cache_clear()


def test_no_bindings_at_all_is_an_import_error(monkeypatch):
    def import_module(name: str) -> ModuleType:
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(classads, "import_module", import_module)
    classads.classad_module.cache_clear()
    try:
        with pytest.raises(ImportError, match="'classad'"):
            classads.classad_module()
    finally:
        classads.classad_module.cache_clear()


def test_no_other_module_of_jim_imports_the_bindings():
    """Every ClassAd or HTCondor call of jim goes through jim.classads (the test fakes may import them)."""
    direct = []
    for root in ("jim", "adapters", "handlers", "sandbox"):
        for path in (REPO / root).rglob("*.py"):
            if path == REPO / "jim" / "classads.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                else:
                    continue
                direct += [f"{path.relative_to(REPO)}:{node.lineno}" for n in names if n.split(".")[0] in BINDINGS]
    assert not direct
