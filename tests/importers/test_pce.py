"""pce-memory v0.14.0 is not on the npm registry: the fixture in fixtures/pce/
was written by pce-memory itself, built from its repository at v0.14.0, with
fixtures/pce/write_store.py (24 claims of every kind, scope and boundary class
it accepts, entities and relations on some, feedback, a sync push). Imported
from its DuckDB file and from its .pce-shared directory, every claim is found
through memproj's pce dialect (a real MCP client) under its pce-memory id, with
its text, kind, scope, boundary class and date; feedback by that id works;
utility, confidence and the feedback counts come along."""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory.models import Entity, Memory, Relation
from memory.services.imports import memories_import
from tests.conftest import make_identity

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.real_embedder, pytest.mark.slow]

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "pce"
CLAIMS = json.loads((FIXTURE / "claims.json").read_text())


@pytest.fixture
def duckdb_file(tmp_path):
    path = tmp_path / "pce.duckdb"
    with gzip.open(FIXTURE / "pce.duckdb.gz", "rb") as packed, path.open("wb") as out:
        shutil.copyfileobj(packed, out)
    return path


async def search_each(identity, mcp_client_for, claims):
    async with mcp_client_for(identity, "pce") as client:
        for claim in claims:
            if claim["boundary_class"] == "pii":
                continue  # the default policy keeps pii claims out of answer:task reads: checked in the database
            arguments = {"query": claim["text"], "allow": ["answer:task"], "top_k": 50, "scope": [claim["scope"]]}
            result = await client.call_tool("pce.memory.search", arguments)
            assert not result.is_error, result.content
            items = {i["claim"]["id"]: i["claim"] for i in json.loads(result.content[0].text)["data"]["items"]}
            assert claim["id"] in items, (claim["id"], sorted(items))
            shown = items[claim["id"]]
            assert (shown["kind"], shown["scope"], shown["boundary_class"]) == (
                claim["kind"],
                claim["scope"],
                claim["boundary_class"],
            )
            assert shown["text"] == claim["text"]
            upstream = datetime.fromisoformat(claim["created_at"]).replace(tzinfo=UTC)
            assert datetime.fromisoformat(shown["created_at"]) == upstream
        answer = await client.call_tool("pce.memory.feedback", {"claim_id": claims[1]["id"], "signal": "helpful"})
        assert not answer.is_error, answer.content


def test_pce_duckdb_file(duckdb_file, mcp_client_for):
    owner = make_identity("tenant-a", "owner", role="admin")
    report = memories_import(caller=owner.caller, system="pce", location=str(duckdb_file))
    assert report.created_total == len(CLAIMS) == 24, report.lines()
    assert (report.entities, report.relations) == (8, 4)
    asyncio.run(search_each(owner, mcp_client_for, CLAIMS))
    pii = [c for c in CLAIMS if c["boundary_class"] == "pii"]
    assert pii and all(
        Memory.objects.get(tenant_id=owner.caller.tenant_id, content=c["text"]).boundary_class == "pii" for c in pii
    )
    first = Memory.objects.get(tenant_id=owner.caller.tenant_id, content=CLAIMS[0]["text"])
    assert (first.utility, first.confidence) == pytest.approx((CLAIMS[0]["utility"], CLAIMS[0]["confidence"]))
    assert (first.success_count, first.metadata["provenance"]["at"]) == (2.0, "2025-01-10T10:00:00Z")
    assert first.occurred_at == datetime(2025, 1, 10, 10, tzinfo=UTC)
    second = Memory.objects.get(tenant_id=owner.caller.tenant_id, content=CLAIMS[1]["text"])
    assert second.success_count == 2.0  # one helpful in pce-memory, one through memproj's pce dialect
    service = Entity.objects.get(tenant_id=owner.caller.tenant_id, name="service 0")
    assert service.type == "Artifact" and [m.content for m in service.claims.all()] == [CLAIMS[0]["text"]]
    owns = Relation.objects.get(tenant_id=owner.caller.tenant_id, src__name="team 0")
    assert (owns.type, owns.dst_id, owns.evidence_id) == ("OWNS", service.id, None)  # upstream records none
    assert memories_import(caller=owner.caller, system="pce", location=str(duckdb_file)).created_total == 0


def test_pce_shared_sync_directory():
    owner = make_identity("tenant-b", "owner", role="admin")
    shared = sorted((FIXTURE / ".pce-shared" / "claims").rglob("*.json"))
    report = memories_import(caller=owner.caller, system="pce", location=str(FIXTURE / ".pce-shared"))
    assert report.created_total == len(shared) > 0
    for file in shared:
        claim = json.loads(file.read_text())
        memory = Memory.objects.get(tenant_id=owner.caller.tenant_id, content=claim["text"])
        assert (memory.scope, memory.boundary_class, memory.metadata["claim_kind"]) == (
            claim["scope"],
            claim["boundary_class"],
            claim["kind"],
        )
        assert memory.created_at == datetime.fromisoformat(claim["provenance"]["at"].replace("Z", "+00:00"))
