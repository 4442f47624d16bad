"""Batch-system adapters ("idealizers"): fork, slurm, sge, pbs, condor, and a site's own.

``[batch] adapter = NAME`` picks one; the other keys of ``[batch]`` are its
options, checked when the configuration loads (:func:`options_for`).  A site
adds an adapter by installing a package with a subclass of
:class:`jim.adapters.base.Adapter` and an entry point in the group
``jim.adapters`` (see :mod:`jim.plugins`: a broken plug-in only breaks its own name).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jim import plugins
from jim.adapters.base import Adapter
from jim.adapters.options import AdapterOptions
from jim.errors import ConfigError

if TYPE_CHECKING:
    from jim.config import Config
    from jim.paths import Home

GROUP = "jim.adapters"

#: jim's own adapters, and the names admins also type for them.
BUILTIN = {
    "fork": "jim.adapters.fork:ForkAdapter",
    "slurm": "jim.adapters.slurm:SlurmAdapter",
    "sge": "jim.adapters.sge:SgeAdapter",
    "gridengine": "jim.adapters.sge:SgeAdapter",
    "pbs": "jim.adapters.pbs:PbsAdapter",
    "torque": "jim.adapters.pbs:PbsAdapter",
    "pbspro": "jim.adapters.pbs:PbsAdapter",
    "condor": "jim.adapters.condor:CondorAdapter",
    "htcondor": "jim.adapters.condor:CondorAdapter",
}


def adapter_class(name: str) -> type[Adapter]:
    """The adapter called ``name``; ConfigError when there is none or it is broken."""
    try:
        return plugins.find(name, GROUP, BUILTIN, Adapter, "batch adapter")
    except (LookupError, RuntimeError) as e:
        raise ConfigError(f"[batch] {e}") from e
    except (ImportError, TypeError) as e:
        raise ConfigError(f"[batch] batch adapter {name!r} is not available: {e}") from e


def options_for(name: str, table: Mapping[str, Any]) -> AdapterOptions:
    """The typed options of adapter ``name`` from the rest of the ``[batch]`` table."""
    return adapter_class(name).Options.from_table(table, adapter=name)


def get_adapter(config: Config, home: Home) -> Adapter:
    """The adapter the configuration names, with its options."""
    return adapter_class(config.batch.adapter)(home, config.batch.options)
