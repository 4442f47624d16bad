"""The grami file A-REX hands ``submit-jim-job``, as a jim job description.

A-REX 6 writes each job's description for the batch-system backend as shell
assignments (``joboption_arg_0='./run.sh'``, values quoted for ``sh``).  jim
never sources it: the text is bounded (:data:`MAX_GRAMI_BYTES`), split into
words with :mod:`shlex` (a quoted value may hold spaces, quotes and newlines),
and every word must be one ``joboption_<name>=<value>`` assignment.

What becomes what (:func:`to_description`):

=================================  ======================================================
grami                              jim attribute
=================================  ======================================================
``joboption_arg_0``, ``_arg_N``    ``executable`` (relative to the session directory),
                                   ``arguments``
``joboption_env_N`` (``N=V``)      ``environment``
``joboption_directory``            ``directory`` (the session directory)
``joboption_stdin/stdout/stderr``  ``stdin``, ``stdout``, ``stderr``
``joboption_walltime`` (seconds)   ``maxwalltime`` (minutes, rounded up)
``joboption_count`` (slots)        ``cores``: the cores of each local job (ARC's slots are one
                                   job's cores, never copies of it)
``joboption_countpernode``         slots per node: ``count`` over ``countpernode`` nodes; more
                                   than one node is refused (35 ``INVALID_HOST_COUNT``)
``joboption_exclusivenode=true``   ``wholenode``
``joboption_memory`` (MB per slot) ``maxmemory``: ``memory`` x ``count`` (the whole job's, as
                                   A-REX's HTCondor and PBS backends add it up)
``joboption_queue``                ``queue`` (when jim's configuration names that queue)
``joboption_jobname``              ``jobname`` (one word: blanks become ``_``)
``joboption_outputfile_N``         ``keepfiles``: each declared file other than stdout, stderr
                                   and the output tar, merged from the local jobs under its
                                   name in the session directory (:mod:`jim.keep`); with the
                                   URLs of A-REX's ``output`` list (:func:`with_upload_urls`)
(none)                             ``directoryview`` = ``true``: each local job runs in a view
                                   of the session directory (sandbox/jimworkdir.py)
``joboption_runtime_N``            ``ENV/JIM/<TYPE>``: ``jimtype`` = the type, lower-cased (any
                                   other RTE runs in its stages: :mod:`jim.arc.rte`)
``joboption_runtime_N_M``          ``name=value``: the jim attribute ``name``
``JIM_<NAME>`` environment         the jim attribute ``<name>`` (only where no runtime
                                   environment option gave it; ``JIM_JOBTYPE`` and
                                   ``JIM_JIMTYPE`` are ``jimtype``)
=================================  ======================================================

A-REX 6 and 7 write no GPU request into the grami: a GPU job asks for ``gpus`` as a runtime
environment option (``ENV/JIM/GENERIC`` ``gpus=1``), as for copies of a job (``count=10``).

The whole grami is recorded as the description's source (format ``grami``):
the ARC job id (``joboption_gridid``) stays with the grid job.
"""

from __future__ import annotations

import re
import shlex

from jim.errors import DescriptionError, GramError, InvalidAttribute
from jim.jobdesc import JIM_ATTRIBUTES, JobDescription, Value, canonical, check_text, from_mapping, shown
from jim.jobdesc.limits import MAX_MEMORY_MB

#: Size of a grami file jim reads, in bytes (jim's own description limit).
MAX_GRAMI_BYTES = 1024 * 1024
#: Output tar written into the session directory when the job names none.
DEFAULT_OUTPUT_TAR = "jim-output.tar.gz"
#: The most digits of a grami number (slots, MB): far beyond any node, short enough to bound.
MAX_GRAMI_DIGITS = 9
#: Runtime environments whose name starts so carry jim's job type.
RTE_PREFIX = "ENV/JIM/"

_NAME = re.compile(r"joboption_[A-Za-z0-9_]+")
_INDEXED = re.compile(r"joboption_(arg|env|runtime|outputfile)_(\d{1,6})(?:_(\d{1,6}))?")
_ENV_ALIASES = {"JOBTYPE": "jimtype", "JIMTYPE": "jimtype", "TYPE": "jimtype"}


class GramiError(DescriptionError):
    """A grami file jim cannot read (GRAM 48, as a description that does not parse)."""

    gram_error = 48


def parse(text: str) -> dict[str, str]:
    """``joboption_*`` name -> value.  Raises :class:`GramiError` with a one-line reason."""
    if len(text.encode("utf-8", "surrogateescape")) > MAX_GRAMI_BYTES:
        raise GramiError(f"the grami file is longer than {MAX_GRAMI_BYTES} bytes")
    try:
        check_text(text, "grami")
    except DescriptionError as e:
        raise GramiError(e.message) from None
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    options: dict[str, str] = {}
    try:
        for word in lexer:
            name, sep, value = word.partition("=")
            if not sep or not _NAME.fullmatch(name):
                raise GramiError(f"the grami file holds {shown(word, 60)}, not a joboption_<name>=<value> assignment")
            options[name] = value
    except ValueError as e:  # (shlex: an unterminated quote)
        raise GramiError(f"the grami file does not parse: {e}") from None
    return options


