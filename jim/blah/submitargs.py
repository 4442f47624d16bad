"""What blahpd hands ``jim_submit.sh``, as a jim description.

blahpd (Condor-G's ``grid_resource = batch jim``, HTCondor-CE's job router)
runs ``<libexec>/jim_submit.sh`` with BLAH's submit options; the script hands
them to ``jim blah-submit`` as its argv, untouched (no shell ever evaluates
them).  :func:`read` reads them as BLAH's own scripts do (``getopts`` with
BLAH's option letters; the words after ``--`` are the job's arguments), each
value bounded; :func:`to_description` turns them into a jim description:

====================================  ===================================================
BLAH option (the job's ClassAd)       jim attribute
====================================  ===================================================
``-c`` (``Cmd``)                      ``executable``
``-- ARGS`` (``Arguments``)           ``arguments`` (blahpd quotes each word: read with
                                      :mod:`shlex`, never evaluated)
``-V`` (``Environment``), ``-v``      ``environment``; ``JIM_<NAME>`` variables are jim's
                                      attributes (``JIM_JOBTYPE``, ``JIM_EVENTS``, ...)
``-w`` (``Iwd``)                      ``directory``
``-i``, ``-o``, ``-e``                ``stdin``, ``stdout``, ``stderr`` (relative to ``-w``)
``-q`` (``BatchQueue``)               ``queue``
``-x`` (``x509userproxy``)            ``x509userproxy`` and ``X509_USER_PROXY`` in the
                                      environment of every local job
``-n`` (``NodeNumber``), ``-N``       ``cores`` of each local job
``-h`` (``HostNumber``) above 1       refused (35): a local job runs on one host
``-z`` (``WholeNodes``)               ``wholenode``
``-g`` (``RequestGPUs``)              ``gpus``
``-m`` (``RequestMemory``, MB)        ``maxmemory``
``-t`` (``BatchRuntime``, seconds)    ``maxwalltime`` (minutes, rounded up)
``-u`` (the proxy's subject), ``-j``  recorded with the description (its source text)
====================================  ===================================================

The grid identity (:func:`identity`) is blahpd's, never the job's: the subject and VOMS FQANs of the
proxy ``-x`` names (read as :func:`jim.identity.from_proxy` reads one: the account's own regular file,
bounded), else the subject ``-u`` says; a ``JIM_*`` or ``X509_*`` variable of the job sets nothing of it.

The options blahpd passes for its own machinery (``-T`` its temporary
directory, ``-C`` the CE requirements file, read by :mod:`jim.blah.hook`,
``-D``, ``-s``, ``-r``, ``-p``, ``-l``, ``-I``, ``-O``, ``-R``, ``-A``,
``-a``, ``-d``, ``-S``, ``-G``, ``-M``, ``-P``) are accepted and recorded,
not acted on.  Anything else is refused with a one-line reason.
"""

from __future__ import annotations

import getopt
import json
import logging
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from jim.credentials import Handed, Handover
from jim.errors import DescriptionError, GramError, InvalidAttribute
from jim.identity import Identity, ProxyError, from_proxy, text
from jim.jobdesc import JobDescription, Value, from_mapping, shown
from jim.jobdesc.limits import MAX_MEMORY_MB

#: BLAH's submit options (blah_common_submit_functions.sh): a letter with ``:`` takes a value.
OPTSTRING = "a:i:o:e:c:s:v:V:dw:q:n:N:z:h:g:G:M:P:S:r:p:l:x:u:j:T:I:O:R:C:D:m:A:t:"
#: The longest value of one option, in characters.
MAX_VALUE = 64 * 1024
#: The most argv words ``jim blah-submit`` reads.
MAX_WORDS = 4096
#: The most digits of a BLAH number (cores, MB, seconds).
MAX_DIGITS = 9
#: The output tar written into the job's working directory when no JIM_OUTPUTTAR names one.
DEFAULT_OUTPUT_TAR = "jim-output.tar.gz"
#: What blahpd's ConvertArgs escapes for wordexp, inside double quotes where the backslash stays.
_BLAHPD_ESCAPE = re.compile(r"\\([()&])")
#: ``JIM_<NAME>`` names that mean ``jimtype``.
_ALIASES = {"JOBTYPE": "jimtype", "JIMTYPE": "jimtype", "TYPE": "jimtype"}


