"""Rate limits against a real Redis (the embedded broker): exact under concurrency
across processes, headers on every response, 429 with the dialect's error."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import uuid

import httpx
import pytest
from redis.exceptions import NoScriptError

from policy.document import RateLimitPolicy
from policy.middleware import JSONRPC_RATE_LIMIT, RateLimitMiddleware
from policy.ratelimit import AsyncRateLimiter, LimiterBusy, RateDecision, RateLimiter, StaleRule, redis_url
from tests.harness.ports import HeldPort
from tests.harness.surfaces.asgi import asgi_transport

# Fixed windows start on multiples of their length on Redis's clock. A burst
# that straddles a window's end is counted in two windows and lets up to twice
# the limit through; that is the algorithm, not a fault, so a test that counts
# exact admissions starts its burst well inside one window.
EDGE_MARGIN_SECONDS = 120


def _inside_one_fixed_window(window_seconds: int, margin_seconds: float = EDGE_MARGIN_SECONDS) -> None:
    """Return when the current fixed window has at least ``margin_seconds`` left."""
    import time

    import redis

    client = redis.Redis.from_url(redis_url())
    try:
        seconds, microseconds = client.time()
    finally:
        client.close()
    left = window_seconds - (seconds + microseconds / 1e6) % window_seconds
    if left < margin_seconds:
        time.sleep(left + 0.1)


HAMMER_WINDOW_SECONDS = 86400


def _hammer(url: str, bucket: str, algorithm: str, limit: int, calls: int, start, results) -> None:
    from policy.document import RateLimitPolicy
    from policy.ratelimit import RateLimiter

    limiter = RateLimiter(url)
    rule = RateLimitPolicy(limit=limit, window_seconds=HAMMER_WINDOW_SECONDS, algorithm=algorithm)
    limiter.hit(f"{bucket}-warm-up", rule)  # connected before the race starts
    start.wait()
    allowed = sum(limiter.hit(bucket, rule).allowed for _ in range(calls))
    limiter.close()
    results.put(allowed)


@pytest.mark.parametrize("algorithm", ["fixed", "sliding"])
def test_the_limit_holds_exactly_across_processes(algorithm):
    """Four processes race 120 calls each at a limit of 150: exactly 150 pass."""
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(4), context.Queue()
    bucket = f"test-{uuid.uuid4()}"
    _inside_one_fixed_window(HAMMER_WINDOW_SECONDS)
    workers = [
        context.Process(target=_hammer, args=(redis_url(), bucket, algorithm, 150, 120, start, results))
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    allowed = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert sum(allowed) == 150, allowed
    assert all(n > 0 for n in allowed), f"the processes did not actually race: {allowed}"


@pytest.mark.parametrize("algorithm", ["fixed", "sliding"])
def test_remaining_counts_down_and_reset_is_within_the_window(algorithm):
    limiter = RateLimiter()
    rule = RateLimitPolicy(limit=3, window_seconds=600, algorithm=algorithm)
    bucket = f"test-{uuid.uuid4()}"
    _inside_one_fixed_window(600, margin_seconds=30)
    decisions = [limiter.hit(bucket, rule) for _ in range(5)]
    limiter.close()
    assert [d.allowed for d in decisions] == [True, True, True, False, False]
    assert [d.remaining for d in decisions] == [2, 1, 0, 0, 0]
    assert all(0 <= d.reset_seconds <= 600 for d in decisions)
    assert decisions[-1].headers()[-1][0] == b"retry-after"


class _ScriptsLost:
    """Set, the next EVALSHA is answered NOSCRIPT, as by a Redis that lost its
    scripts (a restart, SCRIPT FLUSH). Not a real flush: scripts are
    server-wide, and a test running beside this one on the same Redis may load
    the same script again between the flush and the next call."""

    def __init__(self) -> None:
        self.pending = False

    def answer(self, name: str) -> None:
        if self.pending and name == "EVALSHA":
            self.pending = False
            raise NoScriptError("No matching script. Please use EVAL.")


def _commands(client, monkeypatch, lost: _ScriptsLost) -> list[str]:
    """The names of the Redis commands ``client`` sends from now on."""
    sent: list[str] = []
    original = client.execute_command

    def spy(*args, **options):
        sent.append(str(args[0]).upper())
        lost.answer(sent[-1])
        return original(*args, **options)

    monkeypatch.setattr(client, "execute_command", spy)
    return sent


@pytest.mark.parametrize("algorithm", ["fixed", "sliding"])
def test_the_script_is_sent_by_its_sha_and_reloaded_after_a_flush(algorithm, monkeypatch):
    """EVALSHA, never the script text; a Redis that lost its scripts (restart,
    SCRIPT FLUSH) answers NOSCRIPT once and the script is loaded again."""
    limiter = RateLimiter()
    lost = _ScriptsLost()
    sent = _commands(limiter._client, monkeypatch, lost)
    rule = RateLimitPolicy(limit=5, window_seconds=600, algorithm=algorithm)
    bucket = f"test-{uuid.uuid4()}"
    _inside_one_fixed_window(600, margin_seconds=30)
    first = limiter.hit(bucket, rule)
    lost.pending = True
    second = limiter.hit(bucket, rule)
    limiter.close()
    assert [first.remaining, second.remaining] == [4, 3]
    assert "EVAL" not in sent
    assert sent.count("EVALSHA") >= 2 and "SCRIPT LOAD" in sent, sent


async def test_the_async_limiter_sends_the_script_by_its_sha(monkeypatch):
    from policy.ratelimit import AsyncRateLimiter

    limiter = AsyncRateLimiter()
    rule = RateLimitPolicy(limit=5, window_seconds=600, algorithm="fixed")
    bucket = f"test-{uuid.uuid4()}"
    _inside_one_fixed_window(600, margin_seconds=30)
    scripts = limiter._scripts()
    client = scripts["fixed"].registered_client
    sent: list[str] = []
    original = client.execute_command
    lost = _ScriptsLost()

    async def spy(*args, **options):
        sent.append(str(args[0]).upper())
        lost.answer(sent[-1])
        return await original(*args, **options)

    monkeypatch.setattr(client, "execute_command", spy)
    first = await limiter.hit(bucket, rule)
    lost.pending = True
    second = await limiter.hit(bucket, rule)
    await client.aclose()
    assert [first.remaining, second.remaining] == [4, 3]
    assert "EVAL" not in sent
    assert sent.count("EVALSHA") >= 2 and "SCRIPT LOAD" in sent, sent


async def _ok_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"ok": true}'})


def _static(limit: int, window: int = 600, margin_seconds: float = 20):
    rule = RateLimitPolicy(limit=limit, window_seconds=window, algorithm="fixed")
    bucket = f"test-{uuid.uuid4()}"
    _inside_one_fixed_window(window, margin_seconds=margin_seconds)

    async def resolve(scope):
        return bucket, rule

    return resolve


async def test_concurrent_clients_see_headers_and_the_limit_holds(patient_redis):
    app = RateLimitMiddleware(_ok_app, resolver=_static(20))
    transport = asgi_transport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        responses = await asyncio.gather(
            *(client.post("/mcp/memory", json={"jsonrpc": "2.0", "id": n, "method": "tools/list"}) for n in range(60))
        )
    ok = [r for r in responses if r.status_code == 200]
    limited = [r for r in responses if r.status_code == 429]
    assert len(ok) == 20 and len(limited) == 40
    for response in responses:
        assert response.headers["x-ratelimit-limit"] == "20"
        assert 0 <= int(response.headers["x-ratelimit-reset"]) <= 600
    assert sorted(int(r.headers["x-ratelimit-remaining"]) for r in ok) == list(range(20))
    for response in limited:
        assert response.headers["x-ratelimit-remaining"] == "0" and int(response.headers["retry-after"]) >= 1
        body = response.json()
        # The memory dialect speaks JSON-RPC: the error answers the request's own id.
        assert body["jsonrpc"] == "2.0" and isinstance(body["id"], int)
        assert body["error"]["code"] == JSONRPC_RATE_LIMIT and body["error"]["data"]["code"] == "RATE_LIMIT"
        assert "retry after" in body["error"]["message"]


async def test_other_paths_get_a_plain_json_error():
    app = RateLimitMiddleware(_ok_app, resolver=_static(1))
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        assert (await client.get("/")).status_code == 200
        refused = await client.get("/")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "RATE_LIMIT"


async def test_redis_down_fails_open_without_headers():
    from policy.ratelimit import AsyncRateLimiter

    app = RateLimitMiddleware(_ok_app, resolver=_static(1), limiter=AsyncRateLimiter("redis://127.0.0.1:1/0"))
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        response = await client.get("/")
    assert response.status_code == 200 and "x-ratelimit-limit" not in response.headers


@pytest.mark.django_db(transaction=True)
async def test_limits_are_per_token_and_come_from_the_tenant_policy(owner, member, outsider):
    """The real resolver: tenant A's policy allows 3 calls per window per token."""
    from asgiref.sync import sync_to_async

    from policy.services.policies import policy_apply

    await sync_to_async(policy_apply)(
        caller=owner.caller, yaml="version: '0.5.0'\nrate_limit: { limit: 3, window_seconds: 601 }\n"
    )
    _inside_one_fixed_window(601, margin_seconds=30)
    app = RateLimitMiddleware(_ok_app)
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:

        async def calls(token: str, n: int) -> list[int]:
            headers = {"Authorization": f"Bearer {token}"}
            return [(await client.get("/", headers=headers)).status_code for _ in range(n)]

        assert await calls(member.token, 5) == [200, 200, 200, 429, 429]
        # Another token of the same tenant has its own bucket.
        assert await calls(owner.token, 3) == [200, 200, 200]
        # Tenant B keeps the default (1,000 per 10 s).
        response = await client.get("/", headers={"Authorization": f"Bearer {outsider.token}"})
        assert response.headers["x-ratelimit-limit"] == "1000"


