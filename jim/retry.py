"""The retry rule: whether a local job that ended gets another attempt, and when.

The one owner of that rule.  The monitor asks it for every local job that
ended in a pass (:meth:`Rule.consider`), under the record's lock, before the
grid state is aggregated: a local job that gets another attempt is PLANNED
again (:meth:`jim.record.LocalJob.new_attempt`) and the failure policy never
counts it; the worker submits it once its cool-off is over.

Evidence first.  Only what the record says of the ended attempt counts:

========================================  =========================================
the attempt ended                          another attempt?
========================================  =========================================
DONE                                       no
killed by a person, cancelled by jim       no (``killedBy``, evidence ``cancel``)
refused at creation                        no (evidence ``creation``)
LOST (gone, no evidence, after the grace)  yes
a site fault (``cause``: node failure,     yes
preemption, node boot or launch failure,
the wrapper never started, or failed
before running the command)
the job's own cause (wall time, deadline,  no
memory)
an exit code the site (``[retry]
exit_codes``) or the job type             yes
(:meth:`Handler.retryable_exit_code`)
names; the exit code came from the wrapper
any other exit code                        no
========================================  =========================================

while attempts are left (``[retry] max_attempts``, default 3, the first
included) and the grid job is not being cancelled.  Attempt ``n + 1`` waits
``cool_off * cool_off_factor ** (n - 1)`` seconds, at most ``max_cool_off``.
Why the next attempt was made is recorded in the ended attempt's element;
why one was not (no attempts left) is added to the local job's reason.
"""

from __future__ import annotations

import logging

from jim.config import Config, RetryConfig
from jim.handlers import get_handler_class
from jim.handlers.base import Handler
from jim.record import GridJob, LocalJob
from jim.states import EndCause, Evidence, LocalState, site_fault

log = logging.getLogger("jim.retry")

#: A worker waits this long at most for a retry's cool-off; for a longer one it exits, and the
#: monitor starts a worker again once an attempt is due (no process waits an hour per grid job),
#: while ``jim poll`` starts none before then (the poll summary's ``RETRY_AT``).
WORKER_WAIT = 120.0

_FINAL_EVIDENCE = frozenset({Evidence.CANCEL.value, Evidence.CREATION.value})


def cool_off(policy: RetryConfig, attempt: int) -> float:
    """Seconds attempt ``attempt + 1`` waits after attempt ``attempt`` ended."""
    return float(min(policy.max_cool_off, policy.cool_off * policy.cool_off_factor ** max(attempt - 1, 0)))


def why_again(lj: LocalJob, retryable_code: object = None) -> str | None:
    """Why the ended attempt of ``lj`` is worth another, from its record alone; None when it is not
    (see the module docstring).  ``retryable_code``: a callable ``code -> bool``."""
    state = lj.state
    if not state.terminal or state is LocalState.DONE:
        return None
    if "killedBy" in lj.el.attrib or lj.evidence in _FINAL_EVIDENCE:
        return None
    if state is LocalState.LOST:
        return "lost: " + (lj.get("reason") or "gone from the batch system with no evidence of how it ended")
    cause = lj.get("cause")
    if site_fault(cause):
        return EndCause(cause).describe()
    code = lj.exit_code
    if (
        state is LocalState.FAILED
        and code
        and lj.evidence == Evidence.WRAPPER_EXIT_FILE.value
        and callable(retryable_code)
        and retryable_code(code)
    ):
        return f"exit code {code} is retryable"
    return None


class Rule:
    """The retry rule of one configuration; the job types' hooks are looked up once each."""

    def __init__(self, config: Config):
        self.config = config
        self.policy = config.retry
        self._handlers: dict[str, Handler | None] = {}

    def retryable_code(self, jobtype: str, code: int) -> bool:
        if code in self.policy.exit_codes:
            return True
        handler = self._handler(jobtype)
        if handler is None:
            return False
        try:
            return bool(handler.retryable_exit_code(code))
        except Exception:  # a plug-in's bug: that job's code is simply not retryable
            log.exception("job type %s: retryable_exit_code(%d) failed", jobtype, code)
            return False

    def _handler(self, jobtype: str) -> Handler | None:
        if jobtype not in self._handlers:
            try:
                cls = get_handler_class(jobtype)
                self._handlers[jobtype] = cls(self.config.site, self.config.handler_options(jobtype))
            except Exception as e:  # an uninstalled plug-in: the site's exit codes still apply
                log.warning("job type %s: no handler to ask about retryable exit codes (%s)", jobtype, e)
                self._handlers[jobtype] = None
        return self._handlers[jobtype]

    def consider(self, rec: GridJob, lj: LocalJob, now: float) -> str | None:
        """Give ``lj`` (whose attempt just ended) another attempt if the rule says so; the reason
        when it did, else None."""
        if rec.cancel_requested:
            return None
        reason = why_again(lj, lambda code: self.retryable_code(rec.jobtype, code))
        if reason is None:
            return None
        n, limit = lj.attempt, self.policy.max_attempts
        if n >= limit:
            if limit > 1:
                lj.set("reason", f"{lj.get('reason') or reason}; no attempts left ({n} of {limit})"[:500])
            return None
        lj.new_attempt(reason, retry_after=now + cool_off(self.policy, n), at=now)
        return reason
