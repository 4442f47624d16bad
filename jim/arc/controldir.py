"""A-REX's control directory: where a job's control files are, on ARC 6 and on ARC 7.

The only module that builds a control-directory path.  The layout is read off
the directory itself, never configured: ``arc-arex-start`` of ARC 7 moves the
flat files into its tree on first start and then touches ``version2``.

=======================  ===============================  =========================================
item                     ARC 6 (:data:`FLAT`)             ARC 7 (:data:`TREE`)
=======================  ===============================  =========================================
a job's control file     ``<cd>/job.<id>.<sfx>``          ``<cd>/jobs/<id[0:3]>/<id[3:6]>/<id[6:9]>/
                                                          <id[9:]>/<sfx>``
a status file            ``<cd>/<state>/job.<id>.status`` ``<cd>/<state>/<id>.status``
``gm-kick``'s last arg   a control file of the job        the control directory
=======================  ===============================  =========================================

``<state>`` is one of ``accepting``, ``processing``, ``finished``,
``restarting``.  An ARC 7 id is 12 hex characters; a longer id (a job
migrated from ARC 6) is cut the same way, the rest being its last part.
"""

from __future__ import annotations

import os
import re

#: ARC 6's flat control directory.
FLAT = "flat"
#: ARC 7's tree of per-job directories.
TREE = "tree"
#: The file ARC 7 touches once its control directory has the tree layout.
VERSION2 = "version2"

#: An ARC job id in a flat control directory.
ARC_ID = re.compile(r"[A-Za-z0-9_.-]{1,200}")
#: An ARC job id in the tree (no dot: none of its parts may be ``..``; 10 characters at least).
_TREE_ID = re.compile(r"[A-Za-z0-9_-]{10,200}")


def layout(controldir: str) -> str:
    """:data:`TREE` when ``controldir`` has ARC 7's layout (``version2`` or ``jobs/``), else :data:`FLAT`."""
    if os.path.lexists(os.path.join(controldir, VERSION2)) or os.path.isdir(os.path.join(controldir, "jobs")):
        return TREE
    return FLAT


def job_file(controldir: str, arc_id: str, suffix: str, kind: str | None = None) -> str:
    """The path of job ``arc_id``'s control file ``suffix`` (``local``, ``lrms_done``, ``grami`` ...)."""
    if (kind or layout(controldir)) == TREE:
        return os.path.join(controldir, "jobs", *_tree_parts(arc_id), suffix)
    return os.path.join(controldir, f"job.{arc_id}.{suffix}")


def status_file(controldir: str, state: str, arc_id: str, kind: str | None = None) -> str:
    """The path of job ``arc_id``'s status file in ``<controldir>/<state>``."""
    name = f"{arc_id}.status" if (kind or layout(controldir)) == TREE else f"job.{arc_id}.status"
    return os.path.join(controldir, state, name)


def status_ids(controldir: str, state: str, kind: str | None = None) -> list[str]:
    """The ids of the jobs with a status file in ``<controldir>/<state>``, sorted; ids that do not
    look like ARC ids are left out."""
    try:
        names = os.listdir(os.path.join(controldir, state))
    except OSError:
        return []
    tree = (kind or layout(controldir)) == TREE
    ids = []
    for name in names:
        if not name.endswith(".status"):
            continue
        arc_id = name[: -len(".status")]
        if not tree:
            if not arc_id.startswith("job."):
                continue
            arc_id = arc_id[len("job.") :]
        if (_TREE_ID if tree else ARC_ID).fullmatch(arc_id):
            ids.append(arc_id)
    return sorted(ids)


def kick_argument(controldir: str, arc_id: str, kind: str | None = None) -> str:
    """``gm-kick``'s last argument for job ``arc_id``: ARC 6 strips a control file's name off it,
    ARC 7 wants the control directory itself (a file path fails there, with exit 255)."""
    if (kind or layout(controldir)) == TREE:
        return controldir
    return job_file(controldir, arc_id, "local", FLAT)


def sibling(grami_path: str, suffix: str) -> str:
    """Another control file of the job whose grami is ``grami_path`` (the path A-REX gave the submit
    step): ``job.<id>.grami`` -> ``job.<id>.<suffix>`` on ARC 6, ``.../grami`` -> ``.../<suffix>`` on ARC 7."""
    head, _sep, name = grami_path.rpartition("/")
    if name == "grami":
        return f"{head}/{suffix}"
    if name.startswith("job.") and name.endswith(".grami"):
        return f"{head}/{name[: -len('grami')]}{suffix}"
    raise ValueError(f"not a grami file's name: {name[:60]!r}")


def _tree_parts(arc_id: str) -> tuple[str, str, str, str]:
    if not _TREE_ID.fullmatch(arc_id):
        raise ValueError(f"not an ARC 7 job id: {arc_id[:60]!r}")
    return arc_id[0:3], arc_id[3:6], arc_id[6:9], arc_id[9:]
