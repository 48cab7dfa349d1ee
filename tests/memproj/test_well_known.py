"""The ``resource_metadata`` URL that every MCP endpoint advertises in its 401
``WWW-Authenticate`` header answers with an RFC 9728 document (issue 15, item 8a)."""

from __future__ import annotations

import re

import httpx
import pytest
from django.conf import settings

from mcp_server.registry import TOOLSETS
from tests.harness.surfaces.asgi import asgi_transport


@pytest.fixture(scope="module")
def asgi_client():
    from memproj.asgi import application

    # No lifespan: the 401 and the metadata document need no MCP session manager.
    return httpx.AsyncClient(transport=asgi_transport(application), base_url="http://127.0.0.1:8000")


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
async def test_advertised_resource_metadata_url_serves_the_document(asgi_client, toolset):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    unauthorized = await asgi_client.post(f"/mcp/{toolset}", json=body, headers=headers)
    assert unauthorized.status_code == 401
    challenge = unauthorized.headers["www-authenticate"]
    found = re.search(r'resource_metadata="([^"]+)"', challenge)
    assert found is not None, challenge
    url = found.group(1)
    assert url.startswith(settings.MEMPROJ_PUBLIC_URL.rstrip("/") + "/.well-known/oauth-protected-resource/")

    answer = await asgi_client.get(httpx.URL(url).path)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/json")
    document = answer.json()
    # RFC 9728 section 3.3: the resource must be the one the client asked about.
    assert document["resource"] == f"{settings.MEMPROJ_PUBLIC_URL.rstrip('/')}/mcp/{toolset}"
    assert document["bearer_methods_supported"] == ["header"]
    assert "read" in document["scopes_supported"] and f"toolset:{toolset}" in document["scopes_supported"]
    assert answer.headers["access-control-allow-origin"] == "*"


async def test_unknown_toolset_and_writes_are_refused(asgi_client):
    assert (await asgi_client.get("/.well-known/oauth-protected-resource/mcp/nope")).status_code == 404
    first = sorted(TOOLSETS)[0]
    assert (await asgi_client.post(f"/.well-known/oauth-protected-resource/mcp/{first}")).status_code == 405
