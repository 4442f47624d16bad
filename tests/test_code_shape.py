"""Rooms with one job each: no production module grows past what a newcomer reads in one sitting.

Complexity (ruff's C901, at most 20) and argument counts (ruff's PLR0913, at most 6) are checked by
``scripts/check.sh``; the size of a module is checked here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: The most lines one production module may have.
MAX_LINES = 600
MODULES = sorted(p for root in ("jim", "adapters", "handlers", "sandbox") for p in (REPO / root).rglob("*.py"))


@pytest.mark.parametrize("module", MODULES, ids=[str(m.relative_to(REPO)) for m in MODULES])
def test_no_module_is_too_long(module):
    lines = len(module.read_text().splitlines())
    assert lines <= MAX_LINES, (
        f"{module.relative_to(REPO)} has {lines} lines: split it where its parts have one job each"
    )
