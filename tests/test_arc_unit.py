"""jim as the ARC CE backend (lrms=jim) without an ARC CE: the grami, the steps, the bulk poll, the installer.

The steps run as the real command (``python -m jim arc-backend ...``) against
a hand-made control directory, as A-REX would call them; the scan with two
owners runs as root and acts as the two test accounts.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from jim.adapters.fork import host_capacity
from jim.adapters.model import Capacity
from jim.arc import controldir as cd
from jim.arc import grami, scan
from jim.arc.install import MARKER
from jim.arc.options import BackendError, Options, expand_home, parse_config
from jim.arc.owners import ArcJob, jobs_in_lrms
from jim.arc.scan import finish, kick, lrms_done_line
from jim.errors import DescriptionError

from support.env import REPO
from support.users import CONFIG as USERS_CONFIG
from support.users import VENV

SAMPLE = """joboption_directory='/var/lib/arc/session/abc123'
joboption_controldir='/var/lib/arc/control'
joboption_arg_0='./hello.sh'
joboption_arg_1='0'
joboption_arg_2='a b'
joboption_arg_3='it'"'"'s
two lines'
joboption_stdin='/dev/null'
joboption_stdout='/var/lib/arc/session/abc123/out.txt'
joboption_stderr='/var/lib/arc/session/abc123/err.txt'
joboption_env_0='JIM_EVENTS=1000'
joboption_env_1=GRID_GLOBAL_JOBID='abc123'
joboption_cputime=
joboption_walltime=600
joboption_memory=2000
joboption_count=1
joboption_jobname='probe hello'
joboption_queue='jim'
joboption_gridid='abc123'
joboption_priority=50
joboption_inputfile_0='/hello.sh'
"""


# ---------------------------------------------------------------------------
# the grami
# ---------------------------------------------------------------------------


def test_grami_becomes_a_jim_description():
    desc, options = grami.to_description(SAMPLE, queues=set())
    assert options["joboption_gridid"] == "abc123"
    assert desc.executable == "./hello.sh"
    assert desc.arguments == ["0", "a b", "it's\ntwo lines"]
    assert desc.get("directory") == "/var/lib/arc/session/abc123"
    assert desc.get("stdout") == "/var/lib/arc/session/abc123/out.txt"
    assert desc.get("maxwalltime") == "10"
    assert desc.get("maxmemory") == "2000"
    assert desc.get("jobname") == "probe_hello"
    assert not desc.has("queue")  # (jim's configuration has no queue "jim")
    assert ("GRID_GLOBAL_JOBID", "abc123") in desc.environment()
    assert desc.get("events") == "1000"  # (JIM_EVENTS: the fallback form)
    assert desc.get("outputtar") == grami.DEFAULT_OUTPUT_TAR
    assert desc.source_format == "grami" and "joboption_gridid='abc123'" in desc.source_text


def test_declared_output_files_are_kept_under_their_names():
    text = SAMPLE + (
        "joboption_outputfile_0='/out.txt'\n"  # (stdout: jim writes it)
        "joboption_outputfile_1='/result.root'\n"
        "joboption_outputfile_2='/jim-output.tar.gz'\n"  # (the output tar: jim writes it)
        "joboption_outputfile_3='/hist/summary.txt'\n"
    )
    desc, _ = grami.to_description(text, queues=set())
    assert desc.values("keepfiles") == ["result.root", "hist/summary.txt"]  # (merged by jim.keep)
    assert not grami.to_description(SAMPLE, queues=set())[0].has("keepfiles")


def test_grami_queue_passed_when_jim_knows_it():
    desc, _ = grami.to_description(SAMPLE, queues={"jim", "short"})
    assert desc.get("queue") == "jim"


def test_runtime_environment_gives_job_type_and_options_before_the_environment():
    text = SAMPLE + (
        "joboption_runtime_0='ENV/JIM/MONTECARLO'\n"
        "joboption_runtime_0_0='events=3000'\n"
        "joboption_runtime_0_1='cpuPerEvent=0.02'\n"
        "joboption_runtime_1='ENV/PROXY'\n"
        "joboption_runtime_1_0='COPY_CACERT_DIR=No'\n"
    )
    desc, _ = grami.to_description(text, queues=set())
    assert desc.jimtype == "montecarlo"
    assert desc.get("events") == "3000"  # (the runtime environment's option wins over JIM_EVENTS)
    assert desc.get("cpuperevent") == "0.02"
    assert not desc.has("copycacertdir")  # (another runtime environment's options are not jim's)


def test_environment_fallback_names_only_jim_attributes():
    text = SAMPLE + "joboption_env_2='JIM_JOBTYPE=MonteCarlo'\njoboption_env_3='JIM_HOME=/tmp/x'\n"
    desc, _ = grami.to_description(text, queues=set())
    assert desc.jimtype == "montecarlo"
    assert not desc.has("home")
    assert ("JIM_HOME", "/tmp/x") in desc.environment()


@pytest.mark.parametrize(
    "text, reason",
    [
        ("joboption_directory='/s'\n", "no executable"),
        ("joboption_arg_0='./x'\n", "no session directory"),
        ("joboption_directory='/s'\njoboption_arg_0='./x\n", "does not parse"),
        ("joboption_directory='/s'\necho hi\njoboption_arg_0=x\n", "not a joboption_<name>=<value>"),
        ("joboption_directory='/s'\njoboption_arg_0=x\nrm -rf /\n", "not a joboption_<name>=<value>"),
        ("joboption_directory='/s'\njoboption_arg_0=x\njoboption_walltime='1 hour'\n", "number of seconds"),
        ("joboption_directory='/s'\njoboption_arg_0=x\njoboption_env_0='NOEQUALS'\n", "not NAME=value"),
        ("joboption_directory='/s'\njoboption_arg_0='a\0b'\n", "NUL"),
        (
            "joboption_directory='/s'\njoboption_arg_0=x\njoboption_runtime_0='ENV/JIM/'\n",
            "name a job type",
        ),
    ],
)
def test_grami_refused_with_one_line(text, reason):
    with pytest.raises(DescriptionError) as e:
        grami.to_description(text, queues=set())
    assert reason in e.value.message and "\n" not in e.value.message


def test_huge_grami_refused_before_parsing():
    text = "joboption_directory='/s'\njoboption_arg_0=x\n" + "joboption_x='" + "a" * grami.MAX_GRAMI_BYTES + "'\n"
    with pytest.raises(DescriptionError, match="longer than"):
        grami.parse(text)


# ---------------------------------------------------------------------------
# the steps, as A-REX runs them (here as root, with jim's test home)
# ---------------------------------------------------------------------------


def _runtime_config(path: Path, *, jim_command: str, home: str, config: Path, controldir: Path) -> Path:
    path.write_text(
        f"[lrms]\nlrms=jim\nbenchmark=HEPSPEC 7\n[arex]\ncontroldir={controldir}\n[queue:jim]\n[custom:jim]\n"
        f"jim_command={jim_command}\njim_timeout=30\njim_home={home}\njim_config={config}\n"
    )
    path.chmod(0o644)
    return path


def _backend(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    e = {"PATH": "/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}  # (A-REX's: HOME=/root, no USER)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "jim", "arc-backend", *args],
        capture_output=True,
        text=True,
        env=e,
        timeout=timeout,
        cwd="/",
    )


def _control(controldir: Path, arc_id: str, suffix: str) -> Path:
    """A job's control file, in the layout ``controldir`` has (ARC 7's when it holds ``version2``)."""
    return Path(cd.job_file(str(controldir), arc_id, suffix))


def _session(root: Path, arc_id: str, script: str) -> tuple[Path, Path]:
    session = root / "session" / arc_id
    session.mkdir(parents=True)
    (session / "run.sh").write_text(script)
    (session / "run.sh").chmod(0o755)
    (root / "session" / f"{arc_id}.diag").write_text("")
    g = _control(root / "control", arc_id, "grami")
    g.parent.mkdir(parents=True, exist_ok=True)
    g.write_text(
        f"joboption_directory='{session}'\njoboption_arg_0='./run.sh'\n"
        f"joboption_stdout='{session}/out.txt'\njoboption_stderr='{session}/err.txt'\n"
        f"joboption_gridid='{arc_id}'\njoboption_queue='jim'\njoboption_count=1\n"
    )
    return session, g


def _set_state(controldir: Path, arc_id: str, state: str) -> None:
    (controldir / "processing").mkdir(exist_ok=True)
    Path(cd.status_file(str(controldir), "processing", arc_id)).write_text(state)


def _in_lrms(controldir: Path, arc_id: str, localid: str, session: Path) -> None:
    _set_state(controldir, arc_id, "INLRMS")
    local = _control(controldir, arc_id, "local")
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text(f"globalid={arc_id}\nlrms=jim\nlocalid={localid}\nsessiondir={session}\n")


def _jobid(g: Path) -> str:
    lines = [ln for ln in g.read_text().splitlines() if ln.startswith("joboption_jobid=")]
    assert len(lines) == 1, g.read_text()
    return lines[0].split("=", 1)[1]


def _scan_until_done(
    cfg: Path, controldir: Path, arc_ids: list[str], timeout: float = 60
) -> subprocess.CompletedProcess:
    deadline = time.monotonic() + timeout
    while True:
        proc = _backend("scan", "--config", str(cfg), str(controldir))
        assert proc.returncode == 0 and proc.stdout == "", proc
        if all(_control(controldir, a, "lrms_done").exists() for a in arc_ids) or time.monotonic() > deadline:
            return proc
        time.sleep(0.5)


#: Two job ids per layout: ARC 6's are free-form, ARC 7's 12 hex characters.
LAYOUT_IDS = {cd.FLAT: ("arc1", "arc2"), cd.TREE: ("0a1b2c3d4e51", "0a1b2c3d4e52")}


def _controldir(tmp_path: Path, layout: str) -> Path:
    controldir = tmp_path / "control"
    controldir.mkdir()
    if layout == cd.TREE:
        (controldir / cd.VERSION2).touch()
    return controldir


@pytest.mark.parametrize("layout", [cd.FLAT, cd.TREE])
def test_submit_scan_and_cancel_steps(jim_env, tmp_path, layout):
    controldir = _controldir(tmp_path, layout)
    id1, id2 = LAYOUT_IDS[layout]
    cfg = _runtime_config(
        tmp_path / "arex.cfg",
        jim_command=f"{REPO}/.venv/bin/jim",
        home=str(jim_env.home),
        config=jim_env.config,
        controldir=controldir,
    )
    session, g = _session(tmp_path, id1, "#!/bin/sh\necho hello from arc\nexit 3\n")
    proc = _backend("submit", "--config", str(cfg), str(g))
    assert proc.returncode == 0 and proc.stdout == "", proc
    localid = _jobid(g)
    _in_lrms(controldir, id1, localid, session)

    proc = _scan_until_done(cfg, controldir, [id1])
    assert _control(controldir, id1, "lrms_done").read_text().split()[0] == "3", proc.stderr
    assert stat.S_IMODE(_control(controldir, id1, "lrms_done").stat().st_mode) == 0o600
    assert not [p for p in _control(controldir, id1, "lrms_done").parent.iterdir() if p.name.startswith(".")]
    diag = (tmp_path / "session" / f"{id1}.diag").read_text()
    assert "exitcode=3" in diag and "Processors=1" in diag and "LRMSStartTime=" in diag, (diag, proc.stderr)
    assert re.search(r"^WallTime=\d+s$", diag, re.M) and re.search(r"^LRMSEndTime=\d{14}Z$", diag, re.M), diag
    # (the wrapper measured the one attempt: its CPU and peak memory too; the benchmark is [lrms]'s)
    for key in (r"UserTime=\d+s", r"KernelTime=\d+s", r"MaxResidentMemory=\d+kB", "Benchmark=HEPSPEC:7"):
        assert re.search(f"^{key}$", diag, re.M), (key, diag)
    assert "hello from arc" in (session / "out.txt").read_text()
    assert (session / grami.DEFAULT_OUTPUT_TAR).is_file()
    assert "1 jim call" in proc.stderr  # (one bulk poll for the one owner)

    # cancel: a long job, cancelled through its grami; the scan then ends it with jim's reason
    session2, g2 = _session(tmp_path, id2, "#!/bin/sh\nsleep 600\n")
    assert _backend("submit", "--config", str(cfg), str(g2)).returncode == 0
    _in_lrms(controldir, id2, _jobid(g2), session2)
    proc = _backend("cancel", "--config", str(cfg), str(g2), timeout=120)
    assert proc.returncode == 0 and proc.stdout == "", proc
    _set_state(controldir, id2, "CANCELING")
    _scan_until_done(cfg, controldir, [id2])
    code = _control(controldir, id2, "lrms_done").read_text().split()[0]
    assert code != "0"


def test_bad_description_fails_at_submit_with_jims_reason(jim_env, tmp_path):
    cfg = _runtime_config(
        tmp_path / "arex.cfg", jim_command="/bin/false", home=str(jim_env.home), config=jim_env.config,
        controldir=tmp_path,
    )  # fmt: skip
    _session_dir, g = _session(tmp_path, "bad1", "#!/bin/sh\n")
    with open(g, "a") as f:
        f.write("joboption_runtime_0='ENV/JIM/NOSUCHTYPE'\n")
    proc = _backend("submit", "--config", str(cfg), str(g))
    assert proc.returncode == 1
    assert len(proc.stdout.splitlines()) == 1 and "nosuchtype" in proc.stdout.lower(), proc
    assert "Traceback" not in proc.stdout
    assert "joboption_jobid" not in g.read_text()
    assert not (jim_env.home / "db").exists() or not list((jim_env.home / "db").glob("*.xml"))

    link = tmp_path / "control" / "job.link.grami"
    link.symlink_to(g)  # (a grami is never read, nor appended to, through a symbolic link)
    proc = _backend("submit", "--config", str(cfg), str(link))
    assert proc.returncode == 1 and "cannot read the grami file" in proc.stdout, proc

    g.write_text("joboption_directory='/s'\n")  # (no executable)
    proc = _backend("submit", "--config", str(cfg), str(g))
    assert proc.returncode == 1 and proc.stdout.strip() == "the ARC job has no executable (joboption_arg_0)"


@pytest.mark.parametrize("layout", [cd.FLAT, cd.TREE])
def test_indexed_output_with_upload_url_is_refused_at_submit(jim_env, tmp_path, layout):
    """The upload URLs are only in A-REX's ``output`` list beside the grami: the submit step reads it."""
    controldir = _controldir(tmp_path, layout)
    cfg = _runtime_config(
        tmp_path / "arex.cfg", jim_command="/bin/false", home=str(jim_env.home), config=jim_env.config,
        controldir=controldir,
    )  # fmt: skip
    arc_id = LAYOUT_IDS[layout][0]
    _session_dir, g = _session(tmp_path, arc_id, "#!/bin/sh\n")
    with open(g, "a") as f:
        f.write("joboption_outputfile_0='/up.dat'\njoboption_env_0='JIM_OUTPUTMERGE=indexed'\n")
    _control(controldir, arc_id, "output").write_text("/up.dat http://127.0.0.1:9/up\\ dat\n")
    proc = _backend("submit", "--config", str(cfg), str(g))
    assert proc.returncode == 1 and "up.dat" in proc.stdout and "upload" in proc.stdout, proc
    assert "joboption_jobid" not in g.read_text()
    assert not (jim_env.home / "db").exists() or not list((jim_env.home / "db").glob("*.xml"))
    # the same job, its output fetched by the client (no URL): accepted
    _control(controldir, arc_id, "output").write_text("/up.dat\n")
    proc = _backend("submit", "--config", str(cfg), str(g))
    assert proc.returncode == 0, proc


