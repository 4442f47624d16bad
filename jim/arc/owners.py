"""Root's view of the ARC jobs jim has, and acting as each job's owner.

The scan and info steps run as root (A-REX's scan every ~10 s, ``CEinfo.pl``
every ~60 s).  They share three things, all here:

* :func:`jobs_in_lrms`: the jobs of a control directory in given A-REX
  states (a status file in ``processing``) that jim has (a ``localid`` in the
  job's ``local`` file) and that have no ``lrms_done`` yet, with their owner
  (the owner of the ``local`` file); ARC 6's and ARC 7's layouts both
  (:mod:`jim.arc.controldir`);
* :func:`bulk_poll`: ONE ``jim poll --json --job-id ...`` per owner (per
  :data:`IDS_PER_CALL` ids), run as that owner (groups, gid, uid) with the
  owner's jim environment (:func:`jim.arc.options.user_env`), bounded by
  ``jim_timeout``.  A failed, timed-out or unusable answer is no news: its
  ids are left out and the next pass asks again;
* :func:`as_user`: a piece of work run in a fork switched to an owner.

Nothing a user wrote is trusted by root: the ``local`` and status files are
read without following a symbolic link and bounded (:data:`MAX_LOCAL_BYTES`),
an ARC id must look like one, the session directory the ``local`` file names
is only touched as the user, and a jim id
only reaches that user's jim.  Not running as root, only the caller's own
jobs are seen.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from jim.arc import controldir as cd
from jim.arc.options import Options, log, user_env
from jim.safeio import NotRegular, open_regular, read_at_most

#: ``local`` and status files read by root, at most.
MAX_LOCAL_BYTES = 64 * 1024
#: ``jim poll --json`` answer read, at most.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: Job ids in one ``jim poll --json`` call (more are asked in further calls of the same pass).
IDS_PER_CALL = 5000
#: The A-REX states of a job in the LRMS.
IN_LRMS = ("INLRMS", "CANCELING")

#: One grid job's answer in ``jim poll --json``.
Answer = dict[str, object]


@dataclass
class ArcJob:
    """One ARC job in the LRMS, as the control directory shows it."""

    arc_id: str
    controldir: str
    state: str
    local_path: str
    #: the control directory's layout (:data:`jim.arc.controldir.FLAT` or ``TREE``)
    layout: str
    uid: int
    gid: int
    localid: str
    sessiondir: str
    #: the job's queue (``queue=`` of its ``local`` file; "" when none)
    queue: str = ""


def jobs_in_lrms(controldir: str, states: tuple[str, ...] = IN_LRMS) -> list[ArcJob]:
    """The ARC jobs of ``controldir`` in ``states`` that jim has (a localid) and that have no ``lrms_done``."""
    kind = cd.layout(controldir)
    found = []
    for arc_id in cd.status_ids(controldir, "processing", kind):
        job = _job(controldir, arc_id, states, kind)
        if job is not None:
            found.append(job)
    return found


def _job(controldir: str, arc_id: str, states: tuple[str, ...], kind: str) -> ArcJob | None:
    """The ARC job ``arc_id`` when it is jim's to poll, else None."""
    status = _read_small(cd.status_file(controldir, "processing", arc_id, kind))
    if status is None or status[0].strip() not in states:
        return None
    if os.path.lexists(cd.job_file(controldir, arc_id, "lrms_done", kind)):
        return None
    local_path = cd.job_file(controldir, arc_id, "local", kind)
    local = _read_small(local_path)
    if local is None:
        return None
    text, st = local
    localid = _local_value(text, "localid")
    if not localid:  # (not submitted to jim yet)
        return None
    if os.geteuid() != 0 and st.st_uid != os.geteuid():  # (only root acts as another account)
        return None
    return ArcJob(
        arc_id, controldir, status[0].strip(), local_path, kind, st.st_uid, st.st_gid, localid,
        _local_value(text, "sessiondir"), _local_value(text, "queue"),
    )  # fmt: skip


def _read_small(path: str) -> tuple[str, os.stat_result] | None:
    """The text of a regular file (not through a symbolic link), bounded; None if absent or not regular."""
    try:
        fd, st = open_regular(path, follow=False)
    except (OSError, NotRegular):
        return None
    try:
        return read_at_most(fd, MAX_LOCAL_BYTES).decode("utf-8", "replace"), st
    finally:
        os.close(fd)


def _local_value(text: str, key: str) -> str:
    for line in text.splitlines():
        if line.startswith(key + "="):
            return line[len(key) + 1 :].strip()
    return ""


def by_owner(jobs: list[ArcJob]) -> dict[int, list[ArcJob]]:
    """The jobs grouped by their owner's uid, in the order they came."""
    owners: dict[int, list[ArcJob]] = {}
    for job in jobs:
        owners.setdefault(job.uid, []).append(job)
    return owners


def credentials(uid: int) -> tuple[pwd.struct_passwd, list[int]] | None:
    """The account ``uid`` and its groups; None when it has no account."""
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return None
    return pw, os.getgrouplist(pw.pw_name, pw.pw_gid)


def bulk_poll(opts: Options, uid: int, job_ids: list[str]) -> dict[str, Answer]:
    """``jim poll --json`` of ``job_ids`` as the account ``uid`` (one call per :data:`IDS_PER_CALL`);
    an id without an answer (jim failed, timed out, said nothing usable) is left out: no news."""
    creds = credentials(uid)
    if creds is None:
        log(f"uid {uid} has no account: its jobs are not polled")
        return {}
    pw, groups = creds
    answers: dict[str, Answer] = {}
    for start in range(0, len(job_ids), IDS_PER_CALL):
        answers.update(_poll_call(opts, pw, groups, job_ids[start : start + IDS_PER_CALL]))
    return answers


def _poll_call(opts: Options, pw: pwd.struct_passwd, groups: list[int], job_ids: list[str]) -> dict[str, Answer]:
    """One ``jim poll --json`` call as ``pw``: its answers, or none."""
    argv = [opts.jim_command, "poll", "--json"]
    for job_id in job_ids:
        argv += ["--job-id", job_id]
    switch: dict[str, object] = {}
    if os.geteuid() == 0:
        switch = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": groups}
    try:
        proc = subprocess.run(  # type: ignore[call-overload]
            argv,
            **switch,
            env=user_env(opts, pw),
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=opts.timeout,
        )
    except (OSError, subprocess.SubprocessError) as e:
        log(f"jim poll as {pw.pw_name}: {e} (no news)")
        return {}
    try:
        data = json.loads(proc.stdout[:MAX_ANSWER_BYTES])
    except ValueError:
        data = None
    if not isinstance(data, dict) or "ERROR" in data:
        what = data.get("MESSAGE") if isinstance(data, dict) else proc.stderr[-300:].decode("utf-8", "replace")
        log(f"jim poll as {pw.pw_name} (exit {proc.returncode}): {' '.join(str(what).split())} (no news)")
        return {}
    return {key: value for key, value in data.items() if isinstance(value, dict)}


def as_user(uid: int, work: Callable[[], int]) -> int:
    """Run ``work()`` in a fork switched to the account ``uid`` (groups, gid, uid); its exit status."""
    creds = credentials(uid)
    if creds is None:
        return 1
    pw, groups = creds
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        status = 1
        try:
            if os.geteuid() == 0:
                os.setgroups(groups)
                os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
                os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
            os.environ.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name)
            status = int(work())
        except BaseException as e:
            log(f"as {pw.pw_name}: {type(e).__name__}: {e}")
        finally:
            os._exit(status)
    _pid, wstatus = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wstatus)
