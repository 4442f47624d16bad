"""The site as one command sees it: built once, passed to every stage.

A :class:`Site` holds what the stages used to rebuild and hand on one by one:
the configuration, this user's jim home, its database, the batch adapter (made
on first use: ``jim poll`` and ``jim status`` never need one) and the failure
policy every aggregation of a grid state applies.  ``jim submit``, the worker,
the monitor, ``jim cancel``/``kill``/``resubmit``, the output gathering and the
web view take one; tests build one around an in-memory adapter
(``Site(config, adapter=fake)``).
"""

from __future__ import annotations

from jim.adapters import get_adapter
from jim.adapters.base import Adapter
from jim.config import Config
from jim.db import Database
from jim.paths import Home
from jim.states import FailurePolicy


class Site:
    """See the module docstring.  ``home``/``db``/``adapter`` default to what ``config`` names."""

    def __init__(
        self, config: Config, *, home: Home | None = None, db: Database | None = None, adapter: Adapter | None = None
    ) -> None:
        self.config = config
        self.home = home if home is not None else db.home if db is not None else Home(config.home)
        self.db = db if db is not None else Database(self.home, config.deadlines.lock)
        self.policy = FailurePolicy(config.site.max_failed_fraction)
        self._adapter = adapter

    @property
    def adapter(self) -> Adapter:
        """The batch adapter ``[batch]`` names, with its options (made once, on first use)."""
        if self._adapter is None:
            self._adapter = get_adapter(self.config, self.home)
        return self._adapter

    def ensure(self) -> Site:
        """This site with its home's directories made (private to the user)."""
        self.home.ensure()
        return self
