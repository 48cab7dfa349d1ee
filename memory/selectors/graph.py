"""Reads of the tenant's knowledge graph (pce-memory v0.14.0's entities and
relations, written by memory/services/graph.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db.models import Q

from memory.models import Entity, Memory, Relation
from policy.caller import Caller


def claims_near(*, caller: Caller, claim_ids: Iterable[uuid.UUID], hops: int) -> list[uuid.UUID]:
    """Claims that share an entity with the given claims, following relations up
    to ``hops`` steps (1 or 2): activation's graph expansion."""
    seeds = list(claim_ids)
    if hops <= 0 or not seeds:
        return []
    entity_ids = set(Entity.objects.for_caller(caller).filter(claims__in=seeds).values_list("pk", flat=True))
    for _ in range(hops - 1):
        linked = (
            Relation.objects.filter(tenant_id=caller.tenant_id)
            .filter(Q(src_id__in=entity_ids) | Q(dst_id__in=entity_ids))
            .values_list("src_id", "dst_id")
        )
        entity_ids |= {end for pair in linked for end in pair}
    neighbours = (
        Memory.objects.for_caller(caller)
        .filter(entities__in=entity_ids)
        .exclude(pk__in=seeds)
        .values_list("pk", flat=True)
        .distinct()
    )
    return list(neighbours[:100])
