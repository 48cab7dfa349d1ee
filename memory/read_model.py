"""The read model: one memory as every reader (dialects, admin, exports) sees
it, with each derived value computed here and nowhere else."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.utils import timezone

from memory import scoring
from memory.models import Kind, Memory


@dataclass(frozen=True)
class MemoryView:
    """One memory as every reader sees it: stored values plus the values derived
    from them (the admin, every dialect and the exports read the same numbers)."""

    memory: Memory
    effective_confidence: float | None  # facts and rules; episodes do not decay
    fact_state: str | None  # active / fading / expired, facts only
    effectiveness: float | None  # rules: success / (success + 4 x harmful + 0.01)
    wilson: float  # lower bound of the success rate over uses (0.5 when unused)
    accessed_at: datetime  # last returned by a read; its creation until then


class Rankable(Protocol):
    """What ranking reads of a memory: a full row, or just these columns
    (memory.selectors.memories.RankRow)."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def kind(self) -> str: ...
    @property
    def importance(self) -> float: ...
    @property
    def confidence(self) -> float: ...
    @property
    def decay_rate(self) -> float: ...
    @property
    def last_confirmed_at(self) -> datetime | None: ...
    @property
    def created_at(self) -> datetime: ...


def effective_confidence_of(memory: Rankable, now: datetime) -> float | None:
    if memory.kind == Kind.EPISODE:
        return None
    return scoring.effective_confidence(
        memory.confidence, memory.decay_rate, memory.last_confirmed_at or memory.created_at, now
    )


def memory_view(memory: Memory, now: datetime | None = None) -> MemoryView:
    effective = effective_confidence_of(memory, now or timezone.now())
    return MemoryView(
        memory=memory,
        effective_confidence=effective,
        fact_state=scoring.fact_state(effective) if memory.kind == Kind.FACT and effective is not None else None,
        effectiveness=memory.effectiveness_score if memory.kind == Kind.RULE else None,
        wilson=scoring.wilson_lower_bound(memory.success_count, memory.applied_count),
        accessed_at=memory.accessed_at or memory.created_at,
    )
