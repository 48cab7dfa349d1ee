"""ASGI middleware: per-token rate limits on every HTTP request (the pce-memory spec's rate limit, for every dialect).

Every HTTP response carries ``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` and
``X-RateLimit-Reset`` (seconds until the window frees capacity), except the
health checks' (``UNMETERED_PATHS``), which are neither counted nor limited. Over the limit
the request never reaches the app: the answer is 429 with ``Retry-After``
(seconds) and the rate-limit error of the dialect the path belongs to: over
MCP (``/mcp/<toolset>``) a JSON-RPC error whose message is in the dialect's
error format, over its REST route (``/api/<toolset>/<tool>``) the dialect's
error body itself, as the route answers its other errors (both from the
renderer registered for the toolset); a dialect's own plain HTTP route that
registered its error body (roampal's hooks, ``/api/search``, ``/api/ingest``:
``{"error": "<message>", "code": "<CODE>"}``) that body; other paths get a
plain JSON error.

Buckets: a bearer token's bucket is its SHA-256 (no database hit to count), and
its limit is the token's tenant policy ``rate_limit`` (looked up once and kept
for ``RULE_CACHE_SECONDS``, or until a policy apply anywhere bumps the policy
generation in Redis, which every check compares in the same script: a new
policy takes effect on the next request in every web process; a token
revocation bumps it too, and a stale check clears this process's token cache
as well, policy/tokencache.py). Requests without a token, or with a token that
is unknown, revoked or expired, share one bucket per client address with the
``MEMPROJ_ANONYMOUS_RATE_LIMIT`` limit: a made-up bearer value buys no fresh
bucket.

The limiter's Redis connections are a bounded pool (policy/ratelimit.py): a
burst of requests larger than it waits for a connection. A request that gets
none within the pool's wait (``POOL_WAIT_SECONDS``; the limiter is saturated)
is not served: it is answered 503 with ``Retry-After`` and the surface's coded
overload error, the one the server answers over its connection limit
(``TIMEOUT`` in a dialect's vocabulary, ``SERVER_BUSY`` on plain paths; over
MCP a JSON-RPC server error, -32000, answering the request's id). Any other
failure of the check (Redis down, unreachable or not answering in time, or the
token's rule not resolvable) serves the request without a limit and without
rate-limit headers (fail open, logged at most once a minute): a broken counter
must not take the whole API down.

A request that does several operations (the LangGraph store's batch of up
to 100 ops, each a search or a write) costs one call per operation, not one
per request: the middleware hands the counted request's ``CallBudget`` to the
app in the ASGI scope (``BUDGET_SCOPE_KEY``; Django's ``request.scope``), and
the route, once it has checked the operations and before it runs any,
``charge``s the request's whole cost. The further calls are counted by the
same check (the same bucket, rule and policy generation, one Lua script with a
``cost``), all or nothing: a batch over what is left is refused whole, with
the same 429, ``Retry-After`` and error body as a request refused here, and
counts nothing beyond the request's own call. The response's
``X-RateLimit-*`` headers are those of the last check. The charge fails as the
request's own check does: a saturated limiter answers the 503 above, Redis
down serves the batch without a limit; a request served without a limit
carries no budget.

Install by wrapping the ASGI application: ``application = RateLimitMiddleware(Router())``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from asgiref.sync import async_to_sync, sync_to_async

from policy.document import RateLimitPolicy
from policy.policycache import policy_caching_enable
from policy.ratelimit import AsyncRateLimiter, LimiterBusy, RateDecision, StaleRule
from policy.tokencache import token_cache_clear

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
# scope -> (bucket, rule)
Resolver = Callable[[Scope], Awaitable[tuple[str, RateLimitPolicy]]]

RULE_CACHE_SECONDS = 10.0
MAX_BODY_FOR_ID = 64 * 1024

# Liveness and readiness (memproj/urls.py): a load balancer polls them from one
# address without a token. Counted, its probes would be refused 429 once the
# address's anonymous bucket is spent (taking a healthy process out of rotation)
# and would spend the budget of the real clients behind that address; and each
# probe would be a write to Redis. Exact paths: anything else is counted.
UNMETERED_PATHS = frozenset({"/healthz", "/readyz"})

# Seconds a request refused for overload should wait: a saturated limiter's
# 503 here, and the server's over its connection limit (memproj/httpserver.py).
BUSY_RETRY_AFTER = 1


def _message(decision: RateDecision) -> str:
    return (
        f"rate limit exceeded: {decision.limit} calls per window for this token (or, without a valid token, "
        f"this address); "
        f"retry after {max(1, decision.reset_seconds)} s (with exponential backoff and jitter)."
    )


def _details(decision: RateDecision) -> dict[str, Any]:
    return {"retry_after": max(1, decision.reset_seconds), "limit": decision.limit}


def _cost_message(decision: RateDecision, calls: int) -> str:
    """Why a request that costs ``calls`` calls (one per operation) was refused."""
    retry = max(1, decision.reset_seconds)
    if calls > decision.limit:
        return (
            f"rate limit exceeded: this request's {calls} operations cost {calls} calls, more than the "
            f"{decision.limit} calls per window this token may make; none ran. Send at most {decision.limit} "
            "operations per request."
        )
    return (
        f"rate limit exceeded: this request's {calls} operations cost {calls} calls, and this token has "
        f"{decision.remaining} of its {decision.limit} calls per window left; none ran. Retry after {retry} s "
        "(with exponential backoff and jitter), or send fewer operations per request."
    )


ErrorRenderer = Callable[[str, str, dict[str, Any]], str]


def plain_error(code: str, message: str, details: dict[str, Any]) -> bytes:
    """The error body of the paths that belong to no dialect."""
    payload = {"error": {"code": code, "message": message, "details": details}, "request_id": str(uuid.uuid4())}
    return json.dumps(payload).encode()


# JSON-RPC reserves -32000..-32099 for implementation-defined server errors;
# -32029 echoes HTTP 429; -32000 is the store being unavailable.
JSONRPC_RATE_LIMIT = -32029
JSONRPC_SERVER_ERROR = -32000
# JSON-RPC's own "the request is not acceptable" (a body over the limit, a refused Host).
JSONRPC_INVALID_REQUEST = -32600


class _Members(list[tuple[str, Any]]):
    """A JSON object's members in order, a repeated key kept twice."""


