"""Claims (pce-memory v0.14.0's upsert): a fact, preference, task or policy hint with its
provenance, stored through the one fact/rule store and linked into the
tenant's knowledge graph. Idempotent by content hash: the same normalized text
in the same tenant is the same claim."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from memory import validation
from memory.claims import CLAIM_KINDS, CLAIM_SCOPES, CLAIM_SUBJECT, claim_kind_of, claim_scope_of
from memory.errors import Duplicate, InvalidArgument
from memory.models import Kind, Memory
from memory.services.graph import EntityInput, RelationInput, graph_check, graph_merge
from memory.services.locks import tenant_write_lock
from memory.services.memories import fact_store, require_write, rule_store
from policy.boundary import boundary_for
from policy.caller import Caller
from policy.document import BOUNDARY_CLASSES, DEFAULT_BOUNDARY_CLASS


@dataclass
class ClaimUpsertResult:
    memory: Memory
    created: bool


def claim_upsert(
    *,
    caller: Caller,
    text: str,
    provenance: Mapping[str, Any],
    kind: str = "fact",
    scope: str = "project",
    boundary_class: str = DEFAULT_BOUNDARY_CLASS,
    entities: Sequence[EntityInput] = (),
    relations: Sequence[RelationInput] = (),
    content_hash: str | None = None,
) -> ClaimUpsertResult:
    require_write(caller)
    provenance = _provenance(provenance)
    graph_check(entities, relations)
    text = validation.text(text, field="text")
    kind = validation.choice(kind, field="kind", allowed=CLAIM_KINDS)
    scope = validation.choice(scope, field="scope", allowed=CLAIM_SCOPES)
    boundary_class = validation.choice(boundary_class, field="boundary_class", allowed=BOUNDARY_CLASSES)
    digest = validation.content_hash(text)
    if content_hash is not None and content_hash != digest:
        raise InvalidArgument(
            f"content_hash {content_hash} does not match the normalized text ({digest}); "
            "hash the text after NFC, CRLF->LF, trimming and collapsing whitespace, or leave content_hash out."
        )
    with transaction.atomic():
        tenant_write_lock(caller.tenant_id)  # memory/services/locks.py
        with connection.cursor() as cursor:  # one writer per (tenant, text): the check below cannot race
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 1))", [f"{caller.tenant_id}:{digest}"])
        existing = (
            Memory.objects.for_caller(caller)
            .retrievable(timezone.now())
            .filter(content_hash=digest, kind__in=[Kind.FACT, Kind.RULE])
            .without_vectors()
            .order_by("created_at")
            .first()
        )
        if existing is not None:
            # As a claim read shows it: another dialect's fact of scope `global` is a project claim.
            shown = (claim_kind_of(existing), claim_scope_of(existing.scope), existing.boundary_class)
            same = shown == (kind, scope, boundary_class)
            if not same and existing.boundary_class not in boundary_for(caller.policy).visible:
                # Naming a claim the caller's reads cannot see would tell its id and class.
                raise Duplicate("the same text is already stored as a claim this token cannot read; change the text.")
            if not same:
                # The id is in the details only: each surface names a memory its own way (pce: clm_...).
                raise Duplicate(
                    f"the same text is already a claim with kind {shown[0]}, scope {shown[1]} and "
                    f"boundary_class {shown[2]} (details.existing_id); reuse it or change the text.",
                    details={"existing_id": str(existing.id)},
                )
            return ClaimUpsertResult(memory=existing, created=False)
        metadata = {"claim_kind": kind, "provenance": provenance}
        if kind == "policy_hint":
            memory = rule_store(
                caller=caller, content=text, scope=scope, metadata=metadata, source="pce", boundary_class=boundary_class
            )
        else:
            memory = fact_store(
                caller=caller,
                subject=CLAIM_SUBJECT,
                predicate=digest,
                content=text,
                scope=scope,
                metadata=metadata,
                source="pce",
                boundary_class=boundary_class,
                permanence="permanent" if scope == "principle" else "stable",
            ).memory
        if entities or relations:
            graph_merge(caller=caller, claim=memory, entities=entities, relations=relations)
    return ClaimUpsertResult(memory=memory, created=True)


def _provenance(value: object) -> dict[str, Any]:
    """pce-memory's provenance, checked where the spec's schema says more than
    JSON Schema checks: ``at`` is an RFC 3339 date-time and the URLs absolute
    URIs (its ``format``s), of these only http and https ones (answers show
    them back, a reader may follow them: ``validation.http_url``). The rest of
    its shape, ``at`` being required included, is the schema's (the pce dialect
    enforces it); its size is metadata's."""
    if not isinstance(value, Mapping):
        raise InvalidArgument('provenance must be an object, e.g. {"at": "2025-01-31T12:00:00Z"}.')
    if "at" in value:
        validation.rfc3339(value["at"], field="provenance.at")
    git = value.get("git")
    git_url = git.get("url") if isinstance(git, Mapping) else None
    for path, url in (("provenance.url", value.get("url")), ("provenance.git.url", git_url)):
        if url is not None:
            validation.http_url(url, field=path)
    return dict(value)
