"""Tenants and identities the suites act as: tokens issued in-process, staff
logins for the admin, and the rate limit of the tenants under load."""

from __future__ import annotations

import uuid
from typing import Any

# Calls a minute the fault and load tenants may make: far above what the load
# sends, so a 429 can only mean a rate-limit bug, never a server fast enough to
# reach the default policy's 1,000.
FAULT_RATE_LIMIT = 1_000_000


def identities(prefix: str, tenants: int = 3) -> dict[str, tuple[int, str, Any]]:
    """A member and an admin (without the elevation scope) in each tenant."""
    from policy.services.tokens import token_authenticate, token_issue

    out = {}
    for index in range(tenants):
        for role in ("member", "admin"):
            issued = token_issue(tenant_slug=f"{prefix}-t{index}", principal_name=f"{role}{index}", role=role)
            caller = token_authenticate(issued.token)
            assert caller is not None
            out[f"t{index}-{role}"] = (index, str(caller.tenant_id), caller)
    return out


def http_identities(prefix: str, people: dict[str, tuple[int, str, Any]]) -> dict[str, tuple[str, Any, str]]:
    """For each identity of :func:`identities`: another bearer token of the same
    principal (for the HTTP endpoints), a staff login linked to that principal
    (the admin: a tenant admin reaches their tenant, a member nothing unless the
    tenant allows review) and its tenant's slug. who -> (token, user, slug)."""
    from django.contrib.auth.models import User

    from policy.services.tokens import token_issue

    out = {}
    for who, (index, _, caller) in people.items():
        role = "admin" if who.endswith("admin") else "member"
        slug = f"{prefix}-t{index}"
        issued = token_issue(tenant_slug=slug, principal_name=f"{role}{index}", role=role)
        principal = issued.api_token.principal
        assert principal.id == caller.principal_id
        user = User.objects.create_user(username=f"{prefix}-{who}", password=uuid.uuid4().hex, is_staff=True)
        principal.user = user
        principal.save(update_fields=["user"])
        out[who] = (issued.token, user, slug)
    return out
