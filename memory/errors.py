"""Domain errors raised by services and selectors. Each dialect maps them to
its own error vocabulary; the message always says what to do next. The base
class and the errors ``policy`` raises too live in ``policy.errors``."""

from __future__ import annotations

from policy.errors import DomainError, InvalidArgument, PermissionDenied, StorageUnavailable

# Named with a trailing underscore: ``MemoryError`` is a builtin.
MemoryError_ = DomainError

__all__ = [
    "DomainError",
    "Duplicate",
    "EmbeddingUnavailable",
    "Gone",
    "InvalidArgument",
    "MemoryError_",
    "NotFound",
    "PermissionDenied",
    "QuotaExceeded",
    "StorageUnavailable",
]


class NotFound(DomainError):
    code = "NOT_FOUND"

    def __init__(self, message: str, *, memory_id: object = None) -> None:
        super().__init__(message)
        # The id that was looked for, when one was (dialects quote it).
        self.memory_id = memory_id


class EmbeddingUnavailable(DomainError):
    code = "EMBEDDING_ERROR"


class Duplicate(DomainError):
    """The same content already exists with other attributes; ``details`` names it."""

    code = "DUPLICATE"

    def __init__(self, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class Gone(DomainError):
    """A handle (an active context's cursor) that has expired."""

    code = "GONE"


class QuotaExceeded(DomainError):
    """A write would take the tenant past a quota of its policy (``quotas``);
    ``details`` names it, its limit and what is used. Nothing was stored."""

    code = "QUOTA_EXCEEDED"

    def __init__(self, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.details = details or {}
