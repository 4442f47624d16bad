"""Who may look: the credentials and accounts a ``jim serve`` request is checked against.

A grid job's environment and arguments may hold passwords, so a request is
answered only for the account that owns the jobs (docs/web.md).  Whatever it
asked for, a request that is not let in gets 403 with no job data
(:class:`~jim.web.answers.HTTPError`).

* **The token** (:func:`check_token`; :class:`jim.web.server.JimServer`): a
  random token (:func:`new_token`, ``secrets.token_urlsafe``) printed on
  start.  ``?token=`` on the first visit becomes an HttpOnly,
  SameSite=Strict cookie and a :class:`~jim.web.answers.Redirect` to the
  same page without it (a known page, else ``/``); scripts send
  ``Authorization: token <token>`` (or ``Bearer``).
* **The site's web server** (:func:`site_account`, :func:`become`,
  :func:`site_home`; :class:`jim.web.server.SiteJimServer`): exactly one
  ``X-Jim-Proxy-Secret`` of the right value (the secret of
  :func:`read_secret`) and exactly one valid account name, not root's; the
  child process answering becomes that account (groups, gid, uid) before it
  opens anything, and reads that account's home only if it is private to it.
* **A site instance's /metrics** (:func:`check_metrics_token`): every
  account's counts (docs/metrics.md), for a scraper that sends
  ``Authorization: Bearer`` with the token of ``--metrics-token-file``;
  no account is become (the counts are read as each home's owner).
* **The Host check** (:func:`host_is_loopback_name`): a server bound to a
  loopback address (:func:`is_loopback`) refuses requests whose Host header
  names another host (DNS rebinding).

Credentials are compared in constant time (:func:`same`), and one longer
than :data:`MAX_CREDENTIAL` characters is refused before it is compared.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import pwd
import re
import secrets
import urllib.parse
from email.message import Message
from http import HTTPStatus

from jim.errors import JimError
from jim.ownership import home_problem
from jim.safeio import NotRegular, open_regular
from jim.web.answers import HTTPError, Redirect
from jim.web.pages import is_page

log = logging.getLogger("jim.web")

TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 43 characters
MAX_CREDENTIAL = 512  # a token, cookie or secret longer than this is refused before it is compared
URL_FILE = "serve.url"  # in $JIM_HOME, 0600: the URL with the token, as printed on start
SECRET_HEADER = "X-Jim-Proxy-Secret"
USER_HEADER = "X-Remote-User"
DEFAULT_HOMES = "{home}/.jim"
ACCOUNT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")  # a local account name (and, with _ for -, a header's)
MAX_QUERY_FIELDS = 20


def same(given: str, expected: str) -> bool:
    """Constant-time comparison of a credential from a request with the expected one."""
    if not given or len(given) > MAX_CREDENTIAL:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8", "replace"))


# ---------------------------------------------------------------------------
# The token
# ---------------------------------------------------------------------------


def new_token() -> str:
    """A new random token (256 bits): every start makes one, so an earlier run's URL no longer works."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def check_token(headers: Message, parts: urllib.parse.SplitResult, token: str, cookie: str) -> None:
    """Returns if the request shows ``token`` (in ``Authorization``, or in the cookie named ``cookie``);
    raises :class:`Redirect` (with the cookie set) for a first visit with the right ``?token=``, and
    :class:`HTTPError` 403 otherwise (ValueError for a query of too many fields)."""
    given = _query_value(parts.query, "token")
    if given is not None:
        if not same(given, token):
            raise HTTPError(HTTPStatus.FORBIDDEN, "wrong token: open the URL jim serve printed when it started")
        raise Redirect(_without_token(parts), {"Set-Cookie": f"{cookie}={token}; Path=/; HttpOnly; SameSite=Strict"})
    scheme, _, credential = headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() in ("token", "bearer") and same(credential.strip(), token):
        return
    if any(same(value, token) for value in _cookie_values(headers, cookie)):
        return
    raise HTTPError(
        HTTPStatus.FORBIDDEN,
        f"this view needs its token: open the URL jim serve printed when it started (also in $JIM_HOME/{URL_FILE})",
    )


def _cookie_values(headers: Message, wanted: str) -> list[str]:
    """Every value the request's cookies give ``wanted`` (another port's page may have set one more)."""
    out: list[str] = []
    for header in headers.get_all("Cookie") or []:
        for part in str(header).split(";"):
            name, sep, value = part.strip().partition("=")
            if sep and name == wanted and len(out) < 8:
                out.append(value.strip().strip('"'))
    return out


def _query_value(qs: str, name: str) -> str | None:
    """The (first) value of one query parameter, or None."""
    for key, value in urllib.parse.parse_qsl(qs, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS):
        if key == name:
            return value
    return None


def _without_token(parts: urllib.parse.SplitResult) -> str:
    """Where a first visit with ``?token=`` is sent: the same page without the token (a known page, else /)."""
    path = parts.path if is_page(parts.path) else "/"
    pairs = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k != "token"]
    return path + ("?" + urllib.parse.urlencode(pairs) if pairs else "")


