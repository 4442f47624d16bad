"""jim's exceptions, and the GRAM error number each one is reported as.

Only the command line turns an exception into protocol lines (``ERROR=<n>`` and
``MESSAGE=<one line>``: :mod:`jim.protocol`) and an exit code; everything below raises.

::

    JimError                      message, cause, transient, gram_error
    ├── DescriptionError          the job description is unusable        (48 BAD_RSL)
    │   ├── RslSyntaxError        RSL text that does not parse           (48 BAD_RSL)
    │   ├── UnknownAttribute      attribute nobody declared              (1 PARAMETER_NOT_SUPPORTED)
    │   ├── InvalidAttribute      declared attribute, bad value          (134 RSL_SCHEDULER_SPECIFIC)
    │   ├── InvalidCount          count is not a positive integer        (14 INVALID_COUNT)
    │   └── UnknownJobType        no handler for the job type            (134 RSL_SCHEDULER_SPECIFIC)
    ├── PlanError                 no acceptable split for this site      (134 RSL_SCHEDULER_SPECIFIC)
    ├── ConfigError               the site configuration is wrong        (47 GATEKEEPER_MISCONFIGURED)
    ├── JobNotFound               no grid job with that id               (156 JOB_CONTACT_NOT_FOUND)
    ├── LockTimeout               a lock was not obtained in time        (158 LOCKING_STATE_LOCK_FILE, transient)
    ├── DatabaseError             a record cannot be read or written     (123 WRITING_STATE_FILE)
    │   └── RecordTooNew          written by a newer jim's schema        (123, never FAILED for it)
    └── BatchError                a batch-system command failed          (17 JOB_EXECUTION_FAILED)
        ├── SubmitError           submission failed                      (17)
        ├── QueryError            a status query failed (never a state)  (17, transient)
        └── CancelError           a local job could not be stopped       (31 JOB_CANCEL_FAILED)

``transient`` is the only thing retry logic looks at: a transient error may
succeed when tried again, a permanent one will not.
"""

from __future__ import annotations

from typing import Any


class GramError:
    """The GRAM protocol error numbers jim uses (globus_gram_protocol_constants.h)."""

    PARAMETER_NOT_SUPPORTED = 1
    NO_RESOURCES = 3
    BAD_DIRECTORY = 4
    EXECUTABLE_NOT_FOUND = 5
    STDIN_NOT_FOUND = 11
    USER_CANCELLED = 8
    INVALID_COUNT = 14
    JOB_EXECUTION_FAILED = 17
    INVALID_JOBTYPE = 19
    INVALID_SCRIPT_STATUS = 25
    JOBTYPE_NOT_SUPPORTED = 26
    UNIMPLEMENTED = 27
    JOB_CANCEL_FAILED = 31
    INVALID_HOST_COUNT = 35
    INVALID_QUEUE = 37
    INVALID_PROJECT = 38
    BAD_ARGUMENTS = 46
    GATEKEEPER_MISCONFIGURED = 47
    BAD_RSL = 48
    RSL_ARGUMENTS = 50
    RSL_DIRECTORY = 52
    RSL_ENVIRONMENT = 54
    RSL_EXECUTABLE = 55
    RSL_HOST_COUNT = 56
    RSL_PROJECT = 61
    RSL_STDIN = 64
    EXECUTABLE_PERMISSIONS = 72
    UNDEFINED_EXE = 81
    RSL_MIN_MEMORY = 84
    RSL_MAX_MEMORY = 85
    INVALID_MIN_MEMORY = 86
    INVALID_MAX_MEMORY = 87
    RSL_MAX_CPU_TIME = 103
    INVALID_MAX_CPU_TIME = 104
    WRITING_STATE_FILE = 123
    USER_PROXY_EXPIRED = 131
    RSL_SCHEDULER_SPECIFIC = 134
    UNDEFINED_ATTRIBUTE = 148
    JOB_CONTACT_NOT_FOUND = 156
    LOCKING_STATE_LOCK_FILE = 158
    INVALID_ATTR = 159


class JimError(Exception):
    """Base of every error jim raises on purpose.

    ``message`` is one line meant for the person at the other end of the
    gatekeeper; ``cause`` keeps the underlying exception for the log.
    """

    gram_error: int = GramError.JOB_EXECUTION_FAILED
    transient: bool = False

    def __init__(
        self,
        message: str,
        *,
        cause: BaseException | None = None,
        gram_error: int | None = None,
        transient: bool | None = None,
    ):
        super().__init__(message)
        self.message = " ".join(str(message).split())  # always one line
        self.cause = cause
        if gram_error is not None:
            self.gram_error = gram_error
        if transient is not None:
            self.transient = transient

    def __str__(self) -> str:
        return self.message


class DescriptionError(JimError):
    gram_error = GramError.BAD_RSL


class RslSyntaxError(DescriptionError):
    gram_error = GramError.BAD_RSL


class UnknownAttribute(DescriptionError):
    gram_error = GramError.PARAMETER_NOT_SUPPORTED


class InvalidAttribute(DescriptionError):
    gram_error = GramError.RSL_SCHEDULER_SPECIFIC


class InvalidCount(DescriptionError):
    gram_error = GramError.INVALID_COUNT


class UnknownJobType(DescriptionError):
    gram_error = GramError.RSL_SCHEDULER_SPECIFIC


class PlanError(JimError):
    gram_error = GramError.RSL_SCHEDULER_SPECIFIC


class CredentialRefused(JimError):
    """The credential the front end handed over cannot be used (unreadable, malformed, expired ...)."""


class ConfigError(JimError):
    gram_error = GramError.GATEKEEPER_MISCONFIGURED


class JobNotFound(JimError):
    gram_error = GramError.JOB_CONTACT_NOT_FOUND


class LockTimeout(JimError):
    gram_error = GramError.LOCKING_STATE_LOCK_FILE
    transient = True


class DatabaseError(JimError):
    gram_error = GramError.WRITING_STATE_FILE


class RecordTooNew(DatabaseError):
    """A record (or the index) of a schema version newer than this jim reads: left alone, untouched,
    never the grid job's failure (see docs/upgrades.md)."""


class BatchError(JimError):
    """A batch-system command failed; carries everything needed to debug it."""

    gram_error = GramError.JOB_EXECUTION_FAILED

    def __init__(
        self,
        message: str,
        *,
        argv: list[str] | tuple[str, ...] = (),
        returncode: int | None = None,
        stdout: str = "",
        stderr: str = "",
        **kw: Any,
    ):
        super().__init__(message, **kw)
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def details(self) -> str:
        """The full story, for the log (never for the protocol line)."""
        return (
            f"{self.message}\n  argv: {self.argv!r}\n  exit code: {self.returncode}\n"
            f"  stdout: {self.stdout!r}\n  stderr: {self.stderr!r}"
        )


class SubmitError(BatchError):
    gram_error = GramError.JOB_EXECUTION_FAILED


class QueryError(BatchError):
    transient = True


class CancelError(BatchError):
    gram_error = GramError.JOB_CANCEL_FAILED
