"""The per-tenant review dashboard: memory_stats plus a few bounded aggregates,
drawn server-side as inline SVG and CSS bars (no scripts, no CDN)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.db.models.functions import TruncDate
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.utils import timezone

from memory.admin.common import with_actor_labels
from memory.models import ConflictCandidate, ConflictStatus, EmbeddingStatus, Kind, Memory, MemoryEvent
from memory.selectors.memories import memory_stats
from policy.admin_access import admin_access, read_caller, require_tenant
from policy.models import Tenant

DAYS = 30
# One colour per kind: the chart draws every Kind (roampal's book chunks too).
KIND_COLOURS: dict[str, str] = {
    Kind.EPISODE: "#79aec8",
    Kind.FACT: "#417690",
    Kind.RULE: "#e0a040",
    Kind.DOCUMENT: "#8a8a8a",
}
BACKLOG_BUCKETS = (
    ("< 1 h", timedelta(hours=1)),
    ("1-6 h", timedelta(hours=6)),
    ("6-24 h", timedelta(days=1)),
    ("1-3 d", timedelta(days=3)),
    ("3-7 d", timedelta(days=7)),
    ("> 7 d", None),
)


def _bars(items: list[tuple[str, int]], colour: str = "#417690") -> list[dict[str, Any]]:
    """Rows for a CSS bar chart: label, value, width in percent of the largest."""
    top = max((v for _, v in items), default=0)
    return [
        {"label": label, "value": value, "pct": round(100.0 * value / top, 1) if top else 0.0, "colour": colour}
        for label, value in items
    ]


def _per_day_chart(tenant: Tenant, now: Any) -> dict[str, Any]:
    """Memories created per day and kind over the last DAYS days, as SVG geometry.
    Bounded by the time window, so it reads the tenant/created_at index range only."""
    start = (now - timedelta(days=DAYS - 1)).date()
    rows = (
        Memory.objects.filter(tenant=tenant, created_at__gte=datetime.combine(start, time.min, tzinfo=UTC))
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day", "kind")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts: dict[tuple[date, str], int] = {(r["day"], r["kind"]): r["n"] for r in rows}
    days = [start + timedelta(days=i) for i in range(DAYS)]
    totals = [sum(counts.get((d, k), 0) for k in Kind.values) for d in days]
    top = max(totals, default=0) or 1
    width, height, pad_left, pad_bottom = 720, 200, 36, 22
    plot_h = height - pad_bottom - 10
    slot = (width - pad_left - 20) / DAYS  # 20 px on the right for the last label
    bar_w = max(2.0, slot - 4)
    bars = []
    for i, d in enumerate(days):
        y = float(height - pad_bottom)
        x = pad_left + i * slot + 2
        for kind in Kind.values:
            n = counts.get((d, kind), 0)
            if not n:
                continue
            h = plot_h * n / top
            y -= h
            bars.append(
                {
                    "x": round(x, 1),
                    "y": round(y, 1),
                    "w": round(bar_w, 1),
                    "h": round(h, 1),
                    "colour": KIND_COLOURS[kind],
                    "title": f"{d.isoformat()} {kind}: {n}",
                }
            )
    labels = [
        {"x": round(pad_left + i * slot + slot / 2, 1), "text": d.strftime("%m-%d")}
        for i, d in enumerate(days)
        if i % 5 == 0 or i == DAYS - 1
    ]
    return {
        "width": width,
        "height": height,
        "bars": bars,
        "labels": labels,
        "top": top,
        "axis_y": height - pad_bottom,
        "pad_left": pad_left,
        "top_y": height - pad_bottom - plot_h,
        "total": sum(totals),
        "legend": [{"kind": k, "colour": c} for k, c in KIND_COLOURS.items()],
    }


def _backlog(tenant: Tenant, now: Any) -> list[dict[str, Any]]:
    """Unconsolidated live episodes by age, in one aggregate."""
    waiting = Memory.objects.retrievable(now).filter(tenant=tenant, kind=Kind.EPISODE, consolidated_at__isnull=True)
    aggregates: dict[str, Any] = {}
    lower = None
    for i, (_, upper) in enumerate(BACKLOG_BUCKETS):
        cond = Q()
        if upper is not None:
            cond &= Q(created_at__gt=now - upper)
        if lower is not None:
            cond &= Q(created_at__lte=now - lower)
        aggregates[f"b{i}"] = Count("id", filter=cond)
        lower = upper
    result = waiting.aggregate(**aggregates)
    return _bars([(label, result[f"b{i}"]) for i, (label, _) in enumerate(BACKLOG_BUCKETS)], "#79aec8")


def _humanize_seconds(seconds: float) -> str:
    if seconds <= 0:
        return "none waiting"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def dashboard_index(request: HttpRequest) -> HttpResponse:
    access = admin_access(request)
    if access is None:
        raise PermissionDenied("No review access.")
    tenants = list(access.tenants().only("id", "slug", "name")[:500])
    if len(tenants) == 1:
        return redirect("memproj_dashboard", slug=tenants[0].slug)
    context = {**admin.site.each_context(request), "title": "Memory dashboards", "tenants": tenants}
    return TemplateResponse(request, "admin/memproj/dashboard_index.html", context)


def dashboard(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = get_object_or_404(Tenant, slug=slug)
    require_tenant(request, tenant.pk)  # 404 for a tenant the user cannot see
    now = timezone.now()
    stats = memory_stats(caller=read_caller(request, tenant.pk))
    embedding = (
        Memory.objects.filter(tenant=tenant)
        .exclude(embedding_status=EmbeddingStatus.READY)
        .aggregate(
            pending=Count("id", filter=Q(embedding_status=EmbeddingStatus.PENDING)),
            failed=Count("id", filter=Q(embedding_status=EmbeddingStatus.FAILED)),
        )
    )
    conflicts = ConflictCandidate.objects.filter(tenant=tenant, status=ConflictStatus.OPEN)
    conflict_counts = conflicts.aggregate(
        total=Count("id"),
        duplicate=Count("id", filter=Q(kind="duplicate")),
        contradiction=Count("id", filter=Q(kind="contradiction")),
    )
    recent_conflicts = list(
        conflicts.select_related("memory", "other")
        .defer("memory__embedding", "memory__search_vector", "other__embedding", "other__search_vector")
        .order_by("-created_at")[:10]
    )
    rules = stats["rules"]
    facts = stats["facts"]
    context = {
        **admin.site.each_context(request),
        "title": f"Dashboard: {tenant.slug}",
        "tenant": tenant,
        "stats": stats,
        "per_day": _per_day_chart(tenant, now),
        "backlog": _backlog(tenant, now),
        "backlog_age": _humanize_seconds(stats["episodes"]["backlog_age_seconds"]),
        "maturity": _bars([(m, rules[m]) for m in ("candidate", "established", "proven", "anti_pattern")], "#e0a040"),
        "fact_states": _bars([(s, facts[s]) for s in ("active", "fading", "expired", "superseded", "retracted")]),
        "embedding": embedding,
        "conflict_counts": conflict_counts,
        "recent_conflicts": recent_conflicts,
        "recent_events": with_actor_labels(list(MemoryEvent.objects.filter(tenant=tenant).order_by("-id")[:10])),
        "can_write": admin_access(request).can_write,  # type: ignore[union-attr]
    }
    return TemplateResponse(request, "admin/memproj/dashboard.html", context)
