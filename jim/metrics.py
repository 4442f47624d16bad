"""``jim metrics``: jim's counts in the Prometheus text format, for a site's dashboards.

The counts come from :func:`jim.census.census` (one home, or as root every
account's home, each read as its owner); this module only names them and
hands them to the Prometheus client library (``prometheus_client``: a
collector of metric families, written by its own ``generate_latest``), never
formats the text by hand.  Counts only: no argument, environment value, path
or name of a job ever appears, only states, queue and adapter names, causes,
batch command names and account names (docs/metrics.md lists every metric).

``jim metrics`` prints them (``--output FILE``: writes them whole, replaced
atomically, for node_exporter's textfile collector); ``jim serve`` answers
them at ``/metrics`` (:func:`scrape`; who may ask: docs/metrics.md).
"""

from __future__ import annotations

import argparse
import os
import pwd
import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from jim.accounts import home_of
from jim.census import Counts, census
from jim.errors import JimError
from jim.paths import Home
from jim.safeio import atomic_write

#: The Content-Type of :func:`scrape`'s text.
CONTENT_TYPE = CONTENT_TYPE_LATEST
#: Grid job states always shown per user (0 when none), so that a dashboard's series do not come and go.
SHOWN_GRID_STATES = ("PENDING", "ACTIVE", "DONE", "FAILED")


class Census(Collector):
    """The metric families of one census (see :func:`families`)."""

    def __init__(self, counts: list[Counts], skipped: list[dict[str, str]], took: float, now: float) -> None:
        self.counts, self.skipped, self.took, self.now = counts, skipped, took, now

    def collect(self) -> Iterator[Metric]:
        yield from _jobs(self.counts, self.now)
        yield from _batch(self.counts, self.now)
        yield from _monitors(self.counts, self.now)
        homes = GaugeMetricFamily("jim_homes", "jim homes in this census, counted or skipped", labels=["result"])
        homes.add_metric(["counted"], len(self.counts))
        homes.add_metric(["skipped"], len(self.skipped))
        yield homes
        yield GaugeMetricFamily("jim_census_duration_seconds", "seconds this census took", value=self.took)


def _jobs(counts: list[Counts], now: float) -> Iterator[Metric]:
    grid = GaugeMetricFamily("jim_grid_jobs", "grid jobs in jim's records, by state", labels=["user", "state"])
    oldest = GaugeMetricFamily(
        "jim_grid_job_oldest_active_age_seconds", "age of the oldest grid job not DONE or FAILED", labels=["user"]
    )
    local = GaugeMetricFamily(
        "jim_local_jobs", "local jobs of the recorded grid jobs", labels=["user", "state", "queue", "adapter"]
    )
    attempts = GaugeMetricFamily(
        "jim_attempts", "attempts of the local jobs of the recorded grid jobs", labels=["user"]
    )
    retries = GaugeMetricFamily(
        "jim_retries",
        "attempts another attempt followed, by why they ended and who made the next (retry: jim; resubmit: a person)",
        labels=["user", "cause", "origin"],
    )
    unreadable = GaugeMetricFamily("jim_records_unreadable", "records the census could not read", labels=["user"])
    for c in counts:
        user = c["user"]
        for state in sorted(set(SHOWN_GRID_STATES) | set(c["grid"])):
            grid.add_metric([user, state], c["grid"].get(state, 0))
        if c["oldest_active"] is not None:
            oldest.add_metric([user], max(0.0, now - c["oldest_active"]["created"]))
        for (state, queue, adapter), n in sorted(c["local"].items()):
            local.add_metric([user, state, queue, adapter], n)
        attempts.add_metric([user], c["attempts"])
        for (cause, origin), n in sorted(c["retries"].items()):
            retries.add_metric([user, cause, origin], n)
        unreadable.add_metric([user], c["unreadable"])
    yield from (grid, oldest, local, attempts, retries, unreadable)


