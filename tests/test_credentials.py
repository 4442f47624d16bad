"""The grid job's credential (jim/credentials.py): read and checked at submit, a private copy the local jobs
use, kept fresh from the front end's file, never outlived, never shown.

The proxies are RFC 3820 proxies of a throwaway CA (tests/support/proxies.py), of the lifetime each test
needs; the grid jobs run for real on the embedded fork backend.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from lxml import etree

from jim import credentials as creds
from jim.config import ConfigError, load, parse
from jim.credentials import CredentialError, Handed, Handover
from jim.identity import MAX_PROXY_BYTES
from jim.jobdesc import parse_rsl
from jim.plan import make_plan
from jim.site import Site
from jim.submit import submit
from jim.timestamps import now_iso

from support.jimcli import Jim, write_config
from support.proxies import KEY_MARK, Authority, Proxy, UserCert, files_holding, grid_proxy_init, jwt, replace

# ---------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def authority() -> Authority:
    return Authority.make()


@pytest.fixture(scope="module")
def user(authority: Authority) -> UserCert:
    return authority.user("Jim Tester")


@pytest.fixture(scope="module")
def stranger(authority: Authority) -> UserCert:
    return authority.user("Somebody Else")


def wait_for(what: str, check: Callable[[], object], timeout: float = 60.0, every: float = 0.1) -> object:
    """``check()`` once it is true (its value); an AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(every)


def secrets(proxy: Proxy) -> list[bytes]:
    """What must show nowhere but in the copy: the key's marker and every base64 line of the key."""
    return [KEY_MARK.encode(), *(line.encode() for line in proxy.key_lines())]


def assert_clean(text: str | bytes, proxy: Proxy, where: str) -> None:
    data = text.encode() if isinstance(text, str) else text
    hits = [s for s in secrets(proxy) if s in data]
    assert not hits, f"key material in {where}: {hits[:2]}"


def tar_members(path: str | Path) -> dict[str, bytes]:
    with tarfile.open(path) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}  # type: ignore[union-attr]


