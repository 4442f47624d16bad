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
from dataclasses import replace
from typing import Any

from jim import __version__
from jim.adapters.condor import collector as collector_for
from jim.classads import classad_module
from jim.config import Config
from jim.errors import JimError
from jim.handlers import discover
from jim.requirements import parse_resources
from jim.site import Site

log = logging.getLogger("jim.advertise")

COMMAND = "UPDATE_AD_GENERIC"


class AdvertiseError(JimError):
    """The ad could not be sent."""


def site_attributes(config: Config, *, free_slots: int | None | bool = True) -> dict[str, Any]:
    """The ad's attributes as Python values (None: undefined), in a stable order.

    ``free_slots=True`` asks the configured adapter; an int or None is used as given.
    """
    if free_slots is True:
        free_slots = _free_slots(config)
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
    return attrs


def _free_slots(config: Config) -> int | None:
    try:
        return Site(config).adapter.free_slots()
    except Exception as e:  # an unreachable batch system: the ad says "unknown", not nothing
        log.warning("free slots unknown: %s", e)
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
