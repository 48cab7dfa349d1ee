"""Every scenario of the Memento MCP tools spec, and the Memento server's remember /
recall, through the real MCP SDK (in-process client)."""

from __future__ import annotations

import json
import re

import pytest

from mcp_server.dialect import ERROR_CODE_META_KEY
from memory.embeddings import get_embedder, set_embedder
from memory.errors import EmbeddingUnavailable
from memory.models import Memory, MemoryEvent
from tests.conftest import call, call_error

pytestmark = pytest.mark.django_db(transaction=True)

SEED_DESCRIPTIONS = {
    "store_memory": "Store a new memory. Always succeeds. Returns similar memories that might be outdated. "
    "ALWAYS check the response for supersede suggestions.",
    "supersede_memory": "Mark an old memory as outdated when replaced by newer information. "
    "Call this when store_memory suggests it.",
    "search_memories": "Search for relevant memories based on a query. Automatically filters out superseded memories.",
    "list_recent_memories": "Get the most recently created memories. Useful for reviewing what was just stored.",
}


def error_of(text: str) -> dict:
    """Memento errors are exactly {"error": {"code", "message"}} as JSON text."""
    body = json.loads(text)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    return body["error"]


async def test_tools_descriptions_and_instructions_are_the_seeds(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        instructions = client.instructions
    assert set(tools) == {*SEED_DESCRIPTIONS, "remember", "recall"}
    for name, description in SEED_DESCRIPTIONS.items():
        assert tools[name].description == description
    store = tools["store_memory"].input_schema
    assert store["required"] == ["content"]
    assert store["properties"]["confidence"]["minimum"] == 0 and store["properties"]["confidence"]["maximum"] == 1
    assert store["properties"]["confidence"]["default"] == 1.0
    assert store["properties"]["source"]["enum"] == ["explicit", "extracted"]
    assert store["properties"]["source"]["default"] == "extracted"
    search = tools["search_memories"].input_schema["properties"]["limit"]
    assert (search["minimum"], search["maximum"], search["default"]) == (1, 20, 5)
    recent = tools["list_recent_memories"].input_schema["properties"]["limit"]
    assert (recent["minimum"], recent["maximum"], recent["default"]) == (1, 50, 10)
    for guideline in ("When to store memories", "When to search memories", "Handling conflicts"):
        assert guideline in instructions


async def test_store_memory_defaults_and_memory_object(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        out = await call(client, "store_memory", content="User prefers window seats on flights")
    created = out["created"]
    assert (created["content"], created["confidence"], created["source"]) == (
        "User prefers window seats on flights",
        1.0,
        "extracted",
    )
    assert {"id", "created_at", "updated_at", "accessed_at"} <= set(created)
    assert "supersedes" not in created and "superseded_by" not in created  # optional members, left out when empty
    assert out["similar"] == [] and out["action_required"] is None
    row = await Memory.objects.aget(pk=created["id"])
    # A memento memory is a core fact without a subject/predicate key.
    assert (row.kind, row.subject, row.predicate, row.namespace, row.source) == ("fact", "", "", [], "extracted")
    assert row.tenant_id == member.caller.tenant_id and row.embedding is not None


async def test_seed_example_similar_memory_and_supersede_suggestion(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        seattle = await call(client, "store_memory", content="User lives in Seattle", confidence=0.9)
        await call(client, "store_memory", content="User prefers window seats on flights", source="explicit")
        austin = await call(client, "store_memory", content="User moved to Austin", confidence=1.0, source="explicit")
    old_id, new_id = seattle["created"]["id"], austin["created"]["id"]
    assert [m["id"] for m in austin["similar"]] == [old_id]  # the unrelated memory is not listed
    assert austin["similar"][0]["content"] == "User lives in Seattle"
    assert austin["similar"][0]["confidence"] == 0.9
    assert austin["action_required"] == (
        f'Call supersede_memory("{old_id}", "{new_id}") to mark the old memory as outdated.'
    )
    assert austin["created"]["source"] == "explicit"


async def test_two_similar_memories_most_similar_first_never_the_new_one(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        a = await call(client, "store_memory", content="User lives in Seattle")
        b = await call(client, "store_memory", content="User lives in Austin")
        c = await call(client, "store_memory", content="User moved to Austin")
    ids = [m["id"] for m in c["similar"]]
    assert ids == [b["created"]["id"], a["created"]["id"]]
    assert c["created"]["id"] not in ids
    assert c["action_required"].startswith(f'Call supersede_memory("{b["created"]["id"]}"')


async def test_supersede_memory_marks_old_and_filters_it_out_at_once(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        old = (await call(client, "store_memory", content="User lives in Seattle"))["created"]["id"]
        new = (await call(client, "store_memory", content="User moved to Austin", source="explicit"))["created"]["id"]
        before = await call(client, "search_memories", query="Where does the user live?")
        assert old in [m["id"] for m in before["memories"]]
        out = await call(client, "supersede_memory", old_memory_id=old, new_memory_id=new)
        assert out == {"success": True, "message": f"Memory {old} marked as superseded by {new}"}
        after = await call(client, "search_memories", query="Where does the user live?")
        recent = await call(client, "list_recent_memories")
        again = await call(client, "supersede_memory", old_memory_id=old, new_memory_id=new)
    assert [m["id"] for m in after["memories"]] == [new]
    assert after["memories"][0]["supersedes"] == old
    assert [m["id"] for m in recent["memories"]] == [new]
    assert again["success"] is True  # repeating it changes nothing
    row = await Memory.objects.aget(pk=old)
    assert row.validity == "superseded" and str(row.superseded_by_id) == new
    assert await MemoryEvent.objects.filter(memory_id=old, event_type="superseded").acount() == 1


async def test_supersede_memory_refusals(member, outsider, mcp_client_for):
    async with mcp_client_for(outsider, "memento") as other:
        foreign = (await call(other, "store_memory", content="Outsider lives in Oslo"))["created"]["id"]
    async with mcp_client_for(member, "memento") as client:
        a = (await call(client, "store_memory", content="User lives in Seattle"))["created"]["id"]
        b = (await call(client, "store_memory", content="User moved to Austin"))["created"]["id"]
        missing = "00000000-0000-4000-8000-000000000000"
        unknown = error_of(await call_error(client, "supersede_memory", old_memory_id=missing, new_memory_id=b))
        assert unknown == {"code": "MEMORY_NOT_FOUND", "message": f"Memory with ID {missing} not found"}
        not_uuid = error_of(await call_error(client, "supersede_memory", old_memory_id="mem_xyz789", new_memory_id=b))
        assert not_uuid == {"code": "MEMORY_NOT_FOUND", "message": "Memory with ID mem_xyz789 not found"}
        itself = error_of(await call_error(client, "supersede_memory", old_memory_id=a, new_memory_id=a))
        assert itself["code"] == "INVALID_PARAMETER"
        cross = error_of(await call_error(client, "supersede_memory", old_memory_id=foreign, new_memory_id=b))
        assert cross == {"code": "MEMORY_NOT_FOUND", "message": f"Memory with ID {foreign} not found"}
        await call(client, "supersede_memory", old_memory_id=a, new_memory_id=b)
        cycle = error_of(await call_error(client, "supersede_memory", old_memory_id=b, new_memory_id=a))
        assert cycle["code"] == "INVALID_PARAMETER" and "superseded" in cycle["message"]
    assert (await Memory.objects.aget(pk=b)).validity == "active"
    assert (await Memory.objects.aget(pk=foreign)).validity == "active"


async def test_search_memories_relevance_limit_and_accessed_at(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        austin = (await call(client, "store_memory", content="User moved to Austin", source="explicit"))["created"]
        await call(client, "store_memory", content="User works remotely from home in Austin", confidence=0.9)
        await call(client, "store_memory", content="User prefers window seats on flights")
        found = await call(client, "search_memories", query="Where does the user live?", limit=2)
        too_many = error_of(await call_error(client, "search_memories", query="x", limit=21))
        empty = error_of(await call_error(client, "search_memories", query="   "))
    assert len(found["memories"]) == 2
    assert austin["id"] in [m["id"] for m in found["memories"]]
    scores = [m["relevance_score"] for m in found["memories"]]
    assert all(0 < s <= 1 for s in scores) and scores == sorted(scores, reverse=True)
    hit = next(m for m in found["memories"] if m["id"] == austin["id"])
    assert hit["accessed_at"] > austin["accessed_at"]  # returned by a search: accessed now
    row = await Memory.objects.aget(pk=austin["id"])
    assert row.accessed_at is not None and row.accessed_at.isoformat().startswith(hit["accessed_at"][:19])
    assert too_many["code"] == "INVALID_PARAMETER" and "20" in too_many["message"]
    assert empty["code"] == "INVALID_PARAMETER"


async def test_list_recent_memories_newest_first(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        ids = [
            (await call(client, "store_memory", content=text))["created"]["id"]
            for text in ("User is planning a trip to Japan in March", "User prefers window seats on flights")
        ]
        listed = await call(client, "list_recent_memories", limit=5)
        one = await call(client, "list_recent_memories", limit=1)
        refused = error_of(await call_error(client, "list_recent_memories", limit=51))
    assert [m["id"] for m in listed["memories"]] == ids[::-1]
    assert [m["id"] for m in one["memories"]] == [ids[1]]
    assert all("relevance_score" not in m for m in listed["memories"])  # only in search results
    rows = [r async for r in Memory.objects.filter(pk__in=ids)]
    assert all(r.accessed_at is not None for r in rows)
    assert refused["code"] == "INVALID_PARAMETER"


async def test_bad_input_is_refused_in_seed_vocabulary_and_changes_nothing(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        confidence = await call_error(client, "store_memory", content="x", confidence=1.5)
        source = error_of(await call_error(client, "store_memory", content="x", source="guessed"))
        unknown = error_of(await call_error(client, "store_memory", content="x", importance=3))
        blank = error_of(await call_error(client, "store_memory", content="  "))
        tenant = error_of(await call_error(client, "store_memory", content="x", tenant="tenant-b"))
    assert json.loads(confidence) == {"error": {"code": "INVALID_PARAMETER", "message": "confidence must be <= 1."}}
    assert source["code"] == unknown["code"] == blank["code"] == "INVALID_PARAMETER"
    assert "importance" in unknown["message"]
    assert tenant["code"] == "PERMISSION_DENIED"
    assert await Memory.objects.acount() == 0


class BrokenEmbedder:
    model_name = "broken"
    dimensions = 384

    def embed(self, texts):
        raise EmbeddingUnavailable("embedding service is down")


async def test_store_memory_succeeds_during_an_embedder_outage(member, mcp_client_for, monkeypatch):
    from memory.services import followups

    # The broker is a queue in production; here (eager) the retrying embed task would run inline.
    monkeypatch.setitem(followups._TRANSPORT, "embed", lambda ids, bulk: None)
    real = get_embedder()
    set_embedder(BrokenEmbedder())
    try:
        async with mcp_client_for(member, "memento") as client:
            out = await call(client, "store_memory", content="User has a cat called Miso")
            found = await call(client, "search_memories", query="cat Miso")
    finally:
        set_embedder(real)
    assert out["similar"] == [] and out["action_required"] is None
    assert "stored" in out["note"]
    assert [m["id"] for m in found["memories"]] == [out["created"]["id"]]  # visible at once (keyword channel)


async def test_remember_and_recall_upstream_answers(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        nothing = await client.call_tool("recall", {"query": "dog name", "limit": 3})
        stored = await client.call_tool("remember", {"content": "User's dog is named Max", "confidence": 0.8})
        text = stored.content[0].text
        assert text.startswith("Memory stored with id: ")
        memory_id = text.removeprefix("Memory stored with id: ")
        found = await client.call_tool("recall", {"query": "dog name"})
        via_seed = await call(client, "search_memories", query="dog name")
    row = await Memory.objects.aget(pk=memory_id)
    assert (row.kind, row.confidence, row.content) == ("fact", 0.8, "User's dog is named Max")
    lines = found.content[0].text.split("\n")
    assert lines[0] == 'Found 1 result(s) for "dog name":'
    assert re.fullmatch(r"1\. \(score: [01]\.\d{3}\) User's dog is named Max", lines[1]), lines[1]
    assert nothing.content[0].text == 'No memories found for "dog name".'
    assert via_seed["memories"][0]["id"] == memory_id


async def test_remember_and_recall_upstream_errors(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        assert await call_error(client, "remember", content="   ", confidence=0.5) == "Memory text cannot be empty."
        assert (
            await call_error(client, "remember", content="x" * 4001, confidence=0.5)
            == "Memory text exceeds maximum length of 4000 characters (got 4001)."
        )
        assert (
            await call_error(client, "remember", content="ok", confidence=1.5)
            == "Invalid confidence value 1.5: must be between 0.0 and 1.0."
        )
        assert await call_error(client, "recall", query="  ") == "Query cannot be empty."
        assert await call_error(client, "recall", query="dog", limit=0) == "Limit must be at least 1."
        # The arguments' refusals speak as these tools do: plain sentences, the core code in _meta.
        missing = await client.call_tool("remember", {"content": "no confidence"})
        # Found by the reliability fuzzer: an integer JSON Schema accepts, Python cannot use.
        huge = await call_error(client, "recall", query="dog", limit=-1e308)
        over = await call_error(client, "recall", query="dog", limit=101)
    assert missing.is_error and missing.content[0].text == "Missing required argument 'confidence'."
    assert (missing.meta or {}).get(ERROR_CODE_META_KEY) == "INVALID_ARGUMENT"
    assert huge == "Limit must be of type integer." and over == "Limit must be <= 100."
    assert await Memory.objects.acount() == 0


async def test_a_memory_store_fact_is_found_by_search_memories(member, mcp_client_for):
    async with mcp_client_for(member, "memory") as client:
        fact = await call(client, "memory_store_fact", subject="user", predicate="city", content="User lives in Lisbon")
    async with mcp_client_for(member, "memento") as client:
        found = await call(client, "search_memories", query="Where does the user live?")
        stored = await call(client, "store_memory", content="User moved to Porto")
    assert found["memories"][0]["id"] == fact["id"]
    assert found["memories"][0]["source"] == "extracted"
    assert [m["id"] for m in stored["similar"]] == [fact["id"]]
    async with mcp_client_for(member, "memory") as client:
        back = await call(client, "memory_search", query="Porto", types=["fact"])
    assert back["results"][0]["id"] == stored["created"]["id"]
    assert back["results"][0]["subject"] is None


async def test_tenant_isolation_for_every_memento_tool(member, outsider, mcp_client_for):
    async with mcp_client_for(member, "memento") as a:
        secret = (await call(a, "store_memory", content="Tenant A's user lives in Seattle"))["created"]["id"]
        newer = (await call(a, "store_memory", content="Tenant A's user moved to Austin"))["created"]["id"]
    before = [r async for r in Memory.objects.order_by("id").values_list("id", "validity", "accessed_at")]
    async with mcp_client_for(outsider, "memento") as b:
        assert (await call(b, "search_memories", query="user lives in Seattle"))["memories"] == []
        assert (await call(b, "list_recent_memories"))["memories"] == []
        stored = await call(b, "store_memory", content="Tenant B's user moved to Seattle")
        assert stored["similar"] == [] and stored["action_required"] is None
        err = error_of(await call_error(b, "supersede_memory", old_memory_id=secret, new_memory_id=newer))
        assert err["code"] == "MEMORY_NOT_FOUND"
        err = error_of(
            await call_error(b, "supersede_memory", old_memory_id=secret, new_memory_id=stored["created"]["id"])
        )
        assert err["code"] == "MEMORY_NOT_FOUND"
        recalled = await b.call_tool("recall", {"query": "Seattle"})
        assert "Tenant A" not in recalled.content[0].text
        await b.call_tool("remember", {"content": "B remembers", "confidence": 1.0})
    after = [
        r
        async for r in Memory.objects.filter(tenant_id=member.caller.tenant_id)
        .order_by("id")
        .values_list("id", "validity", "accessed_at")
    ]
    assert after == before  # nothing of A's was read (accessed_at) or changed