def _request_id(body: bytes) -> str | int | None:
    """The id a JSON-RPC message names once at its top; None when the body is
    no JSON object, names no usable id, or names it twice (a message refused
    for a repeated key: which one the client meant cannot be told, and a
    plain parse would keep the last)."""
    try:
        top = json.loads(body, object_pairs_hook=_Members) if body else None
    except (ValueError, RecursionError):
        return None
    ids = [value for key, value in top if key == "id"] if isinstance(top, _Members) else []
    usable = len(ids) == 1 and isinstance(ids[0], str | int) and not isinstance(ids[0], bool)
    return ids[0] if usable else None


def jsonrpc_error(
    code_name: str,
    message: str,
    details: dict[str, Any],
    body: bytes = b"",
    *,
    render: ErrorRenderer | None = None,
    jsonrpc_code: int = JSONRPC_INVALID_REQUEST,
) -> bytes:
    """A JSON-RPC 2.0 error answering the request's own id when its body was
    read (MCP's wire format); ``render`` writes the message in the dialect's
    error format, as its tool errors are."""
    request_id = _request_id(body)
    text = render(code_name, message, details) if render else f"[{code_name}] {message}"
    payload = {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": jsonrpc_code, "message": text, "data": {"code": code_name, **details}},
    }
    return json.dumps(payload).encode()