class BlahArgumentError(DescriptionError):
    """Submit options jim cannot read (GRAM 48, as a description that does not parse)."""

    gram_error = 48


@dataclass
class SubmitRequest:
    """BLAH's submit options, by letter (the last of each wins, as with getopts), and the job's arguments."""

    options: dict[str, str] = field(default_factory=dict)
    arguments: list[str] = field(default_factory=list)

    def get(self, letter: str) -> str:
        return self.options.get(letter, "")


def read(argv: list[str]) -> SubmitRequest:
    """BLAH's submit options from ``argv`` (what blahpd passed to ``jim_submit.sh``)."""
    if len(argv) > MAX_WORDS:
        raise BlahArgumentError(f"more than {MAX_WORDS} submit arguments")
    for word in argv:
        if len(word) > MAX_VALUE:
            raise BlahArgumentError(f"a submit argument is longer than {MAX_VALUE} characters: {shown(word)}")
        if "\x00" in word:
            raise BlahArgumentError("a submit argument holds a NUL character")
    try:
        pairs, rest = getopt.getopt(argv, OPTSTRING)
    except getopt.GetoptError as e:
        raise BlahArgumentError(f"submit options: {e}") from None
    request = SubmitRequest()
    for opt, value in pairs:
        request.options[opt[1:]] = value
    if not request.get("c"):
        raise BlahArgumentError("the job has no executable (blahpd passed no -c)", gram_error=GramError.UNDEFINED_EXE)
    request.arguments = _words(" ".join(rest), "the job's arguments")
    return request


def _words(text: str, what: str) -> list[str]:
    """The words of blahpd's quoted list (``"a" "b c"``), read as ``sh`` would split them, never run.

    blahpd puts a backslash before ``(``, ``)`` and ``&`` (for its ``wordexp``), which stays inside
    the double quotes: it is taken off again (measured: ``a(b)`` arrives as ``a\\(b\\)``)."""
    if not text.strip():
        return []
    try:
        return [_BLAHPD_ESCAPE.sub(r"\1", w) for w in shlex.split(text)]
    except ValueError as e:
        raise BlahArgumentError(f"{what} do not parse ({e}): {shown(text)}") from None


def environment(request: SubmitRequest) -> list[tuple[str, str]]:
    """The job's environment, ``-V`` (new syntax, quoted words) else ``-v`` (old syntax, ``;`` between)."""
    if request.get("V"):
        items = _words(request.get("V"), "the job's environment")
    else:
        items = [i for i in request.get("v").split(";") if i]
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise BlahArgumentError(f"environment entry {shown(item)} is not NAME=value")
        out.append((name, value))
    return out


def number(request: SubmitRequest, letter: str, what: str) -> int | None:
    """``-<letter>`` as a whole number; None when absent or not above 0."""
    raw = request.get(letter).strip()
    if not raw:
        return None
    if not raw.isdigit() or len(raw) > MAX_DIGITS:
        raise InvalidAttribute(f"{what} (-{letter}) must be a whole number, got {shown(raw)}")
    value = int(raw)
    return value if value > 0 else None


def jim_attributes(pairs: list[tuple[str, str]], known: set[str]) -> dict[str, list[Value]]:
    """jim attributes from ``JIM_<NAME>=value`` pairs: ``<name>`` lower-cased, underscores dropped,
    when jim or an installed job type declares it; the first of each wins."""
    from jim.jobdesc import canonical  # (lazy: only a submit that names jim's attributes needs it)

    attrs: dict[str, list[Value]] = {}
    for name, value in pairs:
        if not name.startswith("JIM_"):
            continue
        attr = _ALIASES.get(name[4:].upper()) or canonical(name[4:])
        if attr not in known:
            raise InvalidAttribute(f"{name}: jim has no attribute {shown(attr)} (nor has any installed job type)")
        attrs.setdefault(attr, [value])
    return attrs


