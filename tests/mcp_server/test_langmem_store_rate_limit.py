"""The LangGraph store endpoint (``POST /api/langmem/store/``) costs one call of
the token's rate limit per op, not one per request: a batch of up to 100 ops
(each a hybrid search, say) used to cost one unit. A batch within what the
token has left spends exactly ``len(ops)``; one over it is refused whole
before any op runs (429, the body and headers the middleware answers a
refused request on this path) and spends nothing beyond the request's own
call. Through the real app: the rate-limit middleware with the real token
resolver and Redis, the ASGI router, Django, PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from redis.exceptions import ConnectionError as RedisConnectionError

from memory import api
from memory.models import Memory, MemoryEvent
from policy.document import RateLimitPolicy
from policy.middleware import RateLimitMiddleware
from policy.ratelimit import AsyncRateLimiter, LimiterBusy, RateDecision
from policy.services.policies import policy_apply
from tests.harness.surfaces.asgi import asgi_transport
from tests.policy.test_ratelimit import _inside_one_fixed_window

pytestmark = pytest.mark.django_db(transaction=True)

STORE = "/api/langmem/store/"
NS = ["memories", "rl"]
WINDOW = 600


def search(query: str) -> dict[str, Any]:
    return {"op": "search", "namespace_prefix": NS, "query": query, "limit": 5}


def put(key: str, content: str) -> dict[str, Any]:
    return {"op": "put", "namespace": NS, "key": key, "value": {"content": content}}


async def post(app: Any, member: Any, ops: list[dict[str, Any]]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {member.token}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        return await client.post(STORE, content=json.dumps({"ops": ops}).encode(), headers=headers)


def limited(limiter: AsyncRateLimiter | None = None) -> RateLimitMiddleware:
    """The served router behind the rate limiter and its real token resolver."""
    from memproj.asgi import Router

    return RateLimitMiddleware(Router(), limiter=limiter)


def unlimited() -> Any:
    from memproj.asgi import Router

    return Router()


async def with_limit(owner: Any, limit: int, algorithm: str = "fixed") -> None:
    """Tenant A's tokens get ``limit`` calls per window."""
    await sync_to_async(policy_apply)(
        caller=owner.caller,
        yaml=f"version: '0.5.0'\nrate_limit: {{ limit: {limit}, window_seconds: {WINDOW}, algorithm: {algorithm} }}\n",
    )
    _inside_one_fixed_window(WINDOW, margin_seconds=30)


@pytest.fixture
def searches(monkeypatch) -> list[str]:
    """The queries of the hybrid searches the store runs."""
    ran: list[str] = []
    original = api.memory_search_accessed

    def spy(*, caller, query):
        ran.append(query.text)
        return original(caller=caller, query=query)

    monkeypatch.setattr(api, "memory_search_accessed", spy)
    return ran


async def seeded(member: Any) -> None:
    """Items for the searches to find (and so to mark accessed), written without a limit."""
    answer = await post(unlimited(), member, [put(f"k{n}", f"the harbour ferry timetable {n}") for n in range(3)])
    assert answer.status_code == 200, answer.text[:300]


async def footprint(member: Any) -> tuple[int, int]:
    tenant = member.caller.tenant_id
    return (
        await Memory.objects.filter(tenant_id=tenant).acount(),
        await MemoryEvent.objects.filter(tenant_id=tenant).acount(),
    )


@pytest.mark.parametrize("algorithm", ["fixed", "sliding"])
async def test_a_batch_over_the_budget_is_refused_whole_before_any_op_runs(owner, member, searches, algorithm):
    """A limit of 10: a batch of 3 searches leaves 7; then one batch of 8
    searches and a put (9 calls) is refused: the old route ran all 8 searches
    and the put for one unit. Now 429 in the middleware's body for this path, no
    search ran, nothing was written, and only the request's own call was spent:
    a batch of the 6 calls left is served after it, and then nothing more."""
    await seeded(member)
    await with_limit(owner, 10, algorithm)
    app = limited()
    assert (await post(app, member, [search(f"ferry {n}") for n in range(3)])).status_code == 200
    assert len(searches) == 3
    before = await footprint(member)
    refused = await post(app, member, [search(f"ferry {n}") for n in range(8)] + [put("new", "not written")])
    assert refused.status_code == 429, refused.text[:300]
    assert len(searches) == 3 and await footprint(member) == before
    body = refused.json()
    # The body the middleware answers a request it refuses on this path.
    assert set(body) == {"error", "request_id"} and body["error"]["code"] == "RATE_LIMIT"
    assert body["error"]["details"]["limit"] == 10 and body["error"]["details"]["retry_after"] >= 1
    message = body["error"]["message"]
    assert "9 operations cost 9 calls" in message and "6 of its 10 calls per window left" in message
    assert refused.headers["content-type"] == "application/json"
    assert 1 <= int(refused.headers["retry-after"]) <= WINDOW
    assert refused.headers["x-ratelimit-limit"] == "10" and refused.headers["x-ratelimit-remaining"] == "6"
    assert 0 <= int(refused.headers["x-ratelimit-reset"]) <= WINDOW

    served = await post(app, member, [search(f"ferry {n}") for n in range(6)])
    assert served.status_code == 200, served.text[:300]
    assert len(served.json()["results"]) == 6 and len(searches) == 9
    assert served.headers["x-ratelimit-remaining"] == "0"
    # The budget is spent: the next request is refused by the middleware itself.
    spent = await post(app, member, [search("ferry")])
    assert spent.status_code == 429 and spent.headers["x-ratelimit-remaining"] == "0"
    assert set(spent.json()) == set(body) and spent.json()["error"]["code"] == "RATE_LIMIT"
    assert len(searches) == 9


