"""What a turn's stored vector was made from, for the tests of the previous
turn a session turn is embedded with (memory/embedtext.py): the stored vector
against the real model's vector of a given text."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from typing import Any

from memory import embedtext
from memory.embeddings import get_embedder
from memory.models import EmbeddingStatus, Memory
from memory.services.vectors import memory_embed_batch


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


def embed_while(monkeypatch: Any, reply: Memory | uuid.UUID, change: Callable[[], object]) -> None:
    """The worker embeds ``reply`` and ``change`` commits between its reading
    the previous turn and its writing the vector (while the model runs): the
    vector is not written and the turn stays pending; its next embed writes one."""
    pk: uuid.UUID = reply.pk if isinstance(reply, Memory) else reply
    read = embedtext.texts_with_previous

    def read_then_changed(rows: Any) -> Any:
        texts = read(rows)
        change()
        return texts

    monkeypatch.setattr(embedtext, "texts_with_previous", read_then_changed)
    assert memory_embed_batch(memory_ids=[pk]) == 0
    assert Memory.objects.get(pk=pk).embedding_status == EmbeddingStatus.PENDING
    monkeypatch.setattr(embedtext, "texts_with_previous", read)
    assert memory_embed_batch(memory_ids=[pk]) == 1
