"""A body that is JSON but nested deeper than json.loads reads is refused by
the reader itself (``json_document`` raises the coded InvalidArgument saying so),
not by each caller catching RecursionError its own way. Found reading the
callers: the LangGraph store route caught it with every other unreadable body
and answered 'the body must be JSON: {"ops": [...]}' (it is JSON), and the MCP
endpoint said it in words of its own. Every surface now says the same thing,
coded, in its dialect's shape; nothing is stored."""

from __future__ import annotations

import json

import pytest

from memory.api import TOO_DEEP_TO_READ, InvalidArgument, json_document
from tests.mcp_server.test_write_inputs_hostile import post, snapshot

pytestmark = pytest.mark.django_db(transaction=True)

DEPTH = 5_000
NESTED = '{"a": ' * DEPTH + "1" + "}" * DEPTH


def test_the_reader_refuses_a_document_too_deep_to_read_itself():
    with pytest.raises(InvalidArgument) as refused:
        json_document(NESTED.encode())
    assert str(refused.value) == TOO_DEEP_TO_READ
    assert refused.value.code == "INVALID_ARGUMENT"


async def test_the_langgraph_store_route_says_the_body_is_too_deep_not_that_it_is_no_json(member):
    body = '{"ops": [{"op": "put", "namespace": ["n"], "key": "k", "value": ' + NESTED + "}]}"
    before = await snapshot()
    response = await post(member, "/api/langmem/store/", body)
    assert response.status_code == 400, response.text
    assert response.json() == {"error": {"code": "INVALID_ARGUMENT", "message": TOO_DEEP_TO_READ}}
    assert await snapshot() == before


async def test_the_mcp_endpoint_says_the_same_in_json_rpc(member):
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "memory_store_fact", "arguments": {"subject": "s", "predicate": "p", "content": "c"}},
    }
    body = json.dumps(message)[:-1] + ', "deep": ' + NESTED + "}"
    before = await snapshot()
    response = await post(member, "/mcp/memory/", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert TOO_DEEP_TO_READ in error["message"], error
    assert await snapshot() == before
