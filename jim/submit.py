"""Submit: record a new grid job and hand it to its worker, within the gatekeeper's deadline.

``jim submit`` validates and plans synchronously (:mod:`jim.plan`: bad input
fails at once with a GRAM error and records nothing), writes the plan and the
grid job's record (every local job PLANNED), and returns the grid job id.
Packaging and batch submission go on in the grid job's worker
(:mod:`jim.worker`), run in a detached fork of this process; the worker starts
the monitor once it has submitted (or when it has to wait for the batch system).

The gatekeeper may kill a submit at any moment.  Its order makes that safe:

1. the pending mark ``locks/<id>.submit``, locked (:class:`jim.journal.Pending`);
2. ``jobs/<id>/plan.json``, then the record (``db/<id>.xml``, summary, index);
3. the ``JOB_ID`` and ``JOB_STATE`` lines written to stdout (``announce``);
4. the pending mark removed: the grid job is confirmed;
5. the worker forked (it submits nothing for a grid job that is not confirmed).

A kill before 4 leaves a pending mark nobody holds: the next worker of any
grid job of the home (or the one the monitor or a poll starts for this grid
job) removes everything of it (:func:`jim.journal.recover`).  The one window
where a caller has a ``JOB_ID`` whose grid job is then removed is between the
end of the write in 3 and the unlink in 4: a poll of that id answers
``JOB_STATE=FAILED`` with the reason (:data:`jim.journal.ABANDONED_MESSAGE`).
"""

from __future__ import annotations

import gc
import getpass
import os
import shutil

from jim import background, drain, faults, journal
from jim import credentials as creds
from jim import identity as ident
from jim import log as jlog
from jim import plan as planning
from jim.errors import CredentialRefused, GramError
from jim.handlers.base import Plan
from jim.jobdesc import JobDescription
from jim.jobid import new_job_id
from jim.outputs import resolve_user_paths
from jim.record import GridJob, NewJob, new_record
from jim.site import Site
from jim.timestamps import now_iso

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: submit answers fast)
if TYPE_CHECKING:
    from collections.abc import Callable


def submit(
    site: Site,
    desc: JobDescription,
    *,
    env: dict[str, str] | None = None,
    start_background: bool = True,
    announce: Callable[[str], None] | None = None,
    handover: creds.Handover | None = None,
) -> str:
    """Record a new grid job and start its worker; return the grid job id.

    ``announce(job_id)`` writes the answer (``jim submit``'s ``JOB_ID`` line) and returns once it
    is written; the grid job is confirmed only after that (see the module docstring).

    ``handover``: what the front end hands over besides the description (:class:`jim.credentials.Handover`).
    Its ``identity``: who submitted it, as the front end calling this says it (ARC's and BLAH's steps); when
    None, the proxy ``X509_USER_PROXY`` of ``env`` (this process's environment: GRAM's job manager sets
    it to the job's delegated proxy) names, if any.  Never anything of the description: a job cannot
    name its own identity.

    Its ``credentials``: the credential files the front end hands over (ARC's, BLAH's); when None, the proxy
    ``X509_USER_PROXY`` of ``env`` names (GRAM's), if any.  Each is checked (:func:`jim.credentials.inspect`:
    a credential that cannot be used refuses the grid job, nothing recorded) and copied into the grid job's
    area for its local jobs.

    While the site drains (:mod:`jim.drain`), every new grid job is refused first, with the reason.
    """
    drain.check(site.config.site.drain_file)  # (a draining site refuses before any work: nothing recorded)
    env = dict(os.environ if env is None else env)
    identity, credentials = (handover.identity, handover.credentials) if handover is not None else (None, None)
    if identity is None:
        identity = ident.from_environment(env, source="gram" if env.get("JIM_GRAM_JOB_DIR") else "submit")
    handed = credentials if credentials is not None else handed_from_environment(env)
    reads = _inspect(handed)
    job_id = new_job_id()
    left = _credential_left(site, reads)
    _handler, plan, commands = planning.make_plan(site.config, desc, job_id=job_id, credential_left=left)
    ends = [r.credential.not_after for r in reads if r.credential.not_after is not None]
    if ends:  # (the plan's limits: when the credential handed over ends)
        plan.attrs["credentialEnd"] = now_iso(min(ends))
    resolve_user_paths(desc, site.home.root)  # stdout, stderr, outputtar: absolute, never into jim's home
    site.ensure()
    pending = journal.Pending(site.db, job_id).take()
    announced = False
    try:
        faults.point("submit-after-pending")
        record = _record(site, job_id, desc, (plan, commands), (env, identity, reads))
        faults.point("submit-after-record")
        if announce is not None:
            announce(job_id)
            announced = True
        faults.point("submit-after-answer")
        pending.confirm()
    except BaseException:
        pending.abandon(tombstone=announced)
        raise
    log = jlog.for_job("jim.submit", job_id)
    log.info("grid job %s submitted: type %s, %d local jobs (%s)", job_id, desc.jimtype, plan.n, plan.explanation)
    if identity.known:
        log.info("grid job %s submitted by %s", job_id, ident.describe(identity))
    if start_background:
        try:
            background.run_detached(site.home.root, lambda: _run_worker(site, job_id, (record, plan, commands)))
        except OSError as e:  # the grid job is recorded and answered: the next poll or the monitor starts it
            log.warning("the worker of %s could not be started now (%s); a poll will start it", job_id, e)
    return job_id


