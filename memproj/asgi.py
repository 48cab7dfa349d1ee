"""One ASGI app: Django (admin, health) plus the MCP streamable-HTTP endpoints
at /mcp/<toolset>/ for every dialect. Django has no lifespan support, so this
router owns the lifespan and runs each MCP session manager inside it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from contextlib import AsyncExitStack
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")
django.setup()

from memproj.embedded import ensure_for_settings  # noqa: E402
from memproj.heap import freeze_startup_heap  # noqa: E402

ensure_for_settings()  # the web process needs the database and the broker

from memproj.checks import secret_key_check  # noqa: E402

for _warning in secret_key_check():
    # uvicorn runs no system checks: say it where the operator looks.
    logging.getLogger("memproj").warning("%s: %s %s", _warning.id, _warning.msg, _warning.hint)

from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.db import InterfaceError, OperationalError  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.urls import Resolver404, resolve  # noqa: E402
from mcp.server.transport_security import TransportSecuritySettings  # noqa: E402

from mcp_server.auth import MemprojTokenVerifier  # noqa: E402
from mcp_server.dialect import connection_options, query_options  # noqa: E402
from mcp_server.http import (  # noqa: E402
    CREDENTIALS_REFUSED,
    NOT_JSON,
    NOT_JSONRPC,
    REFUSED_CHALLENGE,
    RETRY_AFTER_SECONDS,
    STORAGE_MESSAGE,
    request_id_problem,
    storage_failure,
)
from mcp_server.registry import TOOLSETS, dialect_body_limits, dialect_unauthenticated_answers  # noqa: E402
from mcp_server.rest import credentials_refusal, route_credentials_refusal  # noqa: E402
from mcp_server.server import build_server  # noqa: E402
from memory.admin.imports import import_body_limits  # noqa: E402
from memory.embeddings import warm_up  # noqa: E402
from memory.errors import InvalidArgument, StorageUnavailable  # noqa: E402
from memory.validation import json_document  # noqa: E402
from memproj.edge import BodyLimit, Refusal, SecurityHeaders, host_refusal, refuse  # noqa: E402
from policy.middleware import (  # noqa: E402
    JSONRPC_INVALID_REQUEST,
    JSONRPC_SERVER_ERROR,
    RateLimitMiddleware,
    read_body_for_id,
    register_dialect_rate_limit,
    surface_error,
)

Scope = dict[str, Any]
logger = logging.getLogger(__name__)


class _HoldServerError:
    """Passes a response through, except a 500 started before the app raised:
    that one is held so the router can answer a database outage with a 503."""

    def __init__(self, send: Any) -> None:
        self.send = send
        self.started = False
        self.held: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] == 500 and not self.started:
            self.held.append(message)
            return
        if self.held:
            self.held.append(message)
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)

    async def release(self) -> None:
        for message in self.held:
            await self.send(message)
        self.held = []


# The SDK's transport answers a body that is no JSON-RPC message with the JSON
# parser's message or pydantic's validation report, which echoes the input and
# names the library's version: each is replaced by a coded error of the dialect.
_ENVELOPE_ERRORS = {"Parse error:": NOT_JSON, "Validation error:": NOT_JSONRPC}
# The transport's own refusals of a request's HTTP framing: a Content-Type
# other than JSON (400, plain text), an Accept without JSON (406), a method
# it does not serve (405). Each gets the surface's coded error.
_TRANSPORT_REFUSALS = (400, 405, 406, 415)
NOT_JSON_CONTENT = "send the JSON-RPC message with Content-Type: application/json."


class _EnvelopeErrors:
    """Passes a response through, except the transport's refusals
    (``_TRANSPORT_REFUSALS``): held until complete, then sent with the
    surface's coded error (``surface_error``), the same status, JSON-RPC code
    and id. A body that is no JSON-RPC message gets the dialect's words for it
    (``_ENVELOPE_ERRORS``); the transport's other messages are kept, coded."""

    def __init__(self, send: Any, path: str) -> None:
        self.send = send
        self.path = path
        self.start: dict[str, Any] | None = None
        self.chunks: list[bytes] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] in _TRANSPORT_REFUSALS:
            self.start = message
            return
        if self.start is None or message["type"] != "http.response.body":
            await self.send(message)
            return
        self.chunks.append(message.get("body", b""))
        if message.get("more_body"):
            return
        body, content_type = self._coded(b"".join(self.chunks))
        headers = [
            (k, v) for k, v in self.start.get("headers", []) if k.lower() not in (b"content-length", b"content-type")
        ]
        headers += [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})
        self.start, self.chunks = None, []

    def _coded(self, body: bytes) -> tuple[bytes, str]:
        """The surface's error for the transport's answer, answering its id."""
        try:
            answer = json.loads(body)
            error = answer["error"]
            text, jsonrpc_code = str(error["message"]), int(error.get("code") or JSONRPC_INVALID_REQUEST)
        except (ValueError, KeyError, TypeError):
            # A plain-text refusal: a Content-Type other than JSON, or another of the transport's.
            plain = body[:200].decode("utf-8", "replace").strip()
            text = NOT_JSON_CONTENT if b"content-type" in body.lower() or not plain else plain
            answer, jsonrpc_code = {}, JSONRPC_INVALID_REQUEST
        for prefix, message in _ENVELOPE_ERRORS.items():
            if text.startswith(prefix):
                text = message
        request_id = answer.get("id") if isinstance(answer, dict) else None
        return surface_error(
            self.path,
            InvalidArgument.code,
            text,
            {},
            json.dumps({"id": request_id}).encode(),
            jsonrpc_code=jsonrpc_code,
        )


