"""The one feedback service: every dialect's outcome signal goes through here
(the butlers memory module's helpful/harmful, roampal worked/partial/failed/unknown, pce
helpful/harmful/outdated/duplicate). The rules live in ``memory.outcomes``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from memory import embedtext, validation
from memory.models import Kind, Memory, OutcomeReport, Validity
from memory.outcomes import Signal, collection_apply, signal_apply
from memory.selectors.aliases import memory_pk
from memory.selectors.memories import boundary_view
from memory.services.events import EventType, event_append
from memory.services.locks import memory_rows_lock, tenant_write_lock
from memory.services.memories import memory_lock, memory_require_live, require_write
from policy.caller import Caller


@dataclass
class FeedbackResult:
    memory: Memory
    applied: bool  # False: the idempotency key was seen before, nothing changed


def memory_feedback(
    *,
    caller: Caller,
    memory_id: object,
    signal: str,
    kinds: Iterable[str] = Kind.values,
    reason: str | None = None,
    idempotency_key: str | None = None,
) -> FeedbackResult:
    """Record one outcome for one of the caller's memories, in one transaction
    with its audit event. With an ``idempotency_key`` a repeated report for the
    same memory changes nothing and answers ``applied=False``."""
    require_write(caller)
    chosen = Signal(validation.choice(signal, field="signal", allowed=[s.value for s in Signal]))
    if reason is not None:
        reason = validation.text(reason, field="reason", max_chars=2000)
    if idempotency_key is not None:
        idempotency_key = validation.text(idempotency_key, field="idempotency_key", max_chars=200)
    with transaction.atomic():
        pk = memory_pk(caller, memory_id)
        tenant_write_lock(caller.tenant_id)
        # roampal's lifecycle may delete the memory (collection_apply), which
        # drops the vector of the turn after it: that row is locked first, with
        # the memory's, in primary-key order, as every writer of several rows
        # locks them (a search's bookkeeping, a vector write); locked after the
        # memory's, two such writers could each hold what the other waits for.
        following = embedtext.following_turns(memory_ids=[pk], now=timezone.now(), tenant_id=caller.tenant_id)
        if following:
            memory_rows_lock([pk, *(turn for turn, _ in following)])
        memory = memory_lock(caller=caller, memory_id=memory_id, kinds=kinds)
        now = timezone.now()
        # No counter, maturity or collection of a memory no read returns (forgotten,
        # superseded or expired) moves again (pce-memory's feedback knows only live claims).
        memory_require_live(
            memory,
            now,
            refusal=": outcomes apply to active memories only.",
            redirect=": send the outcome to {successor}.",
        )
        if idempotency_key:
            _, created = OutcomeReport.objects.get_or_create(
                memory=memory,
                idempotency_key=idempotency_key,
                defaults={"tenant_id": caller.tenant_id, "signal": chosen, "actor_principal_id": caller.principal_id},
            )
            if not created:
                return FeedbackResult(memory=boundary_view(caller, memory), applied=False)
        fields, maturity_before = signal_apply(memory, chosen, now)
        moved, collection_before = collection_apply(memory, now)
        memory.save(update_fields=list(dict.fromkeys([*fields, *moved, "updated_at"])))
        payload: dict[str, Any] = {
            "signal": chosen.value,
            "outcome_score": memory.outcome_score,
            "effectiveness_score": memory.effectiveness_score,
        }
        if reason:
            payload["reason"] = reason
        if idempotency_key:
            payload["idempotency_key"] = idempotency_key
        event_append(
            caller=caller,
            tenant_id=caller.tenant_id,
            memory=memory,
            event_type=EventType(f"marked_{chosen}"),
            payload=payload,
        )
        if maturity_before is not None:
            event_append(
                caller=caller,
                tenant_id=caller.tenant_id,
                memory=memory,
                event_type=EventType.MATURITY_CHANGED,
                payload={"from": maturity_before, "to": memory.maturity},
            )
        if collection_before is not None:
            collection_event(caller=caller, memory=memory, before=collection_before, reason=f"scored {chosen}")
    # The answer shows content: boundary rules apply (issue 11).
    return FeedbackResult(memory=boundary_view(caller, memory), applied=True)


def collection_event(*, caller: Caller, memory: Memory, before: str, reason: str) -> None:
    """Audit one roampal lifecycle step (a move between collections, or a deletion)."""
    if memory.validity == Validity.RETRACTED:
        event_type, payload = (
            EventType.RETRACTED,
            {"collection": before, "reason": reason, "outcome_score": memory.outcome_score},
        )
    else:
        event_type, payload = EventType.COLLECTION_CHANGED, {"from": before, "to": memory.collection, "reason": reason}
    event_append(caller=caller, tenant_id=caller.tenant_id, memory=memory, event_type=event_type, payload=payload)
