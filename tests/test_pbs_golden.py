"""Golden tests of the PBS adapter: rendered job script and qsub argv per flavour, and the
parsers on real outputs of Slurm's torque wrappers (tests/data/pbs, recorded by
tests/services/pbs/record-outputs.sh), plus Torque and PBS Pro samples written by hand from
their documented qstat -f format (tests/data/pbs/*-qstat-f-t.txt: no such system here).

No batch system needed: the submit/cancel paths run against small stand-in commands.
If a change to a rendering is intended: ``JIM_ACCEPT_GOLDEN=1 pytest tests/test_pbs_golden.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jim.adapters.model import Limits, LocalJobSpec, SubmitChunk
from jim.adapters.pbs import (
    ENDED,
    FLAVOURS,
    PbsAdapter,
    PbsOptions,
    jim_records,
    parse_full,
    parse_qstat,
    parse_qsub,
    short_id,
    walltime,
)
from jim.errors import CancelError, ConfigError, SubmitError
from jim.jobdesc import parse_rsl
from jim.paths import Home
from jim.states import Evidence, LocalState

from support.golden import golden

DATA = Path(__file__).parent / "data" / "pbs"
SLURM, TORQUE, PBSPRO = FLAVOURS["slurm"], FLAVOURS["torque"], FLAVOURS["pbspro"]
G = "20261122-070000-abcdef01"


def recorded(name: str, ext: str = "out") -> str:
    return (DATA / f"{name}.{ext}").read_text()


def jobs() -> dict:
    return json.loads((DATA / "jobs.json").read_text())


def rec_tag(text: str) -> str:
    """The recorded jobs are named jim.rec-<role>.0; make the grid id look like jim's."""
    return text.replace("jim.rec-", f"jim.{G}-")


def chunk(indices, queue="long", wall=7200, job_dir=Path("/var/lib/jim/u/jobs") / G):
    return SubmitChunk(
        G,
        [LocalJobSpec(k, f"{G}.{k}") for k in indices],
        job_dir=job_dir,
        wrapper=job_dir / "wrapper.py",
        sandbox=job_dir / "sandbox.tar.gz",
        outroot=job_dir / "local",
        queue=queue,
        limits=Limits(wall_seconds=wall),
    )


def adapter(tmp_path, flavour, **opts) -> PbsAdapter:
    return PbsAdapter(
        Home(tmp_path / "home").ensure(),
        {
            "flavour": flavour,
            "python": "/usr/bin/python3",
            "account": "d0",
            "qsub_options": ["-l", "mem=100mb"],
            **opts,
        },
    )


# -- renderings ----------------------------------------------------------------------------
@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_rendered_scripts_and_qsub_argv(tmp_path, flavour):
    a = adapter(tmp_path, flavour)
    c = chunk([3, 4, 5, 9])
    fl = FLAVOURS[flavour]
    single = a.render_script(c, 9, array=False)
    golden(f"pbs-{flavour}-single.sh", single)
    argv = a.qsub_argv(c, f"jim.{G}.9", "/x/pbs-9.sh", "/x/pbs-9.out")
    golden(f"pbs-{flavour}-qsub-single.json", json.dumps(argv, indent=1) + "\n")
    if a.is_array([9]):  # Torque: one local job is an array of one task all the same
        assert f"--index-env {fl.task_env} --index-offset 9" in a.script(c, [9])
    else:  # what the base's submit_group runs for one local job: the same
        assert a.script(c, [9]) == single and a.submit_argv(c, [9], Path("/x/pbs-9.sh")) == argv
    if fl.array_option:
        arr = a.script(c, [3, 4, 5])
        golden(f"pbs-{flavour}-array.sh", arr)
        argv = a.qsub_argv(c, f"jim.{G}.3", "/x/pbs-3.sh", "/x/pbs-3.out", array="0-2")
        golden(f"pbs-{flavour}-qsub-array.json", json.dumps(argv, indent=1) + "\n")
        assert argv[argv.index(fl.array_option) + 1] == "0-2"
        # the submit path names the array by its first local job and adds the flavour's output pattern
        out = fl.array_output.format(path="/x/pbs-3.out")
        assert a.submit_argv(c, [3, 4, 5], Path("/x/pbs-3.sh")) == a.qsub_argv(
            c, f"jim.{G}.3", "/x/pbs-3.sh", out, array="0-2"
        )
    assert "-q" in argv and argv[argv.index("-q") + 1] == "long"
    assert "walltime=02:00:00" in argv and argv[-3:] == ["-l", "mem=100mb", argv[-1]]
    assert argv[argv.index("-r") + 1] == "n"


