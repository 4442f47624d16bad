"""One ``<localjob>`` of a record (:class:`LocalJob`): its state and the rules that change it (states
never go back; a terminal one records its evidence), its attempts, its progress."""

from __future__ import annotations

from typing import Any

from lxml import etree

from jim.jobid import local_tag
from jim.record.elements import child, clean, required
from jim.record.usage import Usage
from jim.states import Evidence, LocalState, may_transition
from jim.timestamps import now_iso, parse_iso

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
        self.el.set("batchId", clean(value))
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
        self.el.set(name, clean(value))

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
        for name in _WHILE_PLANNED:  # (only a PLANNED attempt waits for its cool-off or anything else)
            if name in self.el.attrib:
                del self.el.attrib[name]
        hist = child(self.el, "history")
        entry = etree.SubElement(hist, "state", name=new.value, at=stamp)
        if evidence is not None:
            ev = evidence.value if isinstance(evidence, Evidence) else str(evidence)
            entry.set("evidence", ev)
            self.el.set("evidence", ev)
        if reason:
            entry.set("reason", clean(reason)[:500])
            self.el.set("reason", clean(reason)[:500])
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
        closed["retryReason"] = clean(reason)[:500]
        closed["retryAt"] = stamp
        if by:
            closed["retryBy"] = clean(by)[:100]
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
        usage = el.find("usage")
        if usage is not None:  # (the closed attempt's measure goes with it)
            attempts[-1].append(usage)
        why = f"attempt {n + 1}: {clean(reason)}"[:500]
        etree.SubElement(child(el, "history"), "state", name=LocalState.PLANNED.value, at=stamp, reason=why)
        return n + 1

    # -- usage (see jim.record.usage) ---------------------------------------------
    def usage(self, attempt: int | None = None) -> Usage | None:
        """What attempt ``attempt`` (the current one by default) used, as measured; None when nobody
        measured it (or it has not ended, or there is no such attempt)."""
        if attempt is None or attempt == self.attempt:
            el = self.el.find("usage")
        else:
            el = next(
                (a.find("usage") for a in self.el.iterfind("attempts/attempt") if a.get("n") == str(attempt)), None
            )
        return Usage.of_element(el) if el is not None else None

    def usages(self) -> list[tuple[int, Usage | None]]:
        """(attempt, its usage or None) of every attempt, oldest first, the current one last."""
        out = []
        for a in self.el.iterfind("attempts/attempt"):
            found = a.find("usage")
            out.append((int(required(a, "n")), Usage.of_element(found) if found is not None else None))
        return [*out, (self.attempt, self.usage())]

    def set_usage(self, usage: Usage) -> None:
        """Record what the current attempt used (replacing what was recorded for it)."""
        old = self.el.find("usage")
        if old is not None:
            self.el.remove(old)
        self.el.append(usage.element())

    @property
    def plan_cores(self) -> int | None:
        """The cores each local job of its grid job was given (the plan's resource shape), if the plan says."""
        plan = self.el.getroottree().getroot().find("plan")
        value = plan.get("cores", "1") if plan is not None else ""
        return int(value) if value.isascii() and value.isdigit() and 0 < len(value) < 7 else None

    @property
    def retry_after(self) -> float | None:
        """When the current attempt may be submitted (a retry's cool-off), if it must wait."""
        return parse_iso(self.el.get("retryAfter"))

    @property
    def waiting(self) -> tuple[str, float] | None:
        """Why this PLANNED local job is held back in jim (not submitted yet), and since when; None if it is not."""
        reason, since = self.el.get("waiting"), parse_iso(self.el.get("waitingSince"))
        return (reason, since) if reason and since is not None else None

    def set_waiting(self, reason: str | None, at: float | None = None) -> bool:
        """Hold this PLANNED local job back with ``reason`` (None: no more); the first hold's time is kept
        while the reason stays.  True when the record changed."""
        if reason is None:
            changed = "waiting" in self.el.attrib
            for name in ("waiting", "waitingSince"):
                if name in self.el.attrib:
                    del self.el.attrib[name]
            return changed
        text = clean(reason)[:500]
        if self.el.get("waiting") == text:
            return False
        self.el.set("waiting", text)
        if "waitingSince" not in self.el.attrib:
            self.el.set("waitingSince", now_iso(at))
        return True

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
            etree.SubElement(prog, "phase", name=clean(name)[:64], done=str(done), total=str(total), at=stamp)
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
_CURRENT_ONLY = ("heartbeat", "absentSince", "retryAfter", "waiting", "waitingSince")
#: Attributes a PLANNED attempt may have that every state change removes.
_WHILE_PLANNED = ("retryAfter", "waiting", "waitingSince")
