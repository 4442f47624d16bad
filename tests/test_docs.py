"""The documentation stays true to the tree: every link resolves, every path docs/architecture.md names
exists, and the README stays an entry point."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
#: A markdown link's target: [text](target), not an image's, not in code.
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
#: A path in backquotes that names something in the tree (``jim/monitor.py``, ``tests/support/``...).
_PATH = re.compile(r"`((?:jim|adapters|handlers|sandbox|tests|bench|scripts|examples|docs)/[A-Za-z0-9_./<>*-]*)`")


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    out = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def _prose(text: str) -> str:
    """The text without fenced code blocks (a shell example is no link)."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_link_resolves(doc):
    broken = []
    for target in _LINK.findall(_prose(doc.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # (a URL)
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists() or anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(target)
    assert not broken, f"{doc.name}: links to nothing: {broken}"


def test_every_path_the_architecture_names_exists():
    text = (REPO / "docs" / "architecture.md").read_text()
    missing = []
    for name in set(_PATH.findall(text)):
        if "<" in name or "*" in name:  # (a pattern: adapters/<system>.py)
            continue
        if not (REPO / name.rstrip("/")).exists():
            missing.append(name)
    assert not missing, f"docs/architecture.md names what does not exist: {sorted(missing)}"


def test_every_module_of_jim_is_in_the_architecture():
    """The layer diagram names every module of jim (a package's modules in its line, as ``web/*``)."""
    text = (REPO / "docs" / "architecture.md").read_text()
    diagram = text.split("## Layers", 1)[1].split("```")[1]
    words = set(re.findall(r"[a-z_]+", diagram))
    names = {p.stem for p in (REPO / "jim").glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert not sorted(names - words), "add these modules to the diagram in docs/architecture.md"


def test_the_readme_is_an_entry_point():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 300
    assert lines[2:6] == [
        "```sh",
        "./scripts/demo.sh    # set up (venv) and run a real Monte Carlo grid job on the embedded fork backend",
        "./scripts/test.sh    # run the whole test suite against real services (as root: it starts them)",
        "```",
    ]


def test_every_doc_is_in_the_index():
    index = (REPO / "docs" / "README.md").read_text()
    missing = [d.name for d in (REPO / "docs").glob("*.md") if d.name != "README.md" and f"]({d.name})" not in index]
    assert not missing, f"add to docs/README.md: {missing}"
