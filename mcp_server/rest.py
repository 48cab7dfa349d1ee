"""A dialect's tools over plain HTTP: ``POST /api/<toolset>/<tool>`` with the
tool's arguments as the JSON body and ``Authorization: Bearer <token>``. The
call goes through the same server, argument contract and error rendering as
MCP; the answer is the tool's structured result (``{"result": <its text>}`` for
a tool that answers text alone), or its error text with the HTTP status the
dialect gives that error (pce's spec maps each code to one).
Every error body is JSON: a dialect whose error text is not (memory's
``[CODE] message``, roampal's ``Error: ...``) gets it wrapped as
``{"error": {"code", "message"}}``. An error a client may retry (the store
unreachable, a timeout) is 503 with Retry-After in every dialect.

A dialect's per-connection options (langmem's ``namespace`` and
``configurable.<key>``, ...) are the query parameters, as on the MCP endpoint:
``/api/langmem/search_memory?configurable.user_id=u-123``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from mcp_server.auth import verified_caller
from mcp_server.dialect import ERROR_CODE_META_KEY, REPLAYED_META_KEY, connection_options, query_options
from mcp_server.http import (
    CREDENTIALS_REFUSED,
    REFUSED_CHALLENGE,
    STORAGE_MESSAGE,
    bearer_token,
    retry_later,
    retryable,
    storage_failure,
)
from mcp_server.registry import TOOLSETS
from mcp_server.server import build_server
from memory import api
from policy.caller import Caller

MAX_BODY_BYTES = 256 * 1024
_servers: dict[str, Any] = {}


async def _caller(header: str) -> Caller | None:
    """The caller behind an ``Authorization: Bearer <token>`` header, as the MCP
    endpoints verify it."""
    token = bearer_token(header)
    return await verified_caller(token) if token else None


def _query_string(request: HttpRequest) -> bytes | str:
    """The request's query string as sent: the ASGI scope's (Django's
    QUERY_STRING has decoded its bytes as UTF-8)."""
    scope = getattr(request, "scope", None)
    if scope is not None:
        return scope.get("query_string", b"")  # type: ignore[no-any-return]
    return str(request.META.get("QUERY_STRING", ""))


def _server(toolset: str) -> Any:
    if toolset not in _servers:
        _servers[toolset] = build_server(toolset)
    return _servers[toolset]


def _body(code: str, text: str) -> str:
    """The dialect's error text when it is a JSON object, else that text wrapped in one."""
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return text
    return json.dumps({"error": {"code": code, "message": text}}, ensure_ascii=False)


# The plain HTTP status of a tool error by its core code, for a dialect that
# names no statuses of its own (``Dialect.http_status``): what a REST client
# branches on (404 to stop looking, 403 to stop trying, 409 to read again).
# A retryable code is a 503 and INTERNAL a 500 whatever the table (``_answer``).
CORE_HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "NOT_FOUND": 404,
    "PERMISSION_DENIED": 403,
    "QUOTA_EXCEEDED": 403,
    "CONFLICT": 409,
    "DUPLICATE": 409,
    "GONE": 410,
    "RATE_LIMIT": 429,
}


def _answer(dialect: Any, code: str, text: str, status: int) -> HttpResponse:
    # An unexpected failure is a 500 in every dialect, whatever its table says.
    status = 500 if code == "INTERNAL" else status
    response = HttpResponse(_body(code, text), status=status, content_type="application/json; charset=utf-8")
    return retry_later(response) if retryable(code) else response


def _error(dialect: Any, code: str, message: str, status: int, tool: str | None = None) -> HttpResponse:
    """A refusal before the tool runs, in the words the tool answers its own
    errors in: a tool that speaks otherwise than its dialect (memento's
    remember and recall, plain sentences) has its own renderer."""
    spec = next((spec for spec in dialect.tools if spec.name == tool), None) if tool else None
    render = (spec.render_error if spec is not None else None) or dialect.render_error
    return _answer(dialect, code, render(code, message, {}), status)


