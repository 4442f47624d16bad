"""A grid job's record: the typed model of ``db/<id>.xml`` and its rules.

:class:`GridJob` (the root ``<gridjob>``) and :class:`LocalJob` (one
``<localjob>``) are views of the XML elements with the rules that change
them: local states never go back and every terminal one records its evidence
(:meth:`LocalJob.set_state`), a new attempt keeps the old one
(:meth:`LocalJob.new_attempt`), the grid state is aggregated from the local
ones under the site's failure policy (:meth:`GridJob.recompute`).
:func:`new_record` builds a fresh one.  Storing records (files, locks, the
index) is :mod:`jim.db`'s.

A local job's own attributes are its current (last) attempt's: its state,
tag, batch id, times, exit code and evidence.  Each earlier attempt is one
``<attempt>`` element (:meth:`LocalJob.new_attempt`), with why the next one
was made (``retryReason``) and who asked (``retryBy``, for a resubmission).

A grid job record::

    <?xml-stylesheet type="text/xsl" href="jim.xsl"?>
    <gridjob schemaVersion="1" id="..." jobtype="montecarlo" state="ACTIVE" ...>
      <description format="rsl"><source>...</source><attribute name="...">...</attribute></description>
      <plan localJobs="12" binding="site-recommended-cpu" ...><explanation>...</explanation></plan>
      <history><grid state="PENDING" at="..."/>...</history>
      <localjobs>
        <localjob index="0" tag="<id>.0" MasterJobID="<id>" SplitID="0" HerdState="Splitted"
                  state="RUNNING" batchId="..." submitted="..." started="...">
          <slice firstEvent="1" lastEvent="250" events="250"/>
          <history><state name="QUEUED" at="..."/>...</history>
          <progress><phase name="d0gstar" done="117" total="250" at="..."/></progress>
        </localjob>
        <localjob index="1" tag="<id>.1.2" attempt="2" state="RUNNING" batchId="..." node="cn2" ...>
          ...
          <attempts>
            <attempt n="1" tag="<id>.1" batchId="..." node="cn1" state="FAILED" evidence="batch"
                     cause="NODE_FAIL" reason="..." retryReason="node failure (NODE_FAIL)" retryAt="..."/>
          </attempts>
        </localjob>
      </localjobs>
      <outputs tar="..." at="..."/>
    </gridjob>
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lxml import etree

from jim.errors import DatabaseError
from jim.jobid import local_tag
from jim.states import (
    Evidence,
    FailurePolicy,
    GramState,
    LocalState,
    aggregate_counts,
    grid_exit_code,
    may_transition,
)
from jim.timestamps import now_iso, parse_iso

_TERMINAL_NAMES = frozenset(s.value for s in LocalState if s.terminal)
# evaluated in C: iterating thousands of elements in Python costs tens of ms a pass
_LOCAL_STATES = etree.XPath("localjobs/localjob/@state", smart_strings=False)
_ENTERED_AT = etree.XPath("localjobs/localjob/history/state[@name = $name]/@at", smart_strings=False)
_UNSPLIT = etree.XPath(
    "boolean(localjobs/localjob[not(@batchId)][not(%s)])"
    % " or ".join(f"@state='{n}'" for n in sorted(_TERMINAL_NAMES))
)

#: The failure policy of a record recomputed without the site's (no local job may fail).
NO_FAILURES = FailurePolicy()

SCHEMA_VERSION = "1"
STYLESHEET = "jim.xsl"
#: The processing instruction that makes a browser render a record (or the index) through jim.xsl.
STYLESHEET_PI = f'type="text/xsl" href="{STYLESHEET}"'


def stylesheet_pi() -> etree._ProcessingInstruction:
    return etree.ProcessingInstruction("xml-stylesheet", STYLESHEET_PI)


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def required(el: etree._Element, name: str) -> str:
    """An attribute the schema requires: jim writes every record, so a missing one is a corrupt file."""
    value = el.get(name)
    if value is None:
        raise DatabaseError(f"<{el.tag}> without the {name!r} the schema requires: corrupt record")
    return value


def child(el: etree._Element, tag: str) -> etree._Element:
    """A child element the schema requires (see :func:`required`)."""
    found = el.find(tag)
    if found is None:
        raise DatabaseError(f"<{el.tag}> without the <{tag}> the schema requires: corrupt record")
    return found


def _clean(value: Any) -> str:
    """Text that XML can hold: characters XML forbids become U+FFFD."""
    s = value if isinstance(value, str) else str(value)
    return _NOT_XML.sub("\ufffd", s) if _NOT_XML.search(s) else s


#: How jim parses every XML file it wrote: no entities, no network, no size limit (thousands of local jobs).
PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)


# ---------------------------------------------------------------------------
# Typed views of the elements
# ---------------------------------------------------------------------------


_STATE_BY_NAME: dict[str, LocalState] = {s.value: s for s in LocalState}
_STATE_NAMES: dict[LocalState, str] = {s: s.value for s in LocalState}


class LocalJob:
    """One <localjob> element."""

    __slots__ = ("el",)

    def __init__(self, el: etree._Element):
        self.el = el

    @property
    def index(self) -> int:
        return int(required(self.el, "index"))

    @property
    def tag(self) -> str:
        return required(self.el, "tag")

    @property
    def state(self) -> LocalState:
        value = required(self.el, "state")
        try:
            return _STATE_BY_NAME[value]  # (a dict lookup: a monitor pass asks this millions of times)
        except KeyError:
            return LocalState(value)  # (an unknown state: the ValueError the enum raises)

    @property
    def batch_id(self) -> str | None:
        return self.el.get("batchId")

    @batch_id.setter
    def batch_id(self, value: str) -> None:
        self.el.set("batchId", _clean(value))
        self.el.set("HerdState", "Splitted")

    @property
    def exit_code(self) -> int | None:
        v = self.el.get("exitCode")
        return int(v) if v not in (None, "") else None

    @property
    def evidence(self) -> str | None:
        return self.el.get("evidence")

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.el.get(name, default)

    def set(self, name: str, value: Any) -> None:
        self.el.set(name, _clean(value))

    def time(self, name: str) -> float | None:
        return parse_iso(self.el.get(name))

    @property
    def slice(self) -> dict[str, str]:
        s = self.el.find("slice")
        out = {str(k): str(v) for k, v in s.attrib.items()} if s is not None else {}
        if s is not None:
            for p in s.findall("param"):
                out[required(p, "name")] = required(p, "value")
        return out

    def set_state(
        self,
        new: LocalState,
        *,
        evidence: Evidence | str | None = None,
        exit_code: int | None = None,
        reason: str | None = None,
        at: float | None = None,
    ) -> bool:
        """Move to ``new`` if the state machine allows it; record when and why.

        Returns True when the state changed.  A terminal state needs evidence.
        """
        old = self.state
        if not may_transition(old, new):
            return False
        if new.terminal and evidence is None:
            raise ValueError(f"local job {self.index}: terminal state {new.value} needs evidence")
        stamp = now_iso(at)
        self.el.set("state", new.value)
        if "retryAfter" in self.el.attrib:  # (only a PLANNED attempt waits for its cool-off)
            del self.el.attrib["retryAfter"]
        hist = child(self.el, "history")
        entry = etree.SubElement(hist, "state", name=new.value, at=stamp)
        if evidence is not None:
            ev = evidence.value if isinstance(evidence, Evidence) else str(evidence)
            entry.set("evidence", ev)
            self.el.set("evidence", ev)
        if reason:
            entry.set("reason", _clean(reason)[:500])
            self.el.set("reason", _clean(reason)[:500])
        if new is LocalState.QUEUED and not self.el.get("submitted"):
            self.el.set("submitted", stamp)
        if new is LocalState.RUNNING and not self.el.get("started"):
            self.el.set("started", stamp)
        if new.terminal:
            self.el.set("ended", stamp)
            if exit_code is not None:
                self.el.set("exitCode", str(int(exit_code)))
        return True

    # -- attempts ----------------------------------------------------------------
    @property
    def attempt(self) -> int:
        """The number of the current attempt (1 until a retry or a resubmission)."""
        v = self.el.get("attempt")
        return int(v) if v else 1

    @property
    def dir_key(self) -> tuple[int, int]:
        """(index, attempt): what names the current attempt's directory (see :func:`jim.jobid.local_dir_name`)."""
        return self.index, self.attempt

    def past_attempts(self) -> list[dict[str, str]]:
        """The attempts before the current one, oldest first: the attributes of each <attempt>."""
        return [{str(k): str(v) for k, v in a.attrib.items()} for a in self.el.iterfind("attempts/attempt")]

    def new_attempt(
        self, reason: str, *, by: str | None = None, retry_after: float | None = None, at: float | None = None
    ) -> int:
        """Close the current attempt, which must have ended, into <attempts> (with why the next one
        is made, and who asked for it) and make this local job PLANNED again as the next attempt,
        with its own tag; returns the new attempt's number.  ``retry_after``: not submitted before."""
        if not self.state.terminal:
            raise ValueError(f"local job {self.index}: attempt {self.attempt} has not ended")
        stamp = now_iso(at)
        n = self.attempt
        el = self.el
        closed = {"n": str(n)}
        for name in _ATTEMPT_ATTRIBUTES:
            value = el.get(name)
            if value is not None:
                closed[name] = value
                del el.attrib[name]
        if el.get("queue"):
            closed["queue"] = el.get("queue", "")
        for name in _CURRENT_ONLY:
            if name in el.attrib:
                del el.attrib[name]
        closed["retryReason"] = _clean(reason)[:500]
        closed["retryAt"] = stamp
        if by:
            closed["retryBy"] = _clean(by)[:100]
        attempts = el.find("attempts")
        if attempts is None:
            attempts = etree.SubElement(el, "attempts")
        etree.SubElement(attempts, "attempt", closed)
        grid_id = required(el, "MasterJobID")
        el.set("attempt", str(n + 1))
        el.set("tag", local_tag(grid_id, self.index, n + 1))
        el.set("state", LocalState.PLANNED.value)
        el.set("HerdState", "WillSplit")
        if retry_after is not None:
            el.set("retryAfter", now_iso(retry_after))
        for p in list(child(el, "progress")):
            child(el, "progress").remove(p)
        why = f"attempt {n + 1}: {_clean(reason)}"[:500]
        etree.SubElement(child(el, "history"), "state", name=LocalState.PLANNED.value, at=stamp, reason=why)
        return n + 1

    @property
    def retry_after(self) -> float | None:
        """When the current attempt may be submitted (a retry's cool-off), if it must wait."""
        return parse_iso(self.el.get("retryAfter"))

    def entered(self, state: LocalState) -> float | None:
        """When this local job last entered ``state`` (from its history)."""
        name = _STATE_NAMES[state]
        for entry in reversed(child(self.el, "history")):
            if entry.get("name") == name:
                return parse_iso(entry.get("at"))
        return None

    def set_progress(self, phases: dict[str, tuple[int, int]], at: float | None = None) -> bool:
        """Replace the reported phases; True when anything changed."""
        prog = child(self.el, "progress")
        current = {required(p, "name"): (int(required(p, "done")), int(required(p, "total"))) for p in prog}
        if current == phases:
            return False
        for p in list(prog):
            prog.remove(p)
        stamp = now_iso(at)
        for name, (done, total) in phases.items():
            etree.SubElement(prog, "phase", name=_clean(name)[:64], done=str(done), total=str(total), at=stamp)
        return True

    @property
    def progress(self) -> list[tuple[str, int, int]]:
        return [
            (required(p, "name"), int(required(p, "done")), int(required(p, "total")))
            for p in child(self.el, "progress")
        ]


