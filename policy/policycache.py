"""The HTTP tier's short-lived cache of each tenant's current policy version
(its row id and version; the parsed document is cached by version in
``policy.selectors.policies``), so that a call reads no policy row.

A policy apply clears it in its own process at once and again when it commits,
and bumps the generation the rate limiter compares on every request
(``policy.ratelimit``), so every other web process re-reads the policy on its
next request (``policy.tokencache.token_cache_clear`` clears this cache with the
verified tokens); with Redis unreachable, after at most ``POLICY_CACHE_SECONDS``.
Only a process whose every request checks the generation keeps policy versions:
the rate-limit middleware turns this on when the server starts the application
(its lifespan startup), so merely building a limiter or a middleware changes
nothing; workers, the stdio server and tests read the row every time.

It imports nothing of memproj's, so the policy selectors can use it (the token
cache holds callers, and a caller reads its policy through those selectors)."""

from __future__ import annotations

import threading
import time
import uuid

# A verified token is kept as long (policy.tokencache.TOKEN_CACHE_SECONDS is this value).
POLICY_CACHE_SECONDS = 5.0
_POLICY_CACHE_MAX = 10_000
_lock = threading.Lock()

# tenant -> (expiry, (row id, version)) of its current policy; only tenants that have one.
_policy_heads: dict[uuid.UUID, tuple[float, tuple[int, str]]] = {}
_policy_caching = [False]


def policy_caching_enable() -> None:
    """This process checks the policy generation before every request (the
    HTTP tier's rate limiter): it may keep tenants' policy versions."""
    _policy_caching[0] = True


def policy_caching_disable() -> None:
    """Read the policy row every time again, forgetting what was kept."""
    _policy_caching[0] = False
    policy_heads_clear()


def policy_caching() -> bool:
    return _policy_caching[0]


def policy_head_cached(tenant_id: uuid.UUID) -> tuple[int, str] | None:
    """(row id, version) of the tenant's current policy as this process last read it, if still fresh."""
    entry = _policy_heads.get(tenant_id)
    if entry is None or entry[0] <= time.monotonic():
        return None
    return entry[1]


def policy_head_put(tenant_id: uuid.UUID, head: tuple[int, str]) -> None:
    with _lock:
        if len(_policy_heads) >= _POLICY_CACHE_MAX:
            _policy_heads.clear()
        _policy_heads[tenant_id] = (time.monotonic() + POLICY_CACHE_SECONDS, head)


def policy_heads_clear() -> None:
    """Forget every tenant's policy version this process kept."""
    with _lock:
        _policy_heads.clear()
