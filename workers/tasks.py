"""Celery tasks: ids in, one service call, nothing else (the logic is in the
services, so a task, a management command and a test run the same code).

Every task is idempotent, so all acknowledge late (a worker killed mid-task has
its message redelivered) and retry only transient errors: the embedder or the
LLM being unavailable, or the database dropping the connection. Sweeps run a
bounded batch and re-enqueue themselves while more remains."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError

from memory.consolidators import ConsolidatorUnavailable
from memory.errors import EmbeddingUnavailable
from memory.services import collections, consolidation, pipeline, reembedding, sweeps

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


# An embedder outage is usually short (a restart, a circuit-breaker cooldown):
# a write's vector should follow within a minute of recovery, not after a
# ten-minute backoff (with that cap, the reliability suite's embedder faults
# left follow-ups waiting long after the embedder was back).
@shared_task(bind=True, autoretry_for=(EmbeddingUnavailable, *TRANSIENT_DB), **{**_retrying, "retry_backoff_max": 60})
def embed_memories_task(self, memory_ids: list[str]) -> int:  # type: ignore[no-untyped-def]
    # One model call for all of them; records each conflict check (outbox) once the vector is there.
    return pipeline.followups_embed_run(memory_ids=[uuid.UUID(pk) for pk in memory_ids])


# Messages queued by a release before batched enqueueing (one id each) still arrive.
@shared_task(bind=True, autoretry_for=(EmbeddingUnavailable, *TRANSIENT_DB), **{**_retrying, "retry_backoff_max": 60})
def embed_memory_task(self, memory_id: str) -> bool:  # type: ignore[no-untyped-def]
    # False if the memory is gone or already had its vector.
    return pipeline.followups_embed_run(memory_ids=[uuid.UUID(memory_id)]) == 1


@shared_task(bind=True, autoretry_for=TRANSIENT_DB, **_retrying)
def memory_conflict_check_task(self, memory_id: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    result = pipeline.followup_conflict_check_run(memory_id=uuid.UUID(memory_id))
    return {"merged": len(result.merged), "candidates": len(result.candidates), "skipped": result.skipped}


# The Redis transport's lowest priority (kombu: 0 is the highest of 0..9): a
# worker takes such a message only when no message of a single write, nor a
# sweep, is waiting in its queue. Brokers without priorities keep the order sent.
BULK_PRIORITY = 9


def priority(bulk: bool) -> dict[str, int]:
    """The send options of a follow-up: a bulk write's wait behind everything else."""
    return {"priority": BULK_PRIORITY} if bulk else {}


def enqueue(task: Any, args: tuple[Any, ...] = (), **options: Any) -> Any:
    """Send a task; in eager mode (tests, the reliability suite's in-process
    parts) run it here with ``apply``. Not through ``apply_async``: its eager
    branch sets Celery's process-global "a join would block" flag for the
    task's duration and then restores the value it saw on entry, so two
    threads enqueueing at once (tool calls run in worker threads) can leave the
    flag set for good, and every later ``result.get()`` in the process raises
    "Never call result.get() within a task"."""
    if task.app.conf.task_always_eager:
        return task.apply(args, **{k: v for k, v in options.items() if k not in {"retry", "countdown"}})
    return task.apply_async(args, **options)


# --- Sweeps: one factory, so every sweep task retries and re-enqueues the same way ---------


def _sweep_task(name: str, sweep: Callable[[], Any], retry_on: tuple[type[Exception], ...] = ()) -> Any:
    """A beat-driven task for one bounded sweep: it runs a batch and, while more
    remains, enqueues itself again. Returns how many rows the batch processed."""

    def run(self: Any) -> int:
        result = sweep()
        if result.more:
            enqueue(self, countdown=REENQUEUE_COUNTDOWN)
        return int(result.processed)

    run.__name__ = run.__qualname__ = name
    retrying = {**_retrying, "autoretry_for": (*retry_on, *TRANSIENT_DB)}
    return shared_task(name=f"workers.tasks.{name}", bind=True, **retrying)(run)


embeddings_retry_task = _sweep_task("embeddings_retry_task", reembedding.embeddings_retry)
memories_reembed_task = _sweep_task("memories_reembed_task", reembedding.memories_reembed, (EmbeddingUnavailable,))
memories_expire_task = _sweep_task("memories_expire_task", sweeps.memories_expire)
facts_decay_task = _sweep_task("facts_decay_task", sweeps.facts_decay)
rules_maturity_task = _sweep_task("rules_maturity_task", sweeps.rules_maturity)
followups_drain_task = _sweep_task("followups_drain_task", pipeline.followups_drain)
episodes_consolidate_task = _sweep_task(
    "episodes_consolidate_task", consolidation.consolidation_sweep, (ConsolidatorUnavailable,)
)
# roampal v0.3.5: the collection lifecycle, transcript retention, book embedding.
collections_lifecycle_task = _sweep_task("collections_lifecycle_task", collections.collections_lifecycle)
transcripts_retention_task = _sweep_task("transcripts_retention_task", collections.transcripts_retention)
# pce: expired active contexts.
active_contexts_expire_task = _sweep_task("active_contexts_expire_task", sweeps.active_contexts_expire)
# Idempotency keys of writes past their expiry.
idempotency_keys_expire_task = _sweep_task("idempotency_keys_expire_task", sweeps.idempotency_keys_expire)
