"""Who submitted a grid job: its grid identity, as the gatekeeper front end said it.

An :class:`Identity` is a certificate subject and its VOMS FQANs (the first
the primary one), or a token's issuer and subject, and the front end it came
from; whatever the front end did not say is unknown (None, empty), never
guessed.  Each front end reads it in its own way and hands it to
:func:`jim.submit.submit` (never from the job's description or environment):

* GRAM: the job manager's delegated proxy of the job (``X509_USER_PROXY`` of
  the ``jim submit`` process, set by the job manager per job), :func:`from_proxy`;
* ARC: the job's ``local`` control file (``subject=``, ``voms=``,
  ``tokenclaim.iss=`` / ``tokenclaim.sub=``), :func:`from_arc_local`;
* BLAH: the proxy blahpd passes (``-x``) and its subject (``-u``).

**Reading a proxy file** (:func:`from_proxy`): bounded (:data:`MAX_PROXY_BYTES`),
never through a final symbolic link, a regular file owned by the calling
account; only its ``CERTIFICATE`` blocks are decoded (a private key in the
file is never parsed, kept or logged).  The subject recorded is the end-entity
certificate's (the issuer of the last proxy in the chain), in the slash form of
OpenSSL's one-line names that grid tools and APEL use
(``/DC=org/DC=example/CN=Jane Doe``); the FQANs are those of the first VOMS
attribute certificate (extension 1.3.6.1.4.1.8005.100.100.5) of a proxy in the
chain, read by a small bounded DER walk.  Anything malformed gives an unknown
identity and one line in jim's log; nothing here raises into a submit.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from jim.safeio import NotRegular, open_regular, read_at_most

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)
if TYPE_CHECKING:
    from cryptography import x509

log = logging.getLogger("jim.identity")

#: The largest proxy file read (a proxy with a VOMS AC and its chain is some 10 KB).
MAX_PROXY_BYTES = 256 * 1024
#: The largest ARC ``local`` control file read.
MAX_LOCAL_BYTES = 256 * 1024
#: The most certificates of a proxy file looked at.
MAX_CERTS = 16
#: The longest subject, issuer or token subject kept, in characters.
MAX_TEXT = 1024
#: The most FQANs kept, and the longest one.
MAX_FQANS = 32
MAX_FQAN = 512
#: The most DER elements one VOMS extension is walked through, and how deep.
MAX_DER_NODES = 4096
MAX_DER_DEPTH = 8

#: ProxyCertInfo (RFC 3820) and its pre-RFC (GT3) form: a certificate with either is a proxy.
_PROXY_EXTENSIONS = ("1.3.6.1.5.5.7.1.14", "1.3.6.1.4.1.3536.1.222")
#: The VOMS attribute certificates of a proxy.
VOMS_EXTENSION = "1.3.6.1.4.1.8005.100.100.5"
#: The DER content of the OID of VOMS's attribute (1.3.6.1.4.1.8005.100.100.4), whose values are FQANs.
_VOMS_ATTRIBUTE = bytes.fromhex("2b06010401be45646404")
#: The last name entry of a legacy (GT2) proxy.
_LEGACY_PROXY_CN = ("proxy", "limited proxy")

_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----([A-Za-z0-9+/=\s]{1,65536}?)-----END CERTIFICATE-----")
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_FQAN = re.compile(r"/[\x21-\x7e]+")

#: OpenSSL's short names of name attributes (``X509_NAME_oneline``); others are shown as their OID.
_SHORT_NAMES = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.9": "street",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.4": "SN",
    "2.5.4.42": "GN",
    "2.5.4.43": "initials",
    "2.5.4.44": "generationQualifier",
    "2.5.4.46": "dnQualifier",
    "2.5.4.65": "pseudonym",
    "2.5.4.12": "title",
    "2.5.4.5": "serialNumber",
    "2.5.4.17": "postalCode",
    "2.5.4.41": "name",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
    "1.2.840.113549.1.9.1": "emailAddress",
}


@dataclass(frozen=True)
class Identity:
    """A grid job's grid identity; every field None (or empty) when the front end did not say it."""

    subject: str | None = None
    fqans: tuple[str, ...] = ()
    issuer: str | None = None
    token_subject: str | None = None
    source: str | None = None

    @property
    def fqan(self) -> str | None:
        """The primary FQAN (the first)."""
        return self.fqans[0] if self.fqans else None

    @property
    def known(self) -> bool:
        """Whether the front end said anything of who it is."""
        return bool(self.subject or self.fqans or self.issuer or self.token_subject)

    def record_attrs(self) -> dict[str, str]:
        """The attributes of the record's ``<identity>`` (only those known; ``fqans`` space-separated)."""
        attrs = {
            "subject": self.subject,
            "fqan": self.fqan,
            "fqans": " ".join(self.fqans) if self.fqans else None,
            "issuer": self.issuer,
            "tokenSubject": self.token_subject,
            "source": self.source,
        }
        return {k: v for k, v in attrs.items() if v}

    @classmethod
    def from_record(cls, attrs: Mapping[str, str]) -> Identity:
        """The identity an ``<identity>`` element's attributes say (see :meth:`record_attrs`)."""
        fqans = tuple((attrs.get("fqans") or "").split())
        primary = attrs.get("fqan")
        if primary and (not fqans or fqans[0] != primary):
            fqans = (primary, *(f for f in fqans if f != primary))
        return cls(
            subject=attrs.get("subject") or None,
            fqans=fqans,
            issuer=attrs.get("issuer") or None,
            token_subject=attrs.get("tokenSubject") or None,
            source=attrs.get("source") or None,
        )

    def as_json(self) -> dict[str, object]:
        """``jim status --json``'s ``identity``: every field, null when unknown."""
        return {
            "subject": self.subject,
            "fqan": self.fqan,
            "fqans": list(self.fqans),
            "issuer": self.issuer,
            "tokenSubject": self.token_subject,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, found: Mapping[str, object]) -> Identity:
        """The identity :meth:`as_json` gave (what ``jim status --json`` printed)."""

        def get(key: str) -> str | None:
            value = found.get(key)
            return value if isinstance(value, str) and value else None

        fqans = found.get("fqans")
        listed = tuple(f for f in fqans if isinstance(f, str)) if isinstance(fqans, list) else ()
        return cls(get("subject"), listed, get("issuer"), get("tokenSubject"), get("source"))


