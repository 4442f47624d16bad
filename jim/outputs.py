"""Gathering a grid job's outputs into one tar, as the JIM job managers did.

When every local job of a grid job has ended (normally or by cancel), jim
writes ``<id>.tar.gz`` (in the grid job's directory, or where the
``outputtar`` attribute says) holding, under ``<id>/``:

* ``MANIFEST.json`` and ``MANIFEST.txt``: per local job its slice, final
  state, exit code, evidence, batch id, which files it left, and every
  attempt it took, saying which one counted (the last);
* ``stdout.<k>[.<batch id>]``, ``stderr.<k>[...]``, ``wrapper.<k>[...].log``
  for every local job ``k`` (the file name stem plus the local job's suffix),
  of the attempt that counted;
* the outputs each local job produced in the attempt that counted (already
  suffixed by the wrapper); an earlier attempt's outputs are never gathered,
  so a late first attempt cannot stand beside or over the second's results;
* ``kept/<k>/<name>``: the declared output files (``keepfiles``) of each local job, as its
  attempt that counted left them; :mod:`jim.keep` merges them into the grid job's directory
  under their declared names, after the tar and before the grid job reports its end;
* ``attempts/`` the stdout, stderr and wrapper log of each earlier attempt
  (``stdout.<k>.a<n>[.<batch id>]``...), for a look at why it ended;
* ``jim.log`` (jim's log of this grid job) and ``record.xml`` (its database record).

It also writes the merged stdout and stderr of the local jobs, in local-job
order, to the grid job's own ``stdout`` and ``stderr`` paths when the
description names them (GRAM streams these back to the client).

A local job whose directory is missing is listed in the MANIFEST as such; the
tar is still written.  Writing is atomic, so a tar that exists is complete.

The user names these files, so they are written with care:

* relative ``stdout``, ``stderr`` and ``outputtar`` are made absolute at submit
  against the grid job's ``directory`` (itself relative to the submitter's home,
  the default), as GRAM does, and recorded so (:func:`resolve_user_paths`); a
  path into jim's own home (symbolic links of its existing directories
  resolved) is refused with 134 at submit and never written later;
* each file is written whole by :func:`jim.safeio.atomic_write` (a new
  temporary file beside it, created exclusively, never through a symbolic link,
  mode 0600, renamed into place): jim never writes through a link nor truncates
  a file it did not create;
* an output tar that cannot be written is tried again; after
  :data:`MAX_GATHER_TRIES` tries the grid job ends FAILED with the reason.
"""

from __future__ import annotations

import errno
import functools
import io
import json
import os
import re
import tarfile
import time
from pathlib import Path
from typing import Any, BinaryIO

from jim import keep
from jim.db import Database
from jim.errors import InvalidAttribute
from jim.jobdesc import JobDescription, Value
from jim.jobid import local_dir_name
from jim.locks import locked
from jim.log import for_job
from jim.record import GridJob
from jim.safeio import atomic_write, open_regular
from jim.site import Site
from jim.status import attempts_of
from jim.timestamps import now_iso

MAX_MERGED = 64 * 1024 * 1024  # never copy more than this much merged output


def _suffix(index: int, batch_id: str | None, attempt: int = 1) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", batch_id or "")
    base = f"{index}.a{attempt}" if attempt > 1 else str(index)
    return f"{base}.{safe}" if safe else base


def tar_path_for(db: Database, job: GridJob) -> Path:
    wanted = job.description().get("outputtar")
    if wanted and isinstance(wanted[0], str) and wanted[0]:
        return Path(wanted[0])
    return db.home.job_dir(job.id) / f"{job.id}.tar.gz"


#: The attributes naming files jim writes for the user: made absolute at submit, never into jim's home.
USER_PATHS = ("stdout", "stderr", "outputtar")


def job_directory(directory: str | None) -> Path:
    """The grid job's ``directory`` as GRAM reads it: relative to the submitter's home, which is also
    the default."""
    home = Path(os.path.expanduser("~"))
    return home / directory if directory else home


