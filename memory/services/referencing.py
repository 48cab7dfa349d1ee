"""Reads that count as references: recall and get bump each returned memory's
reference count (seed 000), so they are services, not selectors. (The ranking
itself is ``memory.retrieval``; this module only adds the side effect.)"""

from __future__ import annotations

from memory.models import Memory
from memory.selectors.memories import ScoredMemory, memory_fetch, memory_ids, memory_recall_candidates
from memory.services.memories import memory_references_bump
from policy.caller import Caller


def memory_recall(*, caller: Caller, topic: str, scope: str | None = None, limit: int = 10) -> list[ScoredMemory]:
    results = memory_recall_candidates(caller=caller, topic=topic, scope=scope, limit=limit)
    memory_references_bump(caller=caller, memory_ids=memory_ids(results))
    for item in results:
        item.memory.reference_count += 1
    return results


def memory_get(*, caller: Caller, kind: str, memory_id: object) -> Memory:
    memory = memory_fetch(caller=caller, kind=kind, memory_id=memory_id)
    memory_references_bump(caller=caller, memory_ids=[memory.id])
    memory.refresh_from_db(fields=["reference_count", "last_referenced_at"])
    return memory
