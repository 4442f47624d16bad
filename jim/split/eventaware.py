"""Event-aware lumi-based splitting (WMCore ``EventAwareLumiBased``).

Whole lumis are the atomic unit, as in :mod:`jim.split.lumis`, but jobs are
sized by a *target number of events* instead of a lumi count.  Events per lumi
are not known individually: each lumi counts for its file's average
(``file.events / number of lumis in the file``), rounded to an integer as
WMCore does (``int(round(...))``; see :attr:`LumiFile.events_per_lumi`).

The rule
--------
Lumis are taken in input order.  A lumi joins the current job unless

* the job is not empty and the lumi would take the job's estimate above
  ``events_per_job``, or its estimated time (``events * time_per_event``) above
  ``job_time_limit``;
* or it crosses a run boundary (``split_on_run``) or a file boundary
  (``halt_on_file_boundaries``: these, the mask, the whitelist and
  ``max_jobs`` are the :class:`~jim.split.lumis.LumiOptions` of every lumi
  splitter);

in which case the job is closed and the lumi starts a new one.  This is
WMCore's ``lumis_per_job = max(floor(events_per_job / avg), 1)`` per file,
including its carry-over rule: a partly filled job continues into the next file
and takes as many of its lumis as still fit the budget.  A lumi heavier than the
whole target still gets a job of its own (a lumi cannot be split).

Too big to run: failed on creation
----------------------------------
A lumi whose own estimated time exceeds ``job_time_limit`` (the site's queue
limit, not WMCore's fixed 48 h) becomes a slice of its own with
``failed_on_creation`` set to a one-line reason naming the file, run, lumi,
estimated events and seconds (WMCore code 99305).  The caller records it as
failed and never submits it; the other lumis are split as usual.

Edge cases (decided)
--------------------
* WMCore fails only a file with *exactly one* lumi (where the estimate is the
  file's real event count) and gives each heavy lumi of a multi-lumi file its
  own ordinary job, for the sake of ACDC recovery.  jim has no ACDC and the
  batch system would kill such a job at the queue limit anyway, so **every**
  over-limit lumi is failed on creation; the reason says when the figure is a
  file average.
* ``time_per_event == 0`` or ``job_time_limit is None``: no time check.
* ``total_events``: ``None`` or ``0`` is no limit (as in WMCore).  Otherwise
  lumis are taken while the events already taken are below ``total_events``;
  the last lumi may overshoot (the user gets at least what was asked for, if
  the input holds it).  Failed lumis count too.
* A file with ``events == 0`` has 0-event lumis: they fit any budget, so they
  join the current job without limit (subject to the boundaries).
* Every non-failed slice has an estimated time within ``job_time_limit``, and a
  non-failed slice of more than one lumi has at most ``events_per_job``
  estimated events.
* Masks, whitelist, ordering, locations (files grouped by location set, no job
  mixing two sets, the carry-over never crossing sets), duplicates, files
  without lumis and "nothing to process" behave as in :mod:`jim.split.lumis`.  ``max_jobs`` (WMCore's
  ``job_limit``) counts failed slices too.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from jim.split._check import non_negative_number, positive_int, positive_number, total_limit
from jim.split.lumis import LumiFile, LumiOptions, LumiSlice, LumiUnit, SliceBuilder, select_lumis

__all__ = ["LumiFile", "LumiOptions", "LumiSlice", "split_event_aware"]

_DEFAULTS = LumiOptions()


def split_event_aware(
    files: Iterable[LumiFile],
    events_per_job: int,
    options: LumiOptions = _DEFAULTS,
    *,
    time_per_event: float = 0.0,
    job_time_limit: float | None = None,
    total_events: int | None = None,
) -> list[LumiSlice]:
    """Group whole lumis into jobs of about ``events_per_job`` estimated events.

    Contract: every selected lumi lands in exactly one slice, in input order;
    see the module docstring for when a job is closed and when a lumi is
    failed on creation.  ``time_per_event`` is in seconds per event and
    ``job_time_limit`` in seconds.  Raises ``ValueError`` on bad parameters,
    nothing to process, or more than ``options.max_jobs`` slices.
    """
    positive_int("events per job", events_per_job)
    non_negative_number("time per event", time_per_event)
    if job_time_limit is not None:
        positive_number("job time limit", job_time_limit)
    total_events = total_limit("total_events", total_events)

    target = Fraction(events_per_job)
    seconds_per_event = Fraction(time_per_event)
    limit = None if job_time_limit is None or time_per_event == 0 else Fraction(job_time_limit)

    def over_time(events: Fraction) -> bool:
        return limit is not None and events * seconds_per_event > limit

    builder = SliceBuilder(options)
    taken = Fraction(0)
    for unit in select_lumis(files, options):
        if total_events is not None and taken >= total_events:
            break
        taken += unit.events
        if over_time(unit.events):
            builder.emit_failed(unit, _too_big(unit, time_per_event, job_time_limit))
            continue
        after = builder.current_events + unit.events
        if builder.current and (after > target or over_time(after)):
            builder.close()
        builder.add(unit)
    return builder.finish()


def _too_big(unit: LumiUnit, time_per_event: float, job_time_limit: float | None) -> str:
    """The one-line failed-on-creation reason for a lumi over the time limit."""
    events = float(unit.events)
    seconds = events * time_per_event
    how = "" if unit.file_lumis == 1 else f" (average of the file's {unit.file_lumis} lumis)"
    return (
        f"file {unit.file} run {unit.run} lumi {unit.lumi}: {events:g} events{how} "
        f"at {time_per_event:g} s/event need about {seconds:.0f} s, "
        f"over the job time limit of {job_time_limit:g} s, and a lumi cannot be split"
    )
