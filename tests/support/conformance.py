"""The conformance suite every batch adapter must pass.

Each adapter's test module subclasses :class:`AdapterConformance` and says how
to reach its batch system (``adapter_config``, ``service_available``, and the
optional hooks below).  The tests drive the real ``jim`` command and the
adapter's own methods against the real system:

* submit many local jobs in bulk (as few submissions as the batch system
  allows: ``bulk_submissions``), to DONE, every one with its own batch id;
* status is three-valued: known, absent, or the query failed;
* a local job that vanishes without evidence is never DONE;
* cancel leaves nothing running, and gathers outputs;
* a submit interrupted after the batch system took it is reconciled by tag:
  every local job runs exactly once;
* a failed status query marks the adapter degraded and changes no state;
* the rendered job script matches its golden file.

``__test__ = False`` keeps pytest from collecting the base class itself.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import time
from pathlib import Path

import psutil
import pytest

from jim.adapters import adapter_class
from jim.adapters.model import LocalJobSpec, SubmitChunk
from jim.paths import Home
from jim.states import LocalState

from support.env import require_service
from support.golden import golden
from support.jimcli import FAST_CONFIG, Jim, processes_of


class AdapterConformance:
    __test__ = False

    #: the ``[batch] adapter`` value
    adapter: str = ""
    #: the command whose failure makes a status query fail (None: the query cannot fail)
    query_command: str | None = None
    #: the text that command prints when the batch system is unreachable
    query_failure_text: str = "cannot contact the batch system"
    #: seconds a trivial local job may take from submit to DONE on this system
    turnaround: float = 60.0
    #: how many submissions 25 local jobs take at most (one job array, one transaction ...);
    #: None where the batch system has no bulk submission (each local job is a job of its own)
    bulk_submissions: int | None = 1

    # -- hooks for subclasses -------------------------------------------------
    def service_available(self) -> bool:
        return True

    def service_env(self) -> dict[str, str]:
        """Environment the batch commands need (e.g. SLURM_CONF)."""
        return {}

    def batch_options(self) -> str:
        """TOML lines of the ``[batch]`` table besides ``adapter``."""
        return ""

    def kill_outside_jim(self, batch_id: str, env: dict[str, str]) -> None:
        """Remove one local job from the batch system the way an admin would (no wrapper flush)."""
        raise NotImplementedError

    def make_jim(self, jim_env: Jim) -> Jim:
        """The jim the suite drives (default: this process's, with ``jim_env``'s home and config)."""
        return jim_env

    def scratch(self, cjim: Jim, tmp_path: Path) -> Path:
        """A directory the local jobs can write to and this process can read (a ledger, a shim)."""
        return tmp_path

    def break_query(self, cjim: Jim, scratch: Path) -> None:
        """Make the status query of a monitor started with ``cjim.env`` fail (default: ``query_command``
        replaced by a script that prints ``query_failure_text`` and fails, first on PATH)."""
        assert self.query_command is not None
        shim = scratch / "shim"
        shim.mkdir()
        broken = shim / self.query_command
        broken.write_text(f"#!/bin/sh\necho '{self.query_failure_text}' >&2\nexit 1\n")
        broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
        cjim.env["PATH"] = f"{shim}:{cjim.env['PATH']}"

    def submission_of(self, batch_id: str) -> str:
        """The submission (job array, cluster ...) a local job's batch id belongs to."""
        return re.split(r"[._\[]", batch_id, maxsplit=1)[0]

    # -- fixtures ---------------------------------------------------------------
    @pytest.fixture
    def cjim(self, jim_env):
        require_service(self.service_available(), f"the {self.adapter} batch system")
        jim_env = self.make_jim(jim_env)
        jim_env.env.update(self.service_env())
        jim_env.config.write_text(
            FAST_CONFIG.replace("lost_grace = 5.0", "lost_grace = 8.0")
            + f'\n[batch]\nadapter = "{self.adapter}"\n{self.batch_options()}\n'
        )
        return jim_env

    def adapter_instance(self, jim: Jim):
        import tomllib

        cfg = tomllib.loads(jim.config.read_text())["batch"]
        cfg.pop("adapter")
        old = dict(os.environ)
        os.environ.update(self.service_env())
        try:
            return adapter_class(self.adapter)(Home(jim.home).ensure(), cfg)
        finally:
            os.environ.clear()
            os.environ.update(old)

    def _running(self, jim: Jim, job: str, n: int, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = jim.status(job)
            if sum(lj["state"] == "RUNNING" for lj in st["localJobs"]) >= n:
                return st
            time.sleep(0.3)
        raise AssertionError(f"fewer than {n} local jobs running: {st['counts']}")

    # -- the suite ---------------------------------------------------------------
    def test_submit_many_in_bulk(self, cjim):
        job = cjim.submit('&(executable=/bin/sh)(arguments=-c "echo local $JIM_INDEX")(count=25)')
        out = cjim.wait(job, timeout=self.turnaround * 3)
        assert out["JOB_STATE"] == "DONE", cjim.run("status", job).stdout
        st = cjim.status(job)
        ids = [lj["batchId"] for lj in st["localJobs"]]
        assert len(set(ids)) == 25 and all(ids)
        assert all(lj["state"] == "DONE" for lj in st["localJobs"])
        if self.bulk_submissions is not None:  # in bulk: 25 submissions of one job would pass the above too
            submissions = {self.submission_of(b) for b in ids}
            assert len(submissions) <= self.bulk_submissions, f"25 local jobs took {len(submissions)} submissions"

    def test_status_is_three_valued(self, cjim):
        job = cjim.submit("&(executable=/bin/sleep)(arguments=120)(count=2)")
        st = self._running(cjim, job, 2, self.turnaround)
        adapter = self.adapter_instance(cjim)
        bid = st["localJobs"][0]["batchId"]
        old = dict(os.environ)
        os.environ.update(self.service_env())
        try:
            res = adapter.query([bid])
        finally:
            os.environ.clear()
            os.environ.update(old)
        assert res.ok
        assert res.lookup(bid) is not None and res.lookup(bid).state is LocalState.RUNNING
        assert res.lookup("99999999_0") is None  # absent
        cjim.protocol("cancel", "--job-id", job)

    @pytest.mark.slow  # (waits out the grace period)
    def test_vanished_job_is_never_done(self, cjim):
        job = cjim.submit("&(executable=/bin/sleep)(arguments=120)(count=2)")
        st = self._running(cjim, job, 2, self.turnaround)
        self.kill_outside_jim(st["localJobs"][0]["batchId"], {**os.environ, **self.service_env()})
        deadline = time.monotonic() + self.turnaround + 30
        while time.monotonic() < deadline:
            lj = cjim.status(job)["localJobs"][0]
            if lj["state"] not in ("RUNNING", "QUEUED"):
                break
            time.sleep(0.5)
        assert lj["state"] in ("LOST", "CANCELLED", "FAILED"), lj
        assert lj["evidence"] in ("absent-after-grace", "batch", "accounting", "wrapper-exit-file"), lj
        cjim.protocol("cancel", "--job-id", job)

    def test_cancel_leaves_nothing(self, cjim):
        job = cjim.submit("&(executable=/bin/sleep)(arguments=300)(count=6)")
        self._running(cjim, job, 3, self.turnaround)
        out = cjim.protocol("cancel", "--job-id", job)
        assert out["JOB_STATE"] == "FAILED"
        st = cjim.status(job)
        ids = [lj["batchId"] for lj in st["localJobs"] if lj["batchId"]]
        adapter = self.adapter_instance(cjim)
        old = dict(os.environ)
        os.environ.update(self.service_env())
        try:
            res = adapter.query(ids)
        finally:
            os.environ.clear()
            os.environ.update(old)
        alive = [b for b in ids if res.lookup(b) is not None and not res.lookup(b).state.terminal]
        assert not alive, f"still in the batch system after cancel: {alive}"
        assert os.path.exists(st["outputTar"])

    def test_interrupted_submit_is_reconciled_by_tag(self, cjim, tmp_path):
        ledger = self.scratch(cjim, tmp_path) / "ledger"
        ledger.write_text("")
        ledger.chmod(0o666)
        job = cjim.submit(
            f'&(executable=/bin/sh)(arguments=-c "echo $JIM_INDEX >> {ledger}")(count=8)',
            env={"JIM_FAULT": "worker-after-submit"},
        )
        out = cjim.wait(job, timeout=self.turnaround * 3)
        assert out["JOB_STATE"] == "DONE", cjim.run("status", job).stdout
        ran = sorted(int(x) for x in ledger.read_text().split())
        assert ran == list(range(8)), f"local jobs run: {ran}\n{cjim.run('status', job).stdout}"

    def test_query_failure_is_no_news_and_degrades(self, cjim, tmp_path):
        if self.query_command is None and type(self).break_query is AdapterConformance.break_query:
            pytest.skip(f"the {self.adapter} status query cannot fail")
        job = cjim.submit("&(executable=/bin/sleep)(arguments=60)(count=2)")
        self._running(cjim, job, 2, self.turnaround)
        # a monitor that sees the broken query: restart it with the environment that breaks it
        for p in processes_of(cjim.home):
            try:
                if "_monitor" in " ".join(p.cmdline()):
                    p.kill()
                    p.wait(5)
            except psutil.Error:  # it ended meanwhile
                pass
        self.break_query(cjim, self.scratch(cjim, tmp_path))
        (Path(cjim.home) / "cache").mkdir(exist_ok=True)
        for f in (Path(cjim.home) / "cache").glob(f"{self.adapter}-status.*"):
            f.unlink()
        before = cjim.status(job)["localJobs"]
        cjim.poll(job)  # starts a monitor with the broken PATH
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (Path(cjim.home) / "cache" / f"{self.adapter}.degraded").exists():
            time.sleep(0.3)
        assert (Path(cjim.home) / "cache" / f"{self.adapter}.degraded").exists()
        time.sleep(2)
        after = cjim.status(job)["localJobs"]
        assert [lj["state"] for lj in after] == [lj["state"] for lj in before]
        assert cjim.poll(job)["JOB_STATE"] == "ACTIVE"

    def test_rendered_script_is_golden(self, tmp_path):
        """Subclasses with a job script check it here (see test_slurm_golden.py for the pattern)."""
        cls = adapter_class(self.adapter)
        a = cls(Home(tmp_path).ensure(), {})
        chunk = SubmitChunk(
            "20261122-070000-abcdef01",
            [LocalJobSpec(k, f"t.{k}") for k in range(3)],
            job_dir=Path("/jim/jobs/x"),
            wrapper=Path("/jim/jobs/x/wrapper.py"),
            sandbox=Path("/jim/jobs/x/sandbox.tar.gz"),
            outroot=Path("/jim/jobs/x/local"),
        )
        text = self.render_for_golden(a, chunk)
        if text is None:
            pytest.skip(f"{self.adapter} has no job script")
        golden(f"conformance-{self.adapter}.txt", text)

    def render_for_golden(self, adapter, chunk) -> str | None:
        return None


def python_for_jobs() -> str:
    return sys.executable
