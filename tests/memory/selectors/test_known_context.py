"""roampal's KNOWN CONTEXT: its two searches, their rows loaded together."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.embeddings import ResilientEmbedder, set_embedder
from memory.selectors import collections
from memory.selectors.collections import collection_search, known_context
from memory.selectors.memories import _row_statement
from memory.services.collections import memory_bank_store, working_store
from tests.conftest import make_identity
from tests.memory.test_retrieval import (
    WordHashEmbedder,
    fake_embedder,  # noqa: F401 - autouse: bag-of-words vectors here too
)

pytestmark = pytest.mark.django_db

QUERY = "how does Ada run the Rust tests"


@pytest.fixture
def caller():
    caller = make_identity("tenant-a", "member").caller
    for i in range(6):
        memory_bank_store(caller=caller, content=f"Ada runs the Rust tests with cargo nextest, note {i}")
        working_store(caller=caller, content=f"Ada asked how to run the Rust tests, session {i}")
        working_store(caller=caller, content=f"unrelated chatter about lunch {i}")
    return caller


def shown(hits) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [(h.memory.id, h.memory.content, h.similarity, h.final_rank_score) for h in hits]


def test_known_context_shows_what_its_two_searches_find_and_loads_their_rows_at_once(caller):
    facts = collection_search(caller=caller, query=QUERY, collections=["memory_bank"], limit=3)
    others = ["working", "history", "patterns", "books"]
    relevant = collection_search(caller=caller, query=QUERY, collections=others, limit=3)
    with CaptureQueriesContext(connection) as queries:
        context = known_context(caller=caller, query=QUERY)
    assert shown(context.user_facts) == shown(facts) and len(facts) == 3
    assert shown(context.relevant) == shown(relevant) and len(relevant) == 3
    assert sum(q["sql"].startswith(_row_statement().sql[:60]) and '."id" = ANY(' in q["sql"] for q in queries) == 1


def test_a_row_gone_since_its_section_was_ranked_is_replaced_by_the_next(caller, monkeypatch):
    ranked_by_collection = collections._ranked_by_collection
    gone: list[Any] = []  # the deleted id, then the ids ranked after it

    def rank_then_delete(**kwargs):  # type: ignore[no-untyped-def]
        ranking = ranked_by_collection(**kwargs)
        if "working" in kwargs["chosen"]:
            gone.append(ranking.ids[0])
            collections.Memory.objects.filter(pk=ranking.ids[0]).delete()
            gone.append(ranking.ids[1 : 1 + kwargs["limit"]])
        return ranking

    monkeypatch.setattr(collections, "_ranked_by_collection", rank_then_delete)
    context = known_context(caller=caller, query=QUERY)
    deleted, following = gone
    assert [h.memory.id for h in context.relevant] == following


class CountingEmbedder(WordHashEmbedder):
    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return super().embed(texts)


def test_known_context_embeds_its_question_once_for_both_searches(caller):
    # No query cache, as a server under load with distinct questions: only
    # sharing the one question's vector between the two searches saves the pass.
    counting = CountingEmbedder()
    set_embedder(ResilientEmbedder(counting, cache_size=0))
    context = known_context(caller=caller, query=QUERY)
    assert context.user_facts and context.relevant
    # In a test's transaction the two searches run in turn, the case where
    # each would start its own pass. (What is embedded is the question without
    # the words most of this tenant's memories share.)
    assert len(counting.texts) == 1
