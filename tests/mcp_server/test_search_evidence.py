"""A search returns only memories that match the query (a keyword match or a
vector similarity at the model's floor), through the dialects' MCP tools with
the real embedding model."""

from __future__ import annotations

from tests.conftest import call
from tests.memory.test_retrieval import EDITOR_MEMORIES


async def test_memory_search_returns_only_the_matching_memories(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        ids = [
            (await call(client, "memory_store_episode", content=text, butler="general"))["id"]
            for text in EDITOR_MEMORIES
        ]
        found = {
            mode: await call(client, "memory_search", query="editor", mode=mode)
            for mode in ("hybrid", "semantic", "keyword")
        }
        nothing = await call(client, "memory_search", query="submarine")
    for mode, answer in found.items():
        assert sorted(r["id"] for r in answer["results"]) == sorted(ids[:3]), mode
        assert all(r["score"] > 0 for r in answer["results"])
    assert nothing["results"] == [] and nothing["count"] == 0


async def test_memento_search_returns_only_the_matching_memories(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as client:
        ids = [(await call(client, "store_memory", content=text))["created"]["id"] for text in EDITOR_MEMORIES]
        found = await call(client, "search_memories", query="editor", limit=20)
    assert sorted(m["id"] for m in found["memories"]) == sorted(ids[:3])
