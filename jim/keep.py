"""Declared output files kept under their names in the grid job's directory (ARC's semantics).

An ARC job declares its output files by name; A-REX hands back (``arcget``) or uploads (a URL)
exactly those names from the session directory once the job has ended.  jim splits the job into N
local jobs, each of which writes its own copy of every declared file, so the copies are merged into
one file per name before the grid job reports its end:

* ``keepfiles``: the declared names, relative to the grid job's ``directory`` (``name``, or
  ``(name url)`` when the CE uploads the merged file to ``url`` afterwards; jim uploads nothing
  itself); a name ending in ``/`` declares a directory, merged file by file;
* ``outputmerge``: ``concat`` (the local jobs' files one after another, in local-job order),
  ``first`` (the file of the first local job that wrote it), ``indexed`` (each local job's file
  kept as ``<stem>.<k><suffix>``: ``a.dat`` of local job 1 is ``a.1.dat``); default: the job
  type's (:attr:`jim.handlers.base.Handler.output_merge`);
* ``directoryview`` (true/false): each local job runs in a private directory where every entry of
  ``directory`` appears under its name (a symbolic link to it), the declared outputs being the
  local job's own files (sandbox/jimworkdir.py); the wrapper moves them into its attempt's
  ``kept/`` directory, where :func:`merge` reads them (the attempt that counted of each local job).

At submit (:func:`check`, with a one-line reason, nothing recorded): a name that leaves the
directory (absolute, ``..`` past its top), more than :data:`MAX_KEEPFILES` names, a name given
twice or inside another declared directory, two outputs that would be the same file after the
merge (``a.1.dat`` beside an indexed ``a.dat`` of local job 1; jim's own stdout, stderr or output
tar) and an ``indexed`` merge of a file with an upload URL (the CE uploads the declared name,
which an indexed merge does not write).  The effective rule is recorded with the description.

Writing (:func:`merge`): each merged file replaces ``<directory>/<name>`` whole through
:func:`jim.safeio.atomic_write`; the directories on the way are opened one by one without
following a symbolic link (one planted where a kept file goes is never followed: that file is not
written, and the reason is logged), and created when missing.  Nothing is read through a link
either: the wrapper wrote the ``kept/`` files, and only regular files are read.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from jim.db import Database
from jim.errors import InvalidAttribute
from jim.jobdesc import JobDescription, shown
from jim.jobdesc.shape import truth
from jim.record import GridJob
from jim.safeio import atomic_write, open_regular

#: The merge rules of ``outputmerge``.
MERGE_RULES = ("concat", "first", "indexed")
#: The most declared output names of one grid job, and the longest one (characters).
MAX_KEEPFILES = 1000
MAX_NAME_CHARS = 4096
#: The most files of one declared directory :func:`merge` reads per local job, and its deepest level.
MAX_DIRECTORY_FILES = 10_000
MAX_DEPTH = 32
#: Where an attempt's wrapper puts the local job's declared outputs (sandbox/jimworkdir.py's KEPT).
KEPT = "kept"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Kept:
    """One declared output: its name (normalized, relative, no trailing ``/``), whether it is a
    directory, and the URL the CE uploads it to ("" for none)."""

    name: str
    directory: bool = False
    url: str = ""

    @property
    def declared(self) -> str:
        """The name as the wrapper's manifest carries it (``plots/`` for a directory)."""
        return self.name + "/" if self.directory else self.name


def normalized(raw: str) -> tuple[str, bool]:
    """``(name, is a directory)`` of a declared output name; :class:`InvalidAttribute` (134) for one
    that is empty, absolute, leaves the directory, or holds a control character."""
    text = shown(raw, 100)
    if not raw or not raw.strip():
        raise InvalidAttribute("a keepfiles name is empty")
    if len(raw) > MAX_NAME_CHARS:
        raise InvalidAttribute(f"keepfiles name {text} is longer than {MAX_NAME_CHARS} characters")
    if not raw.isprintable():
        raise InvalidAttribute(f"keepfiles name {text} holds a NUL or another control character")
    if raw.startswith("/"):
        raise InvalidAttribute(f"keepfiles name {text} is absolute: declared outputs are in the job's directory")
    name = posixpath.normpath(raw)
    if name == "." or name == ".." or name.startswith("../"):
        raise InvalidAttribute(f"keepfiles name {text} leaves the job's directory")
    return name, raw.endswith("/")