def shape(request: SubmitRequest) -> dict[str, list[Value]]:
    """Cores, GPUs, whole node, memory and wall time of each local job."""
    attrs: dict[str, list[Value]] = {}
    hosts = number(request, "h", "the number of hosts")
    if hosts is not None and hosts > 1:
        raise InvalidAttribute(
            f"HostNumber={hosts}: each local job runs on one host; ask for cores (NodeNumber) instead",
            gram_error=GramError.INVALID_HOST_COUNT,
        )
    cores = number(request, "n", "the number of cores") or number(request, "N", "the cores per host")
    if cores is not None and cores > 1:
        attrs["cores"] = [str(cores)]
    gpus = number(request, "g", "the number of GPUs")
    if gpus is not None:
        attrs["gpus"] = [str(gpus)]
    if request.get("z").strip().lower() in ("yes", "true", "1"):
        attrs["wholenode"] = ["true"]
    memory = number(request, "m", "the memory in MB")
    if memory is not None:
        if memory > MAX_MEMORY_MB:
            raise InvalidAttribute(
                f"RequestMemory={memory} MB is over jim's {MAX_MEMORY_MB} MB per job",
                gram_error=GramError.INVALID_MAX_MEMORY,
            )
        attrs["maxmemory"] = [str(memory)]
    runtime = number(request, "t", "the run time in seconds")
    if runtime is not None:
        attrs["maxwalltime"] = [str(-(-runtime // 60))]
    return attrs


def to_description(
    request: SubmitRequest, *, known: set[str], site_attributes: Sequence[tuple[str, str]] = ()
) -> JobDescription:
    """The jim description of a BLAH submit.

    ``known``: the attribute names ``JIM_*`` may set (jim's and the installed job types');
    ``site_attributes``: ``JIM_<NAME>=value`` pairs of the local submit attributes hook, which win
    over the job's own environment (they are the site's: HTCondor-CE's route)."""
    workdir = request.get("w")
    if not workdir.startswith("/"):
        raise BlahArgumentError(f"the job's working directory (-w) must be an absolute path, got {shown(workdir)}")
    env = environment(request)
    attrs: dict[str, list[Value]] = {"executable": [request.get("c")], "directory": [workdir]}
    if request.arguments:
        attrs["arguments"] = list(request.arguments)
    proxy = request.get("x")
    if proxy:
        attrs["x509userproxy"] = [proxy]
        env = [(n, v) for n, v in env if n != "X509_USER_PROXY"] + [("X509_USER_PROXY", proxy)]
    if env:
        attrs["environment"] = [[n, v] for n, v in env]
    for letter, name in (("i", "stdin"), ("o", "stdout"), ("e", "stderr"), ("q", "queue")):
        if request.get(letter):
            attrs[name] = [request.get(letter)]
    attrs.update(shape(request))
    extra = jim_attributes(list(site_attributes), known)
    for name, values in jim_attributes(env, known).items():
        extra.setdefault(name, values)
    for name, values in extra.items():
        if name in attrs:
            raise InvalidAttribute(f"jim attribute {shown(name)} comes from the job's own options, not a JIM_ variable")
        attrs[name] = values
    attrs.setdefault("outputtar", [DEFAULT_OUTPUT_TAR])  # (relative: in the job's working directory)
    source = json.dumps({"options": request.options, "arguments": request.arguments}, sort_keys=True)
    return from_mapping(attrs, source_format="blah", source_text=source)


def handover(request: SubmitRequest) -> Handover:
    """What blahpd hands over: the grid identity (:func:`identity`) and the proxy of ``-x``, whose copy
    jim keeps fresh for the local jobs (:mod:`jim.credentials`)."""
    proxy = _proxy_path(request)
    return Handover(identity=identity(request), credentials=[Handed("x509", proxy)] if proxy else [])


def _proxy_path(request: SubmitRequest) -> str | None:
    """The proxy of ``-x``, relative to ``-w`` when not absolute; None without one."""
    proxy = request.get("x")
    if proxy and not proxy.startswith("/") and request.get("w").startswith("/"):
        proxy = os.path.join(request.get("w"), proxy)
    return proxy or None


def identity(request: SubmitRequest) -> Identity:
    """Who submitted the job, as blahpd says it: the proxy of ``-x`` (relative to ``-w``), else ``-u``."""
    found = from_proxy(_proxy_path(request), source="blah")
    if found.subject:
        return found
    try:
        subject = text(request.get("u"), "subject (-u)")
    except ProxyError as e:
        logging.getLogger("jim.identity").warning("grid identity (blah): the subject is not recorded: %s", e)
        subject = None
    return Identity(subject=subject, source="blah")
