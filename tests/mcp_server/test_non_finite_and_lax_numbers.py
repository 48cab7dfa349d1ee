"""Numbers JSON has not and numbers a schema does not allow. Python's JSON
readers take NaN and the infinities (the plain HTTP body, the MCP SDK's
request parser), and NaN passes every JSON Schema bound (``NaN < 0`` and
``NaN > 1`` are both false): each is refused naming the argument, as
INVALID_ARGUMENT and not as an internal error, on every surface, and changes
nothing. roampal's hook routes read ``true`` or ``"5"`` as no integer, as the
tools' schemas do (pydantic's lax mode took them as 1 and 5)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from memory.models import Memory, MemoryEvent
from tests.conftest import call
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

# (toolset, tool, arguments as JSON text with {n} where the number goes, the argument named)
NUMBER_ARGUMENTS = [
    ("memory", "memory_search", '{{"query": "austin", "min_confidence": {n}}}', "min_confidence"),
    ("memento", "store_memory", '{{"content": "lives in Austin", "confidence": {n}}}', "confidence"),
    ("pce", "pce.memory.feedback", '{{"claim_id": "clm_0", "signal": "helpful", "score": {n}}}', "score"),
]
NON_FINITE = ["NaN", "Infinity", "-Infinity"]


async def _snapshot() -> tuple[int, int]:
    return await Memory.objects.acount(), await MemoryEvent.objects.acount()


async def _post(identity: Any, path: str, raw: str) -> httpx.Response:
    from memproj.asgi import Router

    headers = {"Authorization": f"Bearer {identity.token}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return await client.post(path, content=raw.encode(), headers=headers)


async def _mcp_http(identity: Any, toolset: str, tool: str, raw_arguments: str) -> dict[str, Any]:
    """One tools/call over the streamable HTTP endpoint, its arguments sent as written."""
    from memproj.asgi import Router

    envelope = {"jsonrpc": "2.0", "id": "1", "method": "tools/call", "params": {"name": tool, "arguments": "ARGUMENTS"}}
    body = json.dumps(envelope).replace('"ARGUMENTS"', raw_arguments)
    headers = {
        "Authorization": f"Bearer {identity.token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    router = Router()
    async with (
        router.servers[toolset].session_manager.run(),
        httpx.AsyncClient(transport=asgi_transport(router), base_url="http://testserver") as client,
    ):
        response = await client.post(f"/mcp/{toolset}", content=body.encode(), headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["result"]


async def _seed(member: Any, mcp_client_for: Any) -> None:
    async with mcp_client_for(member) as client:
        await call(client, "memory_store_fact", subject="user", predicate="city", content="lives in Austin")


@pytest.mark.parametrize("number", NON_FINITE)
@pytest.mark.parametrize(("toolset", "tool", "template", "argument"), NUMBER_ARGUMENTS)
async def test_a_non_finite_number_is_refused_naming_the_argument_over_plain_http(
    member, mcp_client_for, toolset, tool, template, argument, number
):
    await _seed(member, mcp_client_for)
    before = await _snapshot()
    response = await _post(member, f"/api/{toolset}/{tool}", template.format(n=number))
    assert 400 <= response.status_code < 500, response.text
    assert argument in response.text and "finite" in response.text, response.text
    assert "INTERNAL" not in response.text
    assert await _snapshot() == before


@pytest.mark.parametrize("number", NON_FINITE)
@pytest.mark.parametrize(("toolset", "tool", "template", "argument"), NUMBER_ARGUMENTS)
async def test_a_non_finite_number_is_refused_naming_the_argument_over_mcp_http(
    member, mcp_client_for, toolset, tool, template, argument, number
):
    await _seed(member, mcp_client_for)
    before = await _snapshot()
    result = await _mcp_http(member, toolset, tool, template.format(n=number))
    text = " ".join(block.get("text", "") for block in result["content"])
    assert result.get("isError"), text
    assert result["_meta"]["io.memproj/error-code"] == "INVALID_ARGUMENT", result
    assert argument in text and "finite" in text, text
    assert await _snapshot() == before


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/search", {"query": "austin", "limit": True}, "limit"),
        ("/api/search", {"query": "austin", "limit": "5"}, "limit"),
        ("/api/search", {"days_back": True}, "days_back"),
        ("/api/search", {"days_back": "7"}, "days_back"),
        ("/api/ingest", {"title": "t", "content": "a book about Austin", "chunk_size": True}, "chunk_size"),
        ("/api/ingest", {"title": "t", "content": "a book about Austin", "chunk_overlap": "0"}, "chunk_overlap"),
    ],
)
async def test_roampal_routes_take_no_boolean_or_text_as_an_integer(member, mcp_client_for, path, body, field):
    await _seed(member, mcp_client_for)
    before = await _snapshot()
    response = await _post(member, path, json.dumps(body))
    assert response.status_code == 422, response.text
    error = response.json()
    assert error["code"] == "INVALID_ARGUMENT" and error["error"].startswith(f"{field}:"), error
    assert await _snapshot() == before


async def test_roampal_search_route_still_takes_an_integral_float_as_the_tools_do(member, mcp_client_for):
    await _seed(member, mcp_client_for)
    response = await _post(member, "/api/search", json.dumps({"query": "austin", "limit": 5.0, "days_back": 1.0}))
    assert response.status_code == 200, response.text
    assert "lives in Austin" in response.text
