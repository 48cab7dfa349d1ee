"""The ASGI edge: what every HTTP request passes before any app, rate limit or
authentication runs.

- ``BodyLimit``: every route's request body is bounded. A declared
  Content-Length over the route's limit is refused before a byte of the body
  is read; a body without one (chunked) or lying about it is counted as it
  streams and cut off at the limit. Nothing is buffered here: the app reads
  the body through the guard as it would without it.
- ``host_refusal``: the Host and Origin checks of the MCP endpoints
  (DNS-rebinding protection), matched exactly: ``127.0.0.1:*`` admits
  ``127.0.0.1`` followed by a numeric port and nothing else.

Refusals answer coded JSON in the vocabulary of the surface the path belongs
to (``policy.middleware.surface_error``): a JSON-RPC error on ``/mcp/*``, the
dialect's error body on ``/api/<toolset>/<tool>``, the plain coded body
elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from policy.middleware import surface_error

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or []:
        if key == name:
            return bytes(value)
    return None


# An answer given before any app runs: status, body, content type, extra headers.
Refusal = tuple[int, bytes, str, list[tuple[bytes, bytes]]]


async def _answer(
    send: Send,
    status: int,
    body: bytes,
    content_type: str,
    *,
    close: bool,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    sent = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()), *(headers or [])]
    if close:
        # The rest of the body was never read: the connection cannot carry another request.
        sent.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": sent})
    await send({"type": "http.response.body", "body": body})


def _too_large(path: str, limit: int, request_id: int | str | None) -> tuple[bytes, str]:
    message = f"the request body is over the limit of {limit} bytes for {path}; send less."
    # The request's own id, when the refused body showed it, so a JSON-RPC
    # client pairs the error with its call.
    id_only = json.dumps({"id": request_id}).encode() if request_id is not None else b""
    return surface_error(path, "INVALID_ARGUMENT", message, {"limit": limit}, id_only, plain_code="PAYLOAD_TOO_LARGE")


def body_timed_out(path: str, timeout: float) -> tuple[bytes, str]:
    """The 408 of a request whose body did not arrive within ``timeout``
    seconds (``memproj.httpserver``), in the surface's vocabulary as a 413 is:
    the request is at fault, so the dialects' INVALID_ARGUMENT (their TIMEOUT
    is a tool's, which some render as a server error)."""
    message = f"the request body did not arrive within {timeout:g} s of its headers; send the whole body at once."
    return surface_error(path, "INVALID_ARGUMENT", message, {"timeout": timeout}, plain_code="REQUEST_TIMEOUT")


# A refused body that declares a length of at most this many bytes is read to
# its end and dropped (within this many seconds) before the 413 is sent: HTTP
# clients (httpx, so the MCP python SDK, and urllib) write their whole body
# before they read the answer, and a connection closed on unread data is reset,
# so the client would see a broken connection instead of the 413 and its
# reason. A larger one, or one without a declared length, is answered at once
# and its connection closed.
DRAIN_MAX_BYTES = 16 * 1024 * 1024
DRAIN_MAX_SECONDS = 15.0
_ID_VALUE = rb'(-?[0-9]+|"(?:[^"\\]|\\.){0,200}")'
# A JSON-RPC request's id among the first members of its object (the python
# SDK writes {"jsonrpc": "2.0", "id": ..., ...}) or as its last member (the
# TypeScript SDK writes {..., "jsonrpc": "2.0", "id": ...}): where a body too
# large to parse still shows it.
_ID_FIRST = re.compile(rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID_VALUE)
_ID_LAST = re.compile(rb'"id"\s*:\s*' + _ID_VALUE + rb"\s*\}\s*$")
_ID_EDGE_BYTES = 512


def request_id_of(head: bytes, tail: bytes) -> int | str | None:
    """The JSON-RPC id a body shows at its start or its end, else None."""
    match = _ID_FIRST.search(head) or _ID_LAST.search(tail)
    if match is None:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, int | str) else None


class _Drained:
    """What was kept of a refused body while it was read and dropped."""

    def __init__(self) -> None:
        self.head = b""
        self.tail = b""
        self.complete = False

    def keep(self, chunk: bytes) -> None:
        if len(self.head) < _ID_EDGE_BYTES:
            self.head += chunk[: _ID_EDGE_BYTES - len(self.head)]
        self.tail = (self.tail + chunk)[-_ID_EDGE_BYTES:]

    @property
    def request_id(self) -> int | str | None:
        return request_id_of(self.head, self.tail)


async def _drain(receive: Receive, drained: _Drained) -> None:
    """Read the request body and drop it, keeping only its edges, within the
    drain bounds; ``drained.complete`` says whether its end was reached."""

    async def read() -> None:
        seen = 0
        while seen <= DRAIN_MAX_BYTES:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            drained.keep(chunk)
            if not message.get("more_body", False):
                drained.complete = True
                return

    with contextlib.suppress(TimeoutError):  # past the time bound the connection is closed instead
        await asyncio.wait_for(read(), DRAIN_MAX_SECONDS)