def _record(
    site: Site,
    job_id: str,
    desc: JobDescription,
    planned: tuple[Plan, planning.Commands],
    caller: tuple[dict[str, str], ident.Identity, list[creds.Read]],
) -> GridJob:
    """Write the grid job's work area with its plan and credentials, then its record: all of it, or nothing."""
    plan, commands = planned
    env, identity, reads = caller
    job_dir = site.home.job_dir(job_id)
    os.mkdir(job_dir, 0o700)
    try:
        planning.save(job_dir, plan, commands, desc.environment())
        creds.install(job_dir, reads)
        meta = {
            "segDir": env.get("JIM_SEG_DIR", ""),
            "gramUniqid": desc.get("uniqid") or "",
            "gramJobDir": desc.get("jobdir") or "",
        }
        record = new_record(
            job_id,
            NewJob(
                jobtype=desc.jimtype,
                name=desc.get("jobname") or os.path.basename(desc.executable or ""),
                owner=getpass.getuser(),
                adapter=site.config.batch.adapter,
                description=desc.to_json(),
                source_format=desc.source_format,
                source_text=desc.source_text,
                plan=plan.record_attrs(),
                explanation=plan.explanation,
                slices=[s.record() for s in plan.slices],
                meta=meta,
            ),
        )
        record.set_identity(identity)
        record.set_credentials([r.credential for r in reads])
        record.recompute(site.policy)
        site.db.create(record)
    except BaseException:
        shutil.rmtree(job_dir, ignore_errors=True)
        raise
    return record


def handed_from_environment(env: dict[str, str]) -> list[creds.Handed]:
    """The proxy a GRAM job manager hands over: ``X509_USER_PROXY`` of the ``jim submit`` process."""
    proxy = env.get("X509_USER_PROXY")
    return [creds.Handed("x509", proxy)] if proxy else []


def _inspect(handed: list[creds.Handed]) -> list[creds.Read]:
    """Each handed credential read and checked; a grid job whose credential cannot be used is refused."""
    reads = []
    for h in handed:
        try:
            reads.append(creds.inspect(h))
        except creds.CredentialError as e:
            raise CredentialRefused(
                f"the grid job's credential cannot be used: {e}", gram_error=GramError.USER_PROXY_EXPIRED
            ) from None
    return reads


def _credential_left(site: Site, reads: list[creds.Read]) -> float | None:
    """The seconds the credential lasts (the earliest known end), less the margin and the time the worker
    may take to submit the local jobs (:data:`jim.credentials.SUBMIT_ALLOWANCE`: a local job sized to
    the lifetime exactly would wait for a refresh), for the splitter; None when it does not count
    (unknown, or ``[credentials] size_to_lifetime = false``)."""
    if not site.config.credentials.size_to_lifetime:
        return None
    lefts = [left for r in reads if (left := r.credential.left()) is not None]
    return min(lefts) - site.config.credentials.margin - creds.SUBMIT_ALLOWANCE if lefts else None


def _run_worker(site: Site, job_id: str, known: tuple[GridJob, Plan, planning.Commands]) -> int:
    """The forked worker: a fresh log (the parent's files are closed), then :func:`jim.worker.run`."""
    from jim import worker  # (imported in the forked child: the submit's answer does not wait for it)

    jlog.reopen(site.home.root)
    gc.enable()  # (jim's short-lived commands run without it)
    return worker.run(site, job_id, known)
