"""What an attempt used, from Grid Engine's ``qacct`` and HTCondor's history (sources ``qacct``, ``condor``).

The fallback of :mod:`jim.record.usage` when the wrapper wrote no exit-code file (a killed node or
job): the adapters' accounting queries already read these records for the end of every job that
left the queue; these functions take what the job used from the same record (no extra command).
Every value is the batch system's, untrusted: bounded here, then checked by
:func:`jim.record.usage.checked`.  What a batch system does not report is None, never a guessed 0.

* **Grid Engine** (:func:`qacct_usage`): ``ru_wallclock`` (s), ``ru_utime``/``ru_stime`` (s: the
  rusage of the job's process and the descendants it waited for, as the shepherd reaped it),
  ``ru_maxrss`` (the kernel's KiB; Son of Grid Engine 8.1's qacct prints that number as if it were
  bytes: ``15.559KB`` is 15932 KiB), ``slots``, ``hostname``.  CPU and peak RSS are unknown when
  the shepherd did not reap the job (a ``failed`` code other than 0, 12-16, 30, 100), and when qacct's
  ``cpu`` (the process data collector's sampled total of every process of the job) exceeds
  ``ru_utime + ru_stime`` by more than :data:`PDC_MARGIN`: the rusage then missed processes the job
  did not wait for (its wrapper was killed, the payload orphaned), so it measures the wrapper only.
  ``cpu`` and ``maxvmem`` themselves are not read: not split into user and system, and virtual.
  A task that never started (a launch failure, no ``start_time``) has no usage at all.
* **HTCondor** (:func:`condor_usage`, :data:`CONDOR_USAGE_ATTRS`, asked by the history query):
  ``RemoteUserCpu``/``RemoteSysCpu`` (whole seconds of the last run, as the starter last sampled
  the job's processes: both 0 is unknown, "under a second" or "never sampled"),
  ``LastRemoteWallClockTime`` (s, the last run; ``RemoteWallClockTime`` when the job started
  once), ``ResidentSetSize_RAW`` (KiB, the largest sample; else ``MemoryUsage``, MiB rounded up,
  x 1024; 0 is unknown), ``CpusProvisioned`` (else ``RequestCpus``), the host of
  ``LastRemoteHost``.  A job that never started (no start date, no ``LastRemoteHost``) has none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jim.record.usage import Usage

#: qacct's ``failed`` codes after which the shepherd reaped the job: its rusage is the job's.
RUSAGE_FAILED = frozenset({0, 12, 13, 14, 15, 16, 30, 100})
#: qacct's ``cpu`` may exceed ``ru_utime + ru_stime`` by this many seconds ... or this fraction.
PDC_MARGIN = (1.0, 0.1)
#: A number of qacct, with its unit (8.1: ``6s``, ``0.098s``, ``15.559KB``; 6.2: ``6``, ``17.375M``).
_QACCT_NUMBER = re.compile(r"([0-9]{1,15}(?:\.[0-9]{1,9})?)(s|B|[KMGT]B?)?", re.ASCII)
_SCALE = {"": 1, "s": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}

#: What the history query also asks for the usage (HTCondor job ClassAd attributes).
CONDOR_USAGE_ATTRS = (
    *("RemoteUserCpu", "RemoteSysCpu", "LastRemoteWallClockTime", "RemoteWallClockTime", "NumJobStarts"),
    *("ResidentSetSize_RAW", "MemoryUsage", "CpusProvisioned", "RequestCpus", "LastRemoteHost"),
    *("JobCurrentStartDate", "JobStartDate"),
)


def _qacct_number(value: str | None) -> float | None:
    """A qacct value in its base unit (seconds, or the number it counts), None when absent,
    NaN when malformed (then :func:`checked` names it rejected)."""
    if value is None or not value.strip() or value.strip() in ("undefined", "-/-"):
        return None
    m = _QACCT_NUMBER.fullmatch(value.strip())
    if m is None:
        return math.nan
    unit = m.group(2) or ""
    return float(m.group(1)) * _SCALE[unit[:1]]


def _text(value: float | None, integer: bool = False) -> str | None:
    if value is None:
        return None
    if not math.isfinite(value):
        return "x"  # (malformed: checked() counts it so)
    return "%d" % round(value) if integer else f"{value:.6f}"


def qacct_usage(f: Mapping[str, str], failed: int) -> Usage | None:
    """What one task's run used, from its qacct record's ``key value`` fields (``failed``: its code)."""
    from jim.record.usage import Source, checked  # (lazy: the record's package loads lxml; only an ended task's)

    if f.get("start_time", "-/-").strip() in ("-/-", ""):
        return None  # (never started: nothing used, nothing measured; the caller leaves out launch failures)
    fields = {"cores": (f.get("slots") or "").strip() or None, "node": f.get("hostname") or None}
    if failed in RUSAGE_FAILED:
        fields["wall"] = _text(_qacct_number(f.get("ru_wallclock")))
        user, system = _qacct_number(f.get("ru_utime")), _qacct_number(f.get("ru_stime"))
        rss, total = _qacct_number(f.get("ru_maxrss")), _qacct_number(f.get("cpu"))
        rusage = (user or 0.0) + (system or 0.0)  # (NaN when malformed: checked() then rejects them)
        if not total or math.isnan(total * rusage) or total <= rusage + max(PDC_MARGIN[0], PDC_MARGIN[1] * rusage):
            fields.update(cpu_user=_text(user), cpu_system=_text(system))
            fields["max_rss_kb"] = _text(rss, integer=True) if rss != 0 else None  # (no process has none)
    return checked(Source.QACCT, {k: v for k, v in fields.items() if v is not None})


def _condor_number(value: Any) -> float | None:
    """A job ad's number; None when absent, NaN when it is not one (a string, a bool, an expression)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def condor_usage(value: Callable[[str], Any]) -> Usage | None:
    """What a job's last run used, from its history ad (``value(attr)``: the evaluated attribute,
    None when absent or undefined)."""
    from jim.record.usage import Source, checked  # (lazy: the record's package loads lxml; only an ended job's)

    host = value("LastRemoteHost")
    started = value("JobCurrentStartDate") is not None or value("JobStartDate") is not None
    if not started and not host:
        return None  # (never ran)
    wall = _condor_number(value("LastRemoteWallClockTime"))
    if wall is None and _condor_number(value("NumJobStarts")) == 1:
        wall = _condor_number(value("RemoteWallClockTime"))  # (one run: the cumulative time is its)
    rss = _condor_number(value("ResidentSetSize_RAW"))
    if rss is None:
        mib = _condor_number(value("MemoryUsage"))
        rss = mib * 1024 if mib is not None else None
    cores = _condor_number(value("CpusProvisioned"))
    cores = _condor_number(value("RequestCpus")) if cores is None else cores
    node = host.rpartition("@")[2] if isinstance(host, str) and host else None
    user, system = _condor_number(value("RemoteUserCpu")), _condor_number(value("RemoteSysCpu"))
    if user == 0 and system == 0:
        user = system = None  # (whole seconds, sampled: "under a second" or "never sampled", unknown)
    fields = {
        "cpu_user": _text(user),
        "cpu_system": _text(system),
        "wall": _text(wall),
        "max_rss_kb": _text(rss, integer=True) if rss != 0 else None,  # (0: never sampled)
        "cores": _text(cores, integer=True) if cores is None or math.isnan(cores) or cores == int(cores) else "x",
        "node": node,
    }
    return checked(Source.CONDOR, {k: v for k, v in fields.items() if v is not None})
