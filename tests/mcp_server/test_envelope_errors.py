"""A body that is no JSON-RPC message, over the real ASGI router and the MCP
SDK's transport: a coded error in the dialect's vocabulary, with the JSON-RPC
code and HTTP status the transport chose, never the parser's or pydantic's
report (which echoed the input and named the library's version)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from memory.models import Memory
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "SECRETVALUE-4411"
BODIES = [
    ("a batch", f'[{{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": "{SECRET}"}}]'),
    ("params that are no object", f'{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "{SECRET}"}}'),
    ("no method", f'{{"jsonrpc": "2.0", "id": "{SECRET}"}}'),
    ("a lone surrogate", f'{{"jsonrpc": "2.0", "id": 1, "method": "{SECRET}\\ud800'),
    ("no JSON", f"{SECRET} <xml/>"),
]


async def post(identity: Any, toolset: str, body: str) -> httpx.Response:
    return await request(identity, toolset, "POST", body)


async def request(identity: Any, toolset: str, method: str, body: str = "", **headers: str) -> httpx.Response:
    from memproj.asgi import Router

    router = Router()
    sent = {
        "Authorization": f"Bearer {identity.token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        **headers,
    }
    async with (
        router.servers[toolset].session_manager.run(),
        httpx.AsyncClient(transport=asgi_transport(router), base_url="http://testserver") as client,
    ):
        return await client.request(
            method, f"/mcp/{toolset}", content=body.encode("utf-8", "surrogatepass"), headers=sent
        )


@pytest.mark.parametrize("toolset", ["memory", "pce"])
@pytest.mark.parametrize(("what", "body"), BODIES)
async def test_a_body_that_is_no_json_rpc_message_gets_the_dialects_coded_error(member, toolset, what, body):
    response = await post(member, toolset, body)
    assert response.status_code == 400, (what, response.text)
    assert int(response.headers["content-length"]) == len(response.content)
    error = response.json()["error"]
    assert error["code"] in (-32700, -32600, -32602), error
    assert error["data"]["code"] == "INVALID_ARGUMENT", error
    assert "JSON" in error["message"]
    for leak in (SECRET, "pydantic", "validation error", "Traceback", "input_value"):
        assert leak.lower() not in response.text.lower(), (what, response.text)
    assert await Memory.objects.acount() == 0


CALL_PARAMS = [
    ("arguments that are no object", {"name": "memory_search", "arguments": [1]}),
    ("a name that is no string", {"name": 7, "arguments": {}}),
    ("no name", {"arguments": {"query": "x"}}),
]


@pytest.mark.parametrize(("what", "params"), CALL_PARAMS)
async def test_a_tool_call_whose_params_are_malformed_gets_the_dialects_coded_error(member, what, params):
    body = json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params})
    response = await post(member, "memory", body)
    answer = response.json()
    assert answer["id"] == 5, (what, answer)
    assert answer["error"]["code"] == -32602, (what, answer)
    assert answer["error"]["data"]["code"] == "INVALID_ARGUMENT", (what, answer)
    assert "params" in answer["error"]["message"], (what, answer)
    assert await Memory.objects.acount() == 0


PING = '{"jsonrpc": "2.0", "id": 3, "method": "ping"}'
# (what, method, body, headers, status, the answer's id, its code, words of its message)
FRAMING = [
    ("a text body", "POST", PING, {"Content-Type": "text/plain"}, 400, None, "INVALID_ARGUMENT", "Content-Type"),
    ("an Accept without JSON", "POST", PING, {"Accept": "text/event-stream"}, 406, None, "INVALID_ARGUMENT", "accept"),
    ("a DELETE", "DELETE", "", {}, 405, None, "METHOD_NOT_ALLOWED", "no session to end"),
    ("a PUT", "PUT", PING, {}, 405, None, "METHOD_NOT_ALLOWED", "stateless"),
    (
        "an unknown protocol version",
        "POST",
        PING,
        {"MCP-Protocol-Version": "1999-01-01"},
        400,
        3,
        "INVALID_ARGUMENT",
        "protocolVersion",
    ),
]


@pytest.mark.parametrize("toolset", ["memory", "pce"])
@pytest.mark.parametrize(("what", "method", "body", "headers", "status", "request_id", "code", "words"), FRAMING)
async def test_the_transports_refusal_of_a_requests_framing_is_the_dialects_coded_error(
    member, toolset, what, method, body, headers, status, request_id, code, words
):
    """The SDK's transport refuses these itself, in plain text or as a JSON-RPC
    error with no code of ours: each reaches the client as the surface's coded
    error, with the transport's status, JSON-RPC code and message."""
    response = await request(member, toolset, method, body, **headers)
    assert response.status_code == status, (what, response.text)
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)
    answer = response.json()
    assert answer["id"] == request_id and answer["error"]["data"]["code"] == code, (what, answer)
    assert words in answer["error"]["message"], (what, answer)
    if toolset == "memory":
        assert answer["error"]["message"].startswith(f"[{code}] "), answer
    elif code == "INVALID_ARGUMENT":
        assert json.loads(answer["error"]["message"])["error"]["code"] == "VALIDATION_ERROR", answer


@pytest.mark.parametrize(
    ("what", "body", "words"),
    [
        (
            "a 5,000-digit integer",
            '{"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"n": ' + "7" * 5000 + "}}",
            "digits",
        ),
        (
            "5,000 levels of nesting",
            '{"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"n": ' + "[" * 5000 + "]" * 5000 + "}}",
            "nested",
        ),
    ],
)
async def test_json_the_parser_cannot_hold_is_refused_for_what_it_is_not_as_no_json(member, what, body, words):
    """Valid JSON that Python's parser refuses (an integer past its digit
    limit, nesting past its recursion limit) is named for what it is."""
    response = await post(member, "memory", body)
    assert response.status_code == 400, (what, response.text)
    error = response.json()["error"]
    assert error["data"]["code"] == "INVALID_ARGUMENT" and words in error["message"], (what, error)
    assert "not JSON" not in error["message"] and "7777" not in response.text
