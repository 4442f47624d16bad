"""Lengths of time as people write them in jim's settings and arguments: ``90d``, ``12h``, ``forever``.

The one owner of the format (``[retention]`` in jim.toml, ``jim purge --older-than``):

* a whole number and one unit, nothing else: ``s`` seconds, ``m`` minutes, ``h`` hours,
  ``d`` days (86400 s), ``w`` weeks (7 days); ``30d``, ``36h``, ``2w``;
* ``forever`` where a setting may keep something for ever (:func:`parse` with
  ``forever_ok``): the value is None;
* never negative, never a fraction, no other unit (months and years are not a fixed length), at
  most 100 years; zero only where the caller says it means something (:func:`parse` with
  ``zero_ok``: ``jim purge --older-than 0s`` is every finished grid job), else it is refused:
  in a retention zero could mean "keep nothing" as well as "never remove", so jim asks for
  ``forever`` or a length.

Errors are :class:`jim.errors.ConfigError` with one line naming the setting.
"""

from __future__ import annotations

import re

from jim.errors import ConfigError

#: Seconds per unit.
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: The word for "kept for ever".
FOREVER = "forever"
#: The longest length jim reads.
MAX_SECONDS = 100 * 366 * 86400

_FORM = re.compile(r"([0-9]{1,12})([smhdw])")


def parse(text: object, where: str, *, forever_ok: bool = False, zero_ok: bool = False) -> float | None:
    """Seconds of ``text`` (None for ``forever`` where ``forever_ok``); :class:`ConfigError` naming
    ``where`` (``[retention].record``, ``--older-than``) for anything else."""
    forms = "a whole number and a unit s, m, h, d or w (e.g. 30d, 12h)" + (f", or {FOREVER!r}" if forever_ok else "")
    if not isinstance(text, str):
        raise ConfigError(f"{where}: expected {forms}, got {text!r}")
    word = text.strip().lower()
    if forever_ok and word == FOREVER:
        return None
    m = _FORM.fullmatch(word)
    if m is None:
        shown = repr(text if len(text) <= 40 else text[:40] + "...")
        unit = re.fullmatch(r"[0-9]+\s*([a-z]+)", word)
        if word.startswith("-"):
            raise ConfigError(f"{where}: {shown} is negative (expected {forms})")
        if unit and unit.group(1) not in UNITS:
            raise ConfigError(f"{where}: {shown} has a unit jim does not know (expected {forms})")
        raise ConfigError(f"{where}: expected {forms}, got {shown}")
    seconds = int(m.group(1)) * UNITS[m.group(2)]
    if seconds == 0 and not zero_ok:
        instead = f"{FOREVER!r} to keep for ever, or a length such as 1h" if forever_ok else "a length such as 1h"
        raise ConfigError(f"{where}: zero is ambiguous (nothing kept, or never removed?): write {instead}")
    if seconds > MAX_SECONDS:
        raise ConfigError(f"{where}: {text.strip()!r} is longer than 100 years")
    return float(seconds)


def render(seconds: float | None) -> str:
    """A length as :func:`parse` reads it, in its largest whole unit (``forever`` for None)."""
    if seconds is None:
        return FOREVER
    whole = int(seconds)
    for unit in ("w", "d", "h", "m"):
        if whole and whole % UNITS[unit] == 0:
            return f"{whole // UNITS[unit]}{unit}"
    return f"{whole}s"
