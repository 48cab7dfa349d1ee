"""Episode consolidation: a consolidator (offline or LLM) proposes facts and
rules from a tenant's unconsolidated episodes; this module stores them through
``fact_store`` / ``rule_store`` (so supersession, audit and tenant scoping
apply exactly as for a tool's write), links each to its source episodes and
marks the episodes consolidated.

The consolidator runs outside any transaction (an LLM may take a minute).
Each proposal is then stored in one transaction that first locks its source
episodes and skips the proposal if any of them was consolidated meanwhile: a
redelivered or concurrent run never stores the same proposal twice."""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from memory.consolidators import Consolidator, EpisodeView, Proposal, get_consolidator
from memory.errors import InvalidArgument, NotFound
from memory.models import EmbeddingStatus, Kind, LinkKind, Memory, MemoryEvent, MemoryLink, Validity
from memory.services.events import EventType, event_append
from memory.services.locks import tenant_write_lock
from memory.services.memories import fact_key, fact_store, memory_supersede, rule_store
from memory.services.sweeps import sweep_claim
from memory.services.system import pipeline_setting, system_caller
from memory.statements import mergeable_into
from policy.caller import Caller

logger = logging.getLogger(__name__)


@dataclass
class ConsolidationResult:
    tenants: int = 0
    consumed: int = 0
    created: list[uuid.UUID] = field(default_factory=list)
    merged: int = 0
    more: bool = False

    @property
    def processed(self) -> int:
        """What a sweep reports as done (``SweepResult.processed``): the memories created."""
        return len(self.created)


def _unconsolidated(tenant_id: uuid.UUID | None, now: datetime, *, embedded: bool):  # type: ignore[no-untyped-def]
    qs = Memory.objects.retrievable(now).filter(kind=Kind.EPISODE, consolidated_at__isnull=True)
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    if embedded:
        qs = qs.filter(embedding_status=EmbeddingStatus.READY)
    return qs


def _mark_consolidated(caller: Caller, ids: list[uuid.UUID], now: datetime, into: uuid.UUID | None) -> int:
    tenant_write_lock(caller.tenant_id)
    marked = list(
        Memory.objects.filter(pk__in=ids, tenant_id=caller.tenant_id, consolidated_at__isnull=True)
        .select_for_update()
        .without_vectors()
        .order_by("pk")
    )
    Memory.objects.filter(pk__in=[m.pk for m in marked]).update(consolidated_at=now, updated_at=now)
    for episode in marked:
        event_append(
            caller=caller,
            tenant_id=caller.tenant_id,
            memory=episode,
            event_type=EventType.CONSOLIDATED,
            payload={"into": str(into) if into else None},
        )
    return len(marked)


class KeyForgotten(Exception):
    """A proposed fact whose subject and predicate the user forgot after its
    episodes were said: storing it would bring the forgotten fact back."""


def _refuse_if_forgotten_since(caller: Caller, proposal: Proposal, stated_at: datetime) -> None:
    """Under the tenant's write lock (which every forget takes): a fact of the
    proposal's key retracted after the newest source episode is newer
    knowledge than the episodes, as an active fact stored after them is
    (``fact_store``'s ``stated_at``)."""
    subject, predicate = fact_key(proposal.subject, proposal.predicate)
    retracted = Memory.objects.filter(
        tenant_id=caller.tenant_id,
        kind=Kind.FACT,
        validity=Validity.RETRACTED,
        namespace=[],
        subject=subject,
        predicate=predicate,
    ).values("pk")
    forgotten = MemoryEvent.objects.filter(
        tenant_id=caller.tenant_id,
        memory_id__in=retracted,
        event_type=EventType.RETRACTED,
        created_at__gt=stated_at,
    )
    if forgotten.exists():
        raise KeyForgotten(f"the fact {subject!r} / {predicate!r} was forgotten after its episodes were said")


