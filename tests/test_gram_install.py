"""``jim gram-install`` (jim.gram.main) into a scratch root, and the push-mode wrapper.

Everything here runs below ``tmp_path`` through ``--prefix-root``, so it
needs neither root nor the toolkit, except the wrapper test, which runs the
installed wrapper for real (root and globus-job-manager needed; skipped
otherwise, failing under CI).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from jim import gram

from support.env import require_service

SERVICES = ("jobmanager-jim", "jobmanager-jim-seg")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


@pytest.fixture
def jim_cmd(tmp_path: Path) -> Path:
    p = tmp_path / "bin" / "jim"
    p.parent.mkdir()
    p.write_text("#!/bin/sh\nexit 0\n")
    p.chmod(0o755)
    return p


def run(root: Path, *args: str) -> int:
    return gram.main(["--prefix-root", str(root), *args])


def tree(root: Path) -> dict[str, tuple[int, str]]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = "/" + str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = (0, "-> " + os.readlink(p))
        elif p.is_file():
            out[rel] = (stat.S_IMODE(p.stat().st_mode), p.read_text())
        else:
            out[rel] = (stat.S_IMODE(p.stat().st_mode), "<dir>")
    return out


def test_install_lays_out_every_file(root, jim_cmd, capsys):
    assert run(root, "--jim-command", str(jim_cmd), "--timeout", "45", "--jim-home", "/var/lib/jim/home/%u") == 0
    t = tree(root)
    assert t["/usr/share/perl5/Globus/GRAM/JobManager/jim.pm"][0] == 0o644
    assert t["/usr/share/globus/globus_gram_job_manager/jim.rvf"][0] == 0o644
    assert t["/usr/libexec/jim/jim-seg-job-manager"][0] == 0o755
    assert t["/var/lib/jim/seg"] == (0o1733, "<dir>")
    conf = t["/etc/globus/globus-jim.conf"][1]
    assert f'jim_command="{jim_cmd}"' in conf and 'jim_timeout="45"' in conf
    assert 'jim_home="/var/lib/jim/home/%u"' in conf and 'seg_dir="/var/lib/jim/seg"' in conf
    assert "\n#jim_config=" in conf
    for service in SERVICES:
        assert t[f"/etc/grid-services/{service}"] == (0, f"-> available/{service}")
        line = t[f"/etc/grid-services/available/{service}"][1]
        assert line.count("\n") == 1 and "@" not in line
        assert " -type jim " in line and "-log-levels FATAL|ERROR|WARN|INFO" in line
    poll = t["/etc/grid-services/available/jobmanager-jim"][1]
    push = t["/etc/grid-services/available/jobmanager-jim-seg"][1]
    assert poll.startswith("stderr_log,local_cred - /usr/sbin/globus-job-manager globus-job-manager ")
    assert "-seg-module" not in poll
    assert push.startswith("stderr_log,local_cred - /usr/libexec/jim/jim-seg-job-manager globus-job-manager ")
    assert "-seg-module jim -service-tag jimseg" in push
    wrapper = root / "usr/libexec/jim/jim-seg-job-manager"
    assert subprocess.run(["sh", "-n", str(wrapper)]).returncode == 0
    assert "conf=/etc/globus/globus-jim.conf" in wrapper.read_text()
    # the module shipped is the package's, byte for byte
    assert (root / "usr/share/perl5/Globus/GRAM/JobManager/jim.pm").read_text() == (
        Path(gram.__file__).parent / "jim.pm"
    ).read_text()
    assert "changed 9 item(s)" in capsys.readouterr().out


def test_install_is_idempotent_and_dry_run_changes_nothing(root, jim_cmd, capsys):
    assert run(root, "--jim-command", str(jim_cmd)) == 0
    before = tree(root)
    capsys.readouterr()
    assert run(root, "--jim-command", str(jim_cmd)) == 0
    assert "changed 0 item(s)" in capsys.readouterr().out
    assert tree(root) == before
    assert run(root, "--jim-command", str(jim_cmd), "--timeout", "5", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "[dry run] install    " in out and "globus-jim.conf" in out and "would change 1 item(s)" in out
    assert tree(root) == before


def test_dry_run_on_an_empty_root_writes_nothing(root, jim_cmd):
    assert run(root, "--jim-command", str(jim_cmd), "--dry-run") == 0
    assert list(root.iterdir()) == []


def test_uninstall_removes_everything(root, jim_cmd, capsys):
    assert run(root, "--jim-command", str(jim_cmd), "--seg-dir", "/srv/seg") == 0
    user_dir = root / "srv/seg/someone"
    user_dir.mkdir()
    (user_dir / "20261122").write_text("001;1;x;8;0\n")
    assert run(root, "--uninstall") == 0
    left = [p for p in root.rglob("*") if not p.is_dir()]
    assert left == []
    assert not (root / "srv/seg").exists()  # seg_dir read back from the conf
    assert not (root / "usr/libexec/jim").exists()
    capsys.readouterr()
    assert run(root, "--uninstall") == 0  # again: nothing to do
    assert "changed 0 item(s)" in capsys.readouterr().out


def test_uninstall_keeps_a_seg_root_with_foreign_content(root, jim_cmd, capsys):
    assert run(root, "--jim-command", str(jim_cmd)) == 0
    (root / "var/lib/jim/seg/notes.txt").write_text("mine")
    assert run(root, "--uninstall") == 0
    assert (root / "var/lib/jim/seg/notes.txt").exists()
    assert "remove it by hand" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--jim-command", "relative/jim"], "absolute path"),
        (["--seg-dir", "seg"], "absolute path"),
        (["--timeout", "0"], "positive"),
        (["--jim-config", 'a"b'], "double quotes"),
    ],
)
def test_bad_options_are_refused(root, jim_cmd, capsys, args, message):
    if "--jim-command" not in args:
        args = ["--jim-command", str(jim_cmd), *args]
    assert run(root, *args) == 1
    assert message in capsys.readouterr().err
    assert not (root / "etc/globus/globus-jim.conf").exists()


def test_log_levels_are_checked(root, jim_cmd, capsys):
    assert run(root, "--jim-command", str(jim_cmd), "--log-levels", "INFO; rm -rf /") == 2
    assert run(root, "--jim-command", str(jim_cmd), "--log-levels", "FATAL|ERROR|DEBUG") == 0
    line = (root / "etc/grid-services/available/jobmanager-jim").read_text()
    assert line.rstrip().endswith("-log-levels FATAL|ERROR|DEBUG")


def test_warns_when_mapped_users_cannot_run_jim(root, tmp_path, capsys):
    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o700)
    cmd = hidden / "jim"
    cmd.write_text("#!/bin/sh\n")
    cmd.chmod(0o755)
    assert run(root, "--jim-command", str(cmd)) == 0
    out = capsys.readouterr().out
    assert f"directory {hidden} is not searchable by other users" in out


def test_rsl_extensions_are_all_declared(root):
    assert run(root) == 0
    rvf = (root / "usr/share/globus/globus_gram_job_manager/jim.rvf").read_text()
    for name in gram.RSL_EXTENSIONS:
        assert f"\nAttribute: {name}\n" in rvf
    # one source of truth: jim's own attributes and every job type's
    from jim.handlers import discover
    from jim.jobdesc import JIM_ATTRIBUTES

    for name in JIM_ATTRIBUTES:
        assert f"\nAttribute: {name}\n" in rvf
    for cls in discover().values():
        for name in getattr(cls, "attributes", {}):
            assert f"\nAttribute: {name}\n" in rvf or "." in name


# ------------------------------------------------------------------ the wrapper, for real


def _need_root_and_toolkit():
    require_service(
        os.geteuid() == 0 and Path("/usr/sbin/globus-job-manager").is_file(),
        "root and globus-job-manager (tests/services/gram/start.sh installs it)",
    )


def _run_wrapper(root: Path, user: str) -> subprocess.CompletedProcess:
    wrapper = root / "usr/libexec/jim/jim-seg-job-manager"
    text = wrapper.read_text().replace("conf=/etc/globus/globus-jim.conf", f"conf={root}/etc/globus/globus-jim.conf")
    local = root / "wrapper.sh"
    local.write_text(text)
    local.chmod(0o755)
    # globus-job-manager -version answers and exits: enough to see the exec
    return subprocess.run(
        ["runuser", "-u", user, "--", str(local), "-version"], capture_output=True, text=True, timeout=60, cwd="/"
    )


@pytest.fixture
def open_root():
    """A scratch root other users can traverse (pytest's tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="jim-gram-wrapper-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.gram
def test_wrapper_gives_each_user_a_private_seg_dir(open_root, jim_cmd):
    _need_root_and_toolkit()
    root, seg, user = open_root, open_root / "seg", "nobody"
    seg.mkdir()
    seg.chmod(0o1733)  # what the installer makes of the real seg_dir
    assert run(root, "--jim-command", str(jim_cmd), "--seg-dir", str(seg)) == 0
    proc = _run_wrapper(root, user)
    assert proc.returncode == 0 and "15." in proc.stdout, proc.stdout + proc.stderr
    mine = seg / user
    st = mine.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == pwd.getpwnam(user).pw_uid
    day = mine / time.strftime("%Y%m%d", time.gmtime())
    assert day.is_file() and day.stat().st_uid == st.st_uid

    # an entry squatted by another account is refused, not used
    os.chown(mine, 0, 0)
    proc = _run_wrapper(root, user)
    assert proc.returncode == 1 and "not a directory owned by nobody" in proc.stderr


def test_directories_it_creates_are_reachable_under_jims_private_umask(root, jim_cmd):
    """jim runs under umask 0077; the directories gram-install creates must still let the mapped
    users' job managers reach the module, the wrapper and the SEG root."""
    old = os.umask(0o077)
    try:
        assert run(root, "--jim-command", str(jim_cmd)) == 0
    finally:
        os.umask(old)
    t = tree(root)
    dirs = {path: mode for path, (mode, kind) in t.items() if kind == "<dir>"}
    assert dirs.pop("/var/lib/jim/seg") == 0o1733
    assert dirs and {path: mode for path, mode in dirs.items() if mode != 0o755} == {}
    assert t["/usr/libexec/jim/jim-seg-job-manager"][0] == 0o755