#: GRAM's resource attributes, in GRAM's units (MB, minutes), as a grid job gives them.
GRAM_RESOURCES = "&(executable=/bin/true)(maxwalltime=120)(maxmemory=2048)(maxcputime=90)(project=d0)"


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_gram_resources_reach_qsub(tmp_path, flavour):
    """As the stock GRAM pbs module, per local job: maxcputime becomes -l cput, maxmemory -l mem (MB),
    project -A (over the site's default account); the site's qsub_options still come last."""
    a = adapter(tmp_path, flavour, account="cms")
    c = chunk([3])
    c.limits = Limits.of(parse_rsl(GRAM_RESOURCES).resource_limits())
    argv = a.qsub_argv(c, f"jim.{G}.3", "/x/pbs-3.sh", "/x/pbs-3.out")
    golden(f"pbs-{flavour}-qsub-resources.json", json.dumps(argv, indent=1) + "\n")
    # (one -l each; the Slurm wrappers' qsub keeps only its last -l: theirs in one list)
    resources = [r for i, a in enumerate(argv[:-3]) if a == "-l" for r in argv[i + 1].split(",")]
    assert {"cput=01:30:00", "mem=2048mb", "walltime=02:00:00"} <= set(resources)
    assert argv[argv.index("-A") + 1] == "d0" and "cms" not in argv
    assert argv[-3:] == ["-l", "mem=100mb", "/x/pbs-3.sh"]


def test_slurm_wrappers_get_shell_quoted_arguments(tmp_path):
    """Their qsub pastes its arguments into a shell command unquoted (qsub-sbatchline.out):
    jim quotes them; for Torque and PBS Pro (no shell) it must not."""
    assert "-o WORKDIR/a b/out" in recorded("qsub-sbatchline")
    c = chunk([0], job_dir=Path("/home/a b/jim/jobs") / G)
    argv = adapter(tmp_path, "slurm").qsub_argv(c, "n", str(c.job_dir / "s.sh"), str(c.job_dir / "o.out"))
    assert f"'/home/a b/jim/jobs/{G}/o.out'" in argv and argv[0] == "qsub"
    argv = adapter(tmp_path, "torque").qsub_argv(c, "n", str(c.job_dir / "s.sh"), str(c.job_dir / "o.out"))
    assert f"/home/a b/jim/jobs/{G}/o.out" in argv


def test_script_quotes_hostile_paths(tmp_path):
    text = adapter(tmp_path, "slurm").render(
        "pbs.sh",
        grid_id="g",
        offset=0,
        python="python3",
        flavour="slurm",
        wrapper="/tmp/a b/$(rm -rf x)/w.py",
        sandbox="/s",
        outroot="/o;ls",
        attempt=2,
        index_env="JIM_PBS_TASK",
        task="0",
    )
    assert "'/tmp/a b/$(rm -rf x)/w.py'" in text and "'/o;ls'" in text


def test_options_are_checked(tmp_path):
    with pytest.raises(ConfigError):
        PbsAdapter(Home(tmp_path), {"qsub_options": "-l mem=1gb; rm -rf /"})
    with pytest.raises(ConfigError):
        PbsAdapter(Home(tmp_path), {"flavour": "lsf"})
    with pytest.raises(ConfigError):
        PbsOptions.from_table({"flavour": "torque", "qsub": "/usr/bin/qsub"}, adapter="pbs")  # unknown key
    opts = PbsOptions.from_table({"flavour": "pbspro", "qsub_options": ["-l", "mem=1gb"]}, adapter="pbs")
    assert opts.qsub_options == ("-l", "mem=1gb") and PbsAdapter(Home(tmp_path), opts).flavour is PBSPRO
    assert walltime(7200) == "02:00:00" and walltime(5) == "00:01:00" and walltime(90061) == "25:01:01"


