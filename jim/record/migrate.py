"""Schema versions: which records (and index) this jim reads, and the steps that bring an older one up to date.

Every record (``<gridjob schemaVersion="N">``) and the index (``<index
schemaVersion="N">``) carries the version of the schema it was written at; a
file without the attribute is of version 1.  This jim writes
:data:`~jim.record.elements.SCHEMA_VERSION` and reads every version up to it:

* a **newer** one is refused (:class:`~jim.errors.RecordTooNew`, one line:
  ``record <id> was written by a newer jim (schema N, this jim reads up to M):
  upgrade jim``) and never written, so a newer jim finds it as it left it;
* an **older** one is brought up to date in memory (:func:`upgrade`), one
  step per version (:data:`RECORD_STEPS`, :data:`INDEX_STEPS`), when it is
  read; :mod:`jim.db` writes it at the new version with its next change, and
  a record only looked at is never written for it.

The rule for a new version (docs/upgrades.md): a change an older jim would
misread (a new value of an enumerated attribute, an element or attribute whose
absence or presence changes what jim does with the record, anything moved or
renamed, anything made required) bumps the version and adds a step here; an
optional addition that an older jim may ignore without acting wrongly does not.
Steps are never removed: a record written years ago by the first jim is still
read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from lxml import etree

from jim.errors import DatabaseError, RecordTooNew
from jim.summary import RECORD_SCHEMA, too_new

#: The longest ``schemaVersion`` read as a number.
_MAX_DIGITS = 9


def version_of(root: etree._Element) -> int:
    """The schema version of a record's or the index's root element; 1 without the attribute."""
    text = root.get("schemaVersion")
    if text is None:
        return 1
    if not (text.isdigit() and len(text) <= _MAX_DIGITS) or int(text) < 1:
        raise DatabaseError(f"<{root.tag}> with schemaVersion {text[:20]!r}, not a version: corrupt file")
    return int(text)


def check(root: etree._Element, what: str) -> int:
    """The version of ``root``; :class:`RecordTooNew` (about ``what``: ``record <id>``, ``the index``)
    when it is newer than this jim reads."""
    version = version_of(root)
    if version > RECORD_SCHEMA:
        raise RecordTooNew(too_new(what, version))
    return version


def _record_1_to_2(root: etree._Element) -> None:
    """Version 2 only marks the records of jims that check versions.  Records labelled 1 were written
    by every jim before it, the later ones with optional additions (``killedBy``, retries' ``attempt``,
    ``retryAfter`` and ``<attempts>``, ``<usage>``, ``<identity>``, ``<credentials>``, ``waiting``,
    format ``grami``): each means in version 2 what it meant when written, and a record without one
    is read as a record where it never happened (attempt 1, nothing measured, no credential).  Nothing
    moves."""
    del root


def _index_1_to_2(root: etree._Element) -> None:
    """The index's entries are the same in version 2."""
    del root


Step = Callable[[etree._Element], None]

#: version N -> the step from N to N + 1, for ``<gridjob>``; one for every version below RECORD_SCHEMA.
RECORD_STEPS: dict[int, Step] = {1: _record_1_to_2}
#: The same for ``<index>``.
INDEX_STEPS: dict[int, Step] = {1: _index_1_to_2}


def upgrade(root: etree._Element, what: str) -> int:
    """Bring ``root`` (a ``<gridjob>`` or the ``<index>``) up to this jim's version, in memory; the version
    it was read at.  Idempotent: a root of this jim's version is left as it is.  :class:`RecordTooNew`
    for a newer one (left as it is)."""
    version = check(root, what)
    steps = INDEX_STEPS if root.tag == "index" else RECORD_STEPS
    for n in range(version, RECORD_SCHEMA):
        steps[n](root)
        root.set("schemaVersion", str(n + 1))
    return version


def file_version(chunks: Iterable[bytes]) -> int | None:
    """The schema version a file's root element's start tag says, from its ``chunks`` taken only up to
    that tag: None when there is none, or it is not well-formed, or its version is not one.  For
    counting many files cheaply (``jim doctor``); reading one goes through :func:`check`."""
    parser = etree.XMLPullParser(events=("start",), resolve_entities=False, no_network=True, huge_tree=True)
    try:
        for chunk in chunks:
            parser.feed(chunk)
            for _event, el in parser.read_events():
                return version_of(el) if isinstance(el, etree._Element) else None  # ("start": always one)
    except (etree.XMLSyntaxError, DatabaseError):
        return None
    return None
