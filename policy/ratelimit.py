"""Rate limits per API token in Redis (seed 004 §4; upstream default 1,000 calls
per 10 s), fixed or sliding window as the tenant policy's ``rate_limit`` says.

Each check is one Lua script, so it is atomic in Redis: any number of web
processes share one count without a race. The clock is Redis's own (``TIME``),
so processes with skewed clocks still agree on the window.

- fixed: one counter per window (``INCR`` + ``PEXPIRE`` on its first hit); every
  call counts, refused ones too, so a client hammering past the limit stays
  refused until the window ends.
- sliding: a log of the accepted calls of the last window (a sorted set scored
  by milliseconds); a call is accepted while fewer than ``limit`` are in it, and
  refused calls are not logged.

The Redis server is ``MEMPROJ_RATE_LIMIT_REDIS_URL`` if set, else the Celery
broker's (the embedded one by default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from policy.document import RateLimitPolicy

KEY_PREFIX = "memproj:rl:"

FIXED_WINDOW = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local start = now_ms - (now_ms % window_ms)
local key = KEYS[1] .. ':' .. string.format('%d', start)
local count = redis.call('INCR', key)
if count == 1 then
  redis.call('PEXPIRE', key, window_ms + 1000)
end
local reset_ms = start + window_ms - now_ms
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
local key = KEYS[1]
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now_ms - window_ms))
local count = redis.call('ZCARD', key)
local allowed = 0
if count < limit then
  local seq = redis.call('INCR', key .. ':seq')
  redis.call('ZADD', key, string.format('%d', now_ms), t[1] .. '.' .. t[2] .. '-' .. seq)
  redis.call('PEXPIRE', key, window_ms)
  redis.call('PEXPIRE', key .. ':seq', window_ms)
  count = count + 1
  allowed = 1
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local reset_ms = window_ms
if oldest[2] then
  reset_ms = tonumber(oldest[2]) + window_ms - now_ms
end
if allowed == 1 then
  return {1, limit - count, reset_ms}
end
return {0, 0, reset_ms}
"""

SCRIPTS = {"fixed": FIXED_WINDOW, "sliding": SLIDING_WINDOW}


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
    allowed, remaining, reset_ms = (int(x) for x in reply)
    return RateDecision(
        allowed=bool(allowed),
        limit=rule.limit,
        remaining=max(0, remaining),
        reset_seconds=max(0, math.ceil(reset_ms / 1000)),
    )


def _args(bucket: str, rule: RateLimitPolicy) -> tuple[list[str], list[int]]:
    key = f"{KEY_PREFIX}{rule.algorithm}:{rule.limit}:{rule.window_seconds}:{bucket}"
    return [key], [rule.limit, rule.window_seconds * 1000]


class AsyncRateLimiter:
    """For the ASGI middleware: one client per event loop (redis.asyncio
    connections belong to the loop that opened them)."""

    def __init__(self, url: str | None = None) -> None:
        self._url = url
        self._clients: dict[int, Any] = {}

    def _client(self) -> Any:
        import asyncio

        import redis.asyncio

        loop_id = id(asyncio.get_running_loop())
        client = self._clients.get(loop_id)
        if client is None:
            client = redis.asyncio.from_url(self._url or redis_url(), socket_timeout=2, socket_connect_timeout=2)
            self._clients = {loop_id: client}  # an old loop's client is of no use any more
        return client

    async def hit(self, bucket: str, rule: RateLimitPolicy) -> RateDecision:
        keys, args = _args(bucket, rule)
        reply = await self._client().eval(SCRIPTS[rule.algorithm], len(keys), *keys, *args)
        return _decision(reply, rule)


class RateLimiter:
    """The same check from synchronous code (workers, tests, scripts)."""

    def __init__(self, url: str | None = None) -> None:
        import redis

        self._client = redis.Redis.from_url(url or redis_url(), socket_timeout=2, socket_connect_timeout=2)

    def hit(self, bucket: str, rule: RateLimitPolicy) -> RateDecision:
        keys, args = _args(bucket, rule)
        reply = self._client.eval(SCRIPTS[rule.algorithm], len(keys), *keys, *args)
        return _decision(reply, rule)

    def close(self) -> None:
        self._client.close()
