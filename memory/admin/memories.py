"""Reviewing memories: the list (hybrid search, scope and fact-state filters),
the detail page with scores, supersession chain, sources, conflicts and audit
trail, the review actions posted from it, and the list actions. List pages
never count the table and never load the vector columns."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, cast

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Case, IntegerField, Q, QuerySet, Value, When
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from memory.admin.adding import memory_add_view
from memory.admin.common import (
    BulkAction,
    NoCountListMixin,
    TenantFilter,
    csv_response,
    isolated_list,
    json_text,
    run_bulk,
    run_review,
    with_actor_labels,
)
from memory.admin.imports import memory_import_view
from memory.errors import MemoryError_
from memory.models import (
    ConflictCandidate,
    EmbeddingStatus,
    Kind,
    LinkKind,
    Maturity,
    Memory,
    MemoryEvent,
    MemoryLink,
    MemoryQuerySet,
    Validity,
)
from memory.read_model import memory_view
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.conflicts import conflict_accept, conflict_dismiss
from memory.services.memories import memory_confirm, memory_forget, memory_restore, memory_supersede
from memory.services.review import memory_reembed, rule_set_maturity
from policy.admin_access import TenantScopedAdminMixin, admin_access, holds_nul, read_caller, require_tenant
from policy.caller import Caller

SEARCH_TENANT_CAP = 25
SEARCH_LIMIT = 100
CHAIN_CAP = 25
SCOPE_SAMPLE = 2000
# What the detail page's review forms post: an action, and an id or a maturity
# with it (the reason is cut to 200 characters where it is read).
REVIEW_ACTIONS = (
    "confirm",
    "retract",
    "restore",
    "supersede",
    "set_maturity",
    "reembed",
    "conflict_accept",
    "conflict_dismiss",
)
REVIEW_FIELDS = ("action", "replacement", "maturity", "conflict")
REVIEW_FIELD_CHARS = 100


class ScopeFilter(admin.SimpleListFilter):
    """Scopes seen in a bounded sample of rows (no ORDER BY, so PostgreSQL stops
    after SCOPE_SAMPLE rows): a DISTINCT over the whole table would scan it on
    every list page. ``?scope=<any>`` still filters by a scope not offered."""

    title = "scope"
    parameter_name = "scope"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        sample = model_admin.get_queryset(request).order_by().values_list("scope", flat=True)[:SCOPE_SAMPLE]
        scopes = {"global", *sample}
        if self.value():
            scopes.add(self.value())
        return [(s, s) for s in sorted(scopes)[:50]]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        return queryset.filter(scope=self.value()) if self.value() else None


class FactStateFilter(admin.SimpleListFilter):
    """Active facts by effective confidence (the states memory_stats reports)."""

    title = "fact state"
    parameter_name = "fact_state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("active", "active"), ("fading", "fading"), ("expired", "expired")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        value = self.value()
        if value not in ("active", "fading", "expired"):
            return None
        return cast(MemoryQuerySet, queryset).in_fact_state(value, timezone.now())


class MemoryReviewError(Exception):
    pass


# --- memories -------------------------------------------------------------------------------------
@admin.register(Memory)
class MemoryAdmin(NoCountListMixin, TenantScopedAdminMixin, admin.ModelAdmin):
    members_may_view = True
    # Compact columns (a rule's maturity under its kind, a pending embedding under
    # the validity, the date over the time) so the list fits beside the side
    # navigation and the filters in a 1400 px window.
    list_display = (
        "short_content",
        "kind_and_maturity",
        "boundary",
        "tenant",
        "status",
        "scope",
        "references",
        "created",
    )
    list_display_links = ("short_content",)
    list_select_related = ("tenant",)
    list_filter = (
        TenantFilter,
        "kind",
        "boundary_class",
        "validity",
        "maturity",
        ScopeFilter,
        FactStateFilter,
        "embedding_status",
    )
    search_fields = ("content",)  # shows the box; get_search_results replaces the lookup
    search_help_text = "Hybrid (semantic + keyword) search over active memories, as the tools search; or a memory id."
    ordering = ("-created_at", "id")
    actions = ("action_confirm", "action_retract", "action_restore", "action_reembed", "export_csv")
    change_form_template = "admin/memory/memory/review_form.html"
    fieldsets = (
        (None, {"fields": ("id", "tenant", "principal", "kind", "boundary_class", "content")}),
        ("Status", {"fields": ("validity", "superseded_by", "importance", "confidence", "permanence", "decay_rate")}),
        ("Fact", {"fields": ("subject", "predicate")}),
        (
            "Rule",
            {
                "fields": (
                    "maturity",
                    "success_count",
                    "harmful_count",
                    "applied_count",
                    "effectiveness_score",
                    "last_applied_at",
                )
            },
        ),
        (
            "Partition",
            {"fields": ("scope", "namespace", "butler", "session_id", "tag_list", "source", "metadata_json")},
        ),
        (
            "Lifecycle",
            {
                "fields": (
                    "last_confirmed_at",
                    "expires_at",
                    "consolidated_at",
                    "last_referenced_at",
                    "created_at",
                    "updated_at",
                )
            },
        ),
        ("Embedding", {"fields": ("embedding_status", "embedding_model", "embedding_attempts", "embedding_error")}),
    )

    def get_list_display(self, request: HttpRequest) -> Any:
        access = admin_access(request)
        if access is not None and not access.is_superuser:
            return [f for f in self.list_display if f != "tenant"]  # one tenant: the column says nothing
        return self.list_display

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        # Only the sections that apply to this kind of memory.
        by_kind: dict[str, set[str]] = {"fact": {"Rule"}, "rule": {"Fact"}, "episode": {"Fact", "Rule"}}
        skip = by_kind.get(str(getattr(obj, "kind", "")), set())
        return [section for section in self.fieldsets if section[0] not in skip]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).defer("embedding", "search_vector")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [f for section in self.fieldsets for f in section[1]["fields"]]

    # Memories change only through review actions (services), never through the form.
    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # retract instead: the row stays for audit

    def has_review_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        access = admin_access(request)
        return access is not None and access.can_write and self._in_reach(access, obj)

    @admin.display(description="content")
    def short_content(self, obj: Memory) -> str:
        text = obj.content if len(obj.content) <= 90 else obj.content[:87] + "..."
        return text

    @admin.display(description="tags")
    def tag_list(self, obj: Memory) -> str:
        return isolated_list(obj.tags)

    @admin.display(description="metadata")
    def metadata_json(self, obj: Memory) -> str:
        return json_text(obj.metadata)

    @admin.display(description="kind", ordering="kind")
    def kind_and_maturity(self, obj: Memory) -> str:
        if obj.kind == Kind.RULE and obj.maturity:
            maturity = obj.get_maturity_display().lower()
            return format_html('{}<br><span class="mp-muted">{}</span>', obj.get_kind_display(), maturity)
        return obj.get_kind_display()

    @admin.display(description="boundary", ordering="boundary_class")
    def boundary(self, obj: Memory) -> str:
        return obj.boundary_class

    @admin.display(description="status", ordering="validity")
    def status(self, obj: Memory) -> str:
        if obj.embedding_status == EmbeddingStatus.READY:
            return obj.get_validity_display()
        embedding = f"embedding {obj.embedding_status}"
        return format_html('{}<br><span class="mp-muted">{}</span>', obj.get_validity_display(), embedding)

    @admin.display(description="refs", ordering="reference_count")
    def references(self, obj: Memory) -> int:
        return obj.reference_count

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Memory) -> str:
        when = timezone.localtime(obj.created_at)
        return format_html('{}<br><span class="mp-muted">{}</span>', when.strftime("%Y-%m-%d"), when.strftime("%H:%M"))

    # --- search: the hybrid search of the tools -------------------------------------------
    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        term = (search_term or "").strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(pk=uuid.UUID(term)), False
        except ValueError:
            pass
        access = admin_access(request)
        if access is None:
            return queryset.none(), False
        selected = request.GET.get("tenant")
        tenants = access.tenants()
        if selected:
            try:
                tenants = tenants.filter(pk=uuid.UUID(selected))
            except ValueError:
                return queryset.none(), False
        tenant_ids = list(tenants.values_list("pk", flat=True)[: SEARCH_TENANT_CAP + 1])
        if len(tenant_ids) > SEARCH_TENANT_CAP:
            messages.info(request, f"Searching the first {SEARCH_TENANT_CAP} tenants; pick a tenant to narrow it.")
            tenant_ids = tenant_ids[:SEARCH_TENANT_CAP]
        ranked: list[tuple[float, uuid.UUID]] = []
        for tenant_id in tenant_ids:
            try:
                hits = memory_search(
                    caller=read_caller(request, tenant_id), query=SearchQuery(term, limit=SEARCH_LIMIT)
                )
            except MemoryError_ as exc:
                messages.error(request, str(exc))
                return queryset.none(), False
            ranked += [(hit.score, hit.memory.pk) for hit in hits]
        ranked.sort(key=lambda pair: -pair[0])
        ids = [pk for _, pk in ranked[:SEARCH_LIMIT]]
        if not ids:
            return queryset.none(), False
        rank = Case(*[When(pk=pk, then=Value(i)) for i, pk in enumerate(ids)], output_field=IntegerField())
        return queryset.filter(pk__in=ids).annotate(search_rank=rank).order_by("search_rank"), False

    # --- detail page ---------------------------------------------------------------------------
    def _same_tenant(self, obj: Memory) -> QuerySet:
        return Memory.objects.filter(tenant_id=obj.tenant_id).without_vectors()

    def _chain(self, obj: Memory) -> tuple[list[Memory], list[Memory]]:
        """(what this memory was replaced by, newest last; what it replaced, nearest first)."""
        forward: list[Memory] = []
        seen = {obj.pk}
        current = obj
        while current.superseded_by_id and len(forward) < CHAIN_CAP:
            nxt = self._same_tenant(obj).filter(pk=current.superseded_by_id).first()
            if nxt is None or nxt.pk in seen:
                break
            forward.append(nxt)
            seen.add(nxt.pk)
            current = nxt
        backward: list[Memory] = []
        frontier = [obj.pk]
        while frontier and len(backward) < CHAIN_CAP:
            older = list(
                self._same_tenant(obj)
                .filter(superseded_by_id__in=frontier)
                .exclude(pk__in=seen)
                .order_by("-created_at")[: CHAIN_CAP - len(backward)]
            )
            backward += older
            seen.update(m.pk for m in older)
            frontier = [m.pk for m in older]
        return forward, backward

    def _detail_context(self, request: HttpRequest, obj: Memory) -> dict[str, Any]:
        view = memory_view(obj)
        forward, backward = self._chain(obj)
        links = MemoryLink.objects.filter(tenant_id=obj.tenant_id)
        sources = [
            link.to_memory
            for link in links.filter(from_memory=obj, kind=LinkKind.DERIVED_FROM)
            .select_related("to_memory")
            .defer("to_memory__embedding", "to_memory__search_vector")
            .order_by("to_memory__created_at")[:100]
        ]
        derived = [
            link.from_memory
            for link in links.filter(to_memory=obj, kind=LinkKind.DERIVED_FROM)
            .select_related("from_memory")
            .defer("from_memory__embedding", "from_memory__search_vector")[:100]
        ]
        conflicts = list(
            ConflictCandidate.objects.filter(tenant_id=obj.tenant_id)
            .filter(Q(memory=obj) | Q(other=obj))
            .select_related("memory", "other")
            .defer("memory__embedding", "memory__search_vector", "other__embedding", "other__search_vector")
            .order_by("-created_at")[:50]
        )
        events = with_actor_labels(
            list(MemoryEvent.objects.filter(tenant_id=obj.tenant_id, memory_id=obj.pk).order_by("-id")[:200])
        )
        for event in events:
            event.payload_json = json_text(event.payload)  # type: ignore[attr-defined]
        return {
            "memory": obj,
            "scores": {
                "effective_confidence": view.effective_confidence,
                "fact_state": view.fact_state,
                "effectiveness": view.effectiveness,
                "reference_count": obj.reference_count,
                "importance": obj.importance,
                "confidence": obj.confidence,
            },
            "superseded_by_chain": forward,
            "supersedes_chain": backward,
            "source_episodes": sources,
            "derived_memories": derived,
            "conflicts": conflicts,
            "events": events,
            "can_review": self.has_review_permission(request, obj),
            "maturities": Maturity.choices,
            "is_rule": obj.kind == Kind.RULE,
            "is_active": obj.validity == Validity.ACTIVE,
            "review_url": reverse("admin:memory_memory_review", args=[obj.pk]),
        }

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # A form of its own (memory.admin.adding): a memory is stored through the
        # services, never saved from the model form.
        return memory_add_view(self, request)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        obj = cast(Memory, self.get_object(request, object_id))
        require_tenant(request, obj.tenant_id)
        context = {**(extra_context or {}), **self._detail_context(request, obj)}
        return super().change_view(request, object_id, form_url, extra_context=context)

    # --- review endpoint (POST from the detail page) --------------------------------------------
    def get_urls(self) -> list[Any]:
        custom = [
            path("import/", self.admin_site.admin_view(self.import_view), name="memory_memory_import"),
            path("<path:object_id>/review/", self.admin_site.admin_view(self.review_view), name="memory_memory_review"),
        ]
        return custom + super().get_urls()

    def import_view(self, request: HttpRequest) -> HttpResponse:
        # memory.admin.imports: a thin caller of the import service, with a dry run first.
        return memory_import_view(self, request)

    def review_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponse(status=405, headers={"Allow": "POST"})
        obj = cast(Memory, self.get_object(request, object_id))  # 404 outside the user's tenants
        if not self.has_review_permission(request, obj):
            raise PermissionDenied("Read-only review access.")
        action = request.POST.get("action", "")
        back = reverse("admin:memory_memory_change", args=[obj.pk])
        if any(holds_nul(value) for _, values in request.POST.lists() for value in values):
            # An id with one would reach the alias lookup of memory_pk and fail its query.
            messages.error(request, "A review cannot carry a NUL character: nothing was changed.")
            return HttpResponseRedirect(back)
        if any(len(request.POST.get(name, "")) > REVIEW_FIELD_CHARS for name in REVIEW_FIELDS):
            # The services quote a value they refuse: 50 KB typed as a replacement
            # id came back whole in the message, kept in the session until shown.
            messages.error(
                request, f"A review field holds at most {REVIEW_FIELD_CHARS} characters: nothing was changed."
            )
            return HttpResponseRedirect(back)
        try:
            message = self._review(request, obj, action)
        except MemoryError_ as exc:
            messages.error(request, f"{action}: {exc}")
        except MemoryReviewError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, message)
        return HttpResponseRedirect(back)

    def _review(self, request: HttpRequest, obj: Memory, action: str) -> str:
        tenant_id = obj.tenant_id
        simple: dict[str, tuple[Callable[[Caller], Any], str]] = {
            "confirm": (
                lambda c: memory_confirm(caller=c, kind=obj.kind, memory_id=obj.pk),
                "Confirmed: its confidence decays from now on.",
            ),
            "retract": (
                lambda c: memory_forget(caller=c, kind=obj.kind, memory_id=obj.pk),
                "Retracted: retrieval no longer returns it.",
            ),
            "restore": (lambda c: memory_restore(caller=c, memory_id=obj.pk), "Restored to active."),
        }
        if action in simple:
            call, message = simple[action]
            run_review(request, tenant_id=tenant_id, action=action, memory=obj, call=call)
            return message
        if action == "supersede":
            replacement = request.POST.get("replacement", "").strip()
            reason = request.POST.get("reason", "").strip()[:200] or "admin review"
            run_review(
                request,
                tenant_id=tenant_id,
                action=action,
                memory=obj,
                detail={"replacement": replacement},
                call=lambda c: memory_supersede(caller=c, old_id=obj.pk, new_id=replacement, reason=reason),
            )
            return f"Superseded by {replacement}."
        if action == "set_maturity":
            maturity = request.POST.get("maturity", "")
            run_review(
                request,
                tenant_id=tenant_id,
                action=action,
                memory=obj,
                detail={"maturity": maturity},
                call=lambda c: rule_set_maturity(caller=c, rule_id=obj.pk, maturity=maturity, reason="admin review"),
            )
            return f"Maturity set to {maturity}."
        if action == "reembed":
            _, done = run_review(
                request,
                tenant_id=tenant_id,
                action=action,
                memory=obj,
                call=lambda c: memory_reembed(caller=c, memory_id=obj.pk),
            )
            return "Re-embedded." if done else "Marked for re-embedding; the embedding worker will retry."
        if action in ("conflict_accept", "conflict_dismiss"):
            return self._review_conflict(request, obj.tenant_id, request.POST.get("conflict", ""), action)
        raise MemoryReviewError(f"Unknown review action; the page sends one of {', '.join(REVIEW_ACTIONS)}.")

    def _review_conflict(self, request: HttpRequest, tenant_id: uuid.UUID, conflict_id: str, action: str) -> str:
        try:
            pk = uuid.UUID(conflict_id)
        except ValueError:
            raise MemoryReviewError("No such conflict candidate.") from None
        candidate = get_object_or_404(ConflictCandidate, pk=pk, tenant_id=tenant_id)
        service = conflict_accept if action == "conflict_accept" else conflict_dismiss
        run_review(
            request,
            tenant_id=tenant_id,
            action=action,
            memory=None,
            detail={"conflict": str(candidate.pk)},
            call=lambda c: service(caller=c, conflict_id=candidate.pk),
        )
        return (
            "Conflict accepted: the newer memory supersedes the other."
            if action == "conflict_accept"
            else "Conflict dismissed."
        )

    # --- list actions (each row through the service) -------------------------------------------
    def _bulk(
        self,
        request: HttpRequest,
        queryset: QuerySet,
        action: str,
        done: str,
        call: Callable[[Caller, Memory], Any],
    ) -> None:
        def review(memory: Memory) -> None:
            run_review(
                request, tenant_id=memory.tenant_id, action=action, memory=memory, call=lambda c: call(c, memory)
            )

        rows = queryset.defer("embedding", "search_vector")
        run_bulk(self, request, rows, action=BulkAction(done, ("memory", "memories")), review=review)

    @admin.action(description="Confirm selected facts/rules", permissions=["review"])
    def action_confirm(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(
            request,
            queryset,
            "confirm",
            "confirmed",
            lambda c, m: memory_confirm(caller=c, kind=m.kind, memory_id=m.pk),
        )

    @admin.action(description="Retract selected memories", permissions=["review"])
    def action_retract(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(
            request,
            queryset,
            "retract",
            "retracted",
            lambda c, m: memory_forget(caller=c, kind=m.kind, memory_id=m.pk),
        )

    @admin.action(description="Restore selected memories", permissions=["review"])
    def action_restore(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "restore", "restored", lambda c, m: memory_restore(caller=c, memory_id=m.pk))

    @admin.action(description="Re-embed selected memories", permissions=["review"])
    def action_reembed(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(
            request,
            queryset,
            "reembed",
            "sent for re-embedding",
            lambda c, m: memory_reembed(caller=c, memory_id=m.pk),
        )

    @admin.action(description="Export selected as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet) -> StreamingHttpResponse:
        # The queryset comes from get_queryset: only the user's tenants, no vectors.
        rows = queryset.select_related("tenant").defer("embedding", "search_vector").order_by("-created_at", "id")
        return csv_response(
            "memories.csv",
            ["id", "tenant", "kind", "validity", "maturity", "scope", "subject", "predicate", "content", "created_at"],
            (
                [
                    m.pk,
                    m.tenant.slug,
                    m.kind,
                    m.validity,
                    m.maturity,
                    m.scope,
                    m.subject,
                    m.predicate,
                    m.content,
                    m.created_at.isoformat(),
                ]
                for m in rows.iterator(chunk_size=500)
            ),
        )
