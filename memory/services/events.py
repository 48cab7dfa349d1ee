"""The one writer of the audit log, its event types, and the chain check.

Every event is appended through ``memproj_events_append`` (migration 0026),
which serialises a tenant's appends with an advisory lock and chains each row
to the tenant's previous one: ``hash = sha256(prev_hash, tenant, type, memory
id, memory kind, actor, payload, created_at)``. ``chain_verify`` restates the
recipe here, independently of the database, so ``manage.py audit_verify``
catches a row edited, removed or slipped in by anyone who bypassed the writer."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, models

from memory.models import Memory, MemoryEvent
from policy.caller import Caller


class EventType(models.TextChoices):
    """Every audit event type, in one place (the admin's filter lists these)."""

    STORED = "stored"
    SUPERSEDED = "superseded"
    CONFIRMED = "confirmed"
    RETRACTED = "retracted"
    RESTORED = "restored"
    # One per outcome signal (memory/outcomes.py::Signal): ``marked_<signal>``.
    MARKED_HELPFUL = "marked_helpful"
    MARKED_HARMFUL = "marked_harmful"
    MARKED_WORKED = "marked_worked"
    MARKED_PARTIAL = "marked_partial"
    MARKED_FAILED = "marked_failed"
    MARKED_UNKNOWN = "marked_unknown"
    MARKED_OUTDATED = "marked_outdated"
    MARKED_DUPLICATE = "marked_duplicate"
    MATURITY_CHANGED = "maturity_changed"
    REEMBED_REQUESTED = "reembed_requested"
    ADMIN_REVIEW = "admin_review"
    TENANT_ELEVATION = "tenant_elevation"
    CONFLICT_ACCEPTED = "conflict_accepted"
    CONFLICT_DISMISSED = "conflict_dismissed"
    CONSOLIDATED = "consolidated"
    CONFLICT_DETECTED = "conflict_detected"
    FACT_STATE_CHANGED = "fact_state_changed"
    EXPIRED_DELETED = "expired_deleted"
    # Seed 004 (pce): every tool call is audited.
    TOOL_CALL = "tool_call"
    COLLECTION_CHANGED = "collection_changed"
    BOOK_INGESTED = "book_ingested"
    # Written by the purge function itself (memproj_purge_events), never by a service.
    TENANT_PURGED = "tenant_purged"
    PRINCIPAL_PURGED = "principal_purged"


@dataclass(frozen=True)
class NewEvent:
    tenant_id: uuid.UUID
    event_type: EventType | str  # a str only for an imported event of a legacy type
    memory_id: uuid.UUID | None = None
    memory_kind: str = ""
    actor_principal_id: uuid.UUID | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    # Only an import keeps a recorded time; everything else is stamped now.
    created_at: datetime | None = None


def _row(event: NewEvent) -> dict[str, Any]:
    return {
        "tenant_id": str(event.tenant_id),
        "event_type": str(event.event_type),
        "memory_id": str(event.memory_id) if event.memory_id else None,
        "memory_kind": event.memory_kind,
        "actor_principal_id": str(event.actor_principal_id) if event.actor_principal_id else None,
        "payload": event.payload,
        "created_at": event.created_at.isoformat() if event.created_at else None,
    }


def events_append(events: Sequence[NewEvent]) -> list[int]:
    """Append events in order (one round trip); callers do this inside the
    write's own transaction. Returns the new ids."""
    if not events:
        return []
    rows = json.dumps([_row(e) for e in events], cls=DjangoJSONEncoder)
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM memproj_events_append(%s::jsonb)", [rows])
        return [row[0] for row in cursor.fetchall()]


def caller_event(
    *,
    caller: Caller | None,
    tenant_id: uuid.UUID,
    event_type: EventType,
    memory_id: uuid.UUID | None = None,
    memory_kind: str = "",
    payload: dict[str, Any] | None = None,
) -> NewEvent:
    """The audit row of a caller's action: its principal as the actor and, for
    an elevated caller, the tenant it came from."""
    body = dict(payload or {})
    if caller is not None and caller.elevated_from is not None:
        body["elevated_from_tenant"] = str(caller.elevated_from)
    return NewEvent(
        tenant_id=tenant_id,
        event_type=event_type,
        memory_id=memory_id,
        memory_kind=memory_kind,
        actor_principal_id=caller.principal_id if caller else None,
        payload=body,
    )


def event_append(
    *,
    caller: Caller | None,
    tenant_id: uuid.UUID,
    event_type: EventType,
    memory: Memory | None = None,
    payload: dict[str, Any] | None = None,
) -> MemoryEvent:
    """Append one audit row for a caller's action."""
    event = caller_event(
        caller=caller,
        tenant_id=tenant_id,
        event_type=event_type,
        memory_id=memory.id if memory else None,
        memory_kind=memory.kind if memory else "",
        payload=payload,
    )
    [pk] = events_append([event])
    # The stored row minus its database-made columns (hash, created_at): no read-back on every write.
    return MemoryEvent(
        id=pk,
        tenant_id=tenant_id,
        memory_id=event.memory_id,
        memory_kind=event.memory_kind,
        event_type=event.event_type,
        actor_principal_id=event.actor_principal_id,
        payload=event.payload,
    )


# --- verification ----------------------------------------------------------------------------


def event_hash(
    *,
    prev_hash: str,
    tenant_id: uuid.UUID,
    event_type: str,
    memory_id: uuid.UUID | None,
    memory_kind: str,
    actor_principal_id: uuid.UUID | None,
    payload_text: str,
    created_at: datetime,
) -> str:
    """The chain's recipe, as memproj_event_hash computes it. The payload is
    PostgreSQL's canonical text of the stored jsonb (keys sorted, one spacing)."""
    stamp = created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    parts = [
        prev_hash,
        str(tenant_id),
        event_type,
        str(memory_id) if memory_id else "",
        memory_kind,
        str(actor_principal_id) if actor_principal_id else "",
        payload_text,
        stamp,
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@dataclass
class ChainReport:
    tenant_id: uuid.UUID
    events: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _chain_rows(tenant_id: uuid.UUID) -> Iterator[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, prev_hash, hash, event_type, memory_id, memory_kind, actor_principal_id, payload::text,"
            " created_at FROM memory_memoryevent WHERE tenant_id = %s ORDER BY id",
            [tenant_id],
        )
        while batch := cursor.fetchmany(2000):
            yield from batch


def chain_verify(*, tenant_ids: Iterable[uuid.UUID]) -> list[ChainReport]:
    """Walk each tenant's events in id order: every row's ``prev_hash`` must be
    the previous row's ``hash`` and its ``hash`` must match its content, so an
    edited, removed or inserted row shows at the first row it breaks."""
    reports = []
    for tenant_id in tenant_ids:
        report = ChainReport(tenant_id=tenant_id)
        prev = ""
        for pk, prev_hash, stored, event_type, memory_id, kind, actor, payload_text, created_at in _chain_rows(
            tenant_id
        ):
            report.events += 1
            if prev_hash != prev:
                report.problems.append(
                    f"event {pk}: does not follow the previous event (a row was removed or inserted)"
                )
            expected = event_hash(
                prev_hash=prev_hash,
                tenant_id=tenant_id,
                event_type=event_type,
                memory_id=memory_id,
                memory_kind=kind,
                actor_principal_id=actor,
                payload_text=payload_text,
                created_at=created_at,
            )
            if stored != expected:
                report.problems.append(f"event {pk}: its hash does not match its content (the row was altered)")
            prev = stored
        reports.append(report)
    return reports
