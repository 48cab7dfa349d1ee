"""roampal's update_memory corrects a memory_bank fact whichever dialect wrote
it (a fact written through one dialect is found through every dialect that
reads facts): found through the MCP SDK client, where a memento memory (a fact
without a subject or predicate) could not be corrected at all, the answer
naming an argument the client never sent ("subject must not be empty."), nor a
LangGraph store item (a key and no predicate: "predicate must not be empty.").
The new text replaces the old one in place: one active version, found through
both dialects (a store key as given, surrounding spaces too, as LangGraph
compares keys), also when two updates of one memory run at once."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from memory.models import Memory
from tests.conftest import block_text, call
from tests.mcp_server.test_write_inputs_hostile import post

pytestmark = pytest.mark.django_db(transaction=True)

UPDATED = re.compile(r"Updated memory \(ID: (memory_bank_[0-9a-f]+)\)")


async def active_texts() -> set[str]:
    return {text async for text in Memory.objects.filter(validity="active").values_list("content", flat=True)}


async def test_a_memento_memory_is_corrected_through_roampal(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as memento:
        stored = await call(memento, "store_memory", content="The user lives in Seattle")
    memory_id = stored["created"]["id"]
    async with mcp_client_for(member, "roampal") as roampal:
        result = await roampal.call_tool("update_memory", {"id": memory_id, "new_content": "The user lives in Austin"})
        assert not result.is_error, block_text(result)
        assert UPDATED.fullmatch(block_text(result)), block_text(result)
        # The id the client holds keeps naming the memory's current version.
        found = block_text(await roampal.call_tool("search_memory", {"id": memory_id}))
        assert "The user lives in Austin" in found and "Seattle" not in found
    async with mcp_client_for(member, "memento") as memento:
        listed = await call(memento, "list_recent_memories")
    assert [m["content"] for m in listed["memories"]] == ["The user lives in Austin"]
    assert await active_texts() == {"The user lives in Austin"}


async def test_two_updates_of_one_memento_memory_at_once_leave_one_version(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as memento:
        memory_id = (await call(memento, "store_memory", content="The user drives a bicycle"))["created"]["id"]
    texts = [f"The user drives vehicle number {n}" for n in range(4)]
    async with mcp_client_for(member, "roampal") as roampal:
        answers = await asyncio.gather(
            *(roampal.call_tool("update_memory", {"id": memory_id, "new_content": text}) for text in texts)
        )
    assert all(UPDATED.fullmatch(block_text(answer)) for answer in answers), [block_text(a) for a in answers]
    active = await active_texts()
    assert len(active) == 1 and active <= set(texts), active


async def test_a_store_item_whose_key_has_spaces_is_corrected_through_roampal(member, mcp_client_for):
    key = " padded key "
    put = {"ops": [{"op": "put", "namespace": ["notes"], "key": key, "value": {"content": "The office is on floor 3"}}]}
    response = await post(member, "/api/langmem/store/", json.dumps(put))
    assert response.status_code == 200, response.text
    stored = await Memory.objects.aget(subject=key)
    async with mcp_client_for(member, "roampal") as roampal:
        result = await roampal.call_tool(
            "update_memory", {"id": str(stored.pk), "new_content": "The office is on floor 5"}
        )
    assert UPDATED.fullmatch(block_text(result)), block_text(result)
    get = {"ops": [{"op": "get", "namespace": ["notes"], "key": key}]}
    response = await post(member, "/api/langmem/store/", json.dumps(get))
    assert response.status_code == 200, response.text
    assert "The office is on floor 5" in response.text and "floor 3" not in response.text
    assert await active_texts() == {"The office is on floor 5"}
