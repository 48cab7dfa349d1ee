"""Bad input gets a clear error with the dialect's code and changes nothing."""

from __future__ import annotations

import pytest

from memory.models import Memory, MemoryEvent
from tests.conftest import call, call_error

pytestmark = pytest.mark.django_db(transaction=True)

BAD_CALLS = [
    ("memory_store_episode", {"content": "", "butler": "general"}, "content"),
    ("memory_store_episode", {"content": "x" * 16_001, "butler": "general"}, "limit"),
    ("memory_store_episode", {"content": "ok", "butler": "has spaces"}, "butler"),
    ("memory_store_episode", {"content": "ok", "butler": "general", "importance": 11}, "importance"),
    ("memory_store_episode", {"content": "nul \x00 byte", "butler": "general"}, "NUL"),
    ("memory_store_fact", {"subject": "", "predicate": "p", "content": "c"}, "subject"),
    ("memory_store_fact", {"subject": "s", "predicate": "p" * 201, "content": "c"}, "predicate"),
    ("memory_store_fact", {"subject": "s", "predicate": "p", "content": "c", "permanence": "forever"}, "permanence"),
    ("memory_store_fact", {"subject": "s", "predicate": "p", "content": "c", "tags": ["t"] * 33}, "tags"),
    ("memory_store_fact", {"subject": "s", "predicate": "p", "content": "c", "scope": "../etc"}, "scope"),
    ("memory_store_rule", {"content": "   "}, "content"),
    ("memory_search", {"query": "q", "limit": 0}, "limit"),
    ("memory_search", {"query": "q", "limit": 101}, "limit"),
    ("memory_search", {"query": "q" * 2001}, "query"),
    ("memory_search", {"query": "q", "types": ["memo"]}, "types"),
    ("memory_search", {"query": "q", "min_confidence": 1.5}, "min_confidence"),
    ("memory_recall", {"topic": ""}, "topic"),
    ("memory_get", {"type": "fact", "id": "nope"}, "UUID"),
    ("memory_forget", {"type": "thing", "id": "3f0c6a3e-7d8e-4a6b-9a54-9d0f4a1b2c3d"}, "type"),
    ("memory_context", {"trigger_prompt": "p", "butler": "b", "token_budget": 0}, "token_budget"),
    ("memory_context", {"trigger_prompt": "p", "butler": "b", "token_budget": 10**9}, "token_budget"),
]


@pytest.mark.parametrize(("tool", "arguments", "mentions"), BAD_CALLS)
async def test_bad_input_is_refused_and_changes_nothing(member, mcp_client_for, tool, arguments, mentions):
    async with mcp_client_for(member) as client:
        await call(client, "memory_store_fact", subject="user", predicate="seed", content="existing fact")
        memories = await Memory.objects.acount()
        events = await MemoryEvent.objects.acount()
        message = await call_error(client, tool, **arguments)
    assert mentions.lower() in message.lower()
    assert await Memory.objects.acount() == memories
    assert await MemoryEvent.objects.acount() == events


async def test_read_only_token_cannot_write(mcp_client_for, transactional_db):
    from asgiref.sync import sync_to_async

    from tests.conftest import make_identity

    reader = await sync_to_async(make_identity)("tenant-a", "reader", "member", ["read"])
    async with mcp_client_for(reader) as client:
        error = await call_error(client, "memory_store_rule", content="should not be stored")
        assert (await call(client, "memory_search", query="anything"))["results"] == []
    assert "PERMISSION_DENIED" in error and not await Memory.objects.aexists()


async def test_token_restricted_to_another_toolset_is_refused(mcp_client_for, transactional_db):
    from asgiref.sync import sync_to_async

    from tests.conftest import make_identity

    other = await sync_to_async(make_identity)("tenant-a", "pce-only", "member", ["read", "write", "toolset:pce"])
    async with mcp_client_for(other) as client:
        error = await call_error(client, "memory_search", query="anything")
    assert "toolset" in error
