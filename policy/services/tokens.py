"""Issuing and authenticating API tokens; resolving tenant selectors."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from policy.caller import Caller
from policy.errors import PermissionDenied
from policy.models import ApiToken, Principal, Tenant
from policy.ratelimit import policy_generation_bump
from policy.services.tenants import tenant_get_or_create
from policy.tokencache import (
    TOKEN_CACHE_SECONDS,
    token_cache_clear,
    token_cache_epoch,
    token_cache_put,
    token_cached_caller,
)

TOKEN_PREFIX = "mp_"  # noqa: S105 - a public prefix, not a secret
MAX_TOKEN_CHARS = 200
MEMBER_SCOPES = ("read", "write")
ADMIN_SCOPES = ("read", "write", "admin")


def hash_token(token: str) -> str:
    # Tokens are 256-bit random strings, so a fast hash is enough (no brute force possible).
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass
class IssuedToken:
    token: str
    api_token: ApiToken
    created_tenant: bool
    created_principal: bool


def token_issue(
    *,
    tenant_slug: str,
    principal_name: str,
    role: str = Principal.Role.MEMBER,
    scopes: Iterable[str] | None = None,
    name: str = "",
) -> IssuedToken:
    """Create the tenant and principal if missing, then a new token for the principal."""
    if role not in Principal.Role.values:
        raise ValueError(f"role must be one of {Principal.Role.values}")
    with transaction.atomic():
        tenant, created_tenant = tenant_get_or_create(slug=tenant_slug)
        principal, created_principal = Principal.objects.get_or_create(
            tenant=tenant, name=principal_name, defaults={"role": role}
        )
        if principal.role != role and not created_principal:
            principal.role = role
            principal.save(update_fields=["role"])
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        chosen = list(scopes) if scopes is not None else list(ADMIN_SCOPES if role == "admin" else MEMBER_SCOPES)
        api_token = ApiToken.objects.create(
            principal=principal, name=name, prefix=token[:10], token_hash=hash_token(token), scopes=chosen
        )
    return IssuedToken(token, api_token, created_tenant, created_principal)


def token_authenticate(token: str) -> Caller | None:
    """The caller a bearer token stands for, or None if it is unknown, revoked or expired."""
    found = _authenticate(token)
    return None if found is None else found[0]


def _authenticate(token: str) -> tuple[Caller, datetime | None] | None:
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_CHARS:
        return None
    api_token = (
        ApiToken.objects.select_related("principal")
        .filter(token_hash=hash_token(token), revoked_at__isnull=True)
        .first()
    )
    now = timezone.now()
    if api_token is None or (api_token.expires_at is not None and api_token.expires_at <= now):
        return None
    if api_token.last_used_at is None or (now - api_token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=api_token.pk).update(last_used_at=now)
    principal = api_token.principal
    caller = Caller(
        tenant_id=principal.tenant_id,
        principal_id=principal.id,
        role=principal.role,
        scopes=frozenset(api_token.scopes),
        token_id=api_token.id,
    )
    return caller, api_token.expires_at


# --- the HTTP tier's short-lived cache (policy/tokencache.py) ---------------------


def token_authenticate_cached(token: str) -> Caller | None:
    """``token_authenticate`` through this process's short-lived cache."""
    cached = token_cached_caller(token)
    if cached is not None:
        return cached
    epoch = token_cache_epoch()
    found = _authenticate(token)
    if found is None:
        return None
    caller, expires_at = found
    lifetime = TOKEN_CACHE_SECONDS
    if expires_at is not None:
        lifetime = min(lifetime, (expires_at - timezone.now()).total_seconds())
    token_cache_put(token, caller, lifetime, epoch=epoch)
    return caller


def token_revoke(tokens: QuerySet[ApiToken]) -> int:
    """Revoke the given tokens (those not revoked yet); returns how many. This
    process forgets every cached token at once; every other web process does on
    its next request once the revocation commits (policy/tokencache.py)."""
    count = tokens.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
    if count:
        tokens_changed()
    return count


def tokens_changed() -> None:
    """Some token's validity changed (revoked, its expiry edited, deleted):
    this process forgets every cached token at once, every other web process
    on its next request once the change commits. Every path that changes a
    token calls it, so a revocation by any of them holds from the first
    request after it."""
    token_cache_clear()
    transaction.on_commit(policy_generation_bump)


def caller_for_target_tenant(*, caller: Caller, tenant: str | None, elevate: bool = False) -> Caller:
    """The tenant comes from the token, as in the butlers memory module. A non-admin naming any tenant is
    refused; an admin reaches another tenant only with an explicit elevation (a
    token with the 'elevate' scope and elevate=true). The decision only: the
    caller of this function records the elevation in the audit log."""
    if tenant is None or tenant == "":
        if elevate:
            raise PermissionDenied("elevate=true needs a target tenant; name it with the tenant argument.")
        return caller
    if not caller.may_elevate:
        raise PermissionDenied(
            "the tenant is taken from your token; only admin tokens with the 'elevate' scope may name a tenant. "
            "Remove the tenant argument."
        )
    if not elevate:
        raise PermissionDenied("cross-tenant access needs explicit elevation: pass elevate=true with the tenant.")
    target = Tenant.objects.filter(slug=tenant).first()
    if target is None:
        try:
            target = Tenant.objects.filter(pk=uuid.UUID(tenant)).first()
        except ValueError:
            target = None
    if target is None:
        raise PermissionDenied(f"no tenant {tenant!r}.")
    return caller.acting_on(target.id)
