"""The job scripts of the command adapters (``slurm.sh``, ``sge.sh``, ``pbs.sh``), and the one way one is
made: rendered with every value quoted for the shell, written into the grid job's ``batch/`` directory."""

from __future__ import annotations

import shlex
import string
from importlib import resources
from pathlib import Path
from typing import Any

from jim.errors import ConfigError
from jim.safeio import atomic_write


def render(template: str, **values: Any) -> str:
    """A job script from ``templates/<template>``, every value quoted for the shell."""
    text = resources.files(__name__).joinpath(template).read_text()
    try:
        return string.Template(text).substitute({k: shlex.quote(str(v)) for k, v in values.items()})
    except KeyError as e:
        raise ConfigError(f"job script template {template} needs a value for {e.args[0]}") from None
    except ValueError as e:
        raise ConfigError(f"job script template {template} is malformed: {e}") from None


def write(job_dir: Path, name: str, text: str) -> Path:
    """Write a job script into the grid job's ``batch/`` directory (atomically, 0700)."""
    d = job_dir / "batch"
    d.mkdir(mode=0o700, exist_ok=True)
    path = d / name
    atomic_write(path, text, mode=0o700, sync=False)
    return path
