"""Plug-ins: classes found by name, built in or through an entry-point group.

Job types (``jim.handlers``) and batch adapters (``jim.adapters``) are found
the same way: jim's own by a ``module:Class`` reference (no entry-point scan,
which costs milliseconds on every submit), a site's through the entry points
of the installed packages.  A plug-in that fails to load, or is not a
subclass of the base it must extend, only breaks its own name: its error is
kept and reported when that name is asked for.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any


def load_ref(ref: str) -> Any:
    """The object named by ``module:attr.attr``."""
    module, _, attr = ref.partition(":")
    obj = import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def check_class(obj: Any, base: type) -> type:
    """``obj`` if it is a concrete subclass of ``base``, else TypeError saying what is wrong."""
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise TypeError(f"{obj!r} is not a subclass of {base.__module__}.{base.__qualname__}")
    missing = sorted(getattr(obj, "__abstractmethods__", ()))
    if missing:
        raise TypeError(f"{obj.__name__} does not implement {', '.join(missing)} (see {base.__module__})")
    return obj


def discover(group: str, builtin: dict[str, str], base: type) -> dict[str, type | Exception]:
    """name -> class, or the exception that prevented loading it: the built-in ones, then the group's
    entry points (which may replace a built-in name)."""
    from importlib.metadata import entry_points  # (lazy: built-in names never need the scan, which costs ms)

    refs: dict[str, Any] = dict(builtin)
    for ep in entry_points(group=group):
        refs[ep.name] = ep
    found: dict[str, type | Exception] = {}
    for name, ref in refs.items():
        try:
            found[name] = check_class(ref.load() if hasattr(ref, "load") else load_ref(ref), base)
        except Exception as e:  # a broken plug-in must not break the others
            found[name] = e
    return found


def find(name: str, group: str, builtin: dict[str, str], base: type, what: str) -> type:
    """The class of ``name``; LookupError (unknown) or RuntimeError (broken) with a one-line reason."""
    if name in builtin:  # shipped ones need no entry-point scan
        return check_class(load_ref(builtin[name]), base)
    everything = discover(group, builtin, base)
    entry = everything.get(name)
    if entry is None:
        known = ", ".join(sorted(k for k, v in everything.items() if isinstance(v, type)))
        raise LookupError(f"unknown {what} {name!r} (this site has: {known})")
    if isinstance(entry, Exception):
        raise RuntimeError(f"{what} {name!r} is installed but broken: {type(entry).__name__}: {entry}") from entry
    return entry