@csrf_exempt
async def tool_call(request: HttpRequest, toolset: str, tool: str) -> HttpResponse:
    dialect = TOOLSETS.get(toolset)
    if dialect is None:
        message = f"no toolset {toolset[:100]!r}; the toolsets are {', '.join(sorted(TOOLSETS))}."
        return JsonResponse({"error": {"code": "NOT_FOUND", "message": message}}, status=404)
    if request.method != "POST":
        method = (request.method or "")[:20]
        message = f"{method} is not allowed here; use POST with the tool's arguments as a JSON object."
        response = _error(dialect, "METHOD_NOT_ALLOWED", message, 405)
        response["Allow"] = "POST"
        return response
    try:
        return await _call(request, dialect, toolset, tool)
    except Exception as exc:
        # Authentication and the body read sit outside the tools' guard.
        if storage_failure(exc):
            return _error(dialect, "STORAGE_ERROR", STORAGE_MESSAGE, 503)
        raise


def _unauthenticated(dialect: Any, header: str) -> HttpResponse:
    """The 401 of a request whose ``Authorization`` header names no caller: a
    refused token is told so, a missing one is asked for."""
    if bearer_token(header):
        response = _error(dialect, "PERMISSION_DENIED", CREDENTIALS_REFUSED, 401)
        response["WWW-Authenticate"] = REFUSED_CHALLENGE
        return response
    response = _error(dialect, "PERMISSION_DENIED", "send Authorization: Bearer <token>.", 401)
    response["WWW-Authenticate"] = "Bearer"
    return response


async def route_credentials_refusal(unauthenticated: Callable[[str], HttpResponse], header: str) -> HttpResponse | None:
    """``unauthenticated(header)``, a dialect route's own 401, unless the
    header names a caller (``credentials_refusal`` for the dialects' own routes)."""
    return None if await _caller(header) is not None else unauthenticated(header)


async def credentials_refusal(toolset: str, header: str) -> HttpResponse | None:
    """The 401 a ``POST /api/<toolset>/<tool>`` gets for its ``Authorization``
    header, or None when the header names a caller (or the toolset is none:
    the route answers that). The router (memproj/asgi.py) asks before Django
    reads the body, so a request without valid credentials is refused at once,
    not after its body has come (or stopped coming). May raise what the token
    look-up raises (the store unavailable)."""
    dialect = TOOLSETS.get(toolset)
    if dialect is None or await _caller(header) is not None:
        return None
    return _unauthenticated(dialect, header)


async def _call(request: HttpRequest, dialect: Any, toolset: str, tool: str) -> HttpResponse:
    header = request.headers.get("Authorization", "")
    caller = await _caller(header)
    if caller is None:
        return _unauthenticated(dialect, header)
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        declared = MAX_BODY_BYTES + 1
    if declared > MAX_BODY_BYTES:
        return _error(dialect, "INVALID_ARGUMENT", f"the body is over {MAX_BODY_BYTES} bytes.", 413, tool)
    try:
        arguments = api.json_document(request.body or b"{}")
        api.nesting(arguments, field="the arguments")
    except (ValueError, UnicodeDecodeError):
        return _error(dialect, "INVALID_ARGUMENT", "the body must be a JSON object of the tool's arguments.", 400, tool)
    except api.InvalidArgument as exc:
        return _error(dialect, exc.code, str(exc), 400, tool)
    # A write retried with the same Idempotency-Key replays its first answer (mcp_server.dialect).
    idempotency_key = request.headers.get("Idempotency-Key")
    options = connection_options.set(query_options(_query_string(request)))
    try:
        result = await _server(toolset).call_as(
            caller, tool, arguments if isinstance(arguments, dict) else [], idempotency_key=idempotency_key
        )
    finally:
        connection_options.reset(options)
    if result.is_error:
        text = " ".join(getattr(block, "text", "") for block in result.content)
        code = str((result.meta or {}).get(ERROR_CODE_META_KEY) or "INTERNAL")
        status = dialect.http_status(text) if dialect.http_status else CORE_HTTP_STATUS.get(code, 400)
        return _answer(dialect, code, text, status)
    structured = result.structured_content
    if structured is None:
        # A tool answering text alone (langmem's search_memory in its default
        # response_format) is answered as a tool returning text: {"result": text}.
        structured = {"result": " ".join(getattr(block, "text", "") for block in result.content)}
    response = JsonResponse(structured, status=200, json_dumps_params={"ensure_ascii": False})
    if (result.meta or {}).get(REPLAYED_META_KEY):
        response["Idempotent-Replayed"] = "true"
    return response
