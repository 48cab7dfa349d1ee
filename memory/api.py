"""The core surface a dialect adapter imports (issue 8). A dialect validates its
own argument shapes, calls what is named here, and shapes its answer; it never
imports models, scoring or other core modules, so every rule (supersession,
outcome counters, scopes, namespaces, TTLs, boundary classes, ranking) exists
once, behind this surface.

Writes: ``episode_store`` (``episodes_store_bulk`` for an import), ``fact_store`` (keyed by subject+predicate, by a
subject alone, or keyless), ``rule_store``, ``memory_supersede``,
``memory_confirm``, ``memory_forget``, ``fact_retract_by_key``, ``memory_feedback``.
Reads: ``memory_search`` (what to find: a ``SearchQuery``), ``memory_recall``, ``build_context``, ``memory_get``,
``memory_fetch`` (no side effects), ``memory_stats``, ``conflicts_open_for``,
``memory_list_recent``, ``memory_similar``, ``memory_supersedes_map``,
``fact_get_by_key``, ``namespaces_list``; ``memory_search_accessed`` and
``memory_list_recent_accessed`` also move ``accessed_at`` of what they return.
roampal v0.3.5's collections: ``working_store``, ``takeaway_store``, ``memory_bank_store``,
``memory_bank_update``, ``collection_forget``, ``collection_score``, ``book_ingest`` /
``book_progress``, the hooked conversation's ``exchange_*``; reads ``collection_search``, ``collection_get``,
``collection_ids``, ``known_context`` and ``display_id``.
Ids: ``memory_pk`` resolves an id a client holds (a memory's UUID or an imported
memory's upstream id, kept as an alias); ``memory_alias_target`` only the latter;
``aliases_of`` gives the upstream ids to show back.
Refused calls: ``refused_call_record`` (the log of refusals; never the audit log).
Read model: ``MemoryView`` / ``memory_view`` with every derived value computed
in one place (effective confidence, fact state, effectiveness, Wilson score).
"""

from __future__ import annotations

from typing import Any

from memory.claims import CLAIM_MEMORY_KINDS, claim_kind_of, claim_scope_of
from memory.context import ContextBlock, build_context
from memory.errors import DomainError, Duplicate, EmbeddingUnavailable, InvalidArgument, NotFound, PermissionDenied
from memory.models import Collection, collection_of
from memory.outcomes import Signal
from memory.read_model import MemoryView, memory_view
from memory.selectors.activation import ActivationPage, RankedClaim, claims_activate, claims_search
from memory.selectors.aliases import aliases_of, memory_alias_target, memory_pk
from memory.selectors.collections import (
    COLLECTIONS,
    CollectionHit,
    KnownContext,
    collection_get,
    collection_ids,
    collection_lookup,
    collection_search,
    display_id,
    known_context,
)
from memory.selectors.conflicts import OpenConflict, conflicts_open_for
from memory.selectors.memories import (
    ScoredMemory,
    SearchQuery,
    fact_get_by_key,
    memory_fetch,
    memory_list_recent,
    memory_search,
    memory_similar,
    memory_stats,
    memory_supersedes_map,
    namespaces_list,
)
from memory.services.claims import ClaimUpsertResult, claim_upsert
from memory.services.collections import (
    BOOK_MAX_BYTES,
    MEMORY_BANK_SUBJECT,
    BookIngestResult,
    ExchangeCompleted,
    book_ingest,
    book_progress,
    collection_forget,
    collection_score,
    exchange_complete,
    exchange_mark_scored,
    exchange_open,
    exchange_part_ids,
    exchange_pending_scoring,
    memory_bank_store,
    memory_bank_update,
    takeaway_store,
    working_store,
)
from memory.services.events import EventType, event_append
from memory.services.feedback import FeedbackResult, memory_feedback
from memory.services.graph import EntityInput, RelationInput
from memory.services.idempotency import IdempotentAnswer, idempotency_key_problem, idempotent
from memory.services.memories import (
    FactStoreResult,
    episode_store,
    episodes_store_bulk,
    fact_retract_by_key,
    fact_store,
    memory_confirm,
    memory_forget,
    memory_supersede,
    rule_store,
)
from memory.services.referencing import memory_get, memory_list_recent_accessed, memory_recall, memory_search_accessed
from memory.services.refusals import refused_call_record
from memory.validation import TOO_DEEP_TO_READ, encodable, json_document, nesting
from policy.boundary import BoundaryCheck, boundary_for, boundary_validate
from policy.caller import Caller
from policy.selectors.policies import policy_is_applied
from policy.services.policies import PolicyApplyResult, policy_apply

