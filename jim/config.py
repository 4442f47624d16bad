"""Site configuration: one TOML file loaded into typed dataclasses.

Where the file is (first that applies):

1. ``$JIM_CONFIG`` (it must exist);
2. ``/etc/jim/jim.toml`` if it exists;
3. nothing: built-in defaults that run every grid job on the fork backend.

Where jim keeps its data: ``$JIM_HOME``, else ``home`` in the ``[jim]`` table,
else ``~/.jim``.  The database and the sandboxes are private to their user.

Example (every key optional)::

    [jim]
    home = "/var/lib/jim/$USER"       # $USER and ~ are expanded

    [site]
    name = "MY.SITE"
    recommended_cpu_per_job = 14400   # seconds of CPU a local job should take
    max_cpu_per_job = 172800          # seconds a local job may never exceed
    max_local_jobs = 10000            # local jobs one grid job may become
    default_events_per_job = 250      # when the user gives no CPU-per-event hint
    max_failed_fraction = 0.0         # failed local jobs tolerated, as a fraction
    max_input_bytes = 268435456       # a grid job's inputfiles together (256 MiB)
    drain_file = "/etc/jim/drain"     # root's flag file: while it is there, new grid jobs are refused

    [batch]
    adapter = "fork"                  # fork | slurm | sge | pbs | condor
    # ... the other keys are the adapter's own options

    [monitor]
    interval = 2.0                    # seconds between status refreshes
    lost_grace = 60.0                 # absent with no evidence this long -> LOST
    idle_exit = 30.0                  # the monitor exits after this long with nothing active

    [retry]                           # local jobs that ended through no fault of their own
    max_attempts = 3                  # attempts in all (1: never retried)
    cool_off = 60.0                   # seconds before the 2nd attempt, then x cool_off_factor
    cool_off_factor = 2.0
    max_cool_off = 3600.0
    exit_codes = []                   # exit codes worth another attempt (none by default)

    [deadlines]
    cancel_grace = 5.0                # wait for wrappers to flush after a kill
    lock = 10.0                       # wait this long for a record's lock

    [accounting]                      # APEL blah records (docs/accounting.md)
    blah_log_dir = ""                 # "" = none written
    ce_id = ""                        # the CE as APEL names it; {queue}: the local job's queue

    [retention]                       # finished grid jobs (docs/housekeeping.md); "forever": kept
    work_area = "7d"                  # jobs/<id>/ but the output tar; units s m h d w
    output_tar = "30d"                # jobs/<id>/<id>.tar.gz
    record = "90d"                    # the record: the grid job is forgotten, whatever is left with it

    [caps]                            # local jobs in the batch system at once (docs/caps.md); 0 = no cap
    max_local_jobs_per_user = 0       # of one user (one jim home)
    max_local_jobs_site = 0           # of every user together, counted through shared_dir
    shared_dir = "/var/lib/jim/caps"  # root makes it, mode 1777; each user's jim keeps its count there
    [caps.queues]                     # optional: of one user in one queue
    long = 20

    [handlers.montecarlo]             # per-handler options
    balanced = true

Nothing here is read at import time; :func:`load` is called once per command
and the result passed on explicitly.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jim import durations, settings
from jim.adapters import options_for
from jim.adapters.options import AdapterOptions, queue_name_problem
from jim.drain import DEFAULT_FILE as DEFAULT_DRAIN_FILE
from jim.errors import ConfigError
from jim.log import setup
from jim.ownership import home_problem

DEFAULT_CONFIG_PATH = Path("/etc/jim/jim.toml")


@dataclass(frozen=True)
class SiteLimits:
    """The site's limits on how a grid job is split."""

    name: str = "jim.local"
    recommended_cpu_per_job: float = 4 * 3600.0
    max_cpu_per_job: float = 48 * 3600.0
    max_local_jobs: int = 10000
    default_events_per_job: int = 250
    max_failed_fraction: float = 0.0
    max_input_bytes: int = 256 * 1024 * 1024
    """The most bytes a grid job's ``inputfiles`` may come to, together (checked at submit; the
    sandbox copies no more)."""
    max_cores_per_job: int = 0
    """The most cores one local job may have where no queue of ``[resources]`` says
    (``NumberOfProcessors``, ``CoresPerNode``); 0: unchecked, and jim never widens a job itself."""
    core_efficiency: float = 1.0
    """The share of its cores a multi-core payload keeps busy: a local job of c > 1 cores runs
    ``CPU / (c x core_efficiency)`` wall seconds (docs/resources.md)."""
    drain_file: str = DEFAULT_DRAIN_FILE
    """Root's flag file: while it is there, new grid jobs are refused (``jim drain``, jim/drain.py)."""

    def __post_init__(self) -> None:
        if self.max_local_jobs < 1:
            raise ConfigError("[site].max_local_jobs must be at least 1")
        if self.max_cpu_per_job < self.recommended_cpu_per_job:
            raise ConfigError("[site].max_cpu_per_job is smaller than recommended_cpu_per_job")
        if not 0.0 <= self.max_failed_fraction <= 1.0:
            raise ConfigError("[site].max_failed_fraction must be between 0 and 1")
        if not 0.0 < self.core_efficiency <= 1.0:
            raise ConfigError("[site].core_efficiency must be in (0, 1]")
        if not os.path.isabs(self.drain_file):
            raise ConfigError("[site].drain_file must be an absolute path")


