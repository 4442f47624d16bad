"""ARC runtime environments as jim runs them (jim/arc/rte.py), with real bash and no ARC CE.

A hand-made control directory holds ``rte/enabled`` and ``rte/default`` links into an RTE
directory (``[arex] runtimedir``), as ``arcctl rte enable/default`` makes them.  Stage 0 runs
as the submit step runs it; the stage 1/2 script runs as a local job runs it
(``/bin/bash .jim-arc-runtime.sh COMMAND ARGS``, from another directory).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from jim.arc import grami, rte
from jim.arc.controldir import VERSION2
from jim.arc.rte import RteError

from support.env import REPO
from support.jimcli import processes_of

RTES = REPO / "tests" / "services" / "lib" / "rtes"


@dataclass
class Site:
    controldir: Path
    rtedir: Path
    session: Path

    def install(self, name: str, text: str, *, enabled: bool = True, default: bool = False) -> Path:
        """``name`` as an RTE of the site: its file in the RTE directory, linked as arcctl links it."""
        path = self.rtedir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for kind, wanted in (("enabled", enabled), ("default", default)):
            if wanted:
                self.link(kind, name, path)
        return path

    def link(self, kind: str, name: str, target: Path | str) -> None:
        link = self.controldir / "rte" / kind / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)

    def options(self, *runtimes: tuple[str, list[str]], **extra: str) -> dict[str, str]:
        """A grami's options asking for ``runtimes`` (name, options)."""
        opts = {
            "joboption_directory": str(self.session),
            "joboption_controldir": str(self.controldir),
            "joboption_arg_0": "./run.sh",
            "joboption_gridid": "0a1b2c3d4e5f",
            "joboption_stdout": str(self.session / "out.txt"),
            "joboption_stderr": str(self.session / "err.txt"),
        }
        for i, (name, args) in enumerate(runtimes):
            opts[f"joboption_runtime_{i}"] = name
            for j, arg in enumerate(args, 1):
                opts[f"joboption_runtime_{i}_{j}"] = arg
        opts.update({f"joboption_{k}": v for k, v in extra.items()})
        return opts

    def plan(self, opts: dict[str, str]) -> list[rte.Rte]:
        return rte.plan(opts, [str(self.rtedir)])


@pytest.fixture
def site(tmp_path: Path) -> Site:
    s = Site(tmp_path / "control", tmp_path / "rtes", tmp_path / "session")
    for d in (s.controldir / "rte" / "enabled", s.controldir / "rte" / "default", s.rtedir, s.session):
        d.mkdir(parents=True)
    return s


def _stage0(site: Site, opts: dict[str, str], env: dict[str, str] | None = None, **kw) -> dict[str, str]:
    return rte.run_stage0(opts, site.plan(opts), {"PATH": "/usr/bin:/bin", **(env or {})}, **kw)


# ---------------------------------------------------------------------------
# which RTEs, and where
# ---------------------------------------------------------------------------


def test_requested_then_default_rtes_and_jims_own_run_nowhere(site):
    site.install("ENV/A", "true\n")
    site.install("ENV/D", "true\n", enabled=False, default=True)
    site.install("ENV/BOTH", "true\n", default=True)
    site.install("ENV/JIM/GENERIC", "true\n")
    site.install("ENV/EMPTY", "")
    opts = site.options(("ENV/A", ["x y", "z"]), ("ENV/JIM/GENERIC", ["count=2"]), ("ENV/BOTH", []), ("ENV/EMPTY", []))
    planned = site.plan(opts)
    assert [(r.index, r.name, r.options, r.default) for r in planned] == [
        (0, "ENV/A", ["x y", "z"], False),
        (2, "ENV/BOTH", [], False),
        (4, "ENV/D", [], True),  # (after the job's own, BOTH not twice, EMPTY skipped as A-REX skips it)
    ]