def _indexed(options: dict[str, str], kind: str) -> list[tuple[int, str]]:
    found = []
    for name, value in options.items():
        m = _INDEXED.fullmatch(name)
        if m and m.group(1) == kind and m.group(3) is None:
            found.append((int(m.group(2)), value))
    return sorted(found)


def runtime_attributes(options: dict[str, str]) -> dict[str, list[str]]:
    """jim attributes from the runtime environments ``ENV/JIM/<TYPE>`` and their options."""
    attrs: dict[str, list[str]] = {}
    rtes = dict(_indexed(options, "runtime"))
    for name, value in options.items():
        m = _INDEXED.fullmatch(name)
        if not m or m.group(1) != "runtime":
            continue
        rte = rtes.get(int(m.group(2)), "")
        if not rte.upper().startswith(RTE_PREFIX):
            continue
        if m.group(3) is None:
            jimtype = rte[len(RTE_PREFIX) :].strip().lower()
            if not jimtype or "/" in jimtype:
                raise DescriptionError(f"runtime environment {shown(rte)}: name a job type, ENV/JIM/<TYPE>")
            attrs.setdefault("jimtype", []).append(jimtype)
            continue
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            raise DescriptionError(f"runtime environment {shown(rte)}: option {shown(value)} is not name=value")
        attrs.setdefault(canonical(key.strip()), []).append(val)
    return attrs


def environment_attributes(environment: list[tuple[str, str]], known: set[str]) -> dict[str, list[str]]:
    """jim attributes from ``JIM_<NAME>`` environment variables (names jim or a job type declares)."""
    attrs: dict[str, list[str]] = {}
    for name, value in environment:
        if not name.startswith("JIM_"):
            continue
        attr = _ENV_ALIASES.get(name[4:].upper()) or canonical(name[4:])
        if attr in known and attr not in attrs:
            attrs[attr] = [value]
    return attrs


def _declared_outputs(options: dict[str, str], attrs: dict[str, list[Value]]) -> list[Value]:
    """The ARC job's declared output files (``/name``, relative to the session directory) that the
    local jobs write: not stdout, stderr or the output tar, which jim itself writes there."""
    own = {str(attrs[k][0]).rpartition("/")[2] for k in ("stdout", "stderr", "outputtar") if attrs.get(k)}
    out: list[Value] = []
    for _i, value in _indexed(options, "outputfile"):
        name = value.strip().lstrip("/")
        if not name or name in own:
            continue
        if name not in out:
            out.append(name)
    return out


def upload_urls(output_list: str) -> dict[str, str]:
    """Declared output name -> upload URL, from A-REX's ``output`` list of the job (the control
    directory's ``job.<id>.output``, A-REX 7's ``jobs/.../output``: one line per declared file,
    ``<name> [<url> [<credential>]]``, blanks and backslashes escaped by a backslash).  The grami
    names the declared files only (``joboption_outputfile_N='/name'``); a file without a URL (the
    client fetches it) is not in the answer."""
    if len(output_list.encode("utf-8", "surrogateescape")) > MAX_GRAMI_BYTES:
        raise GramiError(f"the job's output list is longer than {MAX_GRAMI_BYTES} bytes")
    urls: dict[str, str] = {}
    for line in output_list.splitlines():
        words = re.findall(r"(?:\\.|[^\s\\])+", line.strip())
        fields = [re.sub(r"\\(.)", r"\1", w) for w in words]
        if len(fields) >= 2 and fields[0].strip("/") and "://" in fields[1]:
            urls[fields[0].strip().lstrip("/")] = fields[1]
    return urls


def with_upload_urls(desc: JobDescription, output_list: str) -> None:
    """The ``keepfiles`` of ``desc`` that A-REX uploads (:func:`upload_urls`) as ``(name url)``:
    jim then refuses an ``indexed`` merge of them, which would not write the name A-REX uploads."""
    urls = upload_urls(output_list)
    kept = desc.attrs.get("keepfiles") or []
    desc.attrs["keepfiles"] = [[v, urls[v]] if isinstance(v, str) and v in urls else v for v in kept]
    if not desc.attrs["keepfiles"]:
        del desc.attrs["keepfiles"]


