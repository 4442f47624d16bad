#!/usr/bin/env python3
# -*- coding: utf-8 -*-
"""jim's worker-node wrapper: runs one local job of a grid job.

Static, stdlib only, Python >= 3.6: it runs on the worker node, whatever Python that node has.
Everything job-specific comes from the sandbox's manifest.json; nothing here is generated.

    python3 wrapper.py --sandbox SANDBOX.tar.gz --outroot DIR [--attempt N]
                       (--index K | --index-env VAR [--index-offset N])

What it does, in order:

1. finds its local job index K and its output directory OUT = DIR/K (DIR/K.N for attempt N > 1);
2. logs where it landed (host, user, time, Python, cwd, batch ids) to OUT/wrapper.log, writes
   OUT/started, then touches DIR;
3. unpacks the sandbox into a private scratch directory (members that would escape it are refused)
   and runs the local job's argv there (or, for a manifest ``view``, in its private view of the job's
   directory: jimworkdir.py, beside this file), stdout and stderr in OUT/stdout and OUT/stderr, stdin
   the manifest's ``stdin`` file (/dev/null without one), with JIM_INDEX, JIM_TAG, JIM_ATTEMPT, JIM_GRID_JOB_ID,
   JIM_OUTDIR, the slice's variables, JIM_PROGRESS_FILE and the manifest's ``credentials`` (jim's copies);
4. touches OUT/heartbeat every ``heartbeat`` seconds while the job runs, and looks at OUT/progress
   every min(``heartbeat``, 5) seconds (and at the end): when its size or time changed, touches DIR;
5. moves the declared outputs (manifest ``keep``) to OUT/kept/, then the files matching the output
   patterns to OUT/outputs/, named <stem>.<K>[.a<N>][.<batch id>]<suffix>;
6. writes OUT/exit_code (atomically): the job's exit code on the first line (128+N for a job killed
   by signal N), then ``key=value`` lines (with what the job used: jimusage.py), and touches DIR;
7. exits with the job's exit code, except codes the batch system reserves (manifest
   ``reserved_exit_codes``, e.g. 99 and 100 on Grid Engine): 1; the true code is in OUT/exit_code.

The stdin file is opened as the job's user, read-only, not through a symbolic link, only when it is
a regular file (a FIFO or a device is never read; O_NONBLOCK keeps the open from waiting).  One that
cannot be opened fails the local job before its command runs: a line in OUT/stderr, exit code 1 and
the reason in OUT/exit_code (``error=``: not tried again), or ``wrapper_error=`` when the node's file
system failed (EIO, ESTALE ...: worth another attempt).

Touching DIR (its modification time set to now) tells jim's monitor that something it reads
(started, progress, exit_code) changed in one of DIR's attempt directories: the monitor reads DIR's
entries only when its time changed.  The heartbeat file does not touch DIR.  A touch that fails is
logged once and never fails the job.  Progress: the job appends lines ``<phase> <done> <total>`` to
the file named by $JIM_PROGRESS_FILE, by hand or with the sandbox's ``jim-progress`` command.
SIGTERM/SIGINT/SIGUSR1/SIGHUP (a cancel, or the batch system's warning) are passed on to the job,
which runs in the wrapper's own process group; the wrapper then still writes the exit-code file.
"""

import errno
import fcntl
import fnmatch
import getpass
import json
import os
import platform
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

BATCH_ID_VARS = (
    "JIM_BATCH_ID",
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "JOB_ID",
    "SGE_TASK_ID",
    "PBS_JOBID",
    "PBS_ARRAY_INDEX",
    "PBS_ARRAYID",
    "_CONDOR_JOB_AD",
    "CLUSTER_ID",
    "PROCESS_ID",
)


class Log(object):
    def __init__(self, path):  # (the wrapper's log: where the local job landed, what it did)
        self.f = open(path, "a")

    def __call__(self, msg):
        self.f.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), msg))
        self.f.flush()


def atomic_write(path, text):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def to_bytes(text):
    """A manifest string as its bytes: UTF-8, lone surrogates (bytes that were not UTF-8) back to bytes."""
    return text.encode("utf-8", "surrogateescape")