def test_no_rte_and_no_controldir_is_nothing_to_run(site):
    opts = site.options(("ENV/JIM/GENERIC", []))
    del opts["joboption_controldir"]
    assert rte.plan(opts) == []
    with pytest.raises(RteError, match="no control directory"):
        rte.plan({**opts, "joboption_runtime_1": "ENV/A"})


def test_params_file_comes_before_the_script(site):
    site.install("ENV/P", 'if [ "$1" = 0 ]; then joboption_env_0="P=$MYPARAM"; fi\n')
    params = site.controldir / "rte" / "params" / "ENV" / "P"
    params.parent.mkdir(parents=True)
    params.write_text('MYPARAM="set by arcctl"\n')
    values = _stage0(site, site.options(("ENV/P", [])))
    assert values["joboption_env_0"] == "P=set by arcctl"


@pytest.mark.parametrize(
    "name", ["..", "/etc/passwd", "ENV/../../x", "ENV/a b", "ENV/$(id)", "ENV//X", "ENV/X/", "", "ENV/.", "x\ny"]
)
def test_bad_names_refused(site, name):
    with pytest.raises(RteError, match="not a runtime environment name"):
        site.plan(site.options((name, [])))


def test_missing_rte_refused(site):
    site.link("enabled", "ENV/BROKEN", site.rtedir / "nothing-there")
    for name in ("ENV/NOSUCH", "ENV/BROKEN"):
        with pytest.raises(RteError, match="missing, broken or not enabled"):
            site.plan(site.options((name, [])))


def test_symlink_chain_leaving_the_rte_directories_refused(site, tmp_path):
    outside = tmp_path / "elsewhere" / "X"
    outside.parent.mkdir()
    outside.write_text("true\n")
    site.link("enabled", "ENV/OUT", outside)
    hop = site.rtedir / "ENV" / "HOP"  # (a link inside the RTE directory, pointing out of it)
    hop.parent.mkdir(parents=True)
    hop.symlink_to(outside)
    site.link("enabled", "ENV/VIAHOP", hop)
    for name in ("ENV/OUT", "ENV/VIAHOP"):
        with pytest.raises(RteError, match="leads out of the RTE directories"):
            site.plan(site.options((name, [])))
    inside = site.install("ENV/REAL", "true\n", enabled=False)
    (site.rtedir / "ENV" / "ALIAS").symlink_to(inside)  # (a chain that stays inside is fine)
    site.link("enabled", "ENV/ALIAS", site.rtedir / "ENV" / "ALIAS")
    assert [r.name for r in site.plan(site.options(("ENV/ALIAS", [])))] == ["ENV/ALIAS"]


def test_non_regular_or_oversized_scripts_refused(site):
    (site.rtedir / "ENV" / "DIR").mkdir(parents=True)
    site.link("enabled", "ENV/DIR", site.rtedir / "ENV" / "DIR")
    os.mkfifo(site.rtedir / "ENV" / "FIFO")
    site.link("enabled", "ENV/FIFO", site.rtedir / "ENV" / "FIFO")
    for name in ("ENV/DIR", "ENV/FIFO"):
        with pytest.raises(RteError, match="not a regular file"):
            site.plan(site.options((name, [])))
    site.install("ENV/BIG", "#" * (rte.MAX_RTE_BYTES + 1))
    with pytest.raises(RteError, match="over"):
        site.plan(site.options(("ENV/BIG", [])))


def test_unreadable_script_refused(site, monkeypatch):
    site.install("ENV/SECRET", "true\n")

    def denied(path, *, follow=True):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(rte, "open_regular", denied)  # (the tests run as root, who reads any file)
    with pytest.raises(RteError, match="cannot read .*Permission denied"):
        site.plan(site.options(("ENV/SECRET", [])))


# ---------------------------------------------------------------------------
# stage 0
# ---------------------------------------------------------------------------

WEIRD = 'it\'s "quoted" $HOME `id` \\ and\na new line  '


