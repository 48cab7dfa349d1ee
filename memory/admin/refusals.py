"""The log of refused tool calls (memory.models.RefusedCall), read-only: a list
filtered by tenant, surface and API token, searched by request id, code or
tool. Like the audit log, a tenant's admins and reviewers see their tenant's
rows only, and nobody adds, changes or deletes one here."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from memory.admin.common import NoCountListMixin, TenantFilter, isolated_list
from memory.admin.events import NO_TOKEN, TokenFilter
from memory.models import RefusedCall
from policy.admin_access import ReadOnlyAdminMixin, TenantScopedAdminMixin, holds_nul
from policy.admin_actors import event_token_label, missing_principal_label, principal_labels, token_labels
from policy.models import Tenant

SEARCH_TERM_CHARS = 100


def tenant_slugs(tenant_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The slugs of these tenants, in one query (the log names its tenant by id)."""
    wanted = set(tenant_ids)
    if not wanted:
        return {}
    return dict(Tenant.objects.filter(pk__in=wanted).values_list("id", "slug"))


class RefusalTokenFilter(TokenFilter):
    """The audit log's token filter, on this log's token column."""

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        if not self.value():
            return None
        if self.value() == NO_TOKEN:
            return queryset.filter(token_id__isnull=True)
        chosen = self._chosen()
        return queryset.none() if chosen is None else queryset.filter(token_id=chosen)


@admin.register(RefusedCall)
class RefusedCallAdmin(NoCountListMixin, ReadOnlyAdminMixin, TenantScopedAdminMixin, admin.ModelAdmin):
    members_may_view = True
    list_display = ("created_at", "tenant", "toolset", "tool_name", "code", "surface", "who", "token", "message_text")
    list_filter = (TenantFilter, "surface", RefusalTokenFilter)
    search_fields = ("=request_id",)
    search_help_text = "A request id, an error code or a tool name."
    ordering = ("-id",)
    actions = None
    readonly_fields = (
        "id",
        "created_at",
        "tenant",
        "toolset",
        "tool_name",
        "code",
        "core_code",
        "surface",
        "who",
        "principal_id",
        "token",
        "token_id",
        "request_id",
        "message_text",
        "arguments",
    )
    fields = readonly_fields

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        term = (search_term or "").strip()[:SEARCH_TERM_CHARS]
        if not term:
            return queryset, False
        if holds_nul(term):
            return queryset.none(), False
        return queryset.filter(Q(request_id=term) | Q(code=term) | Q(tool=term)), False

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        # The page's principals and tokens in words, one query each.
        rows = list(changelist.result_list)
        slugs = tenant_slugs(r.tenant_id for r in rows)
        for row in rows:
            row.tenant_slug = slugs.get(row.tenant_id, "")  # type: ignore[attr-defined]
        names = principal_labels(r.principal_id for r in rows)
        labels = token_labels(r.token_id for r in rows)
        for row in rows:
            row.who_label = self._who(row, names)  # type: ignore[attr-defined]
            row.token_label = event_token_label(row.token_id, labels)  # type: ignore[attr-defined]
        return changelist

    @admin.display(description="tenant")
    def tenant(self, obj: RefusedCall) -> str:
        slug = getattr(obj, "tenant_slug", None)
        return slug if slug is not None else tenant_slugs([obj.tenant_id]).get(obj.tenant_id, "")

    @staticmethod
    def _who(row: RefusedCall, names: dict[Any, str]) -> str:
        if row.principal_id is None:
            return "no principal"
        return names.get(row.principal_id) or missing_principal_label(row.principal_id)

    @admin.display(description="principal")
    def who(self, obj: RefusedCall) -> str:
        label = getattr(obj, "who_label", None)
        return label if label is not None else self._who(obj, principal_labels([obj.principal_id]))

    @admin.display(description="token")
    def token(self, obj: RefusedCall) -> str:
        """The token's label, linked to the list of that token's refused calls."""
        label = getattr(obj, "token_label", None)
        if label is None:
            label = event_token_label(obj.token_id, token_labels([obj.token_id]))
        if obj.token_id is None:
            return label
        url = reverse("admin:memory_refusedcall_changelist")
        return format_html('<a href="{}?{}={}">{}</a>', url, RefusalTokenFilter.parameter_name, obj.token_id, label)

    # What the client sent (a tool's name, its arguments' names) and the message
    # quoting it: isolated, so a direction control cannot turn the page around.
    @admin.display(description="tool")
    def tool_name(self, obj: RefusedCall) -> str:
        return format_html('<bdi class="mp-text">{}</bdi>', obj.tool)

    @admin.display(description="message")
    def message_text(self, obj: RefusedCall) -> str:
        return format_html('<bdi class="mp-text">{}</bdi>', obj.message)

    @admin.display(description="argument names")
    def arguments(self, obj: RefusedCall) -> str:
        return isolated_list(obj.argument_names if isinstance(obj.argument_names, list) else [])
