"""The authenticated caller, resolved once per request and passed to every
service and selector. Tenant scoping reads ``tenant_id`` from here only, and
the tenant's policy (``caller.policy``) travels with it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from policy.document import PolicyDocument


@dataclass(frozen=True)
class Caller:
    tenant_id: uuid.UUID
    principal_id: uuid.UUID | None
    role: str = "member"
    scopes: frozenset[str] = field(default_factory=lambda: frozenset({"read", "write"}))
    # The API token the caller authenticated with; every audit event of its calls
    # names it. None for callers no token made: the admin's, background work's, commands'.
    token_id: uuid.UUID | None = None
    # Set when an admin acts on another tenant through explicit elevation.
    elevated_from: uuid.UUID | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def may_elevate(self) -> bool:
        """Only an admin token carrying the 'elevate' scope may reach another tenant
        (the butlers memory module's rule)."""
        return self.is_admin and "elevate" in self.scopes

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    def may_use_toolset(self, toolset: str) -> bool:
        restricted = {s.removeprefix("toolset:") for s in self.scopes if s.startswith("toolset:")}
        return not restricted or toolset in restricted

    def acting_on(self, tenant_id: uuid.UUID) -> Caller:
        # A new Caller: its policy is the target tenant's, resolved on first use.
        return replace(self, tenant_id=tenant_id, elevated_from=self.tenant_id)

    @property
    def policy(self) -> PolicyDocument:
        """The tenant's current policy, resolved on first use and then fixed for
        this Caller (one request), so every read of the request sees one version.
        The lookup is one indexed query, the parse is cached per (tenant,
        version) in ``policy.selectors.policies``.

        Not functools.cached_property: before Python 3.12 it takes one lock per
        class, so every request thread of a web process queued behind whichever
        one was running this query.
        The instance __dict__ (which a frozen dataclass leaves writable) holds the
        value; ``setdefault`` keeps the first one if two threads of one caller race."""
        cached = self.__dict__.get("policy")
        if cached is not None:
            return cached
        from policy.selectors.policies import policy_current  # models load after this module

        return self.__dict__.setdefault("policy", policy_current(tenant_id=self.tenant_id))

    def policy_if_kept(self) -> PolicyDocument | None:
        """``policy`` when it needs no query (resolved already, or this process
        keeps the tenant's current version and its document:
        ``policy_current_kept``), then fixed for this Caller as ``policy`` is;
        else None. An event loop may call it; ``policy`` may query."""
        cached = self.__dict__.get("policy")
        if cached is not None:
            return cached
        from policy.selectors.policies import policy_current_kept

        kept = policy_current_kept(tenant_id=self.tenant_id)
        return None if kept is None else self.__dict__.setdefault("policy", kept)

    def with_policy(self, policy: PolicyDocument) -> Caller:
        """This caller with a given policy (tests, dry runs, a policy resolved elsewhere)."""
        clone = replace(self)
        clone.__dict__["policy"] = policy
        return clone
