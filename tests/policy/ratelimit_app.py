"""A tiny ASGI app behind RateLimitMiddleware, served by separate uvicorn
processes in test_ratelimit.py: the limit must hold across web processes.
Configured by environment: RL_REDIS_URL, RL_BUCKET, RL_LIMIT, RL_WINDOW."""

from __future__ import annotations

import os

from policy.document import RateLimitPolicy
from policy.middleware import RateLimitMiddleware
from policy.ratelimit import AsyncRateLimiter

RULE = RateLimitPolicy(
    limit=int(os.environ.get("RL_LIMIT", "30")),
    window_seconds=int(os.environ.get("RL_WINDOW", "60")),
    algorithm="fixed",
)


async def _resolve(scope):
    return os.environ["RL_BUCKET"], RULE


async def _ok(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": str(os.getpid()).encode()})


app = RateLimitMiddleware(_ok, resolver=_resolve, limiter=AsyncRateLimiter(os.environ.get("RL_REDIS_URL")))
