"""memproj's own export and COGX (cognee's portable format), both ways: what a
user takes from one memproj to another, or to cognee and back, keeps its ids
(as aliases where the id is taken), dates, counters, outcome history,
supersession, boundary classes, namespaces, scopes and knowledge graph; a
second run creates nothing; a dry run writes nothing and says why it skips."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.management import call_command

from memory import api
from memory.models import Entity, Memory, MemoryAlias, MemoryEvent, Relation
from memory.selectors.aliases import memory_pk
from memory.services.feedback import memory_feedback
from memory.services.imports import memories_import, tenant_export_cogx
from memory.services.memories import episode_store, fact_store, rule_store
from tests.conftest import make_identity
from tests.importers.conftest import stripe_claim

pytestmark = pytest.mark.django_db

PAST = datetime(2024, 3, 5, 14, 30, tzinfo=UTC)


def populate(caller):
    old = fact_store(caller=caller, subject="user", predicate="city", content="User lives in Berlin").memory
    new = fact_store(caller=caller, subject="user", predicate="city", content="User lives in Paris").memory
    rule = rule_store(caller=caller, content="Answer in German", boundary_class="pii")
    memory_feedback(caller=caller, memory_id=rule.id, signal="helpful")
    memory_feedback(caller=caller, memory_id=rule.id, signal="harmful")
    episode = episode_store(
        caller=caller, content="We talked about the trip to Lisbon", butler="travel", scope="travel"
    )
    keyed = fact_store(
        caller=caller, subject="ana", predicate=None, content="likes tea", namespace=["user", "ana"]
    ).memory
    Memory.objects.filter(pk=episode.pk).update(created_at=PAST, occurred_at=PAST)
    return {"old": old, "new": new, "rule": rule, "episode": episode, "keyed": keyed}


def export_file(tmp_path, slug):
    out = io.StringIO()
    call_command("export", tenant=slug, output="-", stdout=out, stderr=io.StringIO())
    path = tmp_path / "export.jsonl"
    path.write_text(out.getvalue())
    return path


def imported(caller, original):
    """The memory in the caller's tenant that an original id names (through the
    core's id resolution; a pii memory is hidden from reads by the default policy)."""
    if original.boundary_class == "pii":
        return Memory.objects.get(tenant_id=caller.tenant_id, pk=memory_pk(caller, str(original.id)))
    return api.memory_fetch(caller=caller, kind=original.kind, memory_id=str(original.id))


def assert_kept(caller, rows):
    old, new = imported(caller, rows["old"]), imported(caller, rows["new"])
    assert old.validity == "superseded" and old.superseded_by_id == new.id
    assert new.validity == "active" and new.content == "User lives in Paris"
    rule = imported(caller, rows["rule"])
    assert (rule.success_count, rule.harmful_count, rule.boundary_class) == (1.0, 1, "pii")
    marks = list(
        MemoryEvent.objects.filter(memory_id=rule.id, event_type__startswith="marked_")
        .order_by("id")
        .values_list("event_type", flat=True)
    )
    assert marks == ["marked_helpful", "marked_harmful"]
    episode = imported(caller, rows["episode"])
    assert episode.created_at == PAST and episode.occurred_at == PAST
    assert (episode.scope, episode.butler) == ("travel", "travel")
    keyed = imported(caller, rows["keyed"])
    assert keyed.namespace == ["user", "ana"] and keyed.subject == "ana"
    assert rows["new"].created_at == new.created_at


