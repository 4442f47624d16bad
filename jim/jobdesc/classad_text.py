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
    operators = 0
    lists: list[int] = []  # per open bracket: elements so far ({ only), -1 for ( and [
    for m in CLASSAD_TOKEN.finditer(text):
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