def rest_error(render: ErrorRenderer, code_name: str, message: str, details: dict[str, Any]) -> bytes:
    """The dialect's error body as its REST route answers errors; a dialect whose
    errors are lines of text (roampal, langmem) gets them inside a coded JSON
    object, so that every answer of the route is JSON."""
    text = render(code_name, message, details)
    try:
        if isinstance(json.loads(text), dict):
            return text.encode()
    except ValueError:
        pass
    return json.dumps({"error": {"code": code_name, "message": text, "details": details}}).encode()


# The two registries every error answered before an app runs is shaped by
# (``surface_error``, through ``surface_of``):
#
# toolset name -> the dialect's error renderer: its MCP endpoint
# (/mcp/<toolset>) writes the JSON-RPC error's message with it, and its REST
# route (/api/<toolset>/<tool>) answers the rendered body. An /mcp/ path whose
# toolset registered none still gets a JSON-RPC error, with a plain message.
DIALECT_RENDERERS: dict[str, ErrorRenderer] = {}

# (code, message, details) -> the error body of one of a dialect's own plain
# HTTP routes, as the route answers its other errors.
RouteErrorBody = Callable[[str, str, dict[str, Any]], bytes]
# exact path (no trailing slash) -> its route's error body; registered by the
# dialect's routes (mcp_server/registry.py), so that a request refused before
# the route runs (a rate limit, a body over the limit) is answered in the
# route's own shape.
ROUTE_ERROR_BODIES: dict[str, RouteErrorBody] = {}


def register_dialect_rate_limit(toolset: str, render: ErrorRenderer) -> None:
    """The dialect's error format for every error answered before its app runs
    (a rate limit, a body over the limit, a refused Host), over MCP and on its
    REST route."""
    DIALECT_RENDERERS[toolset] = render


def register_route_error_body(path: str, build: RouteErrorBody) -> None:
    ROUTE_ERROR_BODIES[path.rstrip("/")] = build


def _route_error_body(path: str) -> RouteErrorBody | None:
    return ROUTE_ERROR_BODIES.get(path.rstrip("/"))


class Surface(NamedTuple):
    """The surface a path belongs to, for the errors answered before any app
    runs: ``kind`` is ROUTE (a dialect's own route: ``route`` writes its
    body), MCP (a JSON-RPC error; ``render``, if the toolset registered one,
    writes its message), REST (a dialect's tool route: ``render`` writes its
    body) or PLAIN."""

    kind: str
    route: RouteErrorBody | None = None
    render: ErrorRenderer | None = None


ROUTE, MCP, REST, PLAIN = "route", "mcp", "rest", "plain"


def surface_of(path: str) -> Surface:
    """Which error shape ``path`` gets: a dialect route's registered body,
    else the JSON-RPC error of an MCP endpoint, else a registered dialect's
    REST tool route, else the plain body. The one place that decides it."""
    route = _route_error_body(path)
    if route is not None:
        return Surface(ROUTE, route=route)
    toolset = _toolset_of(path)
    if toolset is not None:
        return Surface(MCP, render=DIALECT_RENDERERS.get(toolset))
    rest_toolset = _rest_toolset_of(path)
    if rest_toolset is not None:
        return Surface(REST, render=DIALECT_RENDERERS[rest_toolset])
    return Surface(PLAIN)


