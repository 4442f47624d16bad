"""ClassAd text lexed and bounded without the ClassAd library, which must never see unbounded input.

:func:`classad_tokens` splits a ClassAd text (a JDL file, a requirement
expression, one JDL value) into ``(kind, text)`` terms with one regular
expression (:data:`CLASSAD_TOKEN`), in time linear in its length, and refuses
it (:class:`jim.errors.DescriptionError`) once it is over a limit of
:mod:`jim.jobdesc.limits`: its terms, its operators, its nesting, the digits of
a number, the characters of a string, the elements of a list.  Only a text it
accepted may be given to the bindings (:func:`jim.classads.classad_module`).
"""

from __future__ import annotations

import re

from jim.errors import DescriptionError
from jim.jobdesc.limits import (
    MAX_CLASSAD_OPERATORS,
    MAX_CLASSAD_TERMS,
    MAX_DEPTH,
    MAX_NUMBER_DIGITS,
    MAX_VALUE_CHARS,
    MAX_VALUES,
)

#: One term of ClassAd text, by kind (``unclosed``: an unterminated string or comment begins here).
CLASSAD_TOKEN = re.compile(
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
    tally = _Tally(what)
    for m in CLASSAD_TOKEN.finditer(text):
        kind = m.lastgroup or "other"
        if kind == "blank":
            continue
        if kind == "unclosed":  # the rest is an unterminated string or comment: the parser refuses it
            tokens.append((kind, text[m.start() :]))
            break
        if len(tokens) >= MAX_CLASSAD_TERMS:
            raise DescriptionError(f"{what} has more than {MAX_CLASSAD_TERMS} terms")
        tok = m.group()
        tally.count(kind, tok)
        tokens.append((kind, tok))
    return tokens


class _Tally:
    """What a ClassAd text (``what``, for messages) has used of its limits so far: its operators,
    and per open bracket the elements of its list (``{`` only; -1 for ``(`` and ``[``)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.operators = 0
        self.lists: list[int] = []

    def count(self, kind: str, tok: str) -> None:
        """Count the term ``tok`` of ``kind``; DescriptionError when it goes over a limit."""
        if kind == "op":
            self.operators += 1
            if self.operators > MAX_CLASSAD_OPERATORS:
                raise DescriptionError(f"{self.what} has more than {MAX_CLASSAD_OPERATORS} operators")
        elif kind == "number" and len(tok) > MAX_NUMBER_DIGITS:
            raise DescriptionError(f"{self.what} has a number of more than {MAX_NUMBER_DIGITS} digits")
        elif kind in ("string", "qname") and len(tok) > MAX_VALUE_CHARS + 2:
            raise DescriptionError(f"{self.what} has a string longer than {MAX_VALUE_CHARS} characters")
        elif kind == "open":
            self._open(tok)
        elif kind == "close" and self.lists:
            self.lists.pop()
        elif kind == "sep" and tok == ",":
            self._element()

    def _open(self, bracket: str) -> None:
        if len(self.lists) >= MAX_DEPTH:
            raise DescriptionError(f"{self.what} is nested more than {MAX_DEPTH} deep")
        self.lists.append(1 if bracket == "{" else -1)

    def _element(self) -> None:
        """One more element in the innermost open bracket, counted when it is a list's."""
        if self.lists and self.lists[-1] > 0:
            self.lists[-1] += 1
            if self.lists[-1] > MAX_VALUES:
                raise DescriptionError(f"{self.what} has a list of more than {MAX_VALUES} elements")
