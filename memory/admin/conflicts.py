"""Conflict candidates the semantic check found: a list to accept (the newer
memory supersedes the other) or dismiss, each through the service."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from memory.admin.common import BulkAction, NoCountListMixin, TenantFilter, memory_anchor, run_bulk, run_review
from memory.models import ConflictCandidate
from memory.services.conflicts import conflict_accept, conflict_dismiss
from policy.admin_access import TenantScopedAdminMixin, admin_access


# --- conflict candidates --------------------------------------------------------------------------
@admin.register(ConflictCandidate)
class ConflictCandidateAdmin(NoCountListMixin, TenantScopedAdminMixin, admin.ModelAdmin):
    members_may_view = True
    list_display = ("created_at", "tenant", "kind", "status", "memory_link", "other_link", "similarity", "reason")
    list_select_related = ("tenant",)
    list_filter = (TenantFilter, "status", "kind")
    ordering = ("-created_at", "id")
    actions = ("action_accept", "action_dismiss")
    readonly_fields = (
        "id",
        "tenant",
        "memory_link",
        "other_link",
        "kind",
        "similarity",
        "reason",
        "status",
        "created_at",
        "resolved_at",
        "resolved_by",
    )
    fields = readonly_fields

    @admin.display(description="memory (newer)")
    def memory_link(self, obj: ConflictCandidate) -> str:
        return memory_anchor(obj.memory_id)

    @admin.display(description="other")
    def other_link(self, obj: ConflictCandidate) -> str:
        return memory_anchor(obj.other_id)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_review_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        access = admin_access(request)
        return access is not None and access.can_write and self._in_reach(access, obj)

    def _resolve(self, request: HttpRequest, queryset: QuerySet, action: str) -> None:
        service = conflict_accept if action == "conflict_accept" else conflict_dismiss

        def review(candidate: ConflictCandidate) -> None:
            run_review(
                request,
                tenant_id=candidate.tenant_id,
                action=action,
                memory=None,
                detail={"conflict": str(candidate.pk)},
                call=lambda c: service(caller=c, conflict_id=candidate.pk),
            )

        done = "accepted" if action == "conflict_accept" else "dismissed"
        run_bulk(self, request, queryset, action=BulkAction(done, ("conflict", "conflicts")), review=review)

    @admin.action(description="Accept selected (newer supersedes other)", permissions=["review"])
    def action_accept(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._resolve(request, queryset, "conflict_accept")

    @admin.action(description="Dismiss selected", permissions=["review"])
    def action_dismiss(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._resolve(request, queryset, "conflict_dismiss")