@pytest.mark.django_db(transaction=True)
async def test_the_served_app_wrapped_answers_the_memory_dialect_with_jsonrpc(owner):
    """The line the lead adds to memproj/asgi.py, exercised on the real Router."""
    from asgiref.sync import sync_to_async

    from memproj.asgi import Router
    from policy.services.policies import policy_apply

    await sync_to_async(policy_apply)(
        caller=owner.caller, yaml="version: '0.5.0'\nrate_limit: { limit: 1, window_seconds: 600 }\n"
    )
    _inside_one_fixed_window(600, margin_seconds=30)
    app = RateLimitMiddleware(Router())
    headers = {"Authorization": f"Bearer {owner.token}"}
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        health = await client.get("/", headers=headers)
        assert health.status_code == 200 and health.headers["x-ratelimit-remaining"] == "0"
        refused = await client.post(
            "/mcp/memory",
            headers={**headers, "Accept": "application/json, text/event-stream"},
            content=json.dumps({"jsonrpc": "2.0", "id": "call-7", "method": "tools/list"}),
        )
    assert refused.status_code == 429 and refused.json()["id"] == "call-7"
    assert refused.json()["error"]["data"]["code"] == "RATE_LIMIT"


async def test_a_dialect_registers_its_own_error_format():
    from policy.middleware import DIALECT_RENDERERS, register_dialect_rate_limit

    def render(code, message, details):
        return json.dumps({"error": {"code": code, "message": message, "details": details}})

    register_dialect_rate_limit("test-dialect", render)
    try:
        app = RateLimitMiddleware(_ok_app, resolver=_static(1))
        async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
            await client.post("/mcp/test-dialect", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            refused = await client.post("/mcp/test-dialect", json={"jsonrpc": "2.0", "id": 2, "method": "ping"})
            # An MCP path nobody registered still gets a JSON-RPC error.
            other = await client.post("/mcp/unregistered", json={"jsonrpc": "2.0", "id": 3, "method": "ping"})
    finally:
        DIALECT_RENDERERS.pop("test-dialect")
    body = refused.json()
    assert refused.status_code == 429 and body["id"] == 2
    assert json.loads(body["error"]["message"])["error"]["details"]["retry_after"] >= 1
    assert other.status_code == 429 and other.json()["id"] == 3 and other.json()["jsonrpc"] == "2.0"


async def test_the_limit_holds_across_two_web_processes():
    """Two uvicorn processes share one Redis count: 90 concurrent requests split
    across them at a limit of 30 get exactly 30 answers, from both processes."""
    import os
    import subprocess
    import sys
    import time

    # The readiness probes and the burst must fall in one window (see
    # _inside_one_fixed_window); starting the servers and probing them can take
    # a minute on a loaded machine, hence the day-long window and wide margin.
    window = 86400
    _inside_one_fixed_window(window, margin_seconds=300)
    bucket = f"test-{uuid.uuid4()}"
    env = dict(os.environ, RL_REDIS_URL=redis_url(), RL_BUCKET=bucket, RL_LIMIT="30", RL_WINDOW=str(window))
    # Each port stays bound until its uvicorn serves on it (see tests.harness.ports).
    with HeldPort() as first, HeldPort() as second:
        ports = [first.port, second.port]
        servers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "tests.policy.ratelimit_app:app",
                    "--fd",
                    str(held.fd),
                    "--log-level",
                    "warning",
                ],
                env=env,
                pass_fds=(held.fd,),
            )
            for held in (first, second)
        ]
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            deadline = time.monotonic() + 60
            for port in ports:  # wait until both answer
                while True:
                    try:
                        await client.get(f"http://127.0.0.1:{port}/ready")
                        break
                    except httpx.TransportError:
                        assert time.monotonic() < deadline, "uvicorn did not start"
                        await asyncio.sleep(0.2)
            responses = await asyncio.gather(*(client.get(f"http://127.0.0.1:{ports[n % 2]}/work") for n in range(90)))
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=30)
    ok = [r for r in responses if r.status_code == 200]
    # The two readiness probes took two of the 30.
    assert len(ok) == 28 and sum(r.status_code == 429 for r in responses) == 62
    assert len({r.text for r in ok}) == 2, "both processes served requests"
    assert all(r.headers["x-ratelimit-limit"] == "30" for r in responses)


