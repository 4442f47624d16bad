"""The GRAM module's JSON (:func:`parse_json`), and a description of any attribute -> values mapping.

GRAM's job manager hands jim's GRAM module the description as a mapping from
attribute to a list of values; the module writes it as a JSON object, which
:func:`parse_json` reads with the standard library's ``json``, its depth
(:data:`~jim.jobdesc.limits.MAX_DEPTH`) checked before and its numbers
(:data:`~jim.jobdesc.limits.MAX_NUMBER_DIGITS`) while it reads; ``NaN`` and
``Infinity`` are refused.  :func:`from_mapping` makes a description of any
such mapping (ARC's grami reader uses it too): names made canonical, a single
value taken as a list of one, booleans as ``yes``/``no``, numbers as their text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jim.errors import DescriptionError
from jim.jobdesc.limits import MAX_ATTRIBUTES, MAX_DEPTH, MAX_NUMBER_DIGITS, Value, bounded, check_text, shown
from jim.jobdesc.model import JobDescription
from jim.jobdesc.vocabulary import canonical


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
    """The description of ``data``: attribute -> a value or a list of values (strings, numbers,
    booleans, lists of them), held to the limits; ``source_format`` and ``source_text`` say whence."""
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
    return JobDescription(bounded(attrs), source_format=source_format, source_text=source_text)


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
    """Parse the GRAM module's JSON (an object: attribute -> list of strings) into a JobDescription."""
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