@pytest.mark.parametrize("algorithm", ["fixed", "sliding"])
async def test_a_batch_within_the_budget_spends_exactly_one_call_per_op(owner, member, searches, algorithm):
    await seeded(member)
    await with_limit(owner, 10, algorithm)
    app = limited()
    first = await post(app, member, [search(f"harbour {n}") for n in range(4)])
    assert first.status_code == 200, first.text[:300]
    assert first.headers["x-ratelimit-limit"] == "10" and first.headers["x-ratelimit-remaining"] == "6"
    one = await post(app, member, [search("timetable")])
    assert one.status_code == 200 and one.headers["x-ratelimit-remaining"] == "5"
    # Every kind of op counts, writes too.
    mixed = await post(app, member, [put("k9", "the ferry runs hourly"), {"op": "get", "namespace": NS, "key": "k1"}])
    assert mixed.status_code == 200 and mixed.headers["x-ratelimit-remaining"] == "3"
    assert len(searches) == 5


async def test_a_batch_larger_than_the_limit_says_how_many_ops_a_request_may_have(owner, member, searches):
    await with_limit(owner, 3)
    refused = await post(limited(), member, [search(f"q{n}") for n in range(4)])
    assert refused.status_code == 429 and searches == []
    assert "Send at most 3 operations per request" in refused.json()["error"]["message"]


async def test_a_malformed_batch_is_refused_for_its_op_and_charged_one_call(owner, member, searches):
    """The ops are checked before the batch is charged: a malformed one answers
    its own 400 and the request costs its one call, not one per op."""
    await with_limit(owner, 10)
    answer = await post(limited(), member, [search("a"), search("b"), {"op": "upsert"}])
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "INVALID_ARGUMENT"
    assert answer.headers["x-ratelimit-remaining"] == "9" and searches == []


async def test_redis_down_serves_the_batch_without_a_limit(owner, member, searches):
    """Fail open, as the middleware does (policy/middleware.py): no count, no
    budget, no X-RateLimit-* headers; the batch runs."""
    await seeded(member)
    await with_limit(owner, 2)
    answer = await post(limited(AsyncRateLimiter("redis://127.0.0.1:1/0")), member, [search("ferry")] * 5)
    assert answer.status_code == 200, answer.text[:300]
    assert len(searches) == 5 and "x-ratelimit-limit" not in answer.headers


class _ChargesFail(AsyncRateLimiter):
    """Counts a request's own call in Redis (``hit``); its batch's further
    calls (``charge``) fail with ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.failed = 0

    async def charge(
        self, bucket: str, rule: RateLimitPolicy, cost: int, generation: str | None = None
    ) -> RateDecision:
        self.failed += 1
        raise self.error


async def test_redis_lost_between_the_request_and_its_charge_serves_the_batch(owner, member, searches):
    await seeded(member)
    await with_limit(owner, 2)
    limiter = _ChargesFail(RedisConnectionError("gone"))
    answer = await post(limited(limiter), member, [search("ferry")] * 5)
    assert answer.status_code == 200 and len(searches) == 5 and limiter.failed == 1
    # The headers of the request's own check, the last one that counted.
    assert answer.headers["x-ratelimit-remaining"] == "1"


async def test_a_saturated_limiter_at_the_charge_answers_busy_and_runs_nothing(owner, member, searches):
    await with_limit(owner, 100)
    limiter = _ChargesFail(LimiterBusy("no connection"))
    answer = await post(limited(limiter), member, [search("ferry")] * 5)
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1" and searches == []
    assert limiter.failed == 1  # the request itself was counted; its batch's charge was not
    assert answer.json()["error"]["code"] == "SERVER_BUSY" and "x-ratelimit-limit" not in answer.headers