#: Nothing known.
UNKNOWN = Identity()


def describe(identity: Identity) -> str:
    """One line for people: ``/DC=org/CN=Jane (/vo/Role=NULL/Capability=NULL) via gram``, ``token
    https://issuer sub 1234 via arc``, ``unknown``."""
    parts = []
    if identity.subject:
        parts.append(identity.subject)
    if identity.issuer or identity.token_subject:
        parts.append(f"token {identity.issuer or '?'} sub {identity.token_subject or '?'}")
    if identity.fqans:
        more = f" +{len(identity.fqans) - 1}" if len(identity.fqans) > 1 else ""
        parts.append(f"({identity.fqans[0]}{more})")
    if not parts:
        parts.append("unknown")
    if identity.source:
        parts.append(f"via {identity.source}")
    return " ".join(parts)


class ProxyError(ValueError):
    """A proxy file (or control file) jim cannot read an identity from; the message names no content."""


def text(value: str | None, what: str = "value") -> str | None:
    """``value`` stripped, when it is a one-line text jim keeps (no control character, at most
    :data:`MAX_TEXT` characters); None when empty.  :class:`ProxyError` otherwise."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if len(value) > MAX_TEXT:
        raise ProxyError(f"the {what} is longer than {MAX_TEXT} characters")
    if _CONTROL.search(value):
        raise ProxyError(f"the {what} holds a control character")
    return value


def fqans_of(values: list[str]) -> tuple[str, ...]:
    """FQANs as jim keeps them (``/vo/group/Role=r/Capability=c``: printable, no spaces), in order, at most
    :data:`MAX_FQANS`; :class:`ProxyError` if any is not one (the primary would be a guess without it)."""
    out: list[str] = []
    for value in values[:MAX_FQANS]:
        if len(value) > MAX_FQAN or not _FQAN.fullmatch(value):
            raise ProxyError("an FQAN is not of the form /vo/group/Role=.../Capability=...")
        if value not in out:
            out.append(value)
    return tuple(out)


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------


def read_own_file(path: str, limit: int, what: str) -> bytes:
    """The bytes of ``path``: a regular file (not through a final symbolic link) owned by this account,
    at most ``limit`` bytes; :class:`ProxyError` (saying why, never what it holds) otherwise."""
    try:
        fd, st = open_regular(path, follow=False)
    except NotRegular as e:
        raise ProxyError(f"the {what} {e}") from None
    except OSError as e:
        why = "is a symbolic link" if e.errno == 40 else (e.strerror or type(e).__name__)  # (ELOOP: O_NOFOLLOW)
        raise ProxyError(f"the {what} cannot be read: {why}") from None
    try:
        if st.st_uid != os.geteuid():
            raise ProxyError(f"the {what} is owned by uid {st.st_uid}, not by this account")
        if st.st_size > limit:
            raise ProxyError(f"the {what} is larger than {limit} bytes")
        data = read_at_most(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ProxyError(f"the {what} is larger than {limit} bytes")
    return data


def from_proxy(path: str | None, *, source: str) -> Identity:
    """The identity in the X.509 proxy file ``path`` (subject and VOMS FQANs), from ``source``; unknown,
    with one line in jim's log, when there is none or it cannot be read (see the module docstring)."""
    if not path:
        return Identity(source=source)
    try:
        subject, fqans = proxy_identity(read_own_file(path, MAX_PROXY_BYTES, "proxy file"))
    except ProxyError as e:
        log.warning("grid identity unknown (%s): %s: %s", source, path, e)
        return Identity(source=source)
    except Exception as e:  # (a library's surprise: still never into the submit)
        log.warning("grid identity unknown (%s): %s: unreadable (%s)", source, path, type(e).__name__)
        return Identity(source=source)
    return Identity(subject=subject, fqans=fqans, source=source)