@dataclass(frozen=True)
class BatchConfig:
    """Which adapter, and its typed options (None: the adapter's defaults)."""

    adapter: str = "fork"
    options: AdapterOptions | None = None

    def describe_options(self) -> str:
        return self.options.describe() if self.options is not None else ""


@dataclass(frozen=True)
class MonitorConfig:
    interval: float = 2.0
    lost_grace: float = 60.0
    idle_exit: float = 30.0
    held_timeout: float = 86400.0
    """A local job held or suspended this long is cancelled, with the reason recorded."""
    accounting_slack: float = 300.0
    """Accounting records submitted this long before jim's own submission are someone else's."""


@dataclass(frozen=True)
class RetryConfig:
    """``[retry]``: when a local job that ended through no fault of its own runs again (see jim.retry)."""

    max_attempts: int = 3
    """Attempts a local job gets in all, the first included (1: never retried)."""
    cool_off: float = 60.0
    """Seconds before the second attempt is submitted."""
    cool_off_factor: float = 2.0
    """Each later attempt waits this many times longer than the one before."""
    max_cool_off: float = 3600.0
    """The longest wait before an attempt."""
    exit_codes: tuple[int, ...] = ()
    """Exit codes of a local job that ran to its end that are worth another attempt (none by
    default: a job's own failure is not retried; a job type may name its own, see Handler)."""

    def __post_init__(self) -> None:
        if not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 255 for c in self.exit_codes):
            raise ConfigError(f"[retry].exit_codes: expected a list of exit codes 1-255, got {list(self.exit_codes)!r}")
        object.__setattr__(self, "exit_codes", tuple(sorted(set(self.exit_codes))))
        if self.max_attempts < 1:
            raise ConfigError("[retry].max_attempts must be at least 1 (1: never retried)")
        if self.cool_off_factor < 1.0:
            raise ConfigError("[retry].cool_off_factor must be at least 1")


@dataclass(frozen=True)
class Deadlines:
    cancel_grace: float = 5.0
    """Seconds the wrappers get to write their exit-code files after a cancel."""
    lock: float = 10.0
    """Seconds to wait for a record's lock."""


@dataclass(frozen=True)
class AdvertiseConfig:
    """``jim advertise``: where the site's ClassAd goes (see jim.advertise)."""

    collector: str = ""
    """host[:port] of the HTCondor collector; "" = only print the ad."""
    name: str = ""
    """the ad's Name; "" = the site's name."""
    contact: str = ""
    """the contact string grid jobs are submitted to (e.g. the gatekeeper's), put in the ad."""


@dataclass(frozen=True)
class AccountingConfig:
    """``[accounting]``: APEL blah records (see jim.apel and docs/accounting.md)."""

    blah_log_dir: str = ""
    """The directory of the daily blah files apelparser reads; "" = none written."""
    blah_log_prefix: str = "blahp.log"
    """Their names: ``<prefix>-YYYYMMDD`` (APEL's ``[blah] filename_prefix``)."""
    ce_id: str = ""
    """The CE as the APEL client's SpecRecords name it; ``{queue}`` is the local job's queue."""

    def __post_init__(self) -> None:
        if self.blah_log_dir and not self.ce_id:
            raise ConfigError("[accounting].ce_id must be set with blah_log_dir (the CE APEL's records name)")
        if not self.blah_log_prefix or "/" in self.blah_log_prefix or self.blah_log_prefix.startswith("."):
            raise ConfigError("[accounting].blah_log_prefix must be a file name (no '/', not starting with '.')")