def job_script(tmp_path: Path, body: str) -> str:
    """An RSL running ``body`` (a shell script written beside the test) in every local job."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return f'&(executable=/bin/sh)(arguments="{script}")'


#: What a local job prints of its credential (never its content): where it is, whose, how long it lasts.
SHOW_PROXY = 'echo "proxy=$X509_USER_PROXY"\n' + (
    'echo "subject=$(grid-proxy-info -subject)"\necho "timeleft=$(grid-proxy-info -timeleft)"\n'
    if shutil.which("grid-proxy-info")
    else f'{sys.executable} -c "import os, time; from jim import credentials as c; '
    "r = c.inspect(c.Handed('x509', os.environ['X509_USER_PROXY'])); "
    "print('subject=' + r.credential.subject); print('timeleft=%d' % (r.credential.not_after - time.time()))\"\n"
)


def shown(out: bytes) -> dict[str, str]:
    """The ``name=value`` lines a local job printed."""
    return dict(line.split("=", 1) for line in out.decode().splitlines() if "=" in line)


def stdouts(jim_env: Jim, job: str) -> list[dict[str, str]]:
    """What each local job of a finished grid job printed (from its output tar)."""
    members = tar_members(jim_env.status(job)["outputTar"])
    return [shown(data) for name, data in sorted(members.items()) if name.split("/")[-1].startswith("stdout.")]


def log_lines(jim_env: Jim, text: str) -> list[str]:
    path = jim_env.home / "log" / "jim.log"
    return [line for line in path.read_text().splitlines() if text in line] if path.exists() else []


def record_credentials(jim_env: Jim, job: str) -> list[dict[str, str]]:
    root = etree.parse(str(jim_env.home / "db" / f"{job}.xml")).getroot()
    return [dict(el.attrib) for el in root.iterfind("credentials/credential")]


def one_line_without_content(message: str, data: bytes) -> None:
    assert "\n" not in message and message
    assert "BEGIN" not in message and KEY_MARK not in message
    for line in data.decode("ascii", "replace").splitlines():
        if len(line) > 16 and not line.startswith("-----"):
            assert line not in message


# ---------------------------------------------------------------------------
# inspect(): what jim accepts
# ---------------------------------------------------------------------------


def test_a_good_proxy_gives_its_subject_and_its_end(tmp_path: Path, user: UserCert):
    proxy = user.proxy(3600)
    read = creds.inspect(Handed("x509", str(proxy.write(tmp_path / "x509up"))))
    assert read.credential == creds.Credential("x509", proxy.not_after, user.subject)
    assert read.data == proxy.data
    assert read.credential.label == "X.509 proxy"
    assert 3500 < (read.credential.left() or 0) <= 3600
    # a proxy that would outlive its user's certificate ends with it: the earliest end of its certificates
    longer = user.proxy(3 * 86400)
    read = creds.inspect(Handed("x509", str(longer.write(tmp_path / "x509up"))))
    assert read.credential.not_after == user.not_after < longer.not_after


def test_a_grid_proxy_init_proxy_is_accepted(tmp_path: Path, user: UserCert):
    data = grid_proxy_init(user, tmp_path / "gpi", hours=2)
    if data is None:
        pytest.skip("grid-proxy-init is not installed (globus-proxy-utils)")
    read = creds.inspect(Handed("x509", str(tmp_path / "gpi" / "gproxy.pem")))
    assert read.credential.subject == user.subject
    assert 7000 < (read.credential.left() or 0) <= 7200


def _refusals(tmp_path: Path, user: UserCert) -> list[tuple[str, str, bytes]]:
    """(path, what the reason says, the bytes it holds) of every file a proxy must not be read from."""
    good = user.proxy(3600)
    real = good.write(tmp_path / "real.pem")
    cases = []

    def case(name: str, data: bytes, why: str) -> None:
        cases.append((str(Proxy(data, 0, "").write(tmp_path / name)), why, data))

    link = tmp_path / "link.pem"
    link.symlink_to(real)
    cases.append((str(link), "symbolic link", good.data))
    fifo = tmp_path / "fifo.pem"
    os.mkfifo(fifo, 0o600)
    cases.append((str(fifo), "a FIFO", b""))
    (tmp_path / "dir.pem").mkdir()
    cases.append((str(tmp_path / "dir.pem"), "a directory", b""))
    if os.geteuid() == 0:
        case("other.pem", good.data, "owned by uid 65534")
        os.chown(tmp_path / "other.pem", 65534, 65534)
    else:
        cases.append(("/etc/passwd", "owned by uid 0", b""))
    case("huge.pem", good.data + b"\n" * MAX_PROXY_BYTES, f"larger than {MAX_PROXY_BYTES} bytes")
    key_only = good.data[good.data.index(b"-----BEGIN RSA") : good.data.index(b"-----END RSA")] + b"-----END RSA"
    case("nocert.pem", key_only + b" PRIVATE KEY-----\n", "holds no certificate")
    cert_only = good.data.replace(key_only, b"").replace(b" PRIVATE KEY-----\n", b"")
    case("nokey.pem", cert_only, "holds no private key")
    garbage = b"-----BEGIN CERTIFICATE-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOC\n-----END CERTIFICATE-----\n"
    case("garbage.pem", garbage + key_only + b" PRIVATE KEY-----\n", "does not parse")
    case("padding.pem", b"-----BEGIN CERTIFICATE-----\nMIIB=x\n-----END CERTIFICATE-----\n" + good.data, "parse")
    case("random.pem", os.urandom(4096), "holds no certificate")
    expired = user.proxy(-60)
    case("expired.pem", expired.data, f"expired at {now_iso(expired.not_after)}")
    cases.append((str(tmp_path / "absent.pem"), "does not exist", b""))
    cases.append(("x509up_u1000", "is not an absolute path", b""))
    return cases


def test_a_proxy_jim_cannot_use_is_refused_with_one_line(tmp_path: Path, user: UserCert):
    for path, why, data in _refusals(tmp_path, user):
        with pytest.raises(CredentialError) as refused:
            creds.inspect(Handed("x509", path))
        message = str(refused.value)
        assert why in message, (path, message)
        assert path in message
        one_line_without_content(message, data)


def test_more_certificates_than_read_is_no_crash(tmp_path: Path, user: UserCert):
    """Past the certificates a proxy's identity is read from, a block that does not parse is no exception
    out of inspect (a refusal, or not looked at)."""
    good = user.proxy(3600)
    extra = b"".join([good.data[good.data.rindex(b"-----BEGIN CERTIFICATE") :]] * 16)
    bad = b"-----BEGIN CERTIFICATE-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOC\n-----END CERTIFICATE-----\n"
    path = Proxy(good.data + extra + bad, 0, "").write(tmp_path / "many.pem")
    try:
        read = creds.inspect(Handed("x509", str(path)))
    except CredentialError as e:
        one_line_without_content(str(e), good.data)
    else:
        assert read.credential.subject == user.subject


def _token(tmp_path: Path, text: str | bytes, name: str = "token") -> str:
    data = text.encode() if isinstance(text, str) else text
    return str(Proxy(data, 0, "").write(tmp_path / name))


def test_bearer_tokens(tmp_path: Path):
    opaque = creds.inspect(Handed("token", _token(tmp_path, "AbC-123_~.xyz+/=\n")))
    assert opaque.credential == creds.Credential("token", None, None)
    assert opaque.credential.left() is None
    exp = int(time.time()) + 7200
    with_exp = creds.inspect(Handed("token", _token(tmp_path, jwt({"sub": "u-42", "exp": exp, "iss": "https://i"}))))
    assert with_exp.credential == creds.Credential("token", float(exp), "u-42")
    no_exp = creds.inspect(Handed("token", _token(tmp_path, jwt({"sub": "u-42"}))))
    assert no_exp.credential.not_after is None
    assert creds.Credential("token", float(exp), "u-42").record_attrs()["notAfter"] == now_iso(exp)


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (jwt({"exp": "tomorrow"}), "exp claim is not a time"),
        (jwt({"exp": True}), "exp claim is not a time"),
        (jwt({"exp": -5}), "exp claim is not a time"),
        (jwt({"exp": 2**41}), "exp claim is not a time"),
        (jwt({"exp": 1_000_000_000, "sub": "u"}), "expired at 2001-09-09T01:46:40.000Z"),
        (jwt("[1, 2]"), "claims are not a JSON object"),
        (jwt("{not json"), "claims do not decode"),
        (jwt("[" * 40000), "claims do not decode"),
        ("eyJh.%%%%.sig", "claims do not decode"),
        ("t\u00f6ken-\u00e9t\u00e9", "not ASCII"),
        ("abc def", "holds spaces"),
        ("abc\tdef", "holds spaces"),
        ("abc\x07def", "control characters"),
        ("\n", "empty"),
    ],
    ids=lambda v: v[:24] if isinstance(v, str) else None,
)
def test_a_token_jim_cannot_use_is_refused_with_one_line(tmp_path: Path, token: str, why: str):
    path = _token(tmp_path, token)
    with pytest.raises(CredentialError) as refused:
        creds.inspect(Handed("token", path))
    message = str(refused.value)
    assert why in message and path in message
    one_line_without_content(message, token.encode())


def test_oversized_token_and_one_of_another_account(tmp_path: Path):
    with pytest.raises(CredentialError, match=f"larger than {creds.MAX_TOKEN_BYTES} bytes"):
        creds.inspect(Handed("token", _token(tmp_path, "a" * (creds.MAX_TOKEN_BYTES + 1))))
    if os.geteuid() != 0:
        pytest.skip("not root: no file of another account to make")
    path = _token(tmp_path, "opaque-token", "theirs")
    os.chown(path, 65534, 65534)
    with pytest.raises(CredentialError, match="owned by uid 65534"):
        creds.inspect(Handed("token", path))


# ---------------------------------------------------------------------------
# shortfall() and the settings
# ---------------------------------------------------------------------------


def test_shortfall_counts_the_expected_end_and_the_margin():
    now = 1_800_000_000.0
    proxy = creds.Credential("x509", now + 1000, "/CN=a")
    assert creds.shortfall([proxy], now, 600, 300) is None
    why = creds.shortfall([proxy], now, 800, 300)
    assert why is not None and "(1000 s left), before the local job's expected end (800 s) + 300 s" in why
    assert why.endswith("; waiting for a refresh")
    assert creds.shortfall([proxy], now, None, 1001) is not None
    assert "ended at" in (creds.shortfall([proxy], now + 2000, None, 0) or "")
    assert creds.shortfall([creds.Credential("token")], now, 10**6, 300) is None  # (its end is unknown)


@pytest.mark.parametrize(
    "setting",
    ["margin = -1.0", "margin = 700000.0", "wait_for_refresh = -5.0", "wait_for_refresh = 3000000.0", "nope = 1"],
)
def test_bad_credentials_settings_are_refused_at_load(tmp_path: Path, setting: str):
    path = tmp_path / "jim.toml"
    path.write_text(f"[credentials]\n{setting}\n")
    with pytest.raises(ConfigError, match="credentials"):
        load({"JIM_CONFIG": str(path)})


def test_credentials_settings_load(tmp_path: Path):
    path = tmp_path / "jim.toml"
    path.write_text("[credentials]\nmargin = 60.0\nwait_for_refresh = 0.0\nsize_to_lifetime = false\n")
    conf = load({"JIM_CONFIG": str(path)}).credentials
    assert (conf.margin, conf.wait_for_refresh, conf.size_to_lifetime) == (60.0, 0.0, False)
    assert parse({}).credentials.margin == 300.0


# ---------------------------------------------------------------------------
# The plan: the credential's lifetime as a time limit
# ---------------------------------------------------------------------------

MC = "&(executable=/bin/true)(jimtype=montecarlo)(events={events})(cpuperevent={cpe})"


def _plan(credential_left: float | None, events: int = 100000, cpe: float = 0.1):
    config = parse({"site": {"recommended_cpu_per_job": 3600, "max_cpu_per_job": 36000}})
    _handler, plan, _commands = make_plan(
        config, parse_rsl(MC.format(events=events, cpe=cpe)), dry_run=True, credential_left=credential_left
    )
    return plan


def test_the_credential_lifetime_sizes_local_jobs_when_it_is_the_tightest_limit():
    plan = _plan(1000.0)
    assert plan.binding == "credential-lifetime"
    assert plan.attrs["timeLimitBy"] == "credential-lifetime" and float(plan.attrs["timeLimit"]) == 1000.0
    assert all(float(s.attrs["estSeconds"]) <= 1000 for s in plan.slices)
    assert "credential's remaining 1000 s" in plan.explanation
    assert _plan(None).binding == "site-recommended-cpu"
    assert _plan(5000.0).binding == "site-recommended-cpu"  # (not the tightest)
    assert _plan(59.0).binding == "site-recommended-cpu"  # (under one minute: not counted)
    # one event longer than the lifetime: not counted (the local jobs wait for a refresh instead)
    assert _plan(100.0, events=10, cpe=200).binding != "credential-lifetime"


def _submit_here(jim_env: Jim, rsl: str, proxy: Path | None = None, handover: Handover | None = None) -> str:
    """A grid job submitted by the real submit in this process (``X509_USER_PROXY`` as GRAM's job manager
    sets it), its worker left to the first poll."""
    old = dict(os.environ)
    os.environ.update(jim_env.env)
    os.environ.pop("X509_USER_PROXY", None)
    if proxy is not None:
        os.environ["X509_USER_PROXY"] = str(proxy)
    try:
        return submit(Site(load()), parse_rsl(rsl), start_background=False, handover=handover)
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_a_submit_sizes_by_the_proxy_unless_told_not_to(jim_env: Jim, tmp_path: Path, user: UserCert):
    proxy = user.proxy(1800)
    path = proxy.write(tmp_path / "x509up")
    rsl = MC.format(events=100000, cpe=0.1)
    sized = Site(load(jim_env.env)).db.read(_submit_here(jim_env, rsl, path)).plan
    assert sized["binding"] == "credential-lifetime"
    assert sized["credentialEnd"] == now_iso(proxy.not_after)
    assert float(sized["timeLimit"]) <= 1800 - 300
    write_config(jim_env, "[credentials]\nsize_to_lifetime = false\n")
    unsized = Site(load(jim_env.env)).db.read(_submit_here(jim_env, rsl, path)).plan
    assert unsized["binding"] == "site-recommended-cpu"
    assert unsized["credentialEnd"] == now_iso(proxy.not_after)


def test_local_jobs_sized_to_the_proxy_are_not_held_when_submitted(jim_env: Jim, tmp_path: Path, user: UserCert):
    """A local job sized to the credential's lifetime leaves time for its submission: submitted a second
    after the plan, its credential still lasts past its expected end and the margin."""
    write_config(jim_env, "[handlers.montecarlo]\nbalanced = false\n")
    proxy = user.proxy(1800)
    job_id = _submit_here(jim_env, MC.format(events=600000, cpe=0.01), proxy.write(tmp_path / "x509up"))
    job = Site(load(jim_env.env)).db.read(job_id)
    assert job.plan["binding"] == "credential-lifetime"
    held = job.credentials()
    assert held == [creds.Credential("x509", proxy.not_after, user.subject)]
    later = time.time() + 1.0
    for lj in job.local_jobs():
        assert creds.shortfall(held, later, float(lj.slice["estSeconds"]), 300.0) is None, lj.slice


def test_local_jobs_sized_to_the_proxy_run_without_waiting(jim_env: Jim, tmp_path: Path, user: UserCert):
    """Full-size local jobs (not balanced) as long as the proxy allows: the worker does not hold them back
    for the seconds between the plan and their submission."""
    write_config(jim_env, "[handlers.montecarlo]\nbalanced = false\n")
    path = user.proxy(1800).write(tmp_path / "x509up")
    job = jim_env.submit(MC.format(events=600000, cpe=0.01), env={"X509_USER_PROXY": str(path)})
    out = jim_env.wait(job, timeout=30)
    assert out["JOB_STATE"] == "DONE", jim_env.run("status", job).stdout
    st = jim_env.status(job)
    assert st["plan"]["binding"] == "credential-lifetime" and int(st["plan"]["localJobs"]) >= 4
    assert not log_lines(jim_env, "local jobs wait")


# ---------------------------------------------------------------------------
# The copy, and nothing of it anywhere else
# ---------------------------------------------------------------------------


def test_the_local_jobs_get_a_private_copy_and_nothing_shows_the_key(jim_env: Jim, tmp_path: Path, user: UserCert):
    proxy = user.proxy(4 * 3600)
    (tmp_path / "gram").mkdir()
    src = proxy.write(tmp_path / "gram" / "x509_user_proxy")
    rsl = job_script(tmp_path, SHOW_PROXY) + "(count=2)(environment=(X509_USER_PROXY /etc/passwd))"
    job = jim_env.submit(rsl, env={"X509_USER_PROXY": str(src)})
    out = jim_env.wait(job)
    assert out["JOB_STATE"] == "DONE", out
    where = jim_env.home / "jobs" / job / "credentials"
    copy = where / "x509up"
    assert where.stat().st_mode & 0o777 == 0o700
    assert copy.stat().st_mode & 0o777 == 0o600 and copy.read_bytes() == src.read_bytes()
    assert (where / "state.json").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in where.iterdir()) == ["state.json", "x509up"]
    # the record: kind, end and subject only
    assert record_credentials(jim_env, job) == [
        {"kind": "x509", "notAfter": now_iso(proxy.not_after), "subject": user.subject}
    ]
    # every local job used the copy, not the file its own environment named
    for printed in stdouts(jim_env, job):
        assert printed["proxy"] == str(copy)
        assert printed["subject"].startswith(user.subject)
        assert 4 * 3600 - 120 < int(printed["timeleft"]) <= 4 * 3600
    # shown: the subject and the end, never the content
    text = jim_env.run("status", job).stdout
    assert re.search(rf"\n  credential X\.509 proxy {user.subject}, ends {now_iso(proxy.not_after)} \(3h ?5\dm", text)
    js = jim_env.run("status", job, "--json").stdout
    (shown_cred,) = json.loads(js)["credentials"]
    assert shown_cred["kind"] == "x509" and shown_cred["subject"] == user.subject
    assert shown_cred["notAfter"] == now_iso(proxy.not_after) and shown_cred["secondsLeft"] > 4 * 3600 - 120
    for what, content in (("jim status", text), ("jim status --json", js)):
        assert_clean(content, proxy, what)
    for name, data in tar_members(jim_env.status(job)["outputTar"]).items():
        assert_clean(data, proxy, f"the output tar's {name}")
    # and in all of jim's home, only the copy holds it
    assert set(files_holding(jim_env.home, secrets(proxy))) == {f"jobs/{job}/credentials/x509up"}


def test_the_status_line_shows_the_time_left(jim_env: Jim, tmp_path: Path, user: UserCert):
    proxy = user.proxy(4 * 3600)
    job = _submit_here(jim_env, "&(executable=/bin/true)", proxy.write(tmp_path / "x509up"))
    text = jim_env.run("status", job).stdout
    line = next(line for line in text.splitlines() if line.startswith("  credential "))
    assert re.fullmatch(
        rf"  credential X\.509 proxy {user.subject}, ends {now_iso(proxy.not_after)} \(3h ?5\dm.*left\)", line
    )


def test_a_token_handed_over_is_exported_as_bearer_token_file(jim_env: Jim, tmp_path: Path):
    exp = int(time.time()) + 3 * 3600
    token = jwt({"sub": "u-42", "exp": exp})
    path = _token(tmp_path, token + "\n")
    rsl = job_script(tmp_path, 'echo "token=$BEARER_TOKEN_FILE"\necho "bytes=$(wc -c < "$BEARER_TOKEN_FILE")"\n')
    job = _submit_here(jim_env, rsl, handover=Handover(credentials=[Handed("token", path)]))
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    copy = jim_env.home / "jobs" / job / "credentials" / "token"
    assert copy.read_text() == token + "\n" and copy.stat().st_mode & 0o777 == 0o600
    (printed,) = stdouts(jim_env, job)
    assert printed == {"token": str(copy), "bytes": str(len(token) + 1)}
    assert record_credentials(jim_env, job) == [{"kind": "token", "notAfter": now_iso(exp), "subject": "u-42"}]
    assert "  credential bearer token u-42, ends " in jim_env.run("status", job).stdout
    signature = token.rsplit(".", 1)[1].encode()
    assert set(files_holding(jim_env.home, [signature])) == {f"jobs/{job}/credentials/token"}


@pytest.mark.parametrize("case", ["expired", "malformed", "symlink"])
def test_a_proxy_that_cannot_be_used_refuses_the_submit(jim_env: Jim, tmp_path: Path, user: UserCert, case: str):
    good = user.proxy(3600)
    path = tmp_path / "x509up"
    if case == "expired":
        expired = user.proxy(-120)
        expired.write(path)
        why, data = f"expired at {now_iso(expired.not_after)}", expired.data
    elif case == "malformed":
        data = good.data.replace(b"-----BEGIN CERTIFICATE-----\nMII", b"-----BEGIN CERTIFICATE-----\nAII", 1)
        Proxy(data, 0, "").write(path)
        why = "does not parse"
    else:
        path.symlink_to(good.write(tmp_path / "real"))
        why, data = "symbolic link", good.data
    out = jim_env.protocol("submit", "--rsl", "&(executable=/bin/true)", env={"X509_USER_PROXY": str(path)})
    assert out["ERROR"] == "131" and out["_rc"] != "0", out
    assert set(out) == {"ERROR", "MESSAGE", "_rc", "_stderr"}
    assert out["MESSAGE"].startswith("the grid job's credential cannot be used: ") and why in out["MESSAGE"]
    one_line_without_content(out["MESSAGE"], data)
    assert_clean(out["MESSAGE"] + out["_stderr"], Proxy(data, 0, ""), "the answer")
    assert not list((jim_env.home / "db").glob("*.xml"))
    assert not (jim_env.home / "jobs").exists() or not list((jim_env.home / "jobs").iterdir())


# ---------------------------------------------------------------------------
# Kept fresh
# ---------------------------------------------------------------------------

#: A local job that runs until the test says stop, reporting progress all the while (each report the
#: monitor merges is a pass it made).
TICKING = 'i=0\nwhile [ ! -e "{stop}" ]; do i=$((i+1)); jim-progress tick $i 1000000; sleep 0.1; done\n'


def _ticks(jim_env: Jim, job: str) -> int:
    (lj,) = jim_env.status(job)["localJobs"]
    return max((p["done"] for p in lj.get("progress") or ()), default=0)


def _some_passes_later(jim_env: Jim, job: str) -> None:
    """Once the monitor merged two more progress reports of the local job (a few passes later)."""
    first = _ticks(jim_env, job)
    wait_for("a progress report", lambda: _ticks(jim_env, job) > first)
    second = _ticks(jim_env, job)
    wait_for("another progress report", lambda: _ticks(jim_env, job) > second)


def _shows(jim_env: Jim, job: str, proxy: Proxy) -> bool:
    copy = jim_env.home / "jobs" / job / "credentials" / "x509up"
    return (
        copy.read_bytes() == proxy.data
        and record_credentials(jim_env, job)[0]["notAfter"] == now_iso(proxy.not_after)
        and f"ends {now_iso(proxy.not_after)}" in jim_env.run("status", job).stdout
    )


def test_a_refresh_reaches_the_copy_and_a_bad_one_does_not(
    jim_env: Jim, tmp_path: Path, user: UserCert, stranger: UserCert
):
    stop = tmp_path / "stop"
    src = user.proxy(2 * 3600).write(tmp_path / "x509_user_proxy")
    job = jim_env.submit(job_script(tmp_path, TICKING.format(stop=stop)), env={"X509_USER_PROXY": str(src)})
    jim_env.wait_running(job, 1)
    copy = jim_env.home / "jobs" / job / "credentials" / "x509up"
    try:
        # rewritten in place (GRAM's job manager), then renamed over (a schedd's spool)
        for how, hours in (("in place", 4), ("by rename", 6)):
            before, source_inode = copy.stat().st_ino, src.stat().st_ino
            longer = user.proxy(hours * 3600)
            if how == "in place":
                longer.write(src)
                assert src.stat().st_ino == source_inode
            else:
                replace(src, longer.data)
            wait_for(f"the copy refreshed {how}", lambda p=longer: _shows(jim_env, job, p))
            assert copy.stat().st_ino != before and copy.stat().st_mode & 0o777 == 0o600  # (a new file)
            assert jim_env.status(job)["credentials"][0]["notAfter"] == now_iso(longer.not_after)
        kept = copy.read_bytes()
        # another subject, then garbage: not used, one line each in jim's log however many passes see them
        bad = [(stranger.proxy(8 * 3600).data, "of another subject"), (os.urandom(3000), "holds no certificate")]
        for n, (data, why) in enumerate(bad, 1):
            Proxy(data, 0, "").write(src)
            wait_for(f"the warning ({why})", lambda n=n: len(log_lines(jim_env, "is not used")) == n)
            _some_passes_later(jim_env, job)
            assert copy.read_bytes() == kept
            assert len(log_lines(jim_env, "is not used")) == n
            (line,) = log_lines(jim_env, why)
            assert job in line and str(src) in line
            assert_clean(line, Proxy(data, 0, ""), "the log")
    finally:
        stop.touch()
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"


def test_refresh_logs_a_refused_version_once(tmp_path: Path, user: UserCert):
    """In one process or many (the monitor, the worker): the refused version is remembered with the copy."""
    records: list[logging.LogRecord] = []
    catch = logging.Handler(logging.WARNING)
    catch.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("jim.credentials").addHandler(catch)
    try:
        src = tmp_path / "x509up"
        job_dir = tmp_path / "jobs" / "20261129-000000-00000000"
        job_dir.mkdir(parents=True)
        creds.install(job_dir, [creds.inspect(Handed("x509", str(user.proxy(3600).write(src))))])
        assert creds.refresh(job_dir) == []  # (nothing new)
        Proxy(b"not a proxy\n", 0, "").write(src)
        for _ in range(5):
            assert creds.refresh(job_dir) == []
        assert len(records) == 1 and "holds no certificate" in records[0].getMessage()
        # given another mode later (a new change time, the same content): looked at again, refused again
        before = src.stat().st_ctime_ns
        wait_for("a new change time", lambda: os.chmod(src, 0o600) or src.stat().st_ctime_ns != before, every=0.005)
        assert creds.refresh(job_dir) == [] and len(records) == 2
        good = user.proxy(7200)
        good.write(src)
        (fresh,) = creds.refresh(job_dir)
        assert fresh.not_after == good.not_after and creds.credentials(job_dir) == [fresh]
        assert (job_dir / "credentials" / "x509up").read_bytes() == good.data
        assert "refused" not in json.loads((job_dir / "credentials" / "state.json").read_text())["x509"]
        assert len(records) == 2
    finally:
        logging.getLogger("jim.credentials").removeHandler(catch)


# ---------------------------------------------------------------------------
# Never outlived
# ---------------------------------------------------------------------------

WAITING = "waiting for a refresh"


def _held(jim_env: Jim, job: str, n: int) -> dict:
    st = jim_env.status(job)
    held = [lj for lj in st["localJobs"] if lj["state"] == "PLANNED" and WAITING in (lj.get("waiting") or "")]
    return st if len(held) == n else {}


def test_a_short_proxy_holds_local_jobs_until_a_refresh(jim_env: Jim, tmp_path: Path, user: UserCert):
    src = user.proxy(800).write(tmp_path / "x509up")  # (under 10 minutes of wall time + the 300 s margin)
    rsl = job_script(tmp_path, SHOW_PROXY) + "(count=2)(maxwalltime=10)"
    job = jim_env.submit(rsl, env={"X509_USER_PROXY": str(src)})
    st = wait_for("two local jobs held back", lambda: _held(jim_env, job, 2))
    for lj in st["localJobs"]:  # type: ignore[index]
        assert "X.509 proxy ends" in lj["waiting"]
        assert "before the local job's expected end (600 s) + 300 s" in lj["waiting"]
        assert lj["waitingSince"] and lj["batchId"] is None
    text = jim_env.run("status", job).stdout
    assert text.count(WAITING) == 2 and "(600 s) + 300 s" in text
    longer = user.proxy(3 * 3600)
    replace(src, longer.data)
    out = jim_env.wait(job, timeout=60)
    assert out["JOB_STATE"] == "DONE", jim_env.run("status", job).stdout
    for printed in stdouts(jim_env, job):
        assert 3 * 3600 - 120 < int(printed["timeleft"]) <= 3 * 3600
    st = jim_env.status(job)
    assert all(lj.get("waiting") is None and lj.get("waitingSince") is None for lj in st["localJobs"])
    assert st["credentials"][0]["notAfter"] == now_iso(longer.not_after)
    assert len(log_lines(jim_env, "local jobs wait")) == 1  # (when they started to wait, not on every look)


def test_without_a_refresh_held_local_jobs_fail(jim_env: Jim, tmp_path: Path, user: UserCert):
    write_config(jim_env, "[credentials]\nwait_for_refresh = 1\n")
    src = user.proxy(800).write(tmp_path / "x509up")
    job = jim_env.submit("&(executable=/bin/true)(count=2)(maxwalltime=10)", env={"X509_USER_PROXY": str(src)})
    out = jim_env.wait(job, timeout=60)
    assert out["JOB_STATE"] == "FAILED", out
    st = jim_env.status(job)
    for lj in st["localJobs"]:
        assert lj["state"] == "FAILED" and lj["batchId"] is None
        assert "X.509 proxy ends" in lj["reason"] and "no refresh came within 1 s" in lj["reason"]
        assert WAITING not in lj["reason"]
    assert "no refresh came within 1 s" in jim_env.run("status", job).stdout


def test_a_proxy_that_ends_while_local_jobs_wait_fails_them_in_time(jim_env: Jim, tmp_path: Path, user: UserCert):
    """Once the proxy ended, the reason the local jobs wait stays the same from one look to the next: they
    still fail after wait_for_refresh."""
    write_config(jim_env, "[credentials]\nwait_for_refresh = 12\n")
    src = user.proxy(6).write(tmp_path / "x509up")
    job = jim_env.submit("&(executable=/bin/true)(maxwalltime=1)", env={"X509_USER_PROXY": str(src)})
    out = jim_env.wait(job, timeout=60)
    assert out["JOB_STATE"] == "FAILED", out
    (lj,) = jim_env.status(job)["localJobs"]
    assert "X.509 proxy ended at" in lj["reason"] and "no refresh came within 12 s" in lj["reason"]