def storage_unavailable(path: str) -> Refusal:
    """503 with Retry-After and the surface's storage error. The transport has
    read the request's body by then, so the error answers no id."""
    body, content_type = surface_error(
        path, StorageUnavailable.code, STORAGE_MESSAGE, {}, jsonrpc_code=JSONRPC_SERVER_ERROR
    )
    return 503, body, content_type, [(b"retry-after", str(RETRY_AFTER_SECONDS).encode())]


def presented_token(scope: Scope) -> str | None:
    """The bearer token of the request as the SDK's transport reads it, or None."""
    for key, value in scope.get("headers") or []:
        if key == b"authorization":
            header = value.decode("latin-1")
            if header.lower().startswith("bearer ") and header[7:].strip():
                return header[7:]
    return None


# Seconds a refused token's request body is waited for, for its JSON-RPC id:
# a client writes its body right after the headers; one that has not come by
# then is answered without its id rather than waited for.
TOKEN_REFUSAL_BODY_WAIT = 0.5


async def token_refusal(path: str, receive: Any) -> Refusal:
    """A token that was sent but refused (unknown, revoked or expired): 401 with
    RFC 6750's ``invalid_token`` challenge and no ``resource_metadata``, and, in
    the body, a JSON-RPC error in the dialect's vocabulary that says so,
    answering the request's id.

    401 because the MCP authorization spec requires it for invalid or expired
    tokens. What tells it apart from a missing token (401 with the
    ``resource_metadata`` challenge, so OAuth discovery finds the RFC 9728
    document) is the ``invalid_token`` error in the challenge and the body's
    message, which the python SDK's client surfaces as the error: memproj's
    tokens come from ``issue_token`` or the admin, so a client is told to get a
    new one rather than pointed at an authorization server.

    The body is read for the id for at most ``TOKEN_REFUSAL_BODY_WAIT``
    seconds: a request without valid credentials is not kept waiting on a
    body that does not come."""
    body = b""
    with contextlib.suppress(TimeoutError):
        body = await asyncio.wait_for(read_body_for_id(receive), TOKEN_REFUSAL_BODY_WAIT)
    payload, content_type = surface_error(
        path, "PERMISSION_DENIED", CREDENTIALS_REFUSED, {"error": "invalid_token"}, body
    )
    return 401, payload, content_type, [(b"www-authenticate", REFUSED_CHALLENGE.encode())]


def post_only(path: str) -> Refusal:
    """Any method but POST with a valid token. The endpoint is stateless (any
    web process answers any request), so it keeps no event stream a GET could
    listen to (without this answer the SDK would hold an empty one open) and no
    session a DELETE could end."""
    body, content_type = surface_error(
        path,
        "METHOD_NOT_ALLOWED",
        "this MCP endpoint is stateless streamable HTTP: POST each JSON-RPC request to it and read the answer "
        "from the response; it keeps no event stream for a GET to listen to and no session to end.",
        {"allow": "POST"},
    )
    return 405, body, content_type, [(b"allow", b"POST")]


