"""Splitters: pure functions that cut a grid job's work into local-job slices.

Handlers (``jim.handlers``) are thin; the splitting itself lives here so that it
can be tested on its own and reused by several job types.
"""
