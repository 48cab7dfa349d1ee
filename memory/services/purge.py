"""Right to be forgotten: purge a whole tenant's memories and audit events, or
one principal's. The audit log is append-only at the database level; a purge
is the one sanctioned exception, and leaves one event that says it happened."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone

from memory import embedtext
from memory.errors import NotFound, PermissionDenied
from memory.models import ConflictCandidate, FollowUp, Memory, MemoryLink, RefusedCall
from memory.services.events import EventType, events_reseal, events_sealed_state
from memory.services.locks import tenant_write_lock
from memory.services.vectors import turns_unembed
from memproj.dbroles import owner_user, separate_roles
from policy.models import Principal, Tenant

logger = logging.getLogger(__name__)


@dataclass
class PurgeResult:
    memories: int
    events: int
    conflicts: int
    links: int


def _require_owner() -> None:
    """Only the schema owner may execute the purge function (memproj/dbroles.py):
    say how to purge instead of failing on the database's permission error."""
    if separate_roles() and connection.settings_dict.get("USER") != owner_user():
        raise PermissionDenied(
            "a purge runs as the database owner: use `manage.py purge` (it connects as DATABASE_OWNER_URL)."
        )


def _purge_events(
    *,
    tenant_id: uuid.UUID,
    event_type: EventType,
    actor_principal_id: uuid.UUID | None,
    payload: dict[str, Any],
    memory_ids: list[uuid.UUID] | None = None,
    principal_id: uuid.UUID | None = None,
) -> int:
    """The audit log refuses every UPDATE, DELETE and TRUNCATE (migration 0028)
    except inside ``memproj_purge_events``, a function that runs as the table's
    owner, re-chains what remains and appends the purge event itself. Only the
    owner may execute it, so the caller connects as the owner (``as_owner``).
    The function cannot compute MACs (the key stays out of the database): the
    rows it re-chained and its event are sealed here, in the same transaction."""
    before = events_sealed_state(tenant_id)  # the caller holds the tenant write lock: no append comes between
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT memproj_purge_events(%s, %s, %s, %s::jsonb, %s::uuid[], %s)",
            [tenant_id, event_type.value, actor_principal_id, json.dumps(payload), memory_ids or [], principal_id],
        )
        deleted = int(cursor.fetchone()[0])
    events_reseal(tenant_id, before)
    return deleted


def _delete_memories(memory_ids: list[uuid.UUID]) -> tuple[int, int, int]:
    conflicts = ConflictCandidate.objects.filter(
        models.Q(memory_id__in=memory_ids) | models.Q(other_id__in=memory_ids)
    ).delete()[0]
    links = MemoryLink.objects.filter(
        models.Q(from_memory_id__in=memory_ids) | models.Q(to_memory_id__in=memory_ids)
    ).delete()[0]
    Memory.objects.filter(superseded_by_id__in=memory_ids).update(superseded_by=None)
    FollowUp.objects.filter(memory_id__in=memory_ids).delete()
    deleted = 0
    for start in range(0, len(memory_ids), 1000):
        deleted += Memory.objects.filter(pk__in=memory_ids[start : start + 1000]).delete()[0]
    return deleted, conflicts, links


def tenant_purge(*, tenant_id: uuid.UUID, reason: str = "", actor_principal_id: uuid.UUID | None = None) -> PurgeResult:
    """Delete every memory, audit event and refused call of one tenant. The tenant, its
    principals and tokens stay (it may keep using the service); one
    ``tenant_purged`` event records that a purge happened, with counts only."""
    _require_owner()
    if not Tenant.objects.filter(pk=tenant_id).exists():
        raise NotFound(f"no tenant with id {tenant_id}.")
    with transaction.atomic():
        tenant_write_lock(tenant_id)  # memory/services/locks.py
        memory_ids = list(Memory.objects.filter(tenant_id=tenant_id).values_list("pk", flat=True))
        memories, conflicts, links = _delete_memories(memory_ids)
        conflicts += ConflictCandidate.objects.filter(tenant_id=tenant_id).delete()[0]
        links += MemoryLink.objects.filter(tenant_id=tenant_id).delete()[0]
        FollowUp.objects.filter(tenant_id=tenant_id).delete()
        RefusedCall.objects.filter(tenant_id=tenant_id).delete()
        counts = {"memories": memories, "conflicts": conflicts, "links": links}
        events = _purge_events(
            tenant_id=tenant_id,
            event_type=EventType.TENANT_PURGED,
            actor_principal_id=actor_principal_id,
            payload={"reason": reason, **counts},
        )
        result = PurgeResult(events=events, **counts)
    logger.warning("purged tenant %s: %s", tenant_id, result)
    return result


def principal_purge(
    *, principal_id: uuid.UUID, reason: str = "", actor_principal_id: uuid.UUID | None = None
) -> PurgeResult:
    """Right to be forgotten for one principal: their memories, every audit
    event about those memories or acted by them, their refused calls, and the principal itself
    (with its tokens). One ``principal_purged`` event in the tenant's log
    records the purge, with counts and the principal's opaque id only."""
    _require_owner()
    principal = Principal.objects.filter(pk=principal_id).first()
    if principal is None:
        raise NotFound(f"no principal with id {principal_id}.")
    tenant_id = principal.tenant_id
    with transaction.atomic():
        tenant_write_lock(tenant_id)
        memory_ids = list(Memory.objects.filter(principal_id=principal_id).values_list("pk", flat=True))
        # A session may hold other principals' turns (an assistant's beside a
        # user's): a turn that follows one of theirs holds its text in its
        # vector, and is embedded again without it. Under the tenant's write
        # lock, so no turn comes or goes in between. A tenant purge leaves no
        # turn behind to do this for.
        following = embedtext.following_turns(memory_ids=memory_ids, now=timezone.now(), tenant_id=tenant_id)
        turns_unembed(following)
        memories, conflicts, links = _delete_memories(memory_ids)
        RefusedCall.objects.filter(principal_id=principal_id).delete()
        principal.delete()
        counts = {"memories": memories, "conflicts": conflicts, "links": links}
        events = _purge_events(
            tenant_id=tenant_id,
            event_type=EventType.PRINCIPAL_PURGED,
            actor_principal_id=actor_principal_id,
            payload={"principal_id": str(principal_id), "reason": reason, **counts},
            memory_ids=memory_ids,
            principal_id=principal_id,
        )
        result = PurgeResult(events=events, **counts)
    logger.warning("purged principal %s of tenant %s: %s", principal_id, tenant_id, result)
    return result