@pytest.mark.django_db(transaction=True)
async def test_a_new_policy_applies_on_the_next_request_although_the_rule_is_cached(owner, member, monkeypatch):
    """The token's rule is cached per process; a policy apply bumps the policy
    generation in Redis, which every check compares, so the very next request
    counts under the new limit (the cache is made long here, so only the
    generation can have refreshed it)."""
    from asgiref.sync import sync_to_async

    from policy import middleware
    from policy.services.policies import policy_apply

    monkeypatch.setattr(middleware, "RULE_CACHE_SECONDS", 3600.0)
    app = RateLimitMiddleware(_ok_app)
    headers = {"Authorization": f"Bearer {member.token}"}
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        first = await client.get("/", headers=headers)
        assert first.headers["x-ratelimit-limit"] == "1000"  # the default, now cached for this token
        await sync_to_async(policy_apply)(
            caller=owner.caller, yaml="version: '0.5.0'\nrate_limit: { limit: 2, window_seconds: 601 }\n"
        )
        _inside_one_fixed_window(601, margin_seconds=30)
        answers = [await client.get("/", headers=headers) for _ in range(3)]
    assert [a.headers["x-ratelimit-limit"] for a in answers] == ["2", "2", "2"]
    assert [a.status_code for a in answers] == [200, 200, 429]


