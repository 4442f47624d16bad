"""BLAH's local submit attributes hook for jim: where a CE (HTCondor-CE's job router) sets jim's attributes.

blahpd writes the job's CE requirements (``CERequirements``: HTCondor-CE's
``default_CERequirements``, a route's ``set_CERequirements``) into a file of
shell assignments (``JIM_JOBTYPE='montecarlo'``) and passes it as ``-C``.
As every BLAH backend does, jim runs the site's hook,
``~/.blah/jim_local_submit_attributes.sh`` if the account has one, else
``jim_local_submit_attributes.sh`` beside the BLAH scripts, in ``bash``
after that file (``source`` both, in a fixed script: the file names are
arguments, no value of the job is ever part of the command).  The hook
prints ``JIM_<NAME>=value`` lines: jim's attributes for this job, which win
over the job's own ``JIM_*`` environment.  Any other line is ignored.

``jim blah-install`` installs a hook that prints every ``JIM_*`` variable
the CE requirements set.  The hook has :data:`TIMEOUT` seconds; its output is
bounded (:data:`MAX_OUTPUT`).  A hook that fails or times out fails the
submit with that reason.
"""

from __future__ import annotations

import os
import re
import subprocess

from jim.errors import ConfigError

#: The hook's file name, in ~/.blah/ or beside the BLAH scripts.
HOOK = "jim_local_submit_attributes.sh"
#: Where the BLAH scripts are (the shims set it to their own directory).
LIBEXEC_ENV = "JIM_BLAH_LIBEXEC"
#: Seconds the hook may run.
TIMEOUT = 30.0
#: Bytes of the hook's output jim reads.
MAX_OUTPUT = 64 * 1024
_SCRIPT = 'if [ -n "$1" ] && [ -r "$1" ]; then . "$1"; fi; . "$2"'
_LINE = re.compile(r"(JIM_[A-Za-z0-9_]{1,64})=(.*)")


def hook_path(env: dict[str, str] | None = None) -> str | None:
    """The hook that applies: the account's, else the site's; None when there is none."""
    env = dict(os.environ if env is None else env)
    candidates = []
    if env.get("HOME"):
        candidates.append(os.path.join(env["HOME"], ".blah", HOOK))
    if env.get(LIBEXEC_ENV):
        candidates.append(os.path.join(env[LIBEXEC_ENV], HOOK))
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.R_OK):
            return path
    return None


def parse_output(text: str) -> list[tuple[str, str]]:
    """The ``JIM_<NAME>=value`` pairs of the hook's output, in order; a value that is a ClassAd string
    literal is its string (blahpd writes each CE requirement as the ClassAd unparses it: ``"montecarlo"``)."""
    pairs = []
    for line in text.splitlines():
        m = _LINE.fullmatch(line.strip())
        if m:
            pairs.append((m.group(1), classad_string_value(m.group(2))))
    return pairs


def classad_string_value(value: str) -> str:
    """``"a \\"b\\""`` -> ``a "b"``: the string of a ClassAd string literal; anything else as it is."""
    if len(value) < 2 or value[0] != '"' or value[-1] != '"':
        return value
    body, out, i = value[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c == '"':
            return value  # (an unescaped quote inside: not one literal)
        if c == "\\" and i + 1 < len(body):
            i += 1
            c = body[i]
        out.append(c)
        i += 1
    return "".join(out)


def run(requirements_file: str, env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """Run the hook after the CE requirements file (``-C``; may be empty); its ``JIM_*`` pairs."""
    path = hook_path(env)
    if path is None:
        return []
    argv = ["/bin/bash", "-c", _SCRIPT, "jim-blah-hook", requirements_file, path]
    # (jim's own JIM_* variables stay out: the hook's JIM_* lines are the CE requirements' alone)
    clean = {k: v for k, v in (os.environ if env is None else env).items() if not k.startswith("JIM_")}
    try:
        done = subprocess.run(argv, capture_output=True, timeout=TIMEOUT, env=clean, check=False)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"the local submit attributes hook {path} ran longer than {TIMEOUT:g} s") from None
    except OSError as e:
        raise ConfigError(f"the local submit attributes hook {path} did not run: {e.strerror or e}") from None
    if done.returncode != 0:
        why = " ".join(done.stderr.decode("utf-8", "replace").split())[:200]
        raise ConfigError(f"the local submit attributes hook {path} failed (exit {done.returncode}): {why}")
    return parse_output(done.stdout[:MAX_OUTPUT].decode("utf-8", "replace"))