def declared(desc: JobDescription) -> list[Kept]:
    """The description's ``keepfiles``, checked (see :func:`normalized`) and bounded."""
    values = desc.attrs.get("keepfiles") or []
    if len(values) > MAX_KEEPFILES:
        raise InvalidAttribute(f"{len(values)} keepfiles names, more than {MAX_KEEPFILES}")
    out = []
    for value in values:
        url = ""
        if isinstance(value, list):  # (name url): the CE uploads the merged file there
            if len(value) not in (1, 2) or not all(isinstance(v, str) for v in value):
                raise InvalidAttribute("a keepfiles entry is a name or (name url)")
            raw, url = (value[0], value[1] if len(value) == 2 else "")
        else:
            raw = value
        name, directory = normalized(raw)
        if len(url) > MAX_NAME_CHARS or not url.isprintable():
            raise InvalidAttribute(f"the upload URL of keepfiles name {shown(name, 100)} is not usable")
        out.append(Kept(name, directory, url.strip()))
    return out


def merge_rule(desc: JobDescription, default: str = "concat") -> str:
    """``outputmerge`` (checked), else ``default`` (the job type's)."""
    rule = desc.get("outputmerge")
    if rule is None:
        return default
    if rule.strip().lower() not in MERGE_RULES:
        raise InvalidAttribute(f"outputmerge must be one of {', '.join(MERGE_RULES)}, got {shown(rule)}")
    return rule.strip().lower()


def directory_view(desc: JobDescription) -> bool:
    """``directoryview`` as a flag (true/false, yes/no, 1/0); :class:`InvalidAttribute` otherwise."""
    raw = desc.get("directoryview")
    if raw is None:
        return False
    value = truth(raw)
    if value is None:
        raise InvalidAttribute(f"directoryview must be true or false, got {shown(raw)}")
    return value


def indexed_name(name: str, index: int) -> str:
    """``<stem>.<k><suffix>`` of ``name`` for local job ``index``: the stem is the file name up to
    its first dot (leading dots of a hidden file included), as the wrapper names outputs."""
    head, _sep, base = name.rpartition("/")
    lead = len(base) - len(base.lstrip("."))
    stem, dot, suffix = base[lead:].partition(".")
    new = f"{base[:lead]}{stem}.{index}{dot}{suffix}"
    return f"{head}/{new}" if head else new


def _indexed_key(name: str) -> tuple[str, str, str, str]:
    head, _sep, base = name.rpartition("/")
    lead = len(base) - len(base.lstrip("."))
    stem, dot, suffix = base[lead:].partition(".")
    return head, base[:lead] + stem, dot, suffix


def _as_indexed(name: str, n: int) -> tuple[tuple[str, str, str, str], int] | None:
    """When ``name`` has the form of an indexed name of a local job below ``n``: (the key of the
    declared name it would come from, the local job); else None."""
    head, _sep, base = name.rpartition("/")
    lead = len(base) - len(base.lstrip("."))
    stem, dot, rest = base[lead:].partition(".")
    number, dot2, suffix = rest.partition(".")
    if not dot or not number.isdigit() or len(number) > 9 or str(int(number)) != number or int(number) >= n:
        return None
    return (head, base[:lead] + stem, dot2, suffix), int(number)