def test_stage0_values_read_back_and_become_the_description(site):
    site.install(
        "ENV/S0",
        'if [ "$1" = 0 ]; then\n'
        '  joboption_env_1="WEIRD=$2"\n'
        "  joboption_memory=4000\n"
        '  joboption_env_2="ARGS=$#"\n'
        "  unset joboption_jobname\n"
        "fi\n",
    )
    opts = site.options(("ENV/S0", [WEIRD, "two"]), env_0="A=1", memory="1000", arg_1=WEIRD, jobname="j")
    values = _stage0(site, opts)
    assert values["joboption_env_1"] == "WEIRD=" + WEIRD  # (an option reaches the script as one argument)
    assert values["joboption_env_2"] == "ARGS=3"
    assert values["joboption_arg_1"] == WEIRD  # (the grami's values go through bash unchanged)
    assert "joboption_jobname" not in values
    final = rte.after_stage0(opts, values)
    desc, _ = grami.to_description("", options=rte.wrapped_options(final), queues=set())
    assert desc.get("maxmemory") == "4000"
    assert ["WEIRD", WEIRD] in desc.environment() or ("WEIRD", WEIRD) in desc.environment()
    assert desc.executable == "/bin/bash"
    assert desc.arguments == [str(site.session / rte.SCRIPT_NAME), str(site.session / "run.sh"), WEIRD]
    assert desc.get("jobname") == "run.sh"  # (stage 0 took the name away: the job's own executable's, not bash)


def test_stage0_cannot_move_where_jim_writes(site):
    site.install("ENV/MOVE", "joboption_directory=/tmp; joboption_runtime_0=ENV/OTHER; joboption_gridid=x\n")
    opts = site.options(("ENV/MOVE", []))
    final = rte.after_stage0(opts, _stage0(site, opts))
    for key in ("joboption_directory", "joboption_runtime_0", "joboption_gridid"):
        assert final[key] == opts[key]


@pytest.mark.parametrize("tree", [False, True])
def test_stage0_sees_the_credentials_and_control_path(site, tree):
    if tree:
        (site.controldir / VERSION2).touch()
    site.install(
        "ENV/PROXYLIKE",
        'if [ "$1" = 0 ]; then\n'
        '  joboption_env_0="PROXY=$X509_USER_PROXY"\n'
        '  joboption_env_1="FILE=$(control_path "$joboption_controldir" "$joboption_gridid" proxy)"\n'
        "fi\n",
    )
    opts = site.options(("ENV/PROXYLIKE", []))
    values = _stage0(site, opts, {"X509_USER_PROXY": "/the/proxy"})
    assert values["joboption_env_0"] == "PROXY=/the/proxy"
    c = site.controldir
    want = f"{c}/jobs/0a1/b2c/3d4/e5f/proxy" if tree else f"{c}/job.0a1b2c3d4e5f.proxy"
    assert values["joboption_env_1"] == "FILE=" + want


def test_stage0_adds_default_rtes_to_the_grami_variables(site):
    site.install("ENV/D", "true\n", enabled=False, default=True)
    site.install(
        "ENV/SHOW", 'if [ "$1" = 0 ]; then joboption_env_0="RTES=$joboption_runtime_0,$joboption_runtime_1"; fi\n'
    )
    values = _stage0(site, site.options(("ENV/SHOW", [])))
    assert values["joboption_env_0"] == "RTES=ENV/SHOW,ENV/D"


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        ('[ "$1" = 0 ] && exit 3\n', "exited the shell before it ended \\(exit status 3"),
        ("false\n", "stage 0 failed with exit code 1"),
        ('[ "$1" = 0 ] && return 4\n', "stage 0 failed with exit code 4"),
        ("if then fi\n", "stage 0 failed with exit code 2"),
        ("exit 0\n", "exited the shell"),
        ("exec true\n", "exited the shell"),
        ("kill -9 $$\n", "exited the shell before it ended \\(killed by signal 9"),
    ],
)
def test_stage0_failures_refused_naming_the_rte(site, script, reason):
    site.install("ENV/OK", "true\n")
    site.install("ENV/BAD", script)
    with pytest.raises(RteError, match=reason) as e:
        _stage0(site, site.options(("ENV/OK", []), ("ENV/BAD", [])))
    assert "ENV/BAD" in e.value.message


