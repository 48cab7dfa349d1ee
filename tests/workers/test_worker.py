"""The pipeline in a real Celery worker process on a real broker: embedding
retry after an embedder outage, a consolidation run, expiry and decay of
back-dated data, and a worker killed with SIGKILL mid-task."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from memory.embeddings import get_embedder, set_embedder
from memory.models import Memory, MemoryEvent, MemoryLink
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.memories import episode_store, fact_store
from tests.conftest import make_identity
from tests.embedders import BrokenEmbedder
from tests.workers.conftest import in_flight, wait_until
from tests.workers.fakes import ChatStep, one_fact_from_all_episodes
from workers import tasks

pytestmark = pytest.mark.worker

DARK_MODE = [
    "User prefers dark mode in the editor",
    "The user likes dark mode for the editor",
    "User said they prefer dark mode in editors",
]


def fresh(memory: Memory) -> Memory:
    return Memory.objects.get(pk=memory.pk)


def test_embedding_is_retried_after_the_embedder_fails(start_worker, fake_openai):
    member = make_identity("tenant-a", "member")
    older = fact_store(
        caller=member.caller, subject=None, predicate=None, content="The user's favourite colour is blue"
    )
    real = get_embedder()
    set_embedder(BrokenEmbedder())
    try:
        newer = fact_store(
            caller=member.caller, subject=None, predicate=None, content="The user's favourite colour is blue."
        ).memory
    finally:
        set_embedder(real)
    assert fresh(newer).embedding_status == "pending"  # stored anyway, queued for the worker

    fake_openai.embed_failures = 2  # the remote embedder is still down for two more tries
    worker = start_worker()
    wait_until(lambda: fresh(newer).embedding_status == "ready", what="the embedding retry", worker=worker)

    row = fresh(newer)
    assert row.embedding_attempts == 3  # one at write time, two failed retries in the worker
    assert row.embedding_error == "" and row.embedding_model == "all-MiniLM-L6-v2"
    assert len(fake_openai.calls("/v1/embeddings")) >= 3
    # The vector is the real model's vector of this content (served by the fake endpoint).
    expected = real.embed([newer.content])[0]
    assert sum(a * b for a, b in zip(row.embedding, expected, strict=True)) > 0.999
    # With the vector in place the worker ran the conflict check: the restatement
    # (the same text but its final full stop) keeps the newer fact and retires the older one.
    wait_until(lambda: fresh(older.memory).validity == "superseded", what="the conflict check", worker=worker)
    assert fresh(older.memory).superseded_by_id == newer.id


def test_consolidation_run_in_the_worker(start_worker):
    member = make_identity("tenant-a", "member")
    episodes = [episode_store(caller=member.caller, content=t, butler="assistant") for t in DARK_MODE]
    worker = start_worker()
    tasks.episodes_consolidate_task.delay()

    wait_until(lambda: Memory.objects.filter(kind="fact").exists(), what="the consolidated fact", worker=worker)
    fact = Memory.objects.get(kind="fact")
    assert fact.tenant_id == member.caller.tenant_id and fact.source == "consolidation"
    assert fact.embedding_status == "ready"  # embedded by the worker's own store path
    assert set(MemoryLink.objects.filter(from_memory=fact).values_list("to_memory_id", flat=True)) == {
        e.id for e in episodes
    }
    assert all(fresh(e).consolidated_at is not None for e in episodes)


def test_expiry_and_decay_of_back_dated_memories(start_worker):
    member = make_identity("tenant-a", "member")
    with time_machine.travel(timezone.now() - timedelta(days=40)):
        old_episode = episode_store(caller=member.caller, content="Deploy failed", butler="ops", ttl=timedelta(days=1))
        volatile = fact_store(
            caller=member.caller, subject="user", predicate="mood", content="User is tired", permanence="volatile"
        ).memory
        permanent = fact_store(
            caller=member.caller, subject="user", predicate="name", content="User is Ana", permanence="permanent"
        ).memory
    recent = episode_store(caller=member.caller, content="Deploy succeeded", butler="ops")

    worker = start_worker()
    tasks.memories_expire_task.delay()
    tasks.facts_decay_task.delay()
    wait_until(
        lambda: (
            not Memory.objects.filter(pk=old_episode.pk).exists()
            and MemoryEvent.objects.filter(event_type="fact_state_changed").exists()
        ),
        what="expiry and decay",
        worker=worker,
    )
    assert Memory.objects.filter(pk=recent.pk).exists()
    assert MemoryEvent.objects.filter(memory_id=old_episode.id, event_type="expired_deleted").count() == 1
    [state] = MemoryEvent.objects.filter(event_type="fact_state_changed")
    assert state.memory_id == volatile.id
    assert (state.payload["from"], state.payload["to"]) == ("active", "fading")  # exp(-0.03 * 40) = 0.30
    assert not MemoryEvent.objects.filter(memory_id=permanent.id, event_type="fact_state_changed").exists()


def test_worker_killed_mid_task_loses_nothing_and_the_task_completes_once(start_worker, fake_openai, broker_queue):
    member = make_identity("tenant-a", "member")
    episodes = [episode_store(caller=member.caller, content=t, butler="assistant") for t in DARK_MODE]

    answer = one_fact_from_all_episodes(
        content="User prefers dark mode in the editor", subject="user", predicate="editor theme"
    )

    release = threading.Event()
    # First call hangs (the worker is killed while waiting); the redelivery gets an answer.
    fake_openai.chat_script = [ChatStep(content=answer, hold=release), ChatStep(content=answer)]
    env = {
        "MEMPROJ_LLM_BASE_URL": fake_openai.base_url,
        "MEMPROJ_LLM_TIMEOUT": "120",
        "CELERY_VISIBILITY_TIMEOUT": "3",
        "CELERY_UNACKED_RESTORE_INTERVAL": "1",
        "CELERY_UNACKED_RESTORE_THROTTLE": "1",
    }
    first = start_worker(**env)
    tasks.episodes_consolidate_task.delay()
    wait_until(fake_openai.chat_started.is_set, what="the task to start", worker=first)
    first.kill()  # SIGKILL: no chance to acknowledge, requeue or clean up
    release.set()
    assert first.process.returncode == -9
    assert not Memory.objects.filter(kind="fact").exists()
    assert in_flight(broker_queue)  # the message survived the worker

    second = start_worker(**env)
    wait_until(lambda: Memory.objects.filter(kind="fact").exists(), what="the redelivered task", worker=second)
    wait_until(lambda: not in_flight(broker_queue), what="the acknowledgement", worker=second)

    assert len(fake_openai.calls("/v1/chat/completions")) == 2
    assert Memory.objects.filter(kind="fact").count() == 1
    fact = Memory.objects.get(kind="fact")
    assert MemoryEvent.objects.filter(memory_kind="fact", event_type="stored").count() == 1
    assert MemoryLink.objects.filter(from_memory=fact).count() == 3
    assert MemoryEvent.objects.filter(event_type="consolidated").count() == 3
    assert all(fresh(e).consolidated_at is not None for e in episodes)


def test_async_embed_mode_keyword_now_vector_after_the_worker(start_worker, fake_openai, settings):
    settings.MEMPROJ = {**settings.MEMPROJ, "EMBED_MODE": "async"}
    member = make_identity("tenant-a", "member")
    stored = fact_store(
        caller=member.caller, subject="user", predicate="pet", content="User has a border collie named Pixel"
    ).memory
    row = fresh(stored)
    assert (row.embedding_status, row.embedding_attempts) == ("pending", 0)  # returned without embedding
    assert [
        h.memory.id for h in memory_search(caller=member.caller, query=SearchQuery("Pixel collie", mode="keyword"))
    ] == [stored.id]
    assert memory_search(caller=member.caller, query=SearchQuery("what dog does the user own", mode="semantic")) == []

    worker = start_worker()
    wait_until(lambda: fresh(stored).embedding_status == "ready", what="the async embedding", worker=worker)
    hits = memory_search(caller=member.caller, query=SearchQuery("what dog does the user own", mode="semantic"))
    assert [h.memory.id for h in hits] == [stored.id]
    assert len(fake_openai.calls("/v1/embeddings")) == 1  # the worker embedded it, once
