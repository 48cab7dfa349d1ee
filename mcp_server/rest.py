"""A dialect's tools over plain HTTP: ``POST /api/<toolset>/<tool>`` with the
tool's arguments as the JSON body and ``Authorization: Bearer <token>``. The
call goes through the same server, argument contract and error rendering as
MCP; the answer is the tool's structured result, or its error text with the
HTTP status the dialect gives that error (seed 004 maps each code to one)."""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from mcp_server.dialect import REPLAYED_META_KEY
from mcp_server.server import build_server
from mcp_server.toolsets import TOOLSETS
from memproj.dbthreads import fresh_connections
from policy.caller import Caller
from policy.services.tokens import token_authenticate

MAX_BODY_BYTES = 256 * 1024
_servers: dict[str, Any] = {}


@fresh_connections
def _authenticate(header: str) -> Caller | None:
    scheme, _, token = header.partition(" ")
    return token_authenticate(token.strip()) if scheme.lower() == "bearer" else None


def _server(toolset: str) -> Any:
    if toolset not in _servers:
        _servers[toolset] = build_server(toolset)
    return _servers[toolset]


def _error(dialect: Any, code: str, message: str, status: int) -> HttpResponse:
    return HttpResponse(
        dialect.render_error(code, message, {}), status=status, content_type="application/json; charset=utf-8"
    )


@csrf_exempt
@require_POST
async def tool_call(request: HttpRequest, toolset: str, tool: str) -> HttpResponse:
    dialect = TOOLSETS.get(toolset)
    if dialect is None:
        return JsonResponse({"error": {"code": "NOT_FOUND", "message": f"no toolset {toolset!r}"}}, status=404)
    caller = await sync_to_async(_authenticate, thread_sensitive=False)(request.headers.get("Authorization", ""))
    if caller is None:
        response = _error(dialect, "PERMISSION_DENIED", "send Authorization: Bearer <token>.", 401)
        response["WWW-Authenticate"] = "Bearer"
        return response
    if int(request.headers.get("Content-Length") or 0) > MAX_BODY_BYTES:
        return _error(dialect, "INVALID_ARGUMENT", f"the body is over {MAX_BODY_BYTES} bytes.", 413)
    try:
        arguments = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return _error(dialect, "INVALID_ARGUMENT", "the body must be a JSON object of the tool's arguments.", 400)
    # A write retried with the same Idempotency-Key replays its first answer (mcp_server.dialect).
    idempotency_key = request.headers.get("Idempotency-Key")
    result = await _server(toolset).call_as(
        caller, tool, arguments if isinstance(arguments, dict) else [], idempotency_key=idempotency_key
    )
    if result.is_error:
        text = " ".join(getattr(block, "text", "") for block in result.content)
        return HttpResponse(text, status=dialect.http_status(text), content_type="application/json; charset=utf-8")
    response = JsonResponse(result.structured_content or {}, status=200, json_dumps_params={"ensure_ascii": False})
    if (result.meta or {}).get(REPLAYED_META_KEY):
        response["Idempotent-Replayed"] = "true"
    return response
