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
    "StorageUnavailable",
]


class NotFound(DomainError):
    code = "NOT_FOUND"


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