#: What an attempt leaves in its <attempt> element when the next one is made: the current attempt's
#: attributes of a <localjob>.
_ATTEMPT_ATTRIBUTES = (
    "tag",
    "batchId",
    "host",
    "node",
    "submitted",
    "started",
    "ended",
    "state",
    "exitCode",
    "evidence",
    "reason",
    "cause",
    "killedBy",
)
#: Attributes of the current attempt that a new attempt starts without (and that are not kept).
_CURRENT_ONLY = ("heartbeat", "absentSince", "retryAfter")
_RETRIES = etree.XPath("count(localjobs/localjob/attempts/attempt)")
_RETRY_AFTER = etree.XPath("localjobs/localjob[@state='PLANNED']/@retryAfter", smart_strings=False)


class GridJob:
    """One grid job record (the root <gridjob> element)."""

    #: (inode, size, mtime) of the file this record was read from or written to (see Database.update)
    disk_key: tuple[int, int, int] | None = None
    #: The bytes it was read from (jim writes what :meth:`tostring` gives, so an unchanged record
    #: serializes to exactly these): what Database.update compares with instead of serializing it first.
    source: bytes | None = None

    def __init__(self, root: etree._Element):
        self.root = root

    @property
    def id(self) -> str:
        return required(self.root, "id")

    @property
    def state(self) -> GramState:
        return GramState[required(self.root, "state")]

    @property
    def exit_code(self) -> int | None:
        v = self.root.get("exitCode")
        return int(v) if v not in (None, "") else None

    @property
    def jobtype(self) -> str:
        return required(self.root, "jobtype")

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.root.get(name, default)

    def set(self, name: str, value: Any) -> None:
        self.root.set(name, _clean(value))

    @property
    def cancel_requested(self) -> bool:
        return self.root.get("cancelRequested") == "true"

    def local_jobs(self) -> list[LocalJob]:
        return [LocalJob(el) for el in self._local_elements()]

    def local(self, index: int) -> LocalJob:
        return LocalJob(self._local_elements()[index])

    def local_keys(self) -> Iterator[tuple[LocalJob, LocalState, str | None, tuple[int, int]]]:
        """(local job, its state, batch id, (index, attempt)) of every local job, in order: what a scan of
        all of them needs, read with one attribute lookup each."""
        for el in self._local_elements():
            lj = LocalJob(el)
            attempt = el.get("attempt")
            yield lj, lj.state, el.get("batchId"), (lj.index, int(attempt) if attempt else 1)

    def _local_elements(self) -> list[etree._Element]:
        # lxml child indexing walks a linked list: keep one list (local jobs are never added or removed)
        els = self.__dict__.get("_els")
        if els is None:
            els = self.__dict__["_els"] = list(child(self.root, "localjobs"))
        return els

    @property
    def outputs_gathered(self) -> bool:
        o = self.root.find("outputs")
        return o is not None and bool(o.get("at"))

    @property
    def output_tar(self) -> str | None:
        o = self.root.find("outputs")
        return o.get("tar") if o is not None else None

    def set_outputs(self, tar: Path) -> None:
        o = self.root.find("outputs")
        if o is None:
            o = etree.SubElement(self.root, "outputs")
        o.set("tar", _clean(str(tar)))
        o.set("at", now_iso())

    def description(self) -> dict[str, list[str | list[str]]]:
        out: dict[str, list[str | list[str]]] = {}
        d = child(self.root, "description")
        for a in d.findall("attribute"):
            vals: list[str | list[str]] = []
            for v in a:
                vals.append(v.text or "" if v.tag == "value" else [x.text or "" for x in v])
            out[required(a, "name")] = vals
        return out

    @property
    def source_format(self) -> str:
        """The form the description was submitted in (rsl, json, jdl, grami)."""
        return required(child(self.root, "description"), "format")

    @property
    def plan(self) -> dict[str, str]:
        p = self.root.find("plan")
        return {str(k): str(v) for k, v in p.attrib.items()} if p is not None else {}

    def meta(self, name: str) -> str | None:
        """A value of the <meta> element (jim-internal settings of this grid job)."""
        m = self.root.find("meta")
        return m.get(name) if m is not None else None

    def set_meta(self, name: str, value: Any) -> None:
        """Set a value of the <meta> element (made when missing)."""
        m = self.root.find("meta")
        if m is None:
            m = etree.SubElement(self.root, "meta")
        m.set(name, _clean(value))

    def count_try(self, what: str) -> int:
        """One more failed try at ``what`` (kept in <meta> as ``<what>Tries``); how many so far."""
        old = self.meta(f"{what}Tries") or ""
        n = (int(old) if old.isascii() and old.isdigit() else 0) + 1
        self.set_meta(f"{what}Tries", n)
        return n

    @property
    def fail_reason(self) -> str | None:
        """Why jim itself ended this grid job FAILED (not a local job's failure), if it did."""
        return self.meta("failReason")

    def fail(self, reason: str, at: float | None = None) -> bool:
        """End the grid job FAILED for a reason of its own (its outputs cannot be written, jim cannot
        follow it); True when the state changed.  A grid job already ended keeps its state."""
        if self.state.terminal:
            return False
        self.set_meta("failReason", " ".join(reason.split())[:300])
        self.root.set("state", GramState.FAILED.name)
        stamp = now_iso(at)
        self.root.set("updated", stamp)
        code = grid_exit_code(((j.state, j.exit_code) for j in self.local_jobs()), GramState.FAILED)
        self.root.set("exitCode", str(code))
        etree.SubElement(child(self.root, "history"), "grid", state=GramState.FAILED.name, at=stamp)
        return True

    def recompute(self, policy: FailurePolicy = NO_FAILURES, *, at: float | None = None) -> bool:
        """Aggregate the local states into the grid state under the site's failure ``policy``; True
        when it changed."""
        prev = self.state
        counts = {LocalState(k): n for k, n in self.counts().items()}
        new = aggregate_counts(
            counts,
            previous=prev,
            outputs_gathered=self.outputs_gathered,
            cancelled=self.cancel_requested,
            max_failed_fraction=policy.max_failed_fraction,
        )
        self.root.set("HerdState", "WillSplit" if _UNSPLIT(self.root) else "Splitted")
        if new is prev:
            return False
        self.root.set("state", new.name)
        stamp = now_iso(at)
        self.root.set("updated", stamp)
        jobs = self.local_jobs()
        code = grid_exit_code(((j.state, j.exit_code) for j in jobs), new)
        if code is not None:
            self.root.set("exitCode", str(code))
        etree.SubElement(child(self.root, "history"), "grid", state=new.name, at=stamp)
        return True

    def mark_submitted(self, ids: dict[int, str], intents: dict[int, float], at: float | None = None) -> int:
        """Local jobs with their batch ids: SUBMITTING (at the time of their intent), then QUEUED.

        The bulk form of ``batch_id = ...; set_state(SUBMITTING); set_state(QUEUED)``
        for a whole chunk (thousands of local jobs in one worker step); a local
        job no longer PLANNED or SUBMITTING is left alone.  Returns how many
        were marked.
        """
        els = self._local_elements()
        now = time.time() if at is None else at
        queued_at = now_iso(now)
        stamps: dict[float, str] = {}
        planned, submitting, queued = LocalState.PLANNED.value, LocalState.SUBMITTING.value, LocalState.QUEUED.value
        n = 0
        for index, bid in ids.items():
            el = els[index]
            state = el.get("state")
            if state != planned and state != submitting:
                continue
            hist = child(el, "history")
            if state == planned:
                t = intents.get(index, now)
                stamp = stamps.get(t) or stamps.setdefault(t, now_iso(t))
                etree.SubElement(hist, "state", name=submitting, at=stamp)
            etree.SubElement(hist, "state", name=queued, at=queued_at)
            el.set("batchId", _clean(bid))
            el.set("HerdState", "Splitted")
            el.set("state", queued)
            if "retryAfter" in el.attrib:
                del el.attrib["retryAfter"]
            if not el.get("submitted"):
                el.set("submitted", queued_at)
            n += 1
        return n

    def retry_at(self, unsubmitted: int) -> float | None:
        """When the first of the ``unsubmitted`` local jobs may be submitted, if every one of them
        waits for a retry's cool-off (else None: some may be submitted now)."""
        found = _RETRY_AFTER(self.root)
        stamps = [str(s) for s in found] if isinstance(found, list) else []
        if len(stamps) < unsubmitted:
            return None
        times = [t for t in map(parse_iso, stamps) if t is not None]
        return min(times) if times else None

    def retries(self) -> int:
        """How many attempts of its local jobs were followed by another (retries and resubmissions)."""
        found = _RETRIES(self.root)
        return int(found) if isinstance(found, float) else 0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        found = _LOCAL_STATES(self.root)
        for s in found if isinstance(found, list) else ():
            state = str(s)
            out[state] = out.get(state, 0) + 1
        return out

    def last_entered(self, state: LocalState) -> float | None:
        """The latest time any of its local jobs entered ``state`` (their histories, in one XPath: jim's
        timestamps have one fixed width, so the latest is the greatest string)."""
        found = _ENTERED_AT(self.root, name=_STATE_NAMES[state])
        stamps = [str(at) for at in found] if isinstance(found, list) else []
        return parse_iso(max(stamps)) if stamps else None

    def tostring(self) -> bytes:
        # not pretty-printed: indenting costs 4x the serialization time at 10,000 local jobs
        return etree.tostring(self.root.getroottree(), xml_declaration=True, encoding="UTF-8")


