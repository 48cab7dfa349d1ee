"""Embedding upkeep: the retry sweep for memories still pending (the embedder
was down at write time), re-embedding after a model change, and the
operator's switches that put memories back in line. Bounded, fair and
single-flight like every sweep (``memory.services.sweeps``)."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from memory import embedtext
from memory.embeddings import get_embedder
from memory.errors import EmbeddingUnavailable
from memory.models import EmbeddingStatus, Memory
from memory.services.events import EventType
from memory.services.followups import followups_embedded
from memory.services.locks import memories_tenant_write_lock
from memory.services.sweeps import SweepResult, audit_rows, fair_batch, sweep_claim, sweep_lock, sweep_sizes
from memory.services.system import pipeline_setting
from memory.services.vectors import memory_embed_batch

logger = logging.getLogger(__name__)


def embeddings_retry(
    *, now: datetime | None = None, batch_size: int | None = None, per_tenant: int | None = None
) -> SweepResult:
    """Embed memories still pending: the embedder was down at write time (and the
    write-time task gave up), or async mode. A memory that keeps failing is
    marked failed after EMBED_MAX_ATTEMPTS, with its last error kept, and put
    back in line once the embedder answers again (or by the ``reembed`` command)."""
    now = now or timezone.now()
    batch_size, per_tenant = sweep_sizes(batch_size, per_tenant)
    max_attempts = pipeline_setting("EMBED_MAX_ATTEMPTS")
    # Young pending rows belong to the task enqueued at write time.
    due = Memory.objects.filter(
        embedding_status=EmbeddingStatus.PENDING,
        created_at__lte=now - timedelta(seconds=pipeline_setting("EMBED_RETRY_GRACE_SECONDS")),
    )
    # Single-flight across transactions, not one transaction around the run:
    # the vectors are written in a transaction of their own, begun once the
    # model has answered. Inside one begun before the model ran, PostgreSQL's
    # now() was that earlier time, so a previous turn whose TTL passed while
    # the model ran still counted as retrievable and went into the vector of
    # the turn after it, dated after the TTL, where the expiry sweep does not
    # look for it (memory/services/vectors.py, sweeps.expired_turns_unembed).
    with sweep_claim("embeddings_retry") as claimed:
        if not claimed:
            return SweepResult(skipped=True)
        ids = fair_batch(due, order_by=["created_at", "id"], batch_size=batch_size, per_tenant=per_tenant)
        failed = 0
        done_ids: list[uuid.UUID] = []
        if ids:
            try:
                memory_embed_batch(memory_ids=ids)
            except EmbeddingUnavailable as exc:
                logger.warning("embedding retry: embedder unavailable for %d memories: %s", len(ids), exc)
                failed = Memory.objects.filter(
                    pk__in=ids, embedding_status=EmbeddingStatus.PENDING, embedding_attempts__gte=max_attempts
                ).update(embedding_status=EmbeddingStatus.FAILED)
                return SweepResult(processed=0, failed=failed, more=False)
            done_ids = list(
                Memory.objects.filter(pk__in=ids, embedding_status=EmbeddingStatus.READY).values_list("pk", flat=True)
            )
            followups_embedded(memory_ids=done_ids)
        requeued = _failed_embeddings_requeue(batch_size, embedder_answered=bool(ids))
        more = requeued > 0 or due.exclude(pk__in=ids).exists()
    return SweepResult(processed=len(done_ids), more=more, ids=done_ids)


def _failed_embeddings_requeue(batch_size: int, *, embedder_answered: bool) -> int:
    """Memories marked failed during an outage get another round once the
    embedder answers again (this sweep's batch worked, or a one-text probe does):
    back to pending with a fresh attempt count, a bounded batch per run."""
    failed = Memory.objects.filter(embedding_status=EmbeddingStatus.FAILED)
    if not failed.exists():
        return 0
    if not embedder_answered:
        try:
            get_embedder().embed_document("embedder health probe")
        except EmbeddingUnavailable:
            return 0
    return memories_failed_requeue(limit=batch_size)


def memories_reembed(
    *,
    tenant_id: uuid.UUID | None = None,
    batch_size: int | None = None,
    per_tenant: int | None = None,
) -> SweepResult:
    """Re-embed memories whose vector came from another model than the current
    embedder's. Each batch first drops the stale vectors (the memory is then
    keyword-searchable only, never compared across two models' vector spaces),
    then embeds the batch; if the embedder fails the rows stay pending and the
    retry sweep finishes them."""
    batch_size, per_tenant = sweep_sizes(batch_size, per_tenant)
    model = get_embedder().model_name
    stale = Memory.objects.filter(embedtext.stale_vectors(model), embedding_status=EmbeddingStatus.READY)
    if tenant_id is not None:
        stale = stale.filter(tenant_id=tenant_id)
    with transaction.atomic():
        if not sweep_lock("memories_reembed"):
            return SweepResult(skipped=True)
        ids = fair_batch(stale, order_by=["created_at", "id"], batch_size=batch_size, per_tenant=per_tenant)
        memories_tenant_write_lock(ids)
        rows = list(
            stale.filter(pk__in=ids)
            .order_by("pk")
            .select_for_update()
            .values_list("pk", "tenant_id", "kind", "embedding_model", "session_id")
        )
        Memory.objects.filter(pk__in=[r[0] for r in rows]).update(
            embedding=None, embedding_status=EmbeddingStatus.PENDING, embedding_error="", embedding_attempts=0
        )
        audit_rows(
            [r[:3] for r in rows],
            EventType.REEMBED_REQUESTED,
            [
                {
                    "from_model": r[3],
                    "to_model": embedtext.embedding_identity(model, in_session=embedtext.in_session(r[2], r[4])),
                }
                for r in rows
            ],
        )
    if not rows:
        return SweepResult()
    try:
        done = memory_embed_batch(memory_ids=[r[0] for r in rows])
    except EmbeddingUnavailable as exc:
        # Stop here: going on would drop the vectors of every other memory,
        # batch after batch, while the embedder is down, and leave the whole
        # store to keyword search until the retry sweep caught up. This batch
        # is finished by the retry sweep; the rest by the next run.
        logger.warning("re-embedding: embedder unavailable, %d memories left pending: %s", len(rows), exc)
        return SweepResult(processed=0, failed=len(rows), more=False)
    return SweepResult(processed=done, more=stale.exists(), ids=[r[0] for r in rows])


def memories_mark_stale(*, tenant_id: uuid.UUID | None = None) -> int:
    """Operator's 'embed everything again' (same model, e.g. a fixed
    preprocessing step): forget which model made each vector, so the re-embed
    sweep treats every memory as stale. Vectors stay until each is replaced."""
    qs = Memory.objects.filter(embedding_status=EmbeddingStatus.READY)
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    return qs.update(embedding_model="")


def memories_failed_requeue(*, tenant_id: uuid.UUID | None = None, limit: int | None = None) -> int:
    """Give memories whose embedding finally failed another round of retries
    (all of them, or a bounded batch when ``limit`` is given)."""
    qs = Memory.objects.filter(embedding_status=EmbeddingStatus.FAILED)
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    if limit is not None:
        qs = Memory.objects.filter(
            pk__in=list(qs.order_by().values_list("pk", flat=True)[:limit]), embedding_status=EmbeddingStatus.FAILED
        )
    return qs.update(embedding_status=EmbeddingStatus.PENDING, embedding_attempts=0)
