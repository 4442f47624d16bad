"""The ``inputdata`` attribute: the files a grid job processes (reprocessing, concat).

Input data are *not* shipped in the sandbox (that is ``inputfiles``): they are
names the local jobs open themselves (paths on shared storage, LFNs, URLs).
Each value of ``inputdata`` is one file, either a bare name or a nested
sequence whose first element is the name and whose further elements are
columns that depend on the job type:

* reprocessing: ``(NAME EVENTS [RUN:LUMIS ...])`` -- the file's event count,
  then its lumi sections, one word per run: ``1:1-10,12`` is run 1, lumis 1 to
  10 and 12;
* concat: ``(NAME SIZE [EVENTS])`` -- bytes and events.

Any column ``@PLACE[,PLACE...]`` (storage elements or sites: letters, digits,
``_ . : -``) gives the file's location set instead; the reprocessing splitters
group files by it and never mix two location sets in one local job (WMCore's
job groups).  ``(/data/a.root 1200 "1:1-10" @T2_XX_SiteA)``.

RSL: ``(inputdata=(/data/a.root 1200 "1:1-10") (/data/b.root 800 "1:11-20"))``;
JSON: ``{"inputdata": [["/data/a.root", "1200", "1:1-10"], ...]}``; JDL:
``InputData = {"/data/a.root", ...}`` (bare names only).

A name must be non-empty and free of white space (local jobs receive the names
space-separated in ``$JIM_INPUT_FILES``, and one per line in the file named by
``$JIM_INPUT_FILE_LIST``).  A relative path is made absolute against
``directory`` (default: the user's home), as GRAM does for the job's files:
local jobs run in a scratch directory of their own.  Absolute paths and URLs
(``root://...``) are kept as written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jim.errors import InvalidAttribute
from jim.handlers.base import Handler, HandlerOptions, LocalSlice, Plan
from jim.jobdesc import JobDescription, Value

if TYPE_CHECKING:
    from jim.sandbox.builder import WorkArea

_COUNT = re.compile(r"[0-9]+\Z")
_PLACE = re.compile(r"[A-Za-z0-9_.:-]{1,255}\Z")
MAX_PLACES = 64
_LUMIS = re.compile(r"([0-9]+):([0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*)\Z")
LIST_DIR = "jim-inputdata"
"""Sandbox directory holding one file list per local job (``<k>.txt``)."""


@dataclass(frozen=True)
class InputEntry:
    """One value of ``inputdata``: the name and its further columns, as written."""

    name: str
    columns: tuple[str, ...] = ()
    location: frozenset[str] = frozenset()


def entries(desc: JobDescription) -> list[InputEntry]:
    """The ``inputdata`` values of ``desc``; refuses an empty list, bad names and nesting."""
    directory = desc.get("directory") or os.path.expanduser("~")
    out = [_entry(value, directory) for value in desc.attrs.get("inputdata", [])]
    if not out:
        raise InvalidAttribute("this job type needs inputdata=<the files to process>")
    return out


def _entry(value: Value, directory: str) -> InputEntry:
    """One ``inputdata`` value: its name (relative ones against ``directory``), its columns and its locations."""
    name, columns = _name_and_columns(value)
    name = _file_name(name.strip(), directory)
    words = tuple(c.strip() for c in columns)
    places = _places(name, [w for w in words if w.startswith("@")])
    return InputEntry(name, tuple(w for w in words if not w.startswith("@")), places)


def _name_and_columns(value: Value) -> tuple[str, tuple[str, ...]]:
    """A bare name, or ``(NAME COLUMN ...)``: no deeper nesting."""
    if isinstance(value, str):
        return value, ()
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value[0], tuple(value[1:])
    raise InvalidAttribute(f"inputdata: each value must be a name or (NAME ...), got {value!r}")


def _file_name(name: str, directory: str) -> str:
    """A usable name (not empty, no white space), made absolute against ``directory`` unless it is
    absolute or a URL."""
    if not name or any(c.isspace() for c in name) or "\0" in name:
        raise InvalidAttribute(f"inputdata: {name!r} is not a usable file name (empty or with white space)")
    if not name.startswith("/") and "://" not in name:
        name = os.path.normpath(os.path.join(directory, name))
    return name


def _places(name: str, words: list[str]) -> frozenset[str]:
    """The location set named by the ``@PLACE[,PLACE...]`` columns of file ``name``."""
    places: set[str] = set()
    for word in words:
        for place in word[1:].split(","):
            if not _PLACE.match(place):
                raise InvalidAttribute(
                    f"inputdata {name}: a location must be @PLACE[,PLACE...] of letters, digits, _ . : -, "
                    f"got {word[:80]!r}"
                )
            places.add(place)
    if len(places) > MAX_PLACES:
        raise InvalidAttribute(f"inputdata {name}: more than {MAX_PLACES} locations")
    return frozenset(places)


def count(entry: InputEntry, column: int, what: str) -> int | None:
    """Column ``column`` (0-based, after the name) as a non-negative integer, or None if absent."""
    if len(entry.columns) <= column:
        return None
    text = entry.columns[column]
    if not _COUNT.match(text):
        raise InvalidAttribute(f"inputdata {entry.name}: {what} must be a non-negative integer, got {text!r}")
    return int(text)


def lumis(entry: InputEntry, start: int) -> tuple[tuple[int, int], ...]:
    """The ``RUN:LUMIS`` columns from ``start`` on, as ``(run, lumi)`` pairs in order."""
    pairs: list[tuple[int, int]] = []
    for word in entry.columns[start:]:
        match = _LUMIS.match(word)
        if not match:
            raise InvalidAttribute(f"inputdata {entry.name}: lumi sections must look like RUN:1-10,12, got {word!r}")
        run = int(match.group(1))
        for part in match.group(2).split(","):
            first, _, last = part.partition("-")
            a, b = int(first), int(last or first)
            if b < a:
                raise InvalidAttribute(f"inputdata {entry.name}: lumi range {part} runs backwards")
            if b - a > 1_000_000:
                raise InvalidAttribute(f"inputdata {entry.name}: lumi range {part} is implausibly long")
            pairs.extend((run, lumi) for lumi in range(a, b + 1))
    return tuple(pairs)


def slice_env(files: Iterable[str]) -> dict[str, str]:
    """``JIM_INPUT_FILES`` (space-separated) for a local job reading ``files``."""
    return {"JIM_INPUT_FILES": " ".join(files)}


def list_name(index: int) -> str:
    """The sandbox path of local job ``index``'s file list."""
    return f"{LIST_DIR}/{index}.txt"


