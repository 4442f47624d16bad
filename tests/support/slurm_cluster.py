"""The multi-node test Slurm (tests/services/slurm-cluster): start, stop, crash and revive its nodes.

A controller and (by default) three compute nodes ``cn1``..``cn3``, each
``slurmd`` in its own network namespace with its own host name, on a bridge
of its own.  :meth:`SlurmCluster.kill_node` crashes a node (its slurmd and
every process of the jobs running there die at once); slurmctld notices after
``SlurmdTimeout`` (10 s) and ends those jobs NODE_FAIL (or requeues them).
Partition ``high`` preempts jobs of partition ``normal`` (the default).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from support.env import REPO, require_service

SERVICE = REPO / "tests" / "services" / "slurm-cluster"
T = TypeVar("T")
STATE = Path(os.environ.get("JIM_TEST_SLURM_CLUSTER_STATE", "/var/tmp/jim-test-slurm-cluster"))


class ClusterError(RuntimeError):
    """A control script of the cluster failed."""


class SlurmCluster:
    """Drives the cluster's scripts; every Slurm command run through :meth:`run` talks to this cluster."""

    def __init__(self, service: Path = SERVICE, state: Path = STATE) -> None:
        self.service = service
        self.state = state
        self.conf = state / "slurm.conf"
        self.jobs_dir = state / "jobs"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), "JIM_TEST_SLURM_CLUSTER_STATE": str(state)}

    # -- the scripts --------------------------------------------------------------------

    def _script(self, *argv: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(
            [str(self.service / argv[0]), *argv[1:]], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if p.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} failed (rc {p.returncode}):\n{p.stderr[-3000:]}")
        return p

    def is_up(self) -> bool:
        """Every daemon runs and the controller answers."""
        if not self.conf.exists() or not (self.state / "run" / "slurmctld.pid").exists():
            return False
        try:
            return self._script("ctl.sh", "status", timeout=60).returncode == 0
        except (ClusterError, subprocess.TimeoutExpired):
            return False

    def start(self) -> None:
        """Run start.sh (root; installs, configures and starts what is missing, then a job on every node)."""
        self._script("start.sh", timeout=900)

    def stop(self) -> None:
        self._script("stop.sh", timeout=300)

    def nodes(self) -> list[str]:
        return self._script("ctl.sh", "nodes").stdout.split()

    def kill_node(self, name: str) -> None:
        """Crash node ``name``: SIGKILL its slurmd and every process of its jobs."""
        self._script("ctl.sh", "kill-node", name)

    def wait_node_down(self, name: str, timeout: float = 60.0) -> None:
        """Wait until slurmctld has set node ``name`` DOWN (after a kill: SlurmdTimeout plus up to a ping period)."""
        self._script("ctl.sh", "wait-down", name, str(int(timeout)), timeout=timeout + 30)

    def revive_node(self, name: str) -> None:
        """Start node ``name``'s slurmd again; returns once the node is usable."""
        self._script("ctl.sh", "revive-node", name, timeout=120)

    def revive_all(self) -> None:
        """Every node usable (slurmd running, node resumed)."""
        for node in self.nodes():
            self.revive_node(node)

    def node_state(self, name: str) -> str:
        return self.run(["sinfo", "-h", "-n", name, "-o", "%T"]).stdout.split("\n")[0].strip()

    # -- Slurm's commands -------------------------------------------------------------

    def run(self, argv: Sequence[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster; fails on a non-zero exit."""
        p = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise ClusterError(f"{argv} failed (rc {p.returncode}): {p.stderr.strip()[:2000]}")
        return p

    def sbatch(self, *args: str) -> str:
        """Submit with ``sbatch --parsable`` (cwd: the cluster's scratch dir); the job id."""
        out = self.run(["sbatch", "--parsable", "-D", str(self.jobs_dir), *args]).stdout.strip()
        if not out.isdigit():
            raise ClusterError(f"sbatch printed {out!r} instead of a job id")
        return out

    def squeue_states(self, ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """Job id -> (state, node list) as squeue sees it (finished ones included)."""
        out = self.run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T|%N"]).stdout
        rows = (line.split("|") for line in out.splitlines() if line.count("|") == 2)
        return {r[0]: (r[1], r[2]) for r in rows}

    def sacct(self, ids: Sequence[str], duplicates: bool = False) -> list[dict[str, str]]:
        """sacct's allocation records (JobID, State, NodeList, Partition, ExitCode) of ``ids``."""
        fields = ["JobID", "State", "NodeList", "Partition", "ExitCode"]
        argv = ["sacct", "-n", "-X", "-P", "-j", ",".join(ids), "-o", ",".join(fields)]
        out = self.run([*argv, "-D"] if duplicates else argv).stdout
        return [dict(zip(fields, line.split("|"))) for line in out.splitlines() if line.count("|") == len(fields) - 1]

    def wait_for(self, what: str, check: Callable[[], T], timeout: float = 90.0, every: float = 0.5) -> T:
        """Call ``check()`` until it returns something true; that value. ClusterError after ``timeout``."""
        deadline = time.monotonic() + timeout
        last: T | None = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(every)
        raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")

    @contextlib.contextmanager
    def lock(self, timeout: float = 1800.0) -> Iterator[None]:
        """Serialize the tests that use this cluster (they crash its nodes)."""
        self.state.mkdir(parents=True, exist_ok=True)
        with open(self.state / "tests.lock", "a") as f:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise ClusterError("another test run holds the multi-node test cluster for too long") from None
                    time.sleep(1)
            yield


def session_cluster() -> Iterator[SlurmCluster]:
    """The cluster for a test session: the running one, or one started now and stopped at the end.

    It is started when one of its tests runs and we are root; otherwise its
    tests are skipped (failed in CI).  ``JIM_TEST_SLURM_CLUSTER_KEEP=1``
    leaves a cluster started here running.
    """
    cluster = SlurmCluster()
    started = False
    if not cluster.is_up():
        require_service(
            os.geteuid() == 0,
            "the multi-node test Slurm (tests/services/slurm-cluster/start.sh, as root)",
        )
        cluster.start()
        started = True
    yield cluster
    if started and not os.environ.get("JIM_TEST_SLURM_CLUSTER_KEEP"):
        cluster.stop()
