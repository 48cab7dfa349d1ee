"""roampal (PyPI roampal 0.6.0 on chromadb 1.5.9): roampal's own memory system
writes a store (memory_bank facts, one archived; working memories scored with
outcomes, two promoted to history by roampal; history and patterns entries; a
book). Imported from its data folder and from a Desktop-style backup zip, every
live record is found through memproj's roampal dialect (a real MCP client) by
its roampal id, with that id, its date, score, uses, successes, outcome history
and collection; the archived entry is not found; a re-run creates nothing."""

from __future__ import annotations

import asyncio
import json
import shutil
from datetime import datetime

import pytest

from memory.services.imports import memories_import
from tests.conftest import make_identity
from tests.importers.conftest import run_upstream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.real_embedder, pytest.mark.slow]

MARKS = {"worked": "Y", "partial": "~", "failed": "N", "unknown": "?"}


@pytest.fixture(scope="module")
def roampal_store(tmp_path_factory):
    data = tmp_path_factory.mktemp("roampal") / "data"
    written = run_upstream("roampal_write.py", "--data", str(data), timeout=900)
    return data, written["records"]


async def check(identity, mcp_client_for, records):
    async with mcp_client_for(identity, "roampal") as client:
        for doc_id, record in records.items():
            result = await client.call_tool("search_memory", {"id": doc_id})
            assert not result.is_error, result.content
            found = result.structured_content["results"]
            meta = record["metadata"]
            if meta.get("status") == "archived":
                assert found == [], doc_id
                continue
            assert len(found) == 1, doc_id
            hit = found[0]
            assert (hit["id"], hit["collection"], hit["content"]) == (doc_id, record["collection"], record["content"])
            upstream_created = datetime.fromisoformat(meta.get("created_at") or meta["timestamp"])
            assert datetime.fromisoformat(hit["created_at"]).replace(tzinfo=None) == upstream_created
            assert hit["score"] == round(float(meta.get("score", 0.5)), 4)
            assert hit["uses"] == int(meta.get("uses", 0))
            assert hit["success_count"] == float(meta.get("success_count", 0.0))
            history = json.loads(meta.get("outcome_history") or "[]")
            assert hit["last_outcome"] == (history[-1]["outcome"] if history else "")
            assert hit["outcome_history"].strip("[]").replace(" ", "") == "".join(
                MARKS[o["outcome"]] for o in history[-3:]
            )
            if record["collection"] == "memory_bank":
                assert hit["tags"] == json.loads(meta["tags"])
                assert (hit["importance"], hit["confidence"]) == (meta["importance"], meta["confidence"])
            assert doc_id in (result.content[0].text)


def test_a_roampal_data_folder_is_found_by_its_roampal_ids(roampal_store, mcp_client_for):
    data, records = roampal_store
    owner = make_identity("tenant-a", "owner", role="admin")
    report = memories_import(caller=owner.caller, system="roampal", location=str(data))
    # every live row: the 24 returned by the writer and the book's chunks
    assert report.created_total >= len(records) and report.created["document"] >= 2, report.lines()
    asyncio.run(check(owner, mcp_client_for, records))
    promoted = next(
        doc_id for doc_id in records if doc_id.startswith("history_") and records[doc_id]["metadata"].get("original_id")
    )
    original = records[promoted]["metadata"]["original_id"]

    async def by_original():
        async with mcp_client_for(owner, "roampal") as client:
            result = await client.call_tool("search_memory", {"id": original})
            return result.structured_content["results"]

    assert [h["id"] for h in asyncio.run(by_original())] == [promoted]
    assert memories_import(caller=owner.caller, system="roampal", location=str(data)).created_total == 0


def test_a_desktop_backup_zip(roampal_store, tmp_path, mcp_client_for):
    data, records = roampal_store
    backup = shutil.make_archive(str(tmp_path / "roampal-backup"), "zip", root_dir=data)
    owner = make_identity("tenant-b", "owner", role="admin")
    dry = memories_import(caller=owner.caller, system="roampal", location=backup, dry_run=True)
    report = memories_import(caller=owner.caller, system="roampal", location=backup)
    assert report.created_total == dry.created_total >= len(records)
    asyncio.run(check(owner, mcp_client_for, records))
