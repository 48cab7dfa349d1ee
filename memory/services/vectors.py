"""Vectors for stored memories, many per model call: the worker's embed task
(through memory/services/pipeline.py), the embedding retry and re-embed sweeps,
and the admin's re-embed. A write embeds its own memory before it stores it
(memory/services/memories.py); what could not be embedded then comes here."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from memory import embedtext
from memory.embeddings import get_embedder
from memory.errors import EmbeddingUnavailable
from memory.models import EmbeddingStatus, Kind, Memory
from memory.retrieval import vector_literal
from memory.services.followups import followups_for_writes
from memory.services.locks import memory_rows_lock


def memory_embed_batch(*, memory_ids: Sequence[uuid.UUID]) -> int:
    """Embed many pending memories with one model call (bulk ingest, retries,
    re-embedding). Returns how many rows got a vector; safe to run twice."""
    pending = list(
        Memory.objects.without_vectors()
        .filter(pk__in=list(memory_ids))
        .exclude(embedding_status=EmbeddingStatus.READY)
        .values_list("pk", "content", "content_hash", "kind", "session_id")
    )
    if not pending:
        return 0
    embedder = get_embedder()
    inputs = embedtext.texts_with_previous([(pk, kind, content) for pk, content, _, kind, _ in pending])
    try:
        vectors = embedder.embed([text for text, _, _ in inputs])
    except EmbeddingUnavailable as exc:
        Memory.objects.filter(pk__in=[row[0] for row in pending]).update(
            embedding_attempts=F("embedding_attempts") + 1, embedding_error=str(exc)[:2000]
        )
        raise
    # One statement for the whole batch. Conditional on the same content (an
    # edit in between wins over a stale vector), on the row still waiting, and
    # on the same previous turn, still retrievable and of the turn's boundary
    # class if the text holds it: a turn forgotten, replaced, expired or
    # reclassified while the model ran must not be written into the vector of
    # the turn after it (that turn stays pending and is embedded again from
    # what is visible then). The row locks come first, in a statement of their
    # own, so the UPDATE sees whatever the writer that held them committed.
    rows = ", ".join(["(%s::uuid, %s, %s::vector, %s, %s::uuid, %s)"] * len(pending))
    params: list[Any] = []
    for (pk, _, digest, kind, session_id), vector, (_, previous, holds) in zip(pending, vectors, inputs, strict=True):
        identity = embedtext.embedding_identity(embedder.model_name, in_session=embedtext.in_session(kind, session_id))
        params += [pk, digest, vector_literal(vector), identity, previous, holds]
    with transaction.atomic(), connection.cursor() as cursor:
        memory_rows_lock(row[0] for row in pending)
        cursor.execute(
            f"""
            UPDATE memory_memory m
            SET embedding = v.embedding, embedding_model = v.model, embedding_status = 'ready',
                embedding_error = '', updated_at = %s
            FROM (VALUES {rows}) AS v(id, content_hash, embedding, model, previous, holds)
            WHERE m.id = v.id AND m.content_hash = v.content_hash AND m.embedding_status <> 'ready'
              AND (v.previous IS NULL OR v.previous IS NOT DISTINCT FROM {embedtext.PREVIOUS_ID_SQL})
              AND (NOT v.holds OR EXISTS (
                SELECT 1 FROM memory_memory p WHERE p.id = v.previous AND {embedtext.PREVIOUS_SHAREABLE_SQL}
              ))
            """,  # noqa: S608 - only placeholders and a constant are spliced in
            [timezone.now(), *params],
        )
        return cursor.rowcount


def turns_unembed(turns: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> int:
    """Turns given as (id, tenant id) whose vector may hold a turn that is
    leaving retrieval (``embedtext.following_turns``): drop the vector now, so
    the turn ranks on nothing it does not say itself (its keyword entry is
    its own content), and have the worker embed it again from what is visible
    then, through the outbox's embed follow-up, as a store that could not embed
    (the embedding retry sweep takes what the follow-up does not). Inside the
    caller's transaction; one UPDATE for all of them."""
    if not turns:
        return 0
    ids = sorted({pk for pk, _ in turns})
    memory_rows_lock(ids)  # re-entrant for rows the caller locked already
    changed = Memory.objects.filter(pk__in=ids).update(
        embedding=None,
        embedding_status=EmbeddingStatus.PENDING,
        embedding_error="",
        embedding_attempts=0,
        updated_at=timezone.now(),
    )
    # Records for the outbox only (nothing is saved): what it needs of each.
    followups_for_writes(
        [
            Memory(id=pk, tenant_id=tenant_id, kind=Kind.EPISODE, embedding_status=EmbeddingStatus.PENDING)
            for pk, tenant_id in sorted(set(turns))
        ]
    )
    return changed


def memory_embed(*, memory_id: uuid.UUID) -> bool:
    """Give one pending memory its vector (the worker's entry point)."""
    return memory_embed_batch(memory_ids=[memory_id]) == 1
