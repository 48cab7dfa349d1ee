from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


class ConsolidatorUnavailable(Exception):
    """A transient failure (LLM server down, timed out, or still answering
    malformed output after the retries): the episodes stay unconsolidated and
    the next run tries again."""


@dataclass(frozen=True)
class EpisodeView:
    id: uuid.UUID
    content: str
    content_hash: str
    created_at: datetime
    butler: str
    scope: str
    importance: float
    embedding: list[float] | None = None


@dataclass(frozen=True)
class Proposal:
    kind: str  # "fact" | "rule"
    content: str
    source_ids: tuple[uuid.UUID, ...]
    subject: str = ""
    predicate: str = ""
    permanence: str = "standard"
    importance: float = 5.0


@dataclass
class Plan:
    proposals: list[Proposal] = field(default_factory=list)
    # Groups of episodes that say the same thing; the first of each group is kept.
    duplicates: list[tuple[uuid.UUID, ...]] = field(default_factory=list)
    # Episodes the consolidator is done with (marked consolidated even if they
    # produced nothing); the rest are offered again on a later run.
    consumed: set[uuid.UUID] = field(default_factory=set)


class Consolidator(Protocol):
    name: str
    needs_embeddings: bool

    def plan(self, episodes: list[EpisodeView], *, now: datetime) -> Plan: ...
