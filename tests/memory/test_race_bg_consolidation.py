"""Consolidation against a user's write landing while the consolidator plans.

The consolidator (an LLM may take a minute) plans from a snapshot of the
episodes, outside any transaction; the duplicate groups it returns are then
merged into their newest member. A user's write committing in between (an
outcome that promotes a working memory to history, a forget) changes what a
merge would hide: the merge must be decided on the episodes as they are once
the tenant's write lock is held, not as the snapshot had them. The
interleaving is deterministic: the user's write commits from another thread
(its own connection) inside ``plan``."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime

import pytest

from memory.consolidators import EpisodeView, Plan
from memory.models import Memory, Validity
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.collections import working_store
from memory.services.consolidation import episodes_consolidate
from memory.services.feedback import memory_feedback
from memory.services.memories import memory_forget
from tests.conftest import make_identity
from tests.harness.interleave import committed_in_another_thread

pytestmark = pytest.mark.django_db(transaction=True)

TEXT = "The staging database is restored from the Sunday snapshot"


class DuplicatesWhileAWriteCommits:
    """A consolidator whose plan groups the given episodes as duplicates and,
    before it returns, has ``write`` commit from another thread."""

    name = "test"
    needs_embeddings = False

    def __init__(self, group: list[uuid.UUID], write: Callable[[], object]) -> None:
        self.group = group
        self.write = write
        self.planned = 0

    def plan(self, episodes: list[EpisodeView], *, now: datetime) -> Plan:
        self.planned += 1
        committed_in_another_thread(self.write)
        offered = {e.id for e in episodes}
        return Plan(duplicates=[tuple(self.group)], consumed=offered)


@pytest.fixture
def member():
    return make_identity("tenant-a", "member")


def found(caller, text: str, collections: list[str] | None = None) -> set[uuid.UUID]:
    hits = memory_search(caller=caller, query=SearchQuery(text, mode="keyword", collections=collections))
    return {hit.memory.id for hit in hits}


def test_a_memory_promoted_to_history_while_consolidation_plans_is_not_merged_into_a_working_copy(member):
    # Two working copies of one statement (roampal's working collection, 24 h):
    # the consolidator groups them, the newest would be kept.
    older = working_store(caller=member.caller, content=TEXT, outcome_score=0.9)
    newer = working_store(caller=member.caller, content=TEXT)

    def promote() -> None:
        # The user scores the older copy twice: it moves to history (30 days).
        for _ in range(2):
            memory_feedback(caller=member.caller, memory_id=older.pk, signal="worked")

    consolidator = DuplicatesWhileAWriteCommits([older.pk, newer.pk], promote)
    episodes_consolidate(tenant_id=member.caller.tenant_id, consolidator=consolidator)
    assert consolidator.planned == 1

    promoted = Memory.objects.get(pk=older.pk)
    assert promoted.collection == "history", "the outcomes did not promote it"
    # The promoted memory stays what the user made it: found in history, and it
    # does not vanish with the working copy's 24 h.
    assert promoted.validity == Validity.ACTIVE
    assert older.pk in found(member.caller, TEXT, ["history"])
    assert {older.pk, newer.pk} <= found(member.caller, TEXT)


def test_duplicates_untouched_while_consolidation_plans_are_still_merged(member):
    older = working_store(caller=member.caller, content=TEXT)
    newer = working_store(caller=member.caller, content=TEXT)
    unrelated = working_store(caller=member.caller, content="something else entirely")

    consolidator = DuplicatesWhileAWriteCommits(
        [older.pk, newer.pk],
        lambda: memory_feedback(caller=member.caller, memory_id=unrelated.pk, signal="worked"),
    )
    result = episodes_consolidate(tenant_id=member.caller.tenant_id, consolidator=consolidator)
    assert result.merged == 1
    merged = Memory.objects.get(pk=older.pk)
    assert (merged.validity, merged.superseded_by_id) == (Validity.SUPERSEDED, newer.pk)
    assert found(member.caller, TEXT) == {newer.pk}


def test_a_keeper_forgotten_while_consolidation_plans_takes_no_copy_with_it(member):
    older = working_store(caller=member.caller, content=TEXT)
    newer = working_store(caller=member.caller, content=TEXT)

    consolidator = DuplicatesWhileAWriteCommits(
        [older.pk, newer.pk], lambda: memory_forget(caller=member.caller, kind="episode", memory_id=newer.pk)
    )
    result = episodes_consolidate(tenant_id=member.caller.tenant_id, consolidator=consolidator)
    assert result.merged == 0
    assert Memory.objects.get(pk=older.pk).validity == Validity.ACTIVE
    assert found(member.caller, TEXT) == {older.pk}
