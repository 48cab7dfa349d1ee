"""A rate-limited call to roampal's plain HTTP routes (the hooks, /api/search,
/api/ingest) is answered in the routes' own error body, ``{"error": "<message>",
"code": "<CODE>"}``, with 429 and Retry-After; the other surfaces keep theirs."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from policy.document import RateLimitPolicy
from policy.middleware import JSONRPC_RATE_LIMIT, RateLimitMiddleware
from tests.harness.surfaces.asgi import asgi_transport
from tests.policy.test_ratelimit import _inside_one_fixed_window

pytestmark = pytest.mark.django_db(transaction=True)

ROAMPAL_ROUTES = ["/api/hooks/get-context", "/api/hooks/stop", "/api/search", "/api/ingest"]


def limited_app(limit: int = 1, window: int = 600) -> RateLimitMiddleware:
    """The served router behind the rate limiter, every request in one fresh bucket."""
    from memproj.asgi import Router

    rule = RateLimitPolicy(limit=limit, window_seconds=window, algorithm="fixed")
    bucket = f"test-{uuid.uuid4()}"
    _inside_one_fixed_window(window, margin_seconds=20)

    async def resolve(scope):
        return bucket, rule

    return RateLimitMiddleware(Router(), resolver=resolve)


@pytest.mark.parametrize("path", ROAMPAL_ROUTES)
async def test_a_rate_limited_roampal_route_answers_in_its_own_error_body(member, path):
    headers = {"Authorization": f"Bearer {member.token}"}
    async with httpx.AsyncClient(transport=asgi_transport(limited_app()), base_url="http://testserver") as client:
        # The route's own error, answered by the route (an argument it does not take).
        refused = await client.post(path, headers=headers, json={"no_such_argument": 1})
        limited = await client.post(path, headers=headers, json={"query": "x"})
    assert refused.status_code == 422 and set(refused.json()) == {"error", "code"}
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert limited.headers["content-type"].startswith("application/json")
    body = limited.json()
    assert set(body) == set(refused.json())
    assert body["code"] == "RATE_LIMIT" and isinstance(body["error"], str)
    assert body["error"].startswith("rate limit exceeded: 1 calls per window") and "retry after" in body["error"]


async def test_the_other_surfaces_keep_their_own_rate_limit_answers(member):
    headers = {"Authorization": f"Bearer {member.token}"}
    async with httpx.AsyncClient(transport=asgi_transport(limited_app()), base_url="http://testserver") as client:
        assert (await client.get("/", headers=headers)).status_code == 200
        mcp = await client.post(
            "/mcp/roampal/",
            headers={**headers, "Accept": "application/json, text/event-stream"},
            content=json.dumps({"jsonrpc": "2.0", "id": "call-9", "method": "tools/list"}),
        )
        rest = await client.post("/api/roampal/search_memory", headers=headers, json={"query": "x"})
        store = await client.post("/api/langmem/store/", headers=headers, json={})
        index = await client.get("/", headers=headers)
    assert {r.status_code for r in (mcp, rest, store, index)} == {429}
    # MCP: a JSON-RPC error answering the call's id, its message in roampal's tool error format.
    body = mcp.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == "call-9" and body["error"]["code"] == JSONRPC_RATE_LIMIT
    assert body["error"]["data"]["code"] == "RATE_LIMIT" and body["error"]["message"].startswith("Error: rate limit")
    # The generic REST route: roampal's error line inside the route's coded object.
    assert set(rest.json()) == {"error"} and rest.json()["error"]["code"] == "RATE_LIMIT"
    assert rest.json()["error"]["message"].startswith("Error: rate limit")
    # Paths of no dialect's own error body (the LangGraph store, the index) keep the plain body.
    for plain in (store, index):
        assert set(plain.json()) == {"error", "request_id"} and plain.json()["error"]["code"] == "RATE_LIMIT"
