"""The job's ARC runtime environments (RTEs), run as A-REX's own job script runs them.

A-REX's batch-system backends run every runtime environment of a job in three
stages (``submit_common.sh``: ``RTE_stage0``, ``RTE_stage1``, ``RTE_stage2``):
stage 0 on the CE when the job is submitted, sourced into the submit script
with the grami's ``joboption_*`` variables (it may change them: add
``joboption_env_N``, change the memory ...), stages 1 and 2 in the job script
on the worker node, before and after the job's command.  jim does the same:

* **which**: the job's ``joboption_runtime_N`` (options ``joboption_runtime_N_M``
  are the script's arguments after the stage number), then the site's default
  ones (every entry of ``<controldir>/rte/default/`` that the job did not ask
  for, added as A-REX's ``RTE_include_default`` adds them).  ``ENV/JIM/<TYPE>``
  carries jim's job type and options (:mod:`jim.arc.grami`) and runs nowhere;
* **where**: ``<controldir>/rte/enabled/<name>``, else ``<controldir>/rte/default/<name>``
  (``RTE_path_set``; the control directory is the grami's ``joboption_controldir``),
  with ``<controldir>/rte/params/<name>`` (``arcctl rte params-set``) before it; the
  script is read once, bounded (:data:`MAX_RTE_BYTES`), a regular file whose
  symbolic-link chain ends in an RTE directory (:func:`rte_roots`); an empty one is
  skipped as A-REX skips it;
* **stage 0** (:func:`run_stage0`): one fixed bash program, the grami's variables
  set, each RTE's text evaluated in a function called with ``0`` and its options,
  ARC 7's ``control_path`` defined; then every ``joboption_*`` variable is read
  back and jim builds the job's description from those values.  Bounded by
  :data:`STAGE0_TIMEOUT`;
* **stages 1 and 2** (:func:`runtime_script`): ``.jim-arc-runtime.sh`` in the
  session directory (written atomically, never through a symbolic link) holds the
  RTEs' texts; each local job runs ``/bin/bash .jim-arc-runtime.sh COMMAND ARGS``
  (:func:`wrapped_options`): stage 1, the command (SIGTERM, SIGINT and SIGHUP
  passed on to it), stage 2, the command's exit status.

An RTE jim cannot run refuses the job at submit (:class:`RteError`, one line).
A-REX runs the submit step with the job's credentials in ``X509_USER_PROXY``,
``X509_USER_CERT`` ...: :func:`pop_credentials` takes them out of jim's own
environment (the worker, the monitor, the local jobs) and only stage 0 sees them.
"""

from __future__ import annotations

import os
import re
import select
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field

from jim.arc.controldir import TREE, layout
from jim.errors import JimError
from jim.jobdesc import shown
from jim.safeio import NotRegular, atomic_write, open_regular, read_at_most

#: The stage 1/2 script jim writes into the session directory.
SCRIPT_NAME = ".jim-arc-runtime.sh"
#: One RTE script (or its parameters file), at most, in bytes.
MAX_RTE_BYTES = 256 * 1024
#: Runtime environments of one job, at most (requested and default).
MAX_RTES = 64
#: Seconds stage 0 of all the job's RTEs may take together.
STAGE0_TIMEOUT = 60.0
#: What stage 0 may hand back (the ``joboption_*`` values), at most, in bytes.
MAX_READBACK = 4 * 1024 * 1024
#: Where ARC's own RTEs are (``arcctl rte`` links them from there), besides ``$ARC_LOCATION/share/arc/rte``.
SYSTEM_RTE_DIRS = ("/usr/share/arc/rte",)
#: The variables A-REX gives a submit step for the job's credentials (``RunParallel.cpp``), and tokens.
CREDENTIAL_PREFIXES = ("X509_", "BEARER_TOKEN")
#: Runtime environments whose name starts so are jim's job type (:data:`jim.arc.grami.RTE_PREFIX`).
JIM_PREFIX = "ENV/JIM/"
BASH = "/bin/bash"

