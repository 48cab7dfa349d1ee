"""The keyword channel reads one GIN index keyed by tenant, then search vector
(migration 0043): its scan yields the tenant's memories with the query's terms,
never the postings of every tenant's."""

from __future__ import annotations

import re

import pytest
from django.db import connection, transaction
from django.utils import timezone

from memory import retrieval
from memory.models import Memory
from memory.retrieval import RetrievalFilter, channel_hits
from memory.scoring import RetrievalParams
from memory.services.memories import episodes_store_bulk, fact_store
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 300


def _keyword_index_scans(caller, kinds: list[str], query: str) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(index, condition) of each index scan on memory_memory in the keyword statement's plan."""
    flt = RetrievalFilter(kinds=kinds, now=timezone.now())
    statement = retrieval.channel_statement(
        caller=caller, flt=flt, query_text=query, query_vector=None, params=RetrievalParams(k_txt=10)
    )
    assert statement is not None
    with transaction.atomic(), connection.cursor() as cursor:
        # Which index the statement scans: a few rows would be read in full.
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off")
        cursor.execute("EXPLAIN " + statement[0], statement[1])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    scans = re.findall(r"Bitmap Index Scan on (\w+).*\n\s+Index Cond: (.*)", plan)
    return [
        (index, condition)
        for index, condition in scans
        if not index.startswith(("memory_termstat", "memory_tenantstat"))
    ]


def test_a_keyword_read_scans_its_tenants_postings_and_finds_only_its_own_memories(owner_connection):
    mine = make_identity("keyword-index-a", "member").caller
    other = make_identity("keyword-index-b", "member").caller
    for who, word in ((mine, "door"), (other, "roof")):
        episodes_store_bulk(
            caller=who, episodes=[{"content": f"zeppelin hangar {word} {i}", "butler": "general"} for i in range(ROWS)]
        )
        fact_store(caller=who, subject=None, predicate=None, content=f"the zeppelin hangar has a {word}")
    owner_connection.execute("ANALYZE memory_memory")
    scans = _keyword_index_scans(mine, ["episode"], "zeppelin hangar")
    # One scan of the tenant's own postings: no bitmap of its rows to AND with.
    assert scans and all(
        index == "memory_tenant_search_gin" and "tenant_id = " in condition and "search_vector @@" in condition
        for index, condition in scans
    ), scans
    # A facts read may take its tenant's few facts from the kind index; never every tenant's postings.
    scans = _keyword_index_scans(mine, ["fact", "rule"], "zeppelin hangar")
    assert scans and all("tenant_id = " in condition for _, condition in scans), scans
    for who, word in ((mine, "door"), (other, "roof")):
        for kinds, wanted in ((["episode"], 20), (["fact"], 1)):
            flt = RetrievalFilter(kinds=kinds, now=timezone.now())
            hits = channel_hits(
                caller=who, flt=flt, query_text="zeppelin hangar", query_vector=None, params=RetrievalParams(k_txt=20)
            )
            contents = list(Memory.objects.filter(pk__in=hits).values_list("content", flat=True))
            assert len(contents) == wanted and all(word in c for c in contents), (kinds, contents)