def to_description(
    text: str,
    *,
    known: set[str] | None = None,
    queues: set[str] | None = None,
    options: dict[str, str] | None = None,
) -> tuple[JobDescription, dict[str, str]]:
    """The jim description of a grami text, and its parsed options.

    ``known``: the attribute names ``JIM_*`` variables may set (default: jim's own, see
    :data:`jim.jobdesc.JIM_ATTRIBUTES`); ``queues``: the queue names jim's configuration has (the ARC
    queue is passed on only when it is one of them; None: always); ``options``: the ``joboption_*``
    values to read instead of the text's (after the runtime environments' stage 0, see
    :mod:`jim.arc.rte`; the text stays the description's source)."""
    options = parse(text) if options is None else options
    known = set(JIM_ATTRIBUTES) if known is None else known
    attrs = _program(options)
    environment = _environment(options)
    if environment:
        attrs["environment"] = [[n, v] for n, v in environment]
    attrs.update(_job_options(options, queues))
    extra = runtime_attributes(options)
    for name, values in environment_attributes(environment, known).items():
        extra.setdefault(name, values)
    for name, values in extra.items():
        if name in attrs:
            raise DescriptionError(f"jim attribute {shown(name)} may not be given as a runtime environment option")
        attrs[name] = list(values)
    attrs.setdefault("outputtar", [DEFAULT_OUTPUT_TAR])  # (relative: in the session directory)
    declared = _declared_outputs(options, attrs)
    if declared and "keepfiles" not in attrs:
        attrs["keepfiles"] = declared  # (kept under their names in the session directory: jim.keep)
    attrs.setdefault("directoryview", ["true"])  # (each local job sees the session directory)
    desc = from_mapping(attrs, source_format="grami", source_text=text)
    return desc, options


def _program(options: dict[str, str]) -> dict[str, list[Value]]:
    """``executable``, ``directory`` (the session directory) and ``arguments`` of the grami."""
    session = options.get("joboption_directory", "")
    if not session.startswith("/"):
        raise DescriptionError("the grami file names no session directory (joboption_directory)")
    args = [v for _i, v in _indexed(options, "arg")]
    if not args or not args[0]:
        raise DescriptionError("the ARC job has no executable (joboption_arg_0)", gram_error=81)
    attrs: dict[str, list[Value]] = {"executable": [args[0]], "directory": [session]}
    if args[1:]:
        attrs["arguments"] = list(args[1:])
    return attrs


def _environment(options: dict[str, str]) -> list[tuple[str, str]]:
    """The grami's ``joboption_env_N`` entries as (name, value), in order."""
    environment: list[tuple[str, str]] = []
    for _i, item in _indexed(options, "env"):
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise DescriptionError(f"environment entry {shown(item)} is not NAME=value")
        environment.append((name, value))
    return environment


def _job_options(options: dict[str, str], queues: set[str] | None) -> dict[str, list[Value]]:
    """stdio, wall time, slots, memory, queue and job name of the grami, as jim attributes."""
    attrs: dict[str, list[Value]] = {}
    for key in ("stdin", "stdout", "stderr"):
        value = options.get(f"joboption_{key}", "")
        if value:
            attrs[key] = [value]
    walltime = options.get("joboption_walltime", "").strip()
    if walltime:
        if not walltime.isdigit() or len(walltime) > 12:
            raise DescriptionError(f"the wall time must be a number of seconds, got {shown(walltime)}")
        attrs["maxwalltime"] = [str(max(1, -(-int(walltime) // 60)))]
    attrs.update(_slots(options))
    queue = options.get("joboption_queue", "").strip()
    if queue and (queues is None or queue in queues):
        attrs["queue"] = [queue]
    jobname = " ".join(options.get("joboption_jobname", "").split())
    if jobname:
        attrs["jobname"] = [jobname.replace(" ", "_")]
    return attrs


def _grami_number(options: dict[str, str], key: str) -> int | None:
    """``joboption_<key>`` as a whole number; None when empty or not above 0 (A-REX writes
    ``countpernode=-1`` when the job gives none)."""
    raw = options.get(f"joboption_{key}", "").strip()
    if not raw:
        return None
    if not re.fullmatch(r"-?[0-9]{1,%d}" % MAX_GRAMI_DIGITS, raw):
        raise InvalidAttribute(f"joboption_{key} must be a whole number, got {shown(raw)}")
    value = int(raw)
    return value if value > 0 else None


def _slots(options: dict[str, str]) -> dict[str, list[Value]]:
    """The shape of the ARC job (A-REX's ``write_grami``): ``count`` slots are the cores of one
    job, ``countpernode`` the slots of one node, ``memory`` MB per slot, ``exclusivenode``."""
    attrs: dict[str, list[Value]] = {}
    count = _grami_number(options, "count") or 1
    per_node = _grami_number(options, "countpernode")
    if per_node is not None and count > per_node:
        nodes = -(-count // per_node)
        raise InvalidAttribute(
            f"count={count} slots with countpernode={per_node} need {nodes} nodes: each local job runs on one "
            f"node; ask for count={count} with countpernode={count} (or none)",
            gram_error=GramError.INVALID_HOST_COUNT,
        )
    if count > 1:
        attrs["cores"] = [str(count)]
    memory = _grami_number(options, "memory")
    if memory is not None:
        if memory * count > MAX_MEMORY_MB:
            raise InvalidAttribute(
                f"joboption_memory={memory} MB per slot x count={count} is over jim's {MAX_MEMORY_MB} MB per job",
                gram_error=GramError.INVALID_MAX_MEMORY,
            )
        attrs["maxmemory"] = [str(memory * count)]
    exclusive = options.get("joboption_exclusivenode", "").strip().lower()
    if exclusive in ("true", "yes", "1"):
        attrs["wholenode"] = ["true"]
    return attrs
