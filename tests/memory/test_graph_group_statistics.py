"""The planner counts a read's tenant and its tenant's graph group as one
condition (the dependency statistics of migration 0041), not as two
independent ones that would shrink a tenant of thousands to a handful of rows."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from django.db import connection, transaction
from django.utils import timezone

from memory import retrieval
from memory.embeddings import set_embedder
from memory.models import GRAPH_GROUP_SQL, Memory, graph_group_name, graph_group_of
from memory.retrieval import RetrievalFilter, channel_hits
from memory.scoring import RetrievalParams
from memory.services.memories import episodes_store_bulk, fact_store
from tests.conftest import make_identity
from tests.memory.test_retrieval import WordHashEmbedder

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 400


@pytest.fixture(autouse=True)
def fake_embedder():
    set_embedder(WordHashEmbedder())
    yield
    set_embedder(None)


def _estimated_rows(tenant_id, where: str) -> float:  # type: ignore[no-untyped-def]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) SELECT id FROM memory_memory m WHERE {where}", {"tenant": tenant_id})
        plan = cursor.fetchone()[0]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]["Plan Rows"]


def test_a_tenants_rows_in_its_graph_group_are_estimated_as_the_tenants_rows(owner_connection):
    caller = make_identity("stats-a", "member").caller
    other = make_identity("stats-b", "member").caller
    for who in (caller, other):
        episodes_store_bulk(
            caller=who, episodes=[{"content": f"turn {i} of {who.tenant_id}", "butler": "general"} for i in range(ROWS)]
        )
    owner_connection.execute("ANALYZE memory_memory")
    tenant_only = _estimated_rows(caller.tenant_id, "m.tenant_id = %(tenant)s")
    with_group = _estimated_rows(caller.tenant_id, f"m.tenant_id = %(tenant)s AND {GRAPH_GROUP_SQL}")
    assert tenant_only >= ROWS / 2
    # Without the dependency the group's condition divides the estimate by ~200.
    assert with_group >= tenant_only / 2, (tenant_only, with_group)


def graphs_walked(
    caller, kinds: list[str], vector: list[float], *, k_vec: int = 10, forced: bool = True
) -> tuple[list[str], str]:  # type: ignore[no-untyped-def]
    """The HNSW graphs the vector channel's statement walks for ``caller``, and
    its plan, with the statement's own settings in one transaction (SET LOCAL
    holds in a transaction only). ``forced``: which graphs it can walk, with
    sorts and scans of the rows priced out (a few rows would be sorted)."""
    flt = RetrievalFilter(kinds=kinds, now=timezone.now())
    statement = retrieval.channel_statement(
        caller=caller, flt=flt, query_text=None, query_vector=vector, params=RetrievalParams(k_vec=k_vec)
    )
    assert statement is not None
    sql, sql_params, run_vec = statement
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(retrieval.statement_settings_sql(run_vec))
        if forced:
            cursor.execute(
                "SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off"
            )
        cursor.execute("EXPLAIN " + sql, sql_params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return sorted(re.findall(r"Index Scan using (memory_\w+_hnsw\w*) ", plan)), plan


def test_a_read_of_facts_walks_the_smaller_of_its_group_graph_and_the_kinds_graphs(owner_connection):
    """A small tenant's facts are a handful among every tenant's in the facts
    graph but most of its group graph: its read walks the group graph. A large
    tenant's group graph (its episodes too) outgrows the facts graph: its read
    walks the kinds' graphs. Each finds only its own facts either way."""
    small = make_identity("graphs-small", "member").caller
    large = make_identity("graphs-large", "member").caller
    while graph_group_of(large.tenant_id) == graph_group_of(small.tenant_id):
        large = make_identity(f"graphs-large-{uuid.uuid4().hex[:6]}", "member").caller
    for i in range(5):
        fact_store(caller=small, subject=None, predicate=None, content=f"zeppelin hangar {i} door of the small tenant")
    for i in range(60):
        fact_store(caller=large, subject=None, predicate=None, content=f"zeppelin hangar {i} roof of the large tenant")
    episodes_store_bulk(
        caller=large, episodes=[{"content": f"turn {i} of the large tenant", "butler": "general"} for i in range(ROWS)]
    )
    owner_connection.execute("ANALYZE memory_memory")
    retrieval.forget_graph_sizes()
    try:
        assert retrieval.walks_group_graph(small.tenant_id, ["fact", "rule"])
        assert not retrieval.walks_group_graph(large.tenant_id, ["fact", "rule"])
        [vector] = WordHashEmbedder().embed(["zeppelin hangar roof"])
        assert graphs_walked(small, ["fact", "rule"], vector)[0] == [graph_group_name(graph_group_of(small.tenant_id))]
        assert graphs_walked(large, ["fact", "rule"], vector)[0] == ["memory_fact_hnsw", "memory_rule_hnsw"]
        for who, found in ((small, "door of the small tenant"), (large, "roof of the large tenant")):
            for kinds in (["fact"], ["fact", "rule"]):
                flt = RetrievalFilter(kinds=kinds, now=timezone.now())
                hits = channel_hits(
                    caller=who, flt=flt, query_text=None, query_vector=vector, params=RetrievalParams(k_vec=5)
                )
                contents = list(Memory.objects.filter(pk__in=hits).values_list("content", flat=True))
                assert len(contents) == 5 and all(found in c for c in contents), (kinds, contents)
    finally:
        retrieval.forget_graph_sizes()


