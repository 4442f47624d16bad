"""``jim advertise``: the site as a ClassAd, printed or sent to an HTCondor collector.

As SAMGrid's JIM sites did, the ad is a ``MyType = "Machine"`` ad (``TargetType
= "Job"``, ``Requirements = true``) that a grid matchmaker can match grid jobs
against.  It carries:

================================  ==================================================
``Name``, ``Machine``             ``[advertise] name`` (default: the site's name), this host
``JimSite``, ``JimVersion``       the site's name (``[site] name``), jim's version
``JimContact``                    ``[advertise] contact``, when set (where to submit)
``JimJobTypes``                   the job types this site runs (broken plug-ins left out)
``JimBatchSystem``                ``[batch] adapter``
``JimFreeSlots``                  the adapter's :meth:`free_slots` (``undefined`` when unknown)
``JimTotalCores``, ``JimFreeCores``  the batch system's capacity (:meth:`Adapter.capacity`): its
``JimCoresPerNode``               cores in all, free now, on its largest node, the memory of that
``JimMemoryPerNodeMB``            node (MB), its GPUs in all and on one node; an attribute the
``JimGPUs``, ``JimGPUsPerNode``   batch system cannot say is absent (never a guess)
``JimMaxLocalJobs`` ...           the ``[site]`` limits: ``JimRecommendedCPUPerJob``,
                                  ``JimMaxCPUPerJob``, ``JimDefaultEventsPerJob``
``JimCEs``, ``JimQueues``         the computing elements and queues of ``[resources]``
``JimQueueParameters``            one nested ad per queue with its effective parameters
                                  (``CE``, ``Queue``, ``WallTimeLimit``, ``Tag`` ...)
================================  ==================================================

Printed in the old ClassAd layout (one ``Name = value`` per line, sorted by
name; every value on one line, strings with the ClassAd escapes of
``classad2.quote``, so that ``"[" + ";".join(lines) + "]"`` reads back
exactly as a new-syntax ClassAd), or as HTCondor's ClassAd JSON with ``--json``.  With a collector (``--collector``
or ``[advertise] collector``) the ad is sent with
``htcondor2.Collector(host).advertise([ad], "UPDATE_AD_GENERIC")`` (through the
seam of :func:`jim.adapters.condor.collector`, which the tests fake).
"""

from __future__ import annotations

import json
import logging
import math
import socket
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from jim import __version__
from jim.adapters.condor import collector as collector_for
from jim.adapters.model import Capacity
from jim.classads import classad_module
from jim.config import Config
from jim.errors import JimError
from jim.handlers import discover
from jim.requirements import parse_resources
from jim.site import Site

if TYPE_CHECKING:
    from jim.adapters.base import Adapter

log = logging.getLogger("jim.advertise")
T = TypeVar("T")

COMMAND = "UPDATE_AD_GENERIC"


class AdvertiseError(JimError):
    """The ad could not be sent."""


def site_attributes(
    config: Config, *, free_slots: int | None | bool = True, capacity: Capacity | None | bool = True
) -> dict[str, Any]:
    """The ad's attributes as Python values (None: undefined), in a stable order.

    ``free_slots=True`` and ``capacity=True`` ask the configured adapter; other values are used as given.
    """
    if free_slots is True or capacity is True:
        adapter = _adapter(config)
        if free_slots is True:
            free_slots = _ask(adapter.free_slots if adapter else None, "free slots")
        if capacity is True:
            capacity = _ask(adapter.capacity if adapter else None, "capacity")
    name = config.advertise.name or config.site.name
    tree = parse_resources(config.resources)
    ces = list(dict.fromkeys(q.ce for q in tree))
    attrs: dict[str, Any] = {
        "MyType": "Machine",
        "TargetType": "Job",
        "Name": name,
        "Machine": socket.getfqdn(),
        "Requirements": True,
        "JimSite": config.site.name,
        "JimVersion": __version__,
        "JimJobTypes": sorted(n for n, entry in discover().items() if isinstance(entry, type)),
        "JimBatchSystem": config.batch.adapter,
        "JimFreeSlots": free_slots,
        "JimMaxLocalJobs": config.site.max_local_jobs,
        "JimRecommendedCPUPerJob": config.site.recommended_cpu_per_job,
        "JimMaxCPUPerJob": config.site.max_cpu_per_job,
        "JimDefaultEventsPerJob": config.site.default_events_per_job,
        "JimCEs": ces,
        "JimQueues": [tree.label(q) for q in tree],
        "JimQueueParameters": [dict(q.params) for q in tree],
    }
    if config.advertise.contact:
        attrs["JimContact"] = config.advertise.contact
    if isinstance(capacity, Capacity):
        attrs.update(capacity_attributes(capacity))
    return attrs


