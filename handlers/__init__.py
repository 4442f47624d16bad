"""Job-type handlers, found through the ``jim.handlers`` entry-point group.

A broken plug-in only breaks its own job type: its load error is kept and
reported when (and only when) that job type is asked for.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from jim.errors import UnknownJobType

if TYPE_CHECKING:
    from jim.handlers.base import Handler

GROUP = "jim.handlers"

#: Handlers shipped with jim, used when jim runs from a source tree that was
#: never installed (the entry points of an installed jim name the same classes).
BUILTIN = {
    "generic": "jim.handlers.generic:GenericHandler",
    "montecarlo": "jim.handlers.montecarlo:MonteCarloHandler",
    "reprocessing": "jim.handlers.reprocessing:ReprocessingHandler",
    "concat": "jim.handlers.concat:ConcatHandler",
    "parametric": "jim.handlers.parametric:ParametricHandler",
}


def _load_ref(ref: str):
    module, _, attr = ref.partition(":")
    obj = import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def discover() -> dict[str, object]:
    """name -> handler class, or the exception that prevented loading it."""
    from importlib.metadata import entry_points

    from jim.handlers.base import Handler

    refs: dict[str, object] = dict(BUILTIN)
    for ep in entry_points(group=GROUP):
        refs[ep.name] = ep
    found: dict[str, object] = {}
    for name, ref in refs.items():
        try:
            cls = ref.load() if hasattr(ref, "load") else _load_ref(ref)  # type: ignore[union-attr]
            if not (isinstance(cls, type) and issubclass(cls, Handler)):
                raise TypeError(f"{cls!r} is not a subclass of jim.handlers.base.Handler")
            missing = sorted(getattr(cls, "__abstractmethods__", ()))
            if missing:
                raise TypeError(f"{cls.__name__} does not implement {', '.join(missing)} "
                                f"(see jim.handlers.base)")
            found[name] = cls
        except Exception as e:  # a broken plug-in must not break the others
            found[name] = e
    return found


def get_handler_class(name: str) -> "type[Handler]":
    if name in BUILTIN:  # shipped job types need no entry-point scan (submit stays fast)
        return _load_ref(BUILTIN[name])
    handlers = discover()
    entry = handlers.get(name)
    if entry is None:
        known = ", ".join(sorted(k for k, v in handlers.items() if isinstance(v, type)))
        raise UnknownJobType(f"unknown job type {name!r} (this site has: {known})")
    if isinstance(entry, Exception):
        raise UnknownJobType(f"job type {name!r} is installed but broken: {type(entry).__name__}: {entry}",
                             cause=entry)
    return entry  # type: ignore[return-value]