def resolve_user_paths(desc: JobDescription, jim_home: str | os.PathLike[str]) -> None:
    """At submit: ``stdout``, ``stderr`` and ``outputtar`` made absolute against the grid job's
    ``directory`` and recorded so; a path into jim's own home is refused (134)."""
    base = job_directory(desc.get("directory"))
    for name in USER_PATHS:
        values = desc.attrs.get(name)
        if not values:
            continue
        resolved: list[Value] = []
        for value in values:
            if not isinstance(value, str) or not value or (name != "outputtar" and _not_a_file(value)):
                resolved.append(value)  # (a URL, or GRAM's (destination tag) form: not a file jim writes)
                continue
            if "\0" in value or len(value) > 4096:
                raise InvalidAttribute(f"{name} is not a usable path")
            path = Path(os.path.normpath(base / value))
            if inside_home(path, jim_home):
                raise InvalidAttribute(f"{name} may not name a file in jim's own directory: {value!r}")
            resolved.append(check_output_tar(str(path), None) if name == "outputtar" else str(path))
        desc.attrs[name] = resolved


def _not_a_file(value: str) -> bool:
    """A stdout/stderr value that is not a local file jim writes (a URL, /dev/null)."""
    return value == "/dev/null" or "://" in value


def inside_home(path: Path, jim_home: str | os.PathLike[str]) -> bool:
    """Whether ``path`` (symbolic links of its existing directories resolved) is in jim's home."""
    home = Path(os.path.realpath(jim_home))
    where = Path(os.path.realpath(path.parent)) / path.name
    return where == home or home in where.parents


def check_output_tar(path: str, directory: str | None) -> str:
    """Resolve and check a user-given ``outputtar`` at submit time."""
    p = Path(path)
    if not p.is_absolute():
        p = job_directory(directory) / p
    if not p.name.endswith((".tar.gz", ".tgz")):
        raise InvalidAttribute(f"outputtar must name a .tar.gz file, got {path!r}")
    if not p.parent.is_dir():
        raise InvalidAttribute(f"outputtar: directory {str(p.parent)!r} does not exist")
    if not os.access(p.parent, os.W_OK):
        raise InvalidAttribute(f"outputtar: directory {str(p.parent)!r} is not writable")
    if p.is_dir():
        raise InvalidAttribute(f"outputtar: {str(p)!r} is a directory")
    return str(p)


def _add_file(tar: tarfile.TarFile, src: Path, arcname: str) -> bool:
    try:
        tar.add(str(src), arcname=arcname, recursive=False)
        return True
    except (FileNotFoundError, PermissionError):
        return False


def gather(db: Database, job: GridJob) -> Path:
    """Write the output tar of ``job`` (its local jobs must all have ended)."""
    home = db.home
    target = tar_path_for(db, job)
    local_jobs: list[dict[str, Any]] = []
    manifest = {
        "grid_job": job.id,
        "jobtype": job.jobtype,
        "created": job.get("created"),
        "gathered": now_iso(),
        "plan": job.plan,
        "local_jobs": local_jobs,
    }
    if target != home.job_dir(job.id) / f"{job.id}.tar.gz" and inside_home(target, home.root):
        raise OSError(errno.EPERM, "the output tar may not be written into jim's own directory", str(target))
    atomic_write(target, lambda raw: _write_tar(db, job, raw, manifest))
    return target


