"""``arcrenew`` for the jobs in the LRMS: the renewed delegation written into the job's ``proxy`` file.

``arcrenew`` (REST: ``PUT <endpoint>/delegations/<id>``) replaces the delegated
proxy in A-REX's delegation store, ``<controldir>/delegations``: a root-only tree
of files, one per delegation, named by the delegation's ``uid`` cut into parts of
3 characters (``bf1fb1f64567`` is ``bf1/fb1/f64/567``, ``FileRecord::uid_to_path``),
indexed by the sqlite database ``<controldir>/delegations/list`` (tables
``rec(id, owner, uid, meta)``: a delegation; ``lock(lockid, uid)``: the job
``lockid`` uses the delegation ``uid``).  A-REX then means to rewrite the proxy
file of every job that uses it (``UpdateProxyFile`` of ``rest.cpp``), but that
code never matches: ``job_local_read_delegationid()`` reads the ``local`` file's
``cleanuptime`` key, not ``delegationid`` (ARC 6.17.0 and 7.0.0rc3,
``grid-manager/files/ControlFileHandling.cpp``).  The job's ``proxy`` file is
written again only at its next state change (``JobsList::UpdateJobCredentials``),
for a job of jim's when it leaves INLRMS: too late for its local jobs.

Each scan pass therefore does it (:func:`renew_pass`), as root, for the jobs the
pass found in the LRMS:

* ONE read-only query of the store's database per control directory
  (``file:...?mode=ro``, bounded in time and rows) gives each job's delegations
  (its rows of ``lock``); when a job holds several, the one its ``local`` file
  names (``delegationid=``) is its own, as A-REX's ``UpdateJobCredentials`` takes it;
* a job whose ``proxy`` file is no older than the store's file and of the same
  size is left alone (two ``lstat``); otherwise both are read and compared;
* the store's file is opened one directory at a time, never through a symbolic
  link, and must be a regular file owned by root (this process), at most
  :data:`MAX_CREDENTIAL_BYTES`, holding a certificate;
* a job whose ``proxy`` file holds no certificate (a token job's bearer token)
  is not an X.509 job: never touched;
* a credential that differs replaces the job's file as A-REX's ``FileCreate``
  does: a new file ``<proxy>.XXXXXX`` in the same directory, written, owned by
  the job's owner (``fchown``), mode 0600, ``fsync``, renamed over the old one.
  jim's monitor, as the job's owner, then sees a new version and copies it
  (:mod:`jim.credentials`).

Nothing here fails the scan: a job that cannot be renewed is one line on the
scan's stderr (A-REX's helper log), and the pass goes on.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterable
from urllib.parse import quote

from jim.arc import controldir as cd
from jim.arc.options import log
from jim.arc.owners import MAX_LOCAL_BYTES, ArcJob
from jim.safeio import NotRegular, atomic_write, open_regular, read_at_most

#: The delegation store's directory in the control directory (A-REX running as root: ``GMConfig::DelegationDir``).
DELEGATIONS = "delegations"
#: The store's sqlite database.
STORE_DB = "list"
#: The largest credential read, from the store or from a job's proxy file.
MAX_CREDENTIAL_BYTES = 256 * 1024
#: The largest store database opened.
MAX_DB_BYTES = 256 * 1024 * 1024
#: Seconds the store's query may wait for A-REX's write lock, and may run.
DB_TIMEOUT = 2.0
#: Job ids per query (sqlite's smallest limit of bound variables is 999).
IDS_PER_QUERY = 900
#: Rows of ``lock`` read per query, at most.
MAX_ROWS = 100_000
#: What a proxy holds.
CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
#: A delegation's ``uid`` as A-REX makes them (no ``/``, no dot: its parts are path names).
_UID = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The mode of a job's proxy file (A-REX's ``job_proxy_write_file``).
PROXY_MODE = 0o600


class RenewError(Exception):
    """Why a job's renewed delegation was not written into its proxy file (one line)."""


