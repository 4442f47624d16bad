"""Where jim keeps things under its home (``$JIM_HOME``, default ``~/.jim``).

::

    $JIM_HOME/                 0700, private to its user
      db/                      the XML database: <id>.xml per grid job, index.xml,
                               <id>.state (the one-line answer for poll), jim.xsl
      jobs/<id>/               one grid job's work area: jim.log, sandbox.tar.gz,
                               wrapper.py, local/<k>/ per local job, the output tar
      locks/                   db, worker and monitor locks
      cache/                   batch-status caches shared by every jim call
      log/jim.log              jim's own log
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from jim.errors import JobNotFound

_JOB_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6,12}")


def valid_job_id(job_id: str) -> bool:
    return isinstance(job_id, str) and _JOB_ID.fullmatch(job_id) is not None


class Home:
    def __init__(self, root: Path):
        self.root = Path(root)

    def ensure(self) -> "Home":
        """Create the directory tree, private to this user."""
        for d in (self.root, self.db, self.jobs, self.locks, self.cache, self.logdir):
            try:
                os.mkdir(d, 0o700)
            except FileExistsError:
                pass
        return self

    @property
    def db(self) -> Path:
        return self.root / "db"

    @property
    def jobs(self) -> Path:
        return self.root / "jobs"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def logdir(self) -> Path:
        return self.root / "log"

    def check_id(self, job_id: str) -> str:
        """Refuse anything that is not a jim job id (ids become path names)."""
        if not valid_job_id(job_id):
            raise JobNotFound(f"no grid job {job_id!r} (not a jim job id)")
        return job_id

    def record(self, job_id: str) -> Path:
        return self.db / f"{self.check_id(job_id)}.xml"

    def summary(self, job_id: str) -> Path:
        return self.db / f"{self.check_id(job_id)}.state"

    def job_dir(self, job_id: str) -> Path:
        return self.jobs / self.check_id(job_id)

    def local_dir(self, job_id: str, index: int) -> Path:
        return self.job_dir(job_id) / "local" / str(int(index))

    def db_lock(self, job_id: str) -> Path:
        return self.locks / f"{self.check_id(job_id)}.db.lock"

    def worker_lock(self, job_id: str) -> Path:
        return self.locks / f"{self.check_id(job_id)}.worker.lock"

    @property
    def monitor_lock(self) -> Path:
        return self.locks / "monitor.lock"

    @property
    def index_lock(self) -> Path:
        return self.locks / "index.lock"

    @property
    def index(self) -> Path:
        return self.db / "index.xml"
