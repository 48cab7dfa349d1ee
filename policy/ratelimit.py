"""Rate limits per API token in Redis (pce-memory v0.14.0's default: 1,000 calls
per 10 s), fixed or sliding window as the tenant policy's ``rate_limit`` says.

Each check is one Lua script, so it is atomic in Redis: any number of web
processes share one count without a race. The scripts are sent by their SHA1
(``EVALSHA``); redis-py's Script objects load a script the server does not know
(a restarted or another Redis: ``NOSCRIPT``) and retry once. The clock is Redis's own (``TIME``),
so processes with skewed clocks still agree on the window.

- fixed: one counter per window (``INCR`` + ``PEXPIRE`` on its first hit); every
  call counts, refused ones too, so a client hammering past the limit stays
  refused until the window ends.
- sliding: a log of the accepted calls of the last window (a sorted set scored
  by milliseconds); a call is accepted while fewer than ``limit`` are in it, and
  refused calls are not logged.

A check may count ``cost`` calls at once (``charge``: a batch's further
operations, charged by the route that runs them through the middleware's ``CallBudget``): all or
nothing, in both algorithms. Accepted, the counter (the log) grows by ``cost``;
refused, nothing is counted (the batch runs none of its calls) and the decision
says how many calls remain, and when enough capacity frees for ``cost`` calls
(sliding: when that many logged calls have left the window; fixed: the window's
end). A check of one call is the plain check above.

The Redis server is ``MEMPROJ_RATE_LIMIT_REDIS_URL`` if set, else the Celery
broker's (the embedded one by default).

Connections come from a bounded blocking pool (``POOL_MAX_CONNECTIONS`` per
client, i.e. per event loop or per synchronous limiter): a burst of checks
larger than the pool waits for a connection, up to ``POOL_WAIT_SECONDS``; a
check that gets none in that time raises ``LimiterBusy`` (the limiter is
saturated: the caller must not treat it as Redis being down, which it serves
without a limit, but refuse the request as retryable). Redis down or
unreachable is still a redis ``ConnectionError`` or ``TimeoutError``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from policy.document import RateLimitPolicy

logger = logging.getLogger(__name__)

KEY_PREFIX = "memproj:rl:"
# Bumped after every committed policy apply (any tenant) and token revocation:
# web processes cache each token's rule and verified tokens, and every check
# compares this with the generation the caches were filled under, so a new
# policy applies, and a revoked token is refused, from the next request on.
GENERATION_KEY = f"{KEY_PREFIX}policy-generation"

# Prepended to both scripts: when the caller's rule was resolved under another
# policy generation, count nothing and say so (the caller re-resolves and asks again).
GENERATION_CHECK = """
if ARGV[3] ~= '' then
  local generation = redis.call('GET', KEYS[2]) or '0'
  if generation ~= ARGV[3] then
    return {-1, 0, 0, generation}
  end
end
"""

FIXED_WINDOW = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local start = now_ms - (now_ms % window_ms)
local cost = tonumber(ARGV[4])
local key = KEYS[1] .. ':' .. string.format('%d', start)
local reset_ms = start + window_ms - now_ms
if cost > 1 then
  -- Several calls at once: all or nothing, a refused charge counts nothing.
  local used = tonumber(redis.call('GET', key) or '0')
  if used + cost > limit then
    return {0, limit - used, reset_ms}
  end
end
local count = redis.call('INCRBY', key, cost)
if count == cost then
  redis.call('PEXPIRE', key, window_ms + 1000)
end
if count <= limit then
  return {1, limit - count, reset_ms}
end
return {0, 0, reset_ms}
"""

SLIDING_WINDOW = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local cost = tonumber(ARGV[4])
local key = KEYS[1]
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now_ms - window_ms))
local count = redis.call('ZCARD', key)
if count + cost <= limit then
  local seq = redis.call('INCRBY', key .. ':seq', cost)
  local score = string.format('%d', now_ms)
  for n = seq - cost + 1, seq do
    redis.call('ZADD', key, score, t[1] .. '.' .. t[2] .. '-' .. n)
  end
  redis.call('PEXPIRE', key, window_ms)
  redis.call('PEXPIRE', key .. ':seq', window_ms)
  count = count + cost
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {1, limit - count, tonumber(oldest[2]) + window_ms - now_ms}
end
-- Refused, nothing logged: capacity for ``cost`` calls frees when the logged
-- call at this index (from the oldest) leaves the window; never, for a cost
-- over the limit (then the whole window).
local reset_ms = window_ms
if cost <= limit then
  local index = count + cost - limit - 1
  local entry = redis.call('ZRANGE', key, index, index, 'WITHSCORES')
  if entry[2] then
    reset_ms = tonumber(entry[2]) + window_ms - now_ms
  end
