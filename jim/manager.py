"""The grid job lifecycle: plan, submit, cancel (what the CLI commands do).

``submit`` validates and plans synchronously, records the grid job, and
leaves packaging and batch submission to a detached worker
(:mod:`jim.worker`); a per-user monitor (:mod:`jim.monitor`) follows the local
jobs from then on.  ``cancel`` stops every local job and gathers the outputs.
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from jim import faults
from jim.config import Config
from jim.db import Database, atomic_write, new_job_id, new_record
from jim.errors import InvalidAttribute, JimError, PlanError
from jim.jobdesc import JobDescription
from jim.locks import SingleInstance
from jim.log import for_job
from jim.paths import Home
from jim.states import Evidence, GramState, LocalState

PLAN_FILE = "plan.json"


_PARAMETER_ATTRS = ("parameters", "parameterstart", "parameterstep", "parameterfactor")


def _is_parameter_attr(name: str) -> bool:
    return name.partition(".")[0] in _PARAMETER_ATTRS


def make_plan(config: Config, desc: JobDescription, *, job_id: str | None = None, dry_run: bool = False):
    """Validate ``desc``, choose its local queue and plan it: (handler, plan, commands).

    Records nothing; a real submit (``dry_run=False``) only remembers the
    queue choice in the requirements cache under ``$JIM_HOME/cache``.  A
    description with ``parameters*`` attributes and no ``jimtype`` is a
    parametric job; other job types refuse those attributes unless they
    accept them.
    """
    from jim.handlers import get_handler_class

    desc.check_common()
    if not desc.has("jimtype") and any(_is_parameter_attr(a) for a in desc.attrs):
        desc.attrs["jimtype"] = ["parametric"]
    cls = get_handler_class(desc.jimtype)
    accepted = cls.accepted_attributes(desc)
    desc.check_known(accepted)
    if "parameters" not in accepted:
        stray = sorted(a for a in desc.attrs if _is_parameter_attr(a))
        if stray:
            raise InvalidAttribute(f"attribute {stray[0]} makes a parametric job, but the job type is "
                                   f"{desc.jimtype}: use jimtype=parametric")
    choice = _choose_queue(config, desc, dry_run)
    handler = cls(config.site, config.handler_options(cls.name or desc.jimtype),
                  queue=choice.queue, grid_job_id=job_id)
    try:
        plan = handler.getNumSubmissionTimes(desc)
    except ValueError as e:  # splitters raise ValueError on bad parameters
        if isinstance(e, JimError):
            raise
        raise InvalidAttribute(str(e)) from e
    if plan.n < 1:
        raise PlanError("the plan has no local jobs")
    if plan.n > config.site.max_local_jobs:
        raise PlanError(f"the plan has {plan.n} local jobs, over the site's limit of {config.site.max_local_jobs}")
    _record_queue(plan, choice)
    commands = [handler.getCommandAndArguments(desc, plan, s) for s in plan.slices]
    for argv in commands:
        if not argv or not all(isinstance(a, str) for a in argv) or any("\0" in a for a in argv):
            raise InvalidAttribute("a local job's command must be a non-empty list of strings")
    return handler, plan, commands


class _NoQueues:
    """The queue choice when the site describes no queues and the job states no requirements.

    The common case needs no matching, so ``jim submit`` does not even import
    :mod:`jim.requirements` (about 10 ms): the batch system's default queue,
    or the job's GRAM ``queue`` passed through.
    """

    queue = ce = None
    eligible = 0
    described = ""

    def __init__(self, name: str | None):
        self.name = name
        self.how = "gram-queue" if name else "batch-default"


def _choose_queue(config: Config, desc: JobDescription, dry_run: bool):
    """The job's local queue from its requirements and the site's ``[resources]`` (see jim.requirements)."""
    if not config.resources and not desc.has("requirements"):
        gram_queue = (desc.get("queue") or "").strip()
        return _NoQueues(gram_queue or None)
    from jim.requirements import QueueCache, choose_queue, requirements_of_description

    if not dry_run:
        Home(config.home).ensure()
    stated = requirements_of_description(desc.attrs.get("requirements"), desc.get("queue"))
    return choose_queue(config.resources, stated, cache=QueueCache(Home(config.home).cache, write=not dry_run))


def _record_queue(plan, choice) -> None:
    """Put the queue choice into the plan: plan.queue, every slice's queue, attributes, explanation."""
    plan.queue = plan.queue or choice.name
    for s in plan.slices:
        if s.queue is None:
            s.queue = plan.queue
    facts = {"queueChosenBy": choice.how, "ce": choice.ce, "requirements": choice.described or None}
    if choice.queue is not None:
        facts["eligibleQueues"] = str(choice.eligible)
    for key, value in facts.items():
        if value is not None:
            plan.attrs.setdefault(key, value)
    text = plan.explanation.rstrip()
    text += "" if not text or text.endswith(".") else "."
    if choice.queue is not None:
        why = f"for {choice.described}" if choice.described else "no requirements: the site's preferred"
        plan.explanation = f"{text} Queue {choice.name} on CE {choice.ce} ({why}; {choice.eligible} eligible)."
    elif choice.name:
        plan.explanation = f"{text} Queue {choice.name} (the job's queue attribute)."


