"""The authenticated caller, resolved once per request and passed to every
service and selector. Tenant scoping reads ``tenant_id`` from here only."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Caller:
    tenant_id: uuid.UUID
    principal_id: uuid.UUID | None
    role: str = "member"
    scopes: frozenset[str] = field(default_factory=lambda: frozenset({"read", "write"}))
    token_id: uuid.UUID | None = None
    # Set when an admin acts on another tenant through explicit elevation.
    elevated_from: uuid.UUID | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def may_elevate(self) -> bool:
        """Seed 000: only an admin token carrying the 'elevate' scope may reach another tenant."""
        return self.is_admin and "elevate" in self.scopes

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    def may_use_toolset(self, toolset: str) -> bool:
        restricted = {s.removeprefix("toolset:") for s in self.scopes if s.startswith("toolset:")}
        return not restricted or toolset in restricted

    def acting_on(self, tenant_id: uuid.UUID) -> Caller:
        return replace(self, tenant_id=tenant_id, elevated_from=self.tenant_id)