async def message_refusal(path: str, receive: Any) -> tuple[Refusal | None, Any]:
    """A POST's body read before the SDK's transport parses it, refused with
    400 and the dialect's INVALID_ARGUMENT where the transport would take it
    wrongly: a JSON-RPC message that names a key twice in one object, at any
    depth (``json_document``; the transport keeps the last of a repeated key
    while a proxy or a log reading the same bytes may take the first),
    answering its id; a request whose id is neither a string nor an integer
    (``request_id_problem``), answering id null (the transport took it for a
    notification: 202 and no answer ever). Else None and a receive that gives
    the SDK the messages read, as they came, then the rest.

    At most the MCP body limit is read (the bound ``BodyLimit`` puts on the
    body before this runs: past it, it has answered 413 and the receive says
    the client is gone); a body that did not end by then is not checked."""
    limit = int(settings.MEMPROJ_HTTP["MAX_BODY_BYTES"])
    received: list[dict[str, Any]] = []
    size = 0
    while size <= limit:
        message = await receive()
        received.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    pending = iter(received)

    async def replay() -> dict[str, Any]:
        message = next(pending, None)
        return message if message is not None else await receive()

    last = received[-1]
    if size > limit or last["type"] != "http.request" or last.get("more_body", False):
        return None, replay
    body = b"".join(message.get("body", b"") for message in received)
    try:
        problem = request_id_problem(json_document(body))
    except InvalidArgument as refusal:
        problem = str(refusal)
    except ValueError:
        problem = None  # no JSON: the SDK's transport answers that
    if problem is None:
        return None, replay
    payload, content_type = surface_error(
        path, InvalidArgument.code, problem, {}, body, jsonrpc_code=JSONRPC_INVALID_REQUEST
    )
    return (400, payload, content_type, []), replay


def authorization_header(scope: Scope) -> str:
    """The request's Authorization header as Django's request reads it
    (repeated ones joined with commas)."""
    values = [value.decode("latin-1") for key, value in scope.get("headers") or [] if key == b"authorization"]
    return ",".join(values)


def as_refusal(response: HttpResponse) -> Refusal:
    headers = [
        (key.lower().encode("latin-1"), value.encode("latin-1"))
        for key, value in response.items()
        if key.lower() not in ("content-type", "content-length")
    ]
    return response.status_code, response.content, response["Content-Type"], headers


# The dialects' own routes (roampal's hooks, langmem's store): path -> their 401.
_ROUTE_UNAUTHENTICATED = dialect_unauthenticated_answers()


async def rest_credentials_refusal(scope: Scope) -> Refusal | None:
    """The 401 of a ``POST /api/<toolset>/<tool>`` or of a dialect's own route
    without valid credentials, answered before Django runs: Django reads the
    whole body before any view, so the route's own check would wait for a body
    that may never come, holding a connection for anyone without a token. The
    same answer the route gives (``mcp_server.rest.credentials_refusal``, the
    route's ``unauthenticated_answers``); None for any other request, a valid
    token, or a store the token look-up cannot reach (the route answers that: 503)."""
    path: str = scope.get("path", "")
    if scope.get("method") != "POST" or not path.startswith("/api/"):
        return None
    header = authorization_header(scope)
    try:
        if path in _ROUTE_UNAUTHENTICATED:
            response = await route_credentials_refusal(_ROUTE_UNAUTHENTICATED[path], header)
        else:
            try:
                match = resolve(path)
            except Resolver404:
                return None
            if match.url_name != "tool_call":
                return None
            response = await credentials_refusal(str(match.kwargs["toolset"]), header)
    except Exception as exc:
        if storage_failure(exc):
            return None
        raise
    return None if response is None else as_refusal(response)


def unknown_toolset(path: str, name: str) -> Refusal:
    """A path under /mcp/ that names no toolset: 404 naming the toolsets."""
    toolsets = sorted(TOOLSETS)
    message = (
        f"no MCP toolset {name[:100]!r} here; the toolsets are {', '.join(toolsets)}, each at /mcp/<toolset>/."
        if name
        else f"name a toolset: /mcp/<toolset>/ with one of {', '.join(toolsets)}."
    )
    body, content_type = surface_error(path, "NOT_FOUND", message, {"toolsets": toolsets})
    return 404, body, content_type, []


