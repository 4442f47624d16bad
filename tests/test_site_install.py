"""``jim site-install``: jim's systemd units into a scratch root, checked by systemd's own verifier.

Everything runs the real ``jim site-install`` below ``tmp_path`` (``--root``);
enabling uses the real ``systemctl --root`` (the links only), and the units
are checked with ``systemd-analyze verify`` (installed from Debian's
``systemd`` package when missing and root; skipped otherwise, failing under
CI).
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from jim import siteinstall
from jim.arguments import COMMANDS, parser

from support.env import REPO, require_service

UNIT_DIR = "/etc/systemd/system"
ENV_FILE = "/etc/jim/services.env"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


@pytest.fixture
def jim_cmd() -> str:
    """The jim the units run: this checkout's, so that systemd-analyze finds an executable."""
    path = Path(sys.executable).parent / "jim"
    assert path.is_file() and os.access(path, os.X_OK), path
    return str(path)


def site_install(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jim", "site-install", "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def tree(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every path below ``root``: (mode, inode, content or link target)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        if p.is_symlink():
            what = "-> " + os.readlink(p)
        elif p.is_file():
            what = p.read_text()
        else:
            what = "<dir>"
        out["/" + str(p.relative_to(root))] = (stat.S_IMODE(st.st_mode), st.st_ino, what)
    return out


def exec_start(unit: str) -> list[str]:
    line = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def test_the_units_are_installed_once_then_a_second_run_changes_nothing(root, jim_cmd):
    first = site_install(root, "--jim-command", jim_cmd)
    assert first.returncode == 0, first.stderr
    installed = [f"{UNIT_DIR}/{name}" for name in siteinstall.UNITS] + [ENV_FILE]
    assert [ln.split()[1] for ln in first.stdout.splitlines() if ln.startswith("install ")] == [
        str(root) + p for p in installed
    ]
    assert "changed 6 item(s)." in first.stdout and "Nothing enabled" in first.stdout
    files = tree(root)
    for path in installed:
        mode, _, text = files[path]
        assert mode == 0o644 and siteinstall.MARKER in text, path
    for d in ("/etc", "/etc/systemd", UNIT_DIR, "/etc/jim"):
        assert files[d][0] == 0o755, d
    for name in siteinstall.UNITS:
        text = files[f"{UNIT_DIR}/{name}"][2]
        assert "@" not in text.replace("@system-service", ""), (name, text)  # every template value filled
        if name.endswith(".service"):
            argv = exec_start(text)
            assert argv[0] == jim_cmd and f"EnvironmentFile=-{ENV_FILE}" in text, name

    second = site_install(root, "--jim-command", jim_cmd)
    assert second.returncode == 0, second.stderr
    assert [ln.split()[0] for ln in second.stdout.splitlines()[:6]] == ["unchanged"] * 5 + ["kept"]
    assert "changed 0 item(s)." in second.stdout
    assert tree(root) == files  # not even rewritten with the same bytes


def test_the_services_run_commands_jim_has_with_options_it_takes(root, jim_cmd):
    assert site_install(root, "--jim-command", jim_cmd).returncode == 0
    units = {name: (root / UNIT_DIR.lstrip("/") / name).read_text() for name in siteinstall.UNITS}
    serve = units["jim-serve.service"]
    defaults = dict(
        ln.removeprefix("Environment=").split("=", 1) for ln in serve.splitlines() if ln.startswith("Environment=")
    )
    argv = [defaults.get(a[2:-1], a) if a.startswith("${") else a for a in exec_start(serve)[1:]]
    assert "$JIM_SERVE_OPTIONS" in argv
    argv.remove("$JIM_SERVE_OPTIONS")  # (an empty $VAR is no argument at all)
    args = parser("serve").parse_args(argv)
    assert (args.command, args.site, args.proxy_secret_file, args.host, args.port, args.homes) == (
        "serve",
        True,
        "/etc/jim/serve.secret",
        "127.0.0.1",
        8642,
        "{home}/.jim",
    )
    assert exec_start(units["jim-advertise.service"])[1:] == ["advertise", "$JIM_ADVERTISE_OPTIONS"]
    assert exec_start(units["jim-purge.service"])[1:] == ["purge", "--all-users", "$JIM_PURGE_OPTIONS"]
    assert parser("advertise").parse_args(["advertise"]).command == "advertise"
    assert "purge" in COMMANDS, "jim-purge.service runs jim purge"
    assert parser("purge").parse_args(["purge", "--all-users"]).all_users is True
    assert "Unit=" not in units["jim-advertise.timer"]  # (a timer starts the service of its own name)
    # root only to become each account, and the system read-only
    for line in ("ProtectSystem=full", "NoNewPrivileges=yes", "PrivateTmp=yes"):
        assert line in serve.splitlines(), line


def test_dry_run_says_every_step_and_writes_nothing(root, jim_cmd):
    proc = site_install(root, "--jim-command", jim_cmd, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len([ln for ln in lines if ln.startswith("[dry run] install ")]) == 6
    assert "would change 6 item(s)." in lines
    assert list(root.iterdir()) == []


@pytest.fixture(scope="module")
def systemd_analyze() -> str:
    """systemd's own verifier; installed from Debian's systemd package when missing (as root)."""
    if shutil.which("systemd-analyze") is None and os.geteuid() == 0:
        subprocess.run([str(REPO / "tests/services/lib/apt-install.sh"), "site-install", "systemd"], check=False)
    found = shutil.which("systemd-analyze")
    require_service(found is not None, "systemd-analyze (Debian's systemd package)")
    assert found is not None
    return found


def test_systemd_analyze_verify_finds_nothing_to_say(root, jim_cmd, systemd_analyze):
    assert site_install(root, "--jim-command", jim_cmd, "--jim-config", "/etc/jim/jim.toml").returncode == 0
    units = [str(root / UNIT_DIR.lstrip("/") / name) for name in siteinstall.UNITS]
    proc = subprocess.run([systemd_analyze, "verify", *units], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr, proc.stdout) == (0, "", "")
    # (it does look: a misspelt key and a missing command are reported)
    broken = Path(units[0]).read_text().replace("PrivateTmp=", "PrivateTmpp=").replace(jim_cmd, "/nonexistent/jim")
    Path(units[0]).write_text(broken)
    proc = subprocess.run([systemd_analyze, "verify", *units], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "PrivateTmpp" in proc.stderr and "/nonexistent/jim" in proc.stderr


def test_enable_makes_the_links_systemctl_would_and_says_already_the_next_time(root, jim_cmd):
    systemctl = shutil.which("systemctl")
    require_service(systemctl is not None, "systemctl (Debian's systemd package)")
    first = site_install(root, "--jim-command", jim_cmd, "--enable", "serve", "--enable", "advertise")
    assert first.returncode == 0, first.stderr
    assert f"run        {systemctl} --root={root} enable jim-serve.service" in first.stdout
    wants = root / UNIT_DIR.lstrip("/")
    assert os.readlink(wants / "multi-user.target.wants/jim-serve.service") == f"{UNIT_DIR}/jim-serve.service"
    assert os.readlink(wants / "timers.target.wants/jim-advertise.timer") == f"{UNIT_DIR}/jim-advertise.timer"
    assert not (wants / "timers.target.wants/jim-purge.timer").exists()  # (only what was asked)
    again = site_install(root, "--jim-command", jim_cmd, "--enable", "serve", "--enable", "advertise")
    assert "enabled    jim-serve.service (already)" in again.stdout and "changed 0 item(s)." in again.stdout

    gone = site_install(root, "--uninstall")
    assert gone.returncode == 0, gone.stderr
    assert not (wants / "multi-user.target.wants/jim-serve.service").is_symlink()
    assert not (wants / "timers.target.wants/jim-advertise.timer").is_symlink()
    assert not list(wants.glob("jim-*"))


def test_a_unit_that_is_not_jims_is_refused_unless_forced(root, jim_cmd):
    unit = root / UNIT_DIR.lstrip("/") / "jim-purge.timer"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Timer]\nOnCalendar=hourly\n")
    proc = site_install(root, "--jim-command", jim_cmd)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"error: {unit} exists and is not jim's (no marker line): remove it, or give --force"
    ]
    assert unit.read_text() == "[Timer]\nOnCalendar=hourly\n"
    forced = site_install(root, "--jim-command", jim_cmd, "--force")
    assert forced.returncode == 0 and siteinstall.MARKER in unit.read_text()


def test_uninstall_removes_only_jims_and_keeps_the_settings_someone_changed(root, jim_cmd):
    assert site_install(root, "--jim-command", jim_cmd).returncode == 0
    env = root / ENV_FILE.lstrip("/")
    env.write_text(env.read_text() + "JIM_SERVE_PORT=9000\n")
    other = root / UNIT_DIR.lstrip("/") / "other.service"
    other.write_text("[Service]\nExecStart=/bin/true\n")
    proc = site_install(root, "--uninstall")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in env.parent.parent.rglob("*") if p.is_file()) == ["other.service", "services.env"]
    assert f"kept       {env} (it holds your settings)" in proc.stdout
    assert site_install(root, "--uninstall").stdout.splitlines()[-1] == "changed 0 item(s)."
    # an environment file as jim wrote it goes with the units
    env.unlink()
    assert site_install(root, "--jim-command", jim_cmd).returncode == 0
    assert site_install(root, "--uninstall").returncode == 0 and not env.exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--jim-command", "bin/jim"),
        ("--jim-command", "/opt/my jim/bin/jim"),
        ("--jim-config", "/etc/jim/%i.toml"),
        ("--env-file", "/etc/jim/${X}.env"),
        ("--unit-dir", "relative/dir"),
    ],
)
def test_a_value_a_unit_file_cannot_hold_as_it_is_is_one_line_of_error(root, jim_cmd, option, value):
    argv = ["--jim-command", jim_cmd, option, value] if option != "--jim-command" else [option, value]
    proc = site_install(root, *argv)
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {option} ") and "must be an absolute path" in proc.stderr
    assert list(root.iterdir()) == []


def test_the_help_lists_it(jim_cmd):
    out = subprocess.run([jim_cmd, "--help"], capture_output=True, text=True, timeout=60).stdout
    assert "\n    site-install " in out or "\n    site-install\n" in out
    own = subprocess.run([jim_cmd, "site-install", "--help"], capture_output=True, text=True, timeout=60)
    assert own.returncode == 0 and "--enable {advertise,purge,serve}" in own.stdout