@pytest.mark.django_db(transaction=True)
async def test_the_rest_route_answers_a_rate_limit_in_the_dialects_own_error_body(owner):
    """/api/pce/<tool> answers its errors in pce's body (``{error: {code, message}}``,
    as pce-memory v0.14.0 does), and so its 429: not the generic body, not JSON-RPC.
    roampal's hook routes answer theirs in their own body (``{error, code}``)."""
    from asgiref.sync import sync_to_async

    from memproj.asgi import Router
    from policy.services.policies import policy_apply

    await sync_to_async(policy_apply)(
        caller=owner.caller, yaml="version: '0.5.0'\nrate_limit: { limit: 1, window_seconds: 600 }\n"
    )
    _inside_one_fixed_window(600, margin_seconds=30)
    app = RateLimitMiddleware(Router())
    headers = {"Authorization": f"Bearer {owner.token}"}
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        await client.get("/", headers=headers)
        refused = await client.post("/api/pce/pce.memory.search", headers=headers, json={"query": "x"})
        hooks = await client.post("/api/hooks/get-context", headers=headers, json={})
    assert refused.status_code == 429 and refused.headers["retry-after"]
    body = refused.json()
    assert body["error"]["code"] == "RATE_LIMIT" and body["error"]["details"]["limit"] == 1
    assert {"request_id", "trace_id", "policy_version"} <= set(body) and "jsonrpc" not in body
    assert hooks.status_code == 429 and hooks.json()["code"] == "RATE_LIMIT" and set(hooks.json()) == {"error", "code"}