# ---------------------------------------------------------------------------
# Building a new record
# ---------------------------------------------------------------------------


def _attribute_el(parent: etree._Element, name: str, values: list[Any]) -> None:
    a = etree.SubElement(parent, "attribute", name=_clean(name))
    for v in values:
        if isinstance(v, list):
            lst = etree.SubElement(a, "list")
            for x in v:
                etree.SubElement(lst, "value").text = _clean(x)
        else:
            etree.SubElement(a, "value").text = _clean(v)


@dataclass(frozen=True)
class NewJob:
    """What a new record is made of (see :func:`new_record`)."""

    jobtype: str
    name: str
    owner: str
    adapter: str
    description: dict[str, list[Any]]
    """Attribute -> values, as :meth:`jim.jobdesc.JobDescription.to_json` gives them."""
    source_format: str
    source_text: str
    plan: dict[str, Any]
    """The plan's attributes (how many local jobs, which limit bound them)."""
    explanation: str
    slices: list[dict[str, Any]]
    """One per local job: its slice's attributes (``queue``, ``params``, ``failed_on_creation``...)."""
    meta: dict[str, str] = field(default_factory=dict)


def new_record(job_id: str, new: NewJob, *, created: float | None = None) -> GridJob:
    """A fresh record: grid job PENDING, every local job PLANNED (or FAILED on creation)."""
    stamp = now_iso(created)
    root = etree.Element(
        "gridjob",
        schemaVersion=SCHEMA_VERSION,
        id=job_id,
        jobtype=new.jobtype,
        name=_clean(new.name)[:200],
        owner=_clean(new.owner),
        adapter=new.adapter,
        state=GramState.PENDING.name,
        created=stamp,
        updated=stamp,
        MasterJobID=job_id,
        HerdState="WillSplit",
        cancelRequested="false",
    )
    doc = etree.ElementTree(root)
    root.addprevious(stylesheet_pi())
    desc_el = etree.SubElement(root, "description", format=new.source_format)
    etree.SubElement(desc_el, "source").text = _clean(new.source_text)
    for k, vals in new.description.items():
        _attribute_el(desc_el, k, vals)
    plan_el = etree.SubElement(root, "plan", {k: _clean(v) for k, v in new.plan.items() if v is not None})
    etree.SubElement(plan_el, "explanation").text = _clean(new.explanation)
    if new.meta:
        etree.SubElement(root, "meta", {k: _clean(v) for k, v in new.meta.items() if v})
    hist = etree.SubElement(root, "history")
    etree.SubElement(hist, "grid", state=GramState.PENDING.name, at=stamp)
    root.append(_localjobs_element(job_id, new.slices, stamp))
    for lj_el, sl in zip(child(root, "localjobs"), new.slices):
        if sl.get("failed_on_creation"):
            LocalJob(lj_el).set_state(
                LocalState.FAILED, evidence=Evidence.CREATION, reason=sl["failed_on_creation"], exit_code=1, at=created
            )
    del doc
    return GridJob(root)


