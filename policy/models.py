"""Who may do what: tenants (the hard boundary), principals inside them, and
hashed API tokens that authenticate a principal."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models


class Tenant(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200, blank=True)
    # Issue 4: members get read-only review access in the admin only if allowed.
    members_can_review = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Principal(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        ADMIN = "admin", "Admin"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="principals")
    name = models.CharField(max_length=200)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    # A person who reviews memories in the admin logs in as this Django user.
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="principal"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="principal_unique_name_per_tenant")]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class ApiToken(models.Model):
    """Only the SHA-256 of the token is stored; the token is shown once."""

    class Scope(models.TextChoices):
        READ = "read", "Read"
        WRITE = "write", "Write"
        ADMIN = "admin", "Admin"
        ELEVATE = "elevate", "Cross-tenant elevation"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    principal = models.ForeignKey(Principal, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=16, help_text="First characters of the token, to recognise it.")
    token_hash = models.CharField(max_length=64, unique=True)
    # "read", "write", "admin", "elevate", and optionally "toolset:<name>" entries that
    # restrict the token to those toolsets (no toolset entry = every toolset).
    scopes = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.principal})"
