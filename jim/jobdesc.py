"""Job descriptions: GRAM RSL, the GRAM module's JSON, and JDL/ClassAd files.

All three become one :class:`JobDescription`: a mapping from canonical
attribute name to a list of values, as GRAM's job manager hands it to a
job-manager module.  A value is a string or, for nested RSL sequences such as
``environment`` pairs, a list of strings.

Attribute names are canonical as GRAM makes them: lower case with
underscores removed, so ``(JIM_Type=montecarlo)``, ``(jimtype=montecarlo)`` and
``JimType = "montecarlo"`` are the same attribute.

RSL as accepted here (GRAM's dialect)::

    &(executable=/bin/echo)(arguments=a "two words" 'it''s')(count=3)
     (environment=(FOO bar)(BAZ "q x"))(jimtype=montecarlo)(events=1000)

* ``&`` conjunction of relations; ``+`` (multi-request) and ``|`` are refused;
* only the ``=`` relation (GRAM refuses others with BAD_RSL);
* literals unquoted, ``"double"`` or ``'single'`` quoted (a doubled quote
  inside is a literal quote), or ``^X...X`` with a delimiter of one's choice;
* ``a#b`` concatenation, also implicit next to a variable (``$(HOME)/x``);
  ``(* comments *)``;
* ``$(NAME)`` references to ``rsl_substitution`` pairs, or to HOME, LOGNAME,
  USER; anything else is an error.

Parsing raises :class:`jim.errors.RslSyntaxError` (GRAM 48) with the position.

Every description is bounded before any work is done on it (the ``MAX_*``
constants below, documented in README.md "Limits"): its size, the length of
one value, the nesting depth, the digits of a number, the number of
attributes and of values, and the terms and operators of a ClassAd text.
Nothing here is worse than linear in the size of the description.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, overload

from jim.classads import classad_module
from jim.errors import DescriptionError, GramError, InvalidAttribute, InvalidCount, RslSyntaxError, UnknownAttribute
from jim.safeio import NotRegular, open_regular, read_at_most

Value = str | list

# --------------------------------------------------------------------------
# Limits: every description is held to these before anything else is done
# --------------------------------------------------------------------------

#: Size of a whole description (the RSL text, the JSON or JDL file), in bytes.
MAX_DESCRIPTION_BYTES = 1024 * 1024
#: Characters of one value (one argument, one path, one expression).
MAX_VALUE_CHARS = 128 * 1024
#: Nesting depth: RSL parentheses, JSON arrays and objects, ClassAd brackets.
MAX_DEPTH = 32
#: Characters of one number (JSON number, ClassAd number, an integer attribute).
MAX_NUMBER_DIGITS = 64
#: Attributes of one description.
MAX_ATTRIBUTES = 200
#: Largest ``maxmemory`` / ``minmemory`` (MB: a petabyte) and ``maxcputime`` (minutes: ten years)
#: a description may ask of one local job, and the largest ``hostcount``.
MAX_MEMORY_MB = 1 << 30
MAX_CPU_MINUTES = 10 * 366 * 24 * 60
MAX_HOST_COUNT = 1_000_000
#: The longest ``project`` (an account name of the batch system), and what it is made of: letters,
#: digits and ``. _ -``, not beginning with ``-`` or ``.`` (a batch command would read an option).
MAX_PROJECT_CHARS = 64
_PROJECT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
#: Values of one attribute (and elements of one ClassAd list).
MAX_VALUES = 10_000
#: Terms (names, constants, operators, brackets) of one ClassAd text: a JDL file, a requirement.
MAX_CLASSAD_TERMS = 50_000
#: Operators of one ClassAd text (they make the depth of its expression trees).
MAX_CLASSAD_OPERATORS = 1_000

#: Attributes of GRAM5's own .rvf (globus-gram-job-manager.rvf), canonical.
GRAM_ATTRIBUTES = frozenset(
    [
        "arguments",
        "count",
        "directory",
        "executable",
        "environment",
        "jobtype",
        "maxtime",
        "maxwalltime",
        "maxcputime",
        "grammyjob",
        "stdin",
        "stdout",
        "stderr",
        "queue",
        "project",
        "hostcount",
        "dryrun",
        "maxmemory",
        "minmemory",
        "savestate",
        "twophase",
        "restart",
        "stdoutposition",
        "stderrposition",
        "remoteiourl",
        "filestagein",
        "filestageinshared",
        "filestageout",
        "filecleanup",
        "gasscache",
        "proxytimeout",
        "librarypath",
        "savejobdescription",
        "username",
        "scratchdir",
        "rslsubstitution",
        "expiration",
        "emailaddress",
        "emailonabort",
        "emailonexecution",
        "emailonsuspend",
        "emailontermination",
    ]
)

#: Attributes GRAM's job manager adds before a module sees the description.
GRAM_INTERNAL_ATTRIBUTES = frozenset(
    [
        "uniqid",
        "jobid",
        "cachetag",
        "jobdir",
        "statefile",
        "streamingdisabled",
        "streamingrequested",
        "filestreamout",
        "useforkstarter",
        "emitcondorprocesses",
        "x509userproxy",
        "logfile",
    ]
)

#: jim's own RSL extensions (declared in jim.rvf), with a one-line meaning.
JIM_ATTRIBUTES = {
    "jimtype": "job type: which handler splits the grid job (default generic)",
    "jobname": "a name for people browsing the job",
    "events": "total number of events to produce or process",
    "firstevent": "number of the first event (default 1)",
    "cpuperevent": "CPU seconds one event needs (the user's hint)",
    "eventsperjob": "events per local job wanted by the user (capped by the site)",
    "maxlocaljobs": "at most this many local jobs (capped by the site)",
    "inputfiles": "input files of the job",
    "outputs": "file name patterns the local jobs produce, gathered into the output tar",
    "outputtar": "path where the output tar is written (default: in jim's job directory)",
    "requirements": "requirements on the local queue (name=value pairs or a ClassAd expression)",
    "parameters": "parametric jobs: a count or a list of values",
    "parameterstart": "parametric jobs: first value",
    "parameterstep": "parametric jobs: step between values",
    "parameterfactor": "parametric jobs: factor between values",
}

GRAM_JOBTYPES = ("single", "multiple", "mpi", "condor")


def canonical(name: str) -> str:
    """GRAM's canonical attribute name: lower case, no underscores."""
    return name.replace("_", "").lower()