# ---------------------------------------------------------------------------
# the bulk poll
# ---------------------------------------------------------------------------


def test_bulk_poll_answers_many_grid_jobs_in_one_process(jim_env):
    ids = [jim_env.submit("&(executable=/bin/sh)(arguments=-c 'exit 0')") for _ in range(2)]
    ids.append(jim_env.submit("&(executable=/bin/sh)(arguments=-c 'exit 3')"))
    for job_id in ids:
        jim_env.wait(job_id)
    running = jim_env.submit("&(executable=/bin/sleep)(arguments=600)")
    argv = ["poll", "--json"]
    for job_id in [*ids, running, "no-such-id", "20991231-000000-ffff"]:
        argv += ["--job-id", job_id]
    proc = jim_env.run(*argv)
    assert proc.returncode == 0, proc
    answer = json.loads(proc.stdout)
    assert answer[ids[0]] == {"JOB_STATE": "DONE", "EXIT_CODE": 0}
    assert answer[ids[2]]["EXIT_CODE"] == 3
    assert answer[running]["JOB_STATE"] in ("PENDING", "ACTIVE")
    assert answer["no-such-id"]["ERROR"] == 156
    assert answer["20991231-000000-ffff"]["ERROR"] == 156

    active = json.loads(jim_env.run("poll", "--json", "--active").stdout)
    assert list(active) == [running]

    # the single poll keeps its exact form
    single = jim_env.run("poll", "--job-id", ids[2])
    assert single.stdout.splitlines()[:2] == [f"JOB_STATE={answer[ids[2]]['JOB_STATE']}", "EXIT_CODE=3"]

    bad = jim_env.run("poll", "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["ERROR"] == 46


# ---------------------------------------------------------------------------
# the scan as root, for two owners
# ---------------------------------------------------------------------------


@pytest.mark.users
@pytest.mark.slow
def test_scan_acts_as_each_owner(unix_users):
    alice, bob = unix_users.alice, unix_users.bob
    root = Path(tempfile.mkdtemp(prefix="jim-arc-unit."))
    try:
        root.chmod(0o755)
        controldir = root / "control"
        controldir.mkdir(mode=0o755)
        config = root / "jim.toml"
        config.write_text(USERS_CONFIG)
        config.chmod(0o644)
        cfg = _runtime_config(
            root / "arex.cfg", jim_command=str(VENV / "bin" / "jim"), home="{home}/.jim-arc", config=config,
            controldir=controldir,
        )  # fmt: skip
        jobs = {}
        for user, arc_id, code in ((alice, "arcA", 0), (bob, "arcB", 3)):
            session = user.mkdir(f"arc-session/{arc_id}")
            user.write(f"arc-session/{arc_id}/run.sh", f"#!/bin/sh\necho {user.name}\nexit {code}\n", 0o755)
            user.write(f"arc-session/{arc_id}.diag", "")
            g = _control(controldir, arc_id, "grami")
            g.write_text(
                f"joboption_directory='{session}'\njoboption_arg_0='./run.sh'\n"
                f"joboption_stdout='{session}/out.txt'\njoboption_gridid='{arc_id}'\n"
            )
            os.chown(g, user.uid, user.gid)
            g.chmod(0o600)
            # submit as the mapped user, with A-REX's environment (HOME=/root, no USER)
            proc = subprocess.run(
                [str(VENV / "bin" / "jim"), "arc-backend", "submit", "--config", str(cfg), str(g)],
                user=user.uid, group=user.gid, extra_groups=[], env={"HOME": "/root", "PATH": "/usr/bin:/bin"},
                cwd="/", capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert proc.returncode == 0 and proc.stdout == "", proc
            assert (user.home / ".jim-arc" / "db").is_dir()
            _in_lrms(controldir, arc_id, _jobid(g), session)
            os.chown(_control(controldir, arc_id, "local"), user.uid, user.gid)
            jobs[arc_id] = (user, session, code)

        proc = _scan_until_done(cfg, controldir, list(jobs))
        assert "2 jim call" in proc.stderr or "ended" in proc.stderr
        for arc_id, (user, session, code) in jobs.items():
            assert _control(controldir, arc_id, "lrms_done").read_text().split()[0] == str(code)
            diag = session.parent / f"{arc_id}.diag"
            assert f"exitcode={code}" in diag.read_text()
            assert diag.stat().st_uid == user.uid  # (written as the owner, never as root)
            assert (session / "out.txt").stat().st_uid == user.uid
            assert user.name in (session / "out.txt").read_text()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("layout", [cd.FLAT, cd.TREE])
def test_scan_ignores_what_it_must_not_touch(tmp_path, layout):
    """No localid yet, lrms_done already there, another state, a symlinked local file: only the
    fourth job is jim's to poll; in either layout."""
    cdir = _controldir(tmp_path, layout)
    a1, a2, a3, a4, a5 = (f"00000000000{n}" for n in range(1, 6))
    for arc_id, state, local in (
        (a1, "INLRMS", "sessiondir=/s\n"),
        (a2, "INLRMS", "localid=x\n"),
        (a3, "FINISHING", "localid=x\n"),
        (a4, "INLRMS", "localid=x\n"),
    ):
        _set_state(cdir, arc_id, state)
        _control(cdir, arc_id, "local").parent.mkdir(parents=True, exist_ok=True)
        _control(cdir, arc_id, "local").write_text(local)
    _control(cdir, a2, "lrms_done").write_text("0")
    _set_state(cdir, a5, "INLRMS")
    _control(cdir, a5, "local").parent.mkdir(parents=True, exist_ok=True)
    _control(cdir, a5, "local").symlink_to(_control(cdir, a4, "local"))
    # a status file of the other layout, and names that are no job id, are not jobs
    other = f"{a4}.status" if layout == cd.FLAT else f"job.{a4}.status"
    (cdir / "processing" / other).write_text("INLRMS")
    (cdir / "processing" / ("..status" if layout == cd.TREE else "job..status")).write_text("INLRMS")
    jobs = jobs_in_lrms(str(cdir))
    assert [(j.arc_id, j.layout) for j in jobs] == [(a4, layout)]


def test_control_directory_layout_is_read_off_the_directory(tmp_path):
    flat, tree, moved = tmp_path / "flat", tmp_path / "tree", tmp_path / "moved"
    for d in (flat, tree, moved):
        d.mkdir()
    (tree / "version2").touch()
    (moved / "jobs").mkdir()  # (ARC 7 before it touched version2)
    assert [cd.layout(str(d)) for d in (flat, tree, moved)] == [cd.FLAT, cd.TREE, cd.TREE]
    assert cd.job_file(str(flat), "KRsNDm", "local") == f"{flat}/job.KRsNDm.local"
    assert cd.job_file(str(tree), "835b7bcf9869", "lrms_done") == f"{tree}/jobs/835/b7b/cf9/869/lrms_done"
    assert cd.status_file(str(tree), "processing", "835b7bcf9869") == f"{tree}/processing/835b7bcf9869.status"
    assert cd.status_file(str(flat), "finished", "KRsNDm") == f"{flat}/finished/job.KRsNDm.status"
    assert cd.kick_argument(str(tree), "835b7bcf9869") == str(tree)
    assert cd.kick_argument(str(flat), "KRsNDm") == f"{flat}/job.KRsNDm.local"
    for bad in ("../../etc", "short", "835b7bcf98/.."):
        with pytest.raises(ValueError):
            cd.job_file(str(tree), bad, "local")


@pytest.mark.parametrize(
    "answer, expected",
    [
        ({"JOB_STATE": "DONE", "EXIT_CODE": 0}, (0, "0")),
        ({"JOB_STATE": "DONE"}, (0, "0")),
        ({"JOB_STATE": "DONE", "EXIT_CODE": 3}, (3, "3 jim: the job ended with exit code 3")),
        ({"JOB_STATE": "FAILED", "EXIT_CODE": 2, "MESSAGE": "two\nlines"}, (2, "2 two lines")),
        ({"JOB_STATE": "FAILED"}, (-1, "-1 failed in jim")),
        ({"ERROR": 156, "MESSAGE": "unknown"}, (-1, "-1 job L1 unknown to jim")),
        ({"JOB_STATE": "ACTIVE"}, None),
        ({"ERROR": 47, "MESSAGE": "bad home"}, None),
    ],
)
def test_lrms_done_line_of_each_answer(answer, expected):
    assert lrms_done_line("L1", answer) == expected


def _fake_gm_kick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: int) -> Path:
    """A gm-kick that records its arguments and exits with ``status``: A-REX's real one reports to
    a running A-REX, which a unit test has not (the real one runs in tests/test_arc.py)."""
    argv_file = tmp_path / "gm-kick.argv"
    kick_cmd = tmp_path / "gm-kick"
    kick_cmd.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv_file}\n'
        f'[ {status} = 0 ] || echo "Failed reporting changes to A-REX"\nexit {status}\n'
    )
    kick_cmd.chmod(0o755)
    monkeypatch.setattr(scan, "GM_KICK", str(kick_cmd))
    return argv_file


