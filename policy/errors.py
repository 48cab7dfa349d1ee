"""Domain errors shared by every layer. ``policy`` sits below ``memory``, so the
base class lives here; each dialect maps ``code`` to its own vocabulary and the
message always says what to do next."""

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