class Router:
    def __init__(self) -> None:
        self.django = ASGIStaticFilesHandler(get_asgi_application())
        # The Host / Origin check (DNS-rebinding protection) is the router's own,
        # exact one (memproj.edge.host_refusal); the SDK's matches by prefix.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.servers = {name: build_server(name, http=True) for name in TOOLSETS}
        self.verifier = MemprojTokenVerifier()
        # Stateless JSON responses: any web process can answer any request, so
        # the HTTP tier scales out behind a plain load balancer.
        self.mcp_apps = {
            name: server.streamable_http_app(
                streamable_http_path=f"/mcp/{name}",
                stateless_http=True,
                json_response=True,
                transport_security=security,
            )
            for name, server in self.servers.items()
        }

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        path: str = scope.get("path", "")
        if path == "/mcp" or path.startswith("/mcp/"):
            name = path[len("/mcp/") :].strip("/")
            app = self.mcp_apps.get(name)
            if app is None:
                await refuse(send, unknown_toolset(path, name))
                return
            refusal = host_refusal(scope, settings.MEMPROJ_MCP_ALLOWED_HOSTS)
            if refusal is not None:
                await refuse(send, refusal)
                return
            # Per-connection dialect options travel as the endpoint's query parameters.
            token = connection_options.set(query_options(scope.get("query_string", b"")))
            try:
                await self._mcp(name, app, scope, receive, send)
            finally:
                connection_options.reset(token)
            return
        if scope["type"] == "http":
            refusal = await rest_credentials_refusal(scope)
            if refusal is not None:
                await refuse(send, refusal)
                return
        await self.django(scope, receive, send)

    async def _before_the_sdk(self, name: str, scope: Scope, receive: Any) -> Refusal | None:
        """What the router answers itself for a presented token, before the
        SDK's transport (which answers a missing token: 401 with the OAuth
        discovery challenge). A refused token is told so; any method but POST
        with a valid one is told the endpoint is stateless (``post_only``)."""
        token = presented_token(scope)
        if token is None:
            return None
        if await self.verifier.verify_token(token) is None:
            return await token_refusal(f"/mcp/{name}", receive)
        if scope.get("method") != "POST":
            return post_only(scope.get("path", ""))
        return None

    async def _mcp(self, name: str, app: Any, scope: Scope, receive: Any, send: Any) -> None:
        # Token verification reads the database before any tool runs: an outage
        # there must not surface as a bare 500.
        guarded = _HoldServerError(_EnvelopeErrors(send, f"/mcp/{name}"))
        try:
            refusal = await self._before_the_sdk(name, scope, receive)
            if refusal is None and scope.get("method") == "POST" and presented_token(scope) is not None:
                # The token holds (a missing one is the SDK's to answer).
                refusal, receive = await message_refusal(f"/mcp/{name}", receive)
            if refusal is not None:
                await refuse(send, refusal)
                return
            await app(dict(scope, path=f"/mcp/{name}", raw_path=f"/mcp/{name}".encode()), receive, guarded)
        except (OperationalError, InterfaceError) as exc:
            if guarded.started:
                raise
            logger.warning("mcp %s: database unavailable: %s", name, exc)
            await refuse(send, storage_unavailable(f"/mcp/{name}"))
            return
        except BaseException:
            await guarded.release()
            raise
        await guarded.release()

    async def _lifespan(self, receive: Any, send: Any) -> None:
        async with AsyncExitStack() as stack:
            message = await receive()
            if message["type"] == "lifespan.startup":
                for server in self.servers.values():
                    await stack.enter_async_context(server.session_manager.run())
                warm_up()
                freeze_startup_heap()
                await send({"type": "lifespan.startup.complete"})
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                await stack.aclose()
                await send({"type": "lifespan.shutdown.complete"})


# Every dialect's rate-limit error speaks its own error vocabulary,
# over MCP and over its REST route.
for _name, _dialect in TOOLSETS.items():
    register_dialect_rate_limit(_name, _dialect.render_error)
# The body bound outside the rate limiter and the router, so that no body is
# read past its route's limit, neither by the rate limiter nor by authentication.
body_limit = BodyLimit(
    RateLimitMiddleware(Router()),
    default=settings.MEMPROJ_HTTP["MAX_BODY_BYTES"],
    # A dialect's own routes may take more (roampal's /api/ingest: a 10 MB document),
    # and so does the admin's import page (an upload of up to its IMPORT_MAX_BYTES).
    limits={**dialect_body_limits(), **import_body_limits()},
)
# Outermost the security headers of every answer, the body bound's refusals included.
application = SecurityHeaders(body_limit)
