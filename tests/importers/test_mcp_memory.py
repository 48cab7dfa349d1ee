"""The official MCP memory server (npm @modelcontextprotocol/server-memory
2026.8.31), driven over stdio by the MCP SDK, writes its memory.jsonl: seven
entities, their observations (added, one deleted), relations, a deleted entity.
Imported, every observation the server still holds is a fact that memproj's
memory dialect finds (a real MCP client), with its entity in the knowledge
graph and every relation between them; a re-run creates nothing."""

from __future__ import annotations

import asyncio

import pytest

from memory.models import Entity, Relation
from memory.services.imports import memories_import
from tests.conftest import call, make_identity
from tests.importers.conftest import run_upstream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.real_embedder, pytest.mark.slow]


async def find_each(identity, mcp_client_for, observations):
    async with mcp_client_for(identity, "memory") as client:
        for entity, text in observations:
            found = await call(client, "memory_search", query=text, types=["fact"], limit=5)
            assert text in [r["content"] for r in found["results"]], (text, found["results"])


def test_memory_jsonl_entities_observations_and_relations(tmp_path, mcp_client_for):
    path = tmp_path / "memory.jsonl"
    graph = run_upstream("mcp_memory_write.py", "--file", str(path))
    observations = [(e["name"], o) for e in graph["entities"] for o in e["observations"]]
    assert len(observations) == 15 and "Ken likes chess" not in {o for _, o in observations}
    owner = make_identity("tenant-a", "owner", role="admin")
    report = memories_import(caller=owner.caller, system="mcp-memory", location=str(path))
    assert report.created_total == len(observations)
    assert (report.entities, report.relations) == (len(graph["entities"]), len(graph["relations"]))
    asyncio.run(find_each(owner, mcp_client_for, observations))
    ada = Entity.objects.get(tenant_id=owner.caller.tenant_id, name="Ada")
    assert ada.attrs == {"entityType": "person"}
    assert sorted(m.content for m in ada.claims.all()) == sorted(o for e, o in observations if e == "Ada")
    assert {(r.src.name, r.type, r.dst.name) for r in Relation.objects.filter(tenant_id=owner.caller.tenant_id)} == {
        (r["from"], r["relationType"], r["to"]) for r in graph["relations"]
    }
    again = memories_import(caller=owner.caller, system="mcp-memory", location=str(path))
    assert (again.created_total, again.entities, again.relations) == (0, 0, 0)
