"""A plain HTTP body that is JSON but nested deeper than the reader goes (a
metadata filter or a scope thousands of levels deep) is refused saying so, as
the MCP endpoint says it, not "the body must be a JSON object": found over real
HTTP, where a 1,000-deep object under /api/<toolset>/<tool> and the roampal
routes was told it was no JSON object, which it is. Nothing is stored."""

from __future__ import annotations

import json

import pytest

from memory.api import TOO_DEEP_TO_READ
from tests.mcp_server.test_write_inputs_hostile import post, snapshot

pytestmark = pytest.mark.django_db(transaction=True)

DEPTH = 5_000


def deep(field: str, base: dict[str, object]) -> str:
    head = json.dumps(base)[:-1]
    return head + f', "{field}": ' + '{"a": ' * DEPTH + "1" + "}" * DEPTH + "}"


@pytest.mark.parametrize(
    ("path", "body", "code", "message"),
    [
        (
            "/api/memory/memory_store_fact",
            deep("tags", {"subject": "s", "predicate": "p", "content": "c"}),
            "INVALID_ARGUMENT",
            f"[INVALID_ARGUMENT] {TOO_DEEP_TO_READ}",
        ),
        (
            "/api/memento/store_memory",
            deep("source", {"content": "c"}),
            "INVALID_PARAMETER",
            TOO_DEEP_TO_READ,
        ),
        ("/api/pce/pce.memory.search", deep("scope", {"query": "q"}), "VALIDATION_ERROR", TOO_DEEP_TO_READ),
    ],
)
async def test_a_tool_body_too_deep_to_read_says_so(member, path, body, code, message):
    before = await snapshot()
    response = await post(member, path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["message"]) == (code, message)
    assert await snapshot() == before


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/search", deep("metadata_filters", {"query": "tea"})),
        ("/api/hooks/stop", deep("recent", {"conversation_id": "c-1", "assistant_response": "ok"})),
        ("/api/ingest", deep("tags", {"title": "t", "content": "c"})),
    ],
)
async def test_a_roampal_route_body_too_deep_to_read_says_so(member, path, body):
    before = await snapshot()
    response = await post(member, path, body)
    assert response.status_code == 400, response.text
    assert response.json() == {"error": TOO_DEEP_TO_READ, "code": "INVALID_ARGUMENT"}
    assert await snapshot() == before