# ---------------------------------------------------------------------------
# The site's web server
# ---------------------------------------------------------------------------


def site_account(headers: Message, secret: str, user_header: str) -> tuple[str, pwd.struct_passwd]:
    """The account a request through the site's web server is for (its name as sent, its passwd
    entry); :class:`HTTPError` 403 without exactly one right secret and exactly one valid account
    name, or for root."""
    secrets_given = headers.get_all(SECRET_HEADER) or []
    if len(secrets_given) != 1 or not same(str(secrets_given[0]).strip(), secret):
        raise HTTPError(HTTPStatus.FORBIDDEN, "not through the site's web server")
    users = headers.get_all(user_header) or []
    name = str(users[0]).strip() if len(users) == 1 else ""  # (twice: the proxy did not set it alone)
    if not ACCOUNT.fullmatch(name):
        raise HTTPError(HTTPStatus.FORBIDDEN, "no authenticated user")
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise HTTPError(HTTPStatus.FORBIDDEN, f"no local account {name}") from None
    if pw.pw_uid == 0:
        raise HTTPError(HTTPStatus.FORBIDDEN, "a site view does not serve root's jobs")
    return name, pw


def check_metrics_token(headers: Message, token: str | None) -> None:
    """Returns if the request shows the scraper's bearer token of a site instance's ``/metrics``
    (``Authorization: Bearer <token>``, exactly one); 404 when that instance has none, 403 otherwise."""
    if token is None:
        raise HTTPError(HTTPStatus.NOT_FOUND, "no /metrics here: jim serve --site answers it with --metrics-token-file")
    given = headers.get_all("Authorization") or []
    scheme, _, credential = str(given[0]).strip().partition(" ") if len(given) == 1 else ("", "", "")
    if scheme.lower() != "bearer" or not same(credential.strip(), token):
        raise HTTPError(HTTPStatus.FORBIDDEN, "/metrics needs the scraper's bearer token")


def become(pw: pwd.struct_passwd, *, in_child: bool) -> None:
    """Become the account ``pw`` (its groups, gid and uid, for good) unless this process already is
    it: as root, in a child process that answers one connection only; :class:`HTTPError` otherwise."""
    if os.geteuid() == pw.pw_uid:
        return
    if os.geteuid() != 0:
        raise HTTPError(HTTPStatus.FORBIDDEN, "this jim serve --site cannot act as other accounts")
    if not in_child:
        raise HTTPError(HTTPStatus.INTERNAL_SERVER_ERROR, "a site view answers in a child process only")
    os.setgroups(os.getgrouplist(pw.pw_name, pw.pw_gid))
    os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
    os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)


def site_home(homes: str, name: str, pw: pwd.struct_passwd) -> str:
    """The jim home of the account ``pw`` (``name`` as the request named it) from the pattern
    ``homes``; :class:`HTTPError` 403 unless it is the account's and private to it."""
    root = home_pattern(homes, pw.pw_name, pw.pw_dir)
    why = home_problem(root, pw.pw_uid)
    if why:
        log.warning("jim serve --site: %s: %s", name, why)
        raise HTTPError(HTTPStatus.FORBIDDEN, f"the jim home of {name} is not used: it is not private to {name}")
    return root


def home_pattern(pattern: str, user: str, home: str) -> str:
    """A user's jim home from a pattern: ``{user}`` the account name, ``{home}`` its home directory."""
    return pattern.replace("{user}", user).replace("{home}", home.rstrip("/") or "/")


def read_secret(path: str) -> str:
    """The shared secret of a site instance: a regular file of ours that no other account can read."""
    try:
        fd, st = open_regular(path, follow=False)
    except NotRegular:
        raise JimError(f"the proxy secret file {path} is not a regular file") from None
    except OSError as e:
        raise JimError(f"cannot read the proxy secret file {path}: {e.strerror} (a symbolic link is refused)") from None
    try:
        if st.st_uid != os.geteuid():
            raise JimError(f"the proxy secret file {path} does not belong to the account jim serve runs as")
        if st.st_mode & 0o077:
            raise JimError(f"the proxy secret file {path} is open to other accounts: chmod 600 it")
        data = os.read(fd, MAX_CREDENTIAL + 2)
    finally:
        os.close(fd)
    secret = data.decode("utf-8", "replace").strip()
    if len(secret) < 16 or len(secret) > MAX_CREDENTIAL or any(c.isspace() or not c.isprintable() for c in secret):
        raise JimError(
            f"the proxy secret in {path} must be one line of 16 to {MAX_CREDENTIAL} printable characters "
            f"(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return secret


# ---------------------------------------------------------------------------
# The Host check
# ---------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """Whether an address to listen on is a loopback one (``localhost``, 127.x.y.z, ::1)."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_is_loopback_name(host_header: str) -> bool:
    """Host header of a request to a loopback server: localhost, 127.x.y.z or [::1], any port."""
    h = host_header.strip().lower()
    if h.startswith("["):
        name = h[1 : h.find("]")] if "]" in h else h
    else:
        name = h.rsplit(":", 1)[0] if h.count(":") == 1 else h
    if name in ("localhost", "localhost.") or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
