"""The grid identity (jim/identity.py): read from real proxies, recorded, shown, never from the job.

The proxies are made by the real tools on a throwaway CA made here with ``openssl``: ``grid-proxy-init``
(an RFC 3820 proxy), ``voms-proxy-fake`` (a proxy with a VOMS attribute certificate, when it is
installed: Debian's ``voms-clients``) and, for the forms neither makes, certificates made with the
``cryptography`` library.  ``tests/data/identity/voms-proxy-certs.pem`` is the certificate chain (no key)
of a proxy made by::

    voms-proxy-fake -cert user.pem -key user.key -hostcert voms.pem -hostkey voms.key -voms testvo \\
        -fqan /testvo/Role=production/Capability=NULL -fqan /testvo/analysis/Role=NULL/Capability=NULL \\
        -uri voms.example.org:15000 -out vproxy.pem -rfc

for the user ``/DC=org/DC=example/O=Test/CN=Jim Tester``: the VOMS case runs without the tool too.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from jim import identity as ident
from jim.arc import usersteps
from jim.blah import submitargs
from jim.config import load
from jim.credentials import Handover
from jim.jobdesc import parse_rsl
from jim.record import GridJob
from jim.site import Site
from jim.status import status_json
from jim.statustext import render_job
from jim.submit import submit

DATA = Path(__file__).parent / "data" / "identity"
USER_DN = "/DC=org/DC=example/O=Test/CN=Jim Tester"
FQANS = ("/testvo/Role=production/Capability=NULL", "/testvo/analysis/Role=NULL/Capability=NULL")
KEY_MARK = "PRIVATE KEY"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA, a user certificate (USER_DN) and a VOMS server certificate, made by openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("ca")
    (d / "ext.cnf").write_text(
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment,dataEncipherment\n"
    )
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/O=Grid/OU=jim-test/CN=jim identity test CA", cwd=d)  # fmt: skip
    for name, subj in (("user", "/DC=org/DC=example/O=Test/CN=Jim Tester"), ("voms", "/O=Grid/CN=voms.example.org")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subj, cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)  # fmt: skip
        os.chmod(d / f"{name}.key", 0o600)
    return d


@pytest.fixture(scope="module")
def grid_proxy(ca: Path) -> Path:
    """An RFC 3820 proxy of the user, made by grid-proxy-init."""
    if shutil.which("grid-proxy-init") is None:
        pytest.skip("grid-proxy-init is not installed (globus-proxy-utils)")
    out = ca / "gproxy.pem"
    subprocess.run(
        ["grid-proxy-init", "-cert", "user.pem", "-key", "user.key", "-out", str(out), "-q", "-hours", "1"],
        cwd=ca, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def voms_proxy(ca: Path) -> Path:
    """A proxy with a VOMS AC of FQANS: made by voms-proxy-fake when installed, else the stored chain."""
    out = ca / "vproxy.pem"
    if shutil.which("voms-proxy-fake") is None:
        shutil.copy(DATA / "voms-proxy-certs.pem", out)
        return out
    fqans = [a for f in FQANS for a in ("-fqan", f)]
    subprocess.run(
        ["voms-proxy-fake", "-cert", "user.pem", "-key", "user.key", "-hostcert", "voms.pem", "-hostkey", "voms.key",
         "-voms", "testvo", *fqans, "-uri", "voms.example.org:15000", "-out", str(out), "-rfc", "-q"],
        cwd=ca, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return out


def _own(path: Path, text: str | bytes, mode: int = 0o600) -> Path:
    data = text.encode() if isinstance(text, str) else text
    path.write_bytes(data)
    path.chmod(mode)
    return path


# ---------------------------------------------------------------------------
# Reading proxies
# ---------------------------------------------------------------------------


def test_grid_proxy_init_proxy_gives_the_users_subject(grid_proxy: Path, caplog: pytest.LogCaptureFixture):
    got = ident.from_proxy(str(grid_proxy), source="gram")
    assert got == ident.Identity(subject=USER_DN, source="gram")
    assert got.fqan is None and got.known
    assert KEY_MARK not in caplog.text


def test_voms_proxy_gives_its_fqans_in_order(voms_proxy: Path):
    got = ident.from_proxy(str(voms_proxy), source="blah")
    assert got.subject == USER_DN
    assert got.fqans == FQANS and got.fqan == FQANS[0]


def test_the_stored_voms_chain_reads_as_the_tool_made_it():
    data = (DATA / "voms-proxy-certs.pem").read_bytes()
    assert ident.proxy_identity(data) == (USER_DN, FQANS)


def test_a_plain_certificate_is_its_own_subject(ca: Path):
    assert ident.proxy_identity((ca / "user.pem").read_bytes()) == (USER_DN, ())


def _name(*cns: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "org"), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Lib")]
        + [x509.NameAttribute(NameOID.COMMON_NAME, cn) for cn in cns]
    )


def _cert(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, signer, *, proxy: bool) -> bytes:
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(hours=1))
    )
    if proxy:  # ProxyCertInfo: any language, no path limit (SEQUENCE { SEQUENCE { OID inheritAll } })
        pci = bytes.fromhex("300c300a06082b06010505071501")
        b = b.add_extension(x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.5.5.7.1.14"), pci), critical=True)
    return b.sign(signer, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def test_proxy_of_a_proxy_and_a_legacy_proxy_give_the_end_entity():
    user_key, p1_key, p2_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "CA")])
    user = _cert(_name("Ann"), ca_name, user_key, user_key, proxy=False)
    p1 = _cert(_name("Ann", "111"), _name("Ann"), p1_key, user_key, proxy=True)
    p2 = _cert(_name("Ann", "111", "222"), _name("Ann", "111"), p2_key, p1_key, proxy=True)
    key_pem = p2_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    assert ident.proxy_identity(p2 + key_pem + p1 + user) == ("/DC=org/O=Lib/CN=Ann", ())
    # the end-entity certificate need not be in the file: the last proxy's issuer is its subject
    assert ident.proxy_identity(p2 + p1) == ("/DC=org/O=Lib/CN=Ann", ())
    legacy = _cert(_name("Ann", "proxy"), _name("Ann"), p1_key, user_key, proxy=False)
    assert ident.proxy_identity(legacy + user) == ("/DC=org/O=Lib/CN=Ann", ())


def test_hostile_proxy_files_give_an_unknown_identity(tmp_path: Path, ca: Path, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, logger="jim.identity")
    real = _own(tmp_path / "real.pem", (ca / "user.pem").read_bytes() + (ca / "user.key").read_bytes())
    link = tmp_path / "link.pem"
    link.symlink_to(real)
    huge = _own(tmp_path / "huge.pem", (ca / "user.pem").read_bytes() + b"\n" * ident.MAX_PROXY_BYTES)
    garbage = _own(tmp_path / "garbage.pem", os.urandom(4096))
    broken = _own(
        tmp_path / "broken.pem",
        b"-----BEGIN CERTIFICATE-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOC\n-----END CERTIFICATE-----\n",
    )
    fifo = tmp_path / "fifo.pem"
    os.mkfifo(fifo)
    cases = [link, huge, garbage, broken, fifo, tmp_path / "absent.pem", tmp_path]
    if os.geteuid() == 0:
        other = _own(tmp_path / "other.pem", (ca / "user.pem").read_bytes())
        os.chown(other, 65534, 65534)
        cases.append(other)
    for path in cases:
        got = ident.from_proxy(str(path), source="gram")
        assert got == ident.Identity(source="gram"), path
        assert not got.known
    assert ident.from_proxy(str(real), source="gram").subject == USER_DN
    key_text = (ca / "user.key").read_text()
    body = key_text.splitlines()[1]
    assert KEY_MARK not in caplog.text and body not in caplog.text
    assert len([r for r in caplog.records if r.name == "jim.identity"]) == len(cases)
    assert all("\n" not in r.getMessage() for r in caplog.records)


def test_a_malformed_voms_extension_keeps_the_subject(voms_proxy: Path):
    der = bytes.fromhex("3003020101")
    with pytest.raises(ident.ProxyError):
        ident.voms_fqans(der)
    for bad in (b"", b"\x30\x84\xff\xff\xff\xff", b"\x30\x80\x00\x00", b"\x1f\x01\x00", b"\x30" + b"\x81"):
        with pytest.raises(ident.ProxyError):
            ident.voms_fqans(bad)
    deep = b"\x05\x00"
    for _ in range(200):  # (nested far deeper than the walk goes: no attribute found, no recursion error)
        deep = _tlv(0x30, deep)
    with pytest.raises(ident.ProxyError):
        ident.voms_fqans(deep)
    many = _tlv(0x30, b"\x05\x00" * (ident.MAX_DER_NODES + 1))
    with pytest.raises(ident.ProxyError, match="too many"):
        ident.voms_fqans(many)


def _tlv(tag: int, content: bytes) -> bytes:
    n = len(content)
    length = (
        bytes([n])
        if n < 128
        else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    )
    return bytes([tag]) + length + content


def test_fqans_must_look_like_fqans():
    assert ident.fqans_of(["/a/Role=NULL", "/a/b", "/a/b"]) == ("/a/Role=NULL", "/a/b")
    for bad in (["a/b"], ["/a b"], ["/a\n"], ["/" + "x" * 600]):
        with pytest.raises(ident.ProxyError):
            ident.fqans_of(bad)


# ---------------------------------------------------------------------------
# ARC's local file, BLAH's options
# ---------------------------------------------------------------------------

ARC6_LOCAL = """globalid=M4RLDm
lrms=jim
queue=jim
subject=/O=Grid/OU=jim-test-arc/CN=jim test ARC user
voms=/atlas/Role=production/Capability=NULL
voms=/atlas/Role=NULL/Capability=NULL
jobname=arc-mc
"""
#: an ARC 7 token job's local file (the lines of a real one of the test service)
ARC7_TOKEN_LOCAL = """globalid=bf3a44d91f29
subject=https://localhost/arc/testjwt/9ec20823/jim arc7 token user
auth=jimtestjwt
tokenclaim.aud=arc
tokenclaim.iss=https://localhost/arc/testjwt/9ec20823
tokenclaim.sub=jim arc7 token user
tokenclaim.typ=Bearer
"""


def test_arc_local_x509_and_token_jobs():
    got = ident.arc_local_identity(ARC6_LOCAL)
    assert got.subject == "/O=Grid/OU=jim-test-arc/CN=jim test ARC user"
    assert got.fqan == "/atlas/Role=production/Capability=NULL" and len(got.fqans) == 2
    assert got.source == "arc" and got.issuer is None
    token = ident.arc_local_identity(ARC7_TOKEN_LOCAL)
    assert token == ident.Identity(
        issuer="https://localhost/arc/testjwt/9ec20823", token_subject="jim arc7 token user", source="arc"
    )
    assert ident.arc_local_identity("lrms=jim\n") == ident.Identity(source="arc")


def test_arc_submit_reads_the_local_file_beside_the_grami(tmp_path: Path):
    _own(tmp_path / "job.abc.local", ARC6_LOCAL)
    assert usersteps._identity(str(tmp_path / "job.abc.grami")).subject.endswith("CN=jim test ARC user")
    (tmp_path / "x").mkdir()
    _own(tmp_path / "real-local", ARC6_LOCAL)
    (tmp_path / "x" / "local").symlink_to(tmp_path / "real-local")
    assert usersteps._identity(str(tmp_path / "x" / "grami")) == ident.Identity(source="arc")
    assert usersteps._identity(str(tmp_path / "job.none.grami")) == ident.Identity(source="arc")
    assert usersteps._identity(str(tmp_path / "not-a-grami")) == ident.Identity(source="arc")


def _blah(*extra: str) -> submitargs.SubmitRequest:
    return submitargs.read(["-c", "/bin/true", "-w", "/tmp", *extra])


def test_blah_identity_is_the_proxy_else_the_subject_blahpd_passes(voms_proxy: Path, tmp_path: Path):
    got = submitargs.identity(_blah("-x", str(voms_proxy), "-u", "/CN=what blahpd said"))
    assert (got.subject, got.fqans, got.source) == (USER_DN, FQANS, "blah")
    rel = submitargs.identity(submitargs.read(["-c", "/bin/true", "-w", str(voms_proxy.parent), "-x", "vproxy.pem"]))
    assert rel.subject == USER_DN
    assert submitargs.identity(_blah("-u", "/DC=org/CN=Jim User")) == ident.Identity(
        subject="/DC=org/CN=Jim User", source="blah"
    )
    missing = submitargs.identity(_blah("-x", str(tmp_path / "gone"), "-u", "/DC=org/CN=Jim User"))
    assert missing.subject == "/DC=org/CN=Jim User" and not missing.fqans
    # the job's own environment names nothing of it
    forged = _blah("-V", f'"X509_USER_PROXY={voms_proxy}" "JIM_IDENTITY=/CN=forged"', "-u", "/DC=org/CN=Jim User")
    assert submitargs.identity(forged).subject == "/DC=org/CN=Jim User"
    assert submitargs.identity(_blah()) == ident.Identity(source="blah")


# ---------------------------------------------------------------------------
# Recorded, shown
# ---------------------------------------------------------------------------


def _submitted(jim_env, rsl: str, proxy: Path | None, **kw) -> GridJob:
    """A grid job recorded by the real submit in this process with ``X509_USER_PROXY`` set (as GRAM's job
    manager sets it), its worker not started."""
    old = dict(os.environ)
    os.environ.update(jim_env.env)
    os.environ.pop("X509_USER_PROXY", None)
    if proxy is not None:
        os.environ["X509_USER_PROXY"] = str(proxy)
        os.environ["JIM_GRAM_JOB_DIR"] = str(proxy.parent)
    try:
        site = Site(load())
        job_id = submit(site, parse_rsl(rsl), start_background=False, **kw)
        return site.db.read(job_id)
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_submit_records_the_callers_proxy_not_the_jobs(jim_env, voms_proxy: Path, tmp_path: Path):
    key = ec.generate_private_key(ec.SECP256R1())
    forged = _own(tmp_path / "forged.pem", _cert(_name("forged"), _name("forged"), key, key, proxy=False))
    assert ident.from_proxy(str(forged), source="t").subject == "/DC=org/O=Lib/CN=forged"
    rsl = (
        f"&(executable=/bin/true)(environment=(X509_USER_PROXY {forged})"
        '(JIM_IDENTITY "/CN=forged")(JIM_SUBJECT "/CN=forged"))'
    )
    job = _submitted(jim_env, rsl, voms_proxy)
    assert job.identity() == ident.Identity(subject=USER_DN, fqans=FQANS, source="gram")
    el = job.root.find("identity")
    assert el is not None and el.get("fqan") == FQANS[0] and el.get("fqans") == " ".join(FQANS)
    assert KEY_MARK not in job.tostring().decode()
    # without a proxy from the caller the job's environment still names nothing
    bare = _submitted(jim_env, rsl, None)
    assert bare.identity() == ident.Identity(source="submit") and not bare.identity().known


def test_a_front_ends_identity_wins_and_is_shown(jim_env):
    said = ident.Identity(issuer="https://issuer.example", token_subject="u-123", source="arc")
    job = _submitted(jim_env, "&(executable=/bin/true)", None, handover=Handover(identity=said))
    assert job.identity() == said
    shown = status_json(job)["identity"]
    assert shown == {
        "subject": None, "fqan": None, "fqans": [], "issuer": "https://issuer.example",
        "tokenSubject": "u-123", "source": "arc",
    }  # fmt: skip
    json.dumps(shown)
    text = render_job(job)
    assert "  identity   token https://issuer.example sub u-123 via arc" in text
    x509_job = _submitted(
        jim_env,
        "&(executable=/bin/true)",
        None,
        handover=Handover(identity=ident.Identity(USER_DN, FQANS, source="blah")),
    )
    assert f"  identity   {USER_DN} ({FQANS[0]} +1) via blah" in render_job(x509_job)
    assert status_json(x509_job)["identity"]["fqan"] == FQANS[0]


def test_an_old_record_without_identity_reads_as_unknown(jim_env):
    job = _submitted(jim_env, "&(executable=/bin/true)", None, handover=Handover(identity=ident.Identity()))
    assert job.root.find("identity") is None
    assert job.identity() == ident.UNKNOWN
    assert "  identity   unknown" in render_job(job)