def own_files(desc: JobDescription, directory: Path) -> dict[str, str]:
    """jim's own files in ``directory`` (relative name -> attribute): the merged ``stdout`` and
    ``stderr`` and the output tar, when the description puts them there."""
    out = {}
    for attr in ("stdout", "stderr", "outputtar"):
        value = desc.get(attr)
        if not value or value == "/dev/null" or "://" in value:
            continue
        path = posixpath.normpath(posixpath.join(str(directory), value))
        rel = posixpath.relpath(path, str(directory))
        if not rel.startswith(".."):
            out[rel] = attr
    return out


def check(desc: JobDescription, default: str, n: int) -> None:
    """At submit (see the module docstring): the declared outputs of a grid job of ``n`` local jobs
    and their merge rule checked, the rule recorded as ``outputmerge``; :class:`InvalidAttribute`
    (134) with the reason otherwise."""
    rule = merge_rule(desc, default)
    directory_view(desc)
    kept = declared(desc)
    if not kept:
        return
    desc.attrs["outputmerge"] = [rule]
    names: dict[str, Kept] = {}
    for k in kept:
        if k.name in names:
            raise InvalidAttribute(f"keepfiles names {shown(k.name, 100)} twice")
        names[k.name] = k
    for k in kept:
        parts = k.name.split("/")
        for i in range(1, len(parts)):
            above = names.get("/".join(parts[:i]))
            if above is not None:
                raise InvalidAttribute(f"keepfiles name {shown(k.name, 100)} is inside {shown(above.declared, 100)}")
    own = own_files(desc, Path(os.path.expanduser("~")) / (desc.get("directory") or ""))
    for k in kept:
        if k.name in own:
            raise InvalidAttribute(f"keepfiles name {shown(k.name, 100)} is the job's {own[k.name]}, which jim writes")
    if rule == "indexed":
        _check_indexed(kept, own, n)


def _check_indexed(kept: list[Kept], own: dict[str, str], n: int) -> None:
    """An indexed merge: no upload URL, and no declared name (or jim's own file) that is the
    indexed name of another declared output."""
    for k in kept:
        if k.url:
            raise InvalidAttribute(
                f"keepfiles name {shown(k.name, 100)} is uploaded to {shown(k.url, 100)} under its name, which an "
                "indexed merge does not write: give outputmerge=concat or first"
            )
    keys = {_indexed_key(k.name): k for k in kept if not k.directory}
    for name, what in [(k.name, "keepfiles name") for k in kept] + [(o, f"the job's {a}") for o, a in own.items()]:
        found = _as_indexed(name, n)
        if found is not None and found[0] in keys and keys[found[0]].name != name:
            source = keys[found[0]].name
            raise InvalidAttribute(
                f"{what} {shown(name, 100)} is also the indexed {shown(source, 100)} of local job {found[1]}: "
                "two outputs of one name"
            )


def manifest_entries(desc: JobDescription, directory: str) -> dict[str, object]:
    """What the wrapper's manifest says of the view and the declared outputs: ``view`` (the
    absolute directory the local jobs see, or None) and ``keep`` (the declared names)."""
    kept = declared(desc)
    view = directory if directory_view(desc) else None
    return {"view": view, "keep": [k.declared for k in kept]}


# -- gathering -------------------------------------------------------------------------------------


def _regular_files(root: Path, rel: str, limit: int = MAX_DIRECTORY_FILES) -> list[str]:
    """The regular files under ``root/rel`` (a file: itself), relative to ``root``, sorted, never
    through a symbolic link, at most ``limit``, at most :data:`MAX_DEPTH` levels."""
    out: list[str] = []

    def walk(path: str, depth: int) -> None:
        try:
            st = os.lstat(root / path)
        except OSError:
            return
        if stat.S_ISREG(st.st_mode):
            out.append(path)
        elif stat.S_ISDIR(st.st_mode) and depth < MAX_DEPTH:
            try:
                entries = sorted(os.listdir(root / path))
            except OSError:
                return
            for entry in entries:
                if len(out) >= limit:
                    return
                walk(f"{path}/{entry}", depth + 1)

    walk(rel, 0)
    return out[:limit]


