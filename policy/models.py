"""Who may do what: tenants (the hard boundary), principals inside them, and
hashed API tokens that authenticate a principal."""

from __future__ import annotations

import uuid
from typing import Any

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
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.principal})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """A saved token never writes ``revoked_at``: revocation is
        ``token_revoke``'s alone, and final. A revoked token may have leaked, so,
        as with mem0's and Zep's API keys, access comes back only through a new
        token. An edit that cleared the date (a change form, a crafted POST, a
        shell) or an instance loaded before a revocation elsewhere therefore
        leaves the stored date as it is; the instance is given the stored value
        back. Naming ``revoked_at`` in ``update_fields`` is a programming error.
        The database refuses any change to a set date as well (migration 0007)."""
        if self._state.adding:
            super().save(*args, **kwargs)
            return
        update_fields = kwargs.pop("update_fields", None)
        if update_fields is not None and "revoked_at" in update_fields:
            raise ValueError("an API token's revoked_at is set by policy.services.tokens.token_revoke only")
        if update_fields is None:
            update_fields = [f.name for f in self._meta.concrete_fields if not f.primary_key and f.name != "revoked_at"]
        super().save(*args, update_fields=update_fields, **kwargs)
        stored = type(self).objects.filter(pk=self.pk).values_list("revoked_at", flat=True).first()
        self.revoked_at = stored


class PolicyVersion(models.Model):
    """One version of a tenant's policy document (pce-memory v0.14.0's policy). Every version
    is kept; exactly one per tenant is current (partial unique index). A row's
    document never changes after it is written: a new policy is a new row."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="policy_versions")
    version = models.CharField(max_length=64, help_text="Semver, normalised (0.1 -> 0.1.0).")
    # Sort key for semver precedence: (major, minor, patch, release_rank).
    major = models.IntegerField()
    minor = models.IntegerField()
    patch = models.IntegerField()
    release_rank = models.SmallIntegerField(default=1, help_text="0 for a pre-release, 1 for a release.")
    source_yaml = models.TextField(help_text="The YAML as applied (what the signature covers).")
    source_sha256 = models.CharField(max_length=64)
    document = models.JSONField(help_text="The normalised policy (policy.document.PolicyDocument.to_dict()).")
    is_current = models.BooleanField(default=False)
    signed = models.BooleanField(default=False, help_text="Applied with a signature verified against the tenant key.")
    applied_by = models.UUIDField(null=True, blank=True, help_text="Principal id of whoever applied it.")
    applied_by_name = models.CharField(max_length=200, blank=True)
    approver = models.CharField(max_length=200, blank=True)
    applied_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__slug", "-major", "-minor", "-patch", "-release_rank", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "version"], name="policy_version_unique_per_tenant"),
            models.UniqueConstraint(
                fields=["tenant"], condition=models.Q(is_current=True), name="policy_one_current_per_tenant"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug} policy {self.version}{' (current)' if self.is_current else ''}"


class PolicyEvent(models.Model):
    """Append-only audit of policy applies (and refused applies), with the
    approver. ``policy`` may not import memory's event log, so it keeps its own;
    a database trigger (policy migration 0002) refuses UPDATE and DELETE."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="policy_events")
    # applied | validated | dry_run | refused | signing_key_set | signing_key_cleared
    event_type = models.CharField(max_length=32)
    version = models.CharField(max_length=64, blank=True)
    previous_version = models.CharField(max_length=64, blank=True)
    actor_principal_id = models.UUIDField(null=True, blank=True)
    # The API token of the call (Caller.token_id), as memory's audit events
    # record it: a refused apply never reaches memory's log, and a principal may
    # hold several tokens. No foreign key, so deleting a token keeps its events.
    # None for the admin's and commands' callers.
    actor_token_id = models.UUIDField(null=True, blank=True)
    actor_name = models.CharField(max_length=200, blank=True)
    approver = models.CharField(max_length=200, blank=True)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="policy_event_tenant_idx")]

    def __str__(self) -> str:
        return f"{self.event_type} {self.version}"


class PolicySigningKey(models.Model):
    """A tenant's policy signing key. With a key configured, a policy is applied
    only with ``signature`` = hex HMAC-SHA256(key, the YAML's UTF-8 bytes)
    (fail-closed, as in pce-memory v0.14.0); without one, signatures are not required."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, primary_key=True, related_name="policy_key")
    secret = models.CharField(max_length=128)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"signing key of {self.tenant.slug}"
