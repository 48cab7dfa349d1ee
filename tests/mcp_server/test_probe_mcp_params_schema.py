"""A request whose params miss the MCP schema somewhere the SDK checks (a
``_meta`` that is no object, a ``progressToken`` that is neither a string nor an
integer, a ``task`` of the wrong shape, a list's ``cursor`` that is no string)
is answered with the dialect's INVALID_ARGUMENT naming the field, as a
tools/call without a name is. Found over real HTTP: the SDK answered
``{"code": -32602, "message": "Invalid request parameters", "data": ""}``,
no field and no code, and the tool did not run."""

from __future__ import annotations

import json

import httpx
import pytest

from memory.models import Memory
from tests.mcp_server.test_transports import http_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

CONTENT = "Deployed v9 to staging"
CALL = {"name": "memory_store_episode", "arguments": {"content": CONTENT, "butler": "ops"}}


@pytest.mark.parametrize(
    ("method", "params", "where"),
    [
        ("tools/call", {**CALL, "_meta": "deploy-9"}, "_meta"),
        ("tools/call", {**CALL, "_meta": ["deploy-9"]}, "_meta"),
        ("tools/call", {**CALL, "_meta": {"progressToken": 1.5}}, "_meta.progressToken"),
        ("tools/call", {**CALL, "task": "x"}, "task"),
        ("tools/list", {"cursor": {"page": 2}}, "cursor"),
        ("ping", {"_meta": 7}, "_meta"),
    ],
)
def test_params_that_miss_the_mcp_schema_get_a_coded_refusal(http_server, member, method, params, where):  # noqa: F811
    message = {"jsonrpc": "2.0", "id": 41, "method": method, "params": params}
    response = httpx.post(
        f"{http_server}/mcp/memory/",
        content=json.dumps(message),
        headers={
            "Authorization": f"Bearer {member.token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
        timeout=60,
    )
    answer = response.json()
    assert answer["id"] == 41, answer
    error = answer["error"]
    assert error["code"] == -32602, answer
    assert error["data"] == {"code": "INVALID_ARGUMENT"}, answer
    assert error["message"].startswith(
        f"[INVALID_ARGUMENT] the params of {method} do not fit the MCP specification: "
    ), answer
    assert f": {where}" in error["message"], answer
    assert Memory.objects.filter(content=CONTENT).count() == 0
