"""jim's modules depend one way: interfaces over stages over services over the foundation.

Walks the import graph of every module of jim (imports inside functions
included) and fails on an import cycle, on an edge that points up a layer, on
a module that belongs to no layer, and on an import inside a function that
does not say why it is there.  See docs/architecture.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Where each installed package's sources are (pyproject.toml's package-dir mapping).
SOURCES = {
    "jim": REPO / "jim",
    "jim.adapters": REPO / "adapters",
    "jim.handlers": REPO / "handlers",
    "jim.sandbox": REPO / "sandbox",
}

#: Layers, lowest first; a module may import its own layer (no cycle) and the layers below.
LAYERS = {
    "foundation": [
        "jim",
        "jim.errors",
        "jim.states",
        "jim.jobid",
        "jim.timestamps",
        "jim.ranges",
        "jim.summary",
        "jim.paths",
        "jim.locks",
        "jim.proc",
        "jim.ownership",
        "jim.safeio",
        "jim.identity",
        "jim.credentials",
        "jim.classads",
        "jim.faults",
        "jim.durations",
        "jim.removal",
        "jim.accounts",
        "jim.drain",
        "jim.monitorpass",
        "jim.log",
        "jim.plugins",
        "jim.settings",
        "jim.record*",
        "jim.db",
        "jim.templates",
    ],
    "services": [
        "jim.background",
        "jim.journal",
        "jim.seg",
        "jim.localfiles",
        "jim.jobdesc*",
        "jim.config",
        "jim.retry",
        "jim.site",
        "jim.evidence",
        "jim.memo",
        "jim.caps",
        "jim.split*",
        "jim.requirements*",
        "jim.adapters*",
        "jim.handlers*",
        "jim.sandbox*",
    ],
    "stages": [
        "jim.plan",
        "jim.submit",
        "jim.worker",
        "jim.monitor",
        "jim.cancel",
        "jim.resubmit",
        "jim.outputs",
        "jim.keep",
        "jim.status",
        "jim.statustext",
        "jim.accounting",
        "jim.purge",
        "jim.census",
        "jim.apel",
    ],
    "interfaces": [
        "jim.cli",
        "jim.poll",
        "jim.protocol",
        "jim.arguments",
        "jim.commands",
        "jim.__main__",
        "jim.web*",
        "jim.doctor",
        "jim.advertise",
        "jim.rootfiles",
        "jim.metrics",
        "jim.adminview",
        "jim.siteinstall",
        # the GRAM5 front end's installer (jim.pm, the Perl module, is data)
        "jim.gram",
        "jim.gram.__main__",
        "jim.gram.install",
        "jim.gram.rvf",
        # the ARC CE's front end: every step, whoever runs it (see jim/arc/__init__.py)
        "jim.arc",
        "jim.arc.options",
        "jim.arc.controldir",
        "jim.arc.grami",
        "jim.arc.usersteps",
        "jim.arc.rte",
        "jim.arc.owners",
        "jim.arc.diag",
        "jim.arc.scan",
        "jim.arc.renew",
        "jim.arc.info",
        "jim.arc.install",
        # the BLAH front end (Condor-G's batch jim, HTCondor-CE): see jim/blah/__init__.py
        "jim.blah",
        "jim.blah.submitargs",
        "jim.blah.hook",
        "jim.blah.steps",
        "jim.blah.status",
        "jim.blah.install",
    ],
}
RANK = {name: k for k, name in enumerate(LAYERS)}


def modules() -> dict[str, Path]:
    out = {}
    for package, root in SOURCES.items():
        for path in root.rglob("*.py"):
            parts = [p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]
            name = ".".join([package, *parts])
            if name.startswith("jim.sandbox.wrapper"):
                continue  # runs on the worker node, imports nothing of jim
            out[name] = path
    return out


def layer_of(name: str) -> str | None:
    best = None
    for layer, patterns in LAYERS.items():
        for p in patterns:
            if name == p or (p.endswith("*") and (name == p[:-1] or name.startswith(p[:-1] + "."))):
                if best is None or len(p) > len(best[1]):
                    best = (layer, p)
    return best[0] if best else None


def imports_of(path: Path, known: dict[str, Path]) -> list[tuple[str, ast.stmt, bool]]:
    """(imported jim module, statement, inside a function?) for every import of ``path``."""
    tree = ast.parse(path.read_text())
    inner = {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(f)
        if isinstance(n, (ast.Import, ast.ImportFrom))
    }
    typing_only = set()  # (imports for type checkers only are no dependency at run time)
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            typing_only.update(id(m) for m in n.body if isinstance(m, (ast.Import, ast.ImportFrom)))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                continue
            names = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
            names = names or [node.module]
        else:
            names = [a.name for a in node.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                out.append((name, node, id(node) in inner))
    return out


MODULES = modules()
GRAPH = {name: imports_of(path, MODULES) for name, path in MODULES.items()}


def test_every_module_has_a_layer():
    assert not [m for m in MODULES if layer_of(m) is None], "add new modules to LAYERS (and docs/architecture.md)"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_import_points_up_a_layer(name):
    up = [
        f"{name} ({layer_of(name)}) imports {dep} ({layer_of(dep)})"
        for dep, _node, _inner in GRAPH[name]
        if dep != name and RANK[layer_of(dep)] > RANK[layer_of(name)]
    ]
    assert not up


def test_no_import_cycle():
    edges = {m: {d for d, _n, _i in deps if d != m} for m, deps in GRAPH.items()}
    # jim's package __init__ is imported by every "from jim import x": not an edge of the flow
    edges = {m: {d for d in ds if d != "jim"} for m, ds in edges.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d) :] + [d]
            if d not in state and (cycle := visit(d)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state:
            cycle = visit(m)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_imports_inside_functions_say_why():
    """An import inside a function keeps a hot path light (``jim poll``, the submit's answer) or
    keeps an optional heavy library (HTCondor's bindings) out of jim; each says so on its line or
    the line above."""
    silent = []
    for path in MODULES.values():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    here, above = lines[sub.lineno - 1], lines[sub.lineno - 2].strip()
                    if "#" not in here and not above.startswith("#"):
                        silent.append(f"{path.relative_to(REPO)}:{sub.lineno}: {here.strip()}")
    assert not silent, "imports inside functions without a reason:\n" + "\n".join(sorted(set(silent)))


def test_the_graph_is_real():
    """The walk sees the edges it should (a test that cannot fail proves nothing)."""
    deps = {d for d, _n, _i in GRAPH["jim.worker"]}
    assert {"jim.journal", "jim.db", "jim.adapters.model", "jim.site"} <= deps
    assert ("jim.worker", True) in {(d, inner) for d, _n, inner in GRAPH["jim.submit"]}
    assert layer_of("jim.requirements.matching") == "services" and layer_of("jim.jobdesc") == "services"
