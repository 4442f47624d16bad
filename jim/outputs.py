"""Gathering a grid job's outputs into one tar, as the JIM job managers did.

When every local job of a grid job has ended (normally or by cancel), jim
writes ``<id>.tar.gz`` (in the grid job's directory, or where the
``outputtar`` attribute says) holding, under ``<id>/``:

* ``MANIFEST.json`` and ``MANIFEST.txt``: per local job its slice, final
  state, exit code, evidence, batch id, and which files it left;
* ``stdout.<k>[.<batch id>]``, ``stderr.<k>[...]``, ``wrapper.<k>[...].log``
  for every local job ``k`` (the file name stem plus the local job's suffix);
* the outputs each local job produced (already suffixed by the wrapper);
* ``jim.log`` (jim's log of this grid job) and ``record.xml`` (its database record).

It also writes the merged stdout and stderr of the local jobs, in local-job
order, to the grid job's own ``stdout`` and ``stderr`` paths when the
description names them (GRAM streams these back to the client).

A local job whose directory is missing is listed in the MANIFEST as such; the
tar is still written.  Writing is atomic (temporary name, then rename), so a
tar that exists is complete.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import time
from pathlib import Path
from typing import Any

from jim.db import Database, GridJob
from jim.errors import InvalidAttribute
from jim.locks import locked
from jim.timestamps import now_iso

MAX_MERGED = 64 * 1024 * 1024  # never copy more than this much merged output


def _suffix(index: int, batch_id: str | None) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", batch_id or "")
    return f"{index}.{safe}" if safe else str(index)


def tar_path_for(db: Database, job: GridJob) -> Path:
    wanted = job.description().get("outputtar")
    if wanted and isinstance(wanted[0], str) and wanted[0]:
        return Path(wanted[0])
    return db.home.job_dir(job.id) / f"{job.id}.tar.gz"


def check_output_tar(path: str, directory: str | None) -> str:
    """Resolve and check a user-given ``outputtar`` at submit time."""
    p = Path(path)
    if not p.is_absolute():
        p = Path(directory or os.path.expanduser("~")) / p
    if not p.name.endswith((".tar.gz", ".tgz")):
        raise InvalidAttribute(f"outputtar must name a .tar.gz file, got {path!r}")
    if not p.parent.is_dir():
        raise InvalidAttribute(f"outputtar: directory {str(p.parent)!r} does not exist")
    if not os.access(p.parent, os.W_OK):
        raise InvalidAttribute(f"outputtar: directory {str(p.parent)!r} is not writable")
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
    root = job.id
    local_jobs: list[dict[str, Any]] = []
    manifest = {
        "grid_job": job.id,
        "jobtype": job.jobtype,
        "created": job.get("created"),
        "gathered": now_iso(),
        "plan": job.plan,
        "local_jobs": local_jobs,
    }
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar:
        for lj in job.local_jobs():
            k = lj.index
            d = home.local_dir(job.id, k)
            sfx = _suffix(k, lj.batch_id)
            files = []
            for name, arc in (
                ("stdout", f"stdout.{sfx}"),
                ("stderr", f"stderr.{sfx}"),
                ("wrapper.log", f"wrapper.{sfx}.log"),
            ):
                if _add_file(tar, d / name, f"{root}/{arc}"):
                    files.append(arc)
            outdir = d / "outputs"
            if outdir.is_dir():
                for f in sorted(outdir.iterdir()):
                    if f.is_file() and _add_file(tar, f, f"{root}/outputs/{f.name}"):
                        files.append(f"outputs/{f.name}")
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
                    "files": files,
                    "directory_missing": not d.is_dir(),
                }
            )
        _add_file(tar, home.job_dir(job.id) / "jim.log", f"{root}/jim.log")
        record = job.tostring()
        _add_bytes(tar, f"{root}/record.xml", record)
        _add_bytes(tar, f"{root}/MANIFEST.json", json.dumps(manifest, indent=1).encode())
        _add_bytes(tar, f"{root}/MANIFEST.txt", _manifest_text(manifest).encode())
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(tmp, target)
    return target


def _add_bytes(tar: tarfile.TarFile, arcname: str, data: bytes) -> None:
    info = tarfile.TarInfo(arcname)
    info.size = len(data)
    info.mode = 0o600
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _manifest_text(m: dict) -> str:
    lines = [
        f"grid job {m['grid_job']} ({m['jobtype']}), gathered {m['gathered']}",
        "",
        f"{'#':>5}  {'state':<10} {'exit':>4}  {'evidence':<20} {'batch id':<24} slice",
    ]
    for lj in m["local_jobs"]:
        sl = " ".join(f"{k}={v}" for k, v in lj["slice"].items())
        lines.append(
            f"{lj['index']:>5}  {lj['state']:<10} {'' if lj['exit_code'] is None else lj['exit_code']:>4}  "
            f"{lj['evidence'] or '':<20} {lj['batch_id'] or '':<24} {sl}"
            + ("  [directory missing]" if lj["directory_missing"] else "")
        )
    return "\n".join(lines) + "\n"


def merge_stdio(db: Database, job: GridJob) -> None:
    """Concatenate the local jobs' stdout/stderr into the grid job's stdout/stderr files."""
    desc = job.description()
    for stream in ("stdout", "stderr"):
        vals = desc.get(stream) or []
        dest = vals[0] if vals and isinstance(vals[0], str) else ""
        if not dest or dest == "/dev/null" or "://" in dest:
            continue
        dest_path = Path(dest)
        if not dest_path.parent.is_dir():
            continue
        written = 0
        tmp = dest_path.with_name(f".{dest_path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                for lj in job.local_jobs():
                    src = db.home.local_dir(job.id, lj.index) / stream
                    try:
                        with open(src, "rb") as f:
                            while written < MAX_MERGED:
                                chunk = f.read(min(1 << 20, MAX_MERGED - written))
                                if not chunk:
                                    break
                                out.write(chunk)
                                written += len(chunk)
                    except FileNotFoundError:
                        continue
            os.replace(tmp, dest_path)
        except OSError:
            tmp.unlink(missing_ok=True)


def finalize(db: Database, job_id: str, *, max_failed_fraction: float = 0.0, lock_timeout: float = 30.0) -> bool:
    """Gather outputs of a grid job whose local jobs have all ended; True if done now."""
    with locked(db.home.final_lock(job_id), lock_timeout):
        job = db.read(job_id)
        if job.outputs_gathered or not all(lj.state.terminal for lj in job.local_jobs()):
            return False
        tar = gather(db, job)
        merge_stdio(db, job)
        with db.update(job_id) as rec:
            rec.set_outputs(tar)
            rec.recompute(max_failed_fraction=max_failed_fraction)
        return True