def from_environment(env: Mapping[str, str], *, source: str) -> Identity:
    """The identity of the proxy that the calling process's ``X509_USER_PROXY`` names (GRAM's job
    manager sets it to the job's delegated proxy before it runs ``jim submit``)."""
    return from_proxy(env.get("X509_USER_PROXY"), source=source)


# ---------------------------------------------------------------------------
# X.509
# ---------------------------------------------------------------------------


def proxy_identity(data: bytes) -> tuple[str, tuple[str, ...]]:
    """(the end-entity subject in slash form, the FQANs) of the PEM proxy file ``data``."""
    from cryptography import x509  # (lazy: only a submit with a proxy loads the X.509 library)

    blocks = _PEM_CERT.findall(data, 0, MAX_PROXY_BYTES)
    if not blocks:
        raise ProxyError("the proxy file holds no certificate")
    certs = []
    for block in blocks[:MAX_CERTS]:
        try:
            der = base64.b64decode(b"".join(block.split()), validate=True)
            certs.append(x509.load_der_x509_certificate(der))
        except (binascii.Error, ValueError):
            raise ProxyError("a certificate of the proxy file does not parse") from None
    cert, proxies = certs[0], []
    for _ in range(len(certs) + 1):
        if not _is_proxy(cert):
            subject = cert.subject
            break
        proxies.append(cert)
        signer = next((c for c in certs if c is not cert and c.subject == cert.issuer), None)
        if signer is None:  # (a proxy's issuer is its signer's subject: the end-entity's, when not in the file)
            subject = cert.issuer
            break
        cert = signer
    else:
        raise ProxyError("the proxy file's certificates form a loop")
    name = text(slash_name(subject), "subject")
    if name is None:
        raise ProxyError("the end-entity certificate has an empty subject")
    fqans: tuple[str, ...] = ()
    for proxy in proxies:
        raw = _extension_value(proxy, VOMS_EXTENSION)
        if raw is not None:
            try:
                fqans = fqans_of(voms_fqans(raw))
            except ProxyError as e:
                log.warning("grid identity: the VOMS attributes of %s are not read: %s", name, e)
            break
    return name, fqans