# -- the flavour table ---------------------------------------------------------------------
def test_flavour_table_is_complete():
    for fl in FLAVOURS.values():
        assert fl.states["Q"] is LocalState.QUEUED and fl.states["R"] is LocalState.RUNNING
        assert ENDED in fl.states.values()
        assert bool(fl.array_option) == (fl.name != "slurm")
        assert fl.task_env
    assert TORQUE.task_env == "PBS_ARRAYID" and PBSPRO.task_env == "PBS_ARRAY_INDEX"
    assert TORQUE.array_option == "-t" and PBSPRO.array_option == "-J"
    assert SLURM.exit_attr is None and SLURM.history_args is None and PBSPRO.history_args


def test_recorded_job_environment_backs_the_table():
    """What a job under the wrappers really gets: Slurm's variables, no PBS_ARRAYID/PBS_JOBID."""
    env = recorded("job-env-array")
    assert "SLURM_ARRAY_TASK_ID=2" in env and "PBS_ARRAYID" not in env and "PBS_JOBID" not in env
    assert f"SLURM_JOB_ID={jobs()['plain']}" in recorded("job-env-plain")


# -- qsub ----------------------------------------------------------------------------------------
def test_parse_qsub_recorded_and_documented():
    j = jobs()
    assert parse_qsub(recorded("qsub-plain"), SLURM, array=False) == j["plain"]
    assert parse_qsub(recorded("qsub-held"), SLURM, array=False) == j["held"]
    assert parse_qsub(recorded("qsub-bad-queue"), SLURM, array=False) is None
    assert parse_qsub("1234[].torque.example.org\n", TORQUE, array=True) == "1234[]"
    assert parse_qsub("1240.torque.example.org\n", TORQUE, array=False) == "1240"
    assert parse_qsub("5678[].pbs01\n", PBSPRO, array=True) == "5678[]"
    assert parse_qsub("qsub: Unknown queue\n", PBSPRO, array=False) is None


def test_transient_errors_classified(tmp_path):
    a = adapter(tmp_path, "slurm")
    assert a.is_transient(recorded("down-qsub"))  # controller down: sbatch's message on qsub's stdout
    assert a.is_transient(recorded("down-qdel"))
    assert a.is_transient(recorded("down-qstat", "err"))  # "Problem loading jobs."
    assert not a.is_transient(recorded("qsub-bad-queue"))


# -- qstat -----------------------------------------------------------------------------------------
def test_parse_qstat_recorded_mix():
    j = jobs()
    text = rec_tag(recorded("qstat-f-mix"))
    st = parse_qstat(text, SLURM, user="root")
    assert st[j["plain"]].state is LocalState.RUNNING and st[j["plain"]].tag == f"{G}-plain.0"
    assert st[j["plain"]].host == "jimnode" and st[j["plain"]].submitted
    assert st[j["held"]].state is LocalState.QUEUED  # held, but the wrappers say Q
    # every array task is its own record, under its own raw id, all with the array's name:
    # nothing says which task is which (hence no arrays with this flavour)
    tasks = [r for r in parse_full(text) if r["Job_Name"] == f"jim.{G}-array.0"]
    assert len(tasks) == 3 and len({r["Job Id"] for r in tasks}) == 3
    assert not any("array" in k.lower() for r in tasks for k in r)
    assert parse_qstat(text, SLURM, user="alice") == {}  # someone else's jobs are not ours


def test_parse_qstat_recorded_final_has_no_exit_status():
    j = jobs()
    text = rec_tag(recorded("qstat-f-final"))
    recs = {r["Job Id"]: r for r in parse_full(text)}
    assert {r["job_state"] for r in recs.values()} == {"C"}
    assert not any("exit" in k.lower() for r in recs.values() for k in r)
    # finished, exit status unknown: absent, so the wrapper's exit-code file decides (never a DONE
    # on the batch system's word: the job that exited 3 looks exactly like the one that exited 0)
    assert parse_qstat(text, SLURM) == {}
    found = {bid: tag for bid, tag, _ in jim_records(text, SLURM)}  # reconcile still finds them
    assert found[j["plain"]] == f"{G}-plain.0" and found[j["fail3"]] == f"{G}-fail.0"


