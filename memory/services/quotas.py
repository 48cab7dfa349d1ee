"""Per-tenant quotas (the tenant policy's ``quotas`` section, policy.document):
how many memories a tenant may hold and how much it may ingest as books, per
call and over any 24 hours.

The checks run inside the write's transaction, after the tenant write lock
(memory/services/locks.py; taken here too, it is re-entrant): every insert of a
tenant's memories holds that lock until it commits, so two writers cannot both
pass a check against the same count. What they read is already kept: the
memory count is the tenant's row of ``memory_tenantstat`` (kept by the insert
and delete triggers of migration 0011), the ingest volume the ``bytes`` of the
tenant's ``book_ingested`` audit events of the last 24 hours. A refused write
raises ``QuotaExceeded`` before it inserts anything, so its transaction stores
nothing."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from memory.errors import QuotaExceeded
from memory.models import MemoryEvent
from memory.services.events import EventType
from memory.services.locks import tenant_write_lock
from policy.caller import Caller

INGEST_WINDOW = timedelta(hours=24)


def tenant_memory_count(*, tenant_id: uuid.UUID) -> int:
    """Every stored memory of the tenant, whatever its validity (one row read)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT docs FROM memory_tenantstat WHERE tenant_id = %s", [tenant_id])
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def quota_memories_check(*, caller: Caller, adding: int) -> None:
    """Refuse a write of ``adding`` new memories that would take the tenant past
    its policy's ``quotas.max_memories``."""
    limit = caller.policy.quotas.max_memories
    tenant_write_lock(caller.tenant_id)
    used = tenant_memory_count(tenant_id=caller.tenant_id)
    if used + adding > limit:
        raise QuotaExceeded(
            f"this tenant holds {used} memories and its policy allows {limit} (quotas.max_memories); "
            f"storing {adding} more would pass it. Nothing was stored: ask a tenant admin to raise "
            "quotas.max_memories in the policy, or to purge memories no longer needed.",
            {"quota": "max_memories", "limit": limit, "used": used, "requested": adding},
        )


def tenant_ingested_bytes(*, tenant_id: uuid.UUID, since: datetime) -> int:
    """Bytes ingested as books since ``since``, from the ingest audit events."""
    sizes = MemoryEvent.objects.filter(
        tenant_id=tenant_id, event_type=EventType.BOOK_INGESTED, created_at__gt=since
    ).values_list("payload__bytes", flat=True)
    return sum(int(size) for size in sizes if isinstance(size, int))


def quota_ingest_check(*, caller: Caller, size: int) -> None:
    """Refuse an ingest of ``size`` bytes over the policy's per-call quota, or
    one that would take the last 24 hours' ingest volume past its daily quota."""
    quotas = caller.policy.quotas
    if size > quotas.ingest_bytes_per_call:
        raise QuotaExceeded(
            f"the document is {size} bytes and this tenant's policy allows {quotas.ingest_bytes_per_call} "
            "per ingest (quotas.ingest_bytes_per_call). Nothing was stored: split the document.",
            {"quota": "ingest_bytes_per_call", "limit": quotas.ingest_bytes_per_call, "requested": size},
        )
    tenant_write_lock(caller.tenant_id)
    used = tenant_ingested_bytes(tenant_id=caller.tenant_id, since=timezone.now() - INGEST_WINDOW)
    if used + size > quotas.ingest_bytes_per_day:
        raise QuotaExceeded(
            f"this tenant ingested {used} bytes in the last 24 hours and its policy allows "
            f"{quotas.ingest_bytes_per_day} (quotas.ingest_bytes_per_day); this document ({size} bytes) "
            "would pass it. Nothing was stored: retry once earlier ingests are more than 24 hours old, "
            "or ask a tenant admin to raise quotas.ingest_bytes_per_day in the policy.",
            {"quota": "ingest_bytes_per_day", "limit": quotas.ingest_bytes_per_day, "used": used, "requested": size},
        )
