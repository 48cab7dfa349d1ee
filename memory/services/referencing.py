"""Reads that count as references: recall and get bump each returned memory's
reference count (as in the butlers memory module), so they are services, not selectors. (The ranking
itself is ``memory.retrieval``; this module only adds the side effect.)"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from memory.models import Memory
from memory.selectors.memories import (
    ScoredMemory,
    SearchQuery,
    memory_fetch,
    memory_ids,
    memory_list_recent,
    memory_recall_candidates,
    memory_search,
)
from memory.services.memories import memory_accessed_mark, memory_references_bump
from policy.caller import Caller


def memory_recall(*, caller: Caller, topic: str, scope: str | None = None, limit: int = 10) -> list[ScoredMemory]:
    results = memory_recall_candidates(caller=caller, topic=topic, scope=scope, limit=limit)
    bumped = memory_references_bump(caller=caller, memory_ids=memory_ids(results))
    for item in results:
        _show_bump(item.memory, bumped)
    return results


def memory_get(*, caller: Caller, kind: str, memory_id: object) -> Memory:
    memory = memory_fetch(caller=caller, kind=kind, memory_id=memory_id)
    _show_bump(memory, memory_references_bump(caller=caller, memory_ids=[memory.id]))
    return memory


def _show_bump(memory: Memory, bumped: dict[uuid.UUID, tuple[int, datetime]]) -> None:
    """The answer shows the count and time this read stored (a memory gone
    since it was read keeps what was read)."""
    if memory.id in bumped:
        memory.reference_count, memory.last_referenced_at = bumped[memory.id]
        memory.accessed_at = memory.last_referenced_at


def memory_search_accessed(*, caller: Caller, query: SearchQuery) -> list[ScoredMemory]:
    """``memory_search`` for readers whose records carry ``accessed_at``
    (memento, langmem): what it returns counts as accessed."""
    results = memory_search(caller=caller, query=query)
    memory_accessed_mark(caller=caller, memories=[item.memory for item in results])
    return results


def memory_list_recent_accessed(*, caller: Caller, **listing: Any) -> list[Memory]:
    """``memory_list_recent`` with the same ``accessed_at`` side effect."""
    rows = memory_list_recent(caller=caller, **listing)
    memory_accessed_mark(caller=caller, memories=rows)
    return rows
