"""Semantic conflict check of a new memory against its tenant's active
memories (run by a worker after the write commits), and the review actions
that resolve what it found.

- Duplicates merge only when they say the same thing: keyless memories with
  the same text (memory/statements.py: its Unicode encoding, spacing and a
  final full stop aside, so every letter, number, date, name and identifier
  must agree); embedding similarity alone never merges, nor does a fact with
  a subject/predicate key. The group's newest memory is kept and the older ones are
  superseded by it through ``memory_supersede`` (audited, reversible with the
  admin's restore), so nothing a user could want is hidden: the text survives,
  with its latest date; a fact or rule kept counts as confirmed.
- Everything weaker is a ``ConflictCandidate`` that tools and the admin show
  until someone accepts (the newer memory supersedes the older) or dismisses
  it: a fact with the same subject and related content, or anything highly
  similar but not the same statement (the reason names the words that differ).

Only facts and rules are checked (``CONFLICT_CHECKED_KINDS``): a repeated
episode is the signal consolidation looks for, not a conflict, and a book's
chunks are one text."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.utils import timezone

from memory import validation
from memory.errors import InvalidArgument, NotFound, PermissionDenied
from memory.models import (
    CONFLICT_CHECKED_KINDS,
    ConflictCandidate,
    ConflictKind,
    ConflictStatus,
    EmbeddingStatus,
    Kind,
    Memory,
    Validity,
)
from memory.services.events import EventType, event_append
from memory.services.locks import memory_group_lock, tenant_write_lock
from memory.services.memories import memory_confirm, memory_supersede
from memory.services.system import pipeline_setting, system_caller
from memory.statements import differing_words, outlives, same_reach, same_statement
from policy.caller import Caller

logger = logging.getLogger(__name__)

NEIGHBOURS = 10


@dataclass
class ConflictCheckResult:
    merged_into: uuid.UUID | None = None
    merged: list[uuid.UUID] = field(default_factory=list)
    candidates: list[uuid.UUID] = field(default_factory=list)
    skipped: str = ""


def _age(memory: Memory) -> tuple[object, str]:
    """A total order by age: two checks racing on the same pair agree on it."""
    return (memory.created_at, str(memory.pk))


def _older_first(a: Memory, b: Memory) -> tuple[Memory, Memory]:
    return (a, b) if _age(a) <= _age(b) else (b, a)


def _peers(memory: Memory):  # type: ignore[no-untyped-def]
    """Active memories of the same tenant, kind, namespace and scope: a merge
    across namespaces or scopes would change who can see what."""
    now = timezone.now()
    return (
        Memory.objects.filter(
            tenant_id=memory.tenant_id, kind=memory.kind, namespace=memory.namespace, scope=memory.scope
        )
        .retrievable(now)
        .exclude(pk=memory.pk)
    )


def memory_conflict_check(*, memory_id: uuid.UUID) -> ConflictCheckResult:
    """Safe to run twice: merges go through the idempotent ``memory_supersede``,
    candidates are unique per pair, and a memory that is no longer active is
    left alone."""
    tenant_id = Memory.objects.filter(pk=memory_id).values_list("tenant_id", flat=True).first()
    if tenant_id is None:
        return ConflictCheckResult(skipped="missing")
    with transaction.atomic():
        tenant_write_lock(tenant_id)
        # Read under the lock: a memory read before it may have been merged,
        # superseded or forgotten while this check waited.
        memory = Memory.objects.filter(pk=memory_id).first()
        if memory is None:
            return ConflictCheckResult(skipped="missing")
        if memory.kind not in CONFLICT_CHECKED_KINDS:
            return ConflictCheckResult(skipped=memory.kind)
        if memory.validity != Validity.ACTIVE:
            return ConflictCheckResult(skipped=memory.validity)
        return _check(memory)


def _check(memory: Memory) -> ConflictCheckResult:
    caller = system_caller(memory.tenant_id)
    result = ConflictCheckResult()

    similar: list[tuple[Memory, float]] = []
    if memory.embedding_status == EmbeddingStatus.READY and memory.embedding is not None:
        rows = _peers(memory).nearest_first(memory.embedding, tenant_id=memory.tenant_id).without_vectors()[:NEIGHBOURS]
        similar = [(row, 1.0 - float(row.distance)) for row in rows]

    duplicates: dict[uuid.UUID, Memory] = {}
    if not memory.subject:
        # Only keyless memories merge, and only with keyless ones. A keyed fact's
        # statement is its subject and predicate with its content ("Acme" is
        # alice's employer, not bob's), and one with the same key is already
        # superseded by it on write; a keyless memory merged into a keyed one,
        # or the other way round, would make a get by key (a LangGraph store
        # item, a fact's subject+predicate) fail or return another statement.
        same_hash = _peers(memory).filter(content_hash=memory.content_hash, subject="").without_vectors()
        for other in [*same_hash, *(other for other, _ in similar if not other.subject)]:
            if same_statement(other.content, memory.content) and same_reach(other, memory):
                duplicates[other.pk] = other
    if duplicates:
        # The newest stays and the others are superseded by it, except a copy
        # that would outlive it (kept for ever, the newest due to expire): that
        # pair stays open for review.
        keeper = max([memory, *duplicates.values()], key=_age)
        if outlives(memory, keeper):
            duplicates = {}
        else:
            duplicates = {pk: other for pk, other in duplicates.items() if not outlives(other, keeper)}
    if duplicates:
        group = [memory, *duplicates.values()]
        # memory_supersede locks each pair in primary-key order, but pair after
        # pair is no order at all: a reader bumping two of these rows in key
        # order would deadlock with us. Lock the whole group first, in key order.
        memory_group_lock(m.pk for m in group)
        for other in group:
            if other.pk == keeper.pk:
                continue
            try:
                memory_supersede(caller=caller, old_id=other.pk, new_id=keeper.pk, reason="duplicate")
            except (InvalidArgument, NotFound) as exc:
                # The keeper changed under us (retracted, purged): leave the pair for review instead.
                logger.info("duplicate merge of %s into %s skipped: %s", other.pk, keeper.pk, exc)
                continue
            result.merged.append(other.pk)
        if result.merged and keeper.kind in (Kind.FACT, Kind.RULE):
            memory_confirm(caller=caller, kind=keeper.kind, memory_id=keeper.pk)
        result.merged_into = keeper.pk
        if memory.pk != keeper.pk:
            return result

    for other, sim in similar:
        if other.pk in duplicates:
            continue
        # Keyless facts (memento) share no subject, however empty both are.
        same_subject = (
            memory.kind == Kind.FACT
            and bool(memory.subject.strip())
            and other.subject.strip().lower() == memory.subject.strip().lower()
        )
        if same_subject and sim >= pipeline_setting("SAME_SUBJECT_SIMILARITY"):
            kind, reason = ConflictKind.CONTRADICTION, f"same subject {memory.subject!r}, different content"
        elif sim >= pipeline_setting("NEAR_DUPLICATE_SIMILARITY"):
            differs = differing_words(memory.content, other.content)
            kind, reason = ConflictKind.DUPLICATE, f"highly similar content; differs in: {differs}"
        else:
            continue
        newer, older = _older_first(memory, other)[::-1]
        candidate = _candidate_record(newer=newer, older=older, kind=kind, similarity=sim, reason=reason, caller=caller)
        if candidate is not None:
            result.candidates.append(candidate.pk)
    return result


def _candidate_record(
    *, newer: Memory, older: Memory, kind: str, similarity: float, reason: str, caller: Caller
) -> ConflictCandidate | None:
    """One row per pair whichever side's check finds it first; the audit event
    only when the row is new."""
    if ConflictCandidate.objects.filter(memory=older, other=newer).exists():
        return None
    try:
        with transaction.atomic():
            candidate, created = ConflictCandidate.objects.get_or_create(
                memory=newer,
                other=older,
                defaults={"tenant_id": newer.tenant_id, "kind": kind, "similarity": similarity, "reason": reason},
            )
            if created:
                event_append(
                    caller=caller,
                    tenant_id=newer.tenant_id,
                    memory=newer,
                    event_type=EventType.CONFLICT_DETECTED,
                    payload={
                        "other": str(older.pk),
                        "kind": kind,
                        "similarity": round(similarity, 4),
                        "reason": reason,
                    },
                )
    except IntegrityError:  # a concurrent check created it between our read and insert
        return None
    return candidate if created else None


def _require_review(caller: Caller) -> None:
    if not caller.has_scope("write"):
        raise PermissionDenied("resolving a conflict changes memories; use a token with the 'write' scope.")


def _locked_open(caller: Caller, conflict_id: object) -> ConflictCandidate:
    pk = validation.memory_id(conflict_id)
    tenant_write_lock(caller.tenant_id)
    candidate = ConflictCandidate.objects.for_caller(caller).select_for_update().filter(pk=pk).first()
    if candidate is None:
        raise NotFound(f"no conflict candidate with id {pk} in this tenant.")
    return candidate


def _resolve(caller: Caller, candidate: ConflictCandidate, status: str) -> None:
    candidate.status = status
    candidate.resolved_at = timezone.now()
    candidate.resolved_by = caller.principal_id
    candidate.save(update_fields=["status", "resolved_at", "resolved_by"])
    event_append(
        caller=caller,
        tenant_id=caller.tenant_id,
        memory=candidate.memory,
        event_type=EventType(f"conflict_{status}"),
        payload={"conflict": str(candidate.pk), "other": str(candidate.other_id), "kind": candidate.kind},
    )


def conflict_accept(*, caller: Caller, conflict_id: object) -> ConflictCandidate:
    """The newer memory replaces the older one (through ``memory_supersede``)."""
    _require_review(caller)
    with transaction.atomic():
        candidate = _locked_open(caller, conflict_id)
        if candidate.status == ConflictStatus.ACCEPTED:
            return candidate
        if candidate.status != ConflictStatus.OPEN:
            raise InvalidArgument(f"this conflict was already {candidate.status}; it cannot be accepted now.")
        memory_supersede(
            caller=caller, old_id=candidate.other_id, new_id=candidate.memory_id, reason="conflict accepted"
        )
        _resolve(caller, candidate, ConflictStatus.ACCEPTED)
    return candidate


def conflict_dismiss(*, caller: Caller, conflict_id: object) -> ConflictCandidate:
    """Both memories stay active; the pair is not raised again."""
    _require_review(caller)
    with transaction.atomic():
        candidate = _locked_open(caller, conflict_id)
        if candidate.status == ConflictStatus.DISMISSED:
            return candidate
        if candidate.status != ConflictStatus.OPEN:
            raise InvalidArgument(f"this conflict was already {candidate.status}; it cannot be dismissed now.")
        _resolve(caller, candidate, ConflictStatus.DISMISSED)
    return candidate
