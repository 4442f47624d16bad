"""Where the tests run: the repository, the output directory, and whether a missing service may be skipped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
TESTS = REPO / "tests"
DATA = TESTS / "data"
OUTPUT = Path(os.environ.get("JIM_TEST_OUTPUT", REPO / "test-output"))


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_service(available: bool, what: str) -> None:
    """Skip outside CI, fail in CI: a missing real service is never silently skipped there."""
    if available:
        return
    if in_ci():
        pytest.fail(f"{what} is not available, and CI=true: the CI setup must provide it")
    pytest.skip(f"{what} is not available (start it with the script under tests/services/)")
