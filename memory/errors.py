"""Domain errors raised by services and selectors. Each dialect maps them to
its own error vocabulary; the message always says what to do next."""

from __future__ import annotations


class MemoryError_(Exception):
    """Base class (named with a trailing underscore: ``MemoryError`` is a builtin)."""

    code = "INTERNAL"


class InvalidArgument(MemoryError_):
    code = "INVALID_ARGUMENT"


class NotFound(MemoryError_):
    code = "NOT_FOUND"


class PermissionDenied(MemoryError_):
    code = "PERMISSION_DENIED"


class Conflict(MemoryError_):
    code = "CONFLICT"


class EmbeddingUnavailable(MemoryError_):
    code = "EMBEDDING_ERROR"


class StorageUnavailable(MemoryError_):
    """The database cannot be reached (an outage, a restart): retry later."""

    code = "STORAGE_ERROR"