def surface_error(
    path: str,
    code_name: str,
    message: str,
    details: dict[str, Any],
    body: bytes = b"",
    *,
    plain_code: str = "",
    jsonrpc_code: int = JSONRPC_INVALID_REQUEST,
) -> tuple[bytes, str]:
    """An error answered before any app runs (and the MCP router's own: a
    refused token, the store unavailable, a body that is no JSON-RPC message),
    in the vocabulary of the surface ``path`` belongs to (``surface_of``): a JSON-RPC error over MCP (answering
    the id in ``body``, with ``jsonrpc_code``), the dialect's error body on its
    REST route, the body a dialect's own route registered
    (``register_route_error_body``), the plain coded body elsewhere. ``code_name`` is a core code
    (INVALID_ARGUMENT, PERMISSION_DENIED, RATE_LIMIT, ...), which each dialect renders as
    its own; ``plain_code``, if given, names the error on the other paths."""
    surface = surface_of(path)
    if surface.route is not None:
        return surface.route(plain_code or code_name, message, details), "application/json"
    if surface.kind == MCP:
        payload = jsonrpc_error(code_name, message, details, body, render=surface.render, jsonrpc_code=jsonrpc_code)
        return payload, "application/json"
    if surface.render is not None:
        payload = rest_error(surface.render, code_name, message, details)
        return payload, "application/json; charset=utf-8"
    return plain_error(plain_code or code_name, message, details), "application/json"


def _toolset_of(path: str) -> str | None:
    if not path.startswith("/mcp/"):
        return None
    return path[len("/mcp/") :].strip("/").split("/", 1)[0] or None


def _rest_toolset_of(path: str) -> str | None:
    """The toolset of the generic REST tool route, /api/<toolset>/<tool> (a tool
    name has no slash), if registered; other /api/ endpoints (roampal's hooks,
    /api/langmem/store/) are no tool routes."""
    if not path.startswith("/api/"):
        return None
    parts = path[len("/api/") :].split("/")
    if len(parts) != 2 or not all(parts):
        return None
    return parts[0] if parts[0] in DIALECT_RENDERERS else None


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            text = value.decode("latin-1")
            if text[:7].lower() == "bearer ":
                return text[7:].strip() or None
    return None


_rule_cache: dict[str, tuple[float, RateLimitPolicy]] = {}
# The policy generation the cached rules were resolved under ("?" = not known yet:
# the first check learns it).
_rule_cache_generation = ["?"]


def _rule_for_token_hash(token_hash: str) -> RateLimitPolicy | None:
    """The token's tenant's limit, or None if no live token has this hash."""
    from django.db import close_old_connections
    from django.db.models import Q
    from django.utils import timezone

    from policy.models import ApiToken
    from policy.selectors.policies import policy_current

    close_old_connections()
    try:
        tenant_id = (
            ApiToken.objects.filter(token_hash=token_hash, revoked_at__isnull=True)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
            .values_list("principal__tenant_id", flat=True)
            .first()
        )
        return None if tenant_id is None else policy_current(tenant_id=tenant_id).rate_limit
    finally:
        close_old_connections()


def anonymous_rule() -> RateLimitPolicy:
    """The limit of one source address's requests without a valid token."""
    from django.conf import settings

    limit = settings.MEMPROJ_ANONYMOUS_RATE_LIMIT
    return RateLimitPolicy(limit=limit["LIMIT"], window_seconds=limit["WINDOW_SECONDS"], algorithm="fixed")


def _address_bucket(scope: Scope) -> tuple[str, RateLimitPolicy]:
    client = scope.get("client") or ("unknown", 0)
    return f"ip:{client[0]}", anonymous_rule()


async def token_resolver(scope: Scope) -> tuple[str, RateLimitPolicy]:
    """The default resolver: a live token's bucket and its tenant's limit. A
    request without a token, or with one that is unknown, revoked or expired,
    counts in its source address's bucket: a made-up bearer value must not buy
    a fresh bucket. Only live tokens are cached, so a flood of made-up values
    cannot fill (and so empty) the cache."""
    from policy.services.tokens import MAX_TOKEN_CHARS, TOKEN_PREFIX

    token = _bearer(scope)
    if token is None or not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_CHARS:
        return _address_bucket(scope)
    token_hash = hashlib.sha256(token.encode("utf-8")).hexdigest()
    now = time.monotonic()
    cached = _rule_cache.get(token_hash)
    if cached is not None and cached[0] >= now:
        return f"tok:{token_hash}", cached[1]
    rule = await sync_to_async(_rule_for_token_hash, thread_sensitive=False)(token_hash)
    if rule is None:
        _rule_cache.pop(token_hash, None)
        return _address_bucket(scope)
    if len(_rule_cache) > 10_000:
        _rule_cache.clear()
    _rule_cache[token_hash] = (now + RULE_CACHE_SECONDS, rule)
    return f"tok:{token_hash}", rule


