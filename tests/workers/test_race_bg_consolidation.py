"""Consolidation in a real worker racing with a user's outcome: the LLM groups
two working copies of one statement as duplicates while the user scores the
older copy into roampal's history collection. The merge is decided on the
episodes as they are when it runs, so the promoted memory is not superseded
by the working copy (which would hide it from history at once and take its
text with it when the copy's 24 h pass)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from memory.models import Memory, Validity
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.collections import working_store
from memory.services.feedback import memory_feedback
from tests.conftest import make_identity
from tests.workers.conftest import in_flight, wait_until
from tests.workers.fakes import ChatStep, episodes_in
from workers import tasks

pytestmark = pytest.mark.worker

TEXT = "The staging database is restored from the Sunday snapshot"


def all_duplicates(body: dict[str, Any]) -> str:
    """A scripted chat answer: every episode sent says the same thing."""
    return json.dumps({"memories": [], "duplicates": [[e["id"] for e in episodes_in(body)]]})


def test_a_memory_promoted_while_the_llm_plans_is_not_merged_into_its_working_copy(
    start_worker, fake_openai, broker_queue
):
    member = make_identity("tenant-a", "member")
    older = working_store(caller=member.caller, content=TEXT, outcome_score=0.9)
    newer = working_store(caller=member.caller, content=TEXT)
    release = threading.Event()
    fake_openai.chat_script = [ChatStep(content=all_duplicates, hold=release), ChatStep(content=all_duplicates)]
    worker = start_worker(MEMPROJ_LLM_BASE_URL=fake_openai.base_url, MEMPROJ_LLM_TIMEOUT="60")
    tasks.episodes_consolidate_task.delay()
    wait_until(fake_openai.chat_started.is_set, what="the LLM call", worker=worker)

    # While the LLM thinks, the user scores the older copy into history.
    for _ in range(2):
        memory_feedback(caller=member.caller, memory_id=older.pk, signal="worked")
    assert Memory.objects.get(pk=older.pk).collection == "history"
    release.set()
    wait_until(lambda: not in_flight(broker_queue), what="the consolidation run", worker=worker)
    wait_until(
        lambda: Memory.objects.get(pk=newer.pk).consolidated_at is not None, what="the plan applied", worker=worker
    )

    promoted = Memory.objects.get(pk=older.pk)
    assert (promoted.validity, promoted.collection) == (Validity.ACTIVE, "history")
    hits = memory_search(caller=member.caller, query=SearchQuery(TEXT, mode="keyword", collections=["history"]))
    assert older.pk in {hit.memory.id for hit in hits}
    # The working copy is untouched too: nothing was merged across collections.
    assert Memory.objects.get(pk=newer.pk).validity == Validity.ACTIVE
