"""The outbox (issue 15): follow-up work of a write, recorded in the write's own
transaction, so that a committed write answers success even when the broker is
down and its follow-up is still done later.

- ``followups_for_writes`` records the follow-up (a ``FollowUp`` row) inside the
  write's transaction and, after commit, hands it to the transport registered
  for its kind: best effort, never raising to the writer.
- The worker's tasks call ``followups_embed_run`` / ``followup_conflict_check_run``,
  which do the work and close the row; a second run finds it closed.
- ``followups_drain`` (a beat sweep) runs what is still open after a grace
  period: enqueues that never reached the broker, and tasks lost with it.

The core knows what a follow-up means; how it travels (Celery) is registered at
start-up by the workers app (workers/apps.py), so nothing here imports workers."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from memory.models import EmbeddingStatus, FollowUp, FollowUpKind, Kind, Memory
from memory.services.locks import tenant_write_lock

if TYPE_CHECKING:
    from memory.services.conflicts import ConflictCheckResult
    from memory.services.sweeps import SweepResult

logger = logging.getLogger(__name__)

# A transport takes the ids of the memories one transaction wrote (one, or a
# bulk import's or a book's hundreds), at most FOLLOWUP_ENQUEUE_BATCH at a time:
# the embed transport sends them as one task, so the worker embeds them with
# one model call instead of one call per memory.
Enqueue = Callable[[list[str]], object]
FOLLOWUP_ENQUEUE_BATCH = 256
_TRANSPORT: dict[str, Enqueue] = {}


def followup_register(kind: FollowUpKind, enqueue: Enqueue) -> None:
    """Called once per kind at start-up by whatever carries the work (workers/apps.py)."""
    _TRANSPORT[kind.value] = enqueue


def followup_transport(kind: FollowUpKind) -> Enqueue | None:
    """The transport registered for a kind (benchmarks swap it for an in-process queue)."""
    return _TRANSPORT.get(kind.value)


def _enqueue(kind: str, memory_ids: list[str]) -> None:
    """After commit. The write has succeeded whatever happens here: a broker
    outage is logged and the rows wait for the drain sweep."""
    enqueue = _TRANSPORT.get(kind)
    if enqueue is None:
        logger.warning("follow-up %s of %s: no transport registered; the sweep will run it", kind, memory_ids)
        return
    try:
        enqueue(memory_ids)
    except Exception:  # any broker or transport failure: the outbox row is the record
        logger.warning("follow-up %s of %s not enqueued; the drain sweep will run it", kind, memory_ids, exc_info=True)


def _record(memories: Sequence[tuple[uuid.UUID, uuid.UUID]], kind: FollowUpKind) -> None:
    """Inside the caller's transaction; at most one open row per memory and kind."""
    if not memories:
        return
    FollowUp.objects.bulk_create(
        [FollowUp(tenant_id=tenant_id, memory_id=memory_id, kind=kind) for memory_id, tenant_id in memories],
        ignore_conflicts=True,
    )
    ids = [str(memory_id) for memory_id, _ in memories]

    def enqueue_all() -> None:
        for start in range(0, len(ids), FOLLOWUP_ENQUEUE_BATCH):
            _enqueue(kind.value, ids[start : start + FOLLOWUP_ENQUEUE_BATCH])

    transaction.on_commit(enqueue_all)


def followups_for_writes(memories: Sequence[Memory]) -> None:
    """What new memories still need once committed: a vector (which then
    brings its conflict check), or for a fact or rule with a vector, the check.
    One INSERT per kind however many memories one transaction wrote."""
    ready = EmbeddingStatus.READY
    _record([(m.id, m.tenant_id) for m in memories if m.embedding_status != ready], FollowUpKind.EMBED)
    _record(
        [(m.id, m.tenant_id) for m in memories if m.embedding_status == ready and m.kind != Kind.EPISODE],
        FollowUpKind.CONFLICT_CHECK,
    )


