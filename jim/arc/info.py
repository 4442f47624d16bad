"""``jim arc-backend info``: the site's figures and the jobs' states for ARC's information provider.

``CEinfo.pl`` (A-REX's information provider, as root, about every 60 s)
loads ``JIMmod.pm`` for ``lrms=jim``, which runs
``jim arc-backend info --config CFG [--controldir DIR]`` once and reshapes
its answer for ``LRMSInfo.pm``.  The answer (:func:`info`) is one JSON
object:

* ``lrms_type`` (``jim``), ``lrms_version`` (jim's), ``free_slots`` (jim's
  batch adapter; None when it cannot say), ``adapter``, ``queues`` (the
  queues of jim's ``[resources]``), ``jobtypes`` (the job types installed);
* the batch system's capacity (:meth:`jim.adapters.base.Adapter.capacity`,
  never this host's unless the batch system is fork): ``totalcpus``,
  ``usedcpus``, ``freecpus``, ``nodecpus`` (its largest node),
  ``nodememory`` (MB), ``gpus``, ``nodegpus``, ``cpudistribution``; each
  None when the batch system cannot say;
* ``jobs``: every job of the control directory in the LRMS, jim id -> its
  status (:data:`ARC_STATUS`: Q, R, S, EXECUTED; ``O`` when jim gave no
  answer), from ONE ``jim poll --json`` per owner, as that owner
  (:func:`jim.arc.owners.bulk_poll`); ``running`` and ``queued`` count them.

The site's figures are read as root with jim's configuration
(``jim_config``); an unreachable batch system makes them "unknown", never
the step fail.
"""

from __future__ import annotations

import os
import tempfile

from jim import __version__
from jim.adapters import get_adapter
from jim.adapters.model import Capacity
from jim.arc.options import Options, log
from jim.arc.owners import IN_LRMS, bulk_poll, by_owner, jobs_in_lrms
from jim.config import load
from jim.handlers import discover
from jim.paths import Home
from jim.requirements import parse_resources

#: jim's GRAM state -> the info provider's job status.
ARC_STATUS = {
    "PENDING": "Q",
    "UNSUBMITTED": "Q",
    "ACTIVE": "R",
    "SUSPENDED": "S",
    "DONE": "EXECUTED",
    "FAILED": "EXECUTED",
}
#: The status of a job jim gave no answer for.
NO_ANSWER = "O"


def info(opts: Options, controldir: str | None = None) -> dict[str, object]:
    """The figures ``JIMmod.pm`` publishes: cluster, queues, and every INLRMS job's status."""
    statuses = job_statuses(opts, controldir or opts.controldir)
    running = sum(1 for s in statuses.values() if s == "R")
    queued = sum(1 for s in statuses.values() if s == "Q")
    site = site_figures(opts)
    return {
        "lrms_type": "jim",
        "lrms_version": site.pop("version"),
        "running": running,
        "queued": queued,
        "jobs": statuses,
        **site,
    }


def job_statuses(opts: Options, controldir: str) -> dict[str, str]:
    """jim id -> the info provider's status, of every job of ``controldir`` in the LRMS (none without one)."""
    jobs = jobs_in_lrms(controldir, IN_LRMS) if controldir else []
    statuses: dict[str, str] = {}
    for uid, owned in sorted(by_owner(jobs).items()):
        answers = bulk_poll(opts, uid, list(dict.fromkeys(j.localid for j in owned)))
        for job in owned:
            answer = answers.get(job.localid) or {}
            statuses[job.localid] = ARC_STATUS.get(str(answer.get("JOB_STATE", "")), NO_ANSWER)
    return statuses


def site_figures(opts: Options) -> dict[str, object]:
    """jim's version, job types, queues and the adapter's free slots (None: unknown)."""
    figures: dict[str, object] = {"version": __version__, "free_slots": None, "queues": [], "adapter": None}
    figures.update(capacity_figures(None))
    figures["jobtypes"] = sorted(n for n, e in discover().items() if isinstance(e, type))
    env = dict(os.environ)
    if opts.jim_config:
        env["JIM_CONFIG"] = opts.jim_config
    try:
        config = load(env)
        figures["adapter"] = config.batch.adapter
        if config.resources:
            tree = parse_resources(config.resources)
            figures["queues"] = [tree.label(q) for q in tree]
        with tempfile.TemporaryDirectory(prefix="jim-arc-info.") as scratch:
            adapter = get_adapter(config, Home(scratch))
            figures.update(capacity_figures(adapter.capacity()))
            figures["free_slots"] = adapter.free_slots()
    except Exception as e:  # (an unreachable batch system: the figures say "unknown")
        log(f"site figures: {type(e).__name__}: {e}")
    return figures


def capacity_figures(capacity: Capacity | None) -> dict[str, object]:
    """The cluster's figures of ARC's LRMS info from the batch system's capacity (None: unknown).

    ``cpudistribution`` (ARC's ``<cores>cpu:<nodes>``) is said only when every core is on nodes
    as large as the largest (``cores`` a multiple of ``node_cores``); else it stays unknown."""
    if capacity is None:
        keys = ("totalcpus", "usedcpus", "freecpus", "nodecpus", "nodememory", "gpus", "nodegpus", "cpudistribution")
        return dict.fromkeys(keys)
    free, node = capacity.free_cores, capacity.node_cores
    even = node is not None and node > 0 and capacity.cores % node == 0
    return {
        "totalcpus": capacity.cores,
        "usedcpus": None if free is None else max(0, capacity.cores - free),
        "freecpus": free,
        "nodecpus": node,
        "nodememory": capacity.memory_mb,
        "gpus": capacity.gpus,
        "nodegpus": capacity.node_gpus,
        "cpudistribution": f"{node}cpu:{capacity.cores // node}" if even and node else None,
    }