def capacity_attributes(capacity: Capacity) -> dict[str, int]:
    """The ad's attributes of the batch system's capacity: those it says, none it does not."""
    attrs: dict[str, int | None] = {
        "JimTotalCores": capacity.cores,
        "JimFreeCores": capacity.free_cores,
        "JimCoresPerNode": capacity.node_cores,
        "JimMemoryPerNodeMB": capacity.memory_mb,
        "JimGPUs": capacity.gpus,
        "JimGPUsPerNode": capacity.node_gpus,
    }
    return {k: v for k, v in attrs.items() if v is not None}  # (a ClassAd attribute absent: unknown)


def _adapter(config: Config) -> Adapter | None:
    try:
        return Site(config).adapter
    except Exception as e:  # a batch system jim cannot set up: the ad says "unknown", not nothing
        log.warning("batch system unknown: %s", e)
        return None


def _ask(question: Callable[[], T] | None, what: str) -> T | None:
    """The adapter's answer; None when it cannot give one (an unreachable batch system: "unknown")."""
    if question is None:
        return None
    try:
        return question()
    except Exception as e:
        log.warning("%s unknown: %s", what, e)
        return None


def literal(value: Any) -> str:
    """A Python value as a ClassAd literal, on one line."""
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isinf(value):
            return 'real("INF")' if value > 0 else 'real("-INF")'
        if value.is_integer() and abs(value) < 2**53:
            return f"{value:.1f}"
        return repr(value)
    if isinstance(value, str):
        return str(classad_module().quote(value))
    if isinstance(value, dict):
        return "[ " + "; ".join(f"{k} = {literal(v)}" for k, v in value.items()) + " ]"
    if isinstance(value, (list, tuple)):
        return "{ " + ", ".join(literal(v) for v in value) + " }"
    raise TypeError(f"no ClassAd literal for {value!r}")


def to_old(attrs: dict[str, Any]) -> str:
    """The old ClassAd syntax: ``Name = value`` lines, sorted by name (as condor_status -l)."""
    return "".join(f"{k} = {literal(v)}\n" for k, v in sorted(attrs.items(), key=lambda kv: kv[0].lower()))


def to_classad(attrs: dict[str, Any]) -> Any:
    """A ``classad2.ClassAd`` (every value parsed from its literal, so both forms agree)."""
    classad = classad_module()
    ad = classad.ClassAd()
    for k, v in attrs.items():
        ad[k] = classad.ExprTree(literal(v))
    return ad


def to_json(attrs: dict[str, Any]) -> str:
    """HTCondor's ClassAd JSON of the ad, keys sorted."""
    return json.dumps(json.loads(to_classad(attrs).printJson()), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def send(attrs: dict[str, Any], collector: str) -> None:
    """Send the ad to ``collector``; :class:`AdvertiseError` (one line) when that fails."""
    try:
        collector_for(collector).advertise([to_classad(attrs)], COMMAND)
    except JimError:
        raise
    except Exception as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise AdvertiseError(f"cannot advertise to the collector {collector}: {why}", cause=e) from None


def run(config: Config, *, collector: str | None = None, as_json: bool = False, name: str | None = None) -> int:
    """``jim advertise``: print the ad, or send it when a collector is given or configured."""
    if name:
        config = replace(config, advertise=replace(config.advertise, name=name))
    attrs = site_attributes(config)
    target = collector or config.advertise.collector
    if target:
        send(attrs, target)
        print(
            f"advertised {attrs['Name']} ({len(attrs['JimQueues'])} queue(s), "
            f"free slots {'unknown' if attrs['JimFreeSlots'] is None else attrs['JimFreeSlots']}) "
            f"to {target}",
            file=sys.stderr,
        )
    sys.stdout.write(to_json(attrs) if as_json else to_old(attrs))
    return 0
