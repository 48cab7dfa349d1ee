"""Two imports of one tenant's knowledge graph at once (the admin's Import
clicked twice, the command started again, two stores sharing entities) both
finish, each entity and relation stored once.

Found by probing: an import's graph step took entity rows without the
tenant's write lock, which every other writer of entities (a claim's merge,
pce's claim_upsert) takes first. Two graph steps holding the same entities
in the other order deadlocked: PostgreSQL ended one, and its import stopped
with the storage error saying the database could not be reached. The graph
step now stores its entities and relations a chunk at a time, each chunk
under the tenant's write lock."""

from __future__ import annotations

import contextlib
import json
import threading

import pytest
from django.db import connection
from django.db.models.signals import post_save

from memory.models import Entity, Memory, MemoryAlias, Relation
from memory.services import imports
from memory.services.imports import memories_import
from tests.conftest import make_identity

# The two imports run on their own connections, so their writes are committed.
pytestmark = pytest.mark.django_db(transaction=True)


def memory_jsonl(tmp_path, name, names, relations):
    path = tmp_path / name
    lines = [{"type": "entity", "name": n, "entityType": "animal", "observations": [f"{n} swims"]} for n in names]
    lines += [{"type": "relation", "from": a, "to": b, "relationType": kind} for a, b, kind in relations]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def both(caller, *locations):
    """Import each location on a thread of its own, at once: their reports (or what they raised)."""
    out: dict[int, object] = {}

    def run(n, location):
        try:
            out[n] = memories_import(caller=caller, system="mcp-memory", location=location, embed=False)
        except Exception as exc:  # the test shows what came out, coded or not
            out[n] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n, location)) for n, location in enumerate(locations)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [out[n] for n in range(len(locations))]


def test_two_imports_of_one_file_at_once_store_each_entity_and_relation_once(tmp_path, monkeypatch):
    caller = make_identity("tenant-a", "owner", role="admin").caller
    names = [f"walrus {i}" for i in range(40)]
    location = memory_jsonl(
        tmp_path, "memory.jsonl", names, [(a, b, "knows") for a, b in zip(names, names[1:], strict=False)]
    )
    graph = imports._Importer.graph
    start = threading.Barrier(2)

    def together(self, entities, relations):
        # Both runs reach their graph step before either begins it.
        start.wait(timeout=120)
        return graph(self, entities, relations)

    monkeypatch.setattr(imports._Importer, "graph", together)
    reports = both(caller, location, location)
    assert all(isinstance(r, imports.ImportReport) for r in reports), reports
    assert sum(r.entities for r in reports) == 40 and sum(r.relations for r in reports) == 39
    assert sum(r.created_total for r in reports) == 40
    assert Entity.objects.filter(tenant_id=caller.tenant_id).count() == 40
    assert Relation.objects.filter(tenant_id=caller.tenant_id).count() == 39
    assert Memory.objects.filter(tenant_id=caller.tenant_id).count() == 40
    assert MemoryAlias.objects.filter(tenant_id=caller.tenant_id).count() == 40
    for entity in Entity.objects.filter(tenant_id=caller.tenant_id):
        assert entity.claims.count() == 1


def test_two_imports_holding_shared_entities_in_the_other_order_both_finish(tmp_path):
    caller = make_identity("tenant-a", "owner", role="admin").caller
    first = memory_jsonl(tmp_path, "a.jsonl", ["walrus", "seal"], [("walrus", "seal", "knows")])
    second = memory_jsonl(
        tmp_path, "b.jsonl", ["seal", "walrus"], [("walrus", "seal", "knows"), ("seal", "walrus", "fears")]
    )
    # Each run, once it has stored its first entity, waits until the other has
    # stored its first too (or cannot: it waits for the tenant's lock).
    stored_one = threading.Barrier(2)
    seen = threading.local()

    def hold(sender, instance, created, **kwargs):
        if created and not getattr(seen, "done", False):
            seen.done = True
            with contextlib.suppress(threading.BrokenBarrierError):
                stored_one.wait(timeout=5)

    post_save.connect(hold, sender=Entity, weak=False)
    try:
        reports = both(caller, first, second)
    finally:
        post_save.disconnect(hold, sender=Entity)
    assert all(isinstance(r, imports.ImportReport) for r in reports), reports
    assert sum(r.entities for r in reports) == 2 and sum(r.relations for r in reports) == 2
    assert sorted(Entity.objects.filter(tenant_id=caller.tenant_id).values_list("name", flat=True)) == [
        "seal",
        "walrus",
    ]
    assert sorted(Relation.objects.filter(tenant_id=caller.tenant_id).values_list("type", flat=True)) == [
        "fears",
        "knows",
    ]
    assert Memory.objects.filter(tenant_id=caller.tenant_id).count() == 2