def _write_tar(db: Database, job: GridJob, raw: BinaryIO, manifest: dict[str, Any]) -> None:
    home = db.home
    root = job.id
    local_root = home.job_dir(job.id) / "local"
    local_jobs: list[dict[str, Any]] = manifest["local_jobs"]
    with tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar:
        for lj in job.local_jobs():
            k = lj.index
            d = home.local_dir(job.id, k, lj.attempt)
            attempts = []
            for a in attempts_of(lj):  # every attempt; the last one counted
                counted = a["n"] == lj.attempt
                where = local_root / local_dir_name(k, a["n"])
                if counted:
                    files = _logs(tar, where, root, "", _suffix(k, a["batchId"]))
                    files += _outputs(tar, where / "outputs", root)
                    files += keep.add_to_tar(tar, where / keep.KEPT, root, k)
                else:  # an earlier attempt: its logs, apart; never its outputs
                    files = _logs(tar, where, root, "attempts/", _suffix(k, a["batchId"], a["n"]))
                attempts.append(
                    {
                        "n": a["n"],
                        "tag": a["tag"],
                        "batch_id": a["batchId"],
                        "node": a["node"],
                        "state": a["state"],
                        "exit_code": a["exitCode"],
                        "evidence": a["evidence"],
                        "reason": a["reason"],
                        "counted": counted,
                        "next": a["retryReason"],
                        "next_by": a["retryBy"],
                        "files": files,
                    }
                )
            local_jobs.append(
                {
                    "index": k,
                    "tag": lj.tag,
                    "batch_id": lj.batch_id,
                    "slice": lj.slice,
                    "state": lj.state.value,
                    "exit_code": lj.exit_code,
                    "evidence": lj.evidence,
                    "reason": lj.get("reason"),
                    "submitted": lj.get("submitted"),
                    "started": lj.get("started"),
                    "ended": lj.get("ended"),
                    "progress": [{"name": n, "done": a, "total": b} for n, a, b in lj.progress],
                    "files": attempts[-1]["files"],
                    "directory_missing": not d.is_dir(),
                    "attempt": lj.attempt,
                    "attempts": attempts,
                }
            )
        _add_file(tar, home.job_dir(job.id) / "jim.log", f"{root}/jim.log")
        record = job.tostring()
        _add_bytes(tar, f"{root}/record.xml", record)
        _add_bytes(tar, f"{root}/MANIFEST.json", json.dumps(manifest, indent=1).encode())
        _add_bytes(tar, f"{root}/MANIFEST.txt", _manifest_text(manifest).encode())


def _logs(tar: tarfile.TarFile, d: Path, root: str, prefix: str, sfx: str) -> list[str]:
    """An attempt's stdout, stderr and wrapper log into the tar (as ``<prefix>stdout.<sfx>``...)."""
    files = []
    for name, arc in (
        ("stdout", f"{prefix}stdout.{sfx}"),
        ("stderr", f"{prefix}stderr.{sfx}"),
        ("wrapper.log", f"{prefix}wrapper.{sfx}.log"),
    ):
        if _add_file(tar, d / name, f"{root}/{arc}"):
            files.append(arc)
    return files


def _outputs(tar: tarfile.TarFile, outdir: Path, root: str) -> list[str]:
    """The output files of the attempt that counted, under ``outputs/``."""
    files = []
    if outdir.is_dir():
        for f in sorted(outdir.iterdir()):
            if f.is_file() and _add_file(tar, f, f"{root}/outputs/{f.name}"):
                files.append(f"outputs/{f.name}")
    return files


def _add_bytes(tar: tarfile.TarFile, arcname: str, data: bytes) -> None:
    info = tarfile.TarInfo(arcname)
    info.size = len(data)
    info.mode = 0o600
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _manifest_text(m: dict[str, Any]) -> str:
    lines = [
        f"grid job {m['grid_job']} ({m['jobtype']}), gathered {m['gathered']}",
        "",
        f"{'#':>5}  {'state':<10} {'exit':>4}  {'evidence':<20} {'batch id':<24} slice",
    ]
    retried = []
    for lj in m["local_jobs"]:
        sl = " ".join(f"{k}={v}" for k, v in lj["slice"].items())
        lines.append(
            f"{lj['index']:>5}  {lj['state']:<10} {'' if lj['exit_code'] is None else lj['exit_code']:>4}  "
            f"{lj['evidence'] or '':<20} {lj['batch_id'] or '':<24} {sl}"
            + ("  [directory missing]" if lj["directory_missing"] else "")
        )
        if len(lj["attempts"]) > 1:
            retried.append(lj)
    if retried:
        lines += ["", "attempts (the last of each local job counted):"]
        for lj in retried:
            for a in lj["attempts"]:
                code = "" if a["exit_code"] is None else a["exit_code"]
                by = f" (asked by {a['next_by']})" if a.get("next_by") else ""
                why = f"; then: {a['next']}{by}" if a.get("next") else ""
                lines.append(
                    f"{lj['index']:>5}.{a['n']:<3} {a['state'] or '':<10} {code:>4}  {a['batch_id'] or '':<24} "
                    f"on {a['node'] or '?'}{'  [counted]' if a['counted'] else ''}"
                    + (f"  {a['reason']}" if a.get("reason") else "")
                    + why
                )
    return "\n".join(lines) + "\n"


