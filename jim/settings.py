"""One way a TOML table becomes typed settings: a frozen dataclass, checked field by field.

Every table of jim's configuration is read through :func:`load`: the
sections of ``jim.toml`` (``[site]``, ``[monitor]`` ...), each batch
adapter's options (the rest of ``[batch]``) and each job type's options
(``[handlers.<name>]``).  The dataclass is the schema: its fields, their
types (from the annotations) and their defaults.  The rules are the same
everywhere:

* a key the dataclass has no field for is refused, naming the known ones;
* ``bool`` takes only ``true``/``false``; ``int`` only whole numbers (never
  a boolean); ``float`` a number, an integer included (``5`` is ``5.0``);
  ``str`` only a string; ``tuple[str, ...]`` / ``tuple[int, ...]`` a list
  of those (command-line words stay a list, never one string of shell
  text); ``dict[str, Any]`` a table;
* numbers are never negative (a setting that may be negative does not exist);
* ``X | None`` takes what ``X`` takes (a TOML file cannot write None).

Anything else a setting must be (a range, a relation between two fields) is
checked by the dataclass itself, in ``__post_init__``, raising
:class:`jim.errors.ConfigError`.  Errors name the table and the key:
``[monitor].interval: expected a number, got 'often'``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from jim.errors import ConfigError

if typing.TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

_KIND = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}
_KINDS = {bool: "booleans", int: "whole numbers", float: "numbers", str: "strings (arguments, not shell text)"}


def load(cls: type[T], table: Mapping[str, Any], where: str) -> T:
    """An instance of the dataclass ``cls`` from ``table`` (``where`` names the table in messages,
    e.g. ``[monitor]``); :class:`ConfigError` for an unknown key or a value of the wrong type."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table, got {table!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        known = ", ".join(sorted(fields)) or "none"
        keys = "key" if len(unknown) == 1 else "keys"
        raise ConfigError(f"{where}: unknown {keys} {', '.join(map(repr, unknown))} (known: {known})")
    hints = typing.get_type_hints(cls)
    values = {key: value_of(hints[key], value, f"{where}.{key}") for key, value in table.items()}
    return cls(**values)


def value_of(tp: Any, value: Any, where: str) -> Any:
    """``value`` as a setting of type ``tp`` (see the module docstring), or :class:`ConfigError`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        kinds = [t for t in typing.get_args(tp) if t is not type(None)]
        if len(kinds) != 1:  # pragma: no cover - jim declares no such setting
            raise ConfigError(f"{where}: cannot read a setting of type {tp}")
        return value_of(kinds[0], value, where)
    if origin is tuple:
        return _sequence(typing.get_args(tp)[0], value, where)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a table, got {value!r}")
        return dict(value)
    if tp in _KIND:
        return _scalar(tp, value, where)
    raise ConfigError(f"{where}: cannot read a setting of type {tp}")  # pragma: no cover


def _scalar(tp: type, value: Any, where: str) -> Any:
    is_bool = isinstance(value, bool)
    if tp is bool:
        ok = is_bool
    elif tp is int:
        ok = isinstance(value, int) and not is_bool
    elif tp is float:
        ok = isinstance(value, (int, float)) and not is_bool
    else:
        ok = isinstance(value, str)
    if not ok:
        raise ConfigError(f"{where}: expected {_KIND[tp]}, got {value!r}")
    if tp in (int, float) and value < 0:
        raise ConfigError(f"{where}: must not be negative, got {value!r}")
    return float(value) if tp is float else value


def _sequence(item: Any, value: Any, where: str) -> tuple[Any, ...]:
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where}: expected a list of {_KINDS.get(item, str(item))}, got {value!r}")
    return tuple(_scalar(item, v, f"{where}[{k}]") for k, v in enumerate(value))
