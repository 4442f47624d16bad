"""Splitters: pure functions that cut a grid job's work into local-job slices.

Handlers (``jim.handlers``) are thin; the splitting itself lives here so that it
can be tested on its own and reused by several job types.  One module per
family, each with its edge cases decided in its docstring:

=====================  ==================================================  =========================
module                 splitter                                            slices
=====================  ==================================================  =========================
``events``             :func:`split_events`, :func:`split_event_files`     ``EventSlice``
``files``              :func:`split_files`, :func:`split_files_min`        ``FileSlice``
``lumis``              :func:`split_lumis`                                 ``LumiSlice``
``eventaware``         :func:`split_event_aware`                           ``LumiSlice``
``merge``              :func:`split_merge_by_size`                         ``MergeSlice``
``parametric``         :func:`split_parametric`                            ``ParametricJob``
=====================  ==================================================  =========================

Common rules: the functions do no I/O and import nothing from jim outside this
package; they return frozen dataclasses; a bad parameter raises ``ValueError``
with a one-line message (the caller turns it into a GRAM error); the caller's
input order is kept; input that leaves nothing to process is a ``ValueError``
rather than an empty plan; ``max_jobs`` (where offered) refuses a split with
more slices than that.  A splitter with many options takes them as one frozen
value, checked when it is made (:class:`~jim.split.lumis.LumiOptions` for both
lumi splitters, :class:`~jim.split.events.EventOptions`).  Nothing is imported here, so ``import jim.split`` stays
free for ``jim poll``.
"""
