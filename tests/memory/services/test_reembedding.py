"""Embedding upkeep (in-process; tests/workers runs it in a real worker):
pending embedding retry, re-embedding after a model change."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from memory.embeddings import get_embedder, set_embedder
from memory.models import EmbeddingStatus, Memory, MemoryEvent
from memory.selectors.memories import SearchQuery, memory_search
from memory.services import reembedding
from memory.services.memories import fact_store
from tests.embedders import BrokenEmbedder

pytestmark = pytest.mark.django_db


def events(memory_id, event_type):
    return list(MemoryEvent.objects.filter(memory_id=memory_id, event_type=event_type).order_by("id"))


def test_pending_embeddings_are_retried_and_finally_marked_failed(member, embedder_outage, settings):
    start = timezone.now()
    fact = fact_store(caller=member.caller, subject="user", predicate="os", content="User runs Debian").memory
    other = fact_store(caller=member.caller, subject="user", predicate="shell", content="User uses zsh").memory
    assert reembedding.embeddings_retry().processed == 0  # too young: the write-time task owns it

    settings.MEMPROJ_PIPELINE = {**settings.MEMPROJ_PIPELINE, "EMBED_MAX_ATTEMPTS": 3}
    with time_machine.travel(start + timedelta(minutes=5)):
        result = reembedding.embeddings_retry()
        assert result.processed == 0 and result.failed == 0
        assert Memory.objects.get(pk=fact.pk).embedding_attempts == 2  # one at store, one now

        result = reembedding.embeddings_retry()
        assert result.failed == 2  # both reached 3 attempts
        assert set(Memory.objects.filter(pk__in=[fact.pk, other.pk]).values_list("embedding_status", flat=True)) == {
            "failed"
        }
        assert "down" in Memory.objects.get(pk=fact.pk).embedding_error

        set_embedder(embedder_outage)  # the embedder is back; an operator re-queues the failed ones
        assert reembedding.memories_failed_requeue() == 2
        result = reembedding.embeddings_retry()
        assert sorted(result.ids) == sorted([fact.id, other.id])
        assert reembedding.embeddings_retry().processed == 0
    fact.refresh_from_db()
    assert fact.embedding_status == EmbeddingStatus.READY and fact.embedding is not None


def test_reembed_after_model_change(member):
    fact = fact_store(caller=member.caller, subject="user", predicate="editor", content="User edits with Helix").memory
    Memory.objects.filter(pk=fact.pk).update(embedding_model="old-model-v1")
    result = reembedding.memories_reembed()
    assert result.ids == [fact.id] and result.processed == 1
    fact.refresh_from_db()
    assert fact.embedding_model == get_embedder().model_name and fact.embedding_status == "ready"
    [audit] = events(fact.id, "reembed_requested")
    assert audit.payload == {"from_model": "old-model-v1", "to_model": get_embedder().model_name}
    assert reembedding.memories_reembed().processed == 0


def test_reembed_with_embedder_down_leaves_memory_keyword_searchable(member, embedder_outage):
    set_embedder(embedder_outage)
    fact = fact_store(caller=member.caller, subject="user", predicate="editor", content="User edits with Helix").memory
    Memory.objects.filter(pk=fact.pk).update(embedding_model="old-model-v1")
    set_embedder(BrokenEmbedder(embedder_outage.model_name))
    result = reembedding.memories_reembed()
    assert result.failed == 1
    fact.refresh_from_db()
    # The old model's vector is gone (never compared with the new model's queries).
    assert fact.embedding is None and fact.embedding_status == "pending"
    assert [
        h.memory.id for h in memory_search(caller=member.caller, query=SearchQuery("Helix editor", mode="keyword"))
    ] == [fact.id]