def counted_kept(db: Database, job: GridJob) -> list[tuple[int, Path]]:
    """(local job, its ``kept/`` directory) of the attempt that counted of every local job, in order."""
    out = []
    for lj in sorted(job.local_jobs(), key=lambda lj: lj.index):
        where = db.home.local_dir(job.id, lj.index, lj.attempt) / KEPT
        if where.is_dir() and not where.is_symlink():
            out.append((lj.index, where))
    return out


def add_to_tar(tar: tarfile.TarFile, kept_dir: Path, root: str, index: int) -> list[str]:
    """One attempt's declared outputs into the output tar as ``<root>/kept/<index>/<name>``; the
    names added (``kept/<index>/<name>``)."""
    files: list[str] = []
    if not kept_dir.is_dir() or kept_dir.is_symlink():
        return files
    for entry in sorted(os.listdir(kept_dir)):
        for rel in _regular_files(kept_dir, entry):
            arc = f"{KEPT}/{index}/{rel}"
            try:
                tar.add(str(kept_dir / rel), arcname=f"{root}/{arc}", recursive=False)
            except OSError:
                continue
            files.append(arc)
    return files


def _plan(desc: JobDescription, sources: list[tuple[int, Path]]) -> dict[str, list[tuple[int, Path]]]:
    """Target name (relative to the directory) -> the local jobs' files it is made of, in order."""
    rule = merge_rule(desc)
    targets: dict[str, list[tuple[int, Path]]] = {}
    for k in declared(desc):
        for index, kept_dir in sources:
            for rel in _regular_files(kept_dir, k.name):
                target = indexed_name(rel, index) if rule == "indexed" else rel
                if rule == "first" and target in targets:
                    continue
                targets.setdefault(target, []).append((index, kept_dir / rel))
    return targets


def merge(db: Database, job: GridJob) -> list[str]:
    """Merge every declared output of ``job`` from its local jobs into its directory (see the module
    docstring); what could not be written, one line each."""
    desc = JobDescription(job.description())
    try:
        if not declared(desc):
            return []
        directory = Path(os.path.expanduser("~")) / (desc.get("directory") or "")
        targets = _plan(desc, counted_kept(db, job))
    except InvalidAttribute as e:
        return [f"declared outputs not merged: {e.message}"]
    problems = []
    for k in declared(desc):
        if not any(t == k.name or t.startswith(k.name + "/") or _from(t, k.name) for t in targets):
            problems.append(f"declared output {shown(k.declared, 100)}: no local job wrote it")
    for target, parts in sorted(targets.items()):
        try:
            _write(directory, target, parts)
        except OSError as e:
            problems.append(f"declared output {shown(target, 100)} not written: {e.strerror or e}")
    return problems


def _from(target: str, name: str) -> bool:
    """Whether ``target`` is an indexed name of ``name`` (or of a file in it)."""
    found = _as_indexed(target, 1 << 30)
    return found is not None and found[0] == _indexed_key(name)


def _write(directory: Path, target: str, parts: list[tuple[int, Path]]) -> None:
    """``directory/target`` replaced whole by the concatenation of ``parts``; the directories on the
    way opened (or made) one by one, never through a symbolic link."""
    *dirs, name = target.split("/")
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for part in dirs:
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise OSError(e.errno, f"{part!r} on the way is a symbolic link or not a directory") from None
                raise
            os.close(fd)
            fd = sub
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                raise OSError(errno.EISDIR, "a directory is in its place")
        except FileNotFoundError:
            pass
        atomic_write(f"/proc/self/fd/{fd}/{name}", lambda out: _concat(parts, out))
    finally:
        os.close(fd)


def _concat(parts: list[tuple[int, Path]], out: BinaryIO) -> None:
    for _index, path in parts:
        fd, _st = open_regular(path, follow=False)
        with open(fd, "rb") as f:
            while chunk := f.read(_CHUNK):
                out.write(chunk)