def test_stage0_timeout_refused_and_its_processes_killed(site, tmp_path):
    pidfile = tmp_path / "pid"
    site.install("ENV/SLOW", f"sleep 300 & echo $! > {pidfile}; wait\n")
    t0 = time.monotonic()
    with pytest.raises(RteError, match="did not end within 1 s"):
        _stage0(site, site.options(("ENV/SLOW", [])), timeout=1)
    assert time.monotonic() - t0 < 10
    pid = int(pidfile.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_stage0_background_child_does_not_hold_the_step(site):
    site.install("ENV/DAEMON", '[ "$1" = 0 ] && { sleep 30 & }\ntrue\n')
    t0 = time.monotonic()
    _stage0(site, site.options(("ENV/DAEMON", [])), timeout=20)
    assert time.monotonic() - t0 < 5


# ---------------------------------------------------------------------------
# stages 1 and 2 around the command
# ---------------------------------------------------------------------------


def _script(site: Site, *runtimes: tuple[str, list[str]], **extra: str) -> Path:
    opts = site.options(*runtimes, **extra)
    path = rte.write_script(opts, rte.runtime_script(opts, site.plan(opts)))
    assert Path(path) == site.session / rte.SCRIPT_NAME and (os.stat(path).st_mode & 0o777) == 0o600
    return Path(path)


def _run(script: Path, *argv: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin"}
    return subprocess.run(["/bin/bash", str(script), *argv], cwd=cwd, env=env, capture_output=True, text=True, **kw)


def test_stages_around_the_command_in_order_with_exit_status_and_stdin(site, tmp_path):
    site.install("ENV/JIMTEST/STAGES", (RTES / "stages.sh").read_text())
    site.install("ENV/JIMTEST/DEFAULT", (RTES / "default.sh").read_text(), enabled=False, default=True)
    log = site.session / "jimtest-stages.log"
    run = site.session / "run.sh"
    run.write_text(f'#!/bin/sh\necho "command $*" >> {log}\nenv | grep ^JIMTEST_ | sort\ncat\npwd\nexit 7\n')
    run.chmod(0o755)
    script = _script(site, ("ENV/JIMTEST/STAGES", ["opt 1"]))
    workdir = tmp_path / "scratch"
    workdir.mkdir()
    proc = _run(script, str(run), "a b", cwd=workdir, input="from stdin\n")
    assert proc.returncode == 7, proc.stderr
    assert log.read_text() == "stage1 opt 1\ncommand a b\nstage2 opt 1\n"
    lines = proc.stdout.splitlines()
    assert "JIMTEST_DEFAULT_RTE=1" in lines and "JIMTEST_STAGE1=yes" in lines
    assert "from stdin" in lines and lines[-1] == str(workdir)  # (the command runs where the local job runs)


def test_stage1_failure_stops_before_the_command(site, tmp_path):
    site.install("ENV/FAIL1", '[ "$1" = 1 ] && exit_code=5 && return 5\ntrue\n')
    marker = tmp_path / "ran"
    script = _script(site, ("ENV/FAIL1", []))
    proc = _run(script, "/bin/touch", str(marker), cwd=tmp_path)
    assert proc.returncode == 1 and "Runtime ENV/FAIL1 stage 1 execution failed." in proc.stderr
    assert not marker.exists()


def test_stage2_failure_fails_a_command_that_succeeded(site, tmp_path):
    site.install("ENV/FAIL2", '[ "$1" = 2 ] && return 1\ntrue\n')
    script = _script(site, ("ENV/FAIL2", []))
    assert _run(script, "/bin/true", cwd=tmp_path).returncode == 1
    assert _run(script, "/bin/sh", "-c", "exit 9", cwd=tmp_path).returncode == 9


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_are_passed_on_to_the_command_and_its_status_kept(site, tmp_path, signum):
    site.install("ENV/JIMTEST/STAGES", (RTES / "stages.sh").read_text())
    got = tmp_path / "got"
    started = tmp_path / "started"
    cmd = tmp_path / "cmd.sh"
    cmd.write_text(f"#!/bin/bash\ntrap 'echo $1 > {got}; exit 3' TERM INT HUP\ntouch {started}\nsleep 100 & wait\n")
    cmd.chmod(0o755)
    script = _script(site, ("ENV/JIMTEST/STAGES", []))
    proc = subprocess.Popen(["/bin/bash", str(script), str(cmd), signum.name], cwd=tmp_path, stderr=subprocess.PIPE)
    _wait_for(started)
    proc.send_signal(signum)
    assert proc.wait(10) == 3
    assert got.read_text().strip() == signum.name
    assert (site.session / "jimtest-stages.log").read_text().splitlines() == ["stage1 ", "stage2 "]


def test_a_command_killed_by_the_signal_gives_128_plus_it(site, tmp_path):
    site.install("ENV/X", "true\n")
    started = tmp_path / "started"
    script = _script(site, ("ENV/X", []))
    proc = subprocess.Popen(
        ["/bin/bash", str(script), "/bin/sh", "-c", f"touch {started}; exec sleep 100"], cwd=tmp_path
    )
    _wait_for(started)
    time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 128 + signal.SIGTERM


def _wait_for(path: Path, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_script_written_whole_never_through_a_link(site, tmp_path):
    site.install("ENV/X", "true\n")
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (site.session / rte.SCRIPT_NAME).symlink_to(victim)
    script = _script(site, ("ENV/X", []))
    assert not script.is_symlink() and victim.read_text() == "keep me\n"
    assert not [p for p in site.session.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------------------
# the submit step: credentials, refusals (the real command, as A-REX runs it)
# ---------------------------------------------------------------------------


def test_pop_credentials_takes_arexs_variables_out():
    env = {"X509_USER_PROXY": "/c/p", "X509_USER_CERT": "/c/p", "X509_USER_KEY": "fake", "X509_CERT_DIR": "/g",
           "X509_VOMS_DIR": "/v", "BEARER_TOKEN_FILE": "/t", "PATH": "/bin", "HOME": "/root"}  # fmt: skip
    creds = rte.pop_credentials(env)
    assert env == {"PATH": "/bin", "HOME": "/root"}
    assert set(creds) == {"X509_USER_PROXY", "X509_USER_CERT", "X509_USER_KEY", "X509_CERT_DIR", "X509_VOMS_DIR",
                          "BEARER_TOKEN_FILE"}  # fmt: skip


def _submit_setup(site: Site, tmp_path: Path, jim_env, script: str) -> tuple[Path, Path]:
    cfg = tmp_path / "arex.cfg"
    cfg.write_text(
        f"[lrms]\nlrms=jim\n[arex]\ncontroldir={site.controldir}\nruntimedir={site.rtedir}\n[queue:jim]\n"
        f"[custom:jim]\njim_command={REPO}/.venv/bin/jim\njim_timeout=30\njim_home={jim_env.home}\n"
        f"jim_config={jim_env.config}\n"
    )
    run = site.session / "run.sh"
    run.write_text(script)
    run.chmod(0o755)
    g = site.controldir / "job.0a1b2c3d4e5f.grami"
    return cfg, g


def _grami(site: Site, g: Path, *runtimes: tuple[str, list[str]]) -> None:
    opts = site.options(*runtimes, count="1", queue="jim")
    g.write_text("".join(f"{k}={grami_quote(v)}\n" for k, v in opts.items()))


def grami_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def _backend(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    e = {"PATH": "/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8", **env}  # (A-REX's: HOME=/root, no USER)
    return subprocess.run(
        [sys.executable, "-m", "jim", "arc-backend", *args], capture_output=True, text=True, env=e, timeout=120, cwd="/"
    )


def test_submit_runs_the_stages_and_keeps_credentials_from_jim(site, tmp_path, jim_env):
    site.install("ENV/JIMTEST/STAGES", (RTES / "stages.sh").read_text())
    site.install("ENV/JIMTEST/DEFAULT", (RTES / "default.sh").read_text(), enabled=False, default=True)
    site.install("ENV/SAW", '[ "$1" = 0 ] && joboption_env_9="SAW_PROXY=$X509_USER_PROXY"\ntrue\n')
    proxy = tmp_path / "proxy"
    proxy.write_text("not really a proxy\n")
    creds = {"X509_USER_PROXY": str(proxy), "X509_USER_CERT": str(proxy), "X509_CERT_DIR": "/etc/grid-security"}
    cfg, g = _submit_setup(site, tmp_path, jim_env, "#!/bin/sh\nenv | sort\nsleep 1\n")
    _grami(site, g, ("ENV/JIMTEST/STAGES", ["hello"]), ("ENV/SAW", []), ("ENV/JIM/GENERIC", []))
    proc = _backend("submit", "--config", str(cfg), str(g), env=creds)
    assert proc.returncode == 0 and proc.stdout == "", proc
    job_id = g.read_text().splitlines()[-1].split("=", 1)[1]
    for p in processes_of(jim_env.home):  # (the worker, the monitor, the local job while they run)
        try:
            assert not [k for k in p.environ() if k.startswith("X509_")], (p.cmdline(), p.environ())
        except (OSError, ProcessLookupError):
            pass
    out = jim_env.wait(job_id, timeout=60)
    assert out["JOB_STATE"] == "DONE", out
    stdout = (site.session / "out.txt").read_text().splitlines()
    assert not [ln for ln in stdout if ln.startswith("X509_")], stdout
    for want in ("JIMTEST_STAGE0=hello", "JIMTEST_STAGE1=yes", "JIMTEST_DEFAULT_RTE=1", f"SAW_PROXY={proxy}"):
        assert want in stdout, stdout
    assert (site.session / "jimtest-stages.log").read_text() == "stage1 hello\nstage2 hello\n"


@pytest.mark.parametrize(
    ("runtime", "reason"),
    [
        ("ENV/FAILS", "runtime environment 'ENV/FAILS': stage 0 failed with exit code 3"),
        ("ENV/NOSUCH", "runtime environment 'ENV/NOSUCH' is missing, broken or not enabled"),
        ("ENV/../x", "not a runtime environment name"),
    ],
)
def test_submit_refused_with_one_line_and_nothing_recorded(site, tmp_path, jim_env, runtime, reason):
    site.install("ENV/FAILS", "return 3\n")
    cfg, g = _submit_setup(site, tmp_path, jim_env, "#!/bin/sh\ntrue\n")
    _grami(site, g, (runtime, []))
    proc = _backend("submit", "--config", str(cfg), str(g), env={})
    assert proc.returncode == 1, proc
    assert len(proc.stdout.splitlines()) == 1 and reason in proc.stdout, proc
    assert f"jim: {proc.stdout.strip()}" in proc.stderr
    assert "joboption_jobid" not in g.read_text()
    assert not (site.session / rte.SCRIPT_NAME).exists()
    assert not jim_env.job_ids()


def test_submit_refused_by_jim_leaves_no_rte_script(site, tmp_path, jim_env):
    site.install("ENV/X", "true\n")
    cfg, g = _submit_setup(site, tmp_path, jim_env, "#!/bin/sh\ntrue\n")
    _grami(site, g, ("ENV/X", []))
    with open(g, "a") as f:
        f.write("joboption_runtime_1='ENV/JIM/GENERIC'\njoboption_runtime_1_1='count=100000000'\n")
    proc = _backend("submit", "--config", str(cfg), str(g), env={})
    assert proc.returncode == 1, proc
    assert not (site.session / rte.SCRIPT_NAME).exists()
    assert not jim_env.job_ids()