def shown(text: str, limit: int = 80) -> str:
    """``text`` quoted for a one-line message: escaped like repr, cut after ``limit`` characters."""
    shown_text = _ESCAPED_BYTE.sub(r"\\x\1", repr(text[:limit]))  # (a byte that was not UTF-8: \xff, not \udcff)
    return shown_text + f"... ({len(text)} characters)" if len(text) > limit else shown_text


def _rsl_form(values: list[Value], limit: int = 200) -> str:
    """An attribute's values written as RSL sequences for a message, at most about ``limit`` characters."""
    out: list[str] = []
    size = 0

    def walk(vals: list[Value]) -> None:
        nonlocal size
        for i, v in enumerate(vals):
            if size > limit:
                return
            if i:
                out.append(" ")
            if isinstance(v, str):
                out.append(v[:limit])
                size += min(len(v), limit) + 1
            else:
                out.append("(")
                walk(v)
                out.append(")")
                size += 2

    walk(values)
    return "".join(out)[:limit]


_ESCAPED_BYTE = re.compile(r"(?<!\\)\\udc([89a-f][0-9a-f])")


def _bad_char(text: str) -> str | None:
    """Why ``text`` cannot be a value (a NUL, a byte that is not UTF-8, a lone surrogate), else None."""
    if "\0" in text:
        return f"a NUL character at character {text.index(chr(0)) + 1}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        c = ord(text[e.start])
        what = f"byte 0x{c - 0xDC00:02x} that is not UTF-8" if 0xDC80 <= c <= 0xDCFF else f"lone surrogate U+{c:04X}"
        return f"a {what} at character {e.start + 1}"
    return None


def check_text(text: str, form: str) -> None:
    """Refuse a whole description over :data:`MAX_DESCRIPTION_BYTES`, or with a NUL or undecodable byte."""
    if len(text) > MAX_DESCRIPTION_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_DESCRIPTION_BYTES:
        raise DescriptionError(f"the {form} job description is longer than {MAX_DESCRIPTION_BYTES} bytes")
    why = _bad_char(text)
    if why:
        raise DescriptionError(f"malformed {form} job description: {why}")


def _check_value(name: str, value: str) -> None:
    if len(value) > MAX_VALUE_CHARS:
        raise DescriptionError(f"a value of attribute {shown(name)} is longer than {MAX_VALUE_CHARS} characters")
    why = _bad_char(value)
    if why:
        raise DescriptionError(f"a value of attribute {shown(name)} has {why}")


def _check_values(name: str, values: list[Value], depth: int = 1) -> None:
    if depth > MAX_DEPTH:
        raise DescriptionError(f"attribute {shown(name)} is nested more than {MAX_DEPTH} deep")
    if len(values) > MAX_VALUES:
        raise DescriptionError(f"attribute {shown(name)} has more than {MAX_VALUES} values")
    for v in values:
        if isinstance(v, str):
            _check_value(name, v)
        else:
            _check_values(name, v, depth + 1)


def _bounded(attrs: dict[str, list[Value]]) -> dict[str, list[Value]]:
    """``attrs`` after checking the limits on attributes, values and their characters."""
    if len(attrs) > MAX_ATTRIBUTES:
        raise DescriptionError(f"the job description has more than {MAX_ATTRIBUTES} attributes")
    for name, values in attrs.items():
        _check_value("(name)", name)
        _check_values(name, values)
    return attrs


