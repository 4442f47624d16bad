"""The grid job's credential: a private copy for its local jobs, kept as fresh as the front end's.

A gatekeeper front end hands jim the credential of a grid job as a file it
keeps (:class:`Handed`): GRAM's job manager its delegated proxy
(``X509_USER_PROXY`` of ``jim submit``), A-REX the job's delegated proxy in
its control directory, blahpd the proxy of ``-x``.  jim never uses the
front end's file from a local job: at submit it reads it (:func:`inspect`:
bounded, never through a symbolic link, the calling account's own regular
file, an X.509 proxy with its certificates and a private key, not expired;
a bearer token of printable characters, its ``exp`` read when it is a JWT)
and writes a copy into the grid job's area (:func:`install`):

    jobs/<id>/credentials/        0700
        x509up                    0600, the proxy as handed over
        token                     0600, the bearer token
        state.json                0600: per kind, the front end's path, the version of it copied
                                  (inode, size, mtime), its end, its subject, the last version refused

Every local job reads the copy on its node through the shared file system
(jim's job directory is on one for every batch system): the wrapper exports
``X509_USER_PROXY`` / ``BEARER_TOKEN_FILE`` (:data:`KINDS`) after the job's own
environment, so the job cannot point them elsewhere.

**Kept valid** (:func:`refresh`): when the front end replaces its file (GRAM's
``globusrun -refresh-proxy``, ``arcrenew``, Condor-G's proxy refresh through
blahpd), the monitor (every pass, one ``stat`` per grid job) and the worker
(before it submits) notice a new version and replace the copy atomically:
local jobs still queued start with the new one, running ones that re-read it
(as grid tools do) see it.  A new version that is not a usable credential,
or a proxy of another subject, is ignored with one line in jim's log (once per
version: the state file remembers it); the copy stays.

**Never outlived** (:func:`shortfall`): a local job is not submitted with a
credential that ends before its expected end (its wall-time limit, else the
plan's estimate) plus ``[credentials] margin``; it waits for a refresh (see
:mod:`jim.worker`).

A credential's bytes are never logged, recorded or shown: the record keeps its
kind, end and subject (``<credentials>``), errors name the file and the reason.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from jim.identity import MAX_CERTS, MAX_PROXY_BYTES, Identity, ProxyError, proxy_identity, read_own_file, text
from jim.safeio import atomic_write, read_regular
from jim.timestamps import now_iso

log = logging.getLogger("jim.credentials")

#: Each kind of credential: (the copy's name in ``credentials/``, the variable local jobs find it by, what
#: people call it).
KINDS: dict[str, tuple[str, str, str]] = {
    "x509": ("x509up", "X509_USER_PROXY", "X.509 proxy"),
    "token": ("token", "BEARER_TOKEN_FILE", "bearer token"),
}
#: The directory of the copies in a grid job's area, and its state file.
DIR_NAME = "credentials"
STATE_NAME = "state.json"
#: The largest bearer token file read (WLCG tokens are a few KB).
MAX_TOKEN_BYTES = 64 * 1024
#: The largest state file read.
MAX_STATE_BYTES = 64 * 1024
#: Seconds a local job sized to the credential's lifetime leaves for its submission: the worker holds a
#: local job whose credential ends before its expected end (plus the margin) counted from its submission.
SUBMIT_ALLOWANCE = 60.0

_PRIVATE_KEY = re.compile(rb"-----BEGIN (?:RSA |EC |DSA |ENCRYPTED )?PRIVATE KEY-----")
_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----([A-Za-z0-9+/=\s]{1,65536}?)-----END CERTIFICATE-----")
_TOKEN = re.compile(r"[\x21-\x7e]{1,65536}")


class CredentialError(ValueError):
    """A credential file jim will not use; the message is one line and names no content."""


@dataclass(frozen=True)
class Handed:
    """A credential file a front end handed over for a grid job: its kind and absolute path."""

    kind: str
    path: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown credential kind {self.kind!r}")


@dataclass(frozen=True)
class Handover:
    """What a gatekeeper front end hands over with a grid job besides its description (None: GRAM's way,
    from the ``jim submit`` process's ``X509_USER_PROXY``)."""

    identity: Identity | None = None
    """Who submitted it (never from the description)."""
    credentials: list[Handed] | None = None
    """The credential files it keeps for the grid job ."""


@dataclass(frozen=True)
class Credential:
    """What jim knows of a credential (never its content): kind, end (epoch seconds, None: unknown), subject."""

    kind: str
    not_after: float | None = None
    subject: str | None = None

    @property
    def label(self) -> str:
        return KINDS[self.kind][2]

    def left(self, now: float | None = None) -> float | None:
        """Seconds of validity left (negative once ended); None when its end is unknown."""
        return None if self.not_after is None else self.not_after - (time.time() if now is None else now)

    def record_attrs(self) -> dict[str, str]:
        """The attributes of a ``<credential>`` element of the record."""
        attrs = {"kind": self.kind}
        if self.not_after is not None:
            attrs["notAfter"] = now_iso(self.not_after)
        if self.subject:
            attrs["subject"] = self.subject
        return attrs

    def as_json(self, now: float | None = None) -> dict[str, object]:
        left = self.left(now)
        return {
            "kind": self.kind,
            "notAfter": now_iso(self.not_after) if self.not_after is not None else None,
            "secondsLeft": None if left is None else int(left),
            "subject": self.subject,
        }


@dataclass(frozen=True)
class Read:
    """A credential file read and checked: its bytes (to be copied, never shown), what it is, its version."""

    handed: Handed
    data: bytes
    credential: Credential
    version: tuple[int, int, int, int]


# ---------------------------------------------------------------------------
# Reading a front end's file
# ---------------------------------------------------------------------------


def inspect(handed: Handed, now: float | None = None) -> Read:
    """Read ``handed`` and check that a local job could use it; :class:`CredentialError` with the reason."""
    now = time.time() if now is None else now
    limit = MAX_PROXY_BYTES if handed.kind == "x509" else MAX_TOKEN_BYTES
    what = KINDS[handed.kind][2] + " file"
    if not os.path.isabs(handed.path):
        raise CredentialError(f"the {what} {handed.path!r} is not an absolute path")
    try:
        st = os.lstat(handed.path)
        data = read_own_file(handed.path, limit, what)
    except FileNotFoundError:
        raise CredentialError(f"the {what} {handed.path} does not exist") from None
    except ProxyError as e:
        raise CredentialError(f"{handed.path}: {e}") from None
    except OSError as e:
        raise CredentialError(f"{handed.path}: cannot read the {what}: {e.strerror or type(e).__name__}") from None
    if handed.kind == "x509":
        credential = _proxy(data, handed.path)
    else:
        credential = _token(data, handed.path)
    if credential.not_after is not None and credential.not_after <= now:
        raise CredentialError(f"the {credential.label} {handed.path} expired at {now_iso(credential.not_after)}")
    return Read(handed, data, credential, _version(st))


def _version(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _proxy(data: bytes, path: str) -> Credential:
    """An X.509 proxy: certificates that parse (the subject: :func:`jim.identity.proxy_identity`), a private
    key block (never parsed), the earliest end of its certificates."""
    from cryptography import x509  # (lazy: only a grid job with a proxy loads the X.509 library)

    try:
        subject, _fqans = proxy_identity(data)
    except ProxyError as e:
        raise CredentialError(f"{path}: {e}") from None
    except Exception as e:  # (a library's surprise)
        raise CredentialError(f"{path}: the proxy file does not parse ({type(e).__name__})") from None
    if not _PRIVATE_KEY.search(data):
        raise CredentialError(f"{path}: the proxy file holds no private key")
    ends = []
    try:  # (the certificates proxy_identity read; one that does not parse is a refusal, not an exception)
        for block in _CERT.findall(data)[:MAX_CERTS]:
            cert = x509.load_der_x509_certificate(base64.b64decode(b"".join(block.split()), validate=True))
            end = getattr(cert, "not_valid_after_utc", None)
            ends.append(end.timestamp() if end is not None else _naive_utc(cert.not_valid_after))
    except (binascii.Error, ValueError):
        raise CredentialError(f"{path}: a certificate of the proxy file does not parse") from None
    if not ends:
        raise CredentialError(f"{path}: the proxy file holds no certificate")
    return Credential("x509", min(ends), subject)


def _naive_utc(moment: object) -> float:
    """A naive UTC datetime of an older cryptography as epoch seconds."""
    import calendar  # (lazy: older cryptography only)

    return float(calendar.timegm(moment.utctimetuple()))  # type: ignore[attr-defined]


def _token(data: bytes, path: str) -> Credential:
    """A bearer token: one word of printable ASCII; a JWT's ``exp`` and ``sub`` when it is one."""
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise CredentialError(f"{path}: the bearer token is not ASCII text") from None
    if not _TOKEN.fullmatch(token):
        raise CredentialError(f"{path}: the bearer token is empty or holds spaces or control characters")
    parts = token.split(".")
    if len(parts) != 3:
        return Credential("token")  # (an opaque token: its end is unknown)
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError, RecursionError):
        raise CredentialError(f"{path}: the bearer token looks like a JWT but its claims do not decode") from None
    if not isinstance(payload, dict):
        raise CredentialError(f"{path}: the bearer token's claims are not a JSON object")
    exp = payload.get("exp")
    if exp is not None and (isinstance(exp, bool) or not isinstance(exp, (int, float)) or not 0 < exp < 2**40):
        raise CredentialError(f"{path}: the bearer token's exp claim is not a time")
    sub = payload.get("sub")
    try:
        subject = text(sub, "token subject") if isinstance(sub, str) else None
    except ProxyError:
        subject = None
    return Credential("token", float(exp) if exp is not None else None, subject)


# ---------------------------------------------------------------------------
# The copies in the grid job's area
# ---------------------------------------------------------------------------


def directory(job_dir: Path) -> Path:
    return job_dir / DIR_NAME


def copy_path(job_dir: Path, kind: str) -> Path:
    """Where local jobs find the copy of ``kind``."""
    return directory(job_dir) / KINDS[kind][0]


def install(job_dir: Path, reads: list[Read]) -> None:
    """Write the copies of what :func:`inspect` read, and the state that :func:`refresh` compares with."""
    if not reads:
        return
    where = directory(job_dir)
    where.mkdir(mode=0o700, exist_ok=True)
    os.chmod(where, 0o700)
    for read in reads:
        atomic_write(copy_path(job_dir, read.handed.kind), read.data, mode=0o600)
    _save(job_dir, {read.handed.kind: (read.handed, read.version, read.credential, ()) for read in reads})


def load(job_dir: Path) -> dict[str, tuple[Handed, tuple[int, ...], Credential]]:
    """The credentials a grid job's area holds: per kind, (the front end's file, the version copied, what it is).
    Empty when it holds none (or its state file is not jim's)."""
    return {kind: held[:3] for kind, held in _load(job_dir).items()}


def _load(job_dir: Path) -> dict[str, tuple[Handed, tuple[int, ...], Credential, tuple[int, ...]]]:
    """:func:`load`, and per kind the last version of the front end's file refused (``()``: none)."""
    raw = read_regular(directory(job_dir) / STATE_NAME, MAX_STATE_BYTES)
    if not raw:
        return {}
    try:
        state = json.loads(raw)
    except ValueError:
        return {}
    out = {}
    for kind, entry in state.items() if isinstance(state, dict) else ():
        try:
            end = entry["notAfter"]
            handed = Handed(kind, str(entry["path"]))
            cred = Credential(kind, float(end) if end is not None else None, entry.get("subject"))
            refused = tuple(int(v) for v in entry.get("refused") or ())
            out[kind] = (handed, tuple(int(v) for v in entry["version"]), cred, refused)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return out


def credentials(job_dir: Path) -> list[Credential]:
    """What the grid job's copies are (kind, end, subject), in :data:`KINDS` order."""
    held = load(job_dir)
    return [held[k][2] for k in KINDS if k in held]


def watched(job_dir: Path) -> list[tuple[str, tuple[int, ...]]]:
    """The front ends' files of a grid job's credentials and the versions copied (what :func:`moved` compares)."""
    return [(handed.path, version) for handed, version, _cred in load(job_dir).values()]


def moved(path: str, version: tuple[int, ...]) -> bool:
    """Whether the front end's file ``path`` is no longer the version copied (one ``lstat``)."""
    try:
        return _version(os.lstat(path)) != version
    except OSError:
        return False


def refresh(job_dir: Path, now: float | None = None) -> list[Credential]:
    """Replace each copy whose front-end file has a new version that is a usable credential of the same
    subject; the credentials replaced (empty: nothing changed).  One ``lstat`` per credential otherwise.

    A version refused is remembered in the state file (with its change time: a file given its right owner
    or mode afterwards is looked at again): it is logged once, by whichever process saw it first, and not
    read again on every pass."""
    held = _load(job_dir)
    replaced: list[Credential] = []
    for kind, (handed, version, old, refused) in list(held.items()):
        try:
            st = os.lstat(handed.path)
        except OSError:
            continue  # (the front end removed it: its job ended, or it is between two versions)
        seen = (*_version(st), st.st_ctime_ns)
        if _version(st) == version or seen == refused or not stat.S_ISREG(st.st_mode):
            continue
        try:
            read = inspect(handed, now)
            if old.subject and read.credential.subject != old.subject:
                raise CredentialError(f"the {old.label} {handed.path} is of another subject")
        except CredentialError as e:
            held[kind] = (handed, version, old, seen)
            _save(job_dir, held)
            log.warning("grid job %s: the new version of the %s is not used: %s", job_dir.name, old.label, e)
            continue
        atomic_write(copy_path(job_dir, kind), read.data, mode=0o600)
        held[kind] = (handed, read.version, read.credential, ())
        _save(job_dir, held)
        replaced.append(read.credential)
    return replaced


def refreshed(cred: Credential, now: float | None = None) -> str:
    """The log line's words for a copy :func:`refresh` replaced (whoever noticed it: the monitor, the worker)."""
    left = cred.left(now)
    return f"its {cred.label} was refreshed ({'end unknown' if left is None else f'{left:.0f} s left'})"


def _save(job_dir: Path, held: dict[str, tuple[Handed, tuple[int, ...], Credential, tuple[int, ...]]]) -> None:
    state = {}
    for kind, (handed, version, cred, refused) in held.items():
        entry: dict[str, object] = {
            "path": handed.path,
            "version": list(version),
            "notAfter": cred.not_after,
            "subject": cred.subject,
        }
        if refused:
            entry["refused"] = list(refused)
        state[kind] = entry
    atomic_write(directory(job_dir) / STATE_NAME, json.dumps(state, sort_keys=True), mode=0o600)


def environment(job_dir: Path, kinds: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The variables local jobs find the copies by (``X509_USER_PROXY=.../credentials/x509up`` ...)."""
    return {KINDS[k][1]: str(copy_path(job_dir, k)) for k in kinds}


# ---------------------------------------------------------------------------
# Never outlived
# ---------------------------------------------------------------------------


def shortfall(creds: list[Credential], now: float, expected: float | None, margin: float) -> str | None:
    """Why a local job that may run ``expected`` seconds (None: unknown) must not start now with ``creds``;
    None when every credential with a known end lasts past its expected end plus ``margin``."""
    run = expected or 0.0
    for cred in creds:
        if cred.not_after is None or cred.not_after >= now + run + margin:
            continue
        need = f"the local job's expected end ({run:g} s) + {margin:g} s" if run else f"{margin:g} s"
        if cred.not_after <= now:
            return f"the grid job's {cred.label} ended at {now_iso(cred.not_after)}; waiting for a refresh"
        return (
            f"the grid job's {cred.label} ends {now_iso(cred.not_after)} ({cred.not_after - now:.0f} s left), "
            f"before {need}; waiting for a refresh"
        )
    return None
