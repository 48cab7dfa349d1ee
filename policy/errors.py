"""Errors raised by the policy engine. ``policy`` sits below ``memory`` and may
not import its error classes, so it has its own base; every dialect maps
``code`` to its own vocabulary exactly as it does for memory's errors (the
codes are seed 004's: INVALID_POLICY, UNAUTHORIZED, ...)."""

from __future__ import annotations


class PolicyError(Exception):
    code = "INTERNAL"


class PolicyInvalid(PolicyError):
    """The YAML does not parse or does not validate. ``problems`` holds one
    ``(key path, message)`` pair per offending key, so a client can point at it."""

    code = "INVALID_POLICY"

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{path}: {message}" if path else message for path, message in problems))


class PolicyConflict(PolicyError):
    """A stale ``expected_version`` or a version number that is not newer."""

    code = "CONFLICT"


class PolicyUnauthorized(PolicyError):
    """Not a tenant admin, or a missing / bad signature where a key is configured."""

    code = "UNAUTHORIZED"


class InvalidUseTag(PolicyError):
    code = "VALIDATION_ERROR"
