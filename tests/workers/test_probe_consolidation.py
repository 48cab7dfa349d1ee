"""Consolidation in a real worker racing with a user's forget: the consolidator
(here an LLM on a fake OpenAI-compatible endpoint, which can take a minute)
plans from a snapshot of the episodes, and the user may forget one of them
before the proposals are stored. A forgotten episode must not come back as
(part of) a derived fact."""

from __future__ import annotations

import threading

import pytest

from memory.models import Kind, Memory, MemoryLink, Validity
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.memories import episode_store, fact_store, memory_forget
from tests.conftest import make_identity
from tests.workers.conftest import in_flight, wait_until
from tests.workers.fakes import ChatStep, one_fact_from_all_episodes
from workers import tasks

pytestmark = pytest.mark.worker

SECRET_EPISODES = [
    "User said their locker code is 4471",
    "The user mentioned the gym locker code 4471",
    "User repeated that the locker combination is 4471",
]


def test_an_episode_forgotten_while_the_llm_plans_is_not_consolidated(start_worker, fake_openai, broker_queue):
    member = make_identity("tenant-a", "member")
    episodes = [episode_store(caller=member.caller, content=t, butler="assistant") for t in SECRET_EPISODES]
    answer = one_fact_from_all_episodes(
        content="The user's gym locker code is 4471", subject="user", predicate="locker code"
    )
    release = threading.Event()
    fake_openai.chat_script = [ChatStep(content=answer, hold=release), ChatStep(content=answer)]
    worker = start_worker(MEMPROJ_LLM_BASE_URL=fake_openai.base_url, MEMPROJ_LLM_TIMEOUT="60")
    tasks.episodes_consolidate_task.delay()
    wait_until(fake_openai.chat_started.is_set, what="the LLM call", worker=worker)

    # While the LLM thinks, the user forgets one of the episodes it was sent.
    memory_forget(caller=member.caller, kind=Kind.EPISODE, memory_id=episodes[0].pk)
    release.set()
    wait_until(lambda: not in_flight(broker_queue), what="the consolidation run", worker=worker)

    forgotten = Memory.objects.get(pk=episodes[0].pk)
    assert forgotten.validity == Validity.RETRACTED
    # Nothing derived from the forgotten episode: no fact links to it ...
    assert not MemoryLink.objects.filter(to_memory_id=episodes[0].pk).exists()

    def derived() -> list[Memory]:
        return list(Memory.objects.filter(kind=Kind.FACT, source="consolidation"))

    assert all(str(episodes[0].pk) not in m.metadata.get("consolidated_from", []) for m in derived())
    # ... and a search for what it said finds nothing the user did not keep.
    hits = memory_search(caller=member.caller, query=SearchQuery("locker code 4471", mode="keyword"))
    assert {h.memory.id for h in hits} <= {e.pk for e in episodes[1:]}
    # The episodes still remembered are left for a later run.
    assert all(Memory.objects.get(pk=e.pk).consolidated_at is None for e in episodes[1:])

    # The next run consolidates what the user kept, and only that.
    tasks.episodes_consolidate_task.delay()
    wait_until(derived, what="the next consolidation run", worker=worker)
    [fact] = derived()
    assert set(MemoryLink.objects.filter(from_memory=fact).values_list("to_memory_id", flat=True)) == {
        e.pk for e in episodes[1:]
    }


def test_a_fact_forgotten_after_the_episodes_is_not_brought_back_by_consolidating_them(start_worker, fake_openai):
    member = make_identity("tenant-a", "member")
    episodes = [
        episode_store(caller=member.caller, content=t, butler="assistant")
        for t in [
            "User said they moved to Denver last month",
            "The user mentioned their new flat in Denver",
            "User talked about settling in Denver",
        ]
    ]
    # After saying it, the user had it remembered as a fact, then asked for it to be forgotten.
    kept = fact_store(caller=member.caller, subject="user", predicate="city", content="User lives in Denver").memory
    memory_forget(caller=member.caller, kind=Kind.FACT, memory_id=kept.pk)

    answer = one_fact_from_all_episodes(content="The user lives in Denver", subject="user", predicate="city")
    fake_openai.chat_script = [ChatStep(content=answer)]
    worker = start_worker(MEMPROJ_LLM_BASE_URL=fake_openai.base_url)
    tasks.episodes_consolidate_task.delay()
    wait_until(lambda: Memory.objects.get(pk=episodes[0].pk).consolidated_at is not None, what="the run", worker=worker)

    # What the user forgot stays forgotten: no active fact of its key came back.
    assert not Memory.objects.filter(
        kind=Kind.FACT, subject="user", predicate="city", validity=Validity.ACTIVE
    ).exists()
    assert Memory.objects.get(pk=kept.pk).validity == Validity.RETRACTED
    # The episodes themselves are untouched (the user did not forget them).
    assert all(Memory.objects.get(pk=e.pk).validity == Validity.ACTIVE for e in episodes)


def test_a_memory_derived_from_secret_episodes_is_as_secret_as_they_are(start_worker):
    member = make_identity("tenant-a", "member")
    texts = [
        "User prefers dark mode in the editor",
        "The user likes dark mode for the editor",
        "User said they prefer dark mode in editors",
    ]
    episodes = [episode_store(caller=member.caller, content=t, butler="assistant") for t in texts]
    # Episodes of the secret class (an import of a pce-memory or memproj store keeps the class).
    Memory.objects.filter(pk__in=[e.pk for e in episodes]).update(boundary_class="secret")
    worker = start_worker()  # the offline consolidator: the fact quotes an episode verbatim
    tasks.episodes_consolidate_task.delay()
    wait_until(lambda: Memory.objects.filter(kind=Kind.FACT).exists(), what="the consolidated fact", worker=worker)
    fact = Memory.objects.get(kind=Kind.FACT)
    assert fact.content in texts
    assert fact.boundary_class == "secret"
