"""The audit log, read-only: a list filtered by tenant and event type, searched
by memory id, exported as CSV. The database refuses changes too."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse

from memory.admin.common import (
    NoCountListMixin,
    TenantFilter,
    actor_label,
    csv_response,
    memory_anchor,
    with_actor_labels,
)
from memory.models import MemoryEvent
from memory.services.events import EventType
from policy.admin_access import ReadOnlyAdminMixin, TenantScopedAdminMixin
from policy.admin_actors import principal_labels

KNOWN_EVENT_TYPES = tuple(EventType.values)  # the one list (memory/services/events.py)


class EventTypeFilter(admin.SimpleListFilter):
    """A fixed list: a DISTINCT over the audit log would scan it."""

    title = "event type"
    parameter_name = "event_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(t, t) for t in KNOWN_EVENT_TYPES]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        return queryset.filter(event_type=self.value()) if self.value() else None


# --- audit events (read-only) ---------------------------------------------------------------
@admin.register(MemoryEvent)
class MemoryEventAdmin(NoCountListMixin, ReadOnlyAdminMixin, TenantScopedAdminMixin, admin.ModelAdmin):
    members_may_view = True
    list_display = ("created_at", "tenant", "event_type", "memory_link", "memory_kind", "actor")
    list_select_related = ("tenant",)
    list_filter = (TenantFilter, EventTypeFilter)
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
        "payload",
        "created_at",
    )

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        term = (search_term or "").strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(memory_id=uuid.UUID(term)), False
        except ValueError:
            return queryset.filter(event_type=term), False

    @admin.display(description="memory")
    def memory_link(self, obj: MemoryEvent) -> str:
        return memory_anchor(obj.memory_id)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        # The page's rows (the queryset keeps them) with their actors' names, in one query.
        with_actor_labels(list(changelist.result_list))
        return changelist

    @admin.display(description="actor")
    def actor(self, obj: MemoryEvent) -> str:
        label = getattr(obj, "actor_label", None)
        return label if label is not None else actor_label(obj, principal_labels([obj.actor_principal_id]))

    @admin.action(description="Export selected as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet) -> StreamingHttpResponse:
        rows = queryset.select_related("tenant").order_by("-id")
        return csv_response(
            "memory-events.csv",
            ["id", "tenant", "event_type", "memory_id", "memory_kind", "actor_principal_id", "payload", "created_at"],
            (
                [
                    e.pk,
                    e.tenant.slug,
                    e.event_type,
                    e.memory_id or "",
                    e.memory_kind,
                    e.actor_principal_id or "",
                    e.payload,
                    e.created_at.isoformat(),
                ]
                for e in rows.iterator(chunk_size=500)
            ),
        )
