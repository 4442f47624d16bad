"""Golden files: rendered scripts, argument lists and descriptions compared with ``tests/data/golden/``.

A golden file that is missing fails the test (a new golden file is written on
purpose, never by accident); to accept an intended change, or to write a new
one, run the test again with ``JIM_ACCEPT_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import os

import pytest

from support.env import DATA

GOLDEN = DATA / "golden"
ACCEPT = "JIM_ACCEPT_GOLDEN"


def golden(name: str, text: str) -> None:
    """Fail unless ``text`` is the content of the golden file ``name`` (see the module docstring)."""
    path = GOLDEN / name
    if os.environ.get(ACCEPT):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if not path.exists():
        pytest.fail(
            f"golden file {path.relative_to(DATA.parent.parent)} is missing; to write it, rerun with {ACCEPT}=1"
        )
    assert text == path.read_text(), f"{name} changed; if intended, rerun with {ACCEPT}=1 and review the diff"
