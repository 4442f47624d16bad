"""One way a TOML table becomes typed settings (:mod:`jim.settings`), the same for every table."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from jim import settings
from jim.adapters.slurm import SlurmOptions
from jim.config import MonitorConfig, parse
from jim.errors import ConfigError
from jim.handlers.montecarlo import MonteCarloHandler, MonteCarloOptions


@dataclass(frozen=True)
class Sample:
    flag: bool = False
    count: int = 1
    seconds: float = 1.0
    name: str = ""
    words: tuple[str, ...] = ()
    codes: tuple[int, ...] = ()
    table: dict[str, Any] = field(default_factory=dict)
    maybe: int | None = None


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({}, Sample()),
        ({"flag": True, "count": 3, "seconds": 2}, Sample(flag=True, count=3, seconds=2.0)),
        ({"words": ["-l", "mem=1gb"], "codes": [3, 7]}, Sample(words=("-l", "mem=1gb"), codes=(3, 7))),
        ({"table": {"a": 1}, "maybe": 5}, Sample(table={"a": 1}, maybe=5)),
    ],
)
def test_values_become_typed(table, expected):
    got = settings.load(Sample, table, "[sample]")
    assert got == expected and type(got.seconds) is float


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"colour": 1},
            "[sample]: unknown key 'colour' (known: codes, count, flag, maybe, name, seconds, table, words)",
        ),
        ({"a": 1, "b": 2}, "[sample]: unknown keys 'a', 'b'"),
        ({"flag": 1}, "[sample].flag: expected true or false, got 1"),
        ({"count": True}, "[sample].count: expected a whole number, got True"),
        ({"count": 1.5}, "[sample].count: expected a whole number, got 1.5"),
        ({"seconds": "5"}, "[sample].seconds: expected a number, got '5'"),
        ({"count": -1}, "[sample].count: must not be negative, got -1"),
        ({"seconds": -0.5}, "[sample].seconds: must not be negative, got -0.5"),
        ({"words": "-l mem=1gb"}, "[sample].words: expected a list of strings (arguments, not shell text)"),
        ({"words": ["-l", 3]}, "[sample].words[1]: expected a string, got 3"),
        ({"codes": [3, -1]}, "[sample].codes[1]: must not be negative"),
        ({"table": 3}, "[sample].table must be a table, got 3"),
        ({"maybe": "x"}, "[sample].maybe: expected a whole number"),
    ],
)
def test_the_same_refusals_for_every_table(table, message):
    with pytest.raises(ConfigError) as e:
        settings.load(Sample, table, "[sample]")
    assert message in e.value.message


def test_config_sections_adapter_options_and_job_type_options_read_the_same_way():
    """A negative, a string for a number, an integer for a float: the same answer in all three."""
    for bad in ({"monitor": {"interval": -2}}, {"batch": {"adapter": "slurm", "command_timeout": -2}}):
        with pytest.raises(ConfigError, match="must not be negative"):
            parse(bad, env={"JIM_HOME": "/tmp/x"})
    with pytest.raises(ConfigError, match="must not be negative"):
        MonteCarloHandler(parse({}, env={"JIM_HOME": "/tmp/x"}).site, {"safety": -1})
    assert parse({"monitor": {"interval": 5}}, env={"JIM_HOME": "/tmp/x"}).monitor == MonitorConfig(interval=5.0)
    assert SlurmOptions.from_table({"command_timeout": 5}, adapter="slurm").command_timeout == 5.0
    assert settings.load(MonteCarloOptions, {"safety": 1}, "[handlers.montecarlo]").safety == 1.0


def test_loading_the_configuration_imports_neither_lxml_nor_the_command_machinery():
    """``jim poll`` without ``$JIM_HOME`` loads the configuration: it must stay light."""
    code = (
        "import sys, jim.config; jim.config.load(); "
        "print(sorted(m for m in ('lxml', 'tenacity', 'subprocess', 'jinja2') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