end
return {0, limit - count, reset_ms}
"""

SCRIPTS = {"fixed": GENERATION_CHECK + FIXED_WINDOW, "sliding": GENERATION_CHECK + SLIDING_WINDOW}


# Connections per client (per event loop in the web process, per RateLimiter):
# a check holds one for one EVALSHA round trip (well under a millisecond on a
# healthy Redis), so 50 serve thousands of checks a second; more requests in
# flight than that wait for one.
POOL_MAX_CONNECTIONS = 50
# How long a check waits for a pooled connection before the limiter counts as
# saturated (LimiterBusy). Short: a healthy Redis frees a connection within
# milliseconds, and a refused client is told to retry in a second.
POOL_WAIT_SECONDS = 1.0
# Connecting to Redis and each reply (a frozen Redis holds a connection this long).
SOCKET_TIMEOUT_SECONDS = 2


class LimiterBusy(Exception):  # noqa: N818 - a state of the limiter, as StaleRule
    """No pooled Redis connection became free within the pool's wait: the
    request was not counted, and must not be served as if Redis were down."""


def _pool_options(max_connections: int, timeout: float) -> dict[str, Any]:
    """What both clients' pools are made with: their bound, the wait for a
    free connection, and the sockets' timeouts."""
    return {
        "max_connections": max_connections,
        "timeout": timeout,
        "socket_timeout": SOCKET_TIMEOUT_SECONDS,
        "socket_connect_timeout": SOCKET_TIMEOUT_SECONDS,
    }


def _async_pool(url: str, max_connections: int, timeout: float) -> Any:
    """A redis.asyncio BlockingConnectionPool whose wait for a free connection,
    when it runs out, raises LimiterBusy instead of the redis ConnectionError
    that a refused or timed-out connect also raises."""
    import asyncio

    import redis.asyncio
    from redis.exceptions import ConnectionError as RedisConnectionError

    class Pool(redis.asyncio.BlockingConnectionPool):
        async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return await super().get_connection(*args, **kwargs)
            except RedisConnectionError as error:
                # The pool's own wait ends in ConnectionError("No connection
                # available.") from asyncio's TimeoutError; connecting raises
                # redis's TimeoutError or a ConnectionError from an OSError.
                if isinstance(error.__cause__, asyncio.TimeoutError):
                    raise LimiterBusy(f"no Redis connection free within {timeout:g} s") from error
                raise

    return Pool.from_url(url, **_pool_options(max_connections, timeout))