_ATTR_ESCAPES = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}
)
_ATTR_SPECIAL = re.compile('[&<>"\n\r\t]')


def _quoteattr(value: Any) -> str:
    """``value`` as a double-quoted XML attribute value (xml.sax.saxutils would import urllib: 20 ms)."""
    s = _clean(value)
    return f'"{s.translate(_ATTR_ESCAPES)}"' if _ATTR_SPECIAL.search(s) else f'"{s}"'


def _localjobs_element(job_id: str, slices: list[dict[str, Any]], stamp: str) -> etree._Element:
    """<localjobs> for a new record, built as text and parsed once: much faster than
    element-by-element construction for grid jobs of thousands of local jobs."""
    q = _quoteattr
    planned = LocalState.PLANNED.value
    parts = ["<localjobs>"]
    for k, sl in enumerate(slices):
        queue = sl.get("queue")
        attrs = "".join(
            f" {a}={q(v)}"
            for a, v in sl.items()
            if a not in ("failed_on_creation", "queue", "params") and v is not None
        )
        params = "".join(f"<param name={q(n)} value={q(v)}/>" for n, v in (sl.get("params") or {}).items())
        parts.append(
            f'<localjob index="{k}" tag="{job_id}.{k}" MasterJobID="{job_id}" SplitID="{k}" '
            f'HerdState="WillSplit" state="{planned}"' + (f" queue={q(queue)}" if queue else "") + ">"
            f"<slice{attrs}>{params}</slice>"
            f'<history><state name="{planned}" at="{stamp}"/></history><progress/></localjob>'
        )
    parts.append("</localjobs>")
    return etree.fromstring("".join(parts), PARSER)


def failure_reason(job: GridJob) -> str:
    """One line saying why a grid job failed (shown by the gatekeeper's client as the details)."""
    if job.cancel_requested:
        return job.get("cancelReason") or "cancelled"
    if job.fail_reason:
        return job.fail_reason
    jobs = job.local_jobs()
    failed = [lj for lj in jobs if lj.state.failure]
    if not failed:
        return "failed"
    first = failed[0]
    what = f"exit code {first.exit_code}" if first.exit_code is not None else first.state.value.lower()
    why = f": {first.get('reason')}" if first.get("reason") else ""
    more = f" ({len(failed)} of {len(jobs)} local jobs failed)" if len(failed) > 1 else ""
    return " ".join(f"local job {first.index} ended {first.state.value} with {what}{why}{more}".split())[:300]
