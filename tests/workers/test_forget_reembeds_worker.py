"""A real worker embeds again the turn after a forgotten one: the forget
drops that turn's vector at once and records its embed follow-up (the outbox);
the worker makes the vector from what is visible then."""

from __future__ import annotations

import math

import pytest

from memory import embedtext
from memory.embeddings import get_embedder
from memory.models import FollowUp, FollowUpKind, Memory
from memory.services.memories import episode_store, memory_forget
from tests.conftest import make_identity
from tests.workers.conftest import in_flight, wait_until

pytestmark = [pytest.mark.worker, pytest.mark.real_embedder]

SECRET = "my passport number is ZX-99, kept in the blue drawer of the hallway desk"
REPLY = "ok noted"


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_the_worker_embeds_the_turn_after_a_forgotten_one_without_it(start_worker, broker_queue):
    member = make_identity("tenant-a", "member")
    secret = episode_store(caller=member.caller, content=SECRET, butler="b", session_id="s1")
    reply = episode_store(caller=member.caller, content=REPLY, butler="b", session_id="s1")
    worker = start_worker()
    wait_until(lambda: not in_flight(broker_queue), what="the stores' follow-ups", worker=worker)
    with_secret = get_embedder().embed_document(embedtext.embedding_text(REPLY, kind="episode", previous=SECRET))
    assert cosine([float(x) for x in Memory.objects.get(pk=reply.pk).embedding], with_secret) > 0.999

    memory_forget(caller=member.caller, kind="episode", memory_id=secret.pk)
    wait_until(lambda: Memory.objects.get(pk=reply.pk).embedding_status == "ready", what="the re-embed", worker=worker)
    row = Memory.objects.get(pk=reply.pk)
    alone = get_embedder().embed_document(REPLY)
    assert cosine([float(x) for x in row.embedding], alone) > 0.999
    assert row.embedding_model == "all-MiniLM-L6-v2+ctx1short"
    wait_until(lambda: not in_flight(broker_queue), what="the queue to drain", worker=worker)
    assert not FollowUp.objects.filter(memory_id=reply.pk, kind=FollowUpKind.EMBED, done_at__isnull=True).exists()