def store_parts(uid: str) -> list[str]:
    """The path of delegation ``uid``'s file under the store, as ``FileRecord::uid_to_path`` cuts it:
    3 characters a directory while more than 4 remain, the rest the file's name."""
    if not _UID.fullmatch(uid):
        raise RenewError(f"the store names a delegation {uid[:40]!r} that is no uid")
    parts, p = [], 0
    while len(uid) > p + 4:
        parts.append(uid[p : p + 3])
        p += 3
    return [*parts, uid[p:]]


def renew_pass(jobs: Iterable[ArcJob]) -> int:
    """Pass the store's renewed delegations on to the jobs' proxy files; how many files were replaced."""
    by_dir: dict[str, list[ArcJob]] = {}
    for job in jobs:
        by_dir.setdefault(job.controldir, []).append(job)
    replaced = 0
    for controldir, some in by_dir.items():
        try:
            locks = job_delegations(controldir, [j.arc_id for j in some])
        except RenewError as e:
            log(f"delegations of {controldir}: {e} (no proxy file renewed)")
            continue
        for job in some:
            try:
                replaced += renew_job(job, locks.get(job.arc_id, []))
            except (OSError, ValueError, RenewError) as e:
                log(f"job {job.arc_id}: renewed delegation not passed on: {e}")
    return replaced