def plan_to_json(plan, commands: list[list[str]]) -> dict[str, Any]:
    return {
        "binding": plan.binding, "explanation": plan.explanation, "attrs": plan.attrs, "queue": plan.queue,
        "slices": [{"attrs": s.attrs, "params": s.params, "env": s.env, "queue": s.queue,
                    "failed_on_creation": s.failed_on_creation} for s in plan.slices],
        "commands": commands,
    }


def plan_from_json(data: dict[str, Any]):
    from jim.handlers.base import LocalSlice, Plan

    slices = [LocalSlice(attrs=s["attrs"], params=s["params"], env=s["env"], queue=s.get("queue"),
                         failed_on_creation=s.get("failed_on_creation")) for s in data["slices"]]
    return Plan(slices, data["binding"], data["explanation"], attrs=data["attrs"], queue=data.get("queue")), \
        data["commands"]


def submit(config: Config, desc: JobDescription, *, env: dict[str, str] | None = None,
           start_background: bool = True) -> str:
    """Record a new grid job and start its worker; return the grid job id."""
    from jim.outputs import check_output_tar

    env = dict(os.environ if env is None else env)
    job_id = new_job_id()
    handler, plan, commands = make_plan(config, desc, job_id=job_id)
    if desc.has("outputtar"):
        desc.attrs["outputtar"] = [check_output_tar(desc.get("outputtar"), desc.get("directory"))]
    home = Home(config.home).ensure()
    db = Database(home, config.deadlines.lock)
    job_dir = home.job_dir(job_id)
    os.mkdir(job_dir, 0o700)
    try:
        atomic_write(job_dir / PLAN_FILE, json.dumps(plan_to_json(plan, commands)).encode())
        meta = {"segDir": env.get("JIM_SEG_DIR", ""),
                "gramUniqid": desc.get("uniqid") or "",
                "gramJobDir": desc.get("jobdir") or ""}
        record = new_record(
            job_id, jobtype=desc.jimtype, name=desc.get("jobname") or os.path.basename(desc.executable or ""),
            owner=getpass.getuser(), adapter=config.batch.adapter, description=desc.to_json(),
            source_format=desc.source_format, source_text=desc.source_text,
            plan=plan.record_attrs(), explanation=plan.explanation,
            slices=[s.record() for s in plan.slices], meta=meta)
        record.recompute(max_failed_fraction=config.site.max_failed_fraction)
        db.create(record)
    except BaseException:
        import shutil
        shutil.rmtree(job_dir, ignore_errors=True)
        raise
    log = for_job("jim.submit", job_id)
    log.info("grid job %s submitted: type %s, %d local jobs (%s)", job_id, desc.jimtype, plan.n, plan.explanation)
    faults.point("submit-after-record")
    if start_background:
        # the worker starts the monitor once the local jobs are submitted (or when it has to
        # wait for the batch system): starting it here would compete with the submission
        fork_worker(config, home, job_id, known=(record, plan, commands))
    return job_id


# ---------------------------------------------------------------------------
# background processes
# ---------------------------------------------------------------------------

def _spawn(home: Home, *args: str) -> int:
    from jim.proc import jim_argv, spawn_detached

    env = dict(os.environ)
    env["JIM_HOME"] = str(home.root)
    return spawn_detached(jim_argv(*args), env=env, cwd=str(home.root),
                          stderr=str(home.logdir / "background.err"))


def start_worker(home: Home, job_id: str) -> bool:
    """Start the worker of ``job_id`` unless one is running."""
    if SingleInstance(home.worker_lock(job_id)).held_elsewhere():
        return False
    _spawn(home, "_worker", job_id)
    return True