@pytest.mark.parametrize("layout", [cd.FLAT, cd.TREE])
def test_lrms_done_is_written_whole_with_mode_0600_whatever_the_umask(tmp_path, monkeypatch, layout):
    controldir = _controldir(tmp_path, layout)
    arc_id = LAYOUT_IDS[layout][0]
    local = _control(controldir, arc_id, "local")
    local.parent.mkdir(parents=True, exist_ok=True)
    argv_file = _fake_gm_kick(tmp_path, monkeypatch, 0)
    job = ArcJob(arc_id, str(controldir), "INLRMS", str(local), layout, 0, 0, "L1", "")
    old = os.umask(0o022)
    try:
        finish(job, "3 jim: the job ended with exit code 3")
    finally:
        os.umask(old)
    done = _control(controldir, arc_id, "lrms_done")
    assert done.read_text() == "3 jim: the job ended with exit code 3\n"
    assert stat.S_IMODE(done.stat().st_mode) == 0o600
    assert sorted(p.name for p in done.parent.iterdir() if p.name.startswith(".")) == []  # (no temporary file)
    # gm-kick's last argument: a control file on ARC 6 (it strips the name), the control directory on ARC 7
    want = str(controldir) if layout == cd.TREE else str(local)
    assert argv_file.read_text().splitlines() == ["-j", arc_id, want]