BUSY_MESSAGE = (
    f"the rate limiter is busy: no Redis connection became free in time; retry in {BUSY_RETRY_AFTER} s "
    "(with exponential backoff and jitter)."
)


def limited_answer(path: str, decision: RateDecision, message: str, body: bytes = b"") -> tuple[bytes, str]:
    """The 429's body on ``path``'s surface (``surface_error``)."""
    details = _details(decision)
    return surface_error(path, "RATE_LIMIT", message, details, body, jsonrpc_code=JSONRPC_RATE_LIMIT)


def busy_answer(path: str, body: bytes = b"") -> tuple[bytes, str]:
    """The saturated limiter's 503 body on ``path``'s surface."""
    return surface_error(
        path,
        "TIMEOUT",
        BUSY_MESSAGE,
        {"retry_after": BUSY_RETRY_AFTER},
        body,
        plain_code="SERVER_BUSY",
        jsonrpc_code=JSONRPC_SERVER_ERROR,
    )


# The ASGI scope key under which a counted request's CallBudget reaches the app
# (absent when the request is served without a limit).
BUDGET_SCOPE_KEY = "memproj.rate_limit"

# A refusal the app answers for the limiter: (status, body, content type); the
# middleware adds the headers (Retry-After, X-RateLimit-*) to the response.
Refusal = tuple[int, bytes, str]


class CallBudget:
    """The rate-limit budget of one counted request, for an app whose request
    does several operations: ``charge(n)`` makes the request cost ``n`` calls
    in all (it was counted as one when it arrived), before any operation runs.
    The middleware's own check counts them (``RateLimitMiddleware._check``: the
    token's cached bucket and rule, the policy generation), so there is one
    counter, and the response carries the headers of the last check."""

    def __init__(self, middleware: RateLimitMiddleware, scope: Scope, decision: RateDecision) -> None:
        self._middleware = middleware
        self._scope = scope
        self.decision = decision
        self.calls = 1
        self._busy = False

    def headers(self) -> list[tuple[bytes, bytes]]:
        """What the middleware adds to the response."""
        if self._busy:
            return [(b"retry-after", str(BUSY_RETRY_AFTER).encode())]
        return self.decision.headers()

    async def acharge(self, calls: int) -> Refusal | None:
        """Make the request cost ``calls`` in all: count the calls it was not
        charged yet, all or none. None: they are counted (or the limiter failed
        open: Redis down), run the operations. Else the
        request's answer: 429 (over the limit: nothing more counted) or 503
        (the limiter saturated), in the surface's error body; run nothing."""
        if calls <= self.calls:
            return None
        path = self._scope.get("path", "")
        try:
            decision = await self._middleware._check(self._scope, cost=calls - self.calls)
        except LimiterBusy:
            self._busy = True
            payload, content_type = busy_answer(path)
            return 503, payload, content_type
        except Exception:  # Redis down, unreachable or frozen: serve, unlimited (fail open)
            self._middleware._fail_open_logged()
            return None
        self.decision = decision
        if not decision.allowed:
            payload, content_type = limited_answer(path, decision, _cost_message(decision, calls))
            return 429, payload, content_type
        self.calls = calls
        return None

    def charge(self, calls: int) -> Refusal | None:
        """``acharge`` from the synchronous app's worker thread (a view run by
        sync_to_async): the check runs on the request's event loop, where the
        limiter's connections live."""
        return async_to_sync(self.acharge)(calls)


