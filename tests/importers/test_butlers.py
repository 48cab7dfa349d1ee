"""The butlers memory module is not published on a package registry, so its
software cannot write the store here; its schema is real: this test creates the
tables by running the SQL of the module's own migration
(src/butlers/modules/memory/migrations/001_memory_schema.py of
github.com/tzeusy-org/butlers, extracted with the upstream commit it came from
by tests/importers/upstream/butlers_schema_extract.py into
fixtures/butlers/001_memory_schema.sql) in a schema of the test database, fills
them as its tools would (a superseded fact, a rule with outcomes, 384-d vectors
of the same model), imports them, and reads them back through memproj's memory
dialect (the butlers module's own tool names; a real MCP client)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from memory.embeddings import get_embedder
from memory.models import Memory
from memory.services.imports import memories_import
from tests.conftest import call, make_identity
from tests.importers.conftest import owner_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.real_embedder]

SCHEMA_SQL = Path(__file__).resolve().parent / "fixtures" / "butlers" / "001_memory_schema.sql"


def vec(text):
    return "[" + ",".join(str(float(x)) for x in get_embedder().embed_document(text)) + "]"


@pytest.fixture
def butler_schema():
    schema = f"butler_{uuid.uuid4().hex[:8]}"
    ids: dict[str, Any] = {
        "episodes": [],
        "old": str(uuid.uuid4()),
        "new": str(uuid.uuid4()),
        "rule": str(uuid.uuid4()),
    }
    with psycopg.connect(owner_url(), autocommit=True) as db:
        db.execute(f"CREATE SCHEMA {schema}")
        # The module's own migration, in the butler's schema (butlers gives each butler one).
        db.execute(f"SET search_path TO {schema}, public")
        available = {row[0] for row in db.execute("SELECT name FROM pg_available_extensions").fetchall()}
        for statement in SCHEMA_SQL.read_text(encoding="utf-8").split(";\n\n"):
            if '"uuid-ossp"' in statement and "uuid-ossp" not in available:
                continue  # the embedded server has no uuid-ossp; no statement of the schema uses it
            db.execute(statement)
        for n in range(8):
            episode = str(uuid.uuid4())
            ids["episodes"].append(episode)
            text = f"Episode {n}: the user asked the butler about {['groceries', 'trains'][n % 2]}"
            db.execute(
                f"INSERT INTO {schema}.episodes (id, butler, session_id, content, embedding, importance, created_at,"
                " expires_at) VALUES (%s, 'general', %s, %s, %s::vector, %s, %s, now() + interval '7 days')",
                [episode, str(uuid.uuid4()), text, vec(text), 3 + n % 5, f"2025-07-0{n + 1}T12:00:00Z"],
            )
        db.execute(
            f"INSERT INTO {schema}.facts (id, subject, predicate, content, embedding, validity, created_at, tags)"
            " VALUES (%s, 'user', 'city', 'Austin', %s::vector, 'superseded', '2025-01-01T00:00:00Z', %s)",
            [ids["old"], vec("Austin"), json.dumps(["home"])],
        )
        db.execute(
            f"INSERT INTO {schema}.facts (id, subject, predicate, content, embedding, supersedes_id, permanence,"
            " decay_rate, created_at, valid_at, tags) VALUES (%s, 'user', 'city', 'Denver', %s::vector, %s,"
            " 'stable', 0.002, '2025-03-01T00:00:00Z', '2025-02-15T00:00:00Z', %s)",
            [ids["new"], vec("Denver"), ids["old"], json.dumps(["home"])],
        )
        db.execute(
            f"INSERT INTO {schema}.rules (id, content, maturity, effectiveness_score, applied_count, success_count,"
            " harmful_count, created_at, last_applied_at) VALUES (%s, 'Confirm the grocery list before ordering',"
            " 'established', 0.83, 7, 6, 1, '2025-04-01T00:00:00Z', '2025-06-01T00:00:00Z')",
            [ids["rule"]],
        )
        db.execute(
            f"INSERT INTO {schema}.memory_links (source_type, source_id, target_type, target_id, relation)"
            " VALUES ('rule', %s, 'episode', %s, 'derived_from')",
            [ids["rule"], ids["episodes"][0]],
        )
    yield schema, ids
    with psycopg.connect(owner_url(), autocommit=True) as db:
        db.execute(f"DROP SCHEMA {schema} CASCADE")


async def get_all(identity, mcp_client_for, ids):
    async with mcp_client_for(identity, "memory") as client:
        episodes = [await call(client, "memory_get", memory_type="episode", memory_id=i) for i in ids["episodes"]]
        old = await call(client, "memory_get", memory_type="fact", memory_id=ids["old"])
        new = await call(client, "memory_get", memory_type="fact", memory_id=ids["new"])
        rule = await call(client, "memory_get", memory_type="rule", memory_id=ids["rule"])
        found = await call(client, "memory_search", query="where does the user live", types=["fact"])
    return episodes, old, new, rule, found


def test_butlers_tables(butler_schema, mcp_client_for):
    schema, ids = butler_schema
    owner = make_identity("tenant-a", "owner", role="admin")
    report = memories_import(caller=owner.caller, system="butlers", location=owner_url(), options={"schema": schema})
    assert report.created == {"episode": 8, "fact": 2, "rule": 1}, report.lines()
    episodes, old, new, rule, found = asyncio.run(get_all(owner, mcp_client_for, ids))
    assert [e["id"] for e in episodes] == ids["episodes"]
    assert episodes[2]["created_at"].startswith("2025-07-03T12:00:00") and episodes[2]["butler"] == "general"
    assert (old["validity"], old["superseded_by"], new["validity"]) == ("superseded", ids["new"], "active")
    assert (new["content"], new["permanence"], new["tags"]) == ("Denver", "stable", ["home"])
    assert (rule["maturity"], rule["success_count"], rule["harmful_count"], rule["applied_count"]) == (
        "established",
        6,
        1,
        7,
    )
    assert [r["id"] for r in found["results"]][:1] == [ids["new"]]
    denver = Memory.objects.get(pk=ids["new"])
    assert denver.occurred_at.isoformat().startswith("2025-02-15") and denver.embedding_status == "ready"
    assert Memory.objects.get(pk=ids["rule"]).metadata["butlers_links"][0]["relation"] == "derived_from"
    again = memories_import(caller=owner.caller, system="butlers", location=owner_url(), options={"schema": schema})
    assert again.created_total == 0