@pytest.fixture
def patient_redis(monkeypatch):
    """The limiter waits for Redis's replies as long as they take. A reply
    slower than its 2 s socket timeout is read as a frozen Redis, and the
    request is served without a limit, by design (docs/policy.md): at most a
    pool's worth (50) at once. A Redis or machine stalled that long during a
    loaded full run once turned a burst at a limit of 20 into 20 + 50 = 70
    served. The tests that count what a burst on a healthy Redis admits take
    that path out; what they check (the pool, the count) is unchanged."""
    from policy import ratelimit

    monkeypatch.setattr(ratelimit, "SOCKET_TIMEOUT_SECONDS", 600)


class _FailOpenRecorder(AsyncRateLimiter):
    """Notes every check failing with anything but the pool's LimiterBusy or
    a stale rule: the middleware serves those requests unlimited, so a test
    counting admissions says why it saw more."""

    def __init__(self) -> None:
        super().__init__()
        self.failed_open: list[str] = []

    async def hit(self, bucket: str, rule: RateLimitPolicy, generation: str | None = None) -> RateDecision:
        try:
            return await super().hit(bucket, rule, generation)
        except (LimiterBusy, StaleRule):
            raise
        except Exception as error:
            self.failed_open.append(f"{type(error).__module__}.{type(error).__name__}: {error}")
            raise


async def test_a_burst_larger_than_the_redis_pool_is_still_limited(patient_redis):
    """400 concurrent requests at a limit of 20, far more than the limiter's
    Redis pool holds connections: requests wait for a pooled connection, and
    no more than 20 are served (a pool that ran out used to fail open: 220 of
    400 were served in an outside probe). A day-long window with a wide
    margin: even a stalled burst cannot straddle a window's end."""
    recorder = _FailOpenRecorder()
    app = RateLimitMiddleware(_ok_app, resolver=_static(20, window=86400, margin_seconds=300), limiter=recorder)
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        responses = await asyncio.gather(*(client.post("/api/memory/memory_stats", json={}) for _ in range(400)))
    statuses = [r.status_code for r in responses]
    served = statuses.count(200)
    failed_open = f"{len(recorder.failed_open)} checks failed open: {recorder.failed_open[:3]}"
    assert served <= 20, f"{served} of 400 served at a limit of 20; {failed_open}"
    assert not recorder.failed_open, failed_open
    assert set(statuses) <= {200, 429, 503}, sorted(set(statuses))
    if 503 not in statuses:  # none waited out the pool: every request was counted
        assert served == 20 and statuses.count(429) == 380


