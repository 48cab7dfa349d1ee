"""Admin fixtures: the roles every permission test needs, as staff logins: a
tenant admin and a member of tenant A, the admin of tenant B (the outsider),
and a superuser."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User

from policy.caller import Caller
from policy.models import Principal, Tenant
from policy.services.tokens import token_issue


@dataclass
class Staff:
    user: User
    principal: Principal | None
    tenant: Tenant | None

    @property
    def caller(self) -> Caller:
        assert self.principal is not None
        return Caller(
            tenant_id=self.principal.tenant_id,
            principal_id=self.principal.id,
            role=self.principal.role,
            scopes=frozenset({"read", "write", "admin"}),
        )


PASSWORD = "correct horse battery staple"


def make_staff(username: str, tenant_slug: str, role: str) -> Staff:
    issued = token_issue(tenant_slug=tenant_slug, principal_name=username, role=role)
    principal = issued.api_token.principal
    user = User.objects.create_user(username=username, password=PASSWORD, is_staff=True)
    principal.user = user
    principal.save(update_fields=["user"])
    return Staff(user, principal, principal.tenant)


@pytest.fixture
def admin_a(db) -> Staff:
    return make_staff("alice", "tenant-a", "admin")


@pytest.fixture
def member_a(db, admin_a) -> Staff:
    return make_staff("mark", "tenant-a", "member")


@pytest.fixture
def admin_b(db) -> Staff:
    return make_staff("bob", "tenant-b", "admin")


@pytest.fixture
def superuser(db) -> Staff:
    user = User.objects.create_superuser(username="root", password=PASSWORD, email="root@example.com")
    return Staff(user, None, None)
