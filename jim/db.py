"""The site-local XML database: one file per grid job, plus an index.

Layout (see :mod:`jim.paths`)::

    db/<id>.xml     the grid job (schema: jim/schema/jim.rng, version SCHEMA_VERSION; the model: jim.record)
    db/<id>.state   the poll summary (jim.summary), rewritten with every change of the record
    db/index.xml    one <job> line per grid job, for listing without parsing every record
    db/jim.xsl      the stylesheet that makes a browser render <id>.xml as a page

Schema versions (:mod:`jim.record.migrate`, docs/upgrades.md): a record or an
index of a newer version than this jim's is refused (:class:`jim.errors.RecordTooNew`; the
index, only a cache, is rebuilt from the records instead), never written; an
older one is brought up to date in memory when it is read, and written at this
jim's version with its next change.

Every write is an atomic replace (:func:`jim.safeio.atomic_write`: temporary
file in the same directory, ``fsync``, ``os.replace``), and every
read-modify-write holds the grid job's lock (:func:`jim.locks.locked`) with a
timeout.  Readers never lock: they see the previous or the next complete file,
never a half-written one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from lxml import etree

from jim import summary
from jim.errors import DatabaseError, JobNotFound
from jim.locks import locked
from jim.paths import Home
from jim.record import PARSER, SCHEMA_VERSION, STYLESHEET, GridJob, child, failure_reason, required, stylesheet_pi
from jim.record.migrate import file_version, upgrade
from jim.safeio import atomic_write, disk_key, open_regular
from jim.states import GramState
from jim.timestamps import now_iso


class Database:
    def __init__(self, home: Home, lock_timeout: float = 10.0):
        self.home = home
        self.lock_timeout = lock_timeout

    # -- files -------------------------------------------------------------
    def _install_stylesheet(self) -> None:
        target = self.home.db / STYLESHEET
        src = resources.files("jim").joinpath("data", STYLESHEET)
        data = src.read_bytes()
        try:
            if target.read_bytes() == data:
                return
        except FileNotFoundError:
            pass
        atomic_write(target, data)  # (0600: everything in a home is private to its user)

    def exists(self, job_id: str) -> bool:
        return self.home.record(job_id).exists()

    def read(self, job_id: str) -> GridJob:
        path = self.home.record(job_id)
        try:
            key = disk_key(path)  # before parsing: a newer file read under an older key is only re-read
            data = path.read_bytes()
            root = etree.fromstring(data, PARSER)
        except OSError:
            if not path.exists():
                raise JobNotFound(f"no grid job {job_id}") from None
            raise
        except etree.XMLSyntaxError as e:
            raise DatabaseError(f"record of {job_id} is damaged: {e}") from e
        job = GridJob(root)
        job.disk_key = key
        if upgrade(root, f"record {job_id}") == summary.RECORD_SCHEMA:
            job.source = data  # (else: migrated in memory, no longer what the file holds)
        return job

    def _write(self, job: GridJob) -> None:
        path = self.home.record(job.id)
        atomic_write(path, job.tostring())
        job.disk_key = disk_key(path)
        self._write_summary(job)

    def _write_summary(self, job: GridJob) -> None:
        counts = job.counts()
        terminal = job.state.terminal
        unsubmitted = counts.get("PLANNED", 0) + counts.get("SUBMITTING", 0)
        data = summary.render(
            job.state.name,
            exit_code=job.exit_code if terminal else None,
            message=failure_reason(job) if job.state is GramState.FAILED else None,
            unsubmitted=unsubmitted,
            cancel=job.cancel_requested,
            retry_at=job.retry_at(unsubmitted) if unsubmitted else None,
        )
        in_batch = 0 if terminal else sum(counts.get(s, 0) for s in summary.IN_BATCH_STATES)
        data += summary.in_batch_lines(in_batch, job.plan.get("queue") or "")  # (what jim.caps counts)
        atomic_write(self.home.summary(job.id), data)

    # -- operations ----------------------------------------------------------
    def create(self, job: GridJob) -> None:
        """Record a new grid job: record, summary, then index (the record is the truth)."""
        self.home.ensure()
        self._install_stylesheet()
        if not self.home.index.exists() and not any(self.home.db.glob("*.xml")):
            self._write_index(etree.Element("index", schemaVersion=SCHEMA_VERSION))
        with locked(self.home.db_lock(job.id), self.lock_timeout):
            if self.exists(job.id):
                raise DatabaseError(f"grid job {job.id} already exists")
            self._write(job)
        self._index_update(job)

    @contextlib.contextmanager
    def update(self, job_id: str, *, compare: bool = True, known: GridJob | None = None) -> Iterator[GridJob]:
        """Read-modify-write one record under its lock; written only if changed.

        ``compare=False``: the caller changes it for sure; written without
        serializing it twice more to find out (a third of the cost at
        thousands of local jobs).  ``known``: a record this process read or
        wrote itself; used instead of parsing the file again when the file is
        still the one it was read from or written to (same inode, size and
        modification time).  A record of an older schema version, brought up
        to date when read, is written at this jim's version with its first
        change (and only then).
        """
        with locked(self.home.db_lock(job_id), self.lock_timeout):
            fresh = (
                known is not None
                and known.disk_key is not None
                and known.disk_key == disk_key(self.home.record(job_id), missing=True)
            )
            job = known if known is not None and fresh else self.read(job_id)
            if not compare:
                before = None
            elif job is not known and job.source is not None:
                before = job.source  # (just read: the file's bytes are what it serializes to)
            else:
                before = job.tostring()
            state_before = job.state
            try:
                yield job
            except BaseException:
                job.disk_key = None  # changed in memory, not on disk: never to be reused
                raise
            if not compare or job.tostring() != before:
                job.set("updated", now_iso())
                self._write(job)
        if job.state is not state_before:
            self._index_update(job)

    def delete(self, job_id: str) -> None:
        """Forget a grid job entirely (record, summary, work area, index line)."""
        with locked(self.home.db_lock(job_id), self.lock_timeout):
            for p in (self.home.record(job_id), self.home.summary(job_id)):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            shutil.rmtree(self.home.job_dir(job_id), ignore_errors=True)
        with locked(self.home.index_lock, self.lock_timeout):
            root = self._read_index()
            for el in root.findall(f"job[@id='{job_id}']"):
                root.remove(el)
            self._write_index(root)

    def forget(self, job_ids: list[str]) -> None:
        """Forget grid jobs whose work areas are gone already (:mod:`jim.purge`): their index lines in one
        rewrite of the index, then each record and poll summary, under its lock.  Stopped between the two,
        a record is left without its index line: the next purge finds it among the records, and forgets it."""
        gone = {self.home.check_id(job_id) for job_id in job_ids}
        if not gone:
            return
        with locked(self.home.index_lock, self.lock_timeout):
            root = self._read_index()
            for el in [el for el in root.iterfind("job") if el.get("id") in gone]:
                root.remove(el)
            self._write_index(root)
        for job_id in job_ids:
            with locked(self.home.db_lock(job_id), self.lock_timeout):
                for p in (self.home.record(job_id), self.home.summary(job_id)):
                    with contextlib.suppress(FileNotFoundError):
                        p.unlink()

    # -- index -------------------------------------------------------------
    def _read_index(self) -> etree._Element:
        """The index; rebuilt from the records when it is missing, damaged or of a newer version."""
        try:
            root = etree.parse(str(self.home.index), PARSER).getroot()
            upgrade(root, "the index")
        except (OSError, etree.XMLSyntaxError, DatabaseError):
            return self.rebuild_index_root()
        return root

    def rebuild_index_root(self) -> etree._Element:
        """The index rebuilt from the records themselves (it is only a cache); a record this jim cannot
        read (damaged, of a newer version) has no line in it."""
        root = etree.Element("index", schemaVersion=SCHEMA_VERSION)
        for path in sorted(self.home.db.glob("*.xml")):
            if path.name == "index.xml":
                continue
            try:
                job = GridJob(etree.parse(str(path), PARSER).getroot())
                upgrade(job.root, f"record {path.stem}")
            except (OSError, etree.XMLSyntaxError, DatabaseError):
                continue
            root.append(self._index_entry(job))
        return root

    @staticmethod
    def _index_entry(job: GridJob) -> etree._Element:
        return etree.Element(
            "job",
            id=job.id,
            state=job.state.name,
            jobtype=job.jobtype,
            name=job.get("name") or "",
            created=required(job.root, "created"),
            updated=required(job.root, "updated"),
            localJobs=str(len(child(job.root, "localjobs"))),
            owner=job.get("owner") or "",
        )

    def _write_index(self, root: etree._Element) -> None:
        """The index, with the stylesheet instruction so that a browser renders it too."""
        doc = etree.ElementTree(root)
        if root.getprevious() is None:
            root.addprevious(stylesheet_pi())
        atomic_write(self.home.index, etree.tostring(doc, xml_declaration=True, encoding="UTF-8"))

    def _index_update(self, job: GridJob) -> None:
        with locked(self.home.index_lock, self.lock_timeout):
            root = self._read_index()
            entry = self._index_entry(job)
            existing = root.find(f"job[@id='{job.id}']")
            if existing is not None:
                root.replace(existing, entry)
            else:
                root.append(entry)
            self._write_index(root)

    def active_ids(self) -> list[str]:
        """Grid jobs whose state is not terminal (from the poll summaries: cheap)."""
        out = []
        for path in self.home.db.glob("*.state"):
            try:
                found = summary.read(path)
            except OSError:
                continue
            if found is not None and not summary.terminal(found):
                out.append(path.stem)
        return sorted(out)

    def schema_versions(self) -> dict[str, int | None]:
        """The schema version of every record (id -> version; None: not a record jim can read), from
        the first bytes of each file (``jim doctor``)."""
        return {
            path.stem: _file_version(path) for path in sorted(self.home.db.glob("*.xml")) if path.name != "index.xml"
        }

    def index_version(self) -> int | None:
        """The schema version of the index file (None: there is none, or it says none jim can read)."""
        return _file_version(self.home.index)

    def list(self) -> list[dict[str, str]]:
        """Every grid job of the index, newest first."""
        root = self._read_index()
        jobs = [{str(k): str(v) for k, v in el.attrib.items()} for el in root.findall("job")]
        jobs.sort(key=lambda j: j.get("created", ""), reverse=True)
        return jobs


def _file_version(path: Path) -> int | None:
    """The schema version in the start tag of ``path``'s root, read 64 KiB at a time up to it and no
    further, never through a link; None when it cannot be read or says none."""
    try:
        fd, _st = open_regular(path, follow=False)
    except OSError:
        return None
    try:
        return file_version(iter(lambda: os.read(fd, 1 << 16), b""))
    except OSError:
        return None
    finally:
        os.close(fd)


def validate(path: Path) -> list[str]:
    """Errors of one XML file of the database against the shipped RelaxNG schema."""
    schema_file = resources.files("jim").joinpath("schema", "jim.rng")
    schema = etree.RelaxNG(etree.parse(str(schema_file)))
    doc = etree.parse(str(path), PARSER)
    if schema.validate(doc):
        return []
    return [f"{e.line}: {e.message}" for e in schema.error_log]
