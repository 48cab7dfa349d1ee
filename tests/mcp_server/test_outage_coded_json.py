"""With PostgreSQL unreachable, every HTTP surface answers 503 with Retry-After
and a coded JSON body, whatever the client sends (issue 23): the tool routes of
every dialect, roampal's hooks, /api/search, /api/ingest, the LangGraph store,
an unknown /api/ path and the MCP endpoints. Hypothesis draws the route and
hostile arguments; the outage is test_storage_outage's (new connections go to
a socket directory where no server listens)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from mcp_server.registry import TOOLSETS
from tests.mcp_server.test_coded_json_property import _arguments, _body, _tool_names, depths, store_bodies
from tests.mcp_server.test_storage_outage import database_down  # noqa: F401 - the outage fixture

pytestmark = pytest.mark.django_db(transaction=True)

TOOL_ROUTES = [f"/api/{toolset}/{tool}" for toolset in sorted(TOOLSETS) for tool in sorted(_tool_names(toolset))]
OTHER_ROUTES = ["/api/search", "/api/ingest", "/api/hooks/get-context", "/api/hooks/stop", "/api/langmem/store/"]
MCP_ROUTES = [f"/mcp/{toolset}" for toolset in sorted(TOOLSETS)]
routes = st.sampled_from([*TOOL_ROUTES, *OTHER_ROUTES, *MCP_ROUTES])
bodies = st.one_of(_arguments(["query", "content", "id", "ops", "conversation_id"]), store_bodies)


_router: list[Any] = []


def _send(token: str, path: str, body: bytes) -> httpx.Response:
    from memproj.asgi import Router

    if not _router:
        _router.append(Router())
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if path.startswith("/mcp/"):
        headers["Accept"] = "application/json, text/event-stream"

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=_router[0])
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.post(path, content=body, headers=headers)

    return asyncio.run(send())


def _mcp_call(arguments: Any) -> bytes:
    arguments = arguments if isinstance(arguments, dict) else {"value": arguments}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "any", "arguments": arguments}}
    return json.dumps(call).encode()


def _code_of(body: Any) -> str | None:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        data = error.get("data")
        return (data or {}).get("code") if isinstance(data, dict) else error.get("code")
    return body.get("code") if isinstance(body, dict) else None


@pytest.mark.slow
def test_every_http_surface_answers_503_with_retry_after_during_an_outage(member, database_down):  # noqa: F811
    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
        phases=[Phase.explicit, Phase.generate],
    )
    @given(path=routes, arguments=bodies, depth=depths)
    @example(path="/api/search", arguments={"query": "x"}, depth=30)
    @example(path="/api/hooks/get-context", arguments={"query": "x"}, depth=30)
    @example(path="/api/langmem/store/", arguments={"ops": [{"op": "get", "namespace": ["a"], "key": "k"}]}, depth=30)
    @example(path="/api/memory/memory_search", arguments={"query": "x"}, depth=30)
    @example(path="/api/memento/recall", arguments={"query": "x"}, depth=30)
    def check(path: str, arguments: Any, depth: int) -> None:
        body = _mcp_call(arguments) if path.startswith("/mcp/") else _body(arguments, depth)
        response = _send(member.token, path, body)
        where = f"{path}: {response.status_code} {response.text[:300]!r}"
        assert response.status_code == 503, where
        assert response.headers.get("retry-after") == "5", where
        assert response.headers.get("content-type", "").startswith("application/json"), where
        assert "Traceback" not in response.text and "psycopg" not in response.text, where
        assert _code_of(json.loads(response.text)), where

    check()


def test_an_unknown_api_path_answers_coded_json_not_an_html_page(member):
    response = _send(member.token, "/api/no/such/route", b"{}")
    assert response.status_code == 404 and response.json()["error"]["code"] == "NOT_FOUND"