def slash_name(name: x509.Name) -> str:
    """An X.509 name in OpenSSL's one-line form, ``/DC=org/O=Example/CN=Jane Doe`` (the certificate's
    order; a multi-valued entry joined with ``+``)."""
    parts = []
    for rdn in name.rdns:
        parts.append("+".join(f"{_short(a.oid.dotted_string)}={_value(a.value)}" for a in rdn))
    return "".join("/" + p for p in parts)


def _short(oid: str) -> str:
    return _SHORT_NAMES.get(oid, oid)


def _value(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.hex()


def _extension_value(cert: x509.Certificate, oid: str) -> bytes | None:
    from cryptography import x509  # (lazy: see proxy_identity)

    try:
        ext = cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(oid))
    except x509.ExtensionNotFound:
        return None
    value = ext.value
    if isinstance(value, x509.UnrecognizedExtension):
        return value.value
    return None


def _is_proxy(cert: x509.Certificate) -> bool:
    """A proxy certificate: ProxyCertInfo (RFC 3820, GT3), or a legacy one named ``<issuer>/CN=proxy``."""
    from cryptography import x509  # (lazy: see proxy_identity)
    from cryptography.x509.oid import NameOID  # (lazy: see proxy_identity)

    exts = cert.extensions
    for oid in _PROXY_EXTENSIONS:
        try:
            exts.get_extension_for_oid(x509.ObjectIdentifier(oid))
            return True
        except x509.ExtensionNotFound:
            pass
    subject, issuer = cert.subject.rdns, cert.issuer.rdns
    if len(subject) != len(issuer) + 1 or subject[:-1] != issuer:
        return False
    last = list(subject[-1])
    return len(last) == 1 and last[0].oid == NameOID.COMMON_NAME and last[0].value in _LEGACY_PROXY_CN


# ---------------------------------------------------------------------------
# The VOMS attribute certificate: a bounded DER walk
# ---------------------------------------------------------------------------


def voms_fqans(der: bytes) -> list[str]:
    """The FQANs of the first VOMS attribute certificate in the extension's value ``der`` (in order).

    The attribute certificate (RFC 5755) holds an attribute of type 1.3.6.1.4.1.8005.100.100.4 whose
    value is ``IetfAttrSyntax``: an optional ``[0]`` policy authority, then a SEQUENCE of OCTET STRINGs,
    the FQANs.  The walk looks at most :data:`MAX_DER_NODES` elements, :data:`MAX_DER_DEPTH` deep, and
    reads nothing but definite lengths inside their parents."""
    budget = [MAX_DER_NODES]
    for tag, start, stop in _walk(der, 0, len(der), 0, budget):
        if tag != 0x30:
            continue
        kids = list(_children(der, start, stop, budget))
        if len(kids) == 2 and kids[0][0] == 0x06 and der[kids[0][1] : kids[0][2]] == _VOMS_ATTRIBUTE:
            return _ietf_values(der, kids[1], budget)
    raise ProxyError("the VOMS extension holds no VOMS attribute")


def _ietf_values(der: bytes, values: tuple[int, int, int], budget: list[int]) -> list[str]:
    tag, start, stop = values
    if tag != 0x31:
        raise ProxyError("the VOMS attribute's values are not a SET")
    syntax = next(iter(_children(der, start, stop, budget)), None)
    if syntax is None or syntax[0] != 0x30:
        raise ProxyError("the VOMS attribute has no IetfAttrSyntax")
    for tag, s, e in _children(der, syntax[1], syntax[2], budget):
        if tag == 0x30:
            out = []
            for t, vs, ve in _children(der, s, e, budget):
                if t != 0x04:
                    raise ProxyError("a VOMS attribute value is not an OCTET STRING")
                try:
                    out.append(der[vs:ve].decode("utf-8"))
                except UnicodeDecodeError:
                    raise ProxyError("an FQAN is not UTF-8") from None
            return out
    raise ProxyError("the VOMS attribute has no values")


