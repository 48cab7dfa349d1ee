"""Creating tenants. A tenant never exists without a policy: the one place that
creates tenants also gives them the default policy, in the same transaction
(tenants that existed before policies got theirs from policy migration 0003)."""

from __future__ import annotations

from django.db import transaction

from policy.models import Tenant
from policy.services.policies import policy_ensure_default


def tenant_get_or_create(*, slug: str, name: str = "") -> tuple[Tenant, bool]:
    with transaction.atomic():
        tenant, created = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
        policy_ensure_default(tenant_id=tenant.id)
    return tenant, created
