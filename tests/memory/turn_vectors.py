"""What a turn's stored vector was made from, for the tests of the previous
turn a session turn is embedded with (memory/embedtext.py): the stored vector
against the real model's vector of a given text."""

from __future__ import annotations

import math
import uuid

from memory import embedtext
from memory.embeddings import get_embedder
from memory.models import Memory


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def vector(memory: Memory | uuid.UUID) -> list[float] | None:
    """The memory's vector as stored now (None: none)."""
    stored = Memory.objects.get(pk=getattr(memory, "pk", memory)).embedding
    return None if stored is None else [float(x) for x in stored]


def embedded(content: str, previous: str | None = None) -> list[float]:
    """The vector of an episode's text with that previous turn."""
    return get_embedder().embed_document(embedtext.embedding_text(content, kind="episode", previous=previous))


def made_from(memory: Memory | uuid.UUID, content: str, previous: str | None = None) -> bool:
    """Whether the memory's stored vector is that of ``content`` with ``previous``."""
    stored = vector(memory)
    return stored is not None and cosine(stored, embedded(content, previous)) > 0.999