def test_other_formats_are_not_usable():
    """Why jim asks ``qstat -f`` without ``-u``: the short formats cut the name (the tag)."""
    assert "jim.rec-array.0" in recorded("qstat-a-mix")  # short names survive...
    long_name = f"jim.{G}.12"
    assert len(long_name) > 20  # ...jim's tags do not (-a/-u: 20 characters, brief: 16)
    assert recorded("qstat-unknown-id") == "" and recorded("qstat-unknown-id", "rc").strip() == "153"


def test_parse_torque_sample():
    text = (DATA / "torque-qstat-f-t.txt").read_text()
    recs = parse_full(text)
    var = [r for r in recs if "Variable_List" in r][0]["Variable_List"]
    assert "PBS_O_LOGNAME=alice," in var and var.endswith("PBS_O_WORKDIR=/home/alice")  # continuation lines
    st = parse_qstat(text, TORQUE, user="alice")
    assert "1234[]" not in st  # the array's own record
    assert st["1234[0]"].state is LocalState.DONE and st["1234[0]"].exit_code == 0
    assert st["1234[0]"].tag == f"{G}.10" and st["1234[2]"].tag == f"{G}.12"  # "-<task>" name suffix
    assert st["1234[1]"].state is LocalState.FAILED and st["1234[1]"].exit_code == 3
    assert st["1234[2]"].state is LocalState.RUNNING and st["1234[2]"].host == "node09"
    assert st["1240"].state is LocalState.HELD
    assert st["1241"].exit_code == 128 + 15  # 256 + signal
    assert st["1242"].state is LocalState.FAILED and st["1242"].exit_code is None and "never ran" in st["1242"].reason
    assert "1250" not in st and "1251" not in st  # bob's; not jim's


def test_parse_pbspro_sample():
    text = (DATA / "pbspro-qstat-f-t.txt").read_text()
    st = parse_qstat(text, PBSPRO, user="alice")
    assert "5678[]" not in st
    assert [st[f"5678[{k}]"].tag for k in range(4)] == [f"{G}.{k}" for k in range(4)]
    assert st["5678[0]"].state is LocalState.DONE
    assert st["5678[1]"].state is LocalState.FAILED and st["5678[1]"].exit_code == 128 + 9
    assert st["5678[2]"].state is LocalState.RUNNING and st["5678[3]"].state is LocalState.QUEUED
    assert st["5690"].state is LocalState.FAILED and st["5690"].exit_code == 2
    assert st["5691"].state is LocalState.SUSPENDED
    acct = parse_qstat(text, PBSPRO, evidence=Evidence.ACCOUNTING)
    assert acct["5690"].evidence is Evidence.ACCOUNTING


def test_unknown_state_letter_is_skipped_not_guessed():
    text = f"Job Id:\t7\n\tJob_Name = jim.{G}.0\n\tJob_Owner = root@x\n\tjob_state = U\n"
    assert parse_qstat(text, SLURM) == {}
    assert short_id("7[3].server.example.org") == "7[3]"


# -- submit, cancel, reconcile against stand-in commands ------------------------------------------
def stand_in(d: Path, name: str, body: str) -> None:
    p = d / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(0o755)


