"""Every answer of the served application carries the security headers
Django's middleware gives its own, the refusals made before Django runs
included (a body over its limit, a token refused before its body is read, an
unknown toolset, a method the MCP endpoint does not take, the rate limit's 429)."""

from __future__ import annotations

import random

import httpx
import pytest
from django.test import override_settings

from tests.harness.surfaces.answers import SECURITY_HEADERS
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def _client() -> httpx.AsyncClient:
    from memproj.asgi import application

    address = f"198.51.100.{random.randint(1, 254)}"
    return httpx.AsyncClient(
        transport=asgi_transport(application, client=(address, 40000)), base_url="http://testserver"
    )


def _security(response: httpx.Response) -> dict[str, str]:
    return {name: response.headers.get(name, "") for name in SECURITY_HEADERS}


async def test_refusals_made_before_django_runs_carry_the_security_headers(member):
    bearer = {"Authorization": f"Bearer {member.token}"}
    async with _client() as client:
        answers = {
            "no token on the REST route": await client.post("/api/memory/memory_search", json={"query": "x"}),
            "made-up token on MCP": await client.post(
                "/mcp/memory/",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={**JSON, "Authorization": "Bearer nope"},
            ),
            "unknown toolset": await client.post("/mcp/nosuch/", json={}, headers={**JSON, **bearer}),
            "body over the limit": await client.post(
                "/api/memory/memory_search", content=b"x" * (2 * 1024 * 1024), headers={**JSON, **bearer}
            ),
            "a method other than POST": await client.delete("/mcp/memory/", headers={**JSON, **bearer}),
            "a Django route": await client.post(
                "/api/memory/memory_search", json={"query": "deploy"}, headers={**JSON, **bearer}
            ),
        }
    statuses = {name: answer.status_code for name, answer in answers.items()}
    assert statuses == {
        "no token on the REST route": 401,
        "made-up token on MCP": 401,
        "unknown toolset": 404,
        "body over the limit": 413,
        "a method other than POST": 405,
        "a Django route": 200,
    }
    for name, answer in answers.items():
        assert _security(answer) == SECURITY_HEADERS, name
        # Each header once: Django's own answers are not given a second copy.
        assert all(len(answer.headers.get_list(header)) == 1 for header in SECURITY_HEADERS), name


async def test_a_rate_limited_answer_carries_the_security_headers():
    window = random.randint(100_000, 900_000)
    with override_settings(MEMPROJ_ANONYMOUS_RATE_LIMIT={"LIMIT": 1, "WINDOW_SECONDS": window}):
        async with _client() as client:
            answers = [await client.post("/api/memory/memory_search", json={"query": "x"}) for _ in range(3)]
    assert [a.status_code for a in answers] == [401, 429, 429], answers[-1].text
    assert _security(answers[-1]) == SECURITY_HEADERS


async def test_the_hooks_the_admin_and_the_health_checks_carry_the_security_headers(member):
    bearer = {"Authorization": f"Bearer {member.token}"}
    async with _client() as client:
        answers = {
            "roampal hook, no token": await client.post("/api/hooks/get-context", json={"query": "x"}),
            "roampal hook": await client.post(
                "/api/hooks/get-context", json={"query": "deploy", "conversation_id": "c1"}, headers=bearer
            ),
            "roampal hook, bad body": await client.post(
                "/api/hooks/stop", content=b"{not json", headers={**JSON, **bearer}
            ),
            "admin login page": await client.get("/admin/login/"),
            "admin, not signed in": await client.get("/admin/"),
            "liveness": await client.get("/healthz"),
            "readiness": await client.get("/readyz"),
        }
    statuses = {name: answer.status_code for name, answer in answers.items()}
    assert statuses == {
        "roampal hook, no token": 401,
        "roampal hook": 200,
        "roampal hook, bad body": 400,
        "admin login page": 200,
        "admin, not signed in": 302,
        "liveness": 200,
        "readiness": 200,
    }, {name: answer.text[:200] for name, answer in answers.items()}
    for name, answer in answers.items():
        assert _security(answer) == SECURITY_HEADERS, name
        assert all(len(answer.headers.get_list(header)) == 1 for header in SECURITY_HEADERS), name
