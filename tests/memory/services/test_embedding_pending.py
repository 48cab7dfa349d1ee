"""A store whose embedding fails is still stored, keyword-searchable, marked
pending, and embedded later by the worker task (eager here; the real-worker
version lives in tests/workers)."""

import pytest

from memory.embeddings import set_embedder
from memory.errors import EmbeddingUnavailable
from memory.models import Memory
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.memories import fact_store
from tests.conftest import make_identity

# "which operating system" finds "User runs Debian Linux" by meaning alone.
pytestmark = [pytest.mark.django_db, pytest.mark.real_embedder]


def test_store_survives_embedder_outage_and_is_embedded_later(embedder_outage, django_capture_on_commit_callbacks):
    member = make_identity("tenant-a", "member")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        result = fact_store(caller=member.caller, subject="user", predicate="os", content="User runs Debian Linux")
    memory = Memory.objects.get(pk=result.memory.id)
    assert memory.embedding_status == "pending" and memory.embedding is None
    assert "embedding service is down" in memory.embedding_error
    assert callbacks  # follow-up tasks (the embed task first) are enqueued on commit

    hits = memory_search(caller=member.caller, query=SearchQuery("Debian Linux", mode="hybrid"))
    assert [h.memory.id for h in hits] == [memory.id]  # keyword channel still finds it
    with pytest.raises(EmbeddingUnavailable):
        memory_search(caller=member.caller, query=SearchQuery("Debian Linux", mode="semantic"))

    set_embedder(embedder_outage)  # the embedder recovers; the (eager) task runs
    for callback in callbacks:
        callback()
    memory.refresh_from_db()
    assert memory.embedding_status == "ready" and memory.embedding is not None and memory.embedding_error == ""
    semantic = memory_search(caller=member.caller, query=SearchQuery("which operating system", mode="semantic"))
    assert semantic[0].memory.id == memory.id
