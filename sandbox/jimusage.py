# -*- coding: utf-8 -*-
"""jim's wrapper's measure of one local job's payload, on the worker node (beside wrapper.py).

Stdlib only, Python >= 3.6, like the wrapper.  :class:`Measure` starts the wall clock just before
the payload starts, reaps the payload with ``os.wait4`` (instead of ``Popen.wait``) to get its
resource usage, and gives the ``key=value`` lines the wrapper adds to the exit-code file:

``cpu_user``, ``cpu_system``  seconds of CPU (``ru_utime``, ``ru_stime``)
``max_rss_kb``                peak resident set size, KiB (``ru_maxrss``; bytes on macOS, converted)
``wall``                      seconds from the payload's start to its reaping (a monotonic clock)
``cores``                     the cores the local job was given (``JIM_CORES`` of its manifest entry)
``node``                      this host's name (as the wrapper's ``started`` file gives it)

What is counted: the rusage ``wait4`` returns for the payload's process, which the kernel sums over
that process and every descendant it (or a descendant) waited for; the peak RSS is the largest of
theirs, not their sum.  What is not: a descendant still running when the payload exits, or one
that was never waited for because it was orphaned (a daemon that double-forks, a background
process whose parent exited first: reparented to init or a subreaper, and charged there); the
wrapper's own CPU and memory (unpacking the sandbox, the heartbeat, moving outputs).  A field
that cannot be measured is left out: jim counts it unknown, never zero.
"""

import os
import socket
import sys
import time


def _exit_code(status):
    """Popen's return code from a wait status: -N for a signal N, else the exit status."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return 1


class Measure(object):
    """One payload's measure: :meth:`start` just before it starts, :meth:`wait` for it, :meth:`fields`."""

    def __init__(self, job_env):
        cores = str((job_env or {}).get("JIM_CORES", ""))
        self.cores = int(cores) if cores.isdigit() and 0 < int(cores) < 100000 else None
        self.started = None
        self.wall = None
        self.rusage = None

    def start(self):
        self.started = time.monotonic()

    def wait(self, proc):
        """Reap ``proc`` (a subprocess.Popen) with ``os.wait4``; its return code as Popen gives it.
        (An interrupted wait4 is retried by Python itself since 3.5: PEP 475.)"""
        try:
            _pid, status, self.rusage = os.wait4(proc.pid, 0)
        except ChildProcessError:  # (reaped already: no measure, the code as Popen knows it)
            return proc.wait()
        finally:
            if self.started is not None:
                self.wall = time.monotonic() - self.started
        proc.returncode = _exit_code(status)
        return proc.returncode

    def fields(self):
        """The ``key=value`` fields of the exit-code file (those measured)."""
        out = {}
        ru = self.rusage
        if ru is not None:
            out["cpu_user"] = "%.3f" % ru.ru_utime
            out["cpu_system"] = "%.3f" % ru.ru_stime
            out["max_rss_kb"] = "%d" % (ru.ru_maxrss // 1024 if sys.platform == "darwin" else ru.ru_maxrss)
        if self.wall is not None:
            out["wall"] = "%.3f" % self.wall
        if self.cores is not None:
            out["cores"] = "%d" % self.cores
        try:
            out["node"] = socket.getfqdn()
        except Exception:
            pass
        return out