def merge_stdio(db: Database, job: GridJob) -> list[str]:
    """Concatenate the local jobs' stdout/stderr into the grid job's stdout/stderr files; what could
    not be written, one line each."""
    desc = job.description()
    vals = desc.get("directory") or []
    base = job_directory(vals[0] if vals and isinstance(vals[0], str) else None)
    problems = []
    for stream in ("stdout", "stderr"):
        vals = desc.get(stream) or []
        dest = vals[0] if vals and isinstance(vals[0], str) else ""
        if not dest or _not_a_file(dest):
            continue
        dest_path = Path(os.path.normpath(base / dest))
        if not dest_path.parent.is_dir():
            continue
        if inside_home(dest_path, db.home.root):
            problems.append(f"{stream} not written: {str(dest_path)!r} is in jim's own directory")
            continue
        try:
            atomic_write(dest_path, functools.partial(_copy_streams, db, job, stream))
        except OSError as e:
            problems.append(f"{stream} not written: {e.strerror or e} ({str(dest_path)!r})")
    return problems


def _copy_streams(db: Database, job: GridJob, stream: str, out: BinaryIO) -> None:
    written = 0
    for lj in job.local_jobs():
        src = db.home.local_dir(job.id, lj.index, lj.attempt) / stream
        try:
            fd, _st = open_regular(src, follow=False)
        except OSError:
            continue
        with open(fd, "rb") as f:
            while written < MAX_MERGED:
                chunk = f.read(min(1 << 20, MAX_MERGED - written))
                if not chunk:
                    break
                out.write(chunk)
                written += len(chunk)


#: How many times the output tar is tried before the grid job ends FAILED for it.
MAX_GATHER_TRIES = 3


def finalize(site: Site, job_id: str, *, lock_timeout: float = 30.0) -> bool:
    """Gather outputs of a grid job whose local jobs have all ended; True if it ended now.

    An output tar that cannot be written is tried again on the next call; after
    :data:`MAX_GATHER_TRIES` failed tries the grid job ends FAILED, the reason in its record.
    """
    db = site.db
    with locked(db.home.final_lock(job_id), lock_timeout):
        job = db.read(job_id)
        if job.outputs_gathered or job.state.terminal or not all(lj.state.terminal for lj in job.local_jobs()):
            return False
        jlog = for_job("jim.outputs", job_id)
        try:
            tar = gather(db, job)
        except OSError as e:
            reason = f"output tar not written: {e.strerror or e} ({tar_path_for(db, job)})"
            with db.update(job_id) as rec:
                tries = rec.count_try("gather")
                if tries >= MAX_GATHER_TRIES:
                    rec.fail(f"{reason}; gave up after {tries} tries")
            if tries >= MAX_GATHER_TRIES:
                jlog.error("grid job %s FAILED: %s (%d tries)", job_id, reason, tries)
                return True
            if tries == 1:
                jlog.warning("grid job %s: %s; will try again", job_id, reason)
            return False
        for problem in merge_stdio(db, job) + keep.merge(db, job):  # (declared outputs: jim.keep)
            jlog.warning("grid job %s: %s", job_id, problem)
        with db.update(job_id) as rec:
            rec.set_outputs(tar)
            rec.recompute(site.policy)
        return True