def read_description_file(path: str) -> str:
    """The text of the description file ``path``: a regular file of at most :data:`MAX_DESCRIPTION_BYTES`
    UTF-8 bytes (never a device, a FIFO or a directory; opened without waiting for a writer)."""
    where = shown(path, 200)
    try:
        fd, st = open_regular(path)
    except NotRegular:
        raise DescriptionError(f"job description {where} is not a regular file") from None
    except OSError as e:
        raise DescriptionError(f"cannot read job description {where}: {e.strerror}") from None
    try:
        if st.st_size > MAX_DESCRIPTION_BYTES:
            raise DescriptionError(f"job description {where} is longer than {MAX_DESCRIPTION_BYTES} bytes")
        data = read_at_most(fd, MAX_DESCRIPTION_BYTES + 1)
    except OSError as e:
        raise DescriptionError(f"cannot read job description {where}: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_DESCRIPTION_BYTES:
        raise DescriptionError(f"job description {where} is longer than {MAX_DESCRIPTION_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DescriptionError(
            f"job description {where} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None


#: A shell word's pieces: plain run, 'single', "double" (\" and \\ escaped), \x, blanks, a lone quote or \.
_WORD_PIECE = re.compile(
    r"""([^ \t\r\n'"\\]+)|'([^']*)'|"([^"\\]*(?:\\.[^"\\]*)*)"|\\(.)|([ \t\r\n]+)|(['"])|(\\)""", re.S
)
_DQ_ESCAPE = re.compile(r'\\([\\"])')


def split_words(text: str) -> list[str]:
    """``text`` split into words like a POSIX shell would, without expansions (as ``shlex.split``),
    in time linear in its length.  Raises ValueError for an unclosed quote or a trailing backslash."""
    words: list[str] = []
    word: list[str] = []
    in_word = False
    for m in _WORD_PIECE.finditer(text):
        plain, single, double, escaped, blank, lone, backslash = m.groups()
        if blank is not None:
            if in_word:
                words.append("".join(word))
                word, in_word = [], False
            continue
        if lone is not None:  # (like shlex: a backslash that ends an open "... escapes nothing)
            rest = text[m.end() :]
            escaping = lone == '"' and (len(rest) - len(rest.rstrip("\\"))) % 2 == 1
            raise ValueError("No escaped character" if escaping else "No closing quotation")
        if backslash is not None:
            raise ValueError("No escaped character")
        in_word = True
        if plain is not None:
            word.append(plain)
        elif single is not None:
            word.append(single)
        elif double is not None:
            word.append(_DQ_ESCAPE.sub(r"\1", double) if "\\" in double else double)
        else:
            word.append(escaped)
    if in_word:
        words.append("".join(word))
    return words


# ClassAd text, lexed without the ClassAd library (which must never see unbounded input).
_CLASSAD_TOKEN = re.compile(
    r"""(?P<blank>\s+|//[^\n]*|/\*.*?\*/)"""
    r"""|(?P<string>"[^"\\]*(?:\\.[^"\\]*)*")"""
    r"""|(?P<qname>'[^'\\]*(?:\\.[^'\\]*)*')"""
    r"""|(?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[A-Za-z0-9_]*)"""
    r"""|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"""
    r"""|(?P<open>[(\[{])|(?P<close>[)\]}])|(?P<sep>[,;])"""
    r"""|(?P<op>=\?=|=!=|==|!=|<=|>=|&&|\|\||<<|>>>|>>|[-+*/%!~&|^<>?:.])"""
    r"""|(?P<assign>=)|(?P<unclosed>["']|/\*)|(?P<other>.)""",
    re.S,
)


def classad_tokens(text: str, what: str) -> list[tuple[str, str]]:
    """The (kind, text) tokens of ClassAd ``text``, refused (DescriptionError) when over the limits:
    :data:`MAX_CLASSAD_TERMS`, :data:`MAX_CLASSAD_OPERATORS`, :data:`MAX_DEPTH`, :data:`MAX_NUMBER_DIGITS`,
    :data:`MAX_VALUE_CHARS` for a string, :data:`MAX_VALUES` elements in a list."""
    tokens: list[tuple[str, str]] = []
    operators = 0
    lists: list[int] = []  # per open bracket: elements so far ({ only), -1 for ( and [
    for m in _CLASSAD_TOKEN.finditer(text):
        kind = m.lastgroup or "other"
        if kind == "blank":
            continue
        tok = m.group()
        if kind == "unclosed":  # the rest is an unterminated string or comment: the parser refuses it
            tokens.append((kind, text[m.start() :]))
            break
        if len(tokens) >= MAX_CLASSAD_TERMS:
            raise DescriptionError(f"{what} has more than {MAX_CLASSAD_TERMS} terms")
        if kind == "op":
            operators += 1
            if operators > MAX_CLASSAD_OPERATORS:
                raise DescriptionError(f"{what} has more than {MAX_CLASSAD_OPERATORS} operators")
        elif kind == "number" and len(tok) > MAX_NUMBER_DIGITS:
            raise DescriptionError(f"{what} has a number of more than {MAX_NUMBER_DIGITS} digits")
        elif kind in ("string", "qname") and len(tok) > MAX_VALUE_CHARS + 2:
            raise DescriptionError(f"{what} has a string longer than {MAX_VALUE_CHARS} characters")
        elif kind == "open":
            if len(lists) >= MAX_DEPTH:
                raise DescriptionError(f"{what} is nested more than {MAX_DEPTH} deep")
            lists.append(1 if tok == "{" else -1)
        elif kind == "close" and lists:
            lists.pop()
        elif kind == "sep" and tok == "," and lists and lists[-1] > 0:
            lists[-1] += 1
            if lists[-1] > MAX_VALUES:
                raise DescriptionError(f"{what} has a list of more than {MAX_VALUES} elements")
        tokens.append((kind, tok))
    return tokens


@dataclass
class JobDescription:
    """A job description: canonical attribute name -> list of values."""

    attrs: dict[str, list[Value]]
    source_format: str = "json"
    source_text: str = ""
    extra_known: frozenset[str] = field(default_factory=frozenset)

    # -- access ---------------------------------------------------------
    def has(self, name: str) -> bool:
        return bool(self.attrs.get(canonical(name)))

    def values(self, name: str) -> list[str]:
        """All values of a flat attribute (nested sequences are an error)."""
        words: list[str] = []
        for v in self.attrs.get(canonical(name), []):
            if not isinstance(v, str):
                raise InvalidAttribute(f"attribute {name} must be a list of words, not a nested list")
            words.append(v)
        return words

    def get(
        self, name: str, default: str | None = None, *, error: type[DescriptionError] = InvalidAttribute
    ) -> str | None:
        """The single value of ``name``; more than one value is an error (``error``)."""
        vals = self.values(name)
        if not vals:
            return default
        if len(vals) > 1:
            raise error(f"attribute {name} takes one value, got {len(vals)}: {shown(' '.join(vals))}")
        return vals[0]

    @overload
    def get_int(
        self, name: str, default: int, *, minimum: int | None = None, error: type[DescriptionError] = InvalidAttribute
    ) -> int: ...

    @overload
    def get_int(
        self,
        name: str,
        default: None = None,
        *,
        minimum: int | None = None,
        error: type[DescriptionError] = InvalidAttribute,
    ) -> int | None: ...

    def get_int(
        self,
        name: str,
        default: int | None = None,
        *,
        minimum: int | None = None,
        error: type[DescriptionError] = InvalidAttribute,
    ) -> int | None:
        raw = self.get(name, error=error)
        if raw is None:
            return default
        if len(raw.strip()) > MAX_NUMBER_DIGITS:
            raise error(f"{name} must be an integer of at most {MAX_NUMBER_DIGITS} digits, got {shown(raw)}")
        try:
            value = int(raw.strip(), 10)
        except ValueError:
            raise error(f"{name} must be an integer, got {shown(raw)}") from None
        if minimum is not None and value < minimum:
            raise error(f"{name} must be at least {minimum}, got {value}")
        return value

    def get_float(self, name: str, default: float | None = None, *, positive: bool = False) -> float | None:
        raw = self.get(name)
        if raw is None:
            return default
        if len(raw.strip()) > MAX_NUMBER_DIGITS:
            raise InvalidAttribute(f"{name} must be a number of at most {MAX_NUMBER_DIGITS} digits, got {shown(raw)}")
        try:
            value = float(raw)
        except ValueError:
            raise InvalidAttribute(f"{name} must be a number, got {shown(raw)}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidAttribute(f"{name} must be a finite number, got {shown(raw)}")
        if positive and value <= 0:
            raise InvalidAttribute(f"{name} must be positive, got {shown(raw)}")
        return value

    def _check_gram_values(self) -> None:
        """The shapes GRAM gives its own attributes, each refused with GRAM's own number: ``arguments``
        a list of words (50), ``directory`` (52), ``executable`` (55) and ``stdin`` (64) one word each."""
        for name, code in (
            ("directory", GramError.RSL_DIRECTORY),
            ("executable", GramError.RSL_EXECUTABLE),
            ("stdin", GramError.RSL_STDIN),
        ):
            vals = self.attrs.get(name)
            if vals is not None and (len(vals) != 1 or not isinstance(vals[0], str)):
                raise InvalidAttribute(f"{name} must be a single string, got {shown(_rsl_form(vals))}", gram_error=code)
        if any(not isinstance(v, str) for v in self.attrs.get("arguments", [])):
            raise InvalidAttribute(
                f"arguments must be a list of strings, got {shown(_rsl_form(self.attrs['arguments']))}",
                gram_error=GramError.RSL_ARGUMENTS,
            )

    def environment(self) -> list[tuple[str, str]]:
        """``environment`` as (name, value) pairs."""
        pairs = []
        for item in self.attrs.get("environment", []):
            if isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item):
                pairs.append((item[0], item[1]))
            else:
                raise InvalidAttribute(
                    f"environment entries must be (NAME value) pairs, got {shown(_rsl_form([item]))}",
                    gram_error=GramError.RSL_ENVIRONMENT,
                )
        return pairs

    @property
    def jimtype(self) -> str:
        return (self.get("jimtype") or "generic").strip().lower()

    @property
    def executable(self) -> str | None:
        return self.get("executable")

    @property
    def arguments(self) -> list[str]:
        return self.values("arguments")

    def to_json(self) -> dict[str, list[Value]]:
        return {k: list(v) for k, v in self.attrs.items()}

    # -- validation ---------------------------------------------------------
    def check_known(self, extra: Iterable[str] = ()) -> None:
        """Refuse attributes that neither GRAM, jim, nor the handler declare."""
        known = GRAM_ATTRIBUTES | GRAM_INTERNAL_ATTRIBUTES | set(JIM_ATTRIBUTES) | set(extra)
        if self.source_format == "jdl":
            known |= set(JDL_RECORDED)
        unknown = sorted(set(self.attrs) - known)
        if unknown:
            others = ", ".join(shown(u) for u in unknown[1:4])
            others += f" and {len(unknown) - 4} more" if unknown[4:] else ""
            nor = f" (nor {others})" if others else ""
            raise UnknownAttribute(f"the RSL attribute {shown(unknown[0])} is not supported by jim{nor}")

    def wall_seconds(self) -> int | None:
        """The wall-time limit of each local job, in seconds, from GRAM's ``maxwalltime`` (else
        ``maxtime``), in minutes; None when neither is given."""
        for name, bad in (("maxwalltime", 101), ("maxtime", 13)):
            raw = self.get(name)
            if raw is None:
                continue
            try:
                if len(raw.strip()) > MAX_NUMBER_DIGITS:
                    raise ValueError(raw)
                minutes = int(raw.strip(), 10)
            except ValueError:
                raise InvalidAttribute(
                    f"{name} must be a whole number of minutes, got {shown(raw)}", gram_error=bad
                ) from None
            if minutes < 1:
                raise InvalidAttribute(
                    f"{name} must be at least 1 minute, got {minutes}", gram_error=102 if name == "maxwalltime" else bad
                )
            return minutes * 60
        return None

    def _gram_amount(self, name: str, unit: str, shape: int, bad: int, maximum: int) -> int | None:
        """GRAM attribute ``name``: a whole number of ``unit`` from 1 to ``maximum``; None when not given.
        A value that is not one word is refused with GRAM's number ``shape`` (its RSL_* error), a word
        that is not such a number with ``bad`` (its INVALID_* error), as GRAM's job manager does."""
        vals = self.attrs.get(name)
        if not vals:
            return None
        if len(vals) != 1 or not isinstance(vals[0], str):
            raise InvalidAttribute(
                f"{name} must be one number of {unit}, got {shown(_rsl_form(vals))}", gram_error=shape
            )
        raw = vals[0].strip()
        if len(raw) > MAX_NUMBER_DIGITS or not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= maximum:
            raise InvalidAttribute(
                f"{name} must be a whole number of {unit} from 1 to {maximum}, got {shown(vals[0])}", gram_error=bad
            )
        return int(raw)

    def project(self) -> str | None:
        """GRAM's ``project``: the batch system's account to charge, a short name (see ``_PROJECT_NAME``);
        None when not given.  Refused with GRAM's RSL_PROJECT (61) when not one word, INVALID_PROJECT (38)
        when not such a name."""
        vals = self.attrs.get("project")
        if not vals:
            return None
        if len(vals) != 1 or not isinstance(vals[0], str):
            raise InvalidAttribute(
                f"project must be one name, got {shown(_rsl_form(vals))}", gram_error=GramError.RSL_PROJECT
            )
        name = vals[0]
        if len(name) > MAX_PROJECT_CHARS or not _PROJECT_NAME.fullmatch(name):
            raise InvalidAttribute(
                f"project must be a name of at most {MAX_PROJECT_CHARS} letters, digits and . _ - "
                f"(not beginning with - or .), got {shown(name)}",
                gram_error=GramError.INVALID_PROJECT,
            )
        return name

    def resource_limits(self) -> dict[str, Any]:
        """What each local job may use and who pays, in jim's units, from GRAM's attributes in GRAM's
        units: the one place they are converted (the worker hands this to the batch adapter as
        :attr:`jim.adapters.base.SubmitChunk.limits`).  Keys, only those given: ``wall_seconds``
        (:meth:`wall_seconds`), ``cpu_seconds`` (``maxcputime``, minutes), ``memory_mb`` (``maxmemory``,
        MB), ``min_memory_mb`` (``minmemory``, MB), ``project``.  Each value is refused with GRAM's own
        number (RSL_* when not one word, INVALID_* when out of range); ``hostcount`` is checked too
        (each local job runs on one host: it is not passed on)."""
        limits: dict[str, Any] = {}
        wall = self.wall_seconds()
        if wall:
            limits["wall_seconds"] = wall
        cpu = self._gram_amount(
            "maxcputime", "minutes", GramError.RSL_MAX_CPU_TIME, GramError.INVALID_MAX_CPU_TIME, MAX_CPU_MINUTES
        )
        if cpu is not None:
            limits["cpu_seconds"] = cpu * 60
        memory = self._gram_amount(
            "maxmemory", "MB", GramError.RSL_MAX_MEMORY, GramError.INVALID_MAX_MEMORY, MAX_MEMORY_MB
        )
        least = self._gram_amount(
            "minmemory", "MB", GramError.RSL_MIN_MEMORY, GramError.INVALID_MIN_MEMORY, MAX_MEMORY_MB
        )
        if memory is not None and least is not None and least > memory:
            raise InvalidAttribute(
                f"minmemory ({least} MB) must not be above maxmemory ({memory} MB)",
                gram_error=GramError.INVALID_MIN_MEMORY,
            )
        if memory is not None:
            limits["memory_mb"] = memory
        if least is not None:
            limits["min_memory_mb"] = least
        project = self.project()
        if project is not None:
            limits["project"] = project
        self._gram_amount("hostcount", "hosts", GramError.RSL_HOST_COUNT, GramError.INVALID_HOST_COUNT, MAX_HOST_COUNT)
        return limits

    def check_common(self) -> None:
        """Checks every job type shares: count, jobtype, executable, environment, the resource limits."""
        self.get_int("count", 1, minimum=1, error=InvalidCount)
        self.get("jobname")  # (one word: refused here, before anything is recorded)
        self.resource_limits()
        jobtype = self.get("jobtype")
        if jobtype is not None and jobtype.lower() not in GRAM_JOBTYPES:
            raise InvalidAttribute(
                f"jobtype must be one of {', '.join(GRAM_JOBTYPES)}, got {shown(jobtype)}", gram_error=19
            )
        self._check_gram_values()
        exe = self.get("executable")
        if exe is not None and (not exe or "\0" in exe):
            raise InvalidAttribute("executable must be a non-empty path", gram_error=GramError.RSL_EXECUTABLE)
        self.environment()
        for name, _value in self.environment():
            if not name or "=" in name or "\0" in name:
                raise InvalidAttribute(f"bad environment variable name {shown(name)}", gram_error=40)


# --------------------------------------------------------------------------
# JSON (what the GRAM module hands over)
# --------------------------------------------------------------------------


def _norm_value(v: Any, where: str, depth: int = 1) -> Value:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):
        if depth > MAX_DEPTH:
            raise DescriptionError(f"attribute {shown(where)} is nested more than {MAX_DEPTH} deep")
        return [_norm_value(x, where, depth + 1) for x in v]
    raise DescriptionError(f"attribute {shown(where)}: unsupported value {shown(repr(v))}")


def from_mapping(data: Any, *, source_format: str = "json", source_text: str = "") -> JobDescription:
    if not isinstance(data, dict):
        raise DescriptionError("a JSON job description must be an object: attribute -> list of strings")
    if len(data) > MAX_ATTRIBUTES:
        raise DescriptionError(f"the job description has more than {MAX_ATTRIBUTES} attributes")
    attrs: dict[str, list[Value]] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not key.strip():
            raise DescriptionError(f"bad attribute name {shown(repr(key))}")
        name = canonical(key.strip())
        vals = value if isinstance(value, list) else [value]
        attrs.setdefault(name, []).extend(_norm_value(v, key) for v in vals)
    return JobDescription(_bounded(attrs), source_format=source_format, source_text=source_text)


#: Where a JSON text's brackets are, strings skipped.
_JSON_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{}]', re.S)


