"""Batch-system adapters ("idealizers"): fork, slurm, sge, pbs, condor.

``get_adapter(config, home)`` returns the adapter named by ``[batch] adapter``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from jim.errors import ConfigError

if TYPE_CHECKING:
    from jim.adapters.base import Adapter
    from jim.config import Config
    from jim.paths import Home

ADAPTERS = {
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


def adapter_class(name: str) -> "type[Adapter]":
    ref = ADAPTERS.get(name)
    if ref is None:
        raise ConfigError(f"unknown batch adapter {name!r} (known: {', '.join(sorted(ADAPTERS))})")
    module, _, cls = ref.partition(":")
    try:
        return getattr(import_module(module), cls)
    except ImportError as e:
        raise ConfigError(f"batch adapter {name!r} is not available: {e}") from e


def get_adapter(config: "Config", home: "Home") -> "Adapter":
    cls = adapter_class(config.batch.adapter)
    return cls(home, config.batch.options)