def parse_args(argv):
    opts = {"index": None, "index_env": None, "index_offset": 0, "attempt": "1"}  # type: dict
    opts.update(sandbox=None, outroot=None, scratch=None)
    it = iter(argv)
    for a in it:
        key = a.lstrip("-").replace("-", "_")
        if key not in opts:
            raise SystemExit("wrapper: unknown option %s" % a)
        try:
            opts[key] = next(it)
        except StopIteration:
            raise SystemExit("wrapper: %s needs a value" % a)
    if not opts["sandbox"] or not opts["outroot"]:
        raise SystemExit("wrapper: --sandbox and --outroot are required")
    if opts["index"] is None:
        if not opts["index_env"] or opts["index_env"] not in os.environ:
            raise SystemExit("wrapper: no --index and no index variable in the environment")
        opts["index"] = int(os.environ[opts["index_env"]]) + int(opts["index_offset"])
    opts["index"] = int(opts["index"])
    opts["attempt"] = int(opts["attempt"])
    if opts["attempt"] < 1:
        raise SystemExit("wrapper: --attempt must be at least 1")
    return opts


def safe_extract(tar_path, dest):
    """Unpack only regular files and directories that stay inside dest."""
    dest_real = os.path.realpath(dest)
    with tarfile.open(tar_path) as tar:
        for m in tar.getmembers():
            target = os.path.realpath(os.path.join(dest, m.name))
            if not (target == dest_real or target.startswith(dest_real + os.sep)):
                raise RuntimeError("sandbox member escapes the scratch directory: %r" % m.name)
            if not (m.isfile() or m.isdir()):
                raise RuntimeError("sandbox member is not a plain file or directory: %r" % m.name)
            if m.isdir():
                if not os.path.isdir(target):
                    os.makedirs(target, 0o700)
                continue
            parent = os.path.dirname(target)
            if not os.path.isdir(parent):
                os.makedirs(parent, 0o700)
            src = tar.extractfile(m)
            if src is None:  # a regular file always has a reader
                raise RuntimeError("sandbox member cannot be read: %r" % m.name)
            with open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            os.chmod(target, 0o700 if m.mode & 0o100 else 0o600)


def batch_id():
    if os.environ.get("JIM_BATCH_ID"):
        return os.environ["JIM_BATCH_ID"]
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        return "%s_%s" % (os.environ["SLURM_ARRAY_JOB_ID"], os.environ.get("SLURM_ARRAY_TASK_ID", ""))
    if os.environ.get("SLURM_JOB_ID"):
        return os.environ["SLURM_JOB_ID"]
    if os.environ.get("JOB_ID"):
        task = os.environ.get("SGE_TASK_ID", "")
        return os.environ["JOB_ID"] + ("." + task if task and task != "undefined" else "")
    if os.environ.get("PBS_JOBID"):
        return os.environ["PBS_JOBID"]
    return ""


#: errno values of a failed open of the stdin file that are the node's (its file system's) fault,
#: worth another attempt; any other (gone, not readable, a link) is the job's own failure.
NODE_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("EIO", "ESTALE", "ENOMEM", "ENFILE", "EMFILE", "ETIMEDOUT", "EINTR")
    if hasattr(errno, name)
)

_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class StdinRefused(Exception):
    """The stdin file cannot be the job's standard input (the message says why)."""

    def __init__(self, message, node_fault=False):
        Exception.__init__(self, message)
        self.node_fault = node_fault


def _not_regular(mode):
    for test, what in _KINDS:
        if test(mode):
            return "is %s, not a regular file" % what
    return "is not a regular file"