def fork_worker(config: Config, home: Home, job_id: str, known=None) -> None:
    """Run the worker of a new grid job in a detached child of this very process.

    Everything the worker needs is already imported and configured here, so
    forking saves a second interpreter start (a few hundred ms before the
    first batch command).  The child closes every inherited file descriptor:
    above all the protocol pipe, whose reader (the GRAM module) waits for EOF.
    """
    import gc

    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:  # first child: new session, fork again so that init adopts the worker
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(home.logdir / "background.err", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        os.closerange(3, 65536)
        os.chdir(home.root)
        from jim import log as jlog
        jlog.reopen(home.root)
        gc.enable()
        from jim import worker
        code = worker.run(config, job_id, known)
    except BaseException:
        code = 1
    os._exit(code)


def start_monitor(home: Home) -> bool:
    if SingleInstance(home.monitor_lock).held_elsewhere():
        return False
    _spawn(home, "_monitor")
    return True


def stop_worker(home: Home, job_id: str, timeout: float = 5.0) -> None:
    """Kill the worker of ``job_id`` if it runs (its journal makes that safe)."""
    lock = SingleInstance(home.worker_lock(job_id))
    if not lock.held_elsewhere():
        return
    pid = lock.holder_pid()
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while lock.held_elsewhere() and time.monotonic() < deadline:
        time.sleep(0.02)


# ---------------------------------------------------------------------------
# cancel
# ---------------------------------------------------------------------------

def cancel(config: Config, job_id: str) -> GramState:
    """Stop every local job of ``job_id``, gather outputs; return the grid state."""
    from jim.adapters import get_adapter
    from jim.outputs import finalize, read_exit_file

    home = Home(config.home)
    db = Database(home, config.deadlines.lock)
    log = for_job("jim.cancel", job_id)
    job = db.read(job_id)
    if job.state.terminal:
        if not job.outputs_gathered:
            finalize(db, job_id, max_failed_fraction=config.site.max_failed_fraction)
        log.info("cancel of grid job %s: already %s", job_id, job.state.name)
        return job.state
    with db.update(job_id) as rec:
        if not rec.cancel_requested:
            rec.set("cancelRequested", "true")
            rec.set("cancelReason", "cancelled by the user")
    log.info("cancelling grid job %s", job_id)
    stop_worker(home, job_id)
    adapter = get_adapter(config, home)
    job = db.read(job_id)
    from jim.worker import in_flight, read_intents

    unsure = in_flight(job, read_intents(home.job_dir(job_id)))
    found = adapter.reconcile(job_id, unsure) if unsure else {}
    batch_ids = {lj.index: lj.batch_id for lj in job.local_jobs() if not lj.state.terminal and lj.batch_id}
    for lj in job.local_jobs():
        if lj.tag in found:
            batch_ids[lj.index] = found[lj.tag]
    grace = config.deadlines.cancel_grace
    if batch_ids:
        adapter.retrying(adapter.cancel, sorted(set(batch_ids.values())), grace)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:  # let the wrappers write their exit-code files
        if all((home.local_dir(job_id, k) / "exit_code").exists() for k in batch_ids):
            break
        time.sleep(0.05)
    with db.update(job_id) as rec:
        for lj in rec.local_jobs():
            if lj.state.terminal:
                continue
            if lj.index in batch_ids and not lj.batch_id:
                lj.batch_id = batch_ids[lj.index]
            ec = read_exit_file(home.local_dir(job_id, lj.index) / "exit_code") if lj.index in batch_ids else None
            if ec is not None and ec[0] == 0 and "terminated_by" not in ec[1]:
                lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0)
            else:
                lj.set_state(LocalState.CANCELLED, evidence=Evidence.CANCEL,
                             exit_code=ec[0] if ec else None,
                             reason="cancelled" + ("" if lj.index in batch_ids else " before it was submitted"))
        rec.recompute(max_failed_fraction=config.site.max_failed_fraction)
    finalize(db, job_id, max_failed_fraction=config.site.max_failed_fraction)
    job = db.read(job_id)
    log.info("grid job %s cancelled: %s, output tar %s", job_id, job.state.name, job.output_tar)
    from jim.monitor import emit_seg_event
    emit_seg_event(job)
    return job.state


def output_tar(config: Config, job_id: str) -> Path | None:
    job = Database(Home(config.home), config.deadlines.lock).read(job_id)
    return Path(job.output_tar) if job.output_tar else None
