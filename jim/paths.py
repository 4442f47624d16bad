"""Where jim keeps things under its home (``$JIM_HOME``, default ``~/.jim``).

::

    $JIM_HOME/                 0700, private to its user
      db/                      the XML database: <id>.xml per grid job, index.xml,
                               <id>.state (the one-line answer for poll), jim.xsl
      jobs/<id>/               one grid job's work area: jim.log, sandbox.tar.gz,
                               wrapper.py, local/<k>/ per local job, the output tar
      locks/                   record, index and output locks; the worker's and the
                               monitor's (see jim.background)
      cache/                   batch-status caches shared by every jim call
      log/jim.log              jim's own log
"""

from __future__ import annotations

import os
from pathlib import Path

from jim import summary
from jim.errors import JobNotFound
from jim.jobid import local_dir_name, valid_job_id


class Home:
    """The paths of one jim home; :meth:`ensure` creates it."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    def ensure(self) -> Home:
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
        return Path(summary.path(self.root, self.check_id(job_id)))

    def job_dir(self, job_id: str) -> Path:
        return self.jobs / self.check_id(job_id)

    def local_dir(self, job_id: str, index: int, attempt: int = 1) -> Path:
        """Where the wrapper of one attempt of a local job writes (see :func:`jim.jobid.local_dir_name`)."""
        return self.job_dir(job_id) / "local" / local_dir_name(index, attempt)

    def db_lock(self, job_id: str) -> Path:
        return self.locks / f"{self.check_id(job_id)}.db.lock"

    def final_lock(self, job_id: str) -> Path:
        """Held while the outputs of a grid job are gathered (see jim.outputs)."""
        return self.locks / f"{self.check_id(job_id)}.final.lock"

    @property
    def index_lock(self) -> Path:
        return self.locks / "index.lock"

    @property
    def index(self) -> Path:
        return self.db / "index.xml"
