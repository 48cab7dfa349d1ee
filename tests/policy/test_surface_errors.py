"""Every error answered before an app runs takes the shape of the surface its
path belongs to, whichever guard answers it: the rate limiter's 429 and the
body bound's 413 on one path must be the same kind of body, so a guard that
grew its own choice of shape would be caught here."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from memproj.edge import BodyLimit
from policy.middleware import (
    DIALECT_RENDERERS,
    JSONRPC_INVALID_REQUEST,
    JSONRPC_RATE_LIMIT,
    MCP,
    PLAIN,
    REST,
    ROUTE,
    ROUTE_ERROR_BODIES,
    RateLimitMiddleware,
    register_dialect_rate_limit,
    register_route_error_body,
    surface_of,
)
from tests.harness.surfaces.asgi import asgi_transport
from tests.policy.test_ratelimit import _ok_app, _static

TOOLSET = "surface-test"
ROUTE_PATH = "/api/surface-test-hook"
BODY_LIMIT = 256


def _render(code: str, message: str, details: dict[str, Any]) -> str:
    return json.dumps({"dialect": TOOLSET, "code": code, "message": message})


def _route_body(code: str, message: str, details: dict[str, Any]) -> bytes:
    return json.dumps({"route": ROUTE_PATH, "code": code, "message": message}).encode()


@pytest.fixture
def registered():
    register_dialect_rate_limit(TOOLSET, _render)
    register_route_error_body(ROUTE_PATH, _route_body)
    try:
        yield
    finally:
        DIALECT_RENDERERS.pop(TOOLSET)
        ROUTE_ERROR_BODIES.pop(ROUTE_PATH)


def test_each_kind_of_path_belongs_to_one_surface(registered):
    assert surface_of(ROUTE_PATH + "/").kind == ROUTE
    assert surface_of(f"/mcp/{TOOLSET}/").kind == MCP
    assert surface_of("/mcp/unregistered").kind == MCP and surface_of("/mcp/unregistered").render is None
    assert surface_of(f"/api/{TOOLSET}/remember").kind == REST
    # An /api/ path of a toolset that registered no renderer is no tool route.
    assert surface_of("/api/unregistered/remember").kind == PLAIN
    assert surface_of("/healthz").kind == PLAIN


async def _too_large_then_limited(path: str) -> tuple[httpx.Response, httpx.Response]:
    """The body bound's 413, then (limit 1: the second small call) the rate limiter's 429."""
    app = BodyLimit(RateLimitMiddleware(_ok_app, resolver=_static(1)), default=BODY_LIMIT)
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        big = json.dumps({"jsonrpc": "2.0", "id": "big-1", "method": "ping", "params": {"pad": "x" * BODY_LIMIT}})
        too_large = await client.post(path, content=big, headers={"content-type": "application/json"})
        await client.post(path, json={"jsonrpc": "2.0", "id": "ok-1", "method": "ping"})
        limited = await client.post(path, json={"jsonrpc": "2.0", "id": "small-2", "method": "ping"})
    assert too_large.status_code == 413 and limited.status_code == 429
    assert too_large.headers["content-type"] == limited.headers["content-type"]
    return too_large, limited


async def test_mcp_answers_both_with_a_jsonrpc_error_in_the_dialects_format(registered):
    too_large, limited = await _too_large_then_limited(f"/mcp/{TOOLSET}")
    for answer, jsonrpc_code, code, request_id in (
        (too_large, JSONRPC_INVALID_REQUEST, "INVALID_ARGUMENT", "big-1"),
        (limited, JSONRPC_RATE_LIMIT, "RATE_LIMIT", "small-2"),
    ):
        body = answer.json()
        assert body["jsonrpc"] == "2.0" and body["id"] == request_id
        assert body["error"]["code"] == jsonrpc_code and body["error"]["data"]["code"] == code
        assert json.loads(body["error"]["message"])["dialect"] == TOOLSET


async def test_an_unregistered_mcp_toolset_answers_both_with_a_plain_jsonrpc_error():
    too_large, limited = await _too_large_then_limited("/mcp/unregistered")
    assert too_large.json()["error"]["message"].startswith("[INVALID_ARGUMENT] ")
    assert limited.json()["error"]["message"].startswith("[RATE_LIMIT] ")


async def test_the_rest_route_answers_both_in_the_dialects_body(registered):
    too_large, limited = await _too_large_then_limited(f"/api/{TOOLSET}/remember")
    assert too_large.headers["content-type"] == "application/json; charset=utf-8"
    assert too_large.json()["dialect"] == limited.json()["dialect"] == TOOLSET
    assert (too_large.json()["code"], limited.json()["code"]) == ("INVALID_ARGUMENT", "RATE_LIMIT")


async def test_a_dialects_own_route_answers_both_in_its_registered_body(registered):
    too_large, limited = await _too_large_then_limited(ROUTE_PATH)
    assert too_large.json()["route"] == limited.json()["route"] == ROUTE_PATH
    assert (too_large.json()["code"], limited.json()["code"]) == ("PAYLOAD_TOO_LARGE", "RATE_LIMIT")


async def test_other_paths_answer_both_in_the_plain_body(registered):
    too_large, limited = await _too_large_then_limited("/healthz")
    assert set(too_large.json()) == set(limited.json()) == {"error", "request_id"}
    assert (too_large.json()["error"]["code"], limited.json()["error"]["code"]) == ("PAYLOAD_TOO_LARGE", "RATE_LIMIT")