_COMPONENT = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,127}")
_VARIABLE = re.compile(r"joboption_[A-Za-z0-9_]{1,200}")
_RUNTIME = re.compile(r"joboption_runtime_(\d{1,6})(?:_(\d{1,6}))?")
_ARG = re.compile(r"joboption_arg_(\d{1,6})")
_FIXED = frozenset({"joboption_directory", "joboption_controldir", "joboption_gridid"})

# ARC 7's control_path (lrms_common.sh); ARC 6's flat layout for an ARC 6 control directory
_CONTROL_PATH = {
    TREE: "control_path () { printf '%s\\n' \"$1/jobs/${2:0:3}/${2:3:3}/${2:6:3}/${2:9}/$3\"; }",
    "flat": "control_path () { printf '%s\\n' \"$1/job.$2.$3\"; }",
}
_SOURCEWITHARGS = 'sourcewithargs () { script=$1; shift; . "$script"; }'


class RteError(JimError):
    """A runtime environment jim cannot run: the job is refused at submit."""


@dataclass
class Rte:
    """One runtime environment of the job: its name, options and text (parameters, then script)."""

    index: int
    name: str
    options: list[str] = field(default_factory=list)
    text: str = ""
    default: bool = False


def pop_credentials(env: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """Take A-REX's per-job credential variables out of ``env``; return them (for stage 0)."""
    found = {k: v for k, v in env.items() if k.startswith(CREDENTIAL_PREFIXES)}
    for k in found:
        del env[k]
    return found


def is_jim_rte(name: str) -> bool:
    return name.upper().startswith(JIM_PREFIX)


def check_name(name: str) -> None:
    """An RTE name jim looks up: ``A/B/C`` of letters, digits and ``._+-``, no ``.``/``..``."""
    parts = name.split("/")
    if len(name) > 512 or len(parts) > 16 or not all(_COMPONENT.fullmatch(p) for p in parts):
        raise RteError(f"runtime environment {shown(name, 80)}: not a runtime environment name jim runs")


def requested(options: dict[str, str]) -> list[Rte]:
    """The job's ``joboption_runtime_N`` with their options, in order (``ENV/JIM/*`` included)."""
    names: dict[int, str] = {}
    opts: dict[int, dict[int, str]] = {}
    for key, value in options.items():
        m = _RUNTIME.fullmatch(key)
        if not m:
            continue
        if m.group(2) is None:
            names[int(m.group(1))] = value
        else:
            opts.setdefault(int(m.group(1)), {})[int(m.group(2))] = value
    return [Rte(i, names[i], [v for _k, v in sorted(opts.get(i, {}).items())]) for i in sorted(names)]


def default_names(controldir: str) -> list[str]:
    """The site's default RTEs: every non-directory entry of ``<controldir>/rte/default/`` whose target
    exists (``find ! -type d -exec test -e``), as names relative to it, sorted."""
    top = os.path.join(controldir, "rte", "default")
    found: list[str] = []
    for root, dirs, files in os.walk(top):
        rel = os.path.relpath(root, top)
        for entry in sorted([*files, *(d for d in dirs if os.path.islink(os.path.join(root, d)))]):
            path = os.path.join(root, entry)
            if os.path.exists(path) and not (os.path.isdir(path) and not os.path.islink(path)):
                found.append(entry if rel == "." else f"{rel}/{entry}")
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        if len(found) > MAX_RTES:
            break
    return sorted(found)


def rte_roots(controldir: str, runtimedirs: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The directories an RTE's symbolic-link chain may end in (real paths): the control directory's
    ``rte/``, ARC's own RTE directory and ``[arex] runtimedir``."""
    dirs = [os.path.join(controldir, "rte"), *SYSTEM_RTE_DIRS, *runtimedirs]
    if os.environ.get("ARC_LOCATION", "").startswith("/"):
        dirs.append(os.path.join(os.environ["ARC_LOCATION"], "share", "arc", "rte"))
    return [os.path.realpath(d) for d in dirs if d.startswith("/")]


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def read_rte_file(path: str, name: str, roots: list[str]) -> str:
    """The text of an RTE file ``path`` (its link chain ends in ``roots``), bounded; RteError otherwise."""
    real = os.path.realpath(path)
    if not _inside(real, roots):
        raise RteError(f"runtime environment {shown(name, 80)}: {shown(path, 120)} leads out of the RTE directories")
    try:
        fd, st = open_regular(real, follow=False)
    except NotRegular:
        raise RteError(f"runtime environment {shown(name, 80)}: {shown(real, 120)} is not a regular file") from None
    except OSError as e:
        raise RteError(f"runtime environment {shown(name, 80)}: cannot read {shown(real, 120)}: {e.strerror}") from None
    try:
        if st.st_size > MAX_RTE_BYTES:
            raise RteError(f"runtime environment {shown(name, 80)}: its script is over {MAX_RTE_BYTES} bytes")
        data = read_at_most(fd, MAX_RTE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_RTE_BYTES:
        raise RteError(f"runtime environment {shown(name, 80)}: its script is over {MAX_RTE_BYTES} bytes")
    if b"\0" in data:
        raise RteError(f"runtime environment {shown(name, 80)}: its script holds a NUL byte")
    return data.decode("utf-8", "surrogateescape")


def load(rte: Rte, controldir: str, roots: list[str]) -> Rte:
    """``rte`` with its text (``rte/params/<name>``, then the script), found as ``RTE_path_set`` finds it."""
    check_name(rte.name)
    base = os.path.join(controldir, "rte")
    path = os.path.join(base, "enabled", rte.name)
    if not os.path.exists(path):
        path = os.path.join(base, "default", rte.name)
        if not os.path.exists(path):
            raise RteError(f"runtime environment {shown(rte.name, 80)} is missing, broken or not enabled on this CE")
    text = read_rte_file(path, rte.name, roots)
    params = os.path.join(base, "params", rte.name)
    if text.strip() and os.path.lexists(params):
        text = read_rte_file(params, rte.name, roots).rstrip("\n") + "\n" + text
    rte.text = text
    return rte


def plan(options: dict[str, str], runtimedirs: list[str] | tuple[str, ...] = ()) -> list[Rte]:
    """The RTEs to run for the grami's ``options``: the requested ones (not ``ENV/JIM/*``), then the
    site's default ones, each with its text; empty ones left out.  RteError when one cannot run."""
    asked = requested(options)
    controldir = options.get("joboption_controldir", "")
    to_run = [r for r in asked if not is_jim_rte(r.name)]
    if not controldir.startswith("/"):
        if to_run:
            raise RteError("the grami names no control directory (joboption_controldir) to find its RTEs in")
        return []
    names = {r.name for r in asked}
    index = max((r.index for r in asked), default=-1) + 1
    for name in default_names(controldir):
        if name not in names and not is_jim_rte(name):
            to_run.append(Rte(index, name, default=True))
            index += 1
    if len(to_run) > MAX_RTES:
        raise RteError(f"the job has {len(to_run)} runtime environments, over jim's limit of {MAX_RTES}")
    roots = rte_roots(controldir, runtimedirs)
    return [r for r in (load(r, controldir, roots) for r in to_run) if r.text.strip()]


# -- stage 0, on the CE ---------------------------------------------------------------------------


def _call(rte: Rte, k: int, stage: str) -> str:
    args = " ".join(shlex.quote(o) for o in rte.options)
    return f"__jim_rte_{k} {stage} {args}".rstrip()


def _functions(rtes: list[Rte]) -> list[str]:
    """Each RTE's text as a variable and a function that evaluates it (a text that does not parse
    fails its own call, never the program around it)."""
    lines = [_SOURCEWITHARGS]
    for k, rte in enumerate(rtes):
        lines.append(f"# {rte.name}")  # (a checked name: one line)
        lines.append(f"__jim_rte_text_{k}={shlex.quote(rte.text)}")
        lines.append(f'__jim_rte_{k} () {{ eval "$__jim_rte_text_{k}"; }}')
    return lines


def stage0_program(options: dict[str, str], rtes: list[Rte], kind: str) -> str:
    """The bash program of stage 0: the grami's variables (and the default RTEs' names), then each RTE
    with ``0`` and its options; on fd 3 a record of what ran, then every ``joboption_*`` value."""
    lines = ["# jim arc-backend submit: stage 0 of the job's runtime environments (jim/arc/rte.py)", "exec 3>&1 1>&2"]
    lines += [f"{name}={shlex.quote(value)}" for name, value in options.items() if _VARIABLE.fullmatch(name)]
    lines += [f"joboption_runtime_{r.index}={shlex.quote(r.name)}" for r in rtes if r.default]
    lines += [_CONTROL_PATH.get(kind, _CONTROL_PATH["flat"]), *_functions(rtes)]
    for k, rte in enumerate(rtes):
        lines += [
            f"printf 'run\\0%s\\0' {k} >&3",
            _call(rte, k, "0") + " 3>&-",  # (jim's channel closed: a background child never holds it)
            "__jim_status=$?",
            f'if [ "$__jim_status" -ne 0 ]; then printf \'failed\\0%s\\0%s\\0\' {k} "$__jim_status" >&3; exit 0; fi',
        ]
    lines += [
        "printf 'done\\0' >&3",
        'for __jim_v in ${!joboption_@}; do printf \'%s\\0%s\\0\' "$__jim_v" "${!__jim_v}" >&3; done',
        "exit 0",
    ]
    return "\n".join(lines) + "\n"


def run_stage0(
    options: dict[str, str], rtes: list[Rte], env: dict[str, str], *, timeout: float = STAGE0_TIMEOUT
) -> dict[str, str]:
    """Run stage 0 of ``rtes`` in bash with the grami's ``options``; the ``joboption_*`` values after it.
    RteError when a stage fails, exits the shell, or the whole takes over ``timeout`` seconds."""
    controldir = options.get("joboption_controldir", "")
    program = stage0_program(options, rtes, layout(controldir) if controldir else "flat")
    data, status = _run_bash(program, env, timeout, cwd=_cwd(options))
    return _readback(data, rtes, status)


def _cwd(options: dict[str, str]) -> str:
    session = options.get("joboption_directory", "")
    return session if session.startswith("/") and os.path.isdir(session) else "/"


def _run_bash(program: str, env: dict[str, str], timeout: float, cwd: str) -> tuple[bytes, int]:
    """Run ``program`` (from a memory file: stdin stays /dev/null); what it wrote on fd 3 (its stdout)
    and its exit status."""
    mfd = os.memfd_create("jim-rte-stage0", 0)
    try:
        os.write(mfd, program.encode("utf-8", "surrogateescape"))
        proc = subprocess.Popen(
            [BASH, "--norc", "--noprofile", f"/dev/fd/{mfd}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            pass_fds=(mfd,),
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    finally:
        os.close(mfd)
    try:
        return _read_bounded(proc, timeout), proc.returncode
    finally:
        _end(proc)


def _read_bounded(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    fd = proc.stdout.fileno()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RteError(f"stage 0 of the job's runtime environments did not end within {timeout:g} s")
        ready, _w, _x = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        size += len(chunk)
        if size > MAX_READBACK:
            raise RteError("stage 0 of the job's runtime environments wrote too much on jim's channel")
        chunks.append(chunk)
    try:
        proc.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise RteError(f"stage 0 of the job's runtime environments did not end within {timeout:g} s") from None
    return b"".join(chunks)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """The process reaped; one still running (a timeout) killed with its whole process group."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    if proc.stdout is not None:
        proc.stdout.close()
    proc.wait()


def _readback(data: bytes, rtes: list[Rte], status: int) -> dict[str, str]:
    """The ``joboption_*`` values of stage 0's record; RteError for a stage that failed or exited."""
    words = data.decode("utf-8", "surrogateescape").split("\0")
    current = None
    i = 0
    while i < len(words) and words[i] == "run" and i + 1 < len(words):
        current = _rte_at(rtes, words[i + 1])
        i += 2
    word = words[i] if i < len(words) else ""
    if word == "failed" and i + 2 < len(words):
        rte = _rte_at(rtes, words[i + 1])
        raise RteError(f"runtime environment {shown(rte.name, 80)}: stage 0 failed with exit code {words[i + 2][:8]}")
    if word != "done":
        what = f"runtime environment {shown(current.name, 80)}" if current else "a runtime environment"
        how = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
        raise RteError(f"{what}: stage 0 exited the shell before it ended ({how}: exit, exec or a fatal error)")
    pairs = words[i + 1 :]
    if pairs and pairs[-1] == "":
        pairs.pop()
    if len(pairs) % 2:
        raise RteError("stage 0 of the job's runtime environments gave back values jim cannot read")
    values: dict[str, str] = {}
    for name, value in zip(pairs[0::2], pairs[1::2], strict=True):
        if not _VARIABLE.fullmatch(name):
            raise RteError("stage 0 of the job's runtime environments gave back values jim cannot read")
        values[name] = value
    return values


def _rte_at(rtes: list[Rte], word: str) -> Rte:
    if not word.isdigit() or int(word) >= len(rtes):
        raise RteError("stage 0 of the job's runtime environments gave back values jim cannot read")
    return rtes[int(word)]


def after_stage0(options: dict[str, str], values: dict[str, str]) -> dict[str, str]:
    """The options jim builds the description from: stage 0's values, with the job's own
    ``joboption_runtime_*`` (the default RTEs carry no jim attribute; a stage changes none) and its
    own session directory, control directory and ARC id (where jim writes)."""
    merged = {k: v for k, v in values.items() if not (_RUNTIME.fullmatch(k) or k in _FIXED)}
    merged.update({k: v for k, v in options.items() if _RUNTIME.fullmatch(k) or k in _FIXED})
    return merged


# -- stages 1 and 2, on the worker node -----------------------------------------------------------

_RUN_COMMAND = r"""
__jim_here=$PWD
cd -- "$RUNTIME_JOB_DIR" 2>/dev/null || echo "jim: cannot enter $RUNTIME_JOB_DIR: the RTEs run in $PWD" >&2
__jim_stage_1 || exit 1
cd -- "$__jim_here" || exit 1
if [ "$#" -eq 0 ]; then echo "jim: $0: no command to run" >&2; exit 2; fi
__jim_default_signals='import os, signal, sys
for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGPIPE, signal.SIGXFSZ):
    signal.signal(s, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])'
__jim_sig=
__jim_forward () { __jim_sig=1; kill -s "$1" "$__jim_pid" 2>/dev/null; }
trap '__jim_forward TERM' TERM
trap '__jim_forward INT' INT
trap '__jim_forward HUP' HUP
# an asynchronous command starts with SIGINT and SIGQUIT ignored (POSIX): give them back their default
if env --default-signal=INT,QUIT true 2>/dev/null; then
  set -- env --default-signal=INT,QUIT -- "$@"
elif command -v python3 >/dev/null 2>&1; then
  set -- python3 -c "$__jim_default_signals" "$@"
fi
exec 9<&0
"$@" <&9 9<&- &
__jim_pid=$!
exec 9<&-
while :; do
  __jim_sig=
  wait "$__jim_pid"
  __jim_rc=$?
  [ -n "$__jim_sig" ] || break
  # a signal came while waiting: the wait may have been cut short; wait again while the command runs
  if ! kill -0 "$__jim_pid" 2>/dev/null; then
    wait "$__jim_pid" 2>/dev/null
    __jim_last=$?
    [ "$__jim_last" -eq 127 ] || __jim_rc=$__jim_last
    break
  fi
done
trap - TERM INT HUP
cd -- "$RUNTIME_JOB_DIR" 2>/dev/null
if ! __jim_stage_2; then [ "$__jim_rc" -ne 0 ] || __jim_rc=1; fi
exit "$__jim_rc"
"""


def _stage_function(rtes: list[Rte], stage: str) -> list[str]:
    """``__jim_stage_<stage>``: each RTE called as ``RTE_jobscript_call`` calls it, output on stderr."""
    lines = [f"__jim_stage_{stage} () {{", "  runtimeenvironments="]
    for k, rte in enumerate(rtes):
        name = shlex.quote(rte.name)
        lines += [
            f"  runtimeenvironments=\"${{runtimeenvironments}}\"{name}';'",
            f"  {_call(rte, k, stage)} 1>&2",
            "  if [ $? -ne 0 ]; then",
            f"    echo 'Runtime '{name}' stage {stage} execution failed.' 1>&2",
            "    return 1",
            "  fi",
        ]
    return [*lines, "  return 0", "}"]


def runtime_script(options: dict[str, str], rtes: list[Rte]) -> str:
    """``.jim-arc-runtime.sh``: ``bash .jim-arc-runtime.sh COMMAND [ARG ...]`` runs stage 1 of every
    RTE (in the session directory), the command (where the local job runs), then stage 2."""
    session = options.get("joboption_directory", "")
    variables = {
        "RUNTIME_JOB_DIR": session,
        "RUNTIME_JOB_STDIN": options.get("joboption_stdin", ""),
        "RUNTIME_JOB_STDOUT": options.get("joboption_stdout", ""),
        "RUNTIME_JOB_STDERR": options.get("joboption_stderr", ""),
        "RUNTIME_JOB_DIAG": f"{session}.diag",
        "RUNTIME_NODE_SEES_FRONTEND": "yes",
    }
    lines = [
        "#!/bin/bash",
        "# jim: the ARC runtime environments around each local job (jim arc-backend submit, jim/arc/rte.py)",
        *(f"{k}={shlex.quote(v)}" for k, v in variables.items()),
        'RUNTIME_LOCAL_SCRATCH_DIR="${RUNTIME_LOCAL_SCRATCH_DIR:-}"',
        *_functions(rtes),
        *_stage_function(rtes, "1"),
        *_stage_function(rtes, "2"),
    ]
    return "\n".join(lines) + _RUN_COMMAND


def script_path(options: dict[str, str]) -> str:
    return os.path.join(options.get("joboption_directory", ""), SCRIPT_NAME)


def wrapped_options(options: dict[str, str]) -> dict[str, str]:
    """``options`` with the command ``/bin/bash <session>/.jim-arc-runtime.sh EXECUTABLE ARGS``: an
    executable path relative to the session directory made absolute (the local job runs elsewhere)."""
    args = sorted((int(m.group(1)), v) for k, v in options.items() if (m := _ARG.fullmatch(k)))
    out = {k: v for k, v in options.items() if not _ARG.fullmatch(k)}
    values = [v for _i, v in args]
    if values and values[0] and not values[0].startswith("/") and "/" in values[0]:
        values[0] = os.path.normpath(os.path.join(options.get("joboption_directory", ""), values[0]))
    for i, value in enumerate([BASH, script_path(options), *values]):
        out[f"joboption_arg_{i}"] = value
    if values and not " ".join(out.get("joboption_jobname", "").split()):
        # (the job is named after its own executable, as without the script, not "bash")
        out["joboption_jobname"] = os.path.basename(values[0]) or values[0]
    return out


def write_script(options: dict[str, str], text: str) -> str:
    """Write ``text`` as the session directory's ``.jim-arc-runtime.sh`` (whole, a link there replaced)."""
    path = script_path(options)
    try:
        atomic_write(path, text.encode("utf-8", "surrogateescape"), mode=0o600)
    except OSError as e:
        raise RteError(f"cannot write the runtime-environment script {shown(path, 120)}: {e.strerror}") from None
    return path


def remove_script(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
