"""Conformance with the Memento MCP tool specification's Memory object, taken
literally: ``source: 'explicit' | 'extracted'``. memento reads every fact of the
tenant, and a fact another dialect, the worker or an import wrote carries its
own source ("pce", "consolidation", "langgraph", ...) or none: it reads as one
of the two sources the specification has (it was no explicit "remember")."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from memory import api
from tests.conftest import call

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("stored", ["consolidation", "pce", "langgraph", ""])
async def test_a_source_the_spec_has_not_reads_as_extracted(member, mcp_client_for, stored):
    await sync_to_async(api.fact_store)(
        caller=member.caller, subject=None, predicate=None, content="User drinks green tea daily", source=stored
    )
    async with mcp_client_for(member, "memento") as client:
        await call(
            client, "store_memory", content="User asked to remember the spare key is under the mat", source="explicit"
        )
        listed = await call(client, "list_recent_memories")
        found = await call(client, "search_memories", query="green tea")
        similar = await call(client, "store_memory", content="User drinks green tea every day")
        tools = {t.name: t for t in (await client.list_tools()).tools}
    sources = {m["content"]: m["source"] for m in listed["memories"]}
    assert sources == {
        "User drinks green tea daily": "extracted",
        "User asked to remember the spare key is under the mat": "explicit",
    }
    assert found["memories"][0]["source"] == "extracted"
    assert [m["source"] for m in similar["similar"]] == ["extracted"]
    for name in ("store_memory", "search_memories", "list_recent_memories"):
        memory = tools[name].output_schema["$defs"]["Memory"]
        assert memory["properties"]["source"]["enum"] == ["explicit", "extracted"]
