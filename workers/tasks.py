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
from memory.services import consolidation, followups, maintenance

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
    # Records the conflict check (outbox) once the vector is there; False if the memory is gone.
    return followups.followup_embed_run(memory_id=uuid.UUID(memory_id))


@shared_task(bind=True, autoretry_for=TRANSIENT_DB, **_retrying)
def memory_conflict_check_task(self, memory_id: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    result = followups.followup_conflict_check_run(memory_id=uuid.UUID(memory_id))
    return {"merged": len(result.merged), "candidates": len(result.candidates), "skipped": result.skipped}


@shared_task(bind=True, autoretry_for=TRANSIENT_DB, **_retrying)
def followups_drain_task(self) -> int:  # type: ignore[no-untyped-def]
    result = followups.followups_drain()
    _again(self, result)
    return result.processed


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