def _store(
    caller: Caller, proposal: Proposal, scope: str, boundary_class: str, consolidator: str, now: datetime
) -> uuid.UUID | None:
    with transaction.atomic():
        tenant_write_lock(caller.tenant_id)
        # Read under the lock, as retrieval would find them now: the consolidator
        # planned from a snapshot (an LLM may take a minute), and meanwhile an
        # episode may have been forgotten, merged or expired. What it said must
        # not come back as (part of) a derived memory.
        sources = list(
            Memory.objects.retrievable(max(now, timezone.now()))
            .filter(
                pk__in=proposal.source_ids,
                tenant_id=caller.tenant_id,
                kind=Kind.EPISODE,
                consolidated_at__isnull=True,
            )
            .order_by("pk")
            .select_for_update()
            .values_list("pk", "created_at")
        )
        if len(sources) != len(set(proposal.source_ids)):
            # Another run consolidated some of them first, or some are no longer
            # retrievable: the rest are offered again on a later run.
            return None
        # What the episodes said holds as of the newest of them: a fact stored
        # since then about the same key is newer and must stay the active one.
        stated_at = max(created_at for _, created_at in sources)
        if proposal.kind != Kind.RULE and proposal.subject:
            _refuse_if_forgotten_since(caller, proposal, stated_at)
        metadata = {"consolidated_from": [str(pk) for pk in proposal.source_ids], "consolidator": consolidator}
        if proposal.kind == Kind.RULE:
            memory = rule_store(
                caller=caller,
                content=proposal.content,
                scope=scope,
                source="consolidation",
                metadata=metadata,
                boundary_class=boundary_class,
            )
        else:
            memory = fact_store(
                caller=caller,
                subject=proposal.subject,
                predicate=proposal.predicate,
                content=proposal.content,
                importance=proposal.importance,
                permanence=proposal.permanence,
                scope=scope,
                source="consolidation",
                metadata=metadata,
                boundary_class=boundary_class,
                stated_at=stated_at,
            ).memory
        MemoryLink.objects.bulk_create(
            [
                MemoryLink(tenant_id=caller.tenant_id, from_memory=memory, to_memory_id=pk, kind=LinkKind.DERIVED_FROM)
                for pk in proposal.source_ids
            ]
        )
        _mark_consolidated(caller, list(proposal.source_ids), now, memory.pk)
    return memory.pk


def _merge_duplicate(caller: Caller, other_id: uuid.UUID, keeper_id: uuid.UUID, now: datetime) -> bool:
    """Merge one episode the consolidator grouped with ``keeper_id`` into it,
    if it still may be: decided under the tenant's write lock on the two as
    they are then, not as the plan's snapshot had them. A user's write
    meanwhile (an outcome that promoted one to history, a forget, a
    supersession) changes what the merge would hide. Whatever a consolidator
    (an LLM) groups, only the same statement merges (memory/statements.py)."""
    with transaction.atomic():
        tenant_write_lock(caller.tenant_id)
        pair = {
            memory.pk: memory
            for memory in Memory.objects.retrievable(max(now, timezone.now()))
            .filter(pk__in=[other_id, keeper_id], tenant_id=caller.tenant_id, kind=Kind.EPISODE)
            .without_vectors()
        }
        if len(pair) < 2 or not mergeable_into(pair[other_id], pair[keeper_id]):
            return False
        memory_supersede(caller=caller, old_id=other_id, new_id=keeper_id, reason="duplicate episode")
    return True


def episodes_consolidate(
    *,
    tenant_id: uuid.UUID,
    consolidator: Consolidator | None = None,
    batch_size: int | None = None,
    now: datetime | None = None,
) -> ConsolidationResult:
    """One bounded batch of one tenant's unconsolidated episodes (oldest first),
    planned per scope so a derived memory is never visible more widely than its
    episodes were. A tenant another run is consolidating is skipped."""
    # One run at a time per tenant, across workers: a redelivered or overlapping
    # run never sends the same episodes to the LLM again.
    with sweep_claim(f"consolidate.{tenant_id}") as claimed:
        if not claimed:
            logger.info("tenant %s is being consolidated by another run; skipped", tenant_id)
            return ConsolidationResult(tenants=1)
        return _consolidate_claimed(tenant_id, consolidator, batch_size, now)


