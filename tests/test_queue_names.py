"""Queue names: one rule (adapters/base.py), used by every adapter and at submit.

A queue name is non-empty, at most QUEUE_NAME_MAX characters, made of letters,
digits and ``_ . @ : + -``, and does not begin with ``-``: a GRAM ``queue`` such
as ``-V`` or ``-l h_rt=0`` never reaches a batch command line as an option.
``jim submit`` refuses such a queue with GRAM error 134 and records nothing;
an adapter handed one anyway (a plan written before, a config) refuses to build
the command; a config option naming one is a configuration error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jim.adapters.model import LocalJobSpec, SubmitChunk
from jim.adapters.options import QUEUE_NAME_MAX, queue_name_problem
from jim.adapters.pbs import PbsAdapter
from jim.adapters.sge import SgeAdapter
from jim.adapters.slurm import SlurmAdapter
from jim.errors import ConfigError, SubmitError
from jim.paths import Home

from support.jimcli import processes_of, write_config

GOOD = ["long", "all.q", "all.q@node-1.example.org", "workq@pbs.example.org", "gpu_a100", "q+1", "cms:prod", "a-b"]
BAD = [
    "",
    "-V",
    "-l h_rt=0",
    "--partition=x",
    "-",
    "a b",
    "a,b",
    "a;b",
    "a\nb",
    "$(id)",
    "q*",
    "qé",
    "x" * (QUEUE_NAME_MAX + 1),
]
G = "20261125-120000-abcdef01"


@pytest.mark.parametrize("name", GOOD)
def test_queue_names_of_real_sites_pass(name):
    assert queue_name_problem(name) is None


@pytest.mark.parametrize("name", BAD)
def test_option_looking_and_odd_queue_names_are_refused(name):
    problem = queue_name_problem(name)
    assert problem and "\n" not in problem


def chunk(queue, job_dir=Path("/var/lib/jim/u/jobs") / G):
    return SubmitChunk(
        G,
        [LocalJobSpec(0, f"{G}.0")],
        job_dir=job_dir,
        wrapper=job_dir / "wrapper.py",
        sandbox=job_dir / "sandbox.tar.gz",
        outroot=job_dir / "local",
        queue=queue,
    )


def adapters(tmp_path):
    home = Home(tmp_path / "home").ensure()
    return [
        SgeAdapter(home, {"python": "/usr/bin/python3"}),
        PbsAdapter(home, {"flavour": "torque", "python": "/usr/bin/python3"}),
        PbsAdapter(home, {"flavour": "pbspro", "python": "/usr/bin/python3"}),
        SlurmAdapter(home, {"python": "/usr/bin/python3", "max_array_size": 1001}),
    ]


@pytest.mark.parametrize("queue", ["-V", "-l", "--help", "-q x", "a b"])
def test_adapters_never_emit_an_option_looking_queue(tmp_path, queue):
    for a in adapters(tmp_path):
        with pytest.raises(SubmitError) as e:
            a.submit_argv(chunk(queue), [0], Path("/x/s.sh"))
        assert not e.value.transient and "queue" in e.value.message, a.name


def test_adapters_pass_a_good_queue_as_one_value(tmp_path):
    for a in adapters(tmp_path):
        argv = a.submit_argv(chunk("all.q@node1"), [0], Path("/x/s.sh"))
        if a.name == "slurm":
            assert "--partition=all.q@node1" in argv
        else:
            k = argv.index("-q")
            assert argv[k + 1] == "all.q@node1"


@pytest.mark.parametrize("cls, key", [(SgeAdapter, "queue"), (PbsAdapter, "queue"), (SlurmAdapter, "partition")])
def test_config_option_naming_a_bad_queue_is_a_config_error(tmp_path, cls, key):
    with pytest.raises(ConfigError) as e:
        cls(Home(tmp_path / "home").ensure(), {key: "-V"})
    assert key in e.value.message


@pytest.mark.parametrize("queue", ["-V", "-l h_rt=0", "a;b"])
@pytest.mark.parametrize("resources", [False, True])
def test_submit_refuses_a_bad_gram_queue_with_134_and_records_nothing(jim_env, queue, resources):
    if resources:  # the site describes queues: the GRAM queue is matched against them
        write_config(jim_env, "[resources.ce.localhost.queue.long]\nWallTimeLimit = 3600\n")
    proc = jim_env.run("submit", "--rsl", f'&(executable=/bin/true)(queue="{queue}")')
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and lines[0] == "ERROR=134", (proc.stdout, proc.stderr)
    assert lines[1].startswith("MESSAGE=") and "queue name" in lines[1]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.returncode == 1
    db = jim_env.home / "db"
    assert not (db.exists() and list(db.glob("*.xml")))
    jobs = jim_env.home / "jobs"
    assert not (jobs.exists() and any(jobs.iterdir()))
    assert not processes_of(jim_env.home)