__all__ = [
    "aliases_of",
    "memory_alias_target",
    "memory_pk",
    "BOOK_MAX_BYTES",
    "MEMORY_BANK_SUBJECT",
    "COLLECTIONS",
    "BookIngestResult",
    "Collection",
    "CollectionHit",
    "collection_of",
    "ExchangeCompleted",
    "KnownContext",
    "book_ingest",
    "book_progress",
    "collection_forget",
    "collection_score",
    "collection_get",
    "collection_ids",
    "collection_lookup",
    "collection_search",
    "display_id",
    "exchange_complete",
    "exchange_mark_scored",
    "exchange_open",
    "exchange_part_ids",
    "exchange_pending_scoring",
    "known_context",
    "memory_bank_store",
    "memory_bank_update",
    "takeaway_store",
    "working_store",
    "ActivationPage",
    "BoundaryCheck",
    "ClaimUpsertResult",
    "EntityInput",
    "PolicyApplyResult",
    "RankedClaim",
    "RelationInput",
    "boundary_for",
    "boundary_validate",
    "CLAIM_MEMORY_KINDS",
    "claim_kind_of",
    "claim_scope_of",
    "claim_upsert",
    "claims_activate",
    "claims_search",
    "policy_apply",
    "policy_is_applied",
    "tool_call_audit",
    "refused_call_record",
    "ContextBlock",
    "DomainError",
    "Duplicate",
    "EmbeddingUnavailable",
    "FactStoreResult",
    "FeedbackResult",
    "InvalidArgument",
    "MemoryView",
    "NotFound",
    "OpenConflict",
    "PermissionDenied",
    "ScoredMemory",
    "SearchQuery",
    "Signal",
    "build_context",
    "conflicts_open_for",
    "elevation_audit",
    "episode_store",
    "episodes_store_bulk",
    "fact_get_by_key",
    "fact_retract_by_key",
    "fact_store",
    "memory_confirm",
    "memory_feedback",
    "memory_fetch",
    "memory_forget",
    "memory_get",
    "memory_list_recent",
    "memory_list_recent_accessed",
    "memory_recall",
    "memory_search",
    "memory_search_accessed",
    "memory_similar",
    "memory_stats",
    "memory_supersede",
    "memory_supersedes_map",
    "memory_view",
    "namespaces_list",
    "IdempotentAnswer",
    "idempotency_key_problem",
    "idempotent",
    "json_document",
    "nesting",
    "encodable",
    "TOO_DEEP_TO_READ",
    "rule_store",
]


def elevation_audit(*, caller: Caller) -> None:
    """An admin's explicit cross-tenant elevation, recorded in the target tenant."""
    event_append(
        caller=caller,
        tenant_id=caller.tenant_id,
        event_type=EventType.TENANT_ELEVATION,
        payload={"from_tenant": str(caller.elevated_from), "principal": str(caller.principal_id)},
    )


def tool_call_audit(*, caller: Caller, tool: str, payload: dict[str, Any]) -> None:
    """Every call is written to the append-only audit log, as pce-memory v0.14.0 asks (time, tool,
    boundary decision, provenance)."""
    event_append(
        caller=caller, tenant_id=caller.tenant_id, event_type=EventType.TOOL_CALL, payload={"tool": tool, **payload}
    )
