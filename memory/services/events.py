"""The one writer of the audit log, its event types, and the chain check.

Every event is appended through ``memproj_events_append`` (migrations 0028,
0040), which serialises a tenant's appends with an advisory lock and chains
each row to the tenant's previous one: ``hash = sha256("v2", prev_hash, tenant,
type, memory id, memory kind, actor, token, payload, created_at)``, where the
token is the API token of the call; events written before the token was
recorded keep hash version 1 (no tag, no token). In the same transaction the
writer here sets the row's ``mac = HMAC-SHA256(audit key, hash)`` (migration
0035). The key never reaches the database, so whoever holds only the database
(its owner's or superuser's password, a copy of its files) can edit a row and
recompute every hash, but not the MACs. ``chain_verify`` restates the recipe
here, independently of the database, so ``manage.py audit_verify`` catches a
row edited, removed or slipped in by anyone who bypassed the writer."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, models, transaction
from django.db.backends.utils import CursorWrapper

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
    # As in pce-memory v0.14.0, every tool call is audited.
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
    # The API token the call came with (Caller.token_id); None for work no token asked for.
    actor_token_id: uuid.UUID | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    # Only an import keeps a recorded time; everything else is stamped now.
    created_at: datetime | None = None


# The hash version memproj_events_append writes (migration 0040); event_hash knows every version.
EVENT_HASH_VERSION = 2


def _row(event: NewEvent) -> dict[str, Any]:
    return {
        "tenant_id": str(event.tenant_id),
        "event_type": str(event.event_type),
        "memory_id": str(event.memory_id) if event.memory_id else None,
        "memory_kind": event.memory_kind,
        "actor_principal_id": str(event.actor_principal_id) if event.actor_principal_id else None,
        "actor_token_id": str(event.actor_token_id) if event.actor_token_id else None,
        "payload": event.payload,
        "created_at": event.created_at.isoformat() if event.created_at else None,
    }


def audit_key() -> bytes:
    """The chain's HMAC key: ``MEMPROJ_AUDIT_KEY``, else one generated once in
    ``var/secrets/audit.key`` (0600). Only the service's processes read it; it
    is never a query parameter."""
    configured = str(getattr(settings, "MEMPROJ_AUDIT_KEY", "") or "")
    if configured:
        return configured.encode()
    from memproj.embedded import VAR_DIR

    return _generated_key(str(VAR_DIR))


@cache
def _generated_key(var_dir: str) -> bytes:
    from memproj.embedded import secret

    return secret("audit.key", Path(var_dir)).encode()


def event_mac(key: bytes, event_hash: str) -> str:
    """The MAC of one event: its hash covers its content and, through
    ``prev_hash``, every earlier event of its tenant."""
    return hmac.new(key, b"memproj.audit.v1\n" + event_hash.encode(), hashlib.sha256).hexdigest()


def _seal(cursor: CursorWrapper, rows: Sequence[tuple[int, str]]) -> None:
    """Set the MAC of rows that have none (the append-only trigger allows
    exactly that: ``mac`` from '' to a value, nothing else changed)."""
    if not rows:
        return
    key = audit_key()
    cursor.execute(
        "UPDATE memory_memoryevent AS e SET mac = v.mac FROM unnest(%s::bigint[], %s::text[]) AS v(id, mac)"
        " WHERE e.id = v.id AND e.mac = ''",
        [[pk for pk, _ in rows], [event_mac(key, event_hash) for _, event_hash in rows]],
    )


def events_append(events: Sequence[NewEvent]) -> list[int]:
    """Append events in order and seal them (two round trips, one
    transaction: a committed event always has its MAC); callers do this
    inside the write's own transaction. Returns the new ids."""
    if not events:
        return []
    rows = json.dumps([_row(e) for e in events], cls=DjangoJSONEncoder)
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute("SELECT id, hash FROM memproj_events_append(%s::jsonb)", [rows])
        appended = [(pk, event_hash) for pk, event_hash in cursor.fetchall()]
        _seal(cursor, appended)
    return [pk for pk, _ in appended]


def caller_event(
    *,
    caller: Caller | None,
    tenant_id: uuid.UUID,
    event_type: EventType,
    memory_id: uuid.UUID | None = None,
    memory_kind: str = "",
    payload: dict[str, Any] | None = None,
) -> NewEvent:
    """The audit row of a caller's action: its principal as the actor, the API
    token it authenticated with (none for the admin's, background work's and
    commands' callers, which hold no token) and, for an elevated caller, the
    tenant it came from."""
    body = dict(payload or {})
    if caller is not None and caller.elevated_from is not None:
        body["elevated_from_tenant"] = str(caller.elevated_from)
    return NewEvent(
        tenant_id=tenant_id,
        event_type=event_type,
        memory_id=memory_id,
        memory_kind=memory_kind,
        actor_principal_id=caller.principal_id if caller else None,
        actor_token_id=caller.token_id if caller else None,
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
        actor_token_id=event.actor_token_id,
        payload=event.payload,
        hash_version=EVENT_HASH_VERSION,
    )


# --- verification ----------------------------------------------------------------------------


class UnknownHashVersion(ValueError):
    pass


