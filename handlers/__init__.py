"""Job-type handlers, found through the ``jim.handlers`` entry-point group.

A broken plug-in only breaks its own job type: its load error is kept and
reported when (and only when) that job type is asked for.
"""

from __future__ import annotations

from jim import plugins
from jim.errors import UnknownJobType
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


def discover() -> dict[str, type[Handler] | Exception]:
    """name -> handler class, or the exception that prevented loading it."""
    return plugins.discover(GROUP, BUILTIN, Handler)


def get_handler_class(name: str) -> type[Handler]:
    """The handler of job type ``name``; UnknownJobType when there is none or it is broken."""
    try:
        return plugins.find(name, GROUP, BUILTIN, Handler, "job type")
    except LookupError as e:
        raise UnknownJobType(str(e)) from None
    except RuntimeError as e:
        raise UnknownJobType(str(e), cause=e.__cause__) from None
