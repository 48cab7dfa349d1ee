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


# The column's width: a longer key was cut to it, so two entities whose keys
# differ only past it were merged into one.
CANONICAL_KEY_MAX = Entity._meta.get_field("canonical_key").max_length or 500


def canonical_key_for(entity: EntityInput) -> str:
    """The client's canonical key, else type + the name folded (NFKC, casefold,
    blanks collapsed), so "Stripe" and "stripe " are one Artifact."""
    if entity.canonical_key.strip():
        return entity.canonical_key.strip()
    folded = " ".join(unicodedata.normalize("NFKC", entity.name).casefold().split())
    return f"{entity.type.lower()}:{folded}"


def graph_check(entities: Sequence[EntityInput], relations: Sequence[RelationInput]) -> None:
    """Everything a merge stores, bounded before anything is read or written:
    the counts, each entity's type, name, canonical key and attributes, each
    relation's type and props (JSON as metadata is)."""
    if len(entities) > MAX_ENTITIES or len(relations) > MAX_RELATIONS:
        raise InvalidArgument(f"at most {MAX_ENTITIES} entities and {MAX_RELATIONS} relations per claim.")
    for index, item in enumerate(entities):
        where = f"entities[{index}]"
        if item.type not in EntityType.values:
            raise InvalidArgument(f"entity type must be one of {', '.join(EntityType.values)}.")
        validation.text(item.name, field="entity name", max_chars=500)
        if item.canonical_key.strip():
            validation.text(item.canonical_key, field=f"{where}.canonical_key", max_chars=CANONICAL_KEY_MAX)
        elif len(canonical_key_for(item)) > CANONICAL_KEY_MAX:
            raise InvalidArgument(
                f"{where}: the canonical_key its type and name make is {len(canonical_key_for(item))} characters; "
                f"the limit is {CANONICAL_KEY_MAX}. Send a shorter canonical_key."
            )
        validation.metadata(item.attrs, field=f"{where}.attrs")
    for index, rel in enumerate(relations):
        validation.text(rel.type, field="relation type", max_chars=200)
        validation.metadata(rel.props, field=f"relations[{index}].props")


def _merged(stored: Mapping[str, Any], given: Mapping[str, Any], *, field: str) -> dict[str, Any]:
    """A later mention's attributes over the stored ones, within the JSON limit
    (each mention is bounded; what they add up to is too)."""
    return validation.metadata({**stored, **given}, field=f"{field} merged with the stored ones")


def graph_merge(
    *, caller: Caller, claim: Memory, entities: Sequence[EntityInput], relations: Sequence[RelationInput]
) -> dict[str, Entity]:
    """Upsert entities and relations evidenced by ``claim`` (inside the caller's
    transaction). Returns the entities by the client's ref."""
    graph_check(entities, relations)
    by_ref: dict[str, Entity] = {}
    with transaction.atomic():
        for index, item in enumerate(entities):
            name = validation.text(item.name, field="entity name", max_chars=500)
            entity, created = Entity.objects.select_for_update().get_or_create(
                tenant_id=caller.tenant_id,
                canonical_key=canonical_key_for(item),
                defaults={"type": item.type, "name": name, "attrs": dict(item.attrs or {})},
            )
            if not created and item.attrs:
                entity.attrs = _merged(entity.attrs, item.attrs, field=f"entities[{index}].attrs")
                entity.save(update_fields=["attrs", "updated_at"])
            entity.claims.add(claim)
            by_ref[item.ref] = entity
        for index, rel in enumerate(relations):
            src, dst = _resolve(caller, by_ref, rel.src_ref), _resolve(caller, by_ref, rel.dst_ref)
            relation, created = Relation.objects.get_or_create(
                tenant_id=caller.tenant_id,
                src=src,
                dst=dst,
                type=validation.text(rel.type, field="relation type", max_chars=200),
                defaults={"props": dict(rel.props or {}), "evidence": claim},
            )
            if not created and rel.props:
                relation.props = _merged(relation.props, rel.props, field=f"relations[{index}].props")
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
        # Quoted short: the ref is the client's, up to the tool's payload limit.
        shown = ref if len(ref) <= 80 else ref[:77] + "..."
        raise InvalidArgument(f"relation end {shown!r} is neither an entity of this request nor a known entity id.")
    return found