def add_file_lists(plan: Plan, area: WorkArea) -> None:
    """Put each local job's input list into the sandbox (``jim-inputdata/<k>.txt``)."""
    for k, s in enumerate(plan.slices):
        files = s.env.get("JIM_INPUT_FILES", "").split()
        area.add_bytes(list_name(k), "".join(f + "\n" for f in files).encode())


@dataclass(frozen=True)
class InputDataOptions(HandlerOptions):
    """Options of the job types that read ``inputdata``: the share of a queue's time limit a local
    job may use (``safety``), and whether the files are also appended to the command."""

    safety: float = 0.8
    files_as_arguments: bool = False


class InputDataWorkArea(Handler):
    """``prepareWorkArea`` and ``getCommandAndArguments`` of the job types that read ``inputdata``
    (mixed into a :class:`jim.handlers.base.Handler`): the sandbox holds each local job's file list;
    with the option ``files_as_arguments`` the files are also appended to the command."""

    options: InputDataOptions

    def prepareWorkArea(self, desc: JobDescription, plan: Plan, area: WorkArea) -> None:
        """See :mod:`jim.handlers.base`: the job's ``inputfiles``, and each local job's file list."""
        self.add_input_files(desc, area)
        add_file_lists(plan, area)

    def getCommandAndArguments(self, desc: JobDescription, plan: Plan, local: LocalSlice) -> list[str]:
        """See :mod:`jim.handlers.base`: the job's executable and arguments, and with ``files_as_arguments``
        the local job's files."""
        argv = self.executable_argv(desc)
        if self.options.files_as_arguments:
            argv += local.env.get("JIM_INPUT_FILES", "").split()
        return argv
