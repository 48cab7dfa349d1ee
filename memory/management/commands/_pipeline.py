"""Shared bits of the operator commands: tenant lookup and running a bounded
sweep until it reports no more work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError

from policy.models import Principal, Tenant

MAX_ROUNDS = 100_000


def tenant_by_slug(slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise CommandError(f"no tenant {slug!r}; list them with the admin or `bootstrap`.")
    return tenant


def principal_by_name(tenant: Tenant, name: str) -> Principal:
    principal = Principal.objects.filter(tenant=tenant, name=name).first()
    if principal is None:
        raise CommandError(f"no principal {name!r} in tenant {tenant.slug!r}.")
    return principal


def drain(sweep: Callable[[], Any], count: Callable[[Any], int]) -> int:
    """Run a bounded sweep until it says nothing remains (each run is one batch)."""
    total = 0
    for _ in range(MAX_ROUNDS):
        result = sweep()
        total += count(result)
        if not result.more:
            break
    return total
