"""The vector channel embeds the question without the words most of the
tenant's memories share (``retrieval.vector_query_text``): in a log of
"<name> said, ..." turns a speaker's name is in half of them, and a question
that names the wrong person would otherwise be pulled towards the wrong side."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import embeddings, retrieval, temporal
from memory.context import build_context
from memory.scoring import RetrievalParams
from memory.selectors.activation import claims_rank
from memory.selectors.collections import known_context
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.memories import episode_store, fact_store
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db

# Twelve turns each, one topic a turn: each name is in half of the tenant's memories.
CAROLINE = [
    "pottery class on saturday mornings",
    "adopted a grey kitten called pepper",
    "ran the charity race for the shelter",
    "reading a novel about lighthouses",
    "painting the fence blue this weekend",
    "visiting grandparents in lisbon",
    "learning to bake sourdough bread",
    "volunteers at the food bank",
    "bought a secondhand road bike",
    "started guitar lessons again",
    "planting tomatoes on the balcony",
    "watching documentaries about whales",
]
MELANIE = [
    "camping trip to the lake district",
    "new job at the architecture firm",
    "cooking thai curry for friends",
    "training for a swimming contest",
    "building a treehouse with her son",
    "singing in the community choir",
    "knitting scarves for winter",
    "repairing an old motorbike",
    "collecting vinyl records",
    "hiking in the alps next summer",
    "learning spanish online",
    "photographing birds at dawn",
]
# Caroline painted the fence.
WRONG_PERSON = "What did Melanie say about the fence?"
REDUCED = "What did say about the fence?"


def statements(captured: CaptureQueriesContext) -> int:
    """Statements sent, not counting the savepoints a read takes inside the test's transaction."""
    return sum("SAVEPOINT" not in query["sql"] for query in captured.captured_queries)


@pytest.fixture(autouse=True)
def fresh_common_terms():
    retrieval.forget_common_terms()
    yield
    retrieval.forget_common_terms()


@pytest.fixture
def conversation():
    caller = make_identity("conversation", "writer").caller
    turns = {}
    for name, topics in (("Caroline", CAROLINE), ("Melanie", MELANIE)):
        for topic in topics:
            memory = episode_store(caller=caller, content=f"{name} said, {topic}", butler="chat")
            turns[memory.content] = memory.id
    return caller, turns


def test_the_question_loses_the_words_in_more_than_the_share_of_the_tenants_memories(conversation):
    caller, _ = conversation
    params = RetrievalParams.resolve()
    assert params.vector_query_common_share == 0.3
    assert retrieval.vector_query_text(caller, WRONG_PERSON, params) == REDUCED
    # "caroline" and "said" are common too; "pottery" (one memory) and stop words stay.
    assert retrieval.vector_query_text(caller, "Caroline said what about Pottery?", params) == "what about Pottery?"
    # Every word common: the question as asked.
    assert retrieval.vector_query_text(caller, "Melanie said", params) == "Melanie said"
    # Turned off, or a share no word reaches: as asked.
    off = params.with_(vector_query_common_share=0.0)
    assert retrieval.vector_query_text(caller, WRONG_PERSON, off) == WRONG_PERSON
    above_every_word = params.with_(vector_query_common_share=0.6)
    assert retrieval.vector_query_text(caller, WRONG_PERSON, above_every_word) == WRONG_PERSON


def test_a_text_longer_than_a_question_is_embedded_as_it_is_without_a_lookup(conversation):
    caller, _ = conversation
    context = ("Melanie said she would come. " * 20).strip()
    assert len(context) > temporal.MAX_QUERY_CHARS
    with CaptureQueriesContext(connection) as queries:
        assert retrieval.vector_query_text(caller, context, RetrievalParams.resolve()) == context
    assert statements(queries) == 0


def test_a_share_of_a_handful_of_memories_drops_nothing():
    caller = make_identity("few-memories", "writer").caller
    for topic in CAROLINE[: retrieval.COMMON_WORD_MIN_MEMORIES - 1]:
        episode_store(caller=caller, content=f"Caroline said, {topic}", butler="chat")
    # "caroline" is in every memory, but in fewer than COMMON_WORD_MIN_MEMORIES.
    question = "What did Caroline say about pottery?"
    assert retrieval.vector_query_text(caller, question, RetrievalParams.resolve()) == question
    episode_store(caller=caller, content=f"Caroline said, {CAROLINE[-1]}", butler="chat")
    retrieval.forget_common_terms()  # as a minute later
    assert retrieval.vector_query_text(caller, question, RetrievalParams.resolve()) == "What did say about pottery?"


