"""How many of a query's terms the keyword statement reads: at most
``retrieval.MAX_QUERY_TERMS``, the tenant's rarest. A query may be up to
MAX_QUERY_CHARS characters, and Chinese text is about a term per character:
scoring a candidate costs a look-up per term (BM25) or grows with the square
of the terms (the cover density scorer's ts_rank_cd), so a 2,000-character
query of distinct terms made one search cost many. The bound is asserted on the
statement's own row counts (EXPLAIN ANALYZE), never on its time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from memory import retrieval
from memory.retrieval import RetrievalFilter, channel_hits
from memory.scoring import RetrievalParams
from memory.services.memories import episode_store
from policy.caller import Caller
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db

# Terms the tenant holds (each in one memory of WORDS_PER_MEMORY of them) and
# terms no memory holds.
HELD = [f"held{i}x" for i in range(300)]
ABSENT = [f"absent{i}x" for i in range(300)]
WORDS_PER_MEMORY = 30
# 2,000 distinct ideographs: some 2,000 character bigrams.
CHINESE = "".join(chr(0x4E00 + 7 * i) for i in range(2000))


@pytest.fixture
def caller() -> Caller:
    return make_identity("tenant-a", "member").caller


def store(caller: Caller, *texts: str) -> list[Any]:
    return [episode_store(caller=caller, content=text, butler="general") for text in texts]


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def cte_rows(query: str, caller: Caller, scorer: str) -> dict[str, float]:
    """The rows each of the keyword statement's CTEs returned, run as the
    service sends it (EXPLAIN ANALYZE, FORMAT JSON)."""
    statement = retrieval.channel_statement(
        caller=caller,
        flt=RetrievalFilter(kinds=["episode", "fact", "rule"], now=timezone.now()),
        query_text=query,
        query_vector=None,
        params=RetrievalParams(keyword_scorer=scorer),
    )
    assert statement is not None
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement[0], statement[1])
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return {
        node["Subplan Name"].removeprefix("CTE "): node["Actual Rows"]
        for node in nodes(plan)
        if str(node.get("Subplan Name", "")).startswith("CTE ")
    }


@pytest.mark.parametrize("scorer", ["bm25", "cover_density"])
@pytest.mark.parametrize(
    "query",
    [
        pytest.param(" ".join(HELD + ABSENT), id="600 distinct words"),
        pytest.param(CHINESE, id="2000 Chinese characters"),
    ],
)
def test_the_keyword_statement_reads_at_most_max_query_terms_terms(caller, scorer, query):
    store(caller, *(" ".join(HELD[i : i + WORDS_PER_MEMORY]) for i in range(0, len(HELD), WORDS_PER_MEMORY)))
    store(caller, CHINESE[:600], CHINESE[600:1200])
    with connection.cursor() as cursor:
        cursor.execute("SELECT cardinality(memproj_query_terms(%s))", [query])
        analysed = cursor.fetchone()[0]
    assert analysed > 4 * retrieval.MAX_QUERY_TERMS  # what the query holds, before the bound
    rows = cte_rows(query, caller, scorer)
    assert rows["terms"] == retrieval.MAX_QUERY_TERMS, rows
    # Every term the statement weighs or matches on comes from those.
    for name in ("selective", "weighted"):
        if name in rows:
            assert rows[name] <= retrieval.MAX_QUERY_TERMS, rows


def test_the_terms_kept_are_the_rarest_the_tenant_holds(caller, monkeypatch):
    """With room for two terms: the two rarest the tenant holds ("gamma" in
    one memory, "beta" in three), not the commonest ("alpha", in every memory
    here) nor one no memory holds; a memory with only the commonest is no
    candidate, one with a kept term is."""
    monkeypatch.setattr(retrieval, "MAX_QUERY_TERMS", 2)
    rare = store(caller, "alpha gamma")[0]
    middle = store(caller, "alpha beta one", "alpha beta two", "alpha beta three")
    common_only = store(caller, *(f"alpha number {n}" for n in ("four", "five", "six", "seven")))
    params = RetrievalParams(keyword_scorer="bm25")
    flt = RetrievalFilter(kinds=["episode"], now=timezone.now())
    hits = channel_hits(
        caller=caller, flt=flt, query_text="zulu alpha beta gamma yankee", query_vector=None, params=params
    )
    assert set(hits) == {rare.id, *(m.id for m in middle)}
    assert not set(hits) & {m.id for m in common_only}
    # The rarest first: the memory holding the rarest kept term ranks first.
    assert max(hits, key=lambda pk: hits[pk].text_rank_value or 0.0) == rare.id


def test_a_query_within_the_bound_keeps_every_term(caller):
    texts = [" ".join(HELD[i : i + 10]) for i in range(0, 100, 10)]
    memories = store(caller, *texts)
    query = " ".join(HELD[:100])
    assert cte_rows(query, caller, "bm25")["terms"] == 100
    flt = RetrievalFilter(kinds=["episode"], now=timezone.now())
    hits = channel_hits(caller=caller, flt=flt, query_text=query, query_vector=None, params=RetrievalParams())
    assert set(hits) >= {m.id for m in memories}


def termstat_rows_read(query: str, caller: Caller) -> tuple[float, set[str]]:
    """The rows the keyword statement read from the term statistics, and how
    (each scan's node type), with joins other than a nested loop preferred: a
    planner that takes a tenant for a small one (statistics older than its
    vocabulary) chooses them."""
    statement = retrieval.channel_statement(
        caller=caller,
        flt=RetrievalFilter(kinds=["episode"], now=timezone.now()),
        query_text=query,
        query_vector=None,
        params=RetrievalParams(),
    )
    assert statement is not None
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_nestloop = off")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement[0], statement[1])
        raw = cursor.fetchone()[0]
        cursor.execute("RESET enable_nestloop")
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    scans = [node for node in nodes(plan) if node.get("Relation Name") == "memory_termstat"]
    return sum(node["Actual Rows"] * node["Actual Loops"] for node in scans), {node["Node Type"] for node in scans}


def test_the_term_statistics_are_read_one_query_term_at_a_time(caller):
    """Each query term's document frequency is a look-up of its own: as a join,
    a planner that chose a hash or merge join read every term the tenant holds
    (its whole vocabulary) to match the query's few, so a search cost what
    the tenant's vocabulary did."""
    vocabulary = [f"v{i}q" for i in range(6000)]
    store(caller, *(" ".join(vocabulary[i : i + 2000]) for i in range(0, len(vocabulary), 2000)))
    query = " ".join(vocabulary[:: len(vocabulary) // 10][:10])
    read, how = termstat_rows_read(query, caller)
    assert read <= 10, (read, how)