def _sync_pool(url: str, max_connections: int, timeout: float) -> Any:
    """The same for the synchronous client (thread-safe; shared by threads)."""
    import queue

    import redis
    from redis.exceptions import ConnectionError as RedisConnectionError

    class Pool(redis.BlockingConnectionPool):
        def get_connection(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().get_connection(*args, **kwargs)
            except RedisConnectionError as error:
                # The pool's wait ends in ConnectionError("No connection
                # available.") raised while handling queue.Empty.
                if isinstance(error.__context__, queue.Empty):
                    raise LimiterBusy(f"no Redis connection free within {timeout:g} s") from error
                raise

    return Pool.from_url(url, **_pool_options(max_connections, timeout))


class StaleRule(Exception):  # noqa: N818 - a signal to re-resolve, not a failure
    """The rule was resolved under an older policy generation; nothing was counted."""

    def __init__(self, generation: str) -> None:
        super().__init__(generation)
        self.generation = generation


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    limit: int
    remaining: int
    # Seconds until the window frees capacity (fixed: the window ends; sliding:
    # the oldest accepted call leaves it); Retry-After when refused.
    reset_seconds: int

    def headers(self) -> list[tuple[bytes, bytes]]:
        out = [
            (b"x-ratelimit-limit", str(self.limit).encode()),
            (b"x-ratelimit-remaining", str(self.remaining).encode()),
            (b"x-ratelimit-reset", str(self.reset_seconds).encode()),
        ]
        if not self.allowed:
            out.append((b"retry-after", str(max(1, self.reset_seconds)).encode()))
        return out


def redis_url() -> str:
    url = getattr(settings, "MEMPROJ_RATE_LIMIT_REDIS_URL", "") or settings.CELERY_BROKER_URL
    # Celery spells a Unix socket redis+socket://PATH; redis-py spells it unix://PATH.
    if url.startswith("redis+socket://"):
        url = "unix://" + url[len("redis+socket://") :]
    return url


def _decision(reply: Any, rule: RateLimitPolicy) -> RateDecision:
    if int(reply[0]) == -1:
        generation = reply[3]
        raise StaleRule(generation.decode() if isinstance(generation, bytes) else str(generation))
    allowed, remaining, reset_ms = (int(x) for x in reply[:3])
    return RateDecision(
        allowed=bool(allowed),
        limit=rule.limit,
        remaining=max(0, remaining),
        reset_seconds=max(0, math.ceil(reset_ms / 1000)),
    )


def _args(bucket: str, rule: RateLimitPolicy, generation: str | None, cost: int) -> tuple[list[str], list[int | str]]:
    if isinstance(cost, bool) or not isinstance(cost, int) or cost < 1:
        raise ValueError(f"a rate-limit check counts at least one call, not {cost!r}")
    key = f"{KEY_PREFIX}{rule.algorithm}:{rule.limit}:{rule.window_seconds}:{bucket}"
    return [key, GENERATION_KEY], [rule.limit, rule.window_seconds * 1000, generation or "", cost]


class AsyncRateLimiter:
    """For the ASGI middleware: one client per event loop (redis.asyncio
    connections belong to the loop that opened them)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        max_connections: int = POOL_MAX_CONNECTIONS,
        pool_timeout: float = POOL_WAIT_SECONDS,
    ) -> None:
        self._url = url
        self._max_connections = max_connections
        self._pool_timeout = pool_timeout
        # Per event loop: the client and its registered scripts.
        self._clients: dict[int, tuple[Any, dict[str, Any]]] = {}

    def _scripts(self) -> dict[str, Any]:
        import asyncio

        import redis.asyncio

        loop_id = id(asyncio.get_running_loop())
        entry = self._clients.get(loop_id)
        if entry is None:
            pool = _async_pool(self._url or redis_url(), self._max_connections, self._pool_timeout)
            client = redis.asyncio.Redis.from_pool(pool)
            entry = (client, {name: client.register_script(text) for name, text in SCRIPTS.items()})
            self._clients = {loop_id: entry}  # an old loop's client is of no use any more
        return entry[1]

    async def hit(self, bucket: str, rule: RateLimitPolicy, generation: str | None = None) -> RateDecision:
        """Count one call; with ``generation``, raise StaleRule (counting
        nothing) if the policy generation is another one. LimiterBusy: no
        pooled connection within the wait, nothing counted."""
        return await self._count(bucket, rule, 1, generation)

    async def charge(
        self, bucket: str, rule: RateLimitPolicy, cost: int, generation: str | None = None
    ) -> RateDecision:
        """Count ``cost`` calls at once, all or none (a batch's further
        operations), as ``hit`` counts one."""
        return await self._count(bucket, rule, cost, generation)

    async def _count(self, bucket: str, rule: RateLimitPolicy, cost: int, generation: str | None) -> RateDecision:
        keys, args = _args(bucket, rule, generation, cost)
        reply = await self._scripts()[rule.algorithm](keys=keys, args=args)
        return _decision(reply, rule)


class RateLimiter:
    """The same check from synchronous code (workers, tests, scripts); one
    limiter may be shared by threads, which then wait for its pooled
    connections as the async limiter's tasks do (LimiterBusy past the wait)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        max_connections: int = POOL_MAX_CONNECTIONS,
        pool_timeout: float = POOL_WAIT_SECONDS,
    ) -> None:
        import redis

        self._client = redis.Redis.from_pool(_sync_pool(url or redis_url(), max_connections, pool_timeout))
        self._scripts = {name: self._client.register_script(text) for name, text in SCRIPTS.items()}

    def hit(self, bucket: str, rule: RateLimitPolicy, generation: str | None = None) -> RateDecision:
        return self._count(bucket, rule, 1, generation)

    def charge(self, bucket: str, rule: RateLimitPolicy, cost: int, generation: str | None = None) -> RateDecision:
        return self._count(bucket, rule, cost, generation)

    def _count(self, bucket: str, rule: RateLimitPolicy, cost: int, generation: str | None) -> RateDecision:
        keys, args = _args(bucket, rule, generation, cost)
        reply = self._scripts[rule.algorithm](keys=keys, args=args)
        return _decision(reply, rule)

    def close(self) -> None:
        self._client.close()


def policy_generation_bump() -> None:
    """After a policy apply or a token revocation commits: every web process
    re-resolves its cached rules and tokens on its next check. Best effort:
    with Redis down nothing is counted anyway (fail open), and the caches' own
    expiry still bounds staleness."""
    import redis

    try:
        client = redis.Redis.from_url(redis_url(), socket_timeout=2, socket_connect_timeout=2)
        try:
            client.incr(GENERATION_KEY)
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - the apply has committed; never fail it here
        logger.warning("could not announce the policy change to the rate limiter", exc_info=True)
