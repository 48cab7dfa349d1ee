"""/healthz and /readyz are not rate limited: a load balancer polling them from
one address is never answered 429 while the process is healthy, and its probes
count nothing in that address's anonymous bucket, so the real clients behind
the same address keep their whole budget. Through the served application (the
real rate limiter and Redis)."""

from __future__ import annotations

import random

import httpx
import pytest
from django.test import override_settings

from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)
LIMIT = 3


def _client(address: str) -> httpx.AsyncClient:
    from memproj.asgi import application

    return httpx.AsyncClient(
        transport=asgi_transport(application, client=(address, 40000)), base_url="http://testserver"
    )


async def test_health_checks_past_the_anonymous_limit_are_answered_and_count_nothing():
    # A window no other test uses: the address's bucket starts empty.
    window = random.randint(100_000, 900_000)
    address = f"203.0.113.{random.randint(1, 254)}"
    with override_settings(MEMPROJ_ANONYMOUS_RATE_LIMIT={"LIMIT": LIMIT, "WINDOW_SECONDS": window}):
        async with _client(address) as client:
            probes = []
            for _ in range(LIMIT * 3):
                probes.append(await client.get("/readyz"))
                probes.append(await client.get("/healthz"))
                probes.append(await client.head("/readyz"))
            # A client without a token behind the same address: its first call
            # is the first its bucket counts.
            first = await client.post("/api/memory/memory_search", json={"query": "x"})
    assert [p.status_code for p in probes] == [200] * len(probes), [p.text for p in probes if p.status_code != 200]
    for probe in probes:
        assert "x-ratelimit-limit" not in probe.headers, probe.headers
    assert probes[0].json()["status"] == "ready" and probes[1].json() == {"status": "ok"}
    assert first.status_code == 401, first.text
    assert first.headers["x-ratelimit-limit"] == str(LIMIT)
    assert first.headers["x-ratelimit-remaining"] == str(LIMIT - 1)
