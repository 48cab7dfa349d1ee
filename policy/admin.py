"""Admin for tenants, principals and API tokens. Access: policy.admin_access."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from policy.admin_access import TenantScopedAdminMixin, admin_access
from policy.admin_policies import PolicyEventAdmin, PolicyVersionAdmin  # noqa: F401  (registers them)
from policy.models import ApiToken, Principal, Tenant
from policy.services.tenants import tenant_get_or_create
from policy.services.tokens import token_issue, token_revoke, tokens_changed


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    tenant_field = "id"
    tenant_admin_may_add = False
    list_display = ("slug", "name", "members_can_review", "created_at", "dashboard_link")
    search_fields = ("slug", "name")
    readonly_fields = ("id", "created_at", "dashboard_link")
    fields = ("id", "slug", "name", "members_can_review", "created_at", "dashboard_link")

    @admin.display(description="Dashboard")
    def dashboard_link(self, obj: Tenant) -> str:
        if obj.pk is None:
            return "-"
        return format_html('<a href="/admin/dashboard/{}/">dashboard</a>', obj.slug)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The audit log refuses deletes; `manage.py purge` removes a tenant's data, audited.
        return False

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        # A new tenant gets its default policy in the same transaction (no unconfigured tenant).
        tenant, _ = tenant_get_or_create(slug=obj.slug, name=obj.name)
        Tenant.objects.filter(pk=tenant.pk).update(members_can_review=obj.members_can_review)
        obj.__dict__.update({k: v for k, v in tenant.__dict__.items() if not k.startswith("_")})
        obj._state.adding = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        access = admin_access(request)
        if access is not None and not access.is_superuser:
            fields.append("slug")  # the slug names the tenant in tokens and tools
        return fields


@admin.register(Principal)
class PrincipalAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ("name", "tenant", "role", "user", "created_at")
    list_select_related = ("tenant", "user")
    list_filter = ("role",)
    search_fields = ("name", "tenant__slug")
    readonly_fields = ("id", "created_at")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Right to be forgotten is `manage.py purge` (memories and events too, audited),
        # not a bare row delete that would leave the principal's memories behind.
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        access = admin_access(request)
        if access is not None and not access.is_superuser:
            # Linking a login to a principal grants that login the principal's
            # tenant; only a superuser hands out admin logins.
            fields.append("user")
            if obj is not None:
                fields.append("tenant")
        return fields


class TokenCreateForm(forms.ModelForm):
    scope_choices = forms.MultipleChoiceField(
        label="Scopes",
        choices=ApiToken.Scope.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=["read", "write"],
        help_text="'admin' covers read and write; 'elevate' (cross-tenant access) can be granted by superusers only.",
    )
    toolsets = forms.CharField(
        required=False, help_text="Optional: comma-separated toolset names this token is restricted to."
    )

    class Meta:
        model = ApiToken
        fields = ("principal", "name")

    def __init__(self, *args: Any, allow_elevate: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not allow_elevate:
            field = self.fields["scope_choices"]
            assert isinstance(field, forms.MultipleChoiceField)
            field.choices = [c for c in ApiToken.Scope.choices if c[0] != "elevate"]

    def scopes(self) -> list[str]:
        chosen = list(self.cleaned_data["scope_choices"])
        toolsets = [t.strip() for t in (self.cleaned_data.get("toolsets") or "").split(",") if t.strip()]
        return chosen + [f"toolset:{t}" for t in toolsets]


class TokenChangeForm(forms.ModelForm):
    """A token's page: its name and expiry may change. Its revocation date is
    shown read-only: a revocation is final (``ApiToken.save`` never writes it),
    and revoking goes through ``token_revoke``, as the list's action does."""

    revoke = forms.BooleanField(
        required=False,
        label="Revoke this token",
        help_text="Final: a revoked token is never accepted again. To restore access, issue a new token.",
    )

    class Meta:
        model = ApiToken
        fields = ("name", "expires_at")


@admin.register(ApiToken)
class ApiTokenAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """Create issues a token through ``token_issue``: the plaintext is shown once
    in a message and only its SHA-256 is stored."""

    tenant_field = "principal__tenant_id"
    tenant_admin_may_delete = True
    list_display = (
        "prefix",
        "principal",
        "name",
        "scopes",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
        "events_link",
    )
    list_select_related = ("principal", "principal__tenant")
    search_fields = ("prefix", "name", "principal__name")
    readonly_fields = (
        "id",
        "principal",
        "prefix",
        "scopes",
        "created_at",
        "revoked_at",
        "last_used_at",
        "events_link",
    )
    fields = (
        "id",
        "principal",
        "name",
        "prefix",
        "scopes",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
        "events_link",
    )
    actions = ("revoke_tokens",)

    @admin.display(description="Audit events")
    def events_link(self, obj: ApiToken) -> str:
        """The memory audit log filtered by this token (its ``token`` filter in
        memory/admin/events.py; policy may not import memory, so the URL is
        built from the page's name). Only rows get_queryset lets the user see
        reach here, and that list shows only the user's tenants' events."""
        if obj.pk is None:
            return "-"
        url = reverse("admin:memory_memoryevent_changelist")
        return format_html('<a href="{}?{}">events of this token</a>', url, urlencode({"token": str(obj.pk)}))

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is not None:
            kwargs["form"] = TokenChangeForm
            return super().get_form(request, obj, change=change, **kwargs)
        access = admin_access(request)
        allow_elevate = access is not None and access.is_superuser
        kwargs["form"] = TokenCreateForm
        form_class = super().get_form(request, obj, change=change, **kwargs)

        class BoundCreateForm(form_class):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kw: Any) -> None:
                super().__init__(*args, allow_elevate=allow_elevate, **kw)

        return BoundCreateForm

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ("principal", "name", "scope_choices", "toolsets")
        if obj.revoked_at is None:
            return (*self.fields, "revoke")
        return self.fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            # ApiToken.save keeps the stored revoked_at whatever the POST said.
            super().save_model(request, obj, form, change)
            if form.cleaned_data.get("revoke"):
                token_revoke(ApiToken.objects.filter(pk=obj.pk))
                obj.refresh_from_db(fields=["revoked_at"])
            tokens_changed()  # an edited expiry holds at once, as token_revoke's revocation does
            return
        principal: Principal = form.cleaned_data["principal"]
        issued = token_issue(
            tenant_slug=principal.tenant.slug,
            principal_name=principal.name,
            role=principal.role,
            scopes=form.scopes(),
            name=form.cleaned_data.get("name") or "",
        )
        # The admin's own bookkeeping (log entry, redirect) follows the saved row.
        obj.__dict__.update({k: v for k, v in issued.api_token.__dict__.items() if not k.startswith("_")})
        obj._state.adding = False
        request._memproj_issued_token = issued.token  # type: ignore[attr-defined]

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        if change:
            super().save_related(request, form, formsets, change)

    def response_add(self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None) -> HttpResponse:
        token = getattr(request, "_memproj_issued_token", None)
        if token:
            messages.warning(
                request,
                format_html(
                    'New token for {}: <code id="issued-token">{}</code> — copy it now; it is not stored and '
                    "will not be shown again.",
                    obj.principal,
                    token,
                ),
            )
        return super().response_add(request, obj, post_url_continue)

    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        super().delete_model(request, obj)
        tokens_changed()

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        super().delete_queryset(request, queryset)
        tokens_changed()

    @admin.action(description="Revoke selected tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        # The queryset comes from get_queryset, so only the user's tenant's tokens.
        count = token_revoke(queryset)
        self.message_user(request, f"Revoked {count} token." if count == 1 else f"Revoked {count} tokens.")