def _batch(counts: list[Counts], now: float) -> Iterator[Metric]:
    labels = ["user", "adapter", "command"]
    ran = CounterMetricFamily("jim_batch_commands", "batch commands jim ran", labels=labels)
    failed = CounterMetricFamily(
        "jim_batch_command_failures", "batch commands that timed out, could not run or exited non-zero", labels=labels
    )
    degraded = GaugeMetricFamily(
        "jim_batch_query_degraded", "1 while the batch status query fails (no news, no submissions)", labels=labels[:2]
    )
    since = GaugeMetricFamily(
        "jim_batch_query_degraded_seconds", "how long the batch status query has failed", labels=labels[:2]
    )
    for c in counts:
        for adapter, info in sorted(c["adapters"].items()):
            for command, (n, bad) in sorted(info["commands"].items()):
                ran.add_metric([c["user"], adapter, command], n)
                failed.add_metric([c["user"], adapter, command], bad)
            degraded.add_metric([c["user"], adapter], 0 if info["degraded_since"] is None else 1)
            if info["degraded_since"] is not None:
                since.add_metric([c["user"], adapter], max(0.0, now - info["degraded_since"]))
    yield from (ran, failed, degraded, since)


def _monitors(counts: list[Counts], now: float) -> Iterator[Metric]:
    running = GaugeMetricFamily("jim_monitor_running", "1 while the user's monitor runs", labels=["user"])
    down = GaugeMetricFamily(
        "jim_monitor_down", "1 when the user has active grid jobs and no monitor runs", labels=["user"]
    )
    duration = GaugeMetricFamily(
        "jim_monitor_last_pass_duration_seconds", "how long the monitor's last recorded pass took", labels=["user"]
    )
    slowest = GaugeMetricFamily(
        "jim_monitor_slowest_pass_seconds", "the slowest pass in the 10 s before the last record", labels=["user"]
    )
    age = GaugeMetricFamily(
        "jim_monitor_last_pass_age_seconds", "seconds since the monitor's last recorded pass ended", labels=["user"]
    )
    ok = GaugeMetricFamily(
        "jim_monitor_last_pass_ok", "1 when the monitor's last recorded pass worked", labels=["user"]
    )
    for c in counts:
        user, mon = c["user"], c["monitor"]
        running.add_metric([user], int(mon["running"]))
        down.add_metric([user], int(active(c) > 0 and not mon["running"]))
        if mon["at"] is not None:
            duration.add_metric([user], mon["duration"] or 0.0)
            slowest.add_metric([user], mon["slowest"] or 0.0)
            age.add_metric([user], max(0.0, now - mon["at"]))
            ok.add_metric([user], int(mon["ok"]))
    yield from (running, down, duration, slowest, age, ok)


def active(c: Counts) -> int:
    """How many of a home's grid jobs are not DONE or FAILED."""
    return sum(n for state, n in c["grid"].items() if state not in ("DONE", "FAILED"))


def exposition(counts: list[Counts], skipped: list[dict[str, str]], took: float, now: float | None = None) -> bytes:
    """The Prometheus text of one census (by the client library's own writer)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Census(counts, skipped, took, time.time() if now is None else now))
    return generate_latest(registry)


def scrape(own: Home | None, pattern: str | None = None) -> bytes:
    """Count (``own``, or every home of ``pattern``: root's) and write the Prometheus text."""
    started = time.monotonic()
    counts, skipped = census(own, pattern)
    return exposition(counts, skipped, time.monotonic() - started)


def check_all_users(args: argparse.Namespace, default: str) -> str | None:
    """The ``--homes`` pattern (``default``: ``[jim] home`` as written) when ``--all-users`` was given
    (root's only), else None."""
    if not getattr(args, "all_users", False):
        return None
    if os.geteuid() != 0:
        raise JimError("--all-users is root's: it reads every account's jim home (as its owner)")
    pattern: str = default if args.homes is None else args.homes
    if not os.path.isabs(home_of(pattern, pwd.getpwuid(0))):
        raise JimError(f"--homes {pattern[:200]!r} must be an absolute path (with {{user}} or {{home}}, or a glob)")
    return pattern


def main(home: Home, args: argparse.Namespace, homes: str) -> int:
    """``jim metrics``: print (or with ``--output``, write) the Prometheus text; the exit status.
    ``homes``: ``[jim] home`` as written, the pattern of ``--all-users`` without ``--homes``."""
    text = scrape(home, check_all_users(args, homes))
    if args.output:
        atomic_write(args.output, text, mode=0o644)  # (node_exporter reads it: counts only, no content)
    else:
        print(text.decode(), end="")
    return 0
