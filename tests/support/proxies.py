"""Throwaway grid credentials for the credential tests: a CA, user certificates, RFC 3820 proxies of a
chosen lifetime, JWT-shaped bearer tokens.

Made with the ``cryptography`` library, in the shape ``grid-proxy-init -rfc`` writes (the proxy's
certificate, its unencrypted private key, then the user's certificate): the subject of the proxy is
the user's plus ``CN=<serial>``, its issuer the user, with a critical ProxyCertInfo extension.  Unlike
the tool, any lifetime can be asked for, an ended one too, and a proxy may outlive its user's
certificate (to see that a proxy's end is the earliest of its certificates').
:func:`grid_proxy_init` makes one with the real tool when it is installed.
"""

from __future__ import annotations

import base64
import datetime
import gzip
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

#: ProxyCertInfo (RFC 3820): no path length limit, policy language id-ppl-inheritAll.
PROXY_CERT_INFO = x509.ObjectIdentifier("1.3.6.1.5.5.7.1.14")
_INHERIT_ALL = bytes.fromhex("300c300a06082b06010505071501")
KEY_MARK = "PRIVATE KEY"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def name(*parts: tuple[str, str]) -> x509.Name:
    """An X.509 name from (``DC``/``O``/``OU``/``CN``, value) pairs, in that order."""
    oids = {
        "DC": NameOID.DOMAIN_COMPONENT,
        "O": NameOID.ORGANIZATION_NAME,
        "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
        "CN": NameOID.COMMON_NAME,
    }
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in parts])


def slash(n: x509.Name) -> str:
    """``/DC=org/CN=...``: OpenSSL's one-line form, as jim records a subject."""
    short = {NameOID.DOMAIN_COMPONENT: "DC", NameOID.ORGANIZATION_NAME: "O"}
    short |= {NameOID.ORGANIZATIONAL_UNIT_NAME: "OU", NameOID.COMMON_NAME: "CN"}
    return "".join(f"/{short[a.oid]}={a.value}" for a in n)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


@dataclass
class Authority:
    """A throwaway certification authority."""

    name: x509.Name
    key: rsa.RSAPrivateKey
    cert: x509.Certificate

    @classmethod
    def make(cls, cn: str = "jim credentials test CA") -> Authority:
        key, subject, now = _key(), name(("O", "Grid"), ("OU", "jim-test"), ("CN", cn)), _now()
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=3))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        return cls(subject, key, cert)

    def user(self, cn: str, *, days: float = 2.0) -> UserCert:
        """A user (end-entity) certificate ``/DC=org/DC=example/O=Test/CN=<cn>`` valid ``days`` from now."""
        key, subject, now = _key(), name(("DC", "org"), ("DC", "example"), ("O", "Test"), ("CN", cn)), _now()
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        return UserCert(subject, key, cert)


@dataclass
class UserCert:
    """A user's certificate and key; :meth:`proxy` makes RFC 3820 proxies of it."""

    name: x509.Name
    key: rsa.RSAPrivateKey
    cert: x509.Certificate

    @property
    def subject(self) -> str:
        return slash(self.name)

    @property
    def not_after(self) -> float:
        return self.cert.not_valid_after_utc.timestamp()

    def proxy(self, seconds: float) -> Proxy:
        """A proxy that ends ``seconds`` from now (negative: it ended that long ago)."""
        key, now = _key(), _now()
        end = now + datetime.timedelta(seconds=seconds)
        start = min(now, end) - datetime.timedelta(minutes=5)
        serial = x509.random_serial_number()
        subject = x509.Name([*self.name, x509.NameAttribute(NameOID.COMMON_NAME, str(serial % 10**10))])
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
            .add_extension(x509.UnrecognizedExtension(PROXY_CERT_INFO, _INHERIT_ALL), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        return Proxy(_pem(cert) + _key_pem(key) + _pem(self.cert), end.timestamp(), self.subject)

    def pem(self) -> bytes:
        """The user's certificate and key (what ``grid-proxy-init -cert -key`` reads)."""
        return _pem(self.cert) + _key_pem(self.key)


@dataclass(frozen=True)
class Proxy:
    """A proxy file's bytes, the end of its own certificate, and the identity it carries."""

    data: bytes
    not_after: float
    subject: str

    def write(self, path: Path, *, mode: int = 0o600, owner: tuple[int, int] | None = None) -> Path:
        """Write it (in place: the same inode when ``path`` exists) with ``mode``, owned by ``owner``."""
        return write_own(path, self.data, mode=mode, owner=owner)

    def key_lines(self) -> list[str]:
        """The base64 lines of its private key block: what must never show anywhere but in a copy."""
        return key_lines(self.data)


def key_lines(data: bytes) -> list[str]:
    """The base64 lines of the private key blocks of a PEM file."""
    out, inside = [], False
    for line in data.decode("ascii", "replace").splitlines():
        if line.startswith("-----BEGIN") and KEY_MARK in line:
            inside = True
        elif line.startswith("-----END"):
            inside = False
        elif inside and line.strip():
            out.append(line.strip())
    return out


def write_own(path: Path, data: bytes, *, mode: int = 0o600, owner: tuple[int, int] | None = None) -> Path:
    """``data`` into ``path`` (an existing file rewritten in place), ``mode`` exactly, owned by ``owner``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
        if owner is not None:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)
    return path


def replace(path: Path, data: bytes, *, owner: tuple[int, int] | None = None) -> Path:
    """``data`` as a new file renamed over ``path`` (a new inode: as Condor-G's schedd spool does)."""
    tmp = path.with_name(f".{path.name}.new")
    write_own(tmp, data, owner=owner)
    os.replace(tmp, path)
    return path


def grid_proxy_init(user: UserCert, where: Path, hours: int = 1) -> bytes | None:
    """A proxy of ``user`` made by the real ``grid-proxy-init -rfc`` (None when it is not installed)."""
    if shutil.which("grid-proxy-init") is None:
        return None
    where.mkdir(parents=True, exist_ok=True)
    write_own(where / "usercert.pem", _pem(user.cert), mode=0o644)
    write_own(where / "userkey.pem", _key_pem(user.key))
    out = where / "gproxy.pem"
    subprocess.run(
        ["grid-proxy-init", "-cert", "usercert.pem", "-key", "userkey.pem", "-out", str(out), "-q", "-rfc",
         "-hours", str(hours)],
        cwd=where, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return out.read_bytes()


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def jwt(claims: dict[str, object] | str) -> str:
    """A JWT-shaped bearer token with ``claims`` (a dict, or the claims' raw text); its signature is noise
    (jim reads a JWT's claims, the signature is the front end's business)."""
    raw = claims if isinstance(claims, str) else json.dumps(claims)
    header = _b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": "test"}).encode())
    return f"{header}.{_b64url(raw.encode())}.{_b64url(os.urandom(64))}"


def files_holding(root: Path, needles: list[bytes]) -> dict[str, list[bytes]]:
    """Every file under ``root`` (relative path) that holds any of ``needles``, with those it holds; a
    gzip file (an output tar, a sandbox) is searched as it is and decompressed."""
    found: dict[str, list[bytes]] = {}
    for top, _dirs, files in os.walk(root):
        for file in files:
            path = Path(top) / file
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            if data[:2] == b"\x1f\x8b":
                try:
                    data += gzip.decompress(data)
                except (OSError, EOFError):
                    pass
            hits = [n for n in needles if n in data]
            if hits:
                found[str(path.relative_to(root))] = hits
    return found
