"""The audit log, read-only: a list filtered by tenant, event type and API
token, searched by memory id, exported as CSV. The database refuses changes too."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from django.urls import reverse
from django.utils.html import format_html

from memory.admin.common import (
    NoCountListMixin,
    TenantFilter,
    actor_label,
    csv_response,
    json_text,
    memory_anchor,
    with_actor_labels,
)
from memory.models import MemoryEvent
from memory.services.events import EventType
from policy.admin_access import ReadOnlyAdminMixin, TenantScopedAdminMixin, admin_access
from policy.admin_actors import event_token_label, missing_token_label, principal_labels, token_label, token_labels
from policy.models import ApiToken

KNOWN_EVENT_TYPES = tuple(EventType.values)  # the one list (memory/services/events.py)


class EventTypeFilter(admin.SimpleListFilter):
    """A fixed list: a DISTINCT over the audit log would scan it."""

    title = "event type"
    parameter_name = "event_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(t, t) for t in KNOWN_EVENT_TYPES]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        return queryset.filter(event_type=self.value()) if self.value() else None


NO_TOKEN = "none"  # noqa: S105 - a filter choice, not a secret
TOKEN_CHOICES_MAX = 200


class TokenFilter(admin.SimpleListFilter):
    """What one API token did: the tokens of the tenants the user sees (a
    revoked one too), "no token" for the admin's, background work's and
    commands' events, and any token id in the URL, a deleted token's included
    (the list's token links carry it)."""

    title = "API token"
    parameter_name = "token"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        access = admin_access(request)
        if access is None:
            return []
        visible = (
            ApiToken.objects.filter(principal__tenant__in=access.tenants())
            .select_related("principal")
            .only("id", "prefix", "name", "revoked_at", "principal__name")
        )
        tokens = visible.order_by("principal__name", "-created_at")[:TOKEN_CHOICES_MAX]
        choices = [(str(t.pk), f"{t.principal.name}: {token_label(t)}") for t in tokens]
        chosen = self._chosen()
        if chosen is not None and str(chosen) not in {value for value, _ in choices}:
            # A token beyond the list, or deleted, is still shown as the selected
            # choice; named only if its tenant is one the user sees.
            token = visible.filter(pk=chosen).first()
            choices.append((str(chosen), token_label(token) if token else missing_token_label(chosen)))
        return [(NO_TOKEN, "no token"), *choices]

    def _chosen(self) -> uuid.UUID | None:
        try:
            return uuid.UUID(self.value() or "")
        except ValueError:
            return None

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        if not self.value():
            return None
        if self.value() == NO_TOKEN:
            return queryset.filter(actor_token_id__isnull=True)
        chosen = self._chosen()
        return queryset.none() if chosen is None else queryset.filter(actor_token_id=chosen)


# --- audit events (read-only) ---------------------------------------------------------------
@admin.register(MemoryEvent)
class MemoryEventAdmin(NoCountListMixin, ReadOnlyAdminMixin, TenantScopedAdminMixin, admin.ModelAdmin):
    members_may_view = True
    list_display = ("created_at", "tenant", "event_type", "memory_link", "memory_kind", "actor", "token")
    list_select_related = ("tenant",)
    list_filter = (TenantFilter, EventTypeFilter, TokenFilter)
    search_fields = ("=memory_id",)
    search_help_text = "A memory id."
    ordering = ("-id",)
    actions = ("export_csv",)
    readonly_fields = (
        "id",
        "tenant",
        "memory_id",
        "memory_kind",
        "event_type",
        "actor",
        "actor_principal_id",
        "token",
        "actor_token_id",
        "payload_json",
        "created_at",
    )
    # Only these: the payload is shown as JSON (payload_json), not also as the model's field.
    fields = readonly_fields

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        term = (search_term or "").strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(memory_id=uuid.UUID(term)), False
        except ValueError:
            return queryset.filter(event_type=term), False

    @admin.display(description="payload")
    def payload_json(self, obj: MemoryEvent) -> str:
        return json_text(obj.payload)

    @admin.display(description="memory")
    def memory_link(self, obj: MemoryEvent) -> str:
        return memory_anchor(obj.memory_id)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        # The page's rows (the queryset keeps them) with their actors' names and
        # their tokens' labels, in one query each.
        rows = with_actor_labels(list(changelist.result_list))
        labels = token_labels(e.actor_token_id for e in rows)
        for event in rows:
            event.token_label = event_token_label(event.actor_token_id, labels)  # type: ignore[attr-defined]
        return changelist

    @admin.display(description="actor")
    def actor(self, obj: MemoryEvent) -> str:
        label = getattr(obj, "actor_label", None)
        return label if label is not None else actor_label(obj, principal_labels([obj.actor_principal_id]))

    @admin.display(description="token")
    def token(self, obj: MemoryEvent) -> str:
        """The token's label, linked to the list of everything that token did."""
        label = getattr(obj, "token_label", None)
        if label is None:
            label = event_token_label(obj.actor_token_id, token_labels([obj.actor_token_id]))
        if obj.actor_token_id is None:
            return label
        url = reverse("admin:memory_memoryevent_changelist")
        return format_html('<a href="{}?{}={}">{}</a>', url, TokenFilter.parameter_name, obj.actor_token_id, label)

    @admin.action(description="Export selected as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet) -> StreamingHttpResponse:
        rows = queryset.select_related("tenant").order_by("-id")
        return csv_response(
            "memory-events.csv",
            [
                "id",
                "tenant",
                "event_type",
                "memory_id",
                "memory_kind",
                "actor_principal_id",
                "actor_token_id",
                "payload",
                "created_at",
            ],
            (
                [
                    e.pk,
                    e.tenant.slug,
                    e.event_type,
                    e.memory_id or "",
                    e.memory_kind,
                    e.actor_principal_id or "",
                    e.actor_token_id or "",
                    # As the store holds it (JSON), not Python's repr of the dict ({'a': None}).
                    json.dumps(e.payload, ensure_ascii=False),
                    e.created_at.isoformat(),
                ]
                for e in rows.iterator(chunk_size=500)
            ),
        )
