"""Requests without a valid token count per source address: no token, a
made-up one, a revoked one all share the address's bucket, so a fresh bearer
value buys nothing; a live token keeps its own bucket. Through the served app
(the real Router and resolver, the real Redis)."""

from __future__ import annotations

import random
import uuid

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings

from memproj.asgi import Router
from policy.middleware import RateLimitMiddleware
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)
LIMIT = 4


def _client(address: str) -> httpx.AsyncClient:
    app = RateLimitMiddleware(Router())
    transport = asgi_transport(app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def test_invalid_tokens_are_limited_per_source_address(owner, member):
    from policy.models import ApiToken
    from policy.services.tokens import token_revoke

    await sync_to_async(token_revoke)(ApiToken.objects.filter(pk=owner.caller.token_id))
    # A window no other test uses: the bucket starts empty.
    window = random.randint(100_000, 900_000)
    address = f"198.51.100.{random.randint(1, 254)}"
    with override_settings(MEMPROJ_ANONYMOUS_RATE_LIMIT={"LIMIT": LIMIT, "WINDOW_SECONDS": window}):
        async with _client(address) as client:
            url = "/api/memory/memory_search"
            answers = [
                await client.post(url, json={"query": "x"}, headers={"Authorization": f"Bearer mp_{uuid.uuid4()}"}),
                await client.post(url, json={"query": "x"}, headers={"Authorization": f"Bearer {owner.token}"}),
                await client.post(url, json={"query": "x"}, headers={"Authorization": "Bearer not-even-a-token"}),
                await client.post(url, json={"query": "x"}),
                await client.post(url, json={"query": "x"}, headers={"Authorization": f"Bearer mp_{uuid.uuid4()}"}),
                await client.post("/mcp/memory/", json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"}),
            ]
            live = await client.post(url, json={"query": "x"}, headers={"Authorization": f"Bearer {member.token}"})
        async with _client("198.51.100.255") as other:
            elsewhere = await other.post(url, json={"query": "x"}, headers={"Authorization": "Bearer mp_x"})
    assert [a.status_code for a in answers] == [401] * LIMIT + [429, 429]
    refused, mcp = answers[LIMIT], answers[LIMIT + 1]
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["code"] == "RATE_LIMIT" and refused.json()["error"]["details"]["limit"] == LIMIT
    assert mcp.json()["id"] == 9 and mcp.json()["error"]["data"]["code"] == "RATE_LIMIT"
    # A live token has its own bucket, another address its own.
    assert live.status_code == 200 and live.headers["x-ratelimit-limit"] != str(LIMIT)
    assert elsewhere.status_code == 401