def _walk(der: bytes, start: int, stop: int, depth: int, budget: list[int]) -> Iterator[tuple[int, int, int]]:
    """Every element from ``start`` to ``stop``, in document order, into constructed ones (not deeper
    than :data:`MAX_DER_DEPTH`: the attribute is 5 deep, names and the server's certificates deeper)."""
    for tag, s, e in _children(der, start, stop, budget):
        yield tag, s, e
        if tag & 0x20 and depth < MAX_DER_DEPTH:  # (constructed)
            yield from _walk(der, s, e, depth + 1, budget)


def _children(der: bytes, start: int, stop: int, budget: list[int]) -> Iterator[tuple[int, int, int]]:
    """(tag, content start, content end) of each element from ``start`` to ``stop``."""
    pos = start
    while pos < stop:
        budget[0] -= 1
        if budget[0] < 0:
            raise ProxyError("the VOMS extension has too many elements")
        if pos + 2 > stop:
            raise ProxyError("the VOMS extension is cut short")
        tag, length = der[pos], der[pos + 1]
        if tag & 0x1F == 0x1F:
            raise ProxyError("the VOMS extension uses a high tag number")
        pos += 2
        if length & 0x80:
            n = length & 0x7F
            if n == 0 or n > 4 or pos + n > stop:
                raise ProxyError("the VOMS extension has a bad length")
            length = int.from_bytes(der[pos : pos + n], "big")
            pos += n
        if pos + length > stop:
            raise ProxyError("the VOMS extension is cut short")
        yield tag, pos, pos + length
        pos += length


# ---------------------------------------------------------------------------
# ARC
# ---------------------------------------------------------------------------


def from_arc_local(path: str, *, source: str = "arc") -> Identity:
    """The identity in the ARC job's ``local`` control file at ``path`` (A-REX writes it, 0600, as the
    mapped user): a token job's ``tokenclaim.iss`` and ``tokenclaim.sub``, else ``subject``; the FQANs
    of its ``voms`` lines.  Unknown, with one line in jim's log, when it cannot be read."""
    try:
        raw = read_own_file(path, MAX_LOCAL_BYTES, "job's local control file")
        return arc_local_identity(raw.decode("utf-8", "replace"), source=source)
    except ProxyError as e:
        log.warning("grid identity unknown (%s): %s: %s", source, path, e)
        return Identity(source=source)


def arc_local_identity(content: str, *, source: str = "arc") -> Identity:
    """:func:`from_arc_local` of the file's text (``key=value`` lines, as A-REX writes them)."""
    first: dict[str, str] = {}
    voms: list[str] = []
    for line in content.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "voms":
            voms.append(value)
        elif key in ("subject", "tokenclaim.iss", "tokenclaim.sub"):
            first.setdefault(key, value)
    issuer = _kept(first.get("tokenclaim.iss"), "token issuer", source)
    token_subject = _kept(first.get("tokenclaim.sub"), "token subject", source)
    # (a token job's subject= is A-REX's own "<issuer>/<sub>": not a certificate's)
    subject = None if (issuer or token_subject) else _kept(first.get("subject"), "subject", source)
    try:
        fqans = fqans_of(voms)
    except ProxyError as e:
        log.warning("grid identity (%s): the FQANs are not recorded: %s", source, e)
        fqans = ()
    return Identity(subject=subject, fqans=fqans, issuer=issuer, token_subject=token_subject, source=source)


def _kept(value: str | None, what: str, source: str) -> str | None:
    try:
        return text(value, what)
    except ProxyError as e:
        log.warning("grid identity (%s): the %s is not recorded: %s", source, what, e)
        return None
