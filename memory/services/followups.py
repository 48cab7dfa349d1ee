"""The outbox (issue 15): follow-up work of a write, recorded in the write's own
transaction, so that a committed write answers success even when the broker is
down and its follow-up is still done later.

- ``followups_for_writes`` records the follow-up (a ``FollowUp`` row) inside the
  write's transaction and, after commit, hands it to the transport registered
  for its kind: best effort, never raising to the writer.
- ``followups_embedded`` closes embed follow-ups once a vector is there and
  records the conflict checks that follow.

This module holds the records only and imports nothing but the models, so every
write service can record follow-ups. The work itself (embedding, the conflict
check, the drain sweep) is memory/services/pipeline.py, which imports the write
services. How a follow-up travels (Celery) is registered at start-up by the
workers app (workers/apps.py), so nothing here imports workers."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence

from django.db import transaction
from django.utils import timezone

from memory.models import CONFLICT_CHECKED_KINDS, EmbeddingStatus, FollowUp, FollowUpKind, Memory

logger = logging.getLogger(__name__)

# A transport takes the ids of the memories one transaction wrote (one, or a
# bulk import's or a book's hundreds), at most FOLLOWUP_ENQUEUE_BATCH at a time:
# the embed transport sends them as one task, so the worker embeds them with
# one model call instead of one call per memory. ``bulk``: the transaction
# wrote more than one memory (an import, a book, a long exchange); the
# transport sends such work behind every single write's, so that one tenant's
# import of thousands never holds up another tenant's next store.
Enqueue = Callable[[list[str], bool], object]
FOLLOWUP_ENQUEUE_BATCH = 256
_TRANSPORT: dict[str, Enqueue] = {}


def followup_register(kind: FollowUpKind, enqueue: Enqueue) -> None:
    """Called once per kind at start-up by whatever carries the work (workers/apps.py)."""
    _TRANSPORT[kind.value] = enqueue


def followup_transport(kind: FollowUpKind) -> Enqueue | None:
    """The transport registered for a kind (benchmarks swap it for an in-process queue)."""
    return _TRANSPORT.get(kind.value)


def _enqueue(kind: str, memory_ids: list[str], bulk: bool) -> None:
    """After commit. The write has succeeded whatever happens here: a broker
    outage is logged and the rows wait for the drain sweep."""
    enqueue = _TRANSPORT.get(kind)
    if enqueue is None:
        logger.warning("follow-up %s of %s: no transport registered; the sweep will run it", kind, memory_ids)
        return
    try:
        enqueue(memory_ids, bulk)
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
    bulk = len(ids) > 1

    def enqueue_all() -> None:
        for start in range(0, len(ids), FOLLOWUP_ENQUEUE_BATCH):
            _enqueue(kind.value, ids[start : start + FOLLOWUP_ENQUEUE_BATCH], bulk)

    transaction.on_commit(enqueue_all)


def followups_for_writes(memories: Sequence[Memory]) -> None:
    """What new memories still need once committed: a vector (which then
    brings its conflict check), or for a fact or rule with a vector, the check
    (``CONFLICT_CHECKED_KINDS``).
    One INSERT per kind however many memories one transaction wrote."""
    ready = EmbeddingStatus.READY
    _record([(m.id, m.tenant_id) for m in memories if m.embedding_status != ready], FollowUpKind.EMBED)
    _record(
        [(m.id, m.tenant_id) for m in memories if m.embedding_status == ready and m.kind in CONFLICT_CHECKED_KINDS],
        FollowUpKind.CONFLICT_CHECK,
    )


def followups_embedded(*, memory_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """Memories that may now have their vector (the embed task, the retry
    sweep): close their open embed follow-ups and record the conflict check of
    each fact and rule whose embed follow-up this call closed (or that never
    had one, nor a check), so two callers racing on one memory record one
    check. Returns the memories whose check was recorded."""
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
        # A memory that was checked before and only lost its vector since (a
        # re-embed the embedder failed, finished by the retry sweep) is not
        # checked again: a second check would undo what review did meanwhile
        # (a duplicate merge the admin restored is merged again).
        checked = set(
            FollowUp.objects.filter(memory_id__in=list(ready), kind=FollowUpKind.CONFLICT_CHECK).values_list(
                "memory_id", flat=True
            )
        )
        checkable = set(
            Memory.objects.filter(pk__in=list(ready), kind__in=CONFLICT_CHECKED_KINDS).values_list("pk", flat=True)
        )
        due = [pk for pk in ready if pk in checkable and (pk in closing or (pk not in had_one and pk not in checked))]
        _record([(pk, ready[pk]) for pk in due], FollowUpKind.CONFLICT_CHECK)
    return due


def followups_close_missing(memory_id: uuid.UUID) -> None:
    """Close the open follow-ups of a memory that no longer exists."""
    FollowUp.objects.filter(memory_id=memory_id, done_at__isnull=True).update(
        done_at=timezone.now(), last_error="memory is gone"
    )
