"""ClassAd expressions and records in job requirements, and their evaluation against queues.

The ClassAd bindings (:func:`jim.classads.classad_module`) are imported when the first
expression or record is parsed: never on import, so that a job without expressions does not pay
for them.  The semantics are in ``docs/requirements.md``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jim.classads import classad_module
from jim.errors import DescriptionError, InvalidAttribute
from jim.jobdesc.classad_text import classad_tokens
from jim.requirements.resources import ResourceTree

__all__ = ["InvalidRequirement", "QueueAds", "canonical_expression", "classad_record"]

_EXPR_ATTR = "_jim_requirement"


class InvalidRequirement(InvalidAttribute, ValueError):
    """A job's requirements are malformed (bad name, value or ClassAd expression)."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _bounded(text: str) -> list[tuple[str, str]]:
    """The tokens of a requirement's ClassAd text, refused when over jim's description limits
    (:func:`jim.jobdesc.classad_text.classad_tokens`): the library never sees an unbounded expression."""
    try:
        return classad_tokens(text, "requirement expression")
    except DescriptionError as exc:
        raise InvalidRequirement(exc.message) from None


def _parse(text: str) -> Any:
    """The parsed ClassAd expression; raises :class:`InvalidRequirement` when it does not parse."""
    _bounded(text)
    try:
        return classad_module().ExprTree(text)
    except Exception as exc:  # the bindings raise their own ClassAdException / SyntaxError
        raise InvalidRequirement(f"requirement expression does not parse: {_one_line(text)}", cause=exc) from exc


def canonical_expression(text: str) -> str:
    """The expression as the ClassAd parser prints it (layout-independent)."""
    return str(_parse(text))


def classad_record(text: str) -> dict[str, Any]:
    """A ClassAd record ``[ a = 1; b = {"x"} ]`` as a plain dict (evaluated values)."""
    try:
        ad = _parse(text).eval()
    except InvalidRequirement:
        raise
    except Exception as exc:
        raise InvalidRequirement(f"requirement record does not evaluate: {_one_line(text)}", cause=exc) from exc
    if not isinstance(ad, classad_module().ClassAd):
        raise InvalidRequirement(f"requirement record is not a ClassAd: {_one_line(text)}")
    undefined_or_error = classad_module().Value  # an IntEnum: must not pass for a number
    record: dict[str, Any] = {}
    for name in ad.keys():  # noqa: SIM118 (a ClassAd, not a dict)
        value = ad.eval(name)
        items = value if isinstance(value, list) else [value]
        if any(isinstance(v, undefined_or_error) or not isinstance(v, (str, int, float, bool)) for v in items):
            raise InvalidRequirement(
                f"requirement {name}: value does not evaluate to a string, number, boolean or list"
            )
        record[name] = list(value) if isinstance(value, list) else value
    return record


def _referenced_names(expr: Any) -> list[str]:
    """Attribute names an expression refers to, without ``MY.``/``TARGET.`` scope."""
    try:
        refs = classad_module().ClassAd().externalRefs(expr)
    except Exception:  # pragma: no cover - very old bindings
        return []
    names: list[str] = []
    for ref in refs:
        parts = [p for p in str(ref).split(".") if p]
        if len(parts) > 1 and parts[0].lower() in ("my", "target"):
            parts = parts[1:]
        if parts and parts[0] not in names:
            names.append(parts[0])
    return names


# ---------------------------------------------------------------- splitting a && chain


def _scan_top_level(text: str) -> Iterator[tuple[int, str]]:
    """Positions and characters of ``text`` outside strings and brackets."""
    depth, quote, i = 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            if depth == 0:
                yield i, ch
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                yield i, ch
        elif depth == 0:
            yield i, ch
        i += 1


def _strip_parens(text: str) -> str:
    """``(x)`` → ``x`` when the outer parentheses enclose the whole text."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    closes = [i for i, ch in _scan_top_level(text) if ch in ")]}"]
    return text[1:-1].strip() if closes == [len(text) - 1] else text


def _conjuncts(text: str) -> list[str]:
    """The terms of a top-level ``&&`` chain (parenthesised chains flattened).

    A top-level ``||`` or ``?:`` binds looser than ``&&``, so such an
    expression is one term.
    """
    text = text.strip()
    inner = _strip_parens(text)
    if inner != text:
        return _conjuncts(inner)
    top = dict(_scan_top_level(text))
    cuts = [i for i, ch in top.items() if ch == "&" and top.get(i + 1) == "&" and top.get(i - 1) != "&"]
    if not cuts or _looser_than_and(top):
        return [text]
    bounds = [0, *[c + 2 for c in cuts]]
    ends = [*cuts, len(text)]
    return [term for a, b in zip(bounds, ends, strict=True) for term in _conjuncts(text[a:b])]


def _looser_than_and(top: Mapping[int, str]) -> bool:
    """Does a top-level ``||`` or ``?:`` (position -> character outside brackets) bind looser than ``&&``?"""
    return any(
        (ch == "?" and not (top.get(i - 1) == "=" and top.get(i + 1) == "="))  # not =?=
        or (ch == "|" and top.get(i + 1) == "|")
        for i, ch in top.items()
    )


# ---------------------------------------------------------------- evaluation against queues


class QueueAds:
    """The queues of a tree as ClassAds, built on first use: for each queue a scope ad and a TARGET ad."""

    def __init__(self, tree: ResourceTree):
        self.tree = tree
        self._ads: list[tuple[Any, Any]] | None = None

    def _build(self) -> list[tuple[Any, Any]]:
        if self._ads is None:
            module = classad_module()
            self._ads = []
            for q in self.tree.queues:
                values = {k: list(v) if isinstance(v, tuple) else v for k, v in q.params.items()}
                self._ads.append((module.ClassAd(values), module.ClassAd(values)))
        return self._ads

    def _is_true(self, expr: Any, index: int) -> bool:
        """Does ``expr`` evaluate to exactly ``true`` for queue number ``index``?"""
        scope, target = self._build()[index]
        scope[_EXPR_ATTR] = expr
        try:
            bound = scope.lookup(_EXPR_ATTR)
            try:
                result = bound.eval(scope=scope, target=target)
            except TypeError:  # pragma: no cover - older bindings without target=
                result = scope.eval(_EXPR_ATTR)
        except Exception:
            return False
        finally:
            del scope[_EXPR_ATTR]
        return result is True

    def holds(self, expression: str) -> list[bool]:
        """For each queue of the tree, in order: is ``expression`` exactly ``true`` there?

        Raises :class:`InvalidRequirement` when the expression does not parse.
        """
        expr = _parse(expression)
        return [self._is_true(expr, i) for i in range(len(self.tree.queues))]

    def terms(self, expression: str) -> Iterator[tuple[str, list[str], list[bool]]]:
        """The top-level ``&&`` terms of ``expression``, each with the names it refers to and :meth:`holds`."""
        _bounded(expression)
        for term in _conjuncts(expression):
            try:
                expr = _parse(term)
            except InvalidRequirement:  # a split we should not have made: judge the whole
                expr, term = _parse(expression), expression
            yield term, _referenced_names(expr), [self._is_true(expr, i) for i in range(len(self.tree.queues))]
