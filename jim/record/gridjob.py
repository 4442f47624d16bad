"""One grid job's record (:class:`GridJob`, the root ``<gridjob>``): its local jobs, its grid state
aggregated from theirs under the site's failure policy, its plan, description and outputs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from lxml import etree

from jim.credentials import KINDS, Credential
from jim.identity import UNKNOWN, Identity
from jim.record.elements import child, clean, required
from jim.record.localjob import LocalJob
from jim.record.usage import Totals, Usage
from jim.states import FailurePolicy, GramState, LocalState, aggregate_counts, grid_exit_code
from jim.timestamps import now_iso, parse_iso

_TERMINAL_NAMES = frozenset(s.value for s in LocalState if s.terminal)
# evaluated in C: iterating thousands of elements in Python costs tens of ms a pass
_LOCAL_STATES = etree.XPath("localjobs/localjob/@state", smart_strings=False)
_ENTERED_AT = etree.XPath("localjobs/localjob/history/state[@name = $name]/@at", smart_strings=False)
_UNSPLIT = etree.XPath(
    "boolean(localjobs/localjob[not(@batchId)][not(%s)])"
    % " or ".join(f"@state='{n}'" for n in sorted(_TERMINAL_NAMES))
)

#: Every attempt's <usage>, and how many attempts ended after they ran with none (see usage_totals)
_USAGES = etree.XPath("localjobs/localjob/usage | localjobs/localjob/attempts/attempt/usage")
_RAN_UNMEASURED = "[@ended][@batchId][@started or @node][not(usage)]"
_UNMEASURED = etree.XPath(
    f"count(localjobs/localjob{_RAN_UNMEASURED}) + count(localjobs/localjob/attempts/attempt{_RAN_UNMEASURED})"
)
_RETRIES = etree.XPath("count(localjobs/localjob/attempts/attempt)")
_RETRY_AFTER = etree.XPath("localjobs/localjob[@state='PLANNED']/@retryAfter", smart_strings=False)


#: The failure policy of a record recomputed without the site's (no local job may fail).
NO_FAILURES = FailurePolicy()


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
        self.root.set(name, clean(value))

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
        o.set("tar", clean(str(tar)))
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

    def identity(self) -> Identity:
        """Who submitted this grid job, as its gatekeeper front end said it (``<identity>``; every field
        None or empty that the front end did not say, :data:`jim.identity.UNKNOWN` without one)."""
        el = self.root.find("identity")
        return Identity.from_record({str(k): str(v) for k, v in el.attrib.items()}) if el is not None else UNKNOWN

    def set_identity(self, identity: Identity) -> None:
        """Record the front end's ``identity`` (at submit); one that says nothing, not even its source,
        records nothing."""
        attrs = identity.record_attrs()
        old = self.root.find("identity")
        if old is not None:
            self.root.remove(old)
        if attrs:
            etree.SubElement(self.root, "identity", {k: clean(v) for k, v in attrs.items()})

    def credentials(self) -> list[Credential]:
        """What the grid job's credentials are (kind, end, subject: ``<credentials>``; never their content)."""
        out = []
        for el in self.root.iterfind("credentials/credential"):
            kind = el.get("kind") or ""
            if kind in KINDS:
                out.append(Credential(kind, parse_iso(el.get("notAfter")), el.get("subject") or None))
        return out

    def set_credentials(self, found: list[Credential]) -> None:
        """Record what the grid job's credentials are now (at submit, and after a refresh replaced one)."""
        old = self.root.find("credentials")
        if old is not None:
            self.root.remove(old)
        if found:
            box = etree.SubElement(self.root, "credentials")
            for cred in found:
                etree.SubElement(box, "credential", {k: clean(v) for k, v in cred.record_attrs().items()})

    def meta(self, name: str) -> str | None:
        """A value of the <meta> element (jim-internal settings of this grid job)."""
        m = self.root.find("meta")
        return m.get(name) if m is not None else None

    def set_meta(self, name: str, value: Any) -> None:
        """Set a value of the <meta> element (made when missing)."""
        m = self.root.find("meta")
        if m is None:
            m = etree.SubElement(self.root, "meta")
        m.set(name, clean(value))

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
            el.set("batchId", clean(bid))
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

    def usage_totals(self) -> Totals:
        """What every attempt of every local job used, summed (:class:`jim.record.usage.Totals`): each
        attempt with a ``<usage>``, and as ``unknown`` each one that ended after it ran (a batch id and
        a start or a node) with none.  An attempt still queued or running is not counted yet."""
        found = _USAGES(self.root)
        usages = [Usage.of_element(el) for el in cast("list[etree._Element]", found)] if isinstance(found, list) else []
        unmeasured = _UNMEASURED(self.root)
        return Totals.of([*usages, *[None] * (int(unmeasured) if isinstance(unmeasured, float) else 0)])

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
        found = _ENTERED_AT(self.root, name=state.value)
        stamps = [str(at) for at in found] if isinstance(found, list) else []
        return parse_iso(max(stamps)) if stamps else None

    def tostring(self) -> bytes:
        # not pretty-printed: indenting costs 4x the serialization time at 10,000 local jobs
        return etree.tostring(self.root.getroottree(), xml_declaration=True, encoding="UTF-8")


# ---------------------------------------------------------------------------
# Building a new record
# ---------------------------------------------------------------------------


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
