"""A fresh record (:func:`new_record`): grid job PENDING, every local job PLANNED (or FAILED on creation)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from jim.record.elements import PARSER, SCHEMA_VERSION, child, clean, quoteattr, stylesheet_pi
from jim.record.gridjob import GridJob
from jim.record.localjob import LocalJob
from jim.states import Evidence, GramState, LocalState
from jim.timestamps import now_iso


def _attribute_el(parent: etree._Element, name: str, values: list[Any]) -> None:
    a = etree.SubElement(parent, "attribute", name=clean(name))
    for v in values:
        if isinstance(v, list):
            lst = etree.SubElement(a, "list")
            for x in v:
                etree.SubElement(lst, "value").text = clean(x)
        else:
            etree.SubElement(a, "value").text = clean(v)


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
        name=clean(new.name)[:200],
        owner=clean(new.owner),
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
    etree.SubElement(desc_el, "source").text = clean(new.source_text)
    for k, vals in new.description.items():
        _attribute_el(desc_el, k, vals)
    plan_el = etree.SubElement(root, "plan", {k: clean(v) for k, v in new.plan.items() if v is not None})
    etree.SubElement(plan_el, "explanation").text = clean(new.explanation)
    if new.meta:
        etree.SubElement(root, "meta", {k: clean(v) for k, v in new.meta.items() if v})
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


def _localjobs_element(job_id: str, slices: list[dict[str, Any]], stamp: str) -> etree._Element:
    """<localjobs> for a new record, built as text and parsed once: much faster than
    element-by-element construction for grid jobs of thousands of local jobs."""
    q = quoteattr
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
