"""mem0 (PyPI mem0ai 2.2.1, run offline with the packaged MiniLM): a store
written by mem0 itself (30 memories for two users, some dated in the past,
updated, deleted), imported from its get_all() JSON and from its pgvector
table with its history database, read back through memproj's `memory` dialect
(a real MCP client): every memory found by its mem0 id with its date, text and
state; each update's old text kept as a superseded version; a re-run creates nothing."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from memory.models import Memory
from memory.services.imports import memories_import
from tests.conftest import call, call_error, make_identity
from tests.importers.conftest import owner_url, run_upstream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.real_embedder, pytest.mark.slow]


@pytest.fixture
def mem0_store(tmp_path):
    table = f"mem0_{uuid.uuid4().hex[:8]}"  # the test database outlives a test's flush: a table of its own
    summary = run_upstream(
        "mem0_write.py",
        "--conninfo",
        owner_url(),
        "--collection",
        table,
        "--history",
        str(tmp_path / "history.db"),
        "--export",
        str(tmp_path / "get_all.json"),
    )
    return tmp_path, summary["written"], table


async def check_through_memory_dialect(identity, mcp_client_for, written, export_path):
    exported = {m["id"]: m for m in json.loads(export_path.read_text())["results"]}
    async with mcp_client_for(identity, "memory") as client:
        for entry in written:
            if entry["state"] == "deleted":
                record = await call(client, "memory_get", type="fact", id=entry["id"])
                assert record["validity"] == "retracted"
                continue
            record = await call(client, "memory_get", type="fact", id=entry["id"])
            assert record["id"] == entry["id"] and record["content"] == entry["text"]
            assert record["validity"] == "active"
            upstream = exported[entry["id"]]
            assert record["created_at"].replace("Z", "+00:00")[:19] == upstream["created_at"][:19]
        found = await call(client, "memory_search", query="coffee number", types=["fact"])
        assert any("coffee" in r["content"] for r in found["results"])
        assert "NOT_FOUND" in await call_error(
            client, "memory_get", type="fact", id="00000000-0000-4000-8000-000000000000"
        )


def test_mem0_get_all_export_with_history(mem0_store, mcp_client_for):
    path, written, table = mem0_store
    owner = make_identity("tenant-a", "owner", role="admin")
    report = memories_import(
        caller=owner.caller,
        system="mem0",
        location=str(path / "get_all.json"),
        options={"history": str(path / "history.db")},
    )
    # 27 live memories, 3 deleted ones kept retracted, and the 5 texts the updates replaced.
    assert report.created_total == 35, report.lines()
    asyncio.run(check_through_memory_dialect(owner, mcp_client_for, written, path / "get_all.json"))
    for entry in written[:5]:
        old = Memory.objects.get(tenant_id=owner.caller.tenant_id, content=entry["old_text"])
        assert old.validity == "superseded" and str(old.superseded_by_id) == entry["id"]
    alice = Memory.objects.get(pk=written[1]["id"])
    assert alice.namespace == ["user", "alice"] and alice.metadata["topic"] == "travel"
    dated = Memory.objects.get(pk=written[2]["id"])
    assert (dated.created_at.year, dated.created_at.month, dated.occurred_at.day) == (2025, 2, 3)
    assert (
        memories_import(
            caller=owner.caller,
            system="mem0",
            location=str(path / "get_all.json"),
            options={"history": str(path / "history.db")},
        ).created_total
        == 0
    )


def test_mem0_pgvector_table_keeps_same_model_vectors(mem0_store, mcp_client_for):
    path, written, table = mem0_store
    owner = make_identity("tenant-b", "owner", role="admin")
    dry = memories_import(
        caller=owner.caller,
        system="mem0",
        location=owner_url(),
        dry_run=True,
        options={"table": table, "history": str(path / "history.db")},
    )
    assert dry.created_total == 35 and not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()
    report = memories_import(
        caller=owner.caller,
        system="mem0",
        location=owner_url(),
        options={
            "table": table,
            "history": str(path / "history.db"),
            "embedding_model": "all-MiniLM-L6-v2",
        },
    )
    assert report.created_total == 35
    asyncio.run(check_through_memory_dialect(owner, mcp_client_for, written, path / "get_all.json"))
    live = Memory.objects.filter(tenant_id=owner.caller.tenant_id, pk__in=[e["id"] for e in written])
    assert all(m.embedding_status == "ready" for m in live)
