"""Writes that only human review makes: setting a rule's maturity by hand,
re-embedding a memory, and recording which superuser acted. Each is one
transaction with its audit event inside it (the admin's other review actions
reuse the services in ``memory.services.memories``)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from memory import validation
from memory.errors import EmbeddingUnavailable, InvalidArgument, PermissionDenied
from memory.models import EmbeddingStatus, Kind, Maturity, Memory, MemoryEvent
from memory.outcomes import maturity_set
from memory.services.events import EventType, event_append
from memory.services.memories import memory_lock
from memory.services.vectors import memory_embed
from policy.caller import Caller


def _require_admin(caller: Caller) -> None:
    if not caller.is_admin or not caller.has_scope("write"):
        raise PermissionDenied("only a tenant admin may do this; ask an admin of this tenant.")


def rule_set_maturity(*, caller: Caller, rule_id: object, maturity: str, reason: str = "") -> Memory:
    """Promote or demote a rule by hand. The confidence follows the maturity the
    same way it does when outcomes move it (``outcomes.maturity_set``), so
    a hand-promoted rule ranks like an earned one. Setting the maturity a rule
    already has changes nothing and records nothing."""
    _require_admin(caller)
    maturity = validation.choice(maturity, field="maturity", allowed=Maturity.values)
    if reason:
        reason = validation.text(reason, field="reason", max_chars=2000)
    with transaction.atomic():
        rule = memory_lock(caller=caller, memory_id=rule_id, kinds=[Kind.RULE])
        before = rule.maturity
        if before == maturity:
            return rule
        rule.save(update_fields=[*maturity_set(rule, maturity, timezone.now()), "updated_at"])
        payload: dict[str, Any] = {"from": before, "to": maturity, "manual": True}
        if reason:
            payload["reason"] = reason
        event_append(
            caller=caller,
            tenant_id=caller.tenant_id,
            memory=rule,
            event_type=EventType.MATURITY_CHANGED,
            payload=payload,
        )
    return rule


def memory_reembed(*, caller: Caller, memory_id: object) -> tuple[Memory, bool]:
    """Mark a memory's vector stale (audited), then embed it again through
    ``memory_embed``. If the embedder is down the memory stays pending and the
    embedding retry sweep picks it up: keyword search still finds it meanwhile.
    Returns the memory and whether it has a fresh vector now."""
    _require_admin(caller)
    with transaction.atomic():
        memory = memory_lock(caller=caller, memory_id=memory_id, kinds=Kind.values)
        previous_model = memory.embedding_model
        memory.embedding_status = EmbeddingStatus.PENDING
        memory.embedding_error = ""
        memory.save(update_fields=["embedding_status", "embedding_error", "updated_at"])
        event_append(
            caller=caller,
            tenant_id=caller.tenant_id,
            memory=memory,
            event_type=EventType.REEMBED_REQUESTED,
            payload={"previous_model": previous_model},
        )
    try:
        done = memory_embed(memory_id=memory.id)
    except EmbeddingUnavailable:
        done = False
    memory.refresh_from_db(fields=["embedding_status", "embedding_model", "embedding_error"])
    return memory, done


def admin_review_record(
    *, caller: Caller, action: str, username: str, memory: Memory | None = None, detail: dict[str, Any] | None = None
) -> MemoryEvent:
    """A superuser has no Principal in the tenant it reviews, so the service's
    own event carries no actor; this event, written in the same transaction,
    says who it was."""
    if not action or len(action) > 64:
        raise InvalidArgument("action must be a short name.")
    payload: dict[str, Any] = {"action": action, "superuser": username, **(detail or {})}
    return event_append(
        caller=caller, tenant_id=caller.tenant_id, memory=memory, event_type=EventType.ADMIN_REVIEW, payload=payload
    )
