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
    jsonrpc_error,
    register_dialect_rate_limit,
    register_route_error_body,
    surface_error,
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
    too_large, limited = await _too_large_then_limited("/")
    assert set(too_large.json()) == set(limited.json()) == {"error", "request_id"}
    assert (too_large.json()["error"]["code"], limited.json()["error"]["code"]) == ("PAYLOAD_TOO_LARGE", "RATE_LIMIT")


# The MCP endpoint's own refusals (memproj/asgi.py) take the same one
# mechanism: a refused token's 401, the storage outage's 503 and the JSON-RPC
# envelope's 400 are surface_error's body for the path, so a renderer registered
# for the toolset shapes them as it shapes the 413 and the 429 above.
MCP_TOOLSET = "memory"
MCP_PATH = f"/mcp/{MCP_TOOLSET}"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _marked(code: str, message: str, details: dict[str, Any]) -> str:
    return json.dumps({"marked": True, "code": code, "message": message})


@pytest.fixture
def marked_renderer(monkeypatch):
    """The surface registry's renderer for the real toolset, replaced by one whose text no dialect writes."""
    import memproj.asgi  # noqa: F401 - registers the dialects' renderers first

    monkeypatch.setitem(DIALECT_RENDERERS, MCP_TOOLSET, _marked)


async def _post_mcp(content: bytes, token: str) -> httpx.Response:
    from memproj.asgi import Router

    router = Router()
    async with (
        router.servers[MCP_TOOLSET].session_manager.run(),
        httpx.AsyncClient(transport=asgi_transport(router), base_url="http://testserver") as client,
    ):
        return await client.post(MCP_PATH, content=content, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"})


def _is_surface_error(answer: httpx.Response, expected: tuple[bytes, str]) -> None:
    body, content_type = expected
    assert answer.content == body, (answer.content, body)
    assert answer.headers["content-type"] == content_type
    assert json.loads(answer.json()["error"]["message"])["marked"] is True


@pytest.mark.django_db
async def test_a_refused_tokens_401_is_the_surfaces_error(marked_renderer):
    from mcp_server.http import CREDENTIALS_REFUSED, REFUSED_CHALLENGE

    request = json.dumps({"jsonrpc": "2.0", "id": "r-401", "method": "tools/list"}).encode()
    answer = await _post_mcp(request, "mp_no-such-token")
    assert answer.status_code == 401 and answer.headers["www-authenticate"] == REFUSED_CHALLENGE
    details = {"error": "invalid_token"}
    _is_surface_error(answer, surface_error(MCP_PATH, "PERMISSION_DENIED", CREDENTIALS_REFUSED, details, request))
    assert answer.json()["id"] == "r-401"


@pytest.mark.django_db(transaction=True)  # the app's threads read the token on their own connections
@pytest.mark.parametrize(
    ("content", "message_name"),
    [(b"{not json", "NOT_JSON"), (json.dumps({"jsonrpc": "2.0", "id": 1, "nomethod": 1}).encode(), "NOT_JSONRPC")],
)
async def test_the_envelopes_400_is_the_surfaces_error(member, marked_renderer, content, message_name):
    import mcp_server.http

    answer = await _post_mcp(content, member.token)
    assert answer.status_code == 400
    # The transport's own JSON-RPC code (parse error, invalid request) is kept.
    jsonrpc_code = answer.json()["error"]["code"]
    message = getattr(mcp_server.http, message_name)
    _is_surface_error(answer, surface_error(MCP_PATH, "INVALID_ARGUMENT", message, {}, jsonrpc_code=jsonrpc_code))


@pytest.fixture
def database_down(tmp_path):
    """New connections go to a socket directory where no server listens."""
    from django.db import connections

    settings_dict = connections["default"].settings_dict
    saved = settings_dict["HOST"]
    connections.close_all()
    settings_dict["HOST"] = str(tmp_path)
    yield
    connections.close_all()
    settings_dict["HOST"] = saved


@pytest.mark.django_db(transaction=True)
async def test_the_storage_outages_503_is_the_surfaces_error(member, marked_renderer, database_down):
    from mcp_server.http import RETRY_AFTER_SECONDS, STORAGE_MESSAGE

    request = json.dumps({"jsonrpc": "2.0", "id": "r-503", "method": "tools/list"}).encode()
    answer = await _post_mcp(request, member.token)  # verifying the token meets the outage
    assert answer.status_code == 503 and answer.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
    # The body was read by the transport: the answer names no id, as before.
    _is_surface_error(answer, surface_error(MCP_PATH, "STORAGE_ERROR", STORAGE_MESSAGE, {}, jsonrpc_code=-32000))


@pytest.mark.parametrize(
    ("body", "answered"),
    [
        (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"id": 9}}', 7),
        (b'{"jsonrpc": "2.0", "id": "a", "method": "ping"}', "a"),
        # Named twice: which one the client meant cannot be told (a plain parse keeps the last).
        (b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "ping"}', None),
        (b'{"id": {"x": 1}, "method": "ping"}', None),
        (b'[{"id": 3}]', None),
        (b"\xff\xfe{", None),
        (b"", None),
        # Deeper than the parser recurses: still an error body, never an exception.
        (b"[" * 100_000, None),
        (b'{"id": 5, "params": ' + b"[" * 100_000, None),
    ],
)
def test_a_jsonrpc_error_answers_the_id_the_message_names_once(body: bytes, answered: Any) -> None:
    payload = json.loads(jsonrpc_error("INVALID_ARGUMENT", "refused", {}, body))
    assert payload["id"] == answered
    assert payload["error"]["data"]["code"] == "INVALID_ARGUMENT"