def _json_depth_ok(text: str) -> None:
    depth = 0
    for m in _JSON_STRUCTURE.finditer(text):
        c = m.group()
        if c == '"':  # an unterminated string: json.loads says where
            return
        if c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise DescriptionError(f"the JSON job description is nested more than {MAX_DEPTH} deep")
        elif c in "]}":
            depth -= 1


def _json_number(text: str) -> int | float:
    if len(text) > MAX_NUMBER_DIGITS:
        raise DescriptionError(f"the JSON job description has a number of more than {MAX_NUMBER_DIGITS} digits")
    return float(text) if any(c in text for c in ".eE") else int(text)


def _json_constant(text: str) -> Any:
    raise DescriptionError(f"the JSON job description has {text}, which is not JSON")


def parse_json(text: str) -> JobDescription:
    check_text(text, "JSON")
    _json_depth_ok(text)
    try:
        data = json.loads(text, parse_int=_json_number, parse_float=_json_number, parse_constant=_json_constant)
    except json.JSONDecodeError as e:
        raise DescriptionError(
            f"job description is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except RecursionError:  # (the depth is checked above: a safety net only)
        raise DescriptionError(f"the JSON job description is nested more than {MAX_DEPTH} deep") from None
    return from_mapping(data, source_format="json", source_text=text)


# --------------------------------------------------------------------------
# RSL
# --------------------------------------------------------------------------

_SPECIAL = set("+&|()=<>!\"'^#$") | set(" \t\r\n\f\v")
_RSL_PLAIN = re.compile(r"[^+&|()=<>!\"'^#$ \t\r\n\f\v]+")


class _RslParser:
    def __init__(self, text: str, env: dict[str, str]):
        self.s = text
        self.i = 0
        self.env = env
        self.subst: dict[str, str] = {}
        self.expanded = 0  # characters of every value so far, $(VAR) references expanded

    def plain(self) -> str:
        """The run of characters at the position that need no quoting (possibly empty)."""
        m = _RSL_PLAIN.match(self.s, self.i)
        if not m:
            return ""
        self.i = m.end()
        return m.group()

    def error(self, what: str) -> RslSyntaxError:
        return RslSyntaxError(f"malformed RSL at character {self.i + 1}: {what}")

    def skip(self) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c.isspace():
                self.i += 1
            elif self.s.startswith("(*", self.i):
                end = self.s.find("*)", self.i + 2)
                if end < 0:
                    raise self.error("unterminated comment")
                self.i = end + 2
            else:
                break

    def peek(self) -> str:
        self.skip()
        return self.s[self.i] if self.i < len(self.s) else ""

    def expect(self, c: str) -> None:
        if self.peek() != c:
            found = repr(self.s[self.i]) if self.i < len(self.s) else "end of text"
            raise self.error(f"expected {c!r}, found {found}")
        self.i += 1

    def parse(self) -> list[tuple[str, list[Value]]]:
        c = self.peek()
        if c == "":
            raise RslSyntaxError("empty RSL")
        if c in "+|":
            raise self.error("multi-requests ('+') and disjunctions ('|') are not supported")
        if c == "&":
            self.i += 1
        relations: list[tuple[str, list[Value]]] = []
        while self.peek() == "(":
            if len(relations) >= MAX_ATTRIBUTES:
                raise self.error(f"more than {MAX_ATTRIBUTES} attributes")
            relations.append(self.relation())
        if self.peek() != "":
            raise self.error(f"unexpected {self.s[self.i]!r}")
        if not relations:
            raise self.error("no (attribute=value) relations")
        return relations

    def relation(self) -> tuple[str, list[Value]]:
        self.expect("(")
        self.skip()
        name = self.plain()
        if not name:
            raise self.error("expected an attribute name")
        op = self.peek()
        if op != "=":
            if op in "<>!":
                raise self.error(f"only '=' relations are supported (attribute {shown(name)})")
            raise self.error(f"expected '=' after attribute {shown(name)}")
        self.i += 1
        values = self.sequence(")", 1)
        self.expect(")")
        cname = canonical(name)
        if cname == "rslsubstitution":
            for pair in values:
                if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
                    raise self.error("rsl_substitution takes (NAME value) pairs")
                self.subst[pair[0]] = pair[1]
        return name, values

    def sequence(self, closer: str, depth: int) -> list[Value]:
        if depth > MAX_DEPTH:
            raise self.error(f"values nested more than {MAX_DEPTH} deep")
        values: list[Value] = []
        while True:
            c = self.peek()
            if c == closer or c == "":
                return values
            if len(values) >= MAX_VALUES:
                raise self.error(f"more than {MAX_VALUES} values in one attribute")
            if c == "(":
                self.i += 1
                inner = self.sequence(")", depth + 1)
                self.expect(")")
                values.append(inner)
            else:
                values.append(self.concatenation())

    def concatenation(self) -> str:
        """Literals joined by ``#``, or written next to a ``$(VAR)`` with no space (``$(HOME)/x``)."""
        was_var = self.s[self.i] == "$"
        parts = [self.literal()]
        size = len(parts[0])
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "#":
                self.i += 1
                self.skip()
            elif not (c == "$" or (was_var and (c in "\"'" or c not in _SPECIAL))):
                break
            was_var = self.s[self.i] == "$"
            parts.append(self.literal())
            size += len(parts[-1])
            if size > MAX_VALUE_CHARS:
                raise self.error(f"a value longer than {MAX_VALUE_CHARS} characters")
        if size > MAX_VALUE_CHARS:
            raise self.error(f"a value longer than {MAX_VALUE_CHARS} characters")
        self.expanded += size
        if self.expanded > MAX_DESCRIPTION_BYTES:
            raise self.error(f"values longer than {MAX_DESCRIPTION_BYTES} characters in all")
        return "".join(parts)

    def literal(self) -> str:
        if self.i >= len(self.s):
            raise self.error("expected a value")
        c = self.s[self.i]
        if c in "\"'":
            return self.quoted(c)
        if c == "^":
            if self.i + 1 >= len(self.s):
                raise self.error("'^' needs a delimiter character")
            delim = self.s[self.i + 1]
            self.i += 1
            return self.quoted(delim)
        if c == "$":
            return self.variable()
        word = self.plain()
        if not word:
            raise self.error(f"unexpected {c!r}")
        return word

    def quoted(self, q: str) -> str:
        self.i += 1
        out = []
        while True:
            j = self.s.find(q, self.i)
            if j < 0:
                raise self.error(f"unterminated quoted string (missing {q})")
            out.append(self.s[self.i : j])
            if j + 1 < len(self.s) and self.s[j + 1] == q:
                out.append(q)
                self.i = j + 2
                continue
            self.i = j + 1
            return "".join(out)

    def variable(self) -> str:
        if not self.s.startswith("$(", self.i):
            raise self.error("'$' must start a $(NAME) reference (quote it to use it literally)")
        self.i += 2
        self.skip()
        name = self.plain()
        self.expect(")")
        if name in self.subst:
            return self.subst[name]
        if name in ("HOME", "LOGNAME", "USER") and name in self.env:
            return self.env[name]
        raise self.error(f"undefined RSL variable {shown('$(' + name + ')')}")


def parse_rsl(text: str, env: dict[str, str] | None = None) -> JobDescription:
    """Parse GRAM RSL text into a JobDescription."""
    try:
        check_text(text, "RSL")
    except DescriptionError as e:
        raise RslSyntaxError(e.message) from None
    parser = _RslParser(text, dict(os.environ if env is None else env))
    attrs: dict[str, list[Value]] = {}
    for name, values in parser.parse():
        cname = canonical(name)
        if cname == "rslsubstitution":
            continue
        if cname in attrs:
            raise RslSyntaxError(f"malformed RSL: attribute {shown(name)} given twice")
        attrs[cname] = values
    return JobDescription(_bounded(attrs), source_format="rsl", source_text=text)


# --------------------------------------------------------------------------
# JDL / ClassAd
# --------------------------------------------------------------------------


#: DIRAC JDL names and the jim attribute each becomes (docs/jdl.md has the whole table).
JDL_RENAMED = {
    "stdinput": "stdin",
    "stdoutput": "stdout",
    "stderror": "stderr",
    "inputsandbox": "inputfiles",
    "outputsandbox": "outputs",
}

#: DIRAC JDL names (RFC #7) that become requirements on the local queue.
JDL_REQUIREMENTS = ("site", "bannedsite", "platform", "cputime", "tags")

#: DIRAC JDL attributes that mean nothing at a site: accepted and recorded with the grid job, not acted on.
JDL_RECORDED = {
    "diracjobtype": "DIRAC's JobType (User, ...) when it is not one of GRAM's job types",
    "jobgroup": "DIRAC's job group",
    "priority": "DIRAC's priority of the job among the user's jobs",
    "loglevel": "DIRAC's log level of the job wrapper",
    "owner": "DIRAC's owner name",
    "ownerdn": "DIRAC's owner DN",
    "ownergroup": "DIRAC's owner group",
    "virtualorganization": "DIRAC's VO",
    "submitpools": "DIRAC's submit pools",
    "origin": "DIRAC's submitting client",
    "diracsetup": "DIRAC's setup",
    "outputse": "DIRAC's storage element for output data",
    "outputpath": "DIRAC's path for output data",
    "outputdata": "DIRAC's output data uploaded by its job wrapper",
    "jobconfigargs": "DIRAC's job configuration arguments",
}

#: A site, platform or tag name that may become a requirement (no quote, comma, blank or '=').
_JDL_REQUIREMENT_WORD = re.compile(r"[A-Za-z0-9_.+:/-]{1,256}\Z")
#: The queue parameter each DIRAC requirement names.
_JDL_REQUIREMENT_NAMES = {"site": "Site", "platform": "Platform", "tags": "Tag"}
#: A CPU time in seconds.
_JDL_SECONDS = re.compile(r"[0-9]{1,18}(\.[0-9]{0,6})?\Z")


def parse_jdl(text: str, extra_known: Iterable[str] | None = None) -> JobDescription:
    """Parse a JDL / ClassAd job description with HTCondor's classad module.

    Strings and numbers become one value; ClassAd lists become lists of values;
    ``Arguments`` given as one string is split like a shell would (no
    expansion); ``Environment`` may be a list of ``NAME=value`` strings or one
    ``"A=1 B=2"`` string; ``Requirements`` (an expression) is kept as its
    ClassAd text.

    DIRAC's vocabulary is mapped to jim's (docs/jdl.md): ``StdInput``, ``StdOutput``,
    ``StdError``, ``InputSandbox``, ``OutputSandbox`` (:data:`JDL_RENAMED`),
    ``Splitter = Parametric`` (the parametric job type), the dotted names of
    parameter sequences (``Parameters.A = {...}``, which the ClassAd grammar
    lacks, are read as quoted names), RFC #7's ``Site``, ``BannedSite``,
    ``Platform``, ``CPUTime`` and ``Tags`` (added to the requirements) and
    DIRAC's attributes with no meaning at a site (:data:`JDL_RECORDED`:
    accepted and recorded).

    The text is bounded (:func:`classad_tokens`) before the library sees it.
    Every other value must be a constant: literals, lists and operators on them,
    no reference to an attribute and no function call; one that evaluates to
    ``undefined`` or ``error`` is refused.  With ``extra_known`` (the names the
    installed job types declare), a name that neither GRAM, jim nor a job type
    knows is refused before anything is evaluated.
    """
    check_text(text, "JDL")
    tokens = classad_tokens(text, "the JDL job description")
    classad = classad_module()
    quoted = _quote_dotted_names(text)
    try:
        ad = classad.parseOne(quoted)
    except Exception as e:  # the bindings raise several types
        raise DescriptionError(f"JDL does not parse as a ClassAd: {e}") from None
    if len(ad) < _definitions(tokens) and tokens[0] != ("open", "["):
        try:  # old-style lines joined by ';' on one line: the library reads the first only
            ad = classad.parseOne(f"[{quoted}\n]")
        except Exception:  # (not new-style either: counted below)
            pass
    if len(ad) == 0 and text.strip():
        raise DescriptionError("JDL does not parse as a ClassAd (no attributes found)")
    if len(ad) != _definitions(tokens):
        raise DescriptionError(
            f"JDL does not parse as one ClassAd: {_definitions(tokens)} attribute definitions, {len(ad)} read "
            "(an attribute given twice?)"
        )
    keys = list(ad.keys())
    if len(keys) > MAX_ATTRIBUTES:
        raise DescriptionError(f"the job description has more than {MAX_ATTRIBUTES} attributes")
    targets: dict[str, str] = {}  # jim name -> the JDL name that gives it
    for key in keys:
        name = _jdl_name(key)
        target = "requirements" if name in JDL_REQUIREMENTS else JDL_RENAMED.get(name, name)
        target = "jimtype" if name == "splitter" else target
        if target in targets and target != "requirements":
            raise DescriptionError(f"JDL attributes {shown(targets[target])} and {shown(key)} both give {target}")
        targets.setdefault(target, key)
    if extra_known is not None:
        # (a dotted name, DIRAC's Parameters.A, is known when its first part is: the job type checks the rest)
        names = {t.partition(".")[0] for t in targets}
        JobDescription(dict.fromkeys(names, []), source_format="jdl").check_known(extra_known)
    attrs: dict[str, list[Value]] = {}
    wanted: list[Value] = []
    for key in keys:
        name = _jdl_name(key)
        expr = str(ad.lookup(key))  # (bounded above: the unparser recurses through the tree)
        if name == "requirements":
            attrs.setdefault(name, []).insert(0, expr)
            continue
        if name == "splitter":
            attrs["jimtype"] = [_jdl_splitter(expr)]
            continue
        _jdl_constant(key, expr)
        try:
            value = ad.eval(key)
        except Exception as e:
            raise DescriptionError(f"JDL attribute {shown(key)} does not evaluate: {shown(expr)}", cause=e) from None
        if isinstance(value, classad.Value):  # undefined or error (an IntEnum: never a number here)
            raise DescriptionError(f"JDL attribute {shown(key)} is {value.name.lower()}: {shown(expr)}")
        values = _jdl_values(key, value)
        if name in JDL_REQUIREMENTS:
            wanted.append(_jdl_requirement(key, name, values))
        elif name == "jobtype" and not (len(values) == 1 and str(values[0]).lower() in GRAM_JOBTYPES):
            attrs["diracjobtype"] = values
        else:
            attrs[JDL_RENAMED.get(name, name)] = values
    if wanted:
        attrs.setdefault("requirements", []).extend(wanted)
    return JobDescription(_bounded(attrs), source_format="jdl", source_text=text)


def _definitions(tokens: list[tuple[str, str]]) -> int:
    """How many attributes a JDL text defines: its ``=`` at the top level (inside its outer ``[ ]``, if any)."""
    top = 1 if tokens and tokens[0] == ("open", "[") else 0
    depth = count = 0
    for kind, _tok in tokens:
        if kind == "open":
            depth += 1
        elif kind == "close":
            depth -= 1
        elif kind == "assign" and depth == top:
            count += 1
    return count


def _jdl_name(key: str) -> str:
    """A JDL attribute's canonical name; a dotted one keeps its sequence name as written (``parameters.A``)."""
    base, dot, rest = key.partition(".")
    return canonical(base) + dot + rest


def _quote_dotted_names(text: str) -> str:
    """``text`` with each dotted attribute name being defined (``Parameters.A =``, DIRAC's named parameter
    sequences) written as a quoted ClassAd name (``'Parameters.A' =``); ``text`` is already bounded."""
    toks = []
    for m in _CLASSAD_TOKEN.finditer(text):
        if m.lastgroup == "unclosed":
            break
        if m.lastgroup != "blank":
            toks.append(m)
    out: list[str] = []
    done = 0
    for i in range(len(toks) - 3):
        a, dot, b, eq = toks[i : i + 4]
        if (
            a.lastgroup == "name"
            and dot.group() == "."
            and b.lastgroup == "name"
            and eq.lastgroup == "assign"
            and a.end() == dot.start()
            and dot.end() == b.start()
            and a.start() >= done
        ):
            out.append(text[done : a.start()])
            out.append(f"'{a.group()}.{b.group()}'")
            done = b.end()
    out.append(text[done:])
    return "".join(out)


def _jdl_splitter(expr: str) -> str:
    """The job type of DIRAC's ``Splitter`` (``Parametric``, bare or quoted): ``parametric``."""
    toks = classad_tokens(expr, "JDL attribute Splitter")
    if len(toks) == 1 and toks[0][0] in ("name", "string"):
        word = toks[0][1].strip('"')
        if word.lower() == "parametric":
            return "parametric"
    raise InvalidAttribute(f"JDL Splitter must be Parametric (the only splitter jim has), got {shown(expr)}")


def _jdl_requirement(key: str, name: str, values: list[Value]) -> str:
    """DIRAC's ``Site``, ``BannedSite``, ``Platform``, ``CPUTime`` or ``Tags`` as one requirement on the queue."""
    words = [str(v).strip() for v in values]
    if not words:
        raise InvalidAttribute(f"JDL {key} has no value")
    if name == "cputime":
        if len(words) != 1 or not _JDL_SECONDS.match(words[0]):
            raise InvalidAttribute(f"JDL {key} must be a number of seconds, got {shown(' '.join(words))}")
        return f"MaxCPUTime={words[0].split('.')[0] if words[0].endswith('.') else words[0]}"
    for w in words:
        if not _JDL_REQUIREMENT_WORD.match(w):
            raise InvalidAttribute(f"JDL {key} values must be names of letters, digits and _.+:/- only, got {shown(w)}")
    if name == "bannedsite":
        return " && ".join(f'Site =!= "{w}"' for w in words)
    return f"{_JDL_REQUIREMENT_NAMES[name]}={','.join(words)}"


_CONSTANT_NAMES = frozenset(["true", "false"])


def _jdl_constant(key: str, expr: str) -> None:
    """Refuse a JDL value that is not a constant (a reference, a function call, a record, undefined, error)."""
    for kind, tok in classad_tokens(expr, f"JDL attribute {shown(key)}"):
        low = tok.lower()
        if kind == "name" and low in ("undefined", "error"):
            raise DescriptionError(f"JDL attribute {shown(key)} is {low}: {shown(expr)}")
        if (kind == "name" and low not in _CONSTANT_NAMES) or kind == "qname":
            raise DescriptionError(
                f"JDL attribute {shown(key)} must be a constant, not a reference to {shown(tok)}: {shown(expr)}"
            )
        if kind == "open" and tok == "[":
            raise DescriptionError(f"JDL attribute {shown(key)} must be a constant, not a ClassAd record")


def _jdl_values(key: str, value: Any) -> list[Value]:
    name = canonical(key)
    if isinstance(value, bool):
        return ["yes" if value else "no"]
    if isinstance(value, (int, float)):
        return [str(value)]
    if isinstance(value, str):
        if name == "arguments":
            try:
                return [*split_words(value)]
            except ValueError as e:
                raise DescriptionError(f"JDL Arguments: {e}") from None
        if name == "environment":
            try:
                return [list(item.split("=", 1)) for item in split_words(value) if "=" in item]
            except ValueError as e:
                raise DescriptionError(f"JDL Environment: {e}") from None
        return [value]
    if isinstance(value, list):
        if name == "environment":
            out: list[Value] = []
            for item in value:
                s = str(item)
                if "=" not in s:
                    raise DescriptionError(f"JDL Environment entry {shown(s)} is not NAME=value")
                out.append(list(s.split("=", 1)))
            return out
        values: list[Value] = []
        for v in value:
            if isinstance(v, list):
                raise DescriptionError(f"JDL attribute {shown(key)}: a list inside a list")
            values.extend(_jdl_values(key, v) if not isinstance(v, str) else [v])
        return values
    raise DescriptionError(f"JDL attribute {shown(key)}: unsupported value {shown(str(value))}")


# --------------------------------------------------------------------------


def to_rsl(desc: JobDescription) -> str:
    """Render a description as RSL (for display and logs)."""

    def lit(v: Value) -> str:
        if isinstance(v, list):
            return "(" + " ".join(lit(x) for x in v) + ")"
        if v and not any(c in _SPECIAL for c in v):
            return v
        return '"' + v.replace('"', '""') + '"'

    return "&" + "".join(f"({k}={' '.join(lit(v) for v in vals)})" for k, vals in desc.attrs.items())
