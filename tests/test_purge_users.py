"""``jim purge --all-users``: root purges every account's home as that account, and nothing else.

Two real accounts (tests/support/users.py) each run grid jobs through the installed jim: one that
ended long ago (its end moved back, as the account: :data:`AGE`), one that ended just now, one still
running.  Root's ``jim purge --all-users --homes {home}/<dir>`` must forget each account's old grid
job and nothing else of either home; it acts as each account, which three things show: every file
of both homes still belongs to its account, each account's own log says what went, and a directory
root planted in Bob's old work area (root's, read-only to Bob) stops Bob's purge of that grid job
("kept: Permission denied") where root itself would have removed it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from support import users as unix

pytestmark = pytest.mark.users

JIM = str(unix.VENV / "bin" / "jim")
PY = str(unix.VENV / "bin" / "python")
HOME_DIR = "purge-test-home"
#: Run as the account: the grid job's end (and what the purge reads of it) moved back by days.
AGE = """
import sys
from lxml import etree
from jim.db import Database
from jim.locks import locked
from jim.paths import Home
from jim.record import PARSER
from jim.safeio import atomic_write
from jim.timestamps import now_iso, parse_iso
home, job_id, days = sys.argv[1], sys.argv[2], float(sys.argv[3])
db = Database(Home(home))
with locked(db.home.db_lock(job_id)):
    path = db.home.record(job_id)
    root = etree.parse(str(path), PARSER).getroot()
    for el in [root, *root.iterfind("history/grid"), *root.iterfind("outputs")]:
        for name in ("at", "updated", "created"):
            if el.get(name):
                el.set(name, now_iso(parse_iso(el.get(name)) - days * 86400))
    atomic_write(path, etree.tostring(root.getroottree(), xml_declaration=True, encoding="UTF-8"))
with locked(db.home.index_lock):
    db._write_index(db.rebuild_index_root())
"""
STAMP = "import sys, pathlib; pathlib.Path(sys.argv[1]).write_bytes(b'')"


class Account:
    """One account's jim home and its three grid jobs."""

    def __init__(self, user: unix.UnixUser) -> None:
        self.user = user
        self.home = user.home / HOME_DIR
        self.old = self.submit("&(executable=/bin/echo)(arguments=old)(count=2)")
        self.running = self.submit("&(executable=/bin/sleep)(arguments=300)")
        self.new = self.submit("&(executable=/bin/echo)(arguments=new)")

    def jim(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.user.jim(*args, home=self.home)

    def submit(self, rsl: str) -> str:
        done = self.jim("submit", "--rsl", rsl)
        m = re.search(r"^JOB_ID=(\S+)$", done.stdout, re.M)
        assert m, (done.stdout, done.stderr)
        return m.group(1)

    def state(self, job_id: str) -> str:
        out = self.jim("poll", "--job-id", job_id).stdout
        m = re.search(r"^(?:JOB_STATE|ERROR)=(\S+)$", out, re.M)
        return m.group(1) if m else out

    def as_me(self, code: str, *args: str) -> None:
        done = self.user.run([PY, "-c", code, *args])
        assert done.returncode == 0, done.stderr

    def listed(self) -> set[str]:
        out = self.jim("list").stdout.splitlines()[1:]
        return {line.split()[0] for line in out}


def _wait(what: str, check, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.2)


def test_root_purges_each_home_as_its_account_and_nothing_else(unix_users, tmp_path):
    alice, bob = Account(unix_users.alice), Account(unix_users.bob)
    for acct in (alice, bob):
        _wait(f"{acct.user.name}'s grid jobs to end", lambda a=acct: {a.state(a.old), a.state(a.new)} == {"DONE"})
        _wait(f"{acct.user.name}'s sleeper to run", lambda a=acct: a.state(a.running) == "ACTIVE")
        acct.as_me(STAMP, str(acct.home / "cache" / "retention.stamp"))  # (the monitor leaves this to root)
        acct.as_me(AGE, str(acct.home), acct.old, "100")
    # a link in Alice's old work area into Bob's running one: followed as anyone, it would reach Bob's files
    os.symlink(bob.home / "jobs" / bob.running, alice.home / "jobs" / alice.old / "to-bob")
    os.lchown(alice.home / "jobs" / alice.old / "to-bob", alice.user.uid, alice.user.gid)
    rootdir = bob.home / "jobs" / bob.old / "local" / "0" / "roots"  # (root's: Bob cannot empty it)
    rootdir.mkdir(mode=0o755)
    (rootdir / "file").write_text("root's")
    root_home = tmp_path / "root-jim"
    config = tmp_path / "jim.toml"
    config.write_text(unix.CONFIG)

    done = subprocess.run(
        [JIM, "purge", "--all-users", "--homes", "{home}/" + HOME_DIR],
        env={"PATH": "/usr/bin:/bin", "JIM_HOME": str(root_home), "JIM_CONFIG": str(config), "LANG": "C.UTF-8"},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    mine = {line.split()[0]: line for line in lines[:-1]}
    assert set(mine) == {alice.user.name, bob.user.name}, done.stdout
    assert mine[alice.user.name].startswith(f"{alice.user.name}  {alice.old}  DONE")
    assert "forgotten (record, work area, output tar)" in mine[alice.user.name]
    assert mine[bob.user.name].startswith(f"{bob.user.name}  {bob.old}  DONE")
    assert "kept: Permission denied" in mine[bob.user.name], mine[bob.user.name]
    assert lines[-1].startswith("2 grid job(s): 1 forgotten, 0 lost their work area or tar, 1 kept")

    assert alice.listed() == {alice.running, alice.new} and alice.state(alice.old) == "156"
    assert bob.listed() == {bob.old, bob.running, bob.new}
    assert (rootdir / "file").read_text() == "root's"  # (Bob could not, and root did not)
    for acct in (alice, bob):
        assert acct.state(acct.running) == "ACTIVE" and acct.state(acct.new) == "DONE"
        for job in (acct.running, acct.new):
            assert (acct.home / "jobs" / job / "sandbox.tar.gz").exists()
        log = acct.home / "log" / "jim.log"
        assert log.stat().st_uid == acct.user.uid and acct.old in log.read_text()
        for dirpath, dirnames, filenames in os.walk(acct.home):
            for name in dirnames + filenames:
                p = Path(dirpath, name)
                if p == rootdir or rootdir in p.parents:
                    continue
                assert os.lstat(p).st_uid == acct.user.uid, f"{p} is not {acct.user.name}'s"
    assert not root_home.exists() or not (root_home / "db").exists()  # (root's own home: nothing made there)
    shutil.rmtree(rootdir)
    for acct in (alice, bob):
        acct.jim("cancel", "--job-id", acct.running)
