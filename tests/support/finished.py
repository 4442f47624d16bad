"""Finished grid jobs made in process as a real run on fork leaves them: record, work area, output tar.

For the purge's tests (tests/test_purge.py) and its benchmark (bench/bench_purge.py): a :class:`Maker`
makes grid jobs that ended a given time ago, every local job DONE with its exit code, the outputs
gathered into ``jobs/<id>/<id>.tar.gz``, the work area holding what the worker and the wrappers write.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from pathlib import Path

from jim.db import Database
from jim.jobid import new_job_id
from jim.locks import locked
from jim.record import NewJob, new_record
from jim.states import Evidence, LocalState
from jim.timestamps import now_iso

SANDBOX = Path(__file__).resolve().parents[2] / "sandbox"


def _tar(members: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def write_file(path: Path, data: bytes, mode: int = 0o600) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


class Maker:
    """Finished grid jobs, ended ``age`` seconds ago, as a real run leaves them."""

    def __init__(self, db: Database, local_jobs: int, age: float) -> None:
        self.db, self.k, self.age = db, local_jobs, age
        self.helpers = {n: (SANDBOX / n).read_bytes() for n in ("wrapper.py", "jimusage.py", "jimworkdir.py")}
        self.sandbox = _tar({"manifest.json": b"{}" * 300, "bin/jim-progress": (SANDBOX / "jim-progress").read_bytes()})

    def one(self, work_area: bool = True, *, indexed: bool = True) -> str:
        """A finished grid job; ``indexed=False``: its index line left to :meth:`index` (made once for
        thousands, not rewritten for each)."""
        job_id = new_job_id()
        end = time.time() - self.age
        rec = new_record(
            job_id,
            NewJob(
                jobtype="generic",
                name="bench",
                owner="bench",
                adapter="fork",
                description={"executable": ["/bin/sh"], "count": [str(self.k)]},
                source_format="rsl",
                source_text=f"&(executable=/bin/sh)(count={self.k})",
                plan={"localJobs": self.k, "binding": "count"},
                explanation="bench",
                slices=[{} for _ in range(self.k)],
            ),
            created=end - 600,
        )
        for n, lj in enumerate(rec.local_jobs()):
            lj.set_state(LocalState.SUBMITTING, at=end - 590)
            lj.batch_id = f"{100000 + n}:1"
            lj.set_state(LocalState.QUEUED, at=end - 589)
            lj.set_state(LocalState.RUNNING, at=end - 580)
            lj.set_state(LocalState.DONE, at=end - 10, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0)
        job_dir = self.db.home.job_dir(job_id)
        tar = job_dir / f"{job_id}.tar.gz"
        if work_area:
            self._work_area(job_id, job_dir, tar)
        rec.set_outputs(tar)
        rec.root.find("outputs").set("at", now_iso(end))  # type: ignore[union-attr]
        rec.recompute(at=end)
        rec.set("updated", now_iso(end))
        if indexed:
            self.db.create(rec)
        else:
            self.db._write(rec)
        return job_id

    def _work_area(self, job_id: str, job_dir: Path, tar: Path) -> None:
        job_dir.mkdir(mode=0o700, parents=True)
        for name, data in self.helpers.items():
            write_file(job_dir / name, data, 0o700 if name == "wrapper.py" else 0o600)
        write_file(job_dir / "sandbox.tar.gz", self.sandbox)
        write_file(job_dir / "plan.json", json.dumps({"localJobs": self.k, "binding": "count"}).encode() * 8)
        write_file(job_dir / "jim.log", b"2026-11-29 10:00:00,000 INFO    [1] jim.worker: submitted local jobs\n" * 6)
        write_file(job_dir / "submit.intent", "".join(f"{k} 1 1764000000.0\n" for k in range(self.k)).encode())
        members: dict[str, bytes] = {}
        (job_dir / "local").mkdir(mode=0o700)
        for k in range(self.k):
            d = job_dir / "local" / str(k)
            d.mkdir(mode=0o700)
            files = {
                "stdout": f"events {k * 250 + 1}-{k * 250 + 250}\n".encode() * 20,
                "stderr": b"",
                "wrapper.log": b"jim wrapper: phase run started\njim wrapper: payload exited 0\n" * 4,
                "started": json.dumps({"host": "node01", "pid": 1234, "at": 1764000000.0}).encode(),
                "heartbeat": b"1764000100\n",
                "exit_code": b"0\n",
                f"out.{k}.dat": os.urandom(4096),
            }
            for name, data in files.items():
                write_file(d / name, data)
                members[f"{job_id}/{name}.{k}"] = data
        members[f"{job_id}/MANIFEST.json"] = b"{}" * 400
        write_file(tar, _tar(members))

    def index(self) -> None:
        """The index made from the records (after grid jobs made with ``indexed=False``)."""
        with locked(self.db.home.index_lock):
            self.db._write_index(self.db.rebuild_index_root())
