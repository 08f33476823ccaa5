"""One error family for rule violations raised by services."""


class ApplicationError(Exception):
    """A rule violation. `errors` maps field names (or "__all__") to messages."""

    status_code = 400

    def __init__(self, message: str, *, errors: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors or {}


class ValidationFailed(ApplicationError):
    """Input breaks a validation rule (API 400, inline form errors)."""


class ConflictError(ApplicationError):
    """The change conflicts with current state: stale version, referenced object (API 409)."""

    status_code = 409


class ServiceUnavailable(ApplicationError):
    """A service the change needs is unreachable; retrying later may succeed (API 503)."""

    status_code = 503


class NotFound(ApplicationError):
    """The object the change is about does not exist (API 404)."""

    status_code = 404


# PostgreSQL's SQLSTATEs for a transaction it aborted because it ran into another: a deadlock between two writers
# that locked the same rows in opposite orders, or a serialisation failure. Nothing of it was saved.
CONCURRENT_ABORT_STATES = frozenset({"40P01", "40001"})
CONCURRENT_ABORT_MESSAGE = (
    "Another change to the same objects was being saved at the same time; nothing was saved. Try again."
)


def concurrent_abort(exc: BaseException) -> bool:
    """Whether `exc` is the database aborting this transaction for another's sake (retrying may succeed)."""
    from django.db import OperationalError

    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    return (
        getattr(cause, "sqlstate", None) in CONCURRENT_ABORT_STATES
        or getattr(cause, "pgcode", None) in CONCURRENT_ABORT_STATES
    )
