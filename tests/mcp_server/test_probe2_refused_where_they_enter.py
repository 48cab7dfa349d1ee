"""Two refusals a probe found missing, each answered where the request enters:

1. A request without valid credentials to a dialect's own route (roampal's
   hooks, langmem's LangGraph store) is refused before its body has come, as
   ``/api/<toolset>/<tool>`` already was: Django reads the whole body before
   any view, so the route's own check let anyone, without a token, hold a
   connection (one of MEMPROJ_HTTP_LIMIT_CONCURRENCY) for the body timeout
   (memproj/asgi.py ``rest_credentials_refusal``).
2. ``?tenant=`` (blank) and a bare ``?tenant`` are refused on
   ``/api/<toolset>/<tool>`` and ``/mcp/<toolset>/``, as ``?tenant=x`` is
   (mcp_server/dialect.py ``query_options`` keeps blank parameters)."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx
import pytest

from tests.harness.surfaces.mcp_http import MCP_HEADERS
from tests.mcp_server.test_transports import http_server  # noqa: F401 - the live-server fixture

pytestmark = pytest.mark.django_db(transaction=True)

# Long enough for any healthy answer; the server under test (plain uvicorn) has
# no body timeout, so a route that waits for the body never answers.
ANSWER_WAIT = 30.0


def _status_before_the_body_ends(base: str, path: str, authorization: str | None) -> int | None:
    """The status a request gets while the end of its body has not been sent
    (None: no answer while waiting)."""
    address = urlsplit(base)
    head = f"POST {path} HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
    head += "Content-Length: 100000\r\n"
    if authorization is not None:
        head += f"Authorization: {authorization}\r\n"
    with socket.create_connection((address.hostname, address.port)) as conn:
        conn.sendall(head.encode() + b'\r\n{"query": "')
        conn.settimeout(ANSWER_WAIT)
        try:
            answer = conn.recv(200)
        except TimeoutError:
            return None
    return int(answer.split(b" ")[1]) if answer.startswith(b"HTTP/1.1 ") else None


@pytest.mark.parametrize("authorization", [None, "Bearer mp_not-a-token"])
def test_the_plain_tool_route_refuses_missing_credentials_before_the_body(http_server, authorization):  # noqa: F811
    assert _status_before_the_body_ends(http_server, "/api/memory/memory_search", authorization) == 401


@pytest.mark.parametrize("authorization", [None, "Bearer mp_not-a-token"])
@pytest.mark.parametrize(
    "path", ["/api/hooks/stop", "/api/hooks/get-context", "/api/search", "/api/ingest", "/api/langmem/store/"]
)
def test_the_dialects_own_routes_refuse_missing_credentials_before_the_body(http_server, path, authorization):  # noqa: F811
    assert _status_before_the_body_ends(http_server, path, authorization) == 401


@pytest.mark.parametrize("query", ["tenant=", "tenant"])
def test_a_blank_tenant_parameter_is_refused_not_ignored(http_server, member, query):  # noqa: F811
    headers = {"Authorization": f"Bearer {member.token}"}
    plain = httpx.post(f"{http_server}/api/memory/memory_search?{query}", json={"query": "x"}, headers=headers)
    assert plain.status_code == 422, plain.text
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "memory_search", "arguments": {"query": "x"}},
    }
    mcp = httpx.post(f"{http_server}/mcp/memory/?{query}", json=body, headers={**MCP_HEADERS, **headers})
    assert mcp.json()["result"]["isError"], mcp.text
