"""``arcrenew`` reaching a job in the LRMS (jim/arc/renew.py), without an ARC CE.

A fake control directory (ARC 6's flat layout and ARC 7's tree) holds jobs in INLRMS with their
``local`` and ``proxy`` files, and A-REX's delegation store beside them: ``delegations/list`` (the
sqlite database with A-REX's own schema) and one file per delegation at the path
``FileRecord::uid_to_path`` makes.  A renewed delegation (the store's file replaced) must reach the
job's proxy file as A-REX writes it; everything else (a link, an oversized or foreign file, a
missing row, a token job, a locked or broken database) leaves the job's file alone with at most one
line on stderr, and never fails the scan.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import time
from pathlib import Path

import pytest

from jim.arc import controldir as cd
from jim.arc import renew, scan
from jim.arc.options import Options
from jim.arc.owners import jobs_in_lrms

#: The job's owner: an unused uid when we are root (fchown is then checked), else ourselves.
OWNER = 54321 if os.geteuid() == 0 else os.geteuid()
OWNER_GID = 54321 if os.geteuid() == 0 else os.getegid()
IDS = {cd.FLAT: "E4INDmfUqrAoOSAtDmABFKDm", cd.TREE: "f25bf1e11f29"}


def pem(tag: str, pad: int = 0) -> bytes:
    """A proxy-shaped PEM text (renew.py compares bytes and never parses them)."""
    body = (tag * 16)[:64]
    return (
        f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n"
        f"-----BEGIN RSA PRIVATE KEY-----\n{body}{'x' * pad}\n-----END RSA PRIVATE KEY-----\n"
    ).encode()


class Ce:
    """A control directory with jobs in the LRMS and A-REX's delegation store."""

    def __init__(self, root: Path, layout: str):
        self.layout = layout
        self.dir = root / "control"
        self.dir.mkdir()
        if layout == cd.TREE:
            (self.dir / cd.VERSION2).touch()
        (self.dir / "processing").mkdir()
        self.store = self.dir / "delegations"
        self.store.mkdir(mode=0o700)
        with sqlite3.connect(self.store / "list") as db:
            db.execute("CREATE TABLE IF NOT EXISTS rec(id, owner, uid, meta, UNIQUE(id, owner), UNIQUE(uid))")
            db.execute("CREATE TABLE IF NOT EXISTS lock(lockid, uid)")
            db.execute("CREATE INDEX IF NOT EXISTS lockid ON lock (lockid)")
        os.chmod(self.store / "list", 0o644)

    def file(self, arc_id: str, suffix: str) -> Path:
        return Path(cd.job_file(str(self.dir), arc_id, suffix))

    def job(self, arc_id: str, proxy: bytes | None, *, delegationid: str = "", age: float = 60.0) -> None:
        """A job in INLRMS that jim has, its proxy file written ``age`` seconds ago."""
        Path(cd.status_file(str(self.dir), "processing", arc_id)).write_text("INLRMS\n")
        local = self.file(arc_id, "local")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(f"globalid={arc_id}\nlocalid=L-{arc_id}\ndelegationid={delegationid}\nsessiondir=/s\n")
        os.chown(local, OWNER, OWNER_GID)
        if proxy is not None:
            p = self.file(arc_id, "proxy")
            p.write_bytes(proxy)
            os.chown(p, OWNER, OWNER_GID)
            p.chmod(0o600)
            then = time.time() - age
            os.utime(p, (then, then))

    def delegation(self, deleg_id: str, uid: str, cred: bytes | None, *, locks: tuple[str, ...] = ()) -> Path:
        """A delegation: its rec row, its file (when ``cred``), a lock row per job in ``locks``."""
        with sqlite3.connect(self.store / "list") as db:
            db.execute("INSERT INTO rec(id, owner, uid, meta) VALUES (?, ?, ?, '')", (deleg_id, "/CN=u", uid))
            for lockid in locks:
                db.execute("INSERT INTO lock(lockid, uid) VALUES (?, ?)", (lockid, uid))
        path = self.store.joinpath(*renew.store_parts(uid))
        if cred is not None:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            path.write_bytes(cred)
            path.chmod(0o600)
        return path

    def lock(self, lockid: str, uid: str) -> None:
        with sqlite3.connect(self.store / "list") as db:
            db.execute("INSERT INTO lock(lockid, uid) VALUES (?, ?)", (lockid, uid))

    def renew(self) -> int:
        return renew.renew_pass(jobs_in_lrms(str(self.dir)))


