"""The tenant's knowledge graph (pce-memory v0.14.0): entities merged by canonical key,
typed relations between them, each linked to the claim that evidences it."""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from memory import validation
from memory.errors import InvalidArgument
from memory.models import Entity, EntityType, Memory, Relation
from policy.caller import Caller

MAX_ENTITIES = 100
MAX_RELATIONS = 200


@dataclass(frozen=True)
class EntityInput:
    ref: str  # the id the client gave it, for relations in the same request
    type: str
    name: str
    canonical_key: str = ""
    attrs: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RelationInput:
    src_ref: str
    dst_ref: str
    type: str
    props: Mapping[str, Any] | None = None


def canonical_key_for(entity: EntityInput) -> str:
    """The client's canonical key, else type + the name folded (NFKC, casefold,
    blanks collapsed), so "Stripe" and "stripe " are one Artifact."""
    if entity.canonical_key.strip():
        return entity.canonical_key.strip()
    folded = " ".join(unicodedata.normalize("NFKC", entity.name).casefold().split())
    return f"{entity.type.lower()}:{folded}"


def graph_merge(
    *, caller: Caller, claim: Memory, entities: Sequence[EntityInput], relations: Sequence[RelationInput]
) -> dict[str, Entity]:
    """Upsert entities and relations evidenced by ``claim`` (inside the caller's
    transaction). Returns the entities by the client's ref."""
    if len(entities) > MAX_ENTITIES or len(relations) > MAX_RELATIONS:
        raise InvalidArgument(f"at most {MAX_ENTITIES} entities and {MAX_RELATIONS} relations per claim.")
    by_ref: dict[str, Entity] = {}
    with transaction.atomic():
        for item in entities:
            if item.type not in EntityType.values:
                raise InvalidArgument(f"entity type must be one of {', '.join(EntityType.values)}.")
            name = validation.text(item.name, field="entity name", max_chars=500)
            key = canonical_key_for(item)[:500]
            entity, created = Entity.objects.select_for_update().get_or_create(
                tenant_id=caller.tenant_id,
                canonical_key=key,
                defaults={"type": item.type, "name": name, "attrs": dict(item.attrs or {})},
            )
            if not created and item.attrs:
                entity.attrs = {**entity.attrs, **item.attrs}
                entity.save(update_fields=["attrs", "updated_at"])
            entity.claims.add(claim)
            by_ref[item.ref] = entity
        for rel in relations:
            src, dst = _resolve(caller, by_ref, rel.src_ref), _resolve(caller, by_ref, rel.dst_ref)
            relation, created = Relation.objects.get_or_create(
                tenant_id=caller.tenant_id,
                src=src,
                dst=dst,
                type=validation.text(rel.type, field="relation type", max_chars=200),
                defaults={"props": dict(rel.props or {}), "evidence": claim},
            )
            if not created and rel.props:
                relation.props = {**relation.props, **rel.props}
                relation.save(update_fields=["props"])
    return by_ref


def _resolve(caller: Caller, by_ref: Mapping[str, Entity], ref: str) -> Entity:
    """A relation end: an entity of this request, or an existing entity of the tenant by id."""
    if ref in by_ref:
        return by_ref[ref]
    try:
        found = Entity.objects.for_caller(caller).filter(pk=uuid.UUID(ref)).first()
    except ValueError:
        found = None
    if found is None:
        raise InvalidArgument(f"relation end {ref!r} is neither an entity of this request nor a known entity id.")
    return found