def test_memproj_export_moves_to_another_tenant_and_a_rerun_creates_nothing(tmp_path):
    a = make_identity("tenant-a", "owner", role="admin").caller
    b = make_identity("tenant-b", "owner", role="admin").caller
    rows = populate(a)
    path = export_file(tmp_path, "tenant-a")

    dry = memories_import(caller=b, system="memproj", location=str(path), dry_run=True)
    assert dry.created_total == 5 and not Memory.objects.filter(tenant_id=b.tenant_id).exists()
    assert "principals are not imported" in " ".join(dry.skipped)

    report = memories_import(caller=b, system="memproj", location=str(path))
    assert report.created_total == 5 and report.superseded_links == 1
    # tenant A still holds those ids: B's copies have new ids, and A's ids as aliases.
    assert not Memory.objects.filter(tenant_id=b.tenant_id, pk=rows["old"].pk).exists()
    assert MemoryAlias.objects.filter(tenant_id=b.tenant_id, system="memproj").count() == 5
    assert_kept(b, rows)
    assert all(m.embedding_status == "ready" for m in Memory.objects.filter(tenant_id=b.tenant_id))

    again = memories_import(caller=b, system="memproj", location=str(path))
    assert again.created_total == 0
    assert again.skipped["already imported (its id is an alias of a memory here)"] == 5
    assert Memory.objects.filter(tenant_id=b.tenant_id).count() == 5


def test_into_an_empty_installation_the_ids_stay_the_memories_own(tmp_path):
    a = make_identity("tenant-a", "owner", role="admin").caller
    rows = populate(a)
    path = export_file(tmp_path, "tenant-a")
    ids = {r.pk for r in rows.values()}
    Memory.objects.filter(tenant_id=a.tenant_id).delete()
    b = make_identity("tenant-b", "owner", role="admin").caller
    memories_import(caller=b, system="memproj", location=str(path))
    assert set(Memory.objects.filter(tenant_id=b.tenant_id).values_list("pk", flat=True)) == ids


def test_a_limit_bounds_a_run_and_the_next_run_goes_on(tmp_path):
    a = make_identity("tenant-a", "owner", role="admin").caller
    rows = populate(a)
    path = export_file(tmp_path, "tenant-a")
    b = make_identity("tenant-b", "owner", role="admin").caller
    first = memories_import(caller=b, system="memproj", location=str(path), limit=2, batch_size=1)
    assert first.created_total == 2 and first.stopped_at_limit
    second = memories_import(caller=b, system="memproj", location=str(path), batch_size=2)
    assert second.created_total == 3
    assert_kept(b, rows)


def test_a_limit_inside_a_batch_writes_what_it_counted(tmp_path):
    """The limit falls in the middle of a batch: the memories counted before it are written."""
    a = make_identity("tenant-a", "owner", role="admin").caller
    populate(a)
    path = export_file(tmp_path, "tenant-a")
    b = make_identity("tenant-b", "owner", role="admin").caller
    first = memories_import(caller=b, system="memproj", location=str(path), limit=2, batch_size=100)
    assert first.created_total == 2 and first.stopped_at_limit
    assert Memory.objects.filter(tenant_id=b.tenant_id).count() == 2
    second = memories_import(caller=b, system="memproj", location=str(path), batch_size=100)
    assert second.created_total == 3 and Memory.objects.filter(tenant_id=b.tenant_id).count() == 5


def test_the_command_prints_the_report(tmp_path):
    a = make_identity("tenant-a", "owner", role="admin").caller
    populate(a)
    make_identity("tenant-b", "owner", role="admin")
    path = export_file(tmp_path, "tenant-a")
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "import_memories", "--from", "memproj", str(path), "--tenant", "tenant-b", "--dry-run", stdout=out, stderr=err
    )
    assert "would create 1 episode, 3 fact, 1 rule" in out.getvalue()
    call_command("import_memories", "--from", "memproj", str(path), "--tenant", "tenant-b", stdout=out, stderr=err)
    assert "created 1 episode, 3 fact, 1 rule" in out.getvalue()


