"""Celery tasks: ids in, one service call, nothing else (CONVENTIONS 4-5).

Every task is idempotent, so all acknowledge late (a worker killed mid-task has
its message redelivered) and retry only transient errors: the embedder or the
LLM being unavailable, or the database dropping the connection. Sweeps run a
bounded batch and re-enqueue themselves while more remains."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError

from memory.consolidators import ConsolidatorUnavailable
from memory.errors import EmbeddingUnavailable
from memory.models import Memory
from memory.services import collections, consolidation, maintenance
from memory.services.conflicts import memory_conflict_check
from memory.services.memories import memory_embed, memory_embed_batch

logger = logging.getLogger(__name__)

TRANSIENT_DB = (OperationalError, InterfaceError)
# Pause before a sweep's next batch, so other queued work interleaves.
REENQUEUE_COUNTDOWN = 2

_retrying: dict[str, Any] = {
    "acks_late": True,
    "retry_backoff": 5,
    "retry_backoff_max": 600,
    "retry_jitter": True,
    "max_retries": 12,
}


def _again(task: Any, result: Any) -> None:
    if result.more:
        task.apply_async(countdown=REENQUEUE_COUNTDOWN)


@shared_task(bind=True, autoretry_for=(EmbeddingUnavailable, *TRANSIENT_DB), **_retrying)
def embed_memory_task(self, memory_id: str) -> bool:  # type: ignore[no-untyped-def]
    pk = uuid.UUID(memory_id)
    if not Memory.objects.filter(pk=pk).exists():
        logger.info("embed: memory %s is gone", memory_id)
        return False
    done = memory_embed(memory_id=pk)
    if done:
        memory_conflict_check_task.delay(memory_id)
    return done


@shared_task(bind=True, autoretry_for=TRANSIENT_DB, **_retrying)
def memory_conflict_check_task(self, memory_id: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    result = memory_conflict_check(memory_id=uuid.UUID(memory_id))
    return {"merged": len(result.merged), "candidates": len(result.candidates), "skipped": result.skipped}


@shared_task(bind=True, autoretry_for=TRANSIENT_DB, **_retrying)
def embeddings_retry_task(self) -> int:  # type: ignore[no-untyped-def]
    result = maintenance.embeddings_retry()
    _again(self, result)
    return result.processed


@shared_task(bind=True, autoretry_for=(EmbeddingUnavailable, *TRANSIENT_DB), **_retrying)
def memories_reembed_task(self) -> int:  # type: ignore[no-untyped-def]
    result = maintenance.memories_reembed()
    _again(self, result)
    return result.processed


@shared_task(bind=True, autoretry_for=TRANSIENT_DB, **_retrying)
def episodes_expire_task(self) -> int:  # type: ignore[no-untyped-def]
    result = maintenance.episodes_expire()
    _again(self, result)
    return result.processed


@shared_task(bind=True, autoretry_for=TRANSIENT_DB, **_retrying)
def facts_decay_task(self) -> int:  # type: ignore[no-untyped-def]
    result = maintenance.facts_decay()
    _again(self, result)
    return result.processed


@shared_task(bind=True, autoretry_for=TRANSIENT_DB, **_retrying)
def rules_maturity_task(self) -> int:  # type: ignore[no-untyped-def]
    result = maintenance.rules_maturity()
    _again(self, result)
    return result.processed


@shared_task(bind=True, autoretry_for=(ConsolidatorUnavailable, *TRANSIENT_DB), **_retrying)
def episodes_consolidate_task(self) -> int:  # type: ignore[no-untyped-def]
    result = consolidation.consolidation_sweep()
    _again(self, result)
    return len(result.created)


# --- Seed 003 (roampal): collection lifecycle, transcript retention, book embedding -------


@shared_task(bind=True, autoretry_for=TRANSIENT_DB, **_retrying)
def collections_lifecycle_task(self) -> int:  # type: ignore[no-untyped-def]
    result = collections.collections_lifecycle()
    _again(self, result)
    return result.processed


@shared_task(bind=True, autoretry_for=TRANSIENT_DB, **_retrying)
def transcripts_retention_task(self) -> int:  # type: ignore[no-untyped-def]
    result = collections.transcripts_retention()
    _again(self, result)
    return result.processed


@shared_task(bind=True, autoretry_for=(EmbeddingUnavailable, *TRANSIENT_DB), **_retrying)
def memories_embed_task(self, memory_ids: list[str]) -> int:  # type: ignore[no-untyped-def]
    """Embed a batch of pending memories (an ingested book's chunks) in one model call."""
    return memory_embed_batch(memory_ids=[uuid.UUID(pk) for pk in memory_ids])
