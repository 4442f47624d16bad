"""What a site may set for a batch adapter, and what may reach a batch command as a queue name.

:class:`AdapterOptions` is the ``[batch]`` table of the configuration, less
``adapter``; each adapter subclasses it with its own typed fields (one
dataclass per adapter, even when empty), read by :func:`jim.settings.load`
and checked further in :meth:`AdapterOptions.check` when the configuration
loads.  Lists become tuples; tables stay dicts.

A local queue name (the plan's choice, a site's default option) never
reaches a batch command unless :func:`queue_name_problem` finds nothing
wrong with it: it cannot begin with ``-`` and is made of the characters of
real sites' queue, partition and pool names only.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from jim import settings
from jim.errors import ConfigError, InvalidAttribute

O = TypeVar("O", bound="AdapterOptions")  # noqa: E741

#: The longest local queue name jim passes on (Slurm partitions, Grid Engine queues with a host,
#: PBS ``queue@server`` all fit).
QUEUE_NAME_MAX = 128
#: What a local queue name may be made of: letters, digits and ``_ . @ : + -``, not beginning
#: with ``-`` (a batch command would read it as an option).  Slurm partition, Grid Engine queue
#: (``all.q@host``), PBS queue (``workq@server``) and HTCondor names of real sites fit.
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_.@:+][A-Za-z0-9_.@:+-]*")


def queue_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be the name of a local queue, in a few words; None when it can."""
    if not name:
        return "a queue name must not be empty"
    if len(name) > QUEUE_NAME_MAX:
        return f"a queue name must be at most {QUEUE_NAME_MAX} characters, got {len(name)}"
    if name.startswith("-"):
        return f"a queue name must not begin with '-', got {name[:40]!r}"
    if not _QUEUE_NAME.fullmatch(name):
        return f"a queue name is made of letters, digits and _ . @ : + - only, got {name[:40]!r}"
    return None


def check_queue_name(name: str) -> str:
    """``name`` when it can name a local queue (see :func:`queue_name_problem`), else
    :class:`InvalidAttribute` (GRAM error 134) saying why."""
    problem = queue_name_problem(name)
    if problem is not None:
        raise InvalidAttribute(problem)
    return name


@dataclass(frozen=True)
class AdapterOptions:
    """Options of every adapter (see the module docstring)."""

    command_timeout: float = 30.0
    """Seconds a batch command may take."""
    retries: int = 3
    """Attempts of a command whose failure is transient."""
    chunk_size: int = 0
    """Most local jobs submitted in one worker step (0: the adapter's own limit)."""
    cache_interval: float = 0.0
    """Seconds one status answer is shared by every jim process of the user (0: not shared)."""

    #: Options that name a local queue: checked like every queue name (see :func:`queue_name_problem`).
    queue_options: ClassVar[tuple[str, ...]] = ("queue", "partition")

    @classmethod
    def from_table(cls: type[O], table: Mapping[str, Any], *, adapter: str) -> O:
        """Options from the ``[batch]`` table (``adapter`` names the adapter in messages)."""
        options = settings.load(cls, table, f"[batch] (adapter {adapter})")
        options.check()
        return options

    def check(self) -> None:
        """Further checks of the values (raise :class:`ConfigError`); see subclasses."""
        if self.command_timeout <= 0:
            raise ConfigError("[batch] command_timeout must be positive")
        for key in self.queue_options:
            value = getattr(self, key, "")
            problem = queue_name_problem(value) if isinstance(value, str) and value else None
            if problem is not None:
                raise ConfigError(f"[batch] {key}: {problem}")

    def describe(self) -> str:
        """The options that differ from their defaults, for people (``jim doctor``)."""

        def default(f: dataclasses.Field[Any]) -> Any:
            return f.default_factory() if callable(f.default_factory) else f.default

        changed = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != default(f)
        }
        return " ".join(f"{k}={v!r}" for k, v in changed.items())
