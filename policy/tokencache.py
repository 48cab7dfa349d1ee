"""The HTTP tier's short-lived cache of verified bearer tokens.

Every stateless MCP request carries its bearer token; looking it up cost a
worker-thread hop and one or two queries per request, so a web process keeps
what it verified for ``TOKEN_CACHE_SECONDS`` (never past the token's expiry).
Unknown tokens are never cached, so a flood of made-up tokens cannot fill it.

A revocation (``policy.services.tokens.token_revoke``) clears this process's
cache at once and, once committed, bumps the shared generation in Redis that
the rate limiter compares on every request (``policy.ratelimit``): every web
process clears its cache on its next request, so a revoked token is refused
from the first request after the revocation commits. Only while Redis cannot be
reached (the limiter then fails open) does a process keep a revoked token for
up to ``TOKEN_CACHE_SECONDS``.

Clearing it clears the tenants' policy versions too (``policy.policycache``),
which the same generation governs.

No Django models here: the rate-limit middleware clears the cache without the
app registry."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from policy import policycache
from policy.caller import Caller

TOKEN_CACHE_SECONDS = policycache.POLICY_CACHE_SECONDS  # one window for both caches
_TOKEN_CACHE_MAX = 10_000
_token_cache: dict[str, tuple[float, Caller]] = {}
_token_cache_lock = threading.Lock()
# Bumped by every clear: a lookup that began before a clear (it may have read a
# token's row before its revocation committed) must not fill the cache after it.
_token_cache_clears = [0]


def token_cached_caller(token: str) -> Caller | None:
    """The caller this process verified for ``token`` within the cache window, if any."""
    entry = _token_cache.get(token)
    if entry is None or entry[0] <= time.monotonic():
        return None
    # A copy: a Caller fixes its tenant policy on first use, and that must stay per request.
    return replace(entry[1])


def token_cache_epoch() -> int:
    """Take this before reading a token's row; pass it to ``token_cache_put``."""
    return _token_cache_clears[0]


def token_cache_put(token: str, caller: Caller, lifetime: float, *, epoch: int | None = None) -> None:
    """Remember ``caller`` for ``token`` for ``lifetime`` seconds (at most
    TOKEN_CACHE_SECONDS), unless the cache was cleared since ``epoch``
    (``token_cache_epoch`` before the lookup): the row read may predate a
    revocation that cleared it."""
    lifetime = min(lifetime, TOKEN_CACHE_SECONDS)
    with _token_cache_lock:
        if epoch is not None and epoch != _token_cache_clears[0]:
            return
        if len(_token_cache) >= _TOKEN_CACHE_MAX:
            _token_cache.clear()
        _token_cache[token] = (time.monotonic() + lifetime, replace(caller))


def token_cache_clear() -> None:
    """Forget everything this process cached: verified tokens and policy versions."""
    with _token_cache_lock:
        _token_cache_clears[0] += 1
        _token_cache.clear()
    policycache.policy_heads_clear()