class BodyLimit:
    """Bounds every request body: ``limits`` maps a path (exact, or a prefix
    ending in ``/``) to its allowance, every other path gets ``default``."""

    def __init__(self, app: App, *, default: int, limits: Mapping[str, int] | None = None) -> None:
        self.app = app
        self.default = default
        self.exact = {p.rstrip("/"): n for p, n in (limits or {}).items() if not p.endswith("/")}
        self.prefixes = sorted(((p, n) for p, n in (limits or {}).items() if p.endswith("/")), key=lambda x: -len(x[0]))

    def limit_for(self, path: str) -> int:
        exact = self.exact.get(path.rstrip("/"))
        if exact is not None:
            return exact
        for prefix, limit in self.prefixes:
            if path.startswith(prefix):
                return limit
        return self.default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        limit = self.limit_for(path)
        declared = _header(scope, b"content-length")
        # The server has already refused a Content-Length that is not a number.
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            drained = _Drained()
            if int(declared) <= DRAIN_MAX_BYTES:
                await _drain(receive, drained)
            body, content_type = _too_large(path, limit, drained.request_id)
            await _answer(send, 413, body, content_type, close=not drained.complete)
            return

        seen = 0
        refused = False
        started = False
        received = _Drained()  # the start of the body, for the request id of a 413

        async def counted_receive() -> Message:
            nonlocal seen, refused, started
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                seen += len(chunk)
                if len(received.head) < _ID_EDGE_BYTES:
                    received.keep(chunk)
                if seen > limit:
                    # Answer and tell the app the client has gone, so it stops reading.
                    refused = True
                    if not started:
                        # A body that declared no length may be endless: it is
                        # not drained, the answer comes at once.
                        started = True
                        body, content_type = _too_large(path, limit, received.request_id)
                        await _answer(send, 413, body, content_type, close=message.get("more_body", False))
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 is the answer; whatever the app says after it is dropped
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted_receive, guarded_send)


# --- Host and Origin of the MCP endpoints --------------------------------------------

_PORT = re.compile(r"[0-9]{1,5}")


def _host_allowed(host: str, allowed: list[str]) -> bool:
    """``name`` matches itself only; ``name:*`` matches ``name:<digits>``."""
    host = host.lower()
    for pattern in allowed:
        pattern = pattern.lower()
        if pattern.endswith(":*"):
            base = pattern[:-2]
            if host.startswith(base + ":") and _PORT.fullmatch(host[len(base) + 1 :]):
                return True
        elif host == pattern:
            return True
    return False


def _origin_allowed(origin: str, allowed_hosts: list[str]) -> bool:
    scheme, sep, rest = origin.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or "/" in rest:
        return False
    return _host_allowed(rest, allowed_hosts)


def host_refusal(scope: Scope, allowed_hosts: list[str]) -> Refusal | None:
    """None if the request's Host (and Origin, when sent) are allowed; else the
    status and the coded answer (421 for a Host, 403 for an Origin)."""
    path: str = scope.get("path", "")
    host = (_header(scope, b"host") or b"").decode("latin-1")
    if not _host_allowed(host, allowed_hosts):
        body, content_type = surface_error(
            path,
            "PERMISSION_DENIED",
            f"this endpoint is not served under the Host {host!r}; use one of MEMPROJ_MCP_ALLOWED_HOSTS.",
            {},
        )
        return 421, body, content_type, []
    origin = _header(scope, b"origin")
    if origin is not None and not _origin_allowed(origin.decode("latin-1"), allowed_hosts):
        body, content_type = surface_error(
            path, "PERMISSION_DENIED", "requests from this Origin are refused (DNS-rebinding protection).", {}
        )
        return 403, body, content_type, []
    return None


def security_headers() -> list[tuple[bytes, bytes]]:
    """The headers Django's security and clickjacking middleware put on its
    answers, as the settings configure them."""
    from django.conf import settings

    wanted = {
        b"x-frame-options": settings.X_FRAME_OPTIONS,
        b"x-content-type-options": "nosniff" if settings.SECURE_CONTENT_TYPE_NOSNIFF else None,
        b"referrer-policy": settings.SECURE_REFERRER_POLICY,
        b"cross-origin-opener-policy": settings.SECURE_CROSS_ORIGIN_OPENER_POLICY,
    }
    return [(name, str(value).encode("latin-1")) for name, value in wanted.items() if value]


class SecurityHeaders:
    """Every answer carries the security headers Django's middleware gives its
    own: the refusals made before Django runs (a body over its limit, a rate
    limit, a token refused before its body is read, an unknown toolset, the
    transport's framing errors) would go without them. A header the answer
    already has is left as it is."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.headers = security_headers()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {key.lower() for key, _ in message.get("headers") or []}
                missing = [(key, value) for key, value in self.headers if key not in present]
                if missing:
                    message = {**message, "headers": [*(message.get("headers") or []), *missing]}
            await send(message)

        await self.app(scope, receive, with_headers)


async def refuse(send: Send, refusal: Refusal) -> None:
    status, body, content_type, headers = refusal
    await _answer(send, status, body, content_type, close=False, headers=headers)
