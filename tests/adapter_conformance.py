"""(moved to tests/support/conformance.py)"""
from support.conformance import AdapterConformance  # noqa: F401
