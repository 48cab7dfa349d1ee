"""The planner counts a read's tenant and its tenant's graph group as one
condition (the dependency statistics of migration 0041), not as two
independent ones that would shrink a tenant of thousands to a handful of rows."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from memory.embeddings import set_embedder
from memory.models import GRAPH_GROUP_SQL
from memory.services.memories import episodes_store_bulk
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
