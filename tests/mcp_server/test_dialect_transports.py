"""memento and langmem over the real transports: a stdio subprocess (token from
the environment, langmem's options as flags) and the streamable-HTTP endpoints
under uvicorn (bearer tokens, langmem's options as query parameters)."""

from __future__ import annotations

import json
import sys

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from memory.models import Memory
from tests.conftest import block_text, call
from tests.mcp_server.test_transports import ROOT, _env_for_test_database, http_server  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def stdio(identity, *args: str) -> Client:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_server", *args],
        env=_env_for_test_database(MEMPROJ_TOKEN=identity.token),
        cwd=str(ROOT),
    )
    return Client(params, read_timeout_seconds=120)


def http(base: str, path: str, identity) -> tuple[httpx2.AsyncClient, Client]:
    session = httpx2.AsyncClient(headers={"Authorization": f"Bearer {identity.token}"}, timeout=300)
    return session, Client(streamable_http_client(f"{base}{path}", http_client=session))


async def test_memento_over_stdio(member):
    async with stdio(member, "--toolset", "memento") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        old = await call(client, "store_memory", content="User lives in Seattle")
        new = await call(client, "store_memory", content="User moved to Austin", source="explicit")
        await call(client, "supersede_memory", old_memory_id=old["created"]["id"], new_memory_id=new["created"]["id"])
        found = await call(client, "search_memories", query="Where does the user live?")
    assert tools == {
        "store_memory",
        "supersede_memory",
        "search_memories",
        "list_recent_memories",
        "remember",
        "recall",
    }
    assert [m["id"] for m in new["similar"]] == [old["created"]["id"]]
    assert [m["id"] for m in found["memories"]] == [new["created"]["id"]]
    row = await Memory.objects.aget(pk=new["created"]["id"])
    assert row.tenant_id == member.caller.tenant_id and row.source == "explicit"


async def test_langmem_over_stdio_with_option_flags(member):
    flags = ["--toolset", "langmem", "--namespace", "memories,{user_id}", "--configurable", "user_id=u-9"]
    async with stdio(
        member, *flags, "--actions-permitted", "create", "--instructions", "Store travel plans."
    ) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        created = await client.call_tool("manage_memory", {"content": "User flies to Oslo on Monday"})
        refused = await client.call_tool("manage_memory", {"action": "update", "id": block_text(created)[-36:]})
        found = await client.call_tool("search_memory", {"query": "trip to Oslo"})
    manage = tools["manage_memory"]
    assert manage.input_schema["properties"]["action"]["enum"] == ["create"]
    assert manage.description is not None and manage.description.endswith("Store travel plans.")
    key = block_text(created).removeprefix("created memory ")
    assert refused.is_error and block_text(refused) == (
        "ValueError: Invalid action update. Must be one of ('create',)."
    )
    items = json.loads(block_text(found))
    assert [(i["namespace"], i["key"]) for i in items] == [(["memories", "u-9"], key)]
    row = await Memory.objects.aget(subject=key)
    assert row.namespace == ["memories", "u-9"] and row.tenant_id == member.caller.tenant_id


async def test_memento_over_http_with_bearer_tokens(http_server, member, outsider):  # noqa: F811
    session, client = http(http_server, "/mcp/memento/", member)
    async with session, client:
        stored = await call(client, "store_memory", content="User prefers aisle seats", source="explicit")
        found = await call(client, "search_memories", query="seat preference")
        recent = await call(client, "list_recent_memories")
    assert found["memories"][0]["id"] == stored["created"]["id"]
    assert [m["id"] for m in recent["memories"]] == [stored["created"]["id"]]
    session, client = http(http_server, "/mcp/memento/", outsider)
    async with session, client:
        assert (await call(client, "search_memories", query="seat preference"))["memories"] == []
        assert (await call(client, "list_recent_memories"))["memories"] == []


async def test_langmem_over_http_with_query_parameters(http_server, member, outsider):  # noqa: F811
    path = "/mcp/langmem/?namespace=memories,{user_id}&configurable.user_id=u-123&actions_permitted=create,update"
    session, client = http(http_server, path, member)
    async with session, client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        created = await client.call_tool("manage_memory", {"content": "User prefers dark mode"})
        found = await client.call_tool("search_memory", {"query": "dark mode"})
    assert tools["manage_memory"].input_schema["properties"]["action"]["enum"] == ["create", "update"]
    key = block_text(created).removeprefix("created memory ")
    assert [i["key"] for i in json.loads(block_text(found))] == [key]
    assert (await Memory.objects.aget(subject=key)).namespace == ["memories", "u-123"]

    # Another user's connection (a different namespace) and another tenant (the same one) see nothing.
    session, client = http(http_server, "/mcp/langmem/?namespace=memories,{user_id}&configurable.user_id=u-9", member)
    async with session, client:
        assert json.loads(block_text(await client.call_tool("search_memory", {"query": "dark mode"}))) == []
    session, client = http(http_server, path, outsider)
    async with session, client:
        assert json.loads(block_text(await client.call_tool("search_memory", {"query": "dark mode"}))) == []
