"""The first hour of a new user, over HTTP against the live ASGI app under
uvicorn: what a mistyped, revoked or expired token, a GET of an MCP endpoint,
a wrong toolset name and an oversized call answer, as raw HTTP and as the
python MCP SDK's client shows them; the server's version; and the roampal hook
command's note for a refused token."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from typing import Any

import httpx
import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import memproj
from mcp_server.http import CREDENTIALS_REFUSED
from mcp_server.registry import TOOLSETS
from policy.models import ApiToken
from policy.services.tokens import token_revoke
from tests.conftest import call, make_identity
from tests.mcp_server.test_roampal_hooks import HOOK
from tests.mcp_server.test_transports import http_server  # noqa: F401 - the live-server fixture

pytestmark = pytest.mark.django_db(transaction=True)

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 41, "method": "tools/list", "params": {}}


def mcp_post(base: str, toolset: str, token: str | None, body: Any = TOOLS_LIST) -> httpx.Response:
    headers = dict(MCP_HEADERS, **({"Authorization": f"Bearer {token}"} if token else {}))
    return httpx.post(f"{base}/mcp/{toolset}/", json=body, headers=headers, timeout=60)


def sdk_client(base: str, toolset: str, token: str) -> tuple[httpx2.AsyncClient, Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    return http, Client(streamable_http_client(f"{base}/mcp/{toolset}/", http_client=http))


def mcp_error(raised: BaseException) -> MCPError:
    """The MCPError a client raised, also from inside the task groups it runs in."""
    if isinstance(raised, MCPError):
        return raised
    if isinstance(raised, BaseExceptionGroup):
        for inner in raised.exceptions:
            found = mcp_error(inner)
            if found is not None:
                return found
    raise AssertionError(f"no MCPError in {raised!r}") from raised


async def sdk_error(base: str, toolset: str, token: str) -> str:
    """The error the python SDK's client raises when it connects."""
    http, client = sdk_client(base, toolset, token)
    try:
        async with http, client:
            pass
    except BaseException as raised:  # an MCPError, maybe inside an exception group
        return str(mcp_error(raised))
    raise AssertionError("the client connected")


# --- a refused token is not a missing one ---------------------------------------------


def test_a_missing_token_keeps_the_oauth_discovery_challenge(http_server):  # noqa: F811
    missing = mcp_post(http_server, "memory", None)
    assert missing.status_code == 401
    assert 'resource_metadata="' in missing.headers["www-authenticate"]


async def test_a_refused_token_says_so_and_points_to_no_oauth_flow(http_server, member):  # noqa: F811
    revoked = await sync_to_async(make_identity)("tenant-a", "revoked-one")
    assert revoked.caller.token_id is not None
    await sync_to_async(token_revoke)(ApiToken.objects.filter(pk=revoked.caller.token_id))
    expired = await sync_to_async(make_identity)("tenant-a", "expired-one")
    assert expired.caller.token_id is not None
    await ApiToken.objects.filter(pk=expired.caller.token_id).aupdate(expires_at=timezone.now() - timedelta(days=1))

    for token in ("mp_not-a-real-token", revoked.token, expired.token):
        refused = await sync_to_async(mcp_post)(http_server, "memory", token)
        assert refused.status_code == 401, refused.text
        challenge = refused.headers["www-authenticate"]
        assert 'error="invalid_token"' in challenge and "resource_metadata" not in challenge
        answer = refused.json()
        assert answer["id"] == TOOLS_LIST["id"]
        assert answer["error"]["data"] == {"code": "PERMISSION_DENIED", "error": "invalid_token"}
        assert answer["error"]["message"] == f"[PERMISSION_DENIED] {CREDENTIALS_REFUSED}"

    # The python SDK's client shows the reason, in each dialect's words.
    assert "the bearer token was refused" in await sdk_error(http_server, "memory", "mp_not-a-real-token")
    pce = json.loads(await sdk_error(http_server, "pce", revoked.token))
    assert pce["error"]["code"] == "UNAUTHORIZED" and "refused" in pce["error"]["message"]
    assert (await sdk_error(http_server, "langmem", expired.token)).startswith("PermissionError: the bearer token")

    # A valid token still works on the same endpoint.
    http, client = sdk_client(http_server, "memory", member.token)
    async with http, client:
        await call(client, "memory_store_episode", content="first hour", butler="ops")


def test_the_plain_http_routes_tell_a_refused_token_from_a_missing_one(http_server):  # noqa: F811
    routes = {
        "/api/memory/memory_search": {"query": "x"},
        "/api/hooks/get-context": {"query": "x"},
        "/api/langmem/store/": {"ops": [{"op": "get", "namespace": ["a"], "key": "k"}]},
    }
    for path, body in routes.items():
        missing = httpx.post(f"{http_server}{path}", json=body, timeout=60)
        wrong = httpx.post(f"{http_server}{path}", json=body, headers={"Authorization": "Bearer mp_x"}, timeout=60)
        assert missing.status_code == wrong.status_code == 401, path
        assert missing.headers["www-authenticate"] == "Bearer", path
        assert 'error="invalid_token"' in wrong.headers["www-authenticate"], path
        assert "refused" in wrong.text and "refused" not in missing.text, path


# --- GET, wrong toolsets ------------------------------------------------------------------


def test_a_get_of_an_mcp_endpoint_answers_at_once(http_server, member):  # noqa: F811
    answer = httpx.get(
        f"{http_server}/mcp/memory/",
        headers={"Authorization": f"Bearer {member.token}", "Accept": "text/event-stream"},
        timeout=10,
    )
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    error = answer.json()["error"]
    assert error["data"]["code"] == "METHOD_NOT_ALLOWED" and "stateless" in error["message"]
    # Without a token the endpoint asks for one first.
    assert httpx.get(f"{http_server}/mcp/memory/", timeout=10).status_code == 401


