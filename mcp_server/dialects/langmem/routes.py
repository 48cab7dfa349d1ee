"""A LangGraph ``BaseStore`` over HTTP, for ``MemprojStore`` (client.py):
``POST /api/langmem/store/`` with ``Authorization: Bearer <token>`` and a JSON
body ``{"ops": [...]}``, one result per op, in order:

- ``{"op": "get", "namespace": [...], "key": "..."}`` -> item or null
- ``{"op": "put", "namespace": [...], "key": "...", "value": {...} | null}`` -> null
  (a null value deletes; a ``ttl`` other than null is refused: items do not expire)
- ``{"op": "search", "namespace_prefix": [...], "query": "..." | null, "filter": {...} | null,
  "limit": 10, "offset": 0}`` -> [item with score]
- ``{"op": "list_namespaces", "prefix": [...] | null, "suffix": [...] | null,
  "max_depth": n | null, "limit": 100, "offset": 0}`` -> [[...], ...]

Items are shaped as LangGraph's ``Item.dict()``. The mapping onto the core is
the `langmem` dialect's (tools.py): an item is a fact
in its namespace with the key as subject. A batch is all or nothing: every op
is checked before any runs, and a batch that puts runs in one transaction, so
a refused batch (any op malformed or refused by the core) changes nothing.
Errors: HTTP 400/401/403/404/405/413 with ``{"error": {"code", "message"}}``; a
retryable one (the store unreachable, the embedder down) is 503 with
``Retry-After``.

Rate limit: each op is one call against the token's rate limit, as one
request to any other route is (policy/middleware.py): the request was counted
as one call when it arrived, and once every op is checked, before any runs,
the batch is charged the rest (``CallBudget``, handed over in the ASGI scope).
A batch over what the token has left is refused whole, 429 with
``Retry-After``, the ``X-RateLimit-*`` headers and the body the middleware
answers a refused request on this path (``{"error": {"code": "RATE_LIMIT",
"message", "details"}, "request_id"}``), and runs nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from mcp_server.dialect import (
    CREDENTIALS_REFUSED,
    REFUSED_CHALLENGE,
    STORAGE_MESSAGE,
    TENANT_SELECTORS,
    bearer_caller,
    bearer_token,
    idempotent_response,
    in_worker_thread,
    rate_limit_charge,
    refused_value,
    retry_later,
    retryable,
    storage_failure,
)
from mcp_server.dialects.langmem import tools as langmem
from memory import api
from memory.api import Caller

logger = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024
MAX_OPS = 100
STATUS = {"INVALID_ARGUMENT": 400, "NOT_FOUND": 404, "PERMISSION_DENIED": 403, "QUOTA_EXCEEDED": 403, "CONFLICT": 409}


def _error(code: str, message: str, status: int) -> JsonResponse:
    response = JsonResponse({"error": {"code": code, "message": message}}, status=status)
    return retry_later(response) if retryable(code) else response


def _strings(value: Any, field: str, *, allow_empty: bool = False) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise api.InvalidArgument(f"{field} must be a list of non-empty strings.")
    if not value and not allow_empty:
        raise api.InvalidArgument(f"{field} must not be empty.")
    return value


def _int(op: dict[str, Any], name: str, default: int) -> int:
    value = op.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise api.InvalidArgument(f"{name} must be an integer.")
    return value


def _key(op: dict[str, Any]) -> str:
    key = op.get("key")
    if not isinstance(key, str) or not key:
        raise api.InvalidArgument("key must be a non-empty string.")
    return key


# An op checked and ready to run as a caller.
Run = Callable[[Caller], Any]
# The fields of each op (LangGraph's GetOp, PutOp, SearchOp; list_namespaces
# with its match conditions as prefix/suffix): anything else is refused, as a
# tool refuses an unknown argument, rather than silently ignored.
OP_FIELDS = {
    "get": ("op", "namespace", "key", "refresh_ttl"),
    "put": ("op", "namespace", "key", "value", "index", "ttl"),
    "search": ("op", "namespace_prefix", "query", "filter", "limit", "offset", "refresh_ttl"),
    "list_namespaces": ("op", "prefix", "suffix", "max_depth", "limit", "offset"),
}


def _fields(op: dict[str, Any], kind: str) -> None:
    unknown = sorted(set(op) - set(OP_FIELDS[kind]))
    if unknown:
        named = ", ".join(repr(name[:50]) for name in unknown[:3])
        raise api.InvalidArgument(f"a {kind} op has unknown field(s) {named}; it takes {', '.join(OP_FIELDS[kind])}.")
    if op.get("refresh_ttl") is not None and not isinstance(op["refresh_ttl"], bool):
        raise api.InvalidArgument("refresh_ttl must be true, false or null (items do not expire).")
    index = op.get("index")
    if index not in (None, False) and not (isinstance(index, list) and all(isinstance(i, str) for i in index)):
        raise api.InvalidArgument("index must be null, false or a list of field paths (every item is indexed whole).")


def _prepare(op: dict[str, Any]) -> Run:
    """Check an op's shape and return what runs it: every op of a batch is
    checked before any runs, so a malformed op refuses the batch untouched."""
    kind = op.get("op")
    if isinstance(kind, str) and kind in OP_FIELDS:  # any JSON value may come as "op"
        _fields(op, kind)
    if kind == "get":
        namespace, key = _strings(op.get("namespace"), "namespace"), _key(op)

        def get(caller: Caller) -> Any:
            memory = api.fact_get_by_key(caller=caller, namespace=namespace, subject=key)
            return None if memory is None else langmem.item(memory, with_score=False)

        return get
    if kind == "put":
        namespace, key = _strings(op.get("namespace"), "namespace"), _key(op)
        if op.get("ttl") is not None:
            # Ignoring it would keep for ever an item its writer meant to expire.
            raise api.InvalidArgument("ttl is not supported: items are kept until deleted; send ttl null or omit it.")
        if op.get("value") is None:

            def delete(caller: Caller) -> None:
                api.fact_retract_by_key(caller=caller, namespace=namespace, subject=key)

            return delete
        content, metadata = langmem.fact_fields(op["value"])

        def put(caller: Caller) -> None:
            api.fact_store(
                caller=caller, subject=key, predicate=None, namespace=namespace, content=content, metadata=metadata
            )

        return put
    if kind == "search":
        prefix = _strings(op.get("namespace_prefix", []), "namespace_prefix", allow_empty=True)
        query, attributes = op.get("query"), op.get("filter")
        limit, offset = _int(op, "limit", 10), _int(op, "offset", 0)

        def search(caller: Caller) -> list[dict[str, Any]]:
            where: dict[str, Any] = dict(limit=limit, offset=offset, namespace_prefix=prefix, attributes=attributes)
            if query:
                found = api.memory_search_accessed(caller=caller, query=api.SearchQuery(query, types=["fact"], **where))
                return [langmem.item(i.memory, i.score) for i in found]
            return [langmem.item(m) for m in api.memory_list_recent_accessed(caller=caller, kinds=["fact"], **where)]

        return search
    if kind == "list_namespaces":
        starts, ends = op.get("prefix"), op.get("suffix")
        depth = op.get("max_depth")
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
            raise api.InvalidArgument("max_depth must be a positive integer or null.")
        prefix_path = _strings(starts, "prefix", allow_empty=True) if starts is not None else None
        suffix_path = _strings(ends, "suffix", allow_empty=True) if ends is not None else None
        limit, offset = _int(op, "limit", 100), _int(op, "offset", 0)

        def list_namespaces(caller: Caller) -> list[list[str]]:
            namespaces = api.namespaces_list(
                caller=caller, prefix=prefix_path, suffix=suffix_path, max_depth=depth, limit=limit, offset=offset
            )
            return [list(n) for n in namespaces]

        return list_namespaces
    raise api.InvalidArgument("op must be one of get, put, search, list_namespaces.")


@csrf_exempt
@in_worker_thread
def langmem_store(request: HttpRequest) -> HttpResponse:
    """Every answer is coded JSON: a failure the handler did not foresee is a
    coded 500, a database failure (authentication reads it too) a 503."""
    try:
        return _handle(request)
    except Exception as exc:
        refused = refused_value(exc)
        if refused is not None:
            return _error(refused.code, str(refused), STATUS.get(refused.code, 400))
        if storage_failure(exc):
            logger.warning("langmem store: storage failure: %r", exc)
            return _error("STORAGE_ERROR", STORAGE_MESSAGE, 503)
        logger.exception("langmem store: unexpected failure")
        return _error("INTERNAL", "unexpected internal error; it has been logged.", 500)


def unauthenticated(header: str) -> HttpResponse:
    """The 401 of a request whose ``Authorization`` header names no caller: a
    refused token is told so, a missing one is asked for."""
    if bearer_token(header):
        refused = _error("INVALID_TOKEN", CREDENTIALS_REFUSED, 401)
        refused["WWW-Authenticate"] = REFUSED_CHALLENGE
        return refused
    missing = _error("UNAUTHENTICATED", "send Authorization: Bearer <token>.", 401)
    missing["WWW-Authenticate"] = "Bearer"
    return missing


def _handle(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        response = _error("METHOD_NOT_ALLOWED", "use POST.", 405)
        response["Allow"] = "POST"
        return response
    header = request.headers.get("Authorization", "")
    caller = bearer_caller(header)
    if caller is None:
        return unauthenticated(header)
    if not caller.may_use_toolset(langmem.dialect.name):
        return _error("PERMISSION_DENIED", "this token is not allowed to use the 'langmem' toolset.", 403)
    too_large = _error("PAYLOAD_TOO_LARGE", f"the body exceeds {MAX_BODY} bytes.", 413)
    try:
        # Refused by its declared length before Django reads it (and by what
        # arrives, for a body that does not declare one).
        if int(request.headers.get("Content-Length") or 0) > MAX_BODY or len(request.body) > MAX_BODY:
            return too_large
    except (ValueError, RequestDataTooBig):
        return too_large
    try:
        body = api.json_document(request.body)
        api.nesting(body)
    except (ValueError, UnicodeDecodeError):
        return _error("INVALID_ARGUMENT", 'the body must be JSON: {"ops": [...]}.', 400)
    except api.InvalidArgument as exc:
        return _error(exc.code, str(exc), 400)
    ops = body.get("ops") if isinstance(body, dict) else None
    if not isinstance(ops, list) or not 1 <= len(ops) <= MAX_OPS or not all(isinstance(o, dict) for o in ops):
        return _error("INVALID_ARGUMENT", f"ops must be a list of 1-{MAX_OPS} objects.", 400)
    # The tenant is the token's, as on every surface (mcp_server.dialect): a
    # tenant selector is refused, never silently ignored (the client would
    # believe it wrote elsewhere).
    named = sorted({key for part in (body, *ops) for key in TENANT_SELECTORS if key in part})
    if named:
        return _error("PERMISSION_DENIED", f"the tenant is taken from your token; remove {', '.join(named)}.", 403)
    if not any(op.get("op") == "put" for op in ops):
        return _results(request, caller, ops)
    # A batch that puts is a write: with an Idempotency-Key a retry replays its
    # answer (mcp_server.http), running and costing no op again; with or
    # without one its ops commit together.
    try:
        return idempotent_response(
            request, caller, "http:langmem.store", request.body, lambda: _results(request, caller, ops)
        )
    except api.DomainError as exc:
        return _error(exc.code, str(exc), STATUS.get(exc.code, 500))


def _results(request: HttpRequest, caller: Caller, ops: list[dict[str, Any]]) -> HttpResponse:
    """Every op checked first, then the batch charged one call per op against
    the token's rate limit, then the ops run in order. A batch that puts runs
    in one transaction: an op the core refuses only when it runs (blank
    content, the quota reached) or any other failure rolls back the writes
    before it, so a refused batch changes nothing."""
    try:
        runs = [_prepare(op) for op in ops]
        refused = rate_limit_charge(request, len(runs))
        if refused is not None:
            return refused
        if any(op.get("op") == "put" for op in ops):
            with transaction.atomic():
                results = [run(caller) for run in runs]
        else:
            results = [run(caller) for run in runs]
    except api.DomainError as exc:
        return _error(exc.code, str(exc), STATUS.get(exc.code, 500))
    return JsonResponse({"results": results})


urlpatterns = [
    path("api/langmem/store/", langmem_store, name="langmem_store"),
]
# The route's 401, which the router answers before the body is read.
unauthenticated_answers = {"/api/langmem/store/": unauthenticated}