def test_cogx_round_trip_keeps_memories_and_the_knowledge_graph(tmp_path):
    a = make_identity("tenant-a", "owner", role="admin").caller
    rows = populate(a)
    claim = stripe_claim(a)
    archive = tmp_path / "out_cogx"
    counts = tenant_export_cogx(tenant_id=a.tenant_id, directory=archive)
    assert counts["entity"] == 2 and counts["episode"] == 1
    manifest = json.loads((archive / "manifest.json").read_text())
    assert manifest["cogx_version"] == "0.1" and manifest["source_system"] == "memproj"

    c = make_identity("tenant-c", "owner", role="admin").caller
    report = memories_import(caller=c, system="cogx", location=str(archive))
    assert report.created_total == 6 and report.entities == 2 and report.relations == 1
    assert_kept(c, rows)
    copy = api.memory_fetch(caller=c, kind="fact", memory_id=str(claim.memory.id))
    assert copy.scope == claim.memory.scope
    relation = Relation.objects.get(tenant_id=c.tenant_id)
    assert (relation.src.name, relation.type, relation.dst.name, relation.evidence_id) == (
        "Stripe",
        "provides",
        "payments",
        copy.id,
    )
    assert set(Entity.objects.get(tenant_id=c.tenant_id, name="Stripe").claims.all()) == {copy}
    assert memories_import(caller=c, system="cogx", location=str(archive)).created_total == 0