def test_gm_kick_failure_is_logged_with_its_status_and_output(tmp_path, monkeypatch, capsys):
    controldir = _controldir(tmp_path, cd.TREE)
    _fake_gm_kick(tmp_path, monkeypatch, 255)
    job = ArcJob("835b7bcf9869", str(controldir), "INLRMS", "", cd.TREE, 0, 0, "L1", "")
    _control(controldir, job.arc_id, "local").parent.mkdir(parents=True)
    assert kick(job) is False
    err = capsys.readouterr().err
    assert "gm-kick of 835b7bcf9869 failed with exit status 255: Failed reporting changes to A-REX" in err
    finish(job, "0")  # (the job still ends: lrms_done is there for A-REX's next periodic pass)
    assert _control(controldir, job.arc_id, "lrms_done").read_text() == "0\n"


def test_runtime_options_read_and_checked(tmp_path):
    blocks = parse_config('# c\nfirst=1\n[custom:jim]\njim_home = "~/x"\njim_home=~/.jim-arc\n[queue:short]\n')
    assert blocks == {"": {"first": "1"}, "custom:jim": {"jim_home": "~/.jim-arc"}, "queue:short": {}}
    cfg = tmp_path / "arex.cfg"
    cfg.write_text(
        "[arex]\ncontroldir=/var/spool/arc/control\n[queue:jim]\n[queue:long]\n[custom:jim]\n"
        'jim_command="/opt/jim/bin/jim"\njim_timeout=45\nscan_passes=3\n'
    )
    opts = Options.load(str(cfg))
    assert (opts.jim_command, opts.timeout, opts.scan_passes, opts.scan_interval) == ("/opt/jim/bin/jim", 45.0, 3, 2.0)
    assert opts.controldir == "/var/spool/arc/control" and opts.queues == ["jim", "long"]
    assert opts.home_pattern == "~/.jim" and opts.jim_config == ""
    pw = pwd.getpwuid(os.getuid())
    assert expand_home("~/.jim", pw) == os.path.normpath(pw.pw_dir + "/.jim")
    assert expand_home("/var/lib/jim/{user}", pw) == f"/var/lib/jim/{pw.pw_name}"
    for text, reason in (
        ("jim_timeout=0", "must be positive"),
        ("scan_passes=two", "must be a number"),
        ("jim_command=jim", "absolute path"),
    ):
        cfg.write_text(f"[custom:jim]\njim_command=/opt/jim/bin/jim\n{text}\n")
        with pytest.raises(BackendError, match=reason):
            Options.load(str(cfg))
    with pytest.raises(BackendError, match="absolute path"):
        expand_home("jim/{user}", pw)
    with pytest.raises(BackendError, match="cannot read the ARC configuration"):
        Options.load(str(tmp_path / "missing.cfg"))


