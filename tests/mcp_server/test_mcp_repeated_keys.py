"""A JSON-RPC message that names a key twice in one object, at any depth, over
the real MCP transports (streamable HTTP under uvicorn, the stdio subprocess):
refused before the SDK parses it (which keeps the last of a repeated key, while
a proxy or a log reading the same bytes may take the first), with the request's
id and the dialect's INVALID_ARGUMENT; nothing runs, nothing is stored. The
/api routes' refusal of the same bodies: test_inputs_hostile_more.py."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from memory.models import Memory
from tests.mcp_server.test_stdio_transport import stdio_peer  # noqa: F401 (fixture)
from tests.mcp_server.test_transports import http_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

TWICE = "the body has the key {key!r} twice in one object; send each key once."
HEAD = '{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "memory_store_episode", '
# (the message, its id as answered, the key named twice)
REPEATED = [
    (HEAD % 7 + '"arguments": {"content": "a", "butler": "ops", "content": "b"}}}', 7, "content"),
    (
        HEAD % 8 + '"arguments": {"content": "c", "butler": "ops"}, "arguments": {"content": "d", "butler": "ops"}}}',
        8,
        "arguments",
    ),
    (HEAD % 9 + '"arguments": {"content": "e", "butler": {"x": 1, "x": 2}}}}', 9, "x"),
    # The id itself twice: which one the client meant cannot be told, so none is answered.
    (HEAD % 10 + '"arguments": {"content": "f", "butler": "ops"}}, "id": 11}', None, "id"),
]
# Over HTTP a body is checked before anything else parses it: one that is no
# JSON past its repeated key is refused for the key, without an id.
NO_JSON_PAST_THE_KEY = HEAD % 13 + '"arguments": {"content": "g", "content": "h"}, '


def normal_call(request_id: int) -> str:
    arguments = {"content": "Deployed v3 to staging", "butler": "ops"}
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "memory_store_episode", "arguments": arguments},
        }
    )


def assert_refused(answer: dict[str, Any], request_id: int | None, key: str) -> None:
    assert answer["id"] == request_id, answer
    error = answer["error"]
    assert error["code"] == -32600, answer
    assert error["data"]["code"] == "INVALID_ARGUMENT", answer
    assert TWICE.format(key=key) in error["message"], answer


def mcp_http(base: str, member: Any) -> httpx.Client:
    """Raw streamable HTTP to an MCP endpoint with the member's token."""
    headers = {
        "Authorization": f"Bearer {member.token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    return httpx.Client(base_url=base, headers=headers, timeout=60)


def stored(member: Any) -> int:
    return Memory.objects.filter(tenant_id=member.caller.tenant_id).count()


def test_streamable_http_refuses_a_repeated_key_with_the_requests_id(http_server, member):  # noqa: F811
    with mcp_http(http_server, member) as client:
        for body, request_id, key in REPEATED:
            response = client.post("/mcp/memory", content=body.encode())
            assert response.status_code == 400, response.text
            assert int(response.headers["content-length"]) == len(response.content)
            assert_refused(response.json(), request_id, key)
        response = client.post("/mcp/memory", content=NO_JSON_PAST_THE_KEY.encode())
        assert response.status_code == 400, response.text
        assert_refused(response.json(), None, "content")
        assert stored(member) == 0
        response = client.post("/mcp/memory", content=normal_call(12).encode())
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["id"] == 12 and not answer["result"].get("isError"), answer
    assert stored(member) == 1


def test_stdio_refuses_a_repeated_key_with_the_requests_id(stdio_peer, member):  # noqa: F811
    stdio_peer.handshake()
    for line, request_id, key in REPEATED:
        stdio_peer.send(line.encode())
        assert_refused(stdio_peer.answer(), request_id, key)
    assert stored(member) == 0
    stdio_peer.send(normal_call(12).encode())
    answer = stdio_peer.answer()
    assert answer["id"] == 12 and not answer["result"].get("isError"), answer
    assert stored(member) == 1


def test_stdio_answers_a_line_nested_deeper_than_the_parser_recurses(stdio_peer, member):  # noqa: F811
    """The SDK's parser refuses such a line; reading its id for the answer must
    not raise (the error answer parsed it again with Python's own parser, which
    recursed past its limit) and the server goes on serving."""
    stdio_peer.handshake()
    for line in (b"[" * 100_000, b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": ' + b"[" * 100_000):
        stdio_peer.send(line)
        answer = stdio_peer.answer()
        assert answer["id"] is None and answer["error"]["code"] in (-32700, -32600), answer
    stdio_peer.send(normal_call(12).encode())
    answer = stdio_peer.answer()
    assert answer["id"] == 12 and not answer["result"].get("isError"), answer
    assert stored(member) == 1


# A request whose id is no string and no integer: the SDK takes it for a
# notification (HTTP 202 and no answer ever, or on stdio no line back).
BAD_IDS = [
    ({}, "an object"),
    ([1], "an array"),
    (1.5, "a number"),
    (1.0, "a number"),
    (True, "a boolean"),
    (None, "null"),
]


def call_with_id(request_id: Any) -> str:
    return json.dumps({**json.loads(normal_call(0)), "id": request_id})


def assert_refused_id(answer: dict[str, Any], kind: str) -> None:
    assert answer["id"] is None, answer
    assert answer["error"]["code"] == -32600 and answer["error"]["data"]["code"] == "INVALID_ARGUMENT", answer
    assert "the request id must be a string or an integer; it is " + kind in answer["error"]["message"], answer


def test_streamable_http_answers_a_request_whose_id_is_no_string_or_integer(http_server, member):  # noqa: F811
    with mcp_http(http_server, member) as client:
        for request_id, kind in BAD_IDS:
            response = client.post("/mcp/memory", content=call_with_id(request_id).encode())
            assert response.status_code == 400, (request_id, response.status_code, response.text)
            assert_refused_id(response.json(), kind)
        assert stored(member) == 0
        response = client.post("/mcp/memory", content=call_with_id("a-string-id").encode())
        assert response.status_code == 200 and response.json()["id"] == "a-string-id", response.text
    assert stored(member) == 1


def test_stdio_answers_a_request_whose_id_is_no_string_or_integer(stdio_peer, member):  # noqa: F811
    stdio_peer.handshake()
    for request_id, kind in BAD_IDS:
        stdio_peer.send(call_with_id(request_id).encode())
        assert_refused_id(stdio_peer.answer(), kind)
    assert stored(member) == 0
    stdio_peer.send(normal_call(12).encode())
    answer = stdio_peer.answer()
    assert answer["id"] == 12 and not answer["result"].get("isError"), answer
    assert stored(member) == 1