def test_a_cogx_archive_from_cognee_maps_its_record_kinds(tmp_path):
    """The record shapes of cognee's migration module (COGX 0.1): a mem0-style
    memory, a conversation episode, a Letta block, an entity pair with an edge."""
    archive = tmp_path / "cognee_cogx"
    archive.mkdir()
    (archive / "manifest.json").write_text(json.dumps({"cogx_version": "0.1", "source_system": "cognee", "counts": {}}))
    lines: dict[str, list[dict[str, Any]]] = {
        "memories.jsonl": [
            {
                "kind": "memory",
                "external_system": "mem0",
                "external_id": "m-1",
                "content": "Likes green tea",
                "categories": ["food"],
                "scope": {"user_id": "alice"},
                "created_at": "2025-01-02T03:04:05Z",
            },
        ],
        "episodes.jsonl": [
            {
                "kind": "episode",
                "external_system": "zep",
                "external_id": "ep-1",
                "scope": {"session_id": "s1"},
                "turns": [
                    {"role": "user", "content": "Hi", "occurred_at": "2025-01-01T10:00:00Z"},
                    {"role": "assistant", "content": "Hello"},
                ],
            },
        ],
        "memory_blocks.jsonl": [
            {
                "kind": "memory_block",
                "external_system": "letta",
                "external_id": "b-1",
                "label": "human",
                "value": "Name: Alice",
                "limit": 2000,
            },
        ],
        "entities.jsonl": [
            {"kind": "entity", "external_id": "n-1", "name": "Alice", "entity_type": "Person"},
            {"kind": "entity", "external_id": "n-2", "name": "Acme", "entity_type": "Organization"},
        ],
        "facts.jsonl": [
            {
                "kind": "fact",
                "external_id": "f-1",
                "subject_ref": "n-1",
                "predicate": "works_at",
                "object_ref": "n-2",
                "fact_text": "Alice works at Acme",
                "valid_at": "2024-06-01T00:00:00Z",
            },
        ],
        "nodes.jsonl": [{"id": "x", "type": "DocumentChunk"}],
    }
    for name, rows in lines.items():
        (archive / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    caller = make_identity("tenant-a", "owner", role="admin").caller
    report = memories_import(caller=caller, system="cogx", location=str(archive))
    assert report.created == {"fact": 3, "episode": 1}
    assert report.skipped["raw graph nodes carry no memory text"] == 1
    tea = api.memory_fetch(caller=caller, kind="fact", memory_id="m-1")
    assert tea.namespace == ["user", "alice"] and tea.tags == ["food"] and tea.created_at.year == 2025
    episode = api.memory_fetch(caller=caller, kind="episode", memory_id="ep-1")
    assert episode.content == "user: Hi\nassistant: Hello" and episode.occurred_at.hour == 10
    assert api.memory_fetch(caller=caller, kind="fact", memory_id="b-1").subject == "human"
    works = api.memory_fetch(caller=caller, kind="fact", memory_id="f-1")
    assert (works.subject, works.predicate, works.occurred_at.year) == ("n-1", "works_at", 2024)
    relation = Relation.objects.get(tenant_id=caller.tenant_id)
    assert (relation.src.name, relation.dst.name, relation.src.attrs["type"]) == ("Alice", "Acme", "Person")


@pytest.mark.django_db(transaction=True)
@pytest.mark.real_embedder
def test_when_it_happened_decides_the_time_filters(tmp_path, mcp_client_for):
    """An imported episode is dated when it happened (occurred_at), not when the
    source system or memproj stored it: roampal's days_back reads that date."""
    import asyncio
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    archive = tmp_path / "dated_cogx"
    archive.mkdir()
    (archive / "manifest.json").write_text(json.dumps({"cogx_version": "0.1", "source_system": "cognee"}))
    episodes: list[dict[str, Any]] = [
        # stored long ago, happened two days ago (a late upload of a recent conversation)
        {"external_id": "recent", "created_at": "2024-01-01T00:00:00Z", "occurred": now - timedelta(days=2)},
        # stored yesterday, happened a month ago (a backfill)
        {
            "external_id": "old",
            "created_at": (now - timedelta(days=1)).isoformat(),
            "occurred": now - timedelta(days=30),
        },
    ]
    (archive / "episodes.jsonl").write_text(
        "\n".join(
            json.dumps(
                {
                    "kind": "episode",
                    "external_id": e["external_id"],
                    "created_at": e["created_at"],
                    "turns": [
                        {
                            "role": "user",
                            "content": f"Trip planning {e['external_id']}",
                            "occurred_at": e["occurred"].isoformat(),
                        }
                    ],
                }
            )
            for e in episodes
        )
    )
    owner = make_identity("tenant-a", "owner", role="admin")
    memories_import(caller=owner.caller, system="cogx", location=str(archive))

    async def within_three_days():
        async with mcp_client_for(owner, "roampal") as client:
            result = await client.call_tool("search_memory", {"days_back": 3, "collections": ["history"]})
            return [h["content"] for h in result.structured_content["results"]]

    assert asyncio.run(within_three_days()) == ["user: Trip planning recent"]


def test_aliases_travel_with_a_memproj_export(tmp_path):
    """A memory imported from elsewhere keeps its upstream id through a move
    between memproj installations (the export carries the aliases)."""
    archive = tmp_path / "small_cogx"
    archive.mkdir()
    (archive / "manifest.json").write_text(json.dumps({"cogx_version": "0.1"}))
    (archive / "memories.jsonl").write_text(
        json.dumps({"kind": "memory", "external_id": "m-7", "content": "Owns a kayak"})
    )
    a = make_identity("tenant-a", "owner", role="admin").caller
    memories_import(caller=a, system="cogx", location=str(archive))
    path = export_file(tmp_path, "tenant-a")
    assert any(json.loads(line).get("type") == "alias" for line in path.read_text().splitlines())
    b = make_identity("tenant-b", "owner", role="admin").caller
    memories_import(caller=b, system="memproj", location=str(path))
    assert api.memory_fetch(caller=b, kind="fact", memory_id="m-7").content == "Owns a kayak"


def test_the_command_namespace_is_a_typed_path(tmp_path):
    """--namespace " team / x " is the path team/x, as the admin's import form
    reads it: the spaces around a '/' are layout, not part of a segment."""
    populate(make_identity("tenant-a", "owner", role="admin").caller)
    b = make_identity("tenant-b", "owner", role="admin").caller
    path = export_file(tmp_path, "tenant-a")
    call_command(
        "import_memories",
        "--from",
        "memproj",
        str(path),
        "--tenant",
        "tenant-b",
        "--namespace",
        " team / x ",
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    namespaces = {
        tuple(ns[:2]) for ns in Memory.objects.filter(tenant_id=b.tenant_id).values_list("namespace", flat=True)
    }
    assert namespaces == {("team", "x")}
