"""The XML of jim's files, at the level of elements: how a record is parsed, what the schema requires of
an element, what text XML can hold, and the stylesheet instruction that makes a browser render a file."""

from __future__ import annotations

import re
from typing import Any

from lxml import etree

from jim.errors import DatabaseError
from jim.summary import RECORD_SCHEMA

#: The schema version this jim writes, as the ``schemaVersion`` attribute of a record and of the index;
#: the newest it reads.  Older ones are brought up to it by :mod:`jim.record.migrate` (docs/upgrades.md).
SCHEMA_VERSION = str(RECORD_SCHEMA)
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


def clean(value: Any) -> str:
    """Text that XML can hold: characters XML forbids become U+FFFD."""
    s = value if isinstance(value, str) else str(value)
    return _NOT_XML.sub("\ufffd", s) if _NOT_XML.search(s) else s


#: How jim parses every XML file it wrote: no entities, no network, no size limit (thousands of local jobs).
PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)


_ATTR_ESCAPES = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}
)
_ATTR_SPECIAL = re.compile('[&<>"\n\r\t]')


def quoteattr(value: Any) -> str:
    """``value`` as a double-quoted XML attribute value (xml.sax.saxutils would import urllib: 20 ms)."""
    s = clean(value)
    return f'"{s.translate(_ATTR_ESCAPES)}"' if _ATTR_SPECIAL.search(s) else f'"{s}"'