def _consolidate_claimed(
    tenant_id: uuid.UUID, consolidator: Consolidator | None, batch_size: int | None, now: datetime | None
) -> ConsolidationResult:
    consolidator = consolidator or get_consolidator()
    now = now or timezone.now()
    batch_size = batch_size or pipeline_setting("CONSOLIDATE_BATCH")
    caller = system_caller(tenant_id)
    rows = list(
        _unconsolidated(tenant_id, now, embedded=consolidator.needs_embeddings)
        .only(
            "pk",
            "content",
            "content_hash",
            "created_at",
            "butler",
            "scope",
            "importance",
            "embedding",
            "boundary_class",
        )
        .order_by("created_at", "id")[: batch_size + 1]
    )
    result = ConsolidationResult(tenants=1, more=len(rows) > batch_size)
    rows_by_id = {row.pk: row for row in rows[:batch_size]}
    # Planned per scope and boundary class: a derived memory quotes its episodes
    # (the offline consolidator stores one verbatim), so it is never visible more
    # widely than they were, to another scope or to a reader whose boundary
    # hides their class (a pii or secret episode, e.g. imported).
    by_scope: dict[tuple[str, str], list[EpisodeView]] = defaultdict(list)
    for row in rows[:batch_size]:
        by_scope[(row.scope, row.boundary_class)].append(
            EpisodeView(
                id=row.pk,
                content=row.content,
                content_hash=row.content_hash,
                created_at=row.created_at,
                butler=row.butler,
                scope=row.scope,
                importance=row.importance,
                embedding=None if row.embedding is None else [float(x) for x in row.embedding],
            )
        )
    for (scope, boundary_class), episodes in sorted(by_scope.items()):
        plan = consolidator.plan(episodes, now=now)
        offered = {e.id for e in episodes}
        # Episodes of a proposal dropped because some of its sources changed
        # meanwhile: offered again on a later run, without what was forgotten.
        replan: set[uuid.UUID] = set()
        for proposal in plan.proposals:
            if not set(proposal.source_ids) <= offered:
                logger.warning("consolidator %s proposed episodes it was not given; skipped", consolidator.name)
                continue
            try:
                created = _store(caller, proposal, scope, boundary_class, consolidator.name, now)
            except InvalidArgument as exc:
                # A proposal our validation refuses (e.g. an LLM's over-long subject) is
                # dropped; its episodes stay for the next run unless the plan consumed them.
                logger.warning("consolidator %s proposal refused: %s", consolidator.name, exc)
                continue
            except KeyForgotten as exc:
                # Dropped like a refused one: asking again would only propose it again.
                logger.info("consolidator %s proposal dropped: %s", consolidator.name, exc)
                continue
            if created is not None:
                result.created.append(created)
                result.consumed += len(proposal.source_ids)
            else:
                replan.update(proposal.source_ids)
        for group in plan.duplicates:
            members = [rows_by_id[pk] for pk in group if pk in offered]
            if len(members) < 2:
                continue
            # Into the newest of the group, each merge checked again when it is made.
            keeper = max(members, key=lambda e: (e.created_at, str(e.pk)))
            for other in [e.pk for e in members if e is not keeper]:
                try:
                    result.merged += _merge_duplicate(caller, other, keeper.pk, now)
                except (InvalidArgument, NotFound) as exc:
                    logger.info("duplicate episode %s not merged into %s: %s", other, keeper.pk, exc)
        with transaction.atomic():
            result.consumed += _mark_consolidated(caller, sorted((plan.consumed & offered) - replan), now, None)
    # Re-enqueue only when this run made progress: a batch of young episodes that
    # form no cluster yet must not spin the worker.
    result.more = result.more and result.consumed > 0
    return result


def consolidation_sweep(
    *,
    consolidator: Consolidator | None = None,
    max_tenants: int | None = None,
    batch_size: int | None = None,
    now: datetime | None = None,
) -> ConsolidationResult:
    """One batch for each of up to ``max_tenants`` tenants, longest-waiting
    backlog first, so a tenant with thousands of episodes gets one batch per run
    like everyone else."""
    consolidator = consolidator or get_consolidator()
    now = now or timezone.now()
    max_tenants = max_tenants or pipeline_setting("CONSOLIDATE_TENANTS")
    due = list(
        _unconsolidated(None, now, embedded=consolidator.needs_embeddings)
        .order_by()
        .values("tenant_id")
        .annotate(oldest=Min("created_at"))
        .order_by("oldest", "tenant_id")
        .values_list("tenant_id", flat=True)[: max_tenants + 1]
    )
    total = ConsolidationResult(more=len(due) > max_tenants)
    started = time.monotonic()
    for tenant_id in due[:max_tenants]:
        if time.monotonic() - started > pipeline_setting("CONSOLIDATE_TIME_BUDGET_SECONDS"):
            # Stay well inside the broker's visibility timeout (a longer run would be
            # redelivered while still running); the rest goes to the re-enqueued run.
            total.more = True
            break
        one = episodes_consolidate(tenant_id=tenant_id, consolidator=consolidator, batch_size=batch_size, now=now)
        total.tenants += 1
        total.consumed += one.consumed
        total.created += one.created
        total.merged += one.merged
        total.more = total.more or one.more
    total.more = total.more and total.consumed > 0
    return total
