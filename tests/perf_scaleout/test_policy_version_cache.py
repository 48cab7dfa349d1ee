"""The HTTP tier keeps each tenant's current policy version between requests
(policy/policycache.py): no policy row is read per call, yet a policy applied
anywhere takes effect on the next request, and within TOKEN_CACHE_SECONDS
while Redis cannot be reached."""

from __future__ import annotations

import json

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from policy import policycache, tokencache
from policy.middleware import RateLimitMiddleware
from policy.models import PolicyVersion
from policy.ratelimit import AsyncRateLimiter, policy_generation_bump
from policy.selectors.policies import policy_current
from policy.services.policies import policy_apply

pytestmark = pytest.mark.django_db(transaction=True)


def _version_app(tenant_id):  # type: ignore[no-untyped-def]
    """An app that answers the tenant's policy version as a request reads it."""

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        version = await sync_to_async(lambda: policy_current(tenant_id=tenant_id).version)()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps({"version": version}).encode()})

    return app


def _switch_elsewhere(tenant_id, version: str) -> None:  # type: ignore[no-untyped-def]
    """What another process's policy apply leaves behind: a new current row in
    the database (this process's cache untouched)."""
    current = PolicyVersion.objects.get(tenant_id=tenant_id, is_current=True)
    PolicyVersion.objects.filter(pk=current.pk).update(is_current=False)
    current.pk = None
    current.version = version
    current.major, current.minor, current.patch = (int(p) for p in version.split("."))
    current.document = {**current.document, "version": version}
    current.is_current = True
    current.save()


def _client(app: RateLimitMiddleware) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]  # its scope is a dict, httpx's a MutableMapping
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


@pytest.fixture
def caching():  # type: ignore[no-untyped-def]
    """What the server's lifespan startup does to a web process."""
    policycache.policy_caching_enable()
    tokencache.token_cache_clear()
    yield
    policycache.policy_caching_disable()
    tokencache.token_cache_clear()


async def test_only_the_servers_startup_turns_the_cache_on():
    """Building a limiter or a middleware changes nothing in the process; the
    lifespan startup of an application behind the rate limiter does."""

    async def lifespan_app(scope, receive, send):  # type: ignore[no-untyped-def]
        await receive()
        await send({"type": "lifespan.startup.complete"})

    app = RateLimitMiddleware(lifespan_app, limiter=AsyncRateLimiter())
    assert not policycache.policy_caching()
    sent: list[dict[str, str]] = []

    async def receive():  # type: ignore[no-untyped-def]
        return {"type": "lifespan.startup"}

    async def send(message):  # type: ignore[no-untyped-def]
        sent.append(message)

    try:
        await app({"type": "lifespan"}, receive, send)
        assert sent == [{"type": "lifespan.startup.complete"}]
        assert policycache.policy_caching()
    finally:
        policycache.policy_caching_disable()


def test_a_cached_version_reads_no_policy_row(owner, caching):
    policy_current(tenant_id=owner.caller.tenant_id)
    with CaptureQueriesContext(connection) as queries:
        for _ in range(3):
            policy_current(tenant_id=owner.caller.tenant_id)
    assert [q["sql"] for q in queries.captured_queries] == []


def test_without_the_http_tier_every_read_sees_the_row(owner):
    """Workers, the stdio server and other callers read the row every time."""
    assert not policycache.policy_caching()
    tenant = owner.caller.tenant_id
    policy_current(tenant_id=tenant)
    _switch_elsewhere(tenant, "7.0.0")
    assert policy_current(tenant_id=tenant).version == "7.0.0"


def test_an_apply_in_this_process_is_seen_at_once(owner, caching):
    tenant = owner.caller.tenant_id
    policy_current(tenant_id=tenant)
    policy_apply(caller=owner.caller, yaml="version: '3.1.4'\n")
    assert policy_current(tenant_id=tenant).version == "3.1.4"


async def test_an_apply_elsewhere_takes_effect_on_the_next_request(owner, caching):
    """The generation in Redis, which the rate limiter compares before every
    request, clears the cached version: the request right after the other
    process's apply reads the new one."""
    tenant = owner.caller.tenant_id
    app = RateLimitMiddleware(_version_app(tenant))
    headers = {"Authorization": f"Bearer {owner.token}"}
    async with _client(app) as client:
        first = (await client.get("/v", headers=headers)).json()["version"]
        await sync_to_async(_switch_elsewhere)(tenant, "9.0.0")
        assert (await client.get("/v", headers=headers)).json()["version"] == first, "the version is cached"
        await sync_to_async(policy_generation_bump)()
        assert (await client.get("/v", headers=headers)).json()["version"] == "9.0.0"


async def test_with_redis_unreachable_a_version_is_kept_at_most_the_cache_seconds(owner, monkeypatch, caching):
    tenant = owner.caller.tenant_id
    clock = [1000.0]
    monkeypatch.setattr(tokencache.time, "monotonic", lambda: clock[0])
    # Nothing listens on port 9 of loopback: every check fails and the request is served unlimited.
    app = RateLimitMiddleware(_version_app(tenant), limiter=AsyncRateLimiter("redis://127.0.0.1:9/0"))
    headers = {"Authorization": f"Bearer {owner.token}"}
    async with _client(app) as client:
        first = (await client.get("/v", headers=headers)).json()["version"]
        await sync_to_async(_switch_elsewhere)(tenant, "8.0.0")
        clock[0] += tokencache.TOKEN_CACHE_SECONDS - 0.5
        assert (await client.get("/v", headers=headers)).json()["version"] == first
        clock[0] += 1.0
        assert (await client.get("/v", headers=headers)).json()["version"] == "8.0.0"
