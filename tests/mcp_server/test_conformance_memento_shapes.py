"""Conformance of memento's answers with the Memento MCP tool specification's
Memory object, taken literally:

    supersedes?: string,         // ID of memory this replaces
    superseded_by?: string,      // ID of memory that replaces this
    relevance_score?: number     // Only in search results

An optional member with nothing to say is left out (the specification's
examples of store_memory and list_recent_memories carry no relevance_score and
no supersedes), never sent as null; the text content and the structured content
are the same answer."""

from __future__ import annotations

import json

import pytest

from tests.conftest import call

pytestmark = pytest.mark.django_db(transaction=True)

OPTIONAL = ("supersedes", "superseded_by", "relevance_score")
MEMORY_MEMBERS = {"id", "content", "confidence", "source", "created_at", "updated_at", "accessed_at"}


async def answer(client, tool: str, **arguments) -> dict:
    """The structured content, checked against the text content (one answer)."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def test_optional_members_are_left_out_rather_than_null(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        seattle = await answer(client, "store_memory", content="User lives in Seattle", confidence=0.9)
        austin = await answer(client, "store_memory", content="User moved to Austin", source="explicit")
        recent = await answer(client, "list_recent_memories", limit=5)
        await call(
            client,
            "supersede_memory",
            old_memory_id=seattle["created"]["id"],
            new_memory_id=austin["created"]["id"],
        )
        found = await answer(client, "search_memories", query="Where does the user live?", limit=3)
        after = await answer(client, "list_recent_memories")
    # store_memory: the spec's example answer (no relevance_score, no supersedes, no note).
    assert set(seattle) == {"created", "similar", "action_required"}
    assert set(seattle["created"]) == MEMORY_MEMBERS
    assert [m["id"] for m in austin["similar"]] == [seattle["created"]["id"]]
    assert set(austin["similar"][0]) == MEMORY_MEMBERS  # a similar memory is no search result
    assert all(set(m) == MEMORY_MEMBERS for m in recent["memories"])
    # search_memories: relevance_score on every memory; supersedes once it replaced one.
    assert [m["id"] for m in found["memories"]][:1] == [austin["created"]["id"]]
    assert all(isinstance(m["relevance_score"], float) for m in found["memories"])
    assert found["memories"][0]["supersedes"] == seattle["created"]["id"]
    assert set(found["memories"][0]) == MEMORY_MEMBERS | {"relevance_score", "supersedes"}
    assert [set(m) for m in after["memories"]] == [MEMORY_MEMBERS | {"supersedes"}]
    for listing in (recent["memories"], found["memories"], after["memories"]):
        assert not any(m.get(name, "absent") is None for m in listing for name in OPTIONAL)


async def test_output_schema_advertises_the_optional_members_types(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("store_memory", "search_memories", "list_recent_memories"):
        memory = tools[name].output_schema["$defs"]["Memory"]
        assert set(memory["required"]) == MEMORY_MEMBERS
        for optional, kind in zip(OPTIONAL, ("string", "string", "number"), strict=True):
            assert memory["properties"][optional]["type"] == kind, (name, optional)
            assert "anyOf" not in memory["properties"][optional] and "default" not in memory["properties"][optional]
    store = tools["store_memory"].output_schema
    assert store["required"] == ["created", "similar", "action_required"]
    assert store["properties"]["note"]["type"] == "string"
