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
from memory.models import EmbeddingStatus, Memory
from memory.retrieval import vector_literal
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
    texts = embedtext.texts_for_embedding([(pk, kind, content) for pk, content, _, kind, _ in pending])
    try:
        vectors = embedder.embed(texts)
    except EmbeddingUnavailable as exc:
        Memory.objects.filter(pk__in=[row[0] for row in pending]).update(
            embedding_attempts=F("embedding_attempts") + 1, embedding_error=str(exc)[:2000]
        )
        raise
    # One statement for the whole batch. Conditional on the same content (an
    # edit in between wins over a stale vector) and on the row still waiting.
    rows = ", ".join(["(%s::uuid, %s, %s::vector, %s)"] * len(pending))
    params: list[Any] = []
    for (pk, _, digest, kind, session_id), vector in zip(pending, vectors, strict=True):
        identity = embedtext.embedding_identity(embedder.model_name, in_session=embedtext.in_session(kind, session_id))
        params += [pk, digest, vector_literal(vector), identity]
    with transaction.atomic(), connection.cursor() as cursor:
        memory_rows_lock(row[0] for row in pending)
        cursor.execute(
            f"""
            UPDATE memory_memory m
            SET embedding = v.embedding, embedding_model = v.model, embedding_status = 'ready',
                embedding_error = '', updated_at = %s
            FROM (VALUES {rows}) AS v(id, content_hash, embedding, model)
            WHERE m.id = v.id AND m.content_hash = v.content_hash AND m.embedding_status <> 'ready'
            """,  # noqa: S608 - only placeholders are spliced in
            [timezone.now(), *params],
        )
        return cursor.rowcount


def memory_embed(*, memory_id: uuid.UUID) -> bool:
    """Give one pending memory its vector (the worker's entry point)."""
    return memory_embed_batch(memory_ids=[memory_id]) == 1