class RateLimitMiddleware:
    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        *,
        resolver: Resolver = token_resolver,
        limiter: AsyncRateLimiter | None = None,
    ) -> None:
        self.app = app
        self.resolver = resolver
        self.limiter = limiter or AsyncRateLimiter()
        self._last_failure_log = 0.0
        self._last_busy_log = 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            # The server runs this application: every request of the process
            # passes the generation check below first, so tenants' policy
            # versions may be kept between requests (policy/policycache.py).
            policy_caching_enable()
        if scope["type"] != "http" or scope.get("path") in UNMETERED_PATHS:
            await self.app(scope, receive, send)  # lifespan, websockets, health checks
            return
        try:
            decision = await self._check(scope)
        except LimiterBusy:
            # Every pooled connection stayed busy through the wait: nothing was
            # counted, so serving would be unlimited; refuse, retryable.
            await self._busy(scope, receive, send)
            return
        except Exception:  # Redis down, unreachable or frozen: serve, unlimited (fail open)
            self._fail_open_logged()
            await self.app(scope, receive, send)
            return
        if not decision.allowed:
            await self._refuse(scope, receive, send, decision)
            return
        budget = CallBudget(self, scope, decision)

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = dict(message, headers=[*message.get("headers", []), *budget.headers()])
            await send(message)

        await self.app({**scope, BUDGET_SCOPE_KEY: budget}, receive, send_with_headers)

    def _fail_open_logged(self) -> None:
        if time.monotonic() - self._last_failure_log > 60:
            self._last_failure_log = time.monotonic()
            logger.exception("rate limit check failed; serving without a limit")

    async def _check(self, scope: Scope, cost: int = 1) -> RateDecision:
        """Count the request (``cost`` calls, all or none) under its rule; a
        rule cached before the last policy apply is resolved again first (the
        stale check counts nothing)."""
        for _ in range(2):
            bucket, rule = await self.resolver(scope)
            try:
                return await self._count(bucket, rule, cost, _rule_cache_generation[0])
            except StaleRule as stale:
                # A policy apply or a token revocation somewhere: what this
                # process remembers about tokens is resolved again.
                _rule_cache.clear()
                token_cache_clear()
                _rule_cache_generation[0] = stale.generation
        # Policies changing faster than two round trips: count under the fresh rule.
        bucket, rule = await self.resolver(scope)
        return await self._count(bucket, rule, cost, None)

    async def _count(self, bucket: str, rule: RateLimitPolicy, cost: int, generation: str | None) -> RateDecision:
        if cost == 1:
            return await self.limiter.hit(bucket, rule, generation=generation)
        return await self.limiter.charge(bucket, rule, cost, generation=generation)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, decision: RateDecision) -> None:
        path = scope.get("path", "")
        body = await read_body_for_id(receive) if surface_of(path).kind == MCP else b""
        payload, content_type = limited_answer(path, decision, _message(decision), body)
        await _answer(send, 429, payload, content_type, decision.headers())

    async def _busy(self, scope: Scope, receive: Receive, send: Send) -> None:
        """503 with Retry-After and the surface's coded overload error (as the
        server's answer over its connection limit), answering an MCP request's id."""
        path = scope.get("path", "")
        body = await read_body_for_id(receive) if surface_of(path).kind == MCP else b""
        payload, content_type = busy_answer(path, body)
        if time.monotonic() - self._last_busy_log > 60:
            self._last_busy_log = time.monotonic()
            logger.warning("rate limiter saturated (no pooled Redis connection in time); answering 503")
        await _answer(send, 503, payload, content_type, [(b"retry-after", str(BUSY_RETRY_AFTER).encode())])


async def _answer(
    send: Send, status: int, payload: bytes, content_type: str, headers: list[tuple[bytes, bytes]]
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def read_body_for_id(receive: Receive) -> bytes:
    """Enough of a refused request to answer a JSON-RPC call with its own id
    (an empty body past MAX_BODY_FOR_ID bytes)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_FOR_ID:
            return b""
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
