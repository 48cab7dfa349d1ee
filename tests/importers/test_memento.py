"""Memento keeps its memories in Neo4j, which no package registry here
provides, so no store written by Memento itself could be made: this test builds
the export in the shapes Neo4j's tools write (APOC's JSON lines and a
cypher-shell `RETURN m` list) with the node properties of rigrergl/memento's
Memory nodes and 384-d vectors of memproj's own model, imports it, and reads it
back through memproj's memento dialect (a real MCP client): every memory under
its Memento id with its text, confidence, dates and supersession."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from memory.embeddings import get_embedder
from memory.models import Memory
from memory.services.imports import memories_import
from tests.conftest import call, make_identity

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.real_embedder]


def nodes():
    out: list[dict[str, Any]] = []
    for n in range(12):
        out.append(
            {
                "id": str(uuid.UUID(int=0x1000 + n, version=4)),
                "content": f"Memento memory {n}: the user keeps {['plants', 'books', 'bikes'][n % 3]} at home",
                "confidence": round(0.5 + n / 30, 3),
                "created_at": f"2025-05-{n + 1:02d}T08:30:00Z",
                "updated_at": f"2025-05-{n + 1:02d}T09:00:00Z",
                "accessed_at": f"2025-06-{n + 1:02d}T10:00:00Z",
                "source": "explicit",
                "supersedes": None,
                "superseded_by": None,
            }
        )
    out[0]["superseded_by"], out[1]["supersedes"] = out[1]["id"], out[0]["id"]
    vectors = get_embedder().embed([n["content"] for n in out])
    for node, vector in zip(out, vectors, strict=True):
        node["embedding"] = [float(x) for x in vector]
    return out


async def listed(identity, mcp_client_for):
    async with mcp_client_for(identity, "memento") as client:
        return (await call(client, "list_recent_memories", limit=50))["memories"]


@pytest.mark.parametrize("shape", ["apoc", "cypher-shell"])
def test_memento_export(tmp_path, mcp_client_for, shape):
    written = nodes()
    path = tmp_path / "memento.json"
    if shape == "apoc":
        lines = [{"type": "node", "id": str(i), "labels": ["Memory"], "properties": n} for i, n in enumerate(written)]
        lines.append({"type": "node", "id": "99", "labels": ["Other"], "properties": {"id": "x"}})
        path.write_text("\n".join(json.dumps(line) for line in lines))
    else:
        path.write_text(json.dumps([{"m": n} for n in written]))
    owner = make_identity("tenant-a", "owner", role="admin")
    report = memories_import(caller=owner.caller, system="memento", location=str(path))
    assert report.created_total == 12 and report.superseded_links == 1, report.lines()
    shown = {m["id"]: m for m in asyncio.run(listed(owner, mcp_client_for))}
    assert set(shown) == {n["id"] for n in written[1:]}  # the superseded one is not listed
    for node in written[1:]:
        memory = shown[node["id"]]
        assert (memory["content"], memory["confidence"], memory["source"]) == (
            node["content"],
            node["confidence"],
            "explicit",
        )
        assert memory["created_at"].startswith(node["created_at"][:19])
        assert memory["updated_at"].startswith(node["updated_at"][:19])
    assert shown[written[1]["id"]]["supersedes"] == written[0]["id"]
    old = Memory.objects.get(pk=written[0]["id"])
    assert (old.validity, str(old.superseded_by_id)) == ("superseded", written[1]["id"])
    assert Memory.objects.get(pk=written[5]["id"]).embedding_status == "ready"  # the same model's vector, kept
    assert memories_import(caller=owner.caller, system="memento", location=str(path)).created_total == 0
