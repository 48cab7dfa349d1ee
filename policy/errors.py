"""Domain errors shared by every layer. ``policy`` sits below ``memory``, so the
base class lives here; each dialect maps ``code`` to its own vocabulary and the
message always says what to do next. The policy engine's own errors carry pce-memory's
codes (INVALID_POLICY, UNAUTHORIZED, ...)."""

from __future__ import annotations


class DomainError(Exception):
    code = "INTERNAL"


class PermissionDenied(DomainError):
    code = "PERMISSION_DENIED"


class InvalidArgument(DomainError):
    code = "INVALID_ARGUMENT"


class StorageUnavailable(DomainError):
    """The database could not be reached or refused the statement."""

    code = "STORAGE_ERROR"


class PolicyError(DomainError):
    code = "INTERNAL"


class PolicyInvalid(PolicyError):
    """The YAML does not parse or does not validate. ``problems`` holds one
    ``(key path, message)`` pair per offending key, so a client can point at it."""

    code = "INVALID_POLICY"

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        # The same problems, structured, for the dialects that answer with details.
        self.details = {"problems": [{"path": path, "message": message} for path, message in problems]}
        super().__init__("; ".join(f"{path}: {message}" if path else message for path, message in problems))


class PolicyConflict(PolicyError):
    """A stale ``expected_version`` or a version number that is not newer."""

    code = "CONFLICT"


class PolicyUnauthorized(PolicyError):
    """Not a tenant admin, or a missing / bad signature where a key is configured."""

    code = "UNAUTHORIZED"


class InvalidUseTag(PolicyError):
    code = "INVALID_ARGUMENT"