def _estimated_read_rows(caller, flt: RetrievalFilter) -> float:  # type: ignore[no-untyped-def]
    """The planner's row estimate for the read's own filter (``retrieval._where``)
    with its tenant's graph group, as the vector channel's statement names them."""
    where, params = retrieval._where(caller, flt)
    with connection.cursor() as cursor:
        cursor.execute(
            f"EXPLAIN (FORMAT JSON) SELECT m.id FROM memory_memory m WHERE {where} AND {GRAPH_GROUP_SQL}", params
        )
        plan = cursor.fetchone()[0]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]["Plan Rows"]


NAMESPACED = 200


def test_a_namespace_only_its_tenant_uses_is_estimated_at_its_own_rows(owner_connection):
    """langmem keeps a user's memories under ("memories", <user>), a namespace
    no other tenant has. Counted as independent conditions, tenant x kind x
    namespace shrank such a namespace to a tenth of its rows, and the planner
    sorted all of them instead of walking the facts' graph. With the
    namespace statistics (migration 0047) the estimate is the namespace's, for
    the namespace itself and for its prefixes; a namespace nobody uses still
    estimates near zero (so a rare one keeps the exact sort)."""
    alice = make_identity("ns-stats-alice", "member").caller
    bob = make_identity("ns-stats-bob", "member").caller
    for who, user in ((alice, "alice"), (bob, "bob")):
        for i in range(NAMESPACED):
            fact_store(
                caller=who, subject=None, predicate=None, content=f"note {i} of {user}", namespace=("memories", user)
            )
        episodes_store_bulk(
            caller=who, episodes=[{"content": f"turn {i} of {user}", "butler": "general"} for i in range(ROWS)]
        )
    owner_connection.execute("ANALYZE memory_memory")
    now = timezone.now()
    reads = {
        "namespace": RetrievalFilter(kinds=["fact"], now=now, namespace=("memories", "alice")),
        "prefix of depth 2": RetrievalFilter(kinds=["fact"], now=now, namespace_prefix=("memories", "alice")),
        "prefix of depth 1": RetrievalFilter(kinds=["fact"], now=now, namespace_prefix=("memories",)),
    }
    for name, flt in reads.items():
        estimated = _estimated_read_rows(alice, flt)
        assert estimated >= NAMESPACED / 2, (name, estimated)
    nobody = RetrievalFilter(kinds=["fact"], now=now, namespace_prefix=("memories", "nobody"))
    assert _estimated_read_rows(alice, nobody) < NAMESPACED / 10