def event_hash(
    *,
    version: int,
    prev_hash: str,
    tenant_id: uuid.UUID,
    event_type: str,
    memory_id: uuid.UUID | None,
    memory_kind: str,
    actor_principal_id: uuid.UUID | None,
    actor_token_id: uuid.UUID | None,
    payload_text: str,
    created_at: datetime,
) -> str:
    """The chain's recipe, as memproj_event_hash computes it, for each hash
    version: 1 (events written before the token was recorded: no tag, no
    token; ``actor_token_id`` is not part of it) and 2 (a version tag first, the
    token after the actor). The payload is PostgreSQL's canonical text of the
    stored jsonb (keys sorted, one spacing)."""
    stamp = created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    head = [
        prev_hash,
        str(tenant_id),
        event_type,
        str(memory_id) if memory_id else "",
        memory_kind,
        str(actor_principal_id) if actor_principal_id else "",
    ]
    if version == 1:
        parts = [*head, payload_text, stamp]
    elif version == 2:
        parts = ["v2", *head, str(actor_token_id) if actor_token_id else "", payload_text, stamp]
    else:
        raise UnknownHashVersion(f"unknown hash version {version}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@dataclass
class ChainReport:
    tenant_id: uuid.UUID
    events: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class _CheckedEvent:
    pk: int
    hash: str
    mac: str
    chain_problems: tuple[str, ...]  # none when the row follows its predecessor and matches its content
    mac_problem: str


def _chain_rows(tenant_id: uuid.UUID) -> Iterator[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, prev_hash, hash, hash_version, mac, event_type, memory_id, memory_kind, actor_principal_id,"
            " actor_token_id, payload::text, created_at FROM memory_memoryevent WHERE tenant_id = %s ORDER BY id",
            [tenant_id],
        )
        while batch := cursor.fetchmany(2000):
            yield from batch


def _walk(tenant_id: uuid.UUID, key: bytes) -> Iterator[_CheckedEvent]:
    """Each event of the tenant in id order, checked: its ``prev_hash`` must be
    the previous row's ``hash``, its ``hash`` must match its content and its
    ``mac`` the hash under the key."""
    prev = ""
    for row in _chain_rows(tenant_id):
        pk, prev_hash, stored, version, mac, event_type, memory_id, kind, actor, token, payload_text, created_at = row
        chain_problems = []
        if prev_hash != prev:
            chain_problems.append(f"event {pk}: does not follow the previous event (a row was removed or inserted)")
        try:
            expected = event_hash(
                version=version,
                prev_hash=prev_hash,
                tenant_id=tenant_id,
                event_type=event_type,
                memory_id=memory_id,
                memory_kind=kind,
                actor_principal_id=actor,
                actor_token_id=token,
                payload_text=payload_text,
                created_at=created_at,
            )
        except UnknownHashVersion:
            chain_problems.append(f"event {pk}: its hash version {version} is unknown (the row was altered)")
        else:
            # Version 1 hashes no token, and none was recorded then: a token there was added later.
            if stored != expected or (version == 1 and token is not None):
                chain_problems.append(f"event {pk}: its hash does not match its content (the row was altered)")
        mac_problem = ""
        if not mac:
            mac_problem = f"event {pk}: has no MAC (written or re-chained without the audit key)"
        elif not hmac.compare_digest(mac, event_mac(key, stored)):
            mac_problem = (
                f"event {pk}: its MAC does not match (it, or the chain before it, was rewritten without the audit key)"
            )
        yield _CheckedEvent(pk, stored, mac, tuple(chain_problems), mac_problem)
        prev = stored


def chain_verify(*, tenant_ids: Iterable[uuid.UUID]) -> list[ChainReport]:
    """Walk each tenant's events in id order, so an edited, removed or
    inserted row shows at the first row it breaks, and a rewrite that
    recomputed the hashes (possible with the database alone) shows at every
    row from the first one rewritten: their MACs no longer match."""
    key = audit_key()
    reports = []
    for tenant_id in tenant_ids:
        report = ChainReport(tenant_id=tenant_id)
        for checked in _walk(tenant_id, key):
            report.events += 1
            report.problems += [*checked.chain_problems, *([checked.mac_problem] if checked.mac_problem else [])]
        reports.append(report)
    return reports


@dataclass(frozen=True)
class SealedState:
    """A tenant's log before the purge function re-chains it."""

    verified: frozenset[int]
    last_id: int


def events_sealed_state(tenant_id: uuid.UUID) -> SealedState:
    """The ids of the tenant's events that verify in full now, and its last id."""
    key = audit_key()
    verified, last_id = set(), 0
    for checked in _walk(tenant_id, key):
        last_id = checked.pk
        if not checked.chain_problems and not checked.mac_problem:
            verified.add(checked.pk)
    return SealedState(frozenset(verified), last_id)


def events_reseal(tenant_id: uuid.UUID, before: SealedState) -> int:
    """After ``memproj_purge_events`` (which cannot compute MACs, so it leaves
    the rows it re-chains and the purge event without one), seal those rows:
    only events that verified in full before the purge or were appended by it,
    so a purge never launders an earlier rewrite. Returns how many were sealed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, hash FROM memory_memoryevent WHERE tenant_id = %s AND mac = '' ORDER BY id", [tenant_id]
        )
        rows = [(pk, h) for pk, h in cursor.fetchall() if pk in before.verified or pk > before.last_id]
        _seal(cursor, rows)
    return len(rows)


def events_seal_unkeyed() -> int:
    """Key the events written before the log had MACs (migration 0035): per
    tenant, the rows whose hash chain verifies, up to the first that does not
    (those after it stay without a MAC, and ``audit_verify`` reports them)."""
    key = audit_key()
    sealed = 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT tenant_id FROM memory_memoryevent WHERE mac = ''")
        tenant_ids = [row[0] for row in cursor.fetchall()]
    for tenant_id in tenant_ids:
        rows = []
        for checked in _walk(tenant_id, key):
            if checked.chain_problems:
                break
            if not checked.mac:
                rows.append((checked.pk, checked.hash))
        with connection.cursor() as cursor:
            for start in range(0, len(rows), 5000):
                _seal(cursor, rows[start : start + 5000])
        sealed += len(rows)
    return sealed
