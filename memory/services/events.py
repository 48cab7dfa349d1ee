from __future__ import annotations

import uuid
from typing import Any

from memory.models import Memory, MemoryEvent
from policy.caller import Caller


def event_append(
    *,
    caller: Caller | None,
    tenant_id: uuid.UUID,
    event_type: str,
    memory: Memory | None = None,
    payload: dict[str, Any] | None = None,
) -> MemoryEvent:
    """Append one audit row; callers do this inside the write's own transaction."""
    body = dict(payload or {})
    if caller is not None and caller.elevated_from is not None:
        body["elevated_from_tenant"] = str(caller.elevated_from)
    return MemoryEvent.objects.create(
        tenant_id=tenant_id,
        memory_id=memory.id if memory else None,
        memory_kind=memory.kind if memory else "",
        event_type=event_type,
        actor_principal_id=caller.principal_id if caller else None,
        payload=body,
    )
