"""jim.rootfiles: the one way jim gram-install and jim arc-install write a root-owned file."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest

from jim.rootfiles import InstallError, RootFiles, carries_marker

MARKER = "jim: installed by a test"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_new_file_gets_its_mode_and_reachable_directories_whatever_the_umask(tmp_path):
    out = io.StringIO()
    files = RootFiles(out=out)
    target = tmp_path / "usr" / "share" / "x" / "module.pm"
    old = os.umask(0o077)
    try:
        assert files.install(target, "text\n", 0o644) is True
    finally:
        os.umask(old)
    assert target.read_text() == "text\n" and _mode(target) == 0o644
    assert [_mode(d) for d in (tmp_path / "usr", tmp_path / "usr/share", tmp_path / "usr/share/x")] == [0o755] * 3
    assert out.getvalue() == f"install    {target} (mode 0644)\n" and files.changed == 1
    assert [p.name for p in target.parent.iterdir()] == ["module.pm"]  # (no temporary file left)


def test_unchanged_only_when_content_and_mode_match(tmp_path):
    out = io.StringIO()
    files = RootFiles(out=out)
    target = tmp_path / "shim"
    files.install(target, "#!/bin/sh\n", 0o755)
    assert files.install(target, "#!/bin/sh\n", 0o755) is False
    assert out.getvalue().splitlines()[-1] == f"unchanged  {target}"
    assert files.install(target, "#!/bin/sh\n", 0o644) is True and _mode(target) == 0o644
    assert files.install(target, "#!/bin/sh\nexit 0\n", 0o644) is True and target.read_text().endswith("exit 0\n")
    assert files.changed == 3


def test_dry_run_says_every_line_and_writes_nothing(tmp_path):
    out = io.StringIO()
    target = tmp_path / "etc" / "conf"
    assert RootFiles(dry_run=True, out=out).install(target, "x", 0o644) is True
    assert out.getvalue() == f"[dry run] install    {target} (mode 0644)\n"
    assert list(tmp_path.iterdir()) == []


def test_a_link_at_the_path_is_replaced_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "module.pm"
    link.symlink_to(victim)
    RootFiles(out=io.StringIO()).install(link, "new", 0o644)
    assert victim.read_text() == "keep" and not link.is_symlink() and link.read_text() == "new"


def test_with_a_marker_a_file_that_is_not_jims_is_refused_unless_forced(tmp_path):
    target = tmp_path / "cancel-jim-job"
    target.write_text("#!/bin/sh\n# the site's own\n")
    files = RootFiles(out=io.StringIO())
    with pytest.raises(InstallError, match="not jim's \\(no marker line\\): remove it, or give --force"):
        files.install(target, f"# {MARKER}\n", 0o755, marker=MARKER)
    assert "the site's own" in target.read_text() and files.changed == 0
    assert files.install(target, f"# {MARKER}\n", 0o755, marker=MARKER, force=True) is True
    assert carries_marker(target, MARKER)
    assert files.install(target, f"# {MARKER}\n", 0o755, marker=MARKER) is False  # (jim's now: unchanged)
    assert files.install(target, f"# {MARKER}\nexec jim\n", 0o755, marker=MARKER) is True  # (jim's: updated)


def test_what_carries_the_marker(tmp_path):
    ours = tmp_path / "ours"
    ours.write_text(f"#!/bin/sh\n# {MARKER}\n")
    link = tmp_path / "link"
    link.symlink_to(ours)
    big = tmp_path / "big"
    big.write_text(MARKER + "x" * (1024 * 1024))
    assert carries_marker(ours, MARKER)
    assert not carries_marker(link, MARKER)  # (a symbolic link is never jim's)
    assert not carries_marker(big, MARKER)
    assert not carries_marker(tmp_path, MARKER) and not carries_marker(tmp_path / "missing", MARKER)
