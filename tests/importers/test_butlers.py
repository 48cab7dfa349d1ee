"""The butlers memory module is not published on a package registry, so no
store written by it could be made here: this test creates its four tables with
the columns of its schema (src/butlers/modules/memory/migrations, episodes /
facts / rules / memory_links) in a schema of the test database, fills them as
its tools would (a superseded fact, a rule with outcomes, 384-d vectors of the
same model), imports them, and reads them back through memproj's memory dialect
(the butlers module's own tool names; a real MCP client)."""

from __future__ import annotations

import asyncio
import json
import uuid

import psycopg
import pytest

from memory.embeddings import get_embedder
from memory.models import Memory
from memory.services.imports import memories_import
from tests.conftest import call, make_identity
from tests.importers.conftest import owner_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.real_embedder]

DDL = """
CREATE TABLE {s}.episodes (id uuid PRIMARY KEY, butler text NOT NULL, session_id uuid, content text NOT NULL,
    embedding vector(384), importance float NOT NULL DEFAULT 5.0, reference_count int NOT NULL DEFAULT 0,
    consolidated boolean NOT NULL DEFAULT false, consolidation_status varchar(20) NOT NULL DEFAULT 'pending',
    created_at timestamptz NOT NULL DEFAULT now(), last_referenced_at timestamptz,
    expires_at timestamptz DEFAULT now() + interval '7 days', metadata jsonb DEFAULT '{{}}'::jsonb,
    tenant_id text NOT NULL DEFAULT 'owner', retention_class text NOT NULL DEFAULT 'transient',
    sensitivity text NOT NULL DEFAULT 'normal');
CREATE TABLE {s}.facts (id uuid PRIMARY KEY, subject text NOT NULL, predicate text NOT NULL, content text NOT NULL,
    embedding vector(384), importance float NOT NULL DEFAULT 5.0, confidence float NOT NULL DEFAULT 1.0,
    decay_rate float NOT NULL DEFAULT 0.008, permanence text NOT NULL DEFAULT 'standard', source_butler text,
    supersedes_id uuid, validity text NOT NULL DEFAULT 'active', scope text NOT NULL DEFAULT 'global',
    reference_count int NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now(),
    last_referenced_at timestamptz, last_confirmed_at timestamptz, tags jsonb DEFAULT '[]'::jsonb,
    metadata jsonb DEFAULT '{{}}'::jsonb, valid_at timestamptz, tenant_id text NOT NULL DEFAULT 'owner',
    observed_at timestamptz DEFAULT now(), invalid_at timestamptz);
CREATE TABLE {s}.rules (id uuid PRIMARY KEY, content text NOT NULL, embedding vector(384),
    scope text NOT NULL DEFAULT 'global', maturity text NOT NULL DEFAULT 'candidate',
    confidence float NOT NULL DEFAULT 0.5, decay_rate float NOT NULL DEFAULT 0.008,
    permanence text NOT NULL DEFAULT 'standard', effectiveness_score float NOT NULL DEFAULT 0.0,
    applied_count int NOT NULL DEFAULT 0, success_count int NOT NULL DEFAULT 0, harmful_count int NOT NULL DEFAULT 0,
    source_butler text, created_at timestamptz NOT NULL DEFAULT now(), last_applied_at timestamptz,
    last_confirmed_at timestamptz, reference_count int NOT NULL DEFAULT 0, last_referenced_at timestamptz,
    tags jsonb DEFAULT '[]'::jsonb, metadata jsonb DEFAULT '{{}}'::jsonb, tenant_id text NOT NULL DEFAULT 'owner');
CREATE TABLE {s}.memory_links (source_type text NOT NULL, source_id uuid NOT NULL, target_type text NOT NULL,
    target_id uuid NOT NULL, relation text NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_type, source_id, target_type, target_id));
"""


def vec(text):
    return "[" + ",".join(str(float(x)) for x in get_embedder().embed_document(text)) + "]"


@pytest.fixture
def butler_schema():
    schema = f"butler_{uuid.uuid4().hex[:8]}"
    ids = {"episodes": [], "old": str(uuid.uuid4()), "new": str(uuid.uuid4()), "rule": str(uuid.uuid4())}
    with psycopg.connect(owner_url(), autocommit=True) as db:
        db.execute(f"CREATE SCHEMA {schema}")
        db.execute(DDL.format(s=schema))
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
