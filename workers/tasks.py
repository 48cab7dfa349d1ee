"""Celery tasks: ids in, one service call, nothing else (CONVENTIONS 4-5)."""

from __future__ import annotations

import logging
import uuid

from celery import shared_task

from memory.errors import EmbeddingUnavailable
from memory.services.memories import memory_embed

logger = logging.getLogger(__name__)


@shared_task(
    bind=True,
    acks_late=True,
    autoretry_for=(EmbeddingUnavailable,),
    retry_backoff=5,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=12,
)
def embed_memory_task(self, memory_id: str) -> bool:  # type: ignore[no-untyped-def]
    return memory_embed(memory_id=uuid.UUID(memory_id))
