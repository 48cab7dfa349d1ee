"""The follow-up runners: the work the outbox (memory/services/followups.py)
recorded for a committed write, done by the worker's tasks or by the drain sweep.

- ``followups_embed_run`` (the embed task) gives memories their vectors, then
  records their conflict checks.
- ``followup_conflict_check_run`` (the conflict-check task) runs the check and
  closes the follow-up in one transaction; a second run finds it closed.
- ``followups_drain`` (a beat sweep) runs what is still open after a grace
  period: enqueues that never reached the broker, and tasks lost with it.

The write services record follow-ups through the outbox module, which imports
only the models; this module runs them and imports the services it needs."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from memory.models import EmbeddingStatus, FollowUp, FollowUpKind, Memory
from memory.services.conflicts import ConflictCheckResult, memory_conflict_check
from memory.services.followups import followups_close_missing, followups_embedded
from memory.services.locks import tenant_write_lock
from memory.services.sweeps import SweepResult, sweep_claim
from memory.services.vectors import memory_embed_batch

logger = logging.getLogger(__name__)


def followups_embed_run(*, memory_ids: Sequence[uuid.UUID]) -> int:
    """The embed task: give the memories their vectors (one model call), then
    hand over to their conflict checks. Returns how many got a vector here.
    Raises EmbeddingUnavailable for the task to retry."""
    present = set(Memory.objects.filter(pk__in=list(memory_ids)).values_list("pk", flat=True))
    for memory_id in set(memory_ids) - present:
        followups_close_missing(memory_id)
    if not present:
        return 0
    done = memory_embed_batch(memory_ids=sorted(present))
    followups_embedded(memory_ids=sorted(present))
    return done


def followup_conflict_check_run(*, memory_id: uuid.UUID) -> ConflictCheckResult:
    """The conflict-check task: run the check and close the follow-up in one
    transaction, holding the row, so a redelivered task or the drain sweep
    waiting on it then finds it closed and does nothing."""
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
    now = now or timezone.now()
    batch_size = batch_size or settings.MEMPROJ_PIPELINE["SWEEP_BATCH"]
    grace = timedelta(seconds=settings.MEMPROJ_PIPELINE["FOLLOWUP_GRACE_SECONDS"])
    waiting_for_vector = Memory.objects.filter(
        pk=OuterRef("memory_id"), embedding_status__in=[EmbeddingStatus.PENDING, EmbeddingStatus.FAILED]
    )
    due = FollowUp.objects.filter(done_at__isnull=True, created_at__lte=now - grace).filter(
        Q(kind=FollowUpKind.CONFLICT_CHECK) | ~Exists(waiting_for_vector)
    )
    # Single-flight across transactions: each follow-up runs in a transaction of
    # its own, taking its tenant's write lock only for its own check. One
    # transaction for the batch held the write lock of every tenant in it until
    # the last of up to SWEEP_BATCH checks was done: after a broker lost its
    # messages, a write to such a tenant waited for the whole batch (tens of
    # seconds), longer than clients wait for an answer.
    with sweep_claim("followups_drain") as claimed:
        if not claimed:
            return SweepResult(skipped=True)
        rows = list(due.order_by("attempts", "id").values_list("pk", "memory_id", "kind")[:batch_size])
        processed = failed = 0
        for pk, memory_id, kind in rows:
            try:
                with transaction.atomic():
                    if kind == FollowUpKind.CONFLICT_CHECK:
                        followup_conflict_check_run(memory_id=memory_id)
                    elif Memory.objects.filter(pk=memory_id).exists():
                        followups_embedded(memory_ids=[memory_id])
                    else:
                        followups_close_missing(memory_id)
                processed += 1
            except Exception as exc:  # one bad row must not stop the others; its error is kept on the row
                logger.warning("follow-up %s (%s of memory %s) failed: %s", pk, kind, memory_id, exc, exc_info=True)
                FollowUp.objects.filter(pk=pk).update(attempts=F("attempts") + 1, last_error=str(exc)[:2000])
                failed += 1
        more = due.exclude(pk__in=[r[0] for r in rows]).exists()
    return SweepResult(processed=processed, failed=failed, more=more)
