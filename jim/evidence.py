"""The rules of evidence: how what is known of one local job decides its state.

Pure: nothing here reads a file or runs a command.  The monitor (every pass)
and ``jim cancel``/``kill`` (once) gather what is known of a local job into
:class:`Facts` and apply these rules to its record (:class:`jim.record.LocalJob`,
whose states never go back).  The order of evidence, best first:

1. **the wrapper's exit-code file**: how the job's own command ended
   (DONE on 0; FAILED with its code and reason; CANCELLED when a cancel or a
   kill stopped it).  A cause the batch system gives (a preemption's signal,
   a node failure) is recorded with it;
2. **the accounting record**, when it is this job's (same tag, not older than
   jim's submission: batch ids are handed out again);
3. **the batch system's own terminal state**, with the cause it gives;
4. **absence** from a working answer, with none of the above: LOST once it
   has lasted ``lost_grace`` seconds.

A failed status query is no news: nothing changes.  An answer asked before
the job was queued says nothing about it.  While the batch system shows the
job, its state is taken as it is (RUNNING, HELD ...), except that a RUNNING
shown after the wrapper wrote its exit-code file is the batch system being
late, not news.

When an attempt ends, what it used is recorded with it (:meth:`LocalJob.set_usage`) from the same
evidence: the wrapper's measure in its exit-code file, else the accounting record's (its ``source``
says which: ``wrapper``, ``sacct`` ...), else nothing (unknown).  Usage fields that are malformed
or absurd are counted unknown and logged once, when the attempt ends.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jim.adapters.model import BatchStatus
from jim.localfiles import ExitFile
from jim.log import for_job
from jim.record import GridJob, LocalJob, Usage
from jim.states import EndCause, Evidence, LocalState
from jim.timestamps import now_iso, parse_iso


@dataclass(frozen=True)
class Facts:
    """What is known of one local job in one pass."""

    answered: bool
    """The status query worked (False: no news, nothing may change)."""
    status: BatchStatus | None
    """The batch system's status of its batch id (None: absent from the answer)."""
    answered_at: float
    """When the batch system was asked."""
    exit: ExitFile | None = None
    """The wrapper's exit-code file."""
    record: BatchStatus | None = None
    """The accounting's record of its batch id (whoever's: see :func:`own_record`)."""
    started: bool = True
    """The wrapper's directory exists (a failure before it did is the node's, not the job's)."""
    cancelled: bool = False
    """Its grid job is being cancelled."""


@dataclass(frozen=True)
class Rules:
    """The site's rules of time for evidence (``[monitor]``)."""

    now: float
    lost_grace: float = 60.0
    """Seconds absent with no evidence before a local job is LOST."""
    accounting_slack: float = 300.0
    """Accounting records submitted this long before jim's own submission are someone else's."""


def settle(lj: LocalJob, facts: Facts, rules: Rules) -> None:
    """Bring one local job's state up to date from ``facts`` (see the module docstring)."""
    if lj.state.terminal or not lj.batch_id or not facts.answered:
        return
    cancelled = facts.cancelled or "killedBy" in lj.el.attrib  # (jim kill ID.k: this one is being cancelled)
    status = facts.status
    if status is not None and status.tag and status.tag != lj.tag:
        status = None  # the id now belongs to another job: ours is absent
    ec = facts.exit
    if status is None and ec is None and facts.answered_at < (lj.entered(LocalState.QUEUED) or 0):
        return  # the (cached) answer predates this job's submission: it says nothing about it
    acct = own_record(lj, facts.record, rules.accounting_slack)
    if status is not None:
        _in_queue(lj, status, ec, acct, cancelled, facts.started)
    elif ec is not None:
        _ended_by_exit_file(lj, ec, cancelled, acct.cause if acct is not None else None)
    elif acct is not None:
        _ended_by_record(lj, acct, facts.started)
    else:
        _absent(lj, rules)


def ended_by_cancel(lj: LocalJob, ec: ExitFile | None, reason: str) -> None:
    """A cancel (or a kill) stopped the local job: DONE when its wrapper says it had ended well
    first, else CANCELLED with ``reason`` (and the exit code its wrapper wrote, if it wrote one)."""
    if ec is not None and ec.succeeded:
        ended = lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0)
    else:
        code = ec.code if ec is not None else None
        ended = lj.set_state(LocalState.CANCELLED, evidence=Evidence.CANCEL, exit_code=code, reason=reason)
    if ended and ec is not None:
        record_usage(lj, ec.usage(lj.plan_cores), "the wrapper's exit file")


def record_usage(lj: LocalJob, usage: Usage | None, where: str) -> None:
    """Record what the attempt that just ended used (None: nobody measured it: nothing recorded).
    Fields that were not trusted are logged, once: this is called once per attempt, when it ends."""
    if usage is None:
        return
    if usage.node is None and lj.get("node"):
        usage = replace(usage, node=lj.get("node"))  # (the node its wrapper reported when it started)
    lj.set_usage(usage)
    if usage.rejected:
        for_job("jim.evidence", lj.get("MasterJobID") or "").warning(
            "local job %d attempt %d: usage in %s malformed or absurd, counted unknown: %s",
            lj.index,
            lj.attempt,
            where,
            ", ".join(usage.rejected),
        )