def followups_embedded(*, memory_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """Memories that may now have their vector (the embed task, the retry
    sweep): close their open embed follow-ups and record the conflict check of
    each fact and rule whose embed follow-up this call closed (or that never
    had one), so two callers racing on one memory record one check. Returns
    the memories whose check was recorded."""
    if not memory_ids:
        return []
    now = timezone.now()
    with transaction.atomic():
        ready = dict(
            Memory.objects.filter(pk__in=list(memory_ids), embedding_status=EmbeddingStatus.READY)
            .values_list("pk", "tenant_id")
            .order_by()
        )
        closing = set(
            FollowUp.objects.select_for_update()
            .filter(memory_id__in=list(ready), kind=FollowUpKind.EMBED, done_at__isnull=True)
            .values_list("memory_id", flat=True)
        )
        FollowUp.objects.filter(memory_id__in=closing, kind=FollowUpKind.EMBED, done_at__isnull=True).update(
            done_at=now
        )
        had_one = set(
            FollowUp.objects.filter(memory_id__in=list(ready), kind=FollowUpKind.EMBED).values_list(
                "memory_id", flat=True
            )
        )
        checkable = set(
            Memory.objects.filter(pk__in=list(ready)).exclude(kind=Kind.EPISODE).values_list("pk", flat=True)
        )
        due = [pk for pk in ready if pk in checkable and (pk in closing or pk not in had_one)]
        _record([(pk, ready[pk]) for pk in due], FollowUpKind.CONFLICT_CHECK)
    return due


def _close_missing(memory_id: uuid.UUID) -> None:
    FollowUp.objects.filter(memory_id=memory_id, done_at__isnull=True).update(
        done_at=timezone.now(), last_error="memory is gone"
    )


def followups_embed_run(*, memory_ids: Sequence[uuid.UUID]) -> int:
    """The embed task: give the memories their vectors (one model call), then
    hand over to their conflict checks. Returns how many got a vector here.
    Raises EmbeddingUnavailable for the task to retry."""
    from memory.services.memories import memory_embed_batch  # memories records follow-ups, so it imports this module

    present = set(Memory.objects.filter(pk__in=list(memory_ids)).values_list("pk", flat=True))
    for memory_id in set(memory_ids) - present:
        _close_missing(memory_id)
    if not present:
        return 0
    done = memory_embed_batch(memory_ids=sorted(present))
    followups_embedded(memory_ids=sorted(present))
    return done


def followup_conflict_check_run(*, memory_id: uuid.UUID) -> ConflictCheckResult:
    """The conflict-check task: run the check and close the follow-up in one
    transaction, holding the row, so a redelivered task or the drain sweep
    waiting on it then finds it closed and does nothing."""
    from memory.services.conflicts import ConflictCheckResult, memory_conflict_check

    tenant_id = Memory.objects.filter(pk=memory_id).values_list("tenant_id", flat=True).first()
    with transaction.atomic():
        if tenant_id is not None:
            tenant_write_lock(tenant_id)  # before the follow-up row (memory/services/locks.py)
        open_rows = list(
            FollowUp.objects.select_for_update()
            .filter(memory_id=memory_id, kind=FollowUpKind.CONFLICT_CHECK, done_at__isnull=True)
            .values_list("pk", flat=True)
        )
        if not open_rows and FollowUp.objects.filter(memory_id=memory_id, kind=FollowUpKind.CONFLICT_CHECK).exists():
            return ConflictCheckResult(skipped="done")
        result = memory_conflict_check(memory_id=memory_id)
        FollowUp.objects.filter(pk__in=open_rows).update(done_at=timezone.now())
    return result


def followups_drain(*, now: datetime | None = None, batch_size: int | None = None) -> SweepResult:
    """Run open follow-ups older than the grace period (their enqueue failed, or
    their task was lost), least-tried first, a bounded batch per run. An embed
    follow-up whose memory still waits for a vector is left to the embedding
    retry sweep (one place retries the embedder); once the vector is there it
    is closed here and its conflict check recorded."""
    from memory.services.sweeps import SweepResult, sweep_lock

    now = now or timezone.now()
    batch_size = batch_size or settings.MEMPROJ_PIPELINE["SWEEP_BATCH"]
    grace = timedelta(seconds=settings.MEMPROJ_PIPELINE["FOLLOWUP_GRACE_SECONDS"])
    waiting_for_vector = Memory.objects.filter(
        pk=OuterRef("memory_id"), embedding_status__in=[EmbeddingStatus.PENDING, EmbeddingStatus.FAILED]
    )
    due = FollowUp.objects.filter(done_at__isnull=True, created_at__lte=now - grace).filter(
        Q(kind=FollowUpKind.CONFLICT_CHECK) | ~Exists(waiting_for_vector)
    )
    with transaction.atomic():
        if not sweep_lock("followups_drain"):
            return SweepResult(skipped=True)
        rows = list(due.order_by("attempts", "id").values_list("pk", "memory_id", "kind")[:batch_size])
        # Every tenant of the batch now, in order, not one by one as the rows come.
        tenant_write_lock(FollowUp.objects.filter(pk__in=[r[0] for r in rows]).values_list("tenant_id", flat=True))
        processed = failed = 0
        for pk, memory_id, kind in rows:
            try:
                with transaction.atomic():
                    if kind == FollowUpKind.CONFLICT_CHECK:
                        followup_conflict_check_run(memory_id=memory_id)
                    elif Memory.objects.filter(pk=memory_id).exists():
                        followups_embedded(memory_ids=[memory_id])
                    else:
                        _close_missing(memory_id)
                processed += 1
            except Exception as exc:  # one bad row must not stop the others; its error is kept on the row
                logger.warning("follow-up %s (%s of memory %s) failed: %s", pk, kind, memory_id, exc, exc_info=True)
                FollowUp.objects.filter(pk=pk).update(attempts=F("attempts") + 1, last_error=str(exc)[:2000])
                failed += 1
        more = due.exclude(pk__in=[r[0] for r in rows]).exists()
    return SweepResult(processed=processed, failed=failed, more=more)