@pytest.fixture(params=[cd.FLAT, cd.TREE])
def ce(request, tmp_path):
    return Ce(tmp_path, request.param)


def _tmp_files(ce: Ce, arc_id: str) -> list[str]:
    proxy = ce.file(arc_id, "proxy")
    return [p.name for p in proxy.parent.iterdir() if p.name.startswith(proxy.name + ".")]


def test_store_parts_cut_the_uid_as_arex_does():
    assert renew.store_parts("bf1fb1f64567") == ["bf1", "fb1", "f64", "567"]
    assert renew.store_parts("bf1fb1f6456") == ["bf1", "fb1", "f64", "56"]
    assert renew.store_parts("bf1fb1f64") == ["bf1", "fb1", "f64"]
    assert renew.store_parts("abcd") == ["abcd"]
    assert renew.store_parts("abcde") == ["abc", "de"]
    for bad in ("../etc/passwd", "a/b", "..", "", "x" * 65):
        with pytest.raises(renew.RenewError):
            renew.store_parts(bad)


def test_renewed_delegation_replaces_the_jobs_proxy_file_as_arex_writes_it(ce, capsys, monkeypatch):
    arc_id = IDS[ce.layout]
    ce.job(arc_id, pem("old"))
    ce.delegation("d1", "bf1fb1f64567", pem("new"), locks=(arc_id,))
    before = ce.file(arc_id, "proxy").stat()
    assert ce.renew() == 1
    after = ce.file(arc_id, "proxy").stat()
    assert ce.file(arc_id, "proxy").read_bytes() == pem("new")
    assert after.st_ino != before.st_ino  # (a new file renamed into place: jim's monitor sees a new version)
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (OWNER, OWNER_GID, 0o600)
    assert _tmp_files(ce, arc_id) == []
    assert f"job {arc_id}: its proxy file now holds its renewed delegation bf1fb1f64567" in capsys.readouterr().err
    # the next pass finds nothing to do (the job's file is newer than the store's: two lstat, no read)
    monkeypatch.setattr(renew, "read_store_file", lambda *a: pytest.fail("the store's file was read again"))
    assert ce.renew() == 0
    assert ce.file(arc_id, "proxy").stat().st_ino == after.st_ino
    assert capsys.readouterr().err == ""


def test_same_credential_is_not_written_again(ce, capsys):
    arc_id = IDS[ce.layout]
    ce.job(arc_id, pem("same"), age=0)
    deleg = ce.delegation("d1", "bf1fb1f64567", pem("same"), locks=(arc_id,))
    future = time.time() + 30  # (the store's file newer than the job's: both read, found equal)
    os.utime(deleg, (future, future))
    ino = ce.file(arc_id, "proxy").stat().st_ino
    assert ce.renew() == 0
    assert ce.file(arc_id, "proxy").stat().st_ino == ino
    assert capsys.readouterr().err == ""


def test_scan_pass_renews_and_reports_it(ce, capsys):
    arc_id = IDS[ce.layout]
    ce.job(arc_id, pem("old"))
    ce.delegation("d1", "bf1fb1f64567", pem("new"), locks=(arc_id,))
    counts = scan.scan_pass(Options(jim_command="/bin/false", timeout=10), [str(ce.dir)])
    assert counts["checked"] == 1 and counts["renewed"] == 1, counts
    assert ce.file(arc_id, "proxy").read_bytes() == pem("new")
    capsys.readouterr()