def own_record(lj: LocalJob, record: BatchStatus | None, slack: float) -> BatchStatus | None:
    """An accounting record, if it is this local job's: same tag, not older than our submission."""
    if record is None:
        return None
    if record.tag and record.tag != lj.tag:
        return None
    intent = lj.entered(LocalState.SUBMITTING)
    if record.submitted is not None and intent is not None and record.submitted < intent - slack:
        return None  # an older job that had the same id
    return record


def overdue_holds(job: GridJob, now: float, timeout: float) -> list[LocalJob]:
    """Local jobs held or suspended for longer than ``timeout`` seconds."""
    out = []
    for lj in job.local_jobs():
        if lj.state in (LocalState.HELD, LocalState.SUSPENDED):
            since = lj.entered(lj.state)
            if since is not None and now - since >= timeout:
                out.append(lj)
    return out


def held_too_long(lj: LocalJob, timeout: float) -> None:
    """A local job held or suspended past ``timeout`` was cancelled by jim: CANCELLED, saying why."""
    why = (
        f"{lj.state.value.lower()} for more than {timeout:g} s ({lj.get('reason') or 'no reason given'}); "
        f"cancelled by jim"
    )
    lj.set_state(LocalState.CANCELLED, evidence=Evidence.CANCEL, reason=why)


def _in_queue(
    lj: LocalJob,
    status: BatchStatus,
    ec: ExitFile | None,
    acct: BatchStatus | None,
    cancelled: bool,
    started: bool,
) -> None:
    """The batch system shows the job: its state; a terminal one says how it ended by the best evidence."""
    if "absentSince" in lj.el.attrib:
        del lj.el.attrib["absentSince"]
    if status.host:
        lj.set("host", status.host)
    if status.state.terminal:
        if ec is not None:
            cause = status.cause or (acct.cause if acct is not None else None)
            _ended_by_exit_file(lj, ec, cancelled, cause)
        else:
            _ended_by_record(lj, acct if acct is not None else status, started)
    elif not (ec is not None and status.state is LocalState.RUNNING):  # (else: the wrapper has ended, the
        lj.set_state(status.state, reason=status.reason)  # batch system has not noticed yet)


def _absent(lj: LocalJob, rules: Rules) -> None:
    """Absent, with no evidence of how it ended: LOST once the grace period is over."""
    since = parse_iso(lj.get("absentSince"))
    if since is None:
        lj.set("absentSince", now_iso(rules.now))
    elif rules.now - since >= rules.lost_grace:
        lj.set_state(
            LocalState.LOST,
            evidence=Evidence.ABSENT_AFTER_GRACE,
            reason=f"gone from the batch system for {rules.now - since:.0f} s with no exit-code file "
            f"and no accounting record",
        )


def _ended_by_exit_file(lj: LocalJob, ec: ExitFile, cancelled: bool, cause: EndCause | None = None) -> None:
    """The wrapper's exit-code file says how the job ended.  ``cause``: why the batch system says
    it ended (a job killed by a preemption's signal writes its file too), recorded with it."""
    if ec.wrapper_failed:
        cause = EndCause.WRAPPER_FAILED
    if cancelled and not ec.succeeded:
        # the grid job is being cancelled: however the batch system stopped this local job
        # (a signal to the wrapper, or to the job's processes directly), it was cancelled
        killed_by = lj.el.get("killedBy")
        ended_by_cancel(lj, ec, f"killed by {killed_by}" if killed_by else "cancelled")
    elif ec.succeeded:
        if lj.set_state(LocalState.DONE, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=0):
            record_usage(lj, ec.usage(lj.plan_cores), "the wrapper's exit file")
    else:
        reason = f"{ec.reason}; {cause.describe()}" if cause is not None else ec.reason
        if lj.set_state(LocalState.FAILED, evidence=Evidence.WRAPPER_EXIT_FILE, exit_code=ec.code or 1, reason=reason):
            if cause is not None:
                lj.set("cause", cause.value)
            record_usage(lj, ec.usage(lj.plan_cores), "the wrapper's exit file")


def _ended_by_record(lj: LocalJob, st: BatchStatus, started: bool = True) -> None:
    """A terminal state from the batch system or its accounting (no exit-code file).  ``started``:
    the wrapper's directory exists (a failure before it did is the node's, not the job's)."""
    code = st.exit_code
    if code is None and st.state is LocalState.DONE:
        code = 0
    # a terminal native state says how it ended; a queue reason ("Resources") would mislead
    reason = st.native or st.reason
    if st.reason and st.reason not in ("None", st.native) and st.evidence is Evidence.BATCH:
        reason = f"{st.native} ({st.reason})" if st.native else st.reason
    cause = st.cause
    if cause is None and st.state is LocalState.FAILED and not started and "node" not in lj.el.attrib:
        cause = EndCause.NOT_STARTED
    if cause is not None:  # why it ended, when the batch system says: "...; node failure (NODE_FAIL)"
        reason = f"{reason}; {cause.describe()}" if reason else cause.describe()
    if lj.set_state(st.state, evidence=st.evidence, exit_code=code, reason=reason):
        if cause is not None:
            lj.set("cause", cause.value)
        record_usage(lj, st.usage, f"the {st.usage.source.value} record" if st.usage is not None else "")
