"""COGX both ways with cognee's own code (PyPI cognee 1.6.5, its migration
module ``cognee/modules/migration``, installed in .venv-import and run there by
tests/importers/upstream/cognee_cogx.py):

- cognee's migration sources convert a mem0 ``get_all()`` result and a Zep /
  Graphiti graph export into COGX records and cognee's ``COGXArchiveWriter``
  and ``pack_archive`` write the ``.cogx.tar.gz``; memproj imports it, and every
  memory is found by its upstream id with its date, namespace, tags and state;
  a re-run creates nothing;
- memproj's COGX export is read by cognee's ``read_manifest`` /
  ``read_archive``, which validate every record against cognee's record models:
  cognee reads every memory, entity and relation memproj wrote.

What is not cognee here, and why: cognee's datasets (``cognee.add`` /
``cognify`` and the export of a dataset built by them) need an LLM (litellm,
an API key, the network), so the archive cognee writes is one of its
conversions of another system's export, not of a cognee dataset. And cognee is
installed without its dependencies: it requires 54 packages (among them
onnxruntime<=1.23.2 and tokenizers<=0.23.0, older than the service's own), and
given cognee together with the other upstream systems' pins (roampal,
chromadb, mem0ai), pip's resolver was still backtracking after 500 s; importing ``cognee`` runs its
package initialiser, which needs all of them, so the script loads cognee's COGX
module files (whose imports are pydantic and each other) without it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory import api
from memory.models import Memory, MemoryAlias, Relation
from memory.services.imports import memories_import, tenant_export_cogx
from memory.services.memories import episode_store, fact_store, rule_store
from tests.conftest import make_identity
from tests.importers.conftest import run_upstream, stripe_claim

pytestmark = pytest.mark.django_db


def test_an_archive_cognee_writes_is_imported_whole(tmp_path):
    written = run_upstream("cognee_cogx.py", "write", str(tmp_path / "from_cognee"))
    # cognee's own file, from the package installed in .venv-import.
    assert written["module"].endswith("site-packages/cognee/modules/migration/cogx.py") and written["cognee"] == "1.6.5"
    assert written["counts"] == {"memory": 24, "episode": 6, "entity": 4, "fact": 3}
    caller = make_identity("tenant-a", "owner", role="admin").caller

    report = memories_import(caller=caller, system="cogx", location=written["tarball"])

    assert report.created == {"fact": 24 + 3, "episode": 6}, report.lines()
    assert (report.entities, report.relations) == (4, 3)
    by_id = {record["external_id"]: record for record in written["records"]}
    for record in written["records"]:
        if record["kind"] != "memory":
            continue
        memory = api.memory_fetch(caller=caller, kind="fact", memory_id=record["external_id"])
        assert memory.content == record["content"]
        assert memory.created_at == datetime.fromisoformat(record["created_at"])
        assert memory.namespace == ["user", record["scope"]["user_id"]]
        assert memory.tags == record["categories"]
    for n in range(6):
        episode = api.memory_fetch(caller=caller, kind="episode", memory_id=f"ep-{n}")
        assert episode.content.endswith(by_id[f"ep-{n}"]["turns"][0]["content"])
        # Dated when it happened (the turn's valid_at), not when it was exported or imported.
        assert episode.occurred_at == datetime(2024, n + 1, 9, 18, 30, tzinfo=UTC)
    berlin = Memory.objects.get(pk=MemoryAlias.objects.get(tenant_id=caller.tenant_id, alias="edge-berlin").memory_id)
    paris = api.memory_fetch(caller=caller, kind="fact", memory_id="edge-paris")
    assert (berlin.validity, paris.validity) == ("superseded", "active")  # Berlin's invalid_at is past
    assert paris.occurred_at == datetime(2024, 2, 1, tzinfo=UTC)
    lives_in = Relation.objects.filter(tenant_id=caller.tenant_id, type__iexact="lives_in")
    assert {r.dst.name for r in lives_in} == {"Berlin", "Paris"}

    again = memories_import(caller=caller, system="cogx", location=written["tarball"])
    assert again.created_total == 0 and sum(again.skipped.values()) >= 33


def test_cognee_reads_memprojs_export(tmp_path):
    caller = make_identity("tenant-a", "owner", role="admin").caller
    fact_store(caller=caller, subject="user", predicate="city", content="User lives in Berlin")
    fact_store(caller=caller, subject="user", predicate="city", content="User lives in Paris")
    rule_store(caller=caller, content="Answer in German")
    episode_store(caller=caller, content="We talked about the trip to Lisbon", butler="travel")
    stripe_claim(caller)
    archive = tmp_path / "to_cognee"
    counts = tenant_export_cogx(tenant_id=caller.tenant_id, directory=archive)

    read = run_upstream("cognee_cogx.py", "read", str(archive))

    assert read["manifest"]["source_system"] == "memproj" and read["manifest"]["cogx_version"] == "0.1"
    kinds: dict[str, int] = {}
    for record in read["records"]:
        kinds[record["kind"]] = kinds.get(record["kind"], 0) + 1
    assert kinds == {kind: n for kind, n in counts.items() if n}
    exported_ids = {record["external_id"] for record in read["records"] if record["kind"] != "entity"}
    memory_ids = {str(pk) for pk in Memory.objects.filter(tenant_id=caller.tenant_id).values_list("pk", flat=True)}
    assert memory_ids <= exported_ids
    texts = {record.get("content") or record.get("fact_text") or "" for record in read["records"]}
    assert {"User lives in Paris", "Answer in German", "Stripe is the payment provider"} <= texts
    assert {record["name"] for record in read["records"] if record["kind"] == "entity"} == {"Stripe", "payments"}
