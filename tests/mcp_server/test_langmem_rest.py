"""langmem's tools over plain HTTP (``POST /api/langmem/<tool>``) take the
connection options as the MCP endpoint does, from the query string
(``?configurable.user_id=...``): a memory stored under a user_id is found
under it, and a missing user_id is the same coded ConfigurationError on
both surfaces."""

from __future__ import annotations

import json

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memory.models import Memory
from tests.conftest import block_text
from tests.mcp_server import test_transports

pytestmark = pytest.mark.django_db(transaction=True)
http_server = test_transports.http_server  # the live uvicorn fixture

MISSING_USER_ID = "ConfigurationError: Missing key in 'configurable' field: user_id. Available keys: []"


async def _post(base: str, token: str, path: str, body: dict) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=300) as http:
        return await http.post(path, json=body, headers={"Authorization": f"Bearer {token}"})


async def test_a_memory_stored_under_a_user_id_over_plain_http_is_found_under_it(http_server, member):
    user = "?configurable.user_id=u-rest&response_format=content_and_artifact"
    created = await _post(http_server, member.token, f"/api/langmem/manage_memory{user}", {"content": "Likes tea"})
    assert created.status_code == 200, created.text
    key = created.json()["result"].removeprefix("created memory ")
    found = await _post(http_server, member.token, f"/api/langmem/search_memory{user}", {"query": "tea"})
    assert found.status_code == 200, found.text
    assert [(i["key"], i["namespace"], i["value"]) for i in found.json()["result"]] == [
        (key, ["user", "u-rest"], {"content": "Likes tea"})
    ]
    other = "?configurable.user_id=u-other&response_format=content_and_artifact"
    elsewhere = await _post(http_server, member.token, f"/api/langmem/search_memory{other}", {"query": "tea"})
    assert (elsewhere.status_code, elsewhere.json()) == (200, {"result": []})
    assert (await Memory.objects.aget(subject=key)).namespace == ["user", "u-rest"]


async def test_a_missing_user_id_is_the_same_coded_error_on_both_surfaces(http_server, member):
    rest = [
        await _post(http_server, member.token, "/api/langmem/manage_memory", {"content": "Likes tea"}),
        await _post(http_server, member.token, "/api/langmem/search_memory", {"query": "tea"}),
    ]
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {member.token}"}, timeout=300)
    async with http, Client(streamable_http_client(f"{http_server}/mcp/langmem/", http_client=http)) as client:
        mcp = [
            await client.call_tool("manage_memory", {"content": "Likes tea"}),
            await client.call_tool("search_memory", {"query": "tea"}),
        ]
    for answer in rest:
        assert answer.status_code == 400
        assert answer.json() == {"error": {"code": "CONFIGURATION_ERROR", "message": MISSING_USER_ID}}
    for result in mcp:
        assert result.is_error and len(result.content) == 1 and block_text(result) == MISSING_USER_ID
    assert not await Memory.objects.aexists()


async def test_a_search_answering_text_alone_is_answered_as_that_text(http_server, member):
    """response_format=content (the default): search_memory answers the serialized
    list alone, as LangMem's tool does; plain HTTP answers it as any tool's text."""
    user = "?configurable.user_id=u-rest"
    created = await _post(http_server, member.token, f"/api/langmem/manage_memory{user}", {"content": "Likes tea"})
    key = created.json()["result"].removeprefix("created memory ")
    found = await _post(http_server, member.token, f"/api/langmem/search_memory{user}", {"query": "tea"})
    assert found.status_code == 200, found.text
    assert set(found.json()) == {"result"}
    assert [(i["key"], i["value"]) for i in json.loads(found.json()["result"])] == [(key, {"content": "Likes tea"})]