def open_stdin(path):
    """The job's standard input, a file descriptor: ``path`` (the manifest's ``stdin``) opened
    read-only as a regular file, not through a symbolic link, a FIFO or a device never opened for
    reading (O_NONBLOCK, then cleared); /dev/null without a path.  :class:`StdinRefused` otherwise."""
    if not path:
        return os.open(os.devnull, os.O_RDONLY)
    name = to_bytes(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        st = os.lstat(name)
        if not stat.S_ISREG(st.st_mode):
            raise StdinRefused(_not_regular(st.st_mode))
        fd = os.open(name, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:  # (replaced by a link since it was looked at)
            raise StdinRefused(_not_regular(stat.S_IFLNK))
        raise StdinRefused(e.strerror or str(e), node_fault=e.errno in NODE_ERRNOS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise StdinRefused(_not_regular(mode))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def output_name(name, index, bid, attempt=1):
    base = os.path.basename(name)
    stem, dot, suffix = base.partition(".")
    safe_bid = re.sub(r"[^A-Za-z0-9_.-]", "_", bid)
    mid = "%d" % index + (".a%d" % attempt if attempt > 1 else "") + ("." + safe_bid if safe_bid else "")
    return "%s.%s%s%s" % (stem, mid, dot, suffix)


def dir_name(index, attempt):
    """The output directory's name: K, or K.N for attempt N > 1 (as jim.jobid.local_dir_name)."""
    return "%d" % index if attempt <= 1 else "%d.%d" % (index, attempt)


def tag_of(tag, attempt):
    """The attempt's tag from the manifest's (first-attempt) tag (as jim.jobid.local_tag)."""
    return tag if attempt <= 1 else "%s.%d" % (tag, attempt)


class RootToucher(object):
    """Touches the local root DIR (its modification time set to now), the sign for jim's monitor
    that an attempt directory in it changed, and then the jim home's ``jobs`` directory above it
    (``<home>/jobs/<grid job>/local``), the sign that something changed in one of its grid jobs:
    a monitor with nothing to do looks at that one directory only.  A failure is logged once, never
    raised."""

    def __init__(self, root, log):
        self.root = root
        self.log = log
        self.failed = False
        jobs = os.path.dirname(os.path.dirname(os.path.abspath(root)))
        ours = os.path.basename(os.path.abspath(root)) == "local" and os.path.basename(jobs) == "jobs"
        self.dirs = (root, jobs) if ours else (root,)

    def __call__(self, why):
        for d in self.dirs:
            try:
                os.utime(d, None)
            except OSError as e:
                if not self.failed:
                    self.failed = True
                    try:
                        self.log("cannot touch %s (after %s): %s" % (d, why, e))
                    except Exception:
                        pass


#: how often (seconds, at most) the heartbeat thread looks at the progress file
PROGRESS_CHECK = 5.0


def file_state(path):
    """(size, mtime_ns) of ``path`` itself (a symbolic link is not followed), None if it is not there."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


class Heartbeat(threading.Thread):
    """Rewrites the heartbeat file in place every ``every`` seconds (this does not touch the local
    root) and looks at the progress file every min(``every``, 5) seconds: when its size or time
    changed, ``touch`` is called."""

    def __init__(self, path, every, progress=None, touch=None):
        threading.Thread.__init__(self)
        self.daemon = True
        self.path = path
        self.every = max(1.0, float(every))
        self.check_every = min(self.every, PROGRESS_CHECK)
        self.progress = progress
        self.touch = touch
        self.seen = file_state(progress) if progress else None
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def beat(self):
        with open(self.path, "w") as f:
            f.write("%d\n" % int(time.time()))

    def check_progress(self):
        """Touch the local root if the progress file changed since it was last looked at."""
        if not self.progress or self.touch is None:
            return
        with self.lock:
            state = file_state(self.progress)
            if state == self.seen:
                return
            self.seen = state
        self.touch("a change of the progress file")

    def run(self):
        clock = time.monotonic()
        next_beat = clock + self.every
        next_check = clock + self.check_every
        while not self.stop.wait(max(0.0, min(next_beat, next_check) - time.monotonic())):
            clock = time.monotonic()
            if clock >= next_check:
                next_check = clock + self.check_every
                self.check_progress()
            if clock >= next_beat:
                next_beat = clock + self.every
                try:
                    self.beat()
                except OSError:
                    pass


class Landing(object):
    """Where the wrapper landed: the attempt it runs, its directory under the local root, its log, the
    batch id it runs under.  :meth:`announce` is the wrapper's first output: provenance."""

    def __init__(self, opts):
        self.opts = opts
        self.index, self.attempt = opts["index"], opts["attempt"]
        self.outdir = os.path.join(opts["outroot"], dir_name(self.index, self.attempt))
        if not os.path.isdir(self.outdir):
            os.makedirs(self.outdir, 0o700)
        self.log = Log(os.path.join(self.outdir, "wrapper.log"))
        self.touch = RootToucher(opts["outroot"], self.log)
        self.bid = batch_id()

    def announce(self):
        """Log where the wrapper landed, then write the ``started`` file."""
        log = self.log
        log("jim wrapper starting: local job %d attempt %d, batch id %r" % (self.index, self.attempt, self.bid))
        log(
            "host=%s user=%s pid=%d python=%s platform=%s"
            % (socket.getfqdn(), getpass.getuser(), os.getpid(), platform.python_version(), platform.platform())
        )
        log("cwd=%s listing=%s" % (os.getcwd(), sorted(os.listdir("."))[:50]))
        for var in BATCH_ID_VARS:
            if os.environ.get(var):
                log("env %s=%s" % (var, os.environ[var]))
        started = {"pid": os.getpid(), "host": socket.getfqdn(), "time": time.time(), "batch_id": self.bid}
        started["attempt"] = self.attempt
        atomic_write(os.path.join(self.outdir, "started"), json.dumps(started) + "\n")
        self.touch("started")

    def scratch(self):
        """A new scratch directory for the job (under ``--scratch``, else ``$TMPDIR``)."""
        root = self.opts["scratch"] or os.environ.get("TMPDIR") or tempfile.gettempdir()
        if not os.path.isdir(root):
            os.makedirs(root, 0o700)
        return tempfile.mkdtemp(prefix="jim-%d-" % self.index, dir=root)

    def finish(self, code, info):
        """The exit-code file, written last and whole."""
        lines = ["%d" % code] + ["%s=%s" % (k, str(v).replace("\n", " ")) for k, v in sorted(info.items())]
        atomic_write(os.path.join(self.outdir, "exit_code"), "\n".join(lines) + "\n")
        self.touch("exit_code")
        self.log("local job %d finished with exit code %d %s" % (self.index, code, info))


def main(argv):
    here = Landing(parse_args(argv))
    here.announce()
    scratch = here.scratch()
    code = 1
    info = {}
    manifest = None
    try:
        safe_extract(here.opts["sandbox"], scratch)
        with open(os.path.join(scratch, "manifest.json")) as f:
            manifest = json.load(f)
        jobs = manifest["jobs"]
        if not 0 <= here.index < len(jobs):
            raise RuntimeError("local job index %d is not in the manifest (%d jobs)" % (here.index, len(jobs)))
        code, info = run_job(LocalRun(manifest, here, scratch))
    except Exception as e:  # the exit-code file must be written whatever happens
        here.log("wrapper error: %s: %s" % (type(e).__name__, e))
        info["wrapper_error"] = "%s: %s" % (type(e).__name__, e)
        with open(os.path.join(here.outdir, "stderr"), "a") as f:
            f.write("jim wrapper: %s: %s\n" % (type(e).__name__, e))
        code = 1
    finally:
        here.finish(code, info)
        if not (manifest or {}).get("keep_scratch"):
            shutil.rmtree(scratch, ignore_errors=True)
    reserved = {int(c) for c in (manifest or {}).get("reserved_exit_codes", [])}
    return 1 if code in reserved else min(code, 255)


class LocalRun(object):
    """One attempt of one local job on this node: what every step of running it shares."""

    def __init__(self, manifest, here, scratch):
        self.manifest, self.job = manifest, manifest["jobs"][here.index]
        self.index, self.attempt = here.index, here.attempt
        self.scratch, self.cwd, self.outdir, self.bid = scratch, scratch, here.outdir, here.bid
        self.log, self.touch = here.log, here.touch
        self.progress = os.path.join(here.outdir, "progress")
        self.measure = helper("jimusage").Measure(self.job.get("env"))  # (lazy: beside this file)

    def path(self, name):
        return os.path.join(self.outdir, name)

    def environment(self):
        """The job's environment as bytes: the manifest's values reach the job byte for byte (UTF-8, and
        the bytes that were not UTF-8 as they came), whatever this node's locale."""
        env = dict(os.environb)
        for name, value in self.manifest.get("environment", []):
            env[to_bytes(name)] = to_bytes(value)
        for name, value in self.job.get("env", {}).items():
            env[to_bytes(name)] = to_bytes(value)
        ours = {
            "JIM_INDEX": str(self.index),
            "JIM_TAG": tag_of(self.job["tag"], self.attempt),
            "JIM_ATTEMPT": str(self.attempt),
            "JIM_GRID_JOB_ID": self.manifest["grid_job"],
            "JIM_OUTDIR": self.outdir,
            "JIM_SCRATCH": self.scratch,
            "JIM_PROGRESS_FILE": self.progress,
            "JIM_BATCH_ID": self.bid,
        }
        ours.update(self.manifest.get("credentials") or {})  # (jim's copies: the job cannot point them elsewhere)
        for name, value in ours.items():
            env[to_bytes(name)] = os.fsencode(value)  # (paths and ids of this node: its file-system encoding)
        bindir = os.path.join(self.scratch, "bin")
        env[b"PATH"] = os.fsencode(bindir + os.pathsep) + env.get(b"PATH", b"/usr/bin:/bin")
        return env

    def stdin(self):
        """The job's standard input (an fd), or (code, info) when the job cannot run for want of it."""
        stdin_file = self.manifest.get("stdin")
        try:
            fd = open_stdin(stdin_file)
        except StdinRefused as e:
            why = "cannot open stdin %s: %s" % (ascii(stdin_file), e)
            self.log(why)
            if e.node_fault:  # (the node's file system: WRAPPER_FAILED, worth another attempt)
                raise RuntimeError(why)
            with open(self.path("stderr"), "ab") as f:
                f.write(("jim wrapper: %s\n" % why).encode("utf-8", "backslashreplace"))
            return 1, {"error": why}  # (the job's own failure: its command never ran, no other attempt)
        if stdin_file:
            self.log("stdin %s" % ascii(stdin_file))
        return fd


class Signals(object):
    """Signals the wrapper receives, passed on to the job (and remembered: the job was stopped)."""

    FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)

    def __init__(self, log):
        self.log = log
        self.received = []
        self.proc = None

    def install(self):
        # (before the job starts: a signal in between would kill the wrapper before it wrote its exit file)
        for s in self.FORWARDED:
            signal.signal(s, self.forward)

    def forward(self, signum, frame):
        self.received.append(signum)
        self.log("received signal %d, passing it to the job" % signum)
        self.started(self.proc, [signum])

    def started(self, proc, signals=None):
        """The job's process: every signal so far (those that came while it was started) passed on."""
        self.proc = proc
        for signum in list(self.received) if signals is None else signals:
            try:
                if proc is not None:
                    os.kill(proc.pid, signum)
            except OSError:
                pass


def run_job(run):
    """Run the job's command in its scratch directory; (exit code, what the exit-code file says)."""
    argv = run.job["argv"]
    env = run.environment()
    view = workdir(run)
    stdin = run.stdin()
    if isinstance(stdin, tuple):
        return stdin
    run.log("running %r in %s" % (argv, run.cwd))
    hb = Heartbeat(run.path("heartbeat"), run.manifest.get("heartbeat", 30), run.progress, run.touch)
    hb.beat()
    hb.start()
    signals = Signals(run.log)
    signals.install()
    try:
        rc = _run_command(run, argv, env, stdin, signals)
    finally:
        hb.stop.set()
    if isinstance(rc, tuple):
        return rc
    hb.join(5)
    hb.check_progress()  # (the job's last lines, before the exit-code file is written)
    code = rc if rc >= 0 else 128 - rc
    info = {"runtime": "%.1f" % (time.time() - hb_started(run.outdir))}  # type: dict
    if rc < 0:
        info["signal"] = -rc
    if signals.received:
        info["terminated_by"] = signals.received[0]
    info.update(run.measure.fields())
    if view is not None:
        view.keep_outputs()
    collect_outputs(run, run.manifest.get("outputs", []))
    return code, info


def workdir(run):
    """The job's view of its directory and its declared outputs (jimworkdir.py, beside this file), or None."""
    if not (run.manifest.get("view") or run.manifest.get("keep")):
        return None
    return helper("jimworkdir").View(run)  # (lazy: only such a job needs it; sets run.cwd)


def helper(name):
    """A helper module beside this file (jimworkdir.py, jimusage.py), imported when first needed."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    return __import__(name)


def _run_command(run, argv, env, stdin, signals):
    """The job's process, started and waited for; its return code, or (127, info) when it cannot run."""
    with open(run.path("stdout"), "ab") as out, open(run.path("stderr"), "ab") as err:
        run.measure.start()
        try:
            proc = subprocess.Popen(
                [to_bytes(a) for a in argv],
                cwd=run.cwd,
                env=env,
                stdin=stdin,
                stdout=out,
                stderr=err,
                close_fds=True,
            )
        except OSError as e:
            err.write(("jim wrapper: cannot run %s: %s\n" % (argv[0], e)).encode())
            return 127, {"error": "cannot run %s: %s" % (argv[0], e)}
        finally:
            os.close(stdin)
        signals.started(proc)
        return run.measure.wait(proc)  # (os.wait4: the job's rusage with its return code)


def hb_started(outdir):
    try:
        with open(os.path.join(outdir, "started")) as f:
            return float(json.load(f)["time"])
    except Exception:
        return time.time()


def collect_outputs(run, patterns):
    """The job's files (not links) that match its ``outputs`` patterns, moved into ``outputs/`` under their
    name with the local job's index (and attempt and batch id) added."""
    if not patterns:
        return
    dest = os.path.join(run.outdir, "outputs")
    if not os.path.isdir(dest):
        os.makedirs(dest, 0o700)
    for root, _dirs, files in os.walk(run.cwd):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), run.cwd)
            if rel == "manifest.json" or rel.startswith("bin" + os.sep) or rel.startswith("inputs" + os.sep):
                continue
            if any(fnmatch.fnmatch(rel, p) for p in patterns) and not os.path.islink(os.path.join(root, name)):
                target = os.path.join(dest, output_name(rel, run.index, run.bid, run.attempt))
                shutil.move(os.path.join(root, name), target)
                run.log("output %s -> %s" % (rel, target))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
