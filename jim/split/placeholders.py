"""Placeholders in a parametric child's description: ``$name``, ``${name}``, and DIRAC's ``%s``,
``%n``, ``%(name)s``.

Every string in every attribute (nested lists included) is expanded once:

* ``$name`` -- ``name`` is ``[A-Za-z_][A-Za-z0-9_]*`` and ends at the first other
  character (``$Parameter_x`` looks up ``Parameter_x``; write ``${Parameter}_x``).
* ``${name}`` -- also allows dotted names: ``${Parameter.energy}``.
* ``$$`` -- a literal ``$`` (write ``$$HOME`` to pass ``$HOME`` to the shell).
* A ``$`` followed by anything else (a digit, a space, end of text) is kept
  literally, so ``$1`` and ``cost: 5$`` pass through; ``${`` without ``}`` and
  ``${}`` are errors.
* Names are looked up case-insensitively (RSL attribute names are), among the
  values above plus any ``variables`` the caller adds.  **An unresolvable
  placeholder is a ValueError naming it and its attribute** (DIRAC's 2013
  splitter left it in place).
* Substituted values are not scanned again, so a parameter value containing
  ``$`` is passed through literally.
* DIRAC's own placeholders are interpreted only when the caller asks
  (``percent=True``: jim does for a JDL description, DIRAC's own language):
  ``%s`` is the unnamed value, ``%(name)s`` the value of sequence ``name``,
  ``%n`` the index zero-padded as DIRAC pads it, to the width of the last
  index (N-1: N=10 gives ``0``..``9``, N=100 ``00``..``99``; ``SplitID`` keeps
  the RFC's width of N); any other ``%`` is kept as written.  Otherwise they
  pass through as text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

Value = str | Sequence["Value"]
Expanded = str | list["Expanded"]

#: A name ``${...}`` may hold: an identifier, dots allowed (``Parameter.energy``).
VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_PLACEHOLDER = re.compile(r"\$(?:(\$)|\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*)|(\{))")
#: Where DIRAC's ``%n`` is in a child's lookup (not a name a ``$`` placeholder can reach).
DIRAC_N = "%n"
#: The ``$`` placeholders and DIRAC's own ``%s``, ``%n``, ``%(name)s`` (a JDL description's).
_PLACEHOLDER_OR_PERCENT = re.compile(_PLACEHOLDER.pattern + r"|%(?:(s)|(n)|\(([A-Za-z_][A-Za-z0-9_]*)\)s)")


def substitute(text: str, variables: Mapping[str, str]) -> str:
    """Expand ``$name``, ``${name}`` and ``$$`` in ``text`` once (see the module docstring).

    ``variables`` is matched case-insensitively.  Raises ``ValueError`` naming
    the first placeholder that cannot be resolved or is malformed.
    """
    lookup = {name.lower(): value for name, value in variables.items()}
    return substitute_in(text, lookup)


def expand(attr: str, value: Value, lookup: Mapping[str, str], percent: bool = False) -> Expanded:
    """``value`` (a string, or a list of them, nested) with its placeholders expanded; a ValueError names
    ``attr``.  ``lookup``: lower-cased names -> values."""
    if isinstance(value, str):
        try:
            return substitute_in(value, lookup, percent)
        except ValueError as exc:
            raise ValueError(f"attribute {attr}: {exc}") from None
    if isinstance(value, Sequence):
        return [expand(attr, item, lookup, percent) for item in value]
    raise ValueError(f"attribute {attr}: values must be strings or lists of strings, got {value!r}")


def substitute_in(text: str, lookup: Mapping[str, str], percent: bool = False) -> str:
    """``text`` with its placeholders expanded from ``lookup`` (lower-cased names -> values)."""

    def replace(match: re.Match[str]) -> str:
        dollar, braced, bare, unterminated, *dirac = match.groups()
        if any(d is not None for d in dirac):
            p_s, p_n, p_name = dirac
            key = "parameter" if p_s else DIRAC_N if p_n else f"parameter.{p_name.lower()}"
            if key not in lookup:
                raise ValueError(f"unresolved placeholder {match.group()} in {text!r}")
            return lookup[key]
        if dollar:
            return "$"
        if unterminated:
            raise ValueError(f"unterminated placeholder '${{' in {text!r}")
        name = bare if bare is not None else braced
        if bare is None and not VAR_NAME.match(name):
            raise ValueError(f"malformed placeholder '${{{name}}}' in {text!r}")
        try:
            return lookup[name.lower()]
        except KeyError:
            shown = f"${name}" if bare is not None else f"${{{name}}}"
            raise ValueError(f"unresolved placeholder {shown} in {text!r}") from None

    return (_PLACEHOLDER_OR_PERCENT if percent else _PLACEHOLDER).sub(replace, text)