def job_delegations(controldir: str, arc_ids: list[str]) -> dict[str, list[tuple[str, str | None]]]:
    """ARC id -> [(delegation uid, delegation id or None when ``rec`` has no such uid)], from the store's
    ``lock`` table; {} when there is no store (A-REX keeps none before the first delegation)."""
    db = os.path.join(controldir, DELEGATIONS, STORE_DB)
    try:
        st = os.lstat(db)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise RenewError(f"cannot look at {db}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > MAX_DB_BYTES:
        raise RenewError(f"{db} is not a regular file of uid {os.geteuid()} of at most {MAX_DB_BYTES} bytes")
    # (lazy: only a pass with jobs in the LRMS opens the store; the scan of an idle CE stays light)
    import sqlite3

    found: dict[str, list[tuple[str, str | None]]] = {}
    deadline = time.monotonic() + DB_TIMEOUT
    try:
        conn = sqlite3.connect(f"file:{quote(db)}?mode=ro", uri=True, timeout=DB_TIMEOUT, isolation_level=None)
    except sqlite3.Error as e:
        raise RenewError(f"cannot open {db}: {e}") from None
    try:
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        for start in range(0, len(arc_ids), IDS_PER_QUERY):
            chunk = arc_ids[start : start + IDS_PER_QUERY]
            rows = conn.execute(
                "SELECT lock.lockid, lock.uid, rec.id FROM lock LEFT JOIN rec ON rec.uid = lock.uid "
                f"WHERE lock.lockid IN ({','.join('?' * len(chunk))}) LIMIT {MAX_ROWS}",
                chunk,
            ).fetchall()
            for lockid, uid, rec_id in rows:
                entry = (str(uid), None if rec_id is None else str(rec_id))
                if entry not in found.setdefault(str(lockid), []):
                    found[str(lockid)].append(entry)
    except sqlite3.Error as e:
        raise RenewError(f"cannot read {db}: {e}") from None
    finally:
        conn.close()
    return found


def renew_job(job: ArcJob, delegations: list[tuple[str, str | None]]) -> int:
    """Write job's delegation from the store into its proxy file when they differ: 1 when written, else 0."""
    if not delegations:
        return 0  # (no delegation: its client delegated nothing; ARC 7 keeps a token job's token as one)
    proxy = cd.job_file(job.controldir, job.arc_id, "proxy", job.layout)
    try:
        pst = os.lstat(proxy)
    except FileNotFoundError:
        return 0
    if not stat.S_ISREG(pst.st_mode) or pst.st_uid != job.uid:
        raise RenewError(f"its proxy file {proxy} is not a regular file of the job's owner (uid {job.uid})")
    uid = _the_delegation(job, delegations)
    store = os.path.join(job.controldir, DELEGATIONS)
    parts = store_parts(uid)
    try:
        sst = os.lstat(os.path.join(store, *parts))
    except FileNotFoundError:
        raise RenewError(f"the store has no file for its delegation {uid}") from None
    if sst.st_size == pst.st_size and sst.st_mtime_ns <= pst.st_mtime_ns:
        return 0  # (the job's file was written from this version of the store's, or later)
    current = _read_proxy_file(proxy)
    if CERTIFICATE not in current:
        return 0  # (not an X.509 job's proxy: a token job's bearer token is never replaced by a proxy)
    renewed = read_store_file(store, parts)
    if renewed == current:
        return 0
    if CERTIFICATE not in renewed:
        raise RenewError(f"the store's file of delegation {uid} holds no certificate")
    replace_proxy(proxy, renewed, job.uid, job.gid)
    log(f"job {job.arc_id}: its proxy file now holds its renewed delegation {uid}")
    return 1


def _the_delegation(job: ArcJob, delegations: list[tuple[str, str | None]]) -> str:
    """The uid of the job's own delegation among those it locks (the one its ``local`` file names)."""
    known = [(uid, rec_id) for uid, rec_id in delegations if rec_id is not None]
    if not known:
        raise RenewError(f"its delegation {delegations[0][0][:64]} has no record in the store")
    if len(known) == 1:
        return known[0][0]
    named = _local_delegation_id(job.local_path)
    for uid, rec_id in known:
        if rec_id == named:
            return uid
    raise RenewError(f"it uses {len(known)} delegations and its local file names none of them")


def _local_delegation_id(path: str) -> str:
    """``delegationid=`` of the job's ``local`` file (read bounded, not through a link); "" when none."""
    try:
        fd, _st = open_regular(path, follow=False)
    except (OSError, NotRegular):
        return ""
    try:
        text = read_at_most(fd, MAX_LOCAL_BYTES).decode("utf-8", "replace")
    finally:
        os.close(fd)
    for line in text.splitlines():
        if line.startswith("delegationid="):
            return line[len("delegationid=") :].strip()
    return ""


def _read_proxy_file(path: str) -> bytes:
    try:
        fd, _st = open_regular(path, follow=False)
    except NotRegular as e:
        raise RenewError(f"its proxy file {path} is a {e}") from None
    try:
        return read_at_most(fd, MAX_CREDENTIAL_BYTES + 1)
    finally:
        os.close(fd)


def read_store_file(store: str, parts: list[str]) -> bytes:
    """The store's file ``store/parts...``: each directory opened without following a symbolic link, the
    file a regular one owned by this process's account (root), at most :data:`MAX_CREDENTIAL_BYTES`."""
    where = "/".join(parts)
    dirflags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(store, dirflags)
    except OSError as e:
        raise RenewError(f"cannot open the delegation store {store}: {e.strerror}") from None
    try:
        for part in parts[:-1]:
            nfd = os.open(part, dirflags, dir_fd=fd)
            os.close(fd)
            fd = nfd
        ffd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=fd)
    except OSError as e:  # (ELOOP or ENOTDIR: a symbolic link on the way)
        raise RenewError(f"cannot open the store's file {where} without following a link: {e.strerror}") from None
    finally:
        os.close(fd)
    try:
        st = os.fstat(ffd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise RenewError(f"the store's file {where} is not a regular file of uid {os.geteuid()}")
        if st.st_size > MAX_CREDENTIAL_BYTES:
            raise RenewError(f"the store's file {where} is larger than {MAX_CREDENTIAL_BYTES} bytes")
        data = read_at_most(ffd, MAX_CREDENTIAL_BYTES + 1)
    finally:
        os.close(ffd)
    if len(data) > MAX_CREDENTIAL_BYTES:
        raise RenewError(f"the store's file {where} is larger than {MAX_CREDENTIAL_BYTES} bytes")
    return data


def replace_proxy(path: str, data: bytes, uid: int, gid: int) -> None:
    """Replace the job's proxy file as A-REX's ``FileCreate`` does: a new file beside it (never through a
    link), written, owned by ``uid``:``gid``, mode 0600, synced, renamed over ``path``."""
    atomic_write(path, data, mode=PROXY_MODE, owner=(uid, gid) if os.geteuid() == 0 else None)
