"""Reads of tenant policies: the current document (cached by tenant and
version), the history, and what a change would do to memory visibility."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from typing import Any

from django.db import connection

from policy.boundary import DEFAULT_USE_TAGS, boundary_for
from policy.document import BOUNDARY_CLASSES, DEFAULT_POLICY, PolicyDocument, from_dict
from policy.models import PolicyVersion
from policy.policycache import policy_caching, policy_head_cached, policy_head_put

_CACHE_SIZE = 4096
_cache: OrderedDict[tuple[uuid.UUID, str], PolicyDocument] = OrderedDict()
_cache_lock = threading.Lock()


def _kept(tenant_id: uuid.UUID, version: str) -> PolicyDocument | None:
    """The parsed document of (tenant, version) if this process keeps it."""
    key = (tenant_id, version)
    with _cache_lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
        return found


def _cached(tenant_id: uuid.UUID, version: str, row_id: int) -> PolicyDocument:
    """(tenant, version) names one immutable document (versions are never reused),
    so a cached parse can never be stale; only the current *version* is read per request."""
    found = _kept(tenant_id, version)
    if found is not None:
        return found
    document = from_dict(PolicyVersion.objects.values_list("document", flat=True).get(pk=row_id))
    with _cache_lock:
        _cache[(tenant_id, version)] = document
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return document


def _current_head(tenant_id: uuid.UUID) -> tuple[int, str] | None:
    """(row id, version) of the tenant's current policy, or None: in the HTTP
    tier from its short-lived cache (policy/policycache.py), else one indexed lookup."""
    caching = policy_caching()
    if caching:
        head = policy_head_cached(tenant_id)
        if head is not None:
            return head
    row = PolicyVersion.objects.filter(tenant_id=tenant_id, is_current=True).values_list("id", "version").first()
    if row is None:
        return None  # not cached: the default policy written at first use must be seen at once
    if caching:
        policy_head_put(tenant_id, (row[0], row[1]))
    return row[0], row[1]


def policy_current(*, tenant_id: uuid.UUID) -> PolicyDocument:
    """The tenant's current policy: its (id, version), the parsed document from
    the cache. A tenant row made without the tenant service (a raw insert, an old
    backup) still gets the default policy, never none."""
    head = _current_head(tenant_id)
    if head is None:
        return DEFAULT_POLICY
    return _cached(tenant_id, head[1], head[0])


def policy_current_kept(*, tenant_id: uuid.UUID) -> PolicyDocument | None:
    """The tenant's current policy if this process has kept both its version
    (policy/policycache.py, the HTTP tier only) and its parsed document, else
    None: what ``policy_current`` would answer without a query, so an event loop
    may resolve it without handing the call to a worker thread."""
    if not policy_caching():
        return None
    head = policy_head_cached(tenant_id)
    return None if head is None else _kept(tenant_id, head[1])


def policy_history(*, tenant_id: uuid.UUID) -> list[PolicyVersion]:
    return list(PolicyVersion.objects.filter(tenant_id=tenant_id).order_by("-major", "-minor", "-patch", "-id"))


def boundary_class_counts(*, tenant_id: uuid.UUID) -> dict[str, int]:
    """Retrievable memories per boundary class. ``policy`` may not import memory,
    so this reads memory's table with raw SQL (its ``boundary_class`` column,
    memory migration 0013); the columns named here are part of that contract."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT boundary_class, count(*) FROM memory_memory "
            "WHERE tenant_id = %s AND validity = 'active' AND (expires_at IS NULL OR expires_at > now()) "
            "GROUP BY boundary_class",
            [tenant_id],
        )
        counts = {name: 0 for name in BOUNDARY_CLASSES}
        counts.update({name: int(n) for name, n in cursor.fetchall()})
    return counts


def probe_use_tags(*documents: PolicyDocument) -> list[str]:
    """The use tags a visibility comparison looks at: the default read tag plus
    every concrete tag either policy names (wildcards stand for too many)."""
    tags = set(DEFAULT_USE_TAGS)
    for document in documents:
        for rules in document.boundary_classes.values():
            tags.update(t for t in rules.allow if "*" not in t)
    return sorted(tags)


def visibility_changes(*, tenant_id: uuid.UUID, before: PolicyDocument, after: PolicyDocument) -> dict[str, Any]:
    """How many memories a switch from ``before`` to ``after`` changes for reads:
    for each probe use tag and class, the status (visible / redacted / denied)
    before and after, and the number of retrievable memories of each changed class."""
    counts = boundary_class_counts(tenant_id=tenant_id)
    changes: list[dict[str, Any]] = []
    changed_classes: set[str] = set()
    for tag in probe_use_tags(before, after):
        old, new = boundary_for(before, [tag]), boundary_for(after, [tag])
        for name in BOUNDARY_CLASSES:
            if old.status(name) != new.status(name):
                changed_classes.add(name)
                changes.append(
                    {
                        "use_tag": tag,
                        "boundary_class": name,
                        "before": old.status(name),
                        "after": new.status(name),
                        "memories": counts[name],
                    }
                )
    return {
        "memories_changing_visibility": sum(counts[name] for name in changed_classes),
        "memories_by_class": counts,
        "changes": changes,
    }


def policy_is_applied(*, tenant_id: uuid.UUID) -> bool:
    """Whether the tenant has a current policy of its own. Every tenant gets the
    default at creation; a tenant without one (a raw insert, a restored backup)
    reads with the built-in default, and pce's fail-closed tools refuse it."""
    return _current_head(tenant_id) is not None
