"""Open conflict candidates (found by the background conflict check), as tools show them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db.models import Q

from memory.models import ConflictCandidate
from memory.selectors.memories import require_read
from policy.caller import Caller


@dataclass(frozen=True)
class OpenConflict:
    id: uuid.UUID
    kind: str
    other_memory_id: uuid.UUID
    similarity: float | None
    reason: str


def conflicts_open_for(*, caller: Caller, memory_id: uuid.UUID, limit: int = 20) -> list[OpenConflict]:
    """Open candidates that involve ``memory_id`` on either side, newest first."""
    require_read(caller)
    rows = (
        ConflictCandidate.objects.for_caller(caller)
        .open()
        .filter(Q(memory_id=memory_id) | Q(other_id=memory_id))
        .order_by("-created_at", "id")[:limit]
    )
    return [
        OpenConflict(
            id=row.id,
            kind=row.kind,
            other_memory_id=row.other_id if row.memory_id == memory_id else row.memory_id,
            similarity=row.similarity,
            reason=row.reason,
        )
        for row in rows
    ]
