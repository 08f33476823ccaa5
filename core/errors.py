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