def test_array_flavours_submit_one_array_per_run(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv"
    stand_in(
        bin_dir,
        "qsub",
        f'echo "$@" >> {log}; n=$(wc -l < {log}); '
        'case " $* " in *" -J "*|*" -t "*) echo "$((100 + n))[].server";; '
        '*) echo "$((100 + n)).server";; esac',
    )
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    c = chunk([0, 1, 2, 5, 6], job_dir=job_dir)
    ids = adapter(tmp_path, "torque", bin_dir=str(bin_dir)).submit_chunk(c)
    assert ids == {0: "101[0]", 1: "101[1]", 2: "101[2]", 5: "101[5]", 6: "101[6]"}  # lists allowed
    assert f"-N jim.{G}.0" in log.read_text() and "-t 0-2,5-6" in log.read_text()
    assert "--index-env PBS_ARRAYID --index-offset 0" in (job_dir / "batch" / "pbs-0.sh").read_text()
    log.unlink()
    ids = adapter(tmp_path, "pbspro", bin_dir=str(bin_dir)).submit_chunk(c)
    # ranges only, and no one-element arrays: 0-2 and 5-6
    assert ids == {0: "101[0]", 1: "101[1]", 2: "101[2]", 5: "102[0]", 6: "102[1]"}
    assert "-J 0-2" in log.read_text() and "-J 0-1" in log.read_text()
    log.unlink()
    ids = adapter(tmp_path, "pbspro", bin_dir=str(bin_dir)).submit_chunk(chunk([7], job_dir=job_dir))
    assert ids == {7: "101"}  # a single job: plain qsub, no -J
    assert "-J" not in log.read_text()


def test_array_submission_that_prints_a_plain_id_is_transient(tmp_path):
    """An array's qsub that prints one job's id went in as something else: reconcile, never guess task ids."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "qsub", "echo 101.server")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    with pytest.raises(SubmitError) as e:
        adapter(tmp_path, "torque", bin_dir=str(bin_dir)).submit_chunk(chunk([0, 1], job_dir=job_dir))
    assert e.value.transient and "printed no job id: '101.server'" in e.value.message
    stand_in(bin_dir, "qsub", "echo")
    with pytest.raises(SubmitError) as e:
        adapter(tmp_path, "torque", bin_dir=str(bin_dir)).submit_chunk(chunk([0, 1], job_dir=job_dir))
    assert e.value.transient and "qsub printed no job id" in e.value.message


def test_single_job_flavour_submits_each_local_job_and_reports_partial_failure(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    counter = tmp_path / "n"
    counter.write_text("0")
    # the 3rd qsub fails like the wrappers do when the controller is down (message on stdout)
    stand_in(
        bin_dir,
        "qsub",
        f"n=$(($(cat {counter}) + 1)); echo $n > {counter}; "
        f"if [ $n = 3 ]; then cat {DATA / 'down-qsub.out'}; exit 1; fi; echo $((500 + n))",
    )
    a = adapter(tmp_path, "slurm", bin_dir=str(bin_dir), submit_parallel=1)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    with pytest.raises(SubmitError) as e:
        a.submit_chunk(chunk([0, 1, 2, 3], job_dir=job_dir))
    assert e.value.transient and "3 of 4 local jobs submitted" in e.value.message
    counter.write_text("10")
    assert a.submit_chunk(chunk([4, 5], job_dir=job_dir)) == {4: "511", 5: "512"}
    text = (job_dir / "batch" / "pbs-5.sh").read_text()
    assert "JIM_PBS_TASK=0" in text and "--index-env JIM_PBS_TASK --index-offset 5" in text
    counter.write_text("2")
    with pytest.raises(SubmitError) as e:  # all failed: the error itself, transient by its text
        a.submit_chunk(chunk([6], job_dir=job_dir))
    assert e.value.transient and "Unable to contact slurm controller" in e.value.message


def test_query_failure_and_empty_queue(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    a = adapter(tmp_path, "slurm", bin_dir=str(bin_dir))
    stand_in(bin_dir, "qstat", f"cat {DATA / 'down-qstat.err'} >&2; exit 8")
    res = a.query(["1"])
    assert not res.ok and "Problem loading jobs" in res.error
    stand_in(bin_dir, "qstat", "exit 153")  # the wrappers' qstat with no job at all in the system
    assert a.query(["1"]).ok and a.query(["1"]).statuses == {}


def test_pbspro_accounting_reads_finished_jobs_whatever_qstat_exits(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv"
    # some ids unknown: PBS Pro's qstat -x says so and exits non-zero, but lists the others
    stand_in(
        bin_dir,
        "qstat",
        f'echo "$@" >> {log}; cat {DATA / "pbspro-qstat-f-t.txt"}; '
        'echo "qstat: Unknown Job Id 999.pbs01" >&2; exit 153',
    )
    monkeypatch.setattr(PbsAdapter, "user", property(lambda self: "alice"))
    acct = adapter(tmp_path, "pbspro", bin_dir=str(bin_dir)).accounting(["5690", "5678[1]", "5678[2]", "999"])
    assert set(acct) == {"5690", "5678[1]"}  # 5678[2] still runs: not a final state
    assert acct["5690"].exit_code == 2 and acct["5678[1]"].exit_code == 128 + 9
    assert all(s.evidence is Evidence.ACCOUNTING for s in acct.values())
    assert log.read_text() == "-x -f -t 5690 5678[1] 5678[2] 999\n"
    log.unlink()
    assert adapter(tmp_path, "torque", bin_dir=str(bin_dir)).accounting(["5690"]) == {}  # no history to ask
    assert not log.exists()


def test_cancel_ignores_jobs_already_gone_but_not_errors(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    a = adapter(tmp_path, "slurm", bin_dir=str(bin_dir))
    stand_in(bin_dir, "qdel", f"cat {DATA / 'qdel-done.out'}; exit {recorded('qdel-done', 'rc').strip()}")
    a.cancel(["1", "2"])  # rc 1, silent: already ended
    stand_in(bin_dir, "qdel", 'echo "qdel: Unknown Job Id 1.torque.example.org" >&2; exit 153')
    a.cancel(["1"])
    stand_in(bin_dir, "qdel", f"cat {DATA / 'down-qdel.out'}; exit 1")
    with pytest.raises(CancelError) as e:
        a.cancel(["1"])
    assert e.value.transient


def test_reconcile_uses_qstat_then_the_wrappers_started_file(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "qstat", f"cat {tmp_path / 'qstat.out'}")
    a = adapter(tmp_path, "slurm", bin_dir=str(bin_dir))
    me = a.user
    (tmp_path / "qstat.out").write_text(
        f"Job Id:\t41\n\tJob_Name = jim.{G}.0\n\tJob_Owner = {me}@h\n\tjob_state = C\n\n"
        f"Job Id:\t42\n\tJob_Name = jim.{G}.1\n\tJob_Owner = {me}@h\n\tjob_state = R\n\n"
        f"Job Id:\t44\n\tJob_Name = jim.{G}.3\n\tJob_Owner = not-{me}@h\n\tjob_state = R\n"
    )
    local = a.home.local_dir(G, 2)
    local.mkdir(parents=True)
    (local / "started").write_text(json.dumps({"batch_id": "43", "pid": 1}))
    assert a.find_by_tag(G, [f"{G}.2"]) == {}  # qstat alone does not know it
    found = a.reconcile(G, [f"{G}.0", f"{G}.1", f"{G}.2", f"{G}.3"])
    # 0 has ended (C, listed anyway), 1 runs, 2 left qstat but its wrapper ran, 3 was never submitted
    # (the job named like it is someone else's)
    assert found == {f"{G}.0": "41", f"{G}.1": "42", f"{G}.2": "43"}


def test_flavour_auto_detection(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "qsub", "exit 0")
    stand_in(bin_dir, "qstat", 'echo "pbs_version = 2022.1.3"')
    assert adapter(tmp_path, "auto", bin_dir=str(bin_dir)).flavour is PBSPRO
    (tmp_path / "home" / "cache" / "pbs-flavour.json").unlink()
    stand_in(bin_dir, "qstat", 'echo "Version: 6.1.3"; echo "Commit: x"')
    assert adapter(tmp_path, "auto", bin_dir=str(bin_dir)).flavour is TORQUE
    stand_in(bin_dir, "qstat", 'echo "pbs_version = 2022.1.3"')
    assert adapter(tmp_path, "auto", bin_dir=str(bin_dir)).flavour is TORQUE  # remembered for a day
    (tmp_path / "home" / "cache" / "pbs-flavour.json").unlink()
    stand_in(bin_dir, "qstat", f"cat {DATA / 'qstat-version.err'} >&2; exit 2")
    with pytest.raises(ConfigError):
        _ = adapter(tmp_path, "auto", bin_dir=str(bin_dir)).flavour