# ---------------------------------------------------------------------------
# arc-install
# ---------------------------------------------------------------------------


def _install(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jim", "arc-install", *args], capture_output=True, text=True, timeout=60
    )


def test_arc_install_and_uninstall(tmp_path):
    prefix = tmp_path / "share-arc"
    foreign = prefix / "submit-fork-job"
    prefix.mkdir()
    foreign.write_text("#!/bin/sh\n")
    proc = _install("--prefix", str(prefix), "--jim", "/opt/jim/bin/jim", "--home-pattern", "/var/lib/jim/{user}")
    assert proc.returncode == 0, proc.stderr
    assert "[lrms]\nlrms=jim\n" in proc.stdout and "[queue:jim]" in proc.stdout
    assert "jim_command=/opt/jim/bin/jim" in proc.stdout and "jim_home=/var/lib/jim/{user}" in proc.stdout
    for step in ("submit", "scan", "cancel"):
        shim = prefix / f"{step}-jim-job"
        assert oct(shim.stat().st_mode & 0o777) == "0o755"
        assert f'exec /opt/jim/bin/jim arc-backend {step} "$@"' in shim.read_text()
    assert "our $JIM = '/opt/jim/bin/jim';" in (prefix / "JIMmod.pm").read_text()
    assert (prefix / "rte" / "ENV" / "JIM" / "MONTECARLO").is_file()
    if shutil.which("perl") and Path("/usr/share/arc/LogUtils.pm").exists():
        check = subprocess.run(
            ["perl", "-I/usr/share/arc", "-c", str(prefix / "JIMmod.pm")], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stderr

    again = _install("--prefix", str(prefix), "--jim", "/opt/jim/bin/jim", "--home-pattern", "/var/lib/jim/{user}")
    assert "changed 0 file(s)" in again.stderr

    conf = tmp_path / "arc-jim.conf"
    assert _install("--prefix", str(prefix), "--jim", "/opt/jim/bin/jim", "--write-conf", str(conf)).returncode == 0
    assert "[custom:jim]" in conf.read_text()

    # a file at one of those paths that is not jim's is never overwritten nor removed
    (prefix / "cancel-jim-job").write_text("#!/bin/sh\n# the site's own\n")
    refused = _install("--prefix", str(prefix), "--jim", "/opt/jim/bin/jim")
    assert refused.returncode == 1 and "not jim's" in refused.stderr
    gone = _install("--prefix", str(prefix), "--uninstall")
    assert gone.returncode == 0
    assert sorted(p.name for p in prefix.iterdir()) == ["cancel-jim-job", "rte", "submit-fork-job"]
    assert MARKER not in (prefix / "cancel-jim-job").read_text()
    assert not (prefix / "rte" / "ENV" / "JIM").exists()


# ---------------------------------------------------------------------------
# the information provider
# ---------------------------------------------------------------------------


def test_info_maps_jims_states_and_jimmod_feeds_lrmsinfo(jim_env, tmp_path):
    controldir = tmp_path / "control"
    controldir.mkdir()
    cfg = _runtime_config(
        tmp_path / "arex.cfg", jim_command=f"{REPO}/.venv/bin/jim", home=str(jim_env.home), config=jim_env.config,
        controldir=controldir,
    )  # fmt: skip
    done = jim_env.submit("&(executable=/bin/true)")
    jim_env.wait(done)
    running = jim_env.submit("&(executable=/bin/sleep)(arguments=600)")
    jim_env.wait_running(running, 1)
    for arc_id, localid in (("i1", done), ("i2", running)):
        _in_lrms(controldir, arc_id, localid, tmp_path / arc_id)
    proc = _backend("info", "--config", str(cfg))
    assert proc.returncode == 0, proc
    info = json.loads(proc.stdout)
    assert info["jobs"] == {done: "EXECUTED", running: "R"}
    assert info["running"] == 1 and info["lrms_type"] == "jim" and "montecarlo" in info["jobtypes"]
    host = host_capacity()  # (jim on fork: the batch system is this host)
    assert (info["totalcpus"], info["nodecpus"], info["nodememory"]) == (host.cores, host.cores, host.memory_mb)
    assert info["freecpus"] <= host.cores - 1 and info["usedcpus"] == host.cores - info["freecpus"]
    assert info["cpudistribution"] == f"{host.cores}cpu:1" and info["gpus"] == host.gpus

    if not (shutil.which("perl") and Path("/usr/share/arc/LRMSInfo.pm").exists()):
        pytest.skip("no ARC information provider modules here (nordugrid-arc-arex)")
    prefix = tmp_path / "share-arc"
    assert _install("--prefix", str(prefix), "--jim", f"{REPO}/.venv/bin/jim").returncode == 0
    script = tmp_path / "collect.pl"
    script.write_text(
        "use strict; use LRMSInfo; use JSON::PP;\n"
        f"$CEInfo::configfile = '{cfg}';\n"
        f"my $r = LRMSInfo::collect({{lrms => 'jim', controldir => '{controldir}', loglevel => 2,\n"
        f"  queues => {{jim => {{users => ['root']}}}}, jobs => ['{done}', '{running}']}});\n"
        "print JSON::PP->new->canonical->encode($r);\n"
    )
    proc = subprocess.run(
        ["perl", str(script)], capture_output=True, text=True, timeout=120,
        env={"PERL5LIB": f"{prefix}:/usr/share/arc", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    collected = json.loads(proc.stdout)
    assert collected["jobs"][running]["status"] == "R" and collected["jobs"][done]["status"] == "EXECUTED"
    assert collected["cluster"]["lrms_type"] == "jim" and collected["cluster"]["runningjobs"] == 1
    assert collected["cluster"]["totalcpus"] == host.cores and collected["queues"]["jim"]["totalcpus"] == host.cores
    assert collected["cluster"]["cpudistribution"] == f"{host.cores}cpu:1"
    assert collected["cluster"]["usedcpus"] >= 1
    assert collected["queues"]["jim"]["users"]["root"]["queuelength"] == 0
    assert "WARNING" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr


def test_info_figures_are_the_batch_systems_capacity_and_unknown_stays_unknown():
    from jim.arc.info import capacity_figures

    figures = capacity_figures(Capacity(cores=96, node_cores=32, free_cores=40, memory_mb=192000, gpus=8, node_gpus=4))
    assert figures == {
        "totalcpus": 96, "usedcpus": 56, "freecpus": 40, "nodecpus": 32, "nodememory": 192000,
        "gpus": 8, "nodegpus": 4, "cpudistribution": "32cpu:3",
    }  # fmt: skip
    uneven = capacity_figures(Capacity(cores=40, node_cores=32, free_cores=None))
    assert uneven["cpudistribution"] is None and uneven["usedcpus"] is None and uneven["freecpus"] is None
    assert set(capacity_figures(None).values()) == {None}  # never this host's CPUs in place of the batch system's
