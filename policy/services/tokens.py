"""Issuing and authenticating API tokens; resolving tenant selectors."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from policy.caller import Caller
from policy.errors import PermissionDenied
from policy.models import ApiToken, Principal, Tenant
from policy.services.tenants import tenant_get_or_create

TOKEN_PREFIX = "mp_"  # noqa: S105 - a public prefix, not a secret
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
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
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


# --- the HTTP tier's short-lived cache ----------------------------------------------
# Every stateless MCP request carries its bearer token; looking it up cost a
# worker-thread hop and one or two queries per request. A web process keeps what
# it verified for TOKEN_CACHE_SECONDS (never past the token's expiry); a
# revocation through token_revoke clears this process's cache at once, and other
# processes (more web workers) notice within TOKEN_CACHE_SECONDS. Unknown tokens
# are never cached, so a flood of made-up tokens cannot fill it.
TOKEN_CACHE_SECONDS = 5.0
_TOKEN_CACHE_MAX = 10_000
_token_cache: dict[str, tuple[float, Caller]] = {}
_token_cache_lock = threading.Lock()


def token_cached_caller(token: str) -> Caller | None:
    """The caller this process verified for ``token`` within the cache window, if any."""
    entry = _token_cache.get(token)
    if entry is None or entry[0] <= time.monotonic():
        return None
    # A copy: a Caller fixes its tenant policy on first use, and that must stay per request.
    return replace(entry[1])


def token_authenticate_cached(token: str) -> Caller | None:
    """``token_authenticate`` through this process's short-lived cache."""
    cached = token_cached_caller(token)
    if cached is not None:
        return cached
    found = _authenticate(token)
    if found is None:
        return None
    caller, expires_at = found
    lifetime = TOKEN_CACHE_SECONDS
    if expires_at is not None:
        lifetime = min(lifetime, (expires_at - timezone.now()).total_seconds())
    with _token_cache_lock:
        if len(_token_cache) >= _TOKEN_CACHE_MAX:
            _token_cache.clear()
        _token_cache[token] = (time.monotonic() + lifetime, replace(caller))
    return caller


def token_cache_clear() -> None:
    with _token_cache_lock:
        _token_cache.clear()


def token_revoke(tokens: QuerySet[ApiToken]) -> int:
    """Revoke the given tokens (those not revoked yet); returns how many."""
    count = tokens.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
    token_cache_clear()
    return count


def caller_for_target_tenant(*, caller: Caller, tenant: str | None, elevate: bool = False) -> Caller:
    """Seed 000: the tenant comes from the token. A non-admin naming any tenant is
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
