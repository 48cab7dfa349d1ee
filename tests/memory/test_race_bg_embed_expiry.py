"""The embedding retry sweep against a previous turn whose TTL passes while
the model runs. A turn of a session is embedded with its previous turn only
while that turn is retrievable (memory/embedtext.py); once its TTL passes it
is no one's previous turn, and the expiry sweep drops the vector of the turn
after it if that vector was made before the TTL passed (its ``updated_at``).
So a vector holding the previous turn must be written only if the previous
turn is still within its TTL when the vector is written. The retry sweep
embedded inside its own transaction, where PostgreSQL's ``now()`` is the time
the transaction began, before the model ran: a TTL passing while the model
ran did not stop the write, and the vector, dated after the TTL, was not
dropped by the expiry sweep either; the expired turn's words found the reply
for good. The TTL is made to pass inside the window by another connection
committing it (what the clock does otherwise)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from memory import embedtext
from memory.models import EmbeddingStatus, Memory
from memory.services.memories import episode_store
from memory.services.reembedding import embeddings_retry
from memory.services.sweeps import memories_expire
from tests.conftest import make_identity
from tests.harness.interleave import committed_in_another_thread
from tests.memory.turn_vectors import made_from

pytestmark = pytest.mark.django_db(transaction=True)

PREVIOUS = "the gate code for the garden shed is 8812"
REPLY = "got it, thanks"


def test_a_previous_turn_expiring_while_the_retry_sweep_embeds_is_not_left_in_the_reply(monkeypatch):
    member = make_identity("tenant-a", "member")
    previous = episode_store(
        caller=member.caller, content=PREVIOUS, butler="b", session_id="s1", ttl=timedelta(hours=1)
    )
    reply = episode_store(caller=member.caller, content=REPLY, butler="b", session_id="s1")
    # The reply waits for its vector (the embedder was down when it was stored).
    Memory.objects.filter(pk=reply.pk).update(embedding=None, embedding_status=EmbeddingStatus.PENDING)

    read = embedtext.texts_with_previous

    def read_then_the_ttl_passes(rows: Any) -> Any:
        texts = read(rows)
        if any(pk == reply.pk for pk, _, _ in rows):
            # While the model runs, the previous turn's TTL passes.
            expired_at = timezone.now()
            committed_in_another_thread(lambda: Memory.objects.filter(pk=previous.pk).update(expires_at=expired_at))
            time.sleep(0.01)
        return texts

    monkeypatch.setattr(embedtext, "texts_with_previous", read_then_the_ttl_passes)
    later = timezone.now() + timedelta(minutes=5)  # past the retry grace
    embeddings_retry(now=later)
    monkeypatch.setattr(embedtext, "texts_with_previous", read)

    # The expiry sweep then runs, and the retry sweep again, as beat runs them.
    memories_expire()
    embeddings_retry(now=later)
    row = Memory.objects.get(pk=reply.pk)
    assert row.embedding_status == EmbeddingStatus.READY
    # The reply is found by its own words only, not by the expired turn's.
    assert not made_from(reply.pk, REPLY, previous=PREVIOUS), "the expired turn's text is in the reply's vector"
    assert made_from(reply.pk, REPLY)


def test_a_previous_turn_still_live_goes_into_the_reply_the_retry_sweep_embeds():
    member = make_identity("tenant-a", "member")
    episode_store(caller=member.caller, content=PREVIOUS, butler="b", session_id="s1", ttl=timedelta(hours=1))
    reply = episode_store(caller=member.caller, content=REPLY, butler="b", session_id="s1")
    Memory.objects.filter(pk=reply.pk).update(embedding=None, embedding_status=EmbeddingStatus.PENDING)
    result = embeddings_retry(now=timezone.now() + timedelta(minutes=5))
    assert result.ids == [reply.pk]
    assert made_from(reply.pk, REPLY, previous=PREVIOUS)
