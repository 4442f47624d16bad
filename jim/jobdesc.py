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
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, overload

from jim.errors import DescriptionError, InvalidAttribute, InvalidCount, RslSyntaxError, UnknownAttribute

Value = str | list

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

    def get(self, name: str, default: str | None = None) -> str | None:
        """The single value of ``name``; more than one value is an error."""
        vals = self.values(name)
        if not vals:
            return default
        if len(vals) > 1:
            raise InvalidAttribute(f"attribute {name} takes one value, got {len(vals)}: {' '.join(vals)}")
        return vals[0]

    @overload
    def get_int(
        self, name: str, default: int, *, minimum: int | None = None, error: type[Exception] = InvalidAttribute
    ) -> int: ...

    @overload
    def get_int(
        self, name: str, default: None = None, *, minimum: int | None = None, error: type[Exception] = InvalidAttribute
    ) -> int | None: ...

    def get_int(
        self,
        name: str,
        default: int | None = None,
        *,
        minimum: int | None = None,
        error: type[Exception] = InvalidAttribute,
    ) -> int | None:
        raw = self.get(name)
        if raw is None:
            return default
        try:
            value = int(raw.strip(), 10)
        except ValueError:
            raise error(f"{name} must be an integer, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise error(f"{name} must be at least {minimum}, got {value}")
        return value

    def get_float(self, name: str, default: float | None = None, *, positive: bool = False) -> float | None:
        raw = self.get(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise InvalidAttribute(f"{name} must be a number, got {raw!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidAttribute(f"{name} must be a finite number, got {raw!r}")
        if positive and value <= 0:
            raise InvalidAttribute(f"{name} must be positive, got {raw!r}")
        return value

    def environment(self) -> list[tuple[str, str]]:
        """``environment`` as (name, value) pairs."""
        pairs = []
        for item in self.attrs.get("environment", []):
            if isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item):
                pairs.append((item[0], item[1]))
            else:
                raise InvalidAttribute(f"environment entries must be (NAME value) pairs, got {item!r}")
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
        unknown = sorted(set(self.attrs) - known)
        if unknown:
            raise UnknownAttribute(
                f"the RSL attribute {unknown[0]!r} is not supported by jim"
                + (f" (nor {', '.join(repr(u) for u in unknown[1:])})" if unknown[1:] else "")
            )

    def wall_seconds(self) -> int | None:
        """The wall-time limit of each local job, in seconds, from GRAM's ``maxwalltime`` (else
        ``maxtime``), in minutes; None when neither is given."""
        for name, bad in (("maxwalltime", 101), ("maxtime", 13)):
            raw = self.get(name)
            if raw is None:
                continue
            try:
                minutes = int(raw.strip(), 10)
            except ValueError:
                raise InvalidAttribute(
                    f"{name} must be a whole number of minutes, got {raw!r}", gram_error=bad
                ) from None
            if minutes < 1:
                raise InvalidAttribute(
                    f"{name} must be at least 1 minute, got {minutes}", gram_error=102 if name == "maxwalltime" else bad
                )
            return minutes * 60
        return None

    def check_common(self) -> None:
        """Checks every job type shares: count, jobtype, executable, environment, wall time."""
        self.get_int("count", 1, minimum=1, error=InvalidCount)
        self.wall_seconds()
        jobtype = self.get("jobtype")
        if jobtype is not None and jobtype.lower() not in GRAM_JOBTYPES:
            raise InvalidAttribute(f"jobtype must be one of {', '.join(GRAM_JOBTYPES)}, got {jobtype!r}", gram_error=19)
        exe = self.get("executable")
        if exe is not None and (not exe or "\0" in exe):
            raise InvalidAttribute("executable must be a non-empty path")
        self.environment()
        for name, _value in self.environment():
            if not name or "=" in name or "\0" in name:
                raise InvalidAttribute(f"bad environment variable name {name!r}", gram_error=40)


# --------------------------------------------------------------------------
# JSON (what the GRAM module hands over)
# --------------------------------------------------------------------------


def _norm_value(v: Any, where: str) -> Value:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):
        return [_norm_value(x, where) for x in v]
    raise DescriptionError(f"attribute {where}: unsupported value {v!r}")


def from_mapping(data: Any, *, source_format: str = "json", source_text: str = "") -> JobDescription:
    if not isinstance(data, dict):
        raise DescriptionError("a JSON job description must be an object: attribute -> list of strings")
    attrs: dict[str, list[Value]] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not key.strip():
            raise DescriptionError(f"bad attribute name {key!r}")
        name = canonical(key.strip())
        vals = value if isinstance(value, list) else [value]
        attrs.setdefault(name, []).extend(_norm_value(v, key) for v in vals)
    return JobDescription(attrs, source_format=source_format, source_text=source_text)


def parse_json(text: str) -> JobDescription:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DescriptionError(
            f"job description is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    return from_mapping(data, source_format="json", source_text=text)


# --------------------------------------------------------------------------
# RSL
# --------------------------------------------------------------------------

_SPECIAL = set("+&|()=<>!\"'^#$") | set(" \t\r\n\f\v")


class _RslParser:
    def __init__(self, text: str, env: dict[str, str]):
        self.s = text
        self.i = 0
        self.env = env
        self.subst: dict[str, str] = {}

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
        relations = []
        while self.peek() == "(":
            relations.append(self.relation())
        if self.peek() != "":
            raise self.error(f"unexpected {self.s[self.i]!r}")
        if not relations:
            raise self.error("no (attribute=value) relations")
        return relations

    def relation(self) -> tuple[str, list[Value]]:
        self.expect("(")
        self.skip()
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in _SPECIAL:
            self.i += 1
        name = self.s[start : self.i]
        if not name:
            raise self.error("expected an attribute name")
        op = self.peek()
        if op != "=":
            if op in "<>!":
                raise self.error(f"only '=' relations are supported (attribute {name})")
            raise self.error(f"expected '=' after attribute {name}")
        self.i += 1
        values = self.sequence(")")
        self.expect(")")
        cname = canonical(name)
        if cname == "rslsubstitution":
            for pair in values:
                if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
                    raise self.error("rsl_substitution takes (NAME value) pairs")
                self.subst[pair[0]] = pair[1]
        return name, values

    def sequence(self, closer: str) -> list[Value]:
        values: list[Value] = []
        while True:
            c = self.peek()
            if c == closer or c == "":
                return values
            if c == "(":
                self.i += 1
                inner = self.sequence(")")
                self.expect(")")
                values.append(inner)
            else:
                values.append(self.concatenation())

    def concatenation(self) -> str:
        """Literals joined by ``#``, or written next to a ``$(VAR)`` with no space (``$(HOME)/x``)."""
        was_var = self.s[self.i] == "$"
        parts = [self.literal()]
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "#":
                self.i += 1
                self.skip()
            elif not (c == "$" or (was_var and (c in "\"'" or c not in _SPECIAL))):
                break
            was_var = self.s[self.i] == "$"
            parts.append(self.literal())
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
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in _SPECIAL:
            self.i += 1
        if start == self.i:
            raise self.error(f"unexpected {c!r}")
        return self.s[start : self.i]

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
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in _SPECIAL:
            self.i += 1
        name = self.s[start : self.i]
        self.expect(")")
        if name in self.subst:
            return self.subst[name]
        if name in ("HOME", "LOGNAME", "USER") and name in self.env:
            return self.env[name]
        raise self.error(f"undefined RSL variable $({name})")


def parse_rsl(text: str, env: dict[str, str] | None = None) -> JobDescription:
    """Parse GRAM RSL text into a JobDescription."""
    if "\0" in text:
        raise RslSyntaxError("malformed RSL: NUL character")
    parser = _RslParser(text, dict(os.environ if env is None else env))
    attrs: dict[str, list[Value]] = {}
    for name, values in parser.parse():
        cname = canonical(name)
        if cname == "rslsubstitution":
            continue
        if cname in attrs:
            raise RslSyntaxError(f"malformed RSL: attribute {name} given twice")
        attrs[cname] = values
    return JobDescription(attrs, source_format="rsl", source_text=text)


# --------------------------------------------------------------------------
# JDL / ClassAd
# --------------------------------------------------------------------------


def parse_jdl(text: str) -> JobDescription:
    """Parse a JDL / ClassAd job description with HTCondor's classad module.

    Strings and numbers become one value; ClassAd lists become lists of values;
    ``Arguments`` given as one string is split like a shell would (no
    expansion); ``Environment`` may be a list of ``NAME=value`` strings or one
    ``"A=1 B=2"`` string; ``Requirements`` (an expression) is kept as its
    ClassAd text.
    """
    from jim.requirements.expressions import classad_module  # (lazy: only a JDL needs the ClassAd bindings)

    classad = classad_module()
    try:
        ad = classad.parseOne(text)
    except Exception as e:  # the bindings raise several types
        raise DescriptionError(f"JDL does not parse as a ClassAd: {e}") from None
    if len(ad) == 0 and text.strip():
        raise DescriptionError("JDL does not parse as a ClassAd (no attributes found)")
    attrs: dict[str, list[Value]] = {}
    for key in ad.keys():  # noqa: SIM118 (a ClassAd, not a dict)
        raw = ad.lookup(key)
        name = canonical(key)
        try:
            value = ad.eval(key)
        except Exception:
            value = raw
        attrs[name] = _jdl_values(name, value, raw)
    return JobDescription(attrs, source_format="jdl", source_text=text)


def _jdl_values(name: str, value: Any, raw: Any) -> list[Value]:
    if name == "requirements":
        return [str(raw)]
    if isinstance(value, bool):
        return ["yes" if value else "no"]
    if isinstance(value, (int, float)):
        return [str(value)]
    if isinstance(value, str):
        if name == "arguments":
            try:
                return [*shlex.split(value)]
            except ValueError as e:
                raise DescriptionError(f"JDL Arguments: {e}") from None
        if name == "environment":
            return [list(item.split("=", 1)) for item in shlex.split(value) if "=" in item]
        return [value]
    if isinstance(value, list):
        if name == "environment":
            out: list[Value] = []
            for item in value:
                s = str(item)
                if "=" not in s:
                    raise DescriptionError(f"JDL Environment entry {s!r} is not NAME=value")
                out.append(list(s.split("=", 1)))
            return out
        return [str(v) if not isinstance(v, str) else v for v in value]
    # an unevaluated expression (e.g. undefined reference): keep its text
    return [str(raw)]


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