@dataclass(frozen=True)
class CredentialsConfig:
    """``[credentials]``: the grid job's credential in its local jobs (see jim.credentials, docs/credentials.md)."""

    margin: float = 300.0
    """Seconds of validity a local job's credential must have left at the local job's expected end."""
    wait_for_refresh: float = 3600.0
    """Seconds a local job waits for a refreshed credential before it fails with the reason."""
    size_to_lifetime: bool = True
    """Whether the splitter counts the credential's remaining lifetime among a local job's time limits."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.margin <= 7 * 86400.0:
            raise ConfigError("[credentials].margin must be between 0 and 604800 seconds")
        if not 0.0 <= self.wait_for_refresh <= 30 * 86400.0:
            raise ConfigError("[credentials].wait_for_refresh must be between 0 and 2592000 seconds")


@dataclass(frozen=True)
class RetentionConfig:
    """``[retention]``: how long a finished grid job keeps its parts (see jim.purge, docs/housekeeping.md).

    Each is a length (:mod:`jim.durations`: ``7d``, ``12h``) counted from the grid job's end, or
    ``forever`` (not removed on its own).  The record is the grid job itself: when it goes, the work
    area and the tar go with it, so a part set to outlive the record is refused."""

    work_area: str = "7d"
    """``jobs/<id>/`` but the output tar: sandbox, local jobs' files, jim's log of the grid job."""
    output_tar: str = "30d"
    """``jobs/<id>/<id>.tar.gz`` (a tar the description put elsewhere is the user's: never removed)."""
    record: str = "90d"
    """``db/<id>.xml``, its poll summary and index line: the grid job is forgotten."""

    def __post_init__(self) -> None:
        record = self.seconds("record")
        for name in ("work_area", "output_tar"):
            part = self.seconds(name)
            if record is not None and part is not None and part > record:
                raise ConfigError(
                    f"[retention].record ({self.record}) is shorter than {name} ({getattr(self, name)}): "
                    f"a forgotten grid job takes its {name.replace('_', ' ')} with it"
                )

    def seconds(self, name: str) -> float | None:
        """The setting ``name`` in seconds; None: kept for ever."""
        return durations.parse(getattr(self, name), f"[retention].{name}", forever_ok=True)


#: The largest cap jim accepts (more is no cap at all: say 0).
MAX_CAP = 10_000_000


@dataclass(frozen=True)
class CapsConfig:
    """``[caps]``: how many local jobs may be in the batch system at once (see jim.caps, docs/caps.md).
    0 is no cap; a local job over a cap waits in jim (PLANNED, with the reason) and never fails for it."""

    max_local_jobs_per_user: int = 0
    """Local jobs of one user (one jim home) in the batch system at once."""
    max_local_jobs_site: int = 0
    """Local jobs of every user together in the batch system at once (counted through ``shared_dir``)."""
    shared_dir: str = "/var/lib/jim/caps"
    """Where each user's jim keeps its count for the site-wide cap: a directory root makes, mode 1777."""
    queues: dict[str, Any] = field(default_factory=dict)
    """Queue name -> local jobs of one user in that queue at once (``[caps.queues]``)."""

    def __post_init__(self) -> None:
        for name in ("max_local_jobs_per_user", "max_local_jobs_site"):
            if getattr(self, name) > MAX_CAP:
                raise ConfigError(f"[caps].{name} must be at most {MAX_CAP} (0: no cap)")
        if self.max_local_jobs_site and not os.path.isabs(self.shared_dir):
            raise ConfigError(f"[caps].shared_dir must be an absolute path, got {self.shared_dir[:100]!r}")
        for queue, cap in self.queues.items():
            why = queue_name_problem(queue)
            if why is not None:
                raise ConfigError(f"[caps.queues]: {why}")
            if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_CAP:
                raise ConfigError(
                    f"[caps.queues].{queue}: expected a whole number from 1 to {MAX_CAP} (leave the queue out "
                    f"for no cap), got {cap!r}"
                )

    @property
    def on(self) -> bool:
        """Whether any cap is set."""
        return bool(self.max_local_jobs_per_user or self.max_local_jobs_site or self.queues)


@dataclass(frozen=True)
class JimTable:
    """``[jim]``: where this user's jim keeps its data ($JIM_HOME wins)."""

    home: str = ""


@dataclass(frozen=True)
class Config:
    home: Path
    site: SiteLimits = SiteLimits()
    batch: BatchConfig = BatchConfig()
    monitor: MonitorConfig = MonitorConfig()
    deadlines: Deadlines = Deadlines()
    retry: RetryConfig = RetryConfig()
    handlers: dict[str, dict[str, Any]] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    advertise: AdvertiseConfig = AdvertiseConfig()
    accounting: AccountingConfig = AccountingConfig()
    credentials: CredentialsConfig = CredentialsConfig()
    retention: RetentionConfig = RetentionConfig()
    caps: CapsConfig = CapsConfig()
    home_pattern: str = ""
    """``[jim] home`` as written (``$USER``, ``~`` unexpanded): every account's home, for root's
    commands over all of them (``jim purge --all-users``); "" = ``~/.jim``."""
    source: str = "built-in defaults"

    def handler_options(self, name: str) -> dict[str, Any]:
        return dict(self.handlers.get(name, {}))


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _expand(path: str) -> Path:
    return Path(os.path.expanduser(path.replace("$USER", _user())))


def parse(data: dict[str, Any], *, source: str = "<dict>", env: Mapping[str, str] | None = None) -> Config:
    """A Config from an already-parsed TOML document."""
    env = os.environ if env is None else env
    data = dict(data)
    allowed = {
        "jim",
        "site",
        "batch",
        "monitor",
        "deadlines",
        "retry",
        "handlers",
        "resources",
        "advertise",
        "accounting",
        "credentials",
        "retention",
        "caps",
    }
    unknown = set(data) - allowed
    if unknown:
        raise ConfigError(f"{source}: unknown table(s) {', '.join(sorted(unknown))}")
    home_value = settings.load(JimTable, data.get("jim", {}), "[jim]").home
    if env.get("JIM_HOME"):
        home = _expand(env["JIM_HOME"])
    elif home_value:
        home = _expand(str(home_value))
    else:
        home = _expand("~/.jim")
    batch_table = dict(data.get("batch", {}))
    adapter = batch_table.pop("adapter", "fork")
    if not isinstance(adapter, str):
        raise ConfigError(f"{source}: [batch] adapter must be a name, got {adapter!r}")
    batch = BatchConfig(adapter=adapter, options=options_for(adapter, batch_table))
    handlers = data.get("handlers", {})
    if not isinstance(handlers, dict) or not all(isinstance(v, dict) for v in handlers.values()):
        raise ConfigError("[handlers] must hold one table per job type, e.g. [handlers.montecarlo]")
    return Config(
        home=home,
        site=settings.load(SiteLimits, data.get("site", {}), "[site]"),
        batch=batch,
        monitor=settings.load(MonitorConfig, data.get("monitor", {}), "[monitor]"),
        deadlines=settings.load(Deadlines, data.get("deadlines", {}), "[deadlines]"),
        retry=settings.load(RetryConfig, data.get("retry", {}), "[retry]"),
        handlers={k: dict(v) for k, v in handlers.items()},
        resources=dict(data.get("resources", {})),
        advertise=settings.load(AdvertiseConfig, data.get("advertise", {}), "[advertise]"),
        accounting=settings.load(AccountingConfig, data.get("accounting", {}), "[accounting]"),
        credentials=settings.load(CredentialsConfig, data.get("credentials", {}), "[credentials]"),
        retention=settings.load(RetentionConfig, data.get("retention", {}), "[retention]"),
        caps=settings.load(CapsConfig, data.get("caps", {}), "[caps]"),
        home_pattern=str(home_value),
        source=source,
    )


def config_path(env: Mapping[str, str] | None = None) -> Path | None:
    env = os.environ if env is None else env
    if env.get("JIM_CONFIG"):
        return Path(env["JIM_CONFIG"])
    if DEFAULT_CONFIG_PATH.exists():
        return DEFAULT_CONFIG_PATH
    return None


def load(env: Mapping[str, str] | None = None) -> Config:
    """Load the configuration for this process (see the module docstring)."""
    path = config_path(env)
    if path is None:
        return parse({}, env=env)
    import tomllib  # (lazy: a few ms; a site without a config file never needs it)

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError as e:
        raise ConfigError(f"config file {path} does not exist (from JIM_CONFIG)", cause=e) from e
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"config file {path}: {e}", cause=e) from e
    return parse(data, source=str(path), env=env)


def load_for_step() -> Config:
    """This account's configuration for a gatekeeper's step (ARC's, BLAH's): its home checked usable
    (a :class:`ConfigError` saying why not), and jim's log set up there."""
    config = load()
    why = home_problem(config.home)
    if why:
        raise ConfigError(why)
    setup(config.home)
    return config