def test_job_without_a_lock_or_without_a_record_is_left_alone(ce, capsys):
    arc_id = IDS[ce.layout]
    other = "f25bf1e11f30" if ce.layout == cd.TREE else "another-job"
    ce.job(arc_id, pem("old"))
    ce.job(other, pem("old"))
    ce.delegation("d1", "bf1fb1f64567", pem("new"), locks=("some-other-arc-id",))  # (no row for the jobs)
    ce.lock(other, "c0ffee000001")  # (a lock whose delegation has no rec row)
    assert ce.renew() == 0
    assert ce.file(arc_id, "proxy").read_bytes() == pem("old")
    assert ce.file(other, "proxy").read_bytes() == pem("old")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"job {other}:" in err[0] and "has no record in the store" in err[0], err


def test_token_jobs_file_is_never_replaced_by_a_proxy(ce, capsys):
    arc_id = IDS[ce.layout]
    jwt = b"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ1In0.c2lnbmF0dXJl\n"
    ce.job(arc_id, jwt)
    ce.delegation("d1", "bf1fb1f64567", pem("new"), locks=(arc_id,))
    assert ce.renew() == 0
    assert ce.file(arc_id, "proxy").read_bytes() == jwt
    assert capsys.readouterr().err == ""


def test_of_several_delegations_the_one_the_local_file_names_is_the_jobs(ce, capsys):
    arc_id = IDS[ce.layout]
    ce.job(arc_id, pem("old"), delegationid="mine")
    ce.delegation("staging", "aaa000000001", pem("staging"), locks=(arc_id,))
    ce.delegation("mine", "bbb000000002", pem("mine"), locks=(arc_id,))
    assert ce.renew() == 1
    assert ce.file(arc_id, "proxy").read_bytes() == pem("mine")
    capsys.readouterr()
    # without delegationid= among them, none is taken
    other = "f25bf1e11f31" if ce.layout == cd.TREE else "job-two"
    ce.job(other, pem("old"), delegationid="neither")
    ce.lock(other, "aaa000000001")
    ce.lock(other, "bbb000000002")
    assert ce.renew() == 0
    assert ce.file(other, "proxy").read_bytes() == pem("old")
    assert "uses 2 delegations and its local file names none of them" in capsys.readouterr().err


def _hostile_symlinked_file(ce: Ce, deleg: Path, tmp: Path) -> None:
    outside = tmp / "outside.pem"
    outside.write_bytes(pem("evil"))
    deleg.unlink()
    deleg.symlink_to(outside)


def _hostile_symlinked_dir(ce: Ce, deleg: Path, tmp: Path) -> None:
    elsewhere = tmp / "elsewhere"
    (elsewhere / "fb1" / "f64").mkdir(parents=True)
    (elsewhere / "fb1" / "f64" / "567").write_bytes(pem("evil"))
    shutil.rmtree(ce.store / "bf1")
    (ce.store / "bf1").symlink_to(elsewhere)  # (bf1/fb1/f64/567 would resolve through the link)


def _hostile_oversized(ce: Ce, deleg: Path, tmp: Path) -> None:
    deleg.write_bytes(pem("big", pad=renew.MAX_CREDENTIAL_BYTES))


