"""Which ClassAd and HTCondor bindings jim uses, imported on first use.

jim reads ClassAd text in JDL descriptions (:mod:`jim.jobdesc.jdl`) and job
requirements (:mod:`jim.requirements.expressions`), writes the site's ad
(:mod:`jim.advertise`) and talks to HTCondor's daemons (:mod:`jim.adapters.condor`).
Each asks this module for the bindings, never imports them itself:

* :func:`classad_module`: ``classad2`` (the ``htcondor`` wheel, 24 and newer),
  else the older ``classad`` bindings;
* :func:`htcondor_module`: ``htcondor2``.

Nothing is imported before the first call: importing jim never loads the
bindings (about 20 ms, which ``jim poll`` and every job without a ClassAd
text are spared).  The module found is kept for the process.  When no
binding can be imported, the ImportError of the last one tried is raised.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import import_module
from types import ModuleType

#: The ClassAd bindings, in order of preference.
CLASSAD_BINDINGS = ("classad2", "classad")
#: The HTCondor bindings.
HTCONDOR_BINDINGS = ("htcondor2",)


def _first_importable(names: tuple[str, ...]) -> ModuleType:
    """The first of ``names`` that imports; the last ImportError when none does."""
    for name in names[:-1]:
        try:
            return import_module(name)
        except ImportError:  # pragma: no cover - depends on the installed wheel
            continue
    return import_module(names[-1])


@lru_cache(maxsize=1)
def classad_module() -> ModuleType:
    """``classad2``, else ``classad`` (imported on the first call)."""
    return _first_importable(CLASSAD_BINDINGS)


@lru_cache(maxsize=1)
def htcondor_module() -> ModuleType:
    """``htcondor2`` (imported on the first call)."""
    return _first_importable(HTCONDOR_BINDINGS)
