"""What is embedded for a memory (memory/embedtext.py): one mechanism for the
sync store, the worker's batch path and re-embedding, and the text version is
recorded with every vector."""

import pytest

from memory import embedtext
from memory.embeddings import set_embedder
from memory.models import Memory
from memory.services import reembedding
from memory.services.memories import episode_store, fact_store
from memory.services.vectors import memory_embed_batch
from tests.embedders import HashingEmbedder

pytestmark = pytest.mark.django_db


class RecordingEmbedder(HashingEmbedder):
    """The hashing embedder, remembering every text it was given."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.seen.extend(texts)
        return super().embed(texts)


@pytest.fixture
def recorder():
    embedder = RecordingEmbedder()
    set_embedder(embedder)
    return embedder


@pytest.fixture
def ctx1(settings):
    settings.MEMPROJ = {**settings.MEMPROJ, "EMBED_TEXT": "ctx1"}


def test_embedding_text_versions():
    assert embedtext.embedding_text("Yes!", kind="episode", previous="Did you like Rome?", version="plain") == "Yes!"
    assert (
        embedtext.embedding_text("Yes!", kind="episode", previous="Did you like Rome?", version="ctx1")
        == "Yes!\n(previous turn: Did you like Rome?)"
    )
    # Facts and rules are embedded as stored; the first turn of a session has no context.
    assert embedtext.embedding_text("Yes!", kind="fact", previous="Rome?", version="ctx1") == "Yes!"
    assert embedtext.embedding_text("Yes!", kind="episode", previous=None, version="ctx1") == "Yes!"
    long = "x" * 1000
    assert len(embedtext.embedding_text("a", kind="episode", previous=long, version="ctx1")) < 400
    assert embedtext.embedding_identity("m", in_session=True, version="plain") == "m"
    assert embedtext.embedding_identity("m", in_session=True, version="ctx1") == "m+ctx1"
    # Facts, rules, documents and episodes of no session are embedded as stored whatever the version.
    assert embedtext.embedding_identity("m", in_session=False, version="ctx1") == "m"
    assert embedtext.in_session("episode", "s1") and not embedtext.in_session("episode", "")
    assert not embedtext.in_session("fact", "s1")


def test_ctx1short_takes_the_previous_turn_only_when_it_goes_in_whole():
    question = "And Rome?"
    short_answer = "Loved it, the food above all."
    long_answer = "Rome is " + "a city of many sights, " * 20
    assert (
        embedtext.embedding_text(question, kind="episode", previous=short_answer, version="ctx1short")
        == f"{question}\n(previous turn: {short_answer})"
    )
    # After a long answer the short turn is embedded alone (ctx1 would append the answer's first 300 characters).
    assert embedtext.embedding_text(question, kind="episode", previous=long_answer, version="ctx1short") == question
    assert embedtext.embedding_text(question, kind="episode", previous=long_answer, version="ctx1") != question
    assert embedtext.embedding_identity("m", in_session=True, version="ctx1short") == "m+ctx1short"


def test_unknown_text_version_is_refused(settings):
    settings.MEMPROJ = {**settings.MEMPROJ, "EMBED_TEXT": "fancy"}
    with pytest.raises(ValueError, match="MEMPROJ_EMBED_TEXT"):
        embedtext.text_version()


def test_store_embeds_an_episode_with_the_previous_turn_of_its_session(member, recorder, ctx1):
    first = episode_store(caller=member.caller, content="Did you like Rome?", butler="b", session_id="s1")
    episode_store(caller=member.caller, content="Another chat", butler="b", session_id="s2")
    second = episode_store(caller=member.caller, content="Yeah, it was amazing!", butler="b", session_id="s1")
    fact_store(caller=member.caller, subject="user", predicate="city", content="User lives in Rome")
    assert recorder.seen == [
        "Did you like Rome?",
        "Another chat",
        "Yeah, it was amazing!\n(previous turn: Did you like Rome?)",
        "User lives in Rome",
    ]
    # The content is stored as given; the vector's identity says how it was made.
    second.refresh_from_db()
    assert second.content == "Yeah, it was amazing!"
    assert second.embedding_model == "test-hashing-384+ctx1"
    assert Memory.objects.get(pk=first.pk).embedding_model == "test-hashing-384+ctx1"


def test_batch_path_builds_the_same_text_as_the_store_path(member, recorder, ctx1, settings):
    settings.MEMPROJ = {**settings.MEMPROJ, "EMBED_MODE": "async"}
    ids = [
        episode_store(caller=member.caller, content=text, butler="b", session_id="s1").id
        for text in ("Did you like Rome?", "Yeah, it was amazing!")
    ]
    assert recorder.seen == []
    assert memory_embed_batch(memory_ids=ids) == 2
    assert sorted(recorder.seen) == ["Did you like Rome?", "Yeah, it was amazing!\n(previous turn: Did you like Rome?)"]
    assert set(Memory.objects.filter(pk__in=ids).values_list("embedding_model", flat=True)) == {"test-hashing-384+ctx1"}


def test_switching_the_text_version_reembeds_the_turns_of_sessions_alone(member, recorder, settings):
    settings.MEMPROJ = {**settings.MEMPROJ, "EMBED_TEXT": "plain"}
    episode_store(caller=member.caller, content="Did you like Rome?", butler="b", session_id="s1")
    second = episode_store(caller=member.caller, content="Yeah, it was amazing!", butler="b", session_id="s1")
    fact = fact_store(caller=member.caller, subject="user", predicate="city", content="User lives in Rome").memory
    note = episode_store(caller=member.caller, content="a note of no session", butler="b")
    assert second.embedding_model == "test-hashing-384"
    assert reembedding.memories_reembed().processed == 0  # nothing stale under the same setting

    settings.MEMPROJ = {**settings.MEMPROJ, "EMBED_TEXT": "ctx1short"}
    recorder.seen.clear()
    # The two turns of the session; the fact's and the sessionless note's texts are the same under
    # every version, so they keep their vectors.
    assert reembedding.memories_reembed().processed == 2
    assert sorted(recorder.seen) == ["Did you like Rome?", "Yeah, it was amazing!\n(previous turn: Did you like Rome?)"]
    second.refresh_from_db()
    fact.refresh_from_db()
    note.refresh_from_db()
    assert (second.embedding_model, fact.embedding_model) == ("test-hashing-384+ctx1short", "test-hashing-384")
    assert note.embedding_model == "test-hashing-384"
    assert reembedding.memories_reembed().processed == 0


def test_a_long_turn_is_embedded_alone():
    long_turn = "word " * 200
    assert embedtext.embedding_text(long_turn, kind="episode", previous="Rome?", version="ctx1") == long_turn


def test_the_latest_turns_of_sessions_are_read_from_the_session_index(member):
    """One probe of memory_session_turn_idx a session: its predicate
    (session_id <> '') must be provable from the statement, or each session
    reads every episode of the tenant. The other paths are priced out: in a
    test database a tenant's few rows can make its tenant index and a sort look
    cheaper, though the session index serves (the test's question is whether it can)."""
    from django.db import connection

    episode_store(caller=member.caller, content="Did you like Rome?", butler="b", session_id="s1")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN " + embedtext._LATEST_SQL, [["s1", "s2"], member.caller.tenant_id])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "memory_session_turn_idx" in plan, plan
    assert embedtext.latest_turns(tenant_id=member.caller.tenant_id, session_ids={"s1", "s2", ""}) == {
        "s1": "Did you like Rome?"
    }
