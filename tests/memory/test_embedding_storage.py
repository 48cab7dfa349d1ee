"""A memory's vector lives in its row (migration 0042), so the planner prices an
exact scan of a tenant's vectors at the pages it really reads. Out of line, in
TOAST, a scan of a small tenant's rows looked cheaper than a walk of its graph,
yet fetched two TOAST chunks per vector."""

from __future__ import annotations

import random

import pytest
from django.db import connection

from memory.embeddings import set_embedder
from memory.models import Memory, graph_group_name, graph_group_of
from memory.services.memories import episode_store, episodes_store_bulk, memory_references_bump
from tests.conftest import make_identity
from tests.memory.test_graph_group_statistics import graphs_walked
from tests.memory.test_retrieval import WordHashEmbedder

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = [f"w{n:04d}" for n in range(5000)]


@pytest.fixture(autouse=True)
def fake_embedder():
    set_embedder(WordHashEmbedder())
    yield
    set_embedder(None)


def _turn(rng: random.Random, words: int) -> str:
    """Distinct words, so neither the text nor its search vector compresses."""
    return " ".join(rng.sample(WORDS, words))


def test_a_small_tenant_alone_in_its_group_walks_its_graph(owner_connection):
    """A conversation log of short turns (rows just past the size at which
    PostgreSQL moves values out of line), the tenant alone in its group: the
    vector read walks the group's graph rather than sorting every row."""
    caller = make_identity("small-tenant", "member").caller
    rng = random.Random(7)
    for _ in range(2):
        episodes_store_bulk(
            caller=caller, episodes=[{"content": _turn(rng, 14), "butler": "general"} for _ in range(1000)]
        )
    owner_connection.execute("ANALYZE memory_memory")
    [vector] = WordHashEmbedder().embed([_turn(rng, 6)])
    walked, plan = graphs_walked(caller, ["episode", "fact", "rule", "document"], vector, k_vec=96, forced=False)
    assert walked == [graph_group_name(graph_group_of(caller.tenant_id))], plan


def _toasted(memory_id, column: str) -> bool:  # type: ignore[no-untyped-def]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT pg_column_toast_chunk_id({column}) IS NOT NULL FROM memory_memory WHERE id = %s",  # noqa: S608
            [memory_id],
        )
        return cursor.fetchone()[0]


@pytest.fixture
def toast_inspection():  # type: ignore[no-untyped-def]
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version_num")
        if int(cursor.fetchone()[0]) < 170000:
            pytest.skip("pg_column_toast_chunk_id needs PostgreSQL 17")


@pytest.mark.parametrize("words", [14, 200, 2500])
def test_a_memorys_vector_stays_in_its_row_whatever_its_length(toast_inspection, words):
    """Short turns, a page of text, a long document: the vector is never moved
    out of line; a row leaves its texts in line until it passes a page, and then
    they leave first."""
    caller = make_identity("long-memory", "member").caller
    content = _turn(random.Random(words), words)
    memory = episode_store(caller=caller, content=content, butler="general")
    assert not _toasted(memory.id, "embedding")
    assert _toasted(memory.id, "content") == (words == 2500)
    # The keyword channel reads the search vector of every candidate.
    assert _toasted(memory.id, "search_vector") == (words == 2500)
    stored = Memory.objects.get(pk=memory.id)
    assert stored.content == content
    assert len(stored.embedding) == WordHashEmbedder.dimensions


def _pages(ids) -> dict:  # type: ignore[no-untyped-def]
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, (ctid::text::point)[0]::int FROM memory_memory WHERE id = ANY(%s)", [list(ids)])
        return dict(cursor.fetchall())


def test_a_reads_bookkeeping_write_keeps_the_row_on_its_page():
    """A reference bump on rows of typical size, one per page, on pages filled
    by inserts: each new version fits on its row's page (a HOT update, no new
    entry in any index, the HNSW graphs included). With room for less than a
    row, each version went to another page and into every index."""
    caller = make_identity("bookkeeping", "member").caller
    rng = random.Random(11)
    stored = episodes_store_bulk(
        caller=caller, episodes=[{"content": _turn(rng, 40), "butler": "general"} for _ in range(40)]
    )
    ids = [memory.id for memory in stored]
    pages = _pages(ids)
    last = max(pages.values())
    one_per_page = {page: memory_id for memory_id, page in pages.items() if page != last}
    assert len(one_per_page) >= 5  # the rows filled several pages
    memory_references_bump(caller=caller, memory_ids=list(one_per_page.values()))
    assert _pages(one_per_page.values()) == {memory_id: page for page, memory_id in one_per_page.items()}