async def _held(limiter, count: int):
    """Take ``count`` of the limiter's pooled connections (in this event loop)."""
    pool = limiter._scripts()["fixed"].registered_client.connection_pool
    return pool, [await pool.get_connection() for _ in range(count)]


def _render_busy_dialect(code, message, details):
    return json.dumps({"error": {"code": code, "message": message, "details": details}, "dialect": "test-busy"})


@pytest.mark.parametrize("path", ["/mcp/memory", "/api/test-busy/some_tool", "/"])
async def test_a_saturated_pool_is_answered_busy_not_served_unlimited(path, monkeypatch):
    """No pooled connection within the wait: 503 with Retry-After and the
    surface's coded overload error (MCP: JSON-RPC; a dialect's REST route: its
    own body; elsewhere the plain body), never the app."""
    from policy.middleware import DIALECT_RENDERERS, JSONRPC_SERVER_ERROR
    from policy.ratelimit import AsyncRateLimiter

    monkeypatch.setitem(DIALECT_RENDERERS, "test-busy", _render_busy_dialect)

    limiter = AsyncRateLimiter(max_connections=2, pool_timeout=0.2)
    served: list[str] = []

    async def app(scope, receive, send):
        served.append(scope["path"])
        await _ok_app(scope, receive, send)

    middleware = RateLimitMiddleware(app, resolver=_static(100), limiter=limiter)
    pool, connections = await _held(limiter, 2)
    try:
        async with httpx.AsyncClient(transport=asgi_transport(middleware), base_url="http://testserver") as client:
            refused = await client.post(path, json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"})
    finally:
        for connection in connections:
            await pool.release(connection)
    assert served == []
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert "x-ratelimit-limit" not in refused.headers
    body = refused.json()
    if path.startswith("/mcp/"):
        assert body["id"] == 9 and body["error"]["code"] == JSONRPC_SERVER_ERROR
        assert body["error"]["data"]["code"] == "TIMEOUT" and body["error"]["data"]["retry_after"] == 1
    elif path.startswith("/api/"):
        assert body["dialect"] == "test-busy" and body["error"]["code"] == "TIMEOUT"
        assert body["error"]["details"]["retry_after"] == 1
    else:
        assert body["error"]["code"] == "SERVER_BUSY" and body["error"]["details"]["retry_after"] == 1
    # Once a connection is free again the same middleware counts and serves.
    async with httpx.AsyncClient(transport=asgi_transport(middleware), base_url="http://testserver") as client:
        again = await client.post(path, json={"jsonrpc": "2.0", "id": 10, "method": "tools/list"})
    assert again.status_code == 200 and again.headers["x-ratelimit-limit"] == "100"


def test_the_sync_limiter_waits_for_a_pooled_connection_and_refuses_when_saturated():
    """The synchronous limiter shares one bounded pool between threads: 64
    threads over 4 connections are all counted; with every connection held,
    a check raises LimiterBusy (not a redis ConnectionError a caller would read
    as Redis being down)."""
    from concurrent.futures import ThreadPoolExecutor

    from policy.ratelimit import LimiterBusy

    limiter = RateLimiter(max_connections=4, pool_timeout=5)
    rule = RateLimitPolicy(limit=50, window_seconds=600, algorithm="fixed")
    bucket = f"test-{uuid.uuid4()}"
    _inside_one_fixed_window(600, margin_seconds=30)
    with ThreadPoolExecutor(64) as threads:
        decisions = list(threads.map(lambda _: limiter.hit(bucket, rule), range(200)))
    assert sum(d.allowed for d in decisions) == 50
    busy = RateLimiter(max_connections=1, pool_timeout=0.1)
    pool = busy._client.connection_pool
    held = pool.get_connection()
    try:
        with pytest.raises(LimiterBusy):
            busy.hit(bucket, rule)
    finally:
        pool.release(held)
    assert busy.hit(f"test-{uuid.uuid4()}", rule).allowed  # a free connection again: counted
    busy.close()
    limiter.close()