async def test_an_unknown_toolset_answers_json_naming_the_toolsets(http_server, member):  # noqa: F811
    toolsets = sorted(TOOLSETS)
    for path in ("/mcp/memroy/", "/mcp/memory/extra", "/mcp/", "/mcp"):
        answer = await sync_to_async(httpx.post)(f"{http_server}{path}", json=TOOLS_LIST, timeout=60)
        assert answer.status_code == 404 and answer.headers["content-type"].startswith("application/json"), path
        assert all(name in answer.text for name in toolsets), path
    metadata = await sync_to_async(httpx.get)(
        f"{http_server}/.well-known/oauth-protected-resource/mcp/memroy", timeout=60
    )
    assert metadata.status_code == 404 and metadata.json()["error"]["code"] == "NOT_FOUND"
    assert all(name in metadata.json()["error"]["message"] for name in toolsets)
    rest = await sync_to_async(httpx.post)(f"{http_server}/api/memroy/memory_search", json={}, timeout=60)
    assert rest.status_code == 404 and all(name in rest.json()["error"]["message"] for name in toolsets)
    assert "memory, pce, roampal" in await sdk_error(http_server, "memroy", member.token)


# --- a call over the body limit ------------------------------------------------------------


async def test_a_five_megabyte_call_reaches_the_sdk_with_its_reason(http_server, member):  # noqa: F811
    http, client = sdk_client(http_server, "memory", member.token)
    async with http, client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("memory_store_episode", {"content": "x" * (5 * 1024 * 1024), "butler": "ops"})
        assert "over the limit of 2097152 bytes" in str(raised.value)
        # The session goes on: the refused call broke no connection.
        stored = await call(client, "memory_store_episode", content="after the refusal", butler="ops")
    assert stored["id"]


def test_an_oversized_body_is_answered_with_its_request_id(http_server, member):  # noqa: F811
    huge = "x" * (3 * 1024 * 1024)
    first: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "memory_search", "arguments": {}},
    }
    first["params"]["arguments"]["query"] = huge
    last = {"method": "tools/call", "params": {"name": "memory_search", "arguments": {"query": huge}}}
    last.update(jsonrpc="2.0", id="req-8")
    headers = dict(MCP_HEADERS, Authorization=f"Bearer {member.token}")
    with httpx.Client(timeout=60) as http:
        for body, request_id in ((first, 7), (last, "req-8")):
            answer = http.post(f"{http_server}/mcp/memory/", content=json.dumps(body), headers=headers)
            assert answer.status_code == 413
            assert answer.json()["id"] == request_id and answer.json()["error"]["data"]["limit"] == 2 * 1024 * 1024
        # The body was read to its end: the connection is still good for the next request.
        assert http.post(f"{http_server}/mcp/memory/", json=TOOLS_LIST, headers=headers).status_code == 200


# --- the server's version --------------------------------------------------------------


async def test_the_server_reports_its_version(http_server, member):  # noqa: F811
    http, client = sdk_client(http_server, "roampal", member.token)
    async with http, client:
        info = client.server_info
    assert info is not None and info.name == "memproj-roampal" and info.version == memproj.__version__ != ""


def test_the_root_names_every_surface_and_its_address(http_server, member):  # noqa: F811
    index = httpx.get(f"{http_server}/", timeout=60)
    assert index.status_code == 200, index.text
    body = index.json()
    assert body["service"] == "memproj" and body["version"] == memproj.__version__
    assert set(body["mcp"]) == set(TOOLSETS)
    # Each MCP address it names is a live endpoint: tools/list answers there with the token.
    for name, url in body["mcp"].items():
        listed = httpx.post(url, json=TOOLS_LIST, headers=dict(MCP_HEADERS, Authorization=f"Bearer {member.token}"))
        assert listed.status_code == 200, (name, listed.text)
        assert "tools" in listed.text, name
    assert httpx.get(body["health"], timeout=60).json() == {"status": "ok"}
    assert httpx.get(body["admin"], timeout=60, follow_redirects=True).status_code == 200
    # A write is refused in coded JSON, as every error the server writes itself outside the admin.
    for method in ("POST", "PUT", "DELETE"):
        refused = httpx.request(method, f"{http_server}/", timeout=60)
        assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD", method
        error = refused.json()["error"]
        assert error["code"] == "METHOD_NOT_ALLOWED" and "GET, HEAD" in error["message"], error
    missing = httpx.get(f"{http_server}/no-such-page", timeout=60)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"


# --- the roampal hook command -------------------------------------------------------------


def run_hook(env: dict[str, str]) -> str:
    event = json.dumps({"prompt": "what do I use?", "session_id": "s1"}).encode()
    proc = subprocess.run(
        [sys.executable, str(HOOK), "user-prompt-submit"],
        input=event,
        env={"MEMPROJ_HOOK_TIMEOUT": "60", "PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout == b""  # a hook never breaks the session
    return proc.stderr.decode()


def test_the_roampal_hook_says_when_its_token_is_refused(http_server):  # noqa: F811
    refused = run_hook({"MEMPROJ_URL": http_server, "MEMPROJ_TOKEN": "mp_not-a-real-token"})
    assert "memproj refused the token in MEMPROJ_TOKEN: the bearer token was refused" in refused
    assert "unavailable" not in refused
    assert "MEMPROJ_TOKEN is not set" in run_hook({"MEMPROJ_URL": http_server})
    assert "memproj unavailable" in run_hook({"MEMPROJ_URL": "http://127.0.0.1:9", "MEMPROJ_TOKEN": "mp_x"})