def test_a_tenant_without_common_words_costs_a_question_no_statement(monkeypatch):
    caller = make_identity("varied-facts", "writer").caller
    for i, topic in enumerate(CAROLINE):
        fact_store(caller=caller, subject=f"topic{i}", predicate="is", content=topic)
    params = RetrievalParams.resolve()
    question = "What about the pottery class?"
    with CaptureQueriesContext(connection) as first:
        assert retrieval.vector_query_text(caller, question, params) == question
    assert statements(first) == 1  # the tenant's common terms: none
    with CaptureQueriesContext(connection) as later:
        assert retrieval.vector_query_text(caller, "And the road bike?", params) == "And the road bike?"
    assert statements(later) == 0
    # A word that becomes common is left out once the process reads the terms again.
    for topic in MELANIE:
        fact_store(caller=caller, subject=f"pottery {topic}", predicate="is", content=f"pottery {topic}")
    assert retrieval.vector_query_text(caller, question, params) == question
    now = time.monotonic()
    monkeypatch.setattr(retrieval.time, "monotonic", lambda: now + retrieval._COMMON_TERMS_TTL_S + 1)
    assert retrieval.vector_query_text(caller, question, params) == "What about the class?"


def test_a_word_of_several_terms_is_kept_even_when_its_terms_are_common():
    caller = make_identity("cjk-run", "writer").caller
    run = "解約APIの命名規約"  # one \\w+ run that the analyser splits into several terms (CJK bigrams)
    assert len(retrieval.QUERY_WORD.findall(run)) == 1
    for i in range(12):
        fact_store(caller=caller, subject=f"s{i}", predicate="note", content=f"{run} {i}")
    question = f"{run} policy"
    assert retrieval.vector_query_text(caller, question, RetrievalParams.resolve()) == question


@pytest.mark.real_embedder
def test_a_question_naming_the_wrong_person_finds_the_turn_by_what_was_said(conversation):
    caller, turns = conversation
    fence = turns["Caroline said, painting the fence blue this weekend"]
    found = memory_search(caller=caller, query=SearchQuery(WRONG_PERSON, mode="semantic", limit=3))
    assert found[0].memory.id == fence
    # As asked, the name pulls the question towards Melanie's turns.
    as_asked = memory_search(
        caller=caller,
        query=SearchQuery(
            WRONG_PERSON, mode="semantic", limit=3, params=RetrievalParams.resolve({"vector_query_common_share": 0.0})
        ),
    )
    assert [hit.memory.content.split(" said")[0] for hit in as_asked] == ["Melanie"] * 3


def test_every_reader_embeds_the_question_without_the_common_words(conversation, monkeypatch):
    caller, _ = conversation
    fact_store(caller=caller, subject="melanie", predicate="hobby", content="Melanie mends fences")
    embedded: list[str] = []
    later = embeddings.embed_query_later

    def recording(text: str):  # type: ignore[no-untyped-def]
        embedded.append(text)
        return later(text)

    monkeypatch.setattr("memory.selectors.memories.embed_query_later", recording)
    memory_search(caller=caller, query=SearchQuery(WRONG_PERSON))  # every search dialect's read
    known_context(caller=caller, query=WRONG_PERSON)  # roampal
    claims_rank(caller=caller, query=WRONG_PERSON)  # pce
    build_context(caller=caller, trigger_prompt=WRONG_PERSON, butler="chat")  # memory_context
    assert embedded == [REDUCED] * 4  # roampal's block runs two searches of one vector


def test_a_words_analysis_is_kept_while_the_common_terms_it_was_decided_against_hold(conversation, monkeypatch):
    caller, _ = conversation
    params = RetrievalParams.resolve()
    assert retrieval.vector_query_text(caller, WRONG_PERSON, params) == REDUCED
    with CaptureQueriesContext(connection) as again:  # the same words: roampal's second search of one question
        assert retrieval.vector_query_text(caller, WRONG_PERSON, params) == REDUCED
    assert statements(again) == 0
    sent: list[list[str]] = []
    analysed = retrieval._prepared_read

    def recording(sql: str, params_sql: dict) -> list[tuple]:
        sent.append(params_sql["words"])
        return analysed(sql, params_sql)

    monkeypatch.setattr(retrieval, "_prepared_read", recording)
    assert (
        retrieval.vector_query_text(caller, "What did Caroline say about whales?", params)
        == "What did say about whales?"
    )
    assert sent == [["caroline", "whales"]]  # only the words not seen before
    # A word that becomes common is left out once the process reads the terms again.
    for i in range(30):
        episode_store(caller=caller, content=f"Melanie said, the fence again {i}", butler="chat")
    assert retrieval.vector_query_text(caller, WRONG_PERSON, params) == REDUCED
    now = time.monotonic()
    monkeypatch.setattr(retrieval.time, "monotonic", lambda: now + retrieval._COMMON_TERMS_TTL_S + 1)
    assert retrieval.vector_query_text(caller, WRONG_PERSON, params) == "What did say about the ?"
