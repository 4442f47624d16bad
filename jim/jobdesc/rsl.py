"""GRAM RSL: the parser (:func:`parse_rsl`) and the writer (:func:`to_rsl`).

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

Parsing raises :class:`jim.errors.RslSyntaxError` (GRAM 48) with the position,
and holds the text to :mod:`jim.jobdesc.limits` as it reads (the values of
``$(VAR)`` references expanded count too), in time linear in its length.
"""

from __future__ import annotations

import os
import re

from jim.errors import DescriptionError, RslSyntaxError
from jim.jobdesc.limits import (
    MAX_ATTRIBUTES,
    MAX_DEPTH,
    MAX_DESCRIPTION_BYTES,
    MAX_VALUE_CHARS,
    MAX_VALUES,
    Value,
    bounded,
    check_text,
    shown,
)
from jim.jobdesc.model import JobDescription
from jim.jobdesc.vocabulary import canonical

_SPECIAL = set("+&|()=<>!\"'^#$") | set(" \t\r\n\f\v")
_RSL_PLAIN = re.compile(r"[^+&|()=<>!\"'^#$ \t\r\n\f\v]+")


class _RslParser:
    """A reader of one RSL text, by recursive descent: ``i`` is the position, ``subst`` the
    ``rsl_substitution`` pairs read so far, ``env`` where HOME, LOGNAME and USER are found."""

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
    return JobDescription(bounded(attrs), source_format="rsl", source_text=text)


def to_rsl(desc: JobDescription) -> str:
    """Render a description as RSL (for display and logs)."""

    def lit(v: Value) -> str:
        if isinstance(v, list):
            return "(" + " ".join(lit(x) for x in v) + ")"
        if v and not any(c in _SPECIAL for c in v):
            return v
        return '"' + v.replace('"', '""') + '"'

    return "&" + "".join(f"({k}={' '.join(lit(v) for v in vals)})" for k, vals in desc.attrs.items())