def _hostile_foreign_owner(ce: Ce, deleg: Path, tmp: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another account")
    os.chown(deleg, 54322, 54322)


def _hostile_not_a_file(ce: Ce, deleg: Path, tmp: Path) -> None:
    deleg.unlink()
    os.mkfifo(deleg)


def _hostile_missing_file(ce: Ce, deleg: Path, tmp: Path) -> None:
    deleg.unlink()


def _hostile_no_certificate(ce: Ce, deleg: Path, tmp: Path) -> None:
    deleg.write_bytes(b"not a proxy at all\n")


@pytest.mark.parametrize(
    "hostile, says",
    [
        (_hostile_symlinked_file, "without following a link"),
        (_hostile_symlinked_dir, "without following a link"),
        (_hostile_oversized, "larger than"),
        (_hostile_foreign_owner, "is not a regular file of uid 0"),
        (_hostile_not_a_file, "is not a regular file of uid"),
        (_hostile_missing_file, "the store has no file for its delegation"),
        (_hostile_no_certificate, "holds no certificate"),
    ],
)
def test_hostile_store_file_is_never_used(ce, tmp_path, capsys, hostile, says):
    arc_id = IDS[ce.layout]
    ce.job(arc_id, pem("old"))
    deleg = ce.delegation("d1", "bf1fb1f64567", pem("new"), locks=(arc_id,))
    hostile(ce, deleg, tmp_path)
    assert ce.renew() == 0
    assert ce.file(arc_id, "proxy").read_bytes() == pem("old")
    assert _tmp_files(ce, arc_id) == []
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"job {arc_id}: renewed delegation not passed on:" in err[0] and says in err[0], err


def test_a_link_at_the_jobs_proxy_file_is_not_written_through(ce, tmp_path, capsys):
    arc_id = IDS[ce.layout]
    ce.job(arc_id, None)
    target = tmp_path / "victim"
    target.write_bytes(b"keep me\n")
    ce.file(arc_id, "proxy").symlink_to(target)
    ce.delegation("d1", "bf1fb1f64567", pem("new"), locks=(arc_id,))
    assert ce.renew() == 0
    assert target.read_bytes() == b"keep me\n"
    assert ce.file(arc_id, "proxy").is_symlink()
    assert "is not a regular file of the job's owner" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0, reason="a proxy file of another account needs root")
def test_a_proxy_file_not_of_the_jobs_owner_is_left_alone(ce, capsys):
    arc_id = IDS[ce.layout]
    ce.job(arc_id, pem("old"))
    os.chown(ce.file(arc_id, "proxy"), 0, 0)
    ce.delegation("d1", "bf1fb1f64567", pem("new"), locks=(arc_id,))
    assert ce.renew() == 0
    assert ce.file(arc_id, "proxy").read_bytes() == pem("old")
    assert "is not a regular file of the job's owner" in capsys.readouterr().err


def test_no_store_is_no_news(ce, capsys):
    arc_id = IDS[ce.layout]
    ce.job(arc_id, pem("old"))
    (ce.store / "list").unlink()
    assert ce.renew() == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("broken", ["garbage", "symlink", "locked"])
def test_a_store_that_cannot_be_read_is_one_line_and_the_pass_goes_on(ce, tmp_path, capsys, broken, monkeypatch):
    arc_id = IDS[ce.layout]
    ce.job(arc_id, pem("old"))
    ce.delegation("d1", "bf1fb1f64567", pem("new"), locks=(arc_id,))
    db = ce.store / "list"
    holder = None
    if broken == "garbage":
        db.write_bytes(b"this is not a database" * 100)
    elif broken == "symlink":
        real = tmp_path / "real-list"
        db.rename(real)
        db.symlink_to(real)
    else:  # (A-REX holds the write lock longer than the pass waits)
        monkeypatch.setattr(renew, "DB_TIMEOUT", 0.3)
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
    try:
        t0 = time.monotonic()
        counts = scan.scan_pass(Options(jim_command="/bin/false", timeout=10), [str(ce.dir)])
        assert time.monotonic() - t0 < 10
    finally:
        if holder is not None:
            holder.close()
    assert counts["checked"] == 1 and counts["renewed"] == 0
    assert ce.file(arc_id, "proxy").read_bytes() == pem("old")
    err = [line for line in capsys.readouterr().err.splitlines() if "delegations of" in line]
    assert len(err) == 1 and "(no proxy file renewed)" in err[0], err


def test_one_query_for_all_the_jobs_of_a_pass(ce, monkeypatch):
    ids = [f"f25bf1e11f{n:02d}" if ce.layout == cd.TREE else f"job-{n}" for n in range(30)]
    for n, arc_id in enumerate(ids):
        ce.job(arc_id, pem("old"))
        ce.delegation(f"d{n}", f"abc{n:09d}", pem(f"new{n}"), locks=(arc_id,))
    calls = []
    real = renew.job_delegations
    monkeypatch.setattr(renew, "job_delegations", lambda d, a: calls.append(len(a)) or real(d, a))
    assert ce.renew() == 30
    assert calls == [30]
    assert all(ce.file(a, "proxy").read_bytes() == pem(f"new{n}") for n, a in enumerate(ids))
