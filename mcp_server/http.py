"""What every plain HTTP surface (``/api/*``) shares, the dialects' own routes
(``mcp_server/dialects/<name>/routes.py``, which import it through
``mcp_server.dialect``) among them:

- Errors: a JSON body that names a code, never an HTML page or a traceback;
  for an error a client may retry (the store unreachable, the embedder down,
  a timeout) the status 503 with ``Retry-After``, so that clients back off and
  retry instead of giving up (a 4xx) or retrying blindly (a bare 500). Each
  surface keeps its own body shape (a dialect's error text on
  ``/api/<toolset>/<tool>``, ``{"error": {"code", "message"}}`` on the
  LangGraph store, roampal's ``{"error": "..."}`` plus ``code`` on its hooks);
  this module decides the status and headers, and answers for Django itself
  (``handler500`` and friends in ``memproj.urls``, and ``coded_errors``, the
  middleware that codes the error answers Django writes without a body of
  ours, such as ``require_safe``'s bare 405) on every path but the admin's.
- Authentication: ``bearer_caller``, the caller behind an
  ``Authorization: Bearer <token>`` header.
- Worker threads: ``in_worker_thread`` serves a sync view from the event
  loop's reused executor threads.
- Idempotency keys: ``idempotent_response`` and ``idempotent_view`` for the
  routes that write."""

from __future__ import annotations

import functools
import io
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.db import DatabaseError, DataError, InterfaceError
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware
from django.views import defaults

from memory import api
from memproj.dbthreads import fresh_connections
from policy.caller import Caller
from policy.errors import StorageUnavailable
from policy.middleware import BUDGET_SCOPE_KEY, surface_error
from policy.services.tokens import token_authenticate

logger = logging.getLogger(__name__)

# Seconds a client should wait before retrying while the store is unreachable.
RETRY_AFTER_SECONDS = 5
RETRYABLE = frozenset({StorageUnavailable.code, "EMBEDDING_ERROR", "TIMEOUT"})
STORAGE_MESSAGE = f"the memory store is unavailable right now; retry in {RETRY_AFTER_SECONDS} seconds."
Response = TypeVar("Response", bound=HttpResponse)


def retryable(code: str) -> bool:
    return code in RETRYABLE


def retry_later(response: Response) -> Response:
    """A retryable error's answer: 503 with Retry-After."""
    response.status_code = 503
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def refused_value(exc: BaseException) -> api.InvalidArgument | None:
    """The database refused a value the request carried (out of its range, an
    encoding it cannot hold): the caller's input, not the store's state, so
    an invalid argument, which no retry can mend, never a storage error."""
    if not isinstance(exc, DataError):
        return None
    cause = getattr(getattr(exc.__cause__, "diag", None), "message_primary", None) or "a value is out of range"
    return api.InvalidArgument(f"the store cannot hold a value of this request: {cause}.")


def storage_failure(exc: BaseException) -> bool:
    """A database failure: the store is unreachable or refused the statement
    (for a reason other than one of the request's values, ``refused_value``)."""
    return isinstance(exc, (DatabaseError, InterfaceError)) and not isinstance(exc, DataError)


# The admin is a browser UI: it keeps Django's HTML pages. Every other path
# answers its errors as coded JSON.
ADMIN_PREFIX = "/admin/"
INTERNAL_MESSAGE = "unexpected internal error; it has been logged."
# The code and message of an error answer Django writes itself, by status.
DJANGO_ERRORS = {
    400: ("INVALID_ARGUMENT", "the request could not be read (bad headers or an oversized body)."),
    403: ("PERMISSION_DENIED", "this request is not allowed."),
    404: ("NOT_FOUND", "no endpoint at {path}."),
    405: ("METHOD_NOT_ALLOWED", "{method} is not allowed at {path}; it answers {allow}."),
    500: ("INTERNAL", INTERNAL_MESSAGE),
}


def coded_path(request: HttpRequest) -> bool:
    """Whether ``request`` gets its errors as coded JSON: every path but the admin's."""
    path = request.path_info
    return not (path == ADMIN_PREFIX.rstrip("/") or path.startswith(ADMIN_PREFIX))


def coded_error(
    request: HttpRequest, code: str, message: str, status: int, details: dict[str, Any] | None = None
) -> HttpResponse:
    """An error answer in the vocabulary of the surface the path belongs to
    (``policy.middleware.surface_error``: the plain ``{"error": {"code",
    "message", "details"}}`` body outside the dialects' routes), as the errors
    answered before Django runs are."""
    body, content_type = surface_error(request.path_info, code, message, details or {})
    return HttpResponse(body, status=status, content_type=content_type)


def _django_error(request: HttpRequest, status: int, **details: str) -> tuple[str, str]:
    code, message = DJANGO_ERRORS.get(status, ("INTERNAL" if status >= 500 else "INVALID_ARGUMENT", ""))
    fields = {"path": request.path_info[:200], "method": request.method or "", **details}
    return code, message.format(**fields) if message else f"HTTP {status}."


def coded_answer(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """``response`` itself, unless it is an error answer without a JSON body
    outside the admin: then the same status and headers (``Allow`` of a 405
    among them, also named in the message) with the coded body. Such answers
    are Django's own: ``require_safe``'s and ``require_http_methods``' bare
    405, the CSRF failure page, and under DEBUG the HTML pages of a 404, a
    400 or a 500 (with its traceback)."""
    if response.status_code < 400 or response.streaming or not coded_path(request):
        return response
    if response.get("Content-Type", "").startswith("application/json"):
        return response
    details = {"allow": response["Allow"]} if response.status_code == 405 and response.has_header("Allow") else {}
    code, message = _django_error(request, response.status_code, **details)
    body, content_type = surface_error(request.path_info, code, message, details)
    response.content = body
    response["Content-Type"] = content_type
    # CommonMiddleware, inside this one, may have counted the old body.
    response["Content-Length"] = str(len(body))
    return response


@sync_and_async_middleware
def coded_errors(
    get_response: Callable[[HttpRequest], Any],
) -> Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]:
    """Django middleware, first in MIDDLEWARE so that it sees every answer: one
    place that turns Django's bare error answers into coded JSON
    (``coded_answer``), instead of a copy of the check in every view. Async
    under ASGI, so the request stays on the event loop."""
    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponse:
            return coded_answer(request, await get_response(request))

        return middleware

    def sync_middleware(request: HttpRequest) -> HttpResponse:
        return coded_answer(request, get_response(request))

    return sync_middleware


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's handler500. Django calls it while handling the exception, so
    the exception is at hand: a database failure is a retryable 503."""
    if not coded_path(request):
        return defaults.server_error(request)
    exc = sys.exc_info()[1]
    refused = refused_value(exc) if exc is not None else None
    if refused is not None:
        return coded_error(request, refused.code, str(refused), 400)
    if exc is not None and storage_failure(exc):
        logger.warning("%s: storage failure: %r", request.path, exc)
        return retry_later(coded_error(request, StorageUnavailable.code, STORAGE_MESSAGE, 503))
    return coded_error(request, *_django_error(request, 500), 500)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not coded_path(request):
        return defaults.page_not_found(request, exception)
    return coded_error(request, *_django_error(request, 404), 404)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not coded_path(request):
        return defaults.bad_request(request, exception)
    return coded_error(request, *_django_error(request, 400), 400)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not coded_path(request):
        return defaults.permission_denied(request, exception)
    return coded_error(request, *_django_error(request, 403), 403)


# --- Authentication ------------------------------------------------------------------


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization`` header of the Bearer scheme (in any
    case, RFC 7235), or None when the header names no such token."""
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def bearer_caller(header: str) -> Caller | None:
    """The caller behind an ``Authorization: Bearer <token>`` header, or None
    (no header, another scheme, or a token that is unknown, revoked or expired:
    ``bearer_token(header)`` tells a missing token from a refused one). Reads
    the database: call it from a worker thread."""
    token = bearer_token(header)
    return token_authenticate(token) if token else None


# A token was sent but is not one memproj accepts: every surface says so, apart
# from a missing token (which asks for one).
CREDENTIALS_REFUSED = (
    "the bearer token was refused: it is unknown, revoked or expired. Issue a new one with "
    "`python manage.py issue_token --tenant <tenant> --principal <principal>` or in the admin (API tokens)."
)
# RFC 6750's challenge for a refused token (no resource_metadata: memproj's
# tokens come from issue_token or the admin, never from an OAuth flow).
REFUSED_CHALLENGE = 'Bearer error="invalid_token", error_description="the bearer token was refused"'
# A message that is no JSON-RPC request, on either MCP transport.
NOT_JSON = "the message is not JSON: send one JSON-RPC 2.0 message as UTF-8 JSON (no lone surrogates)."
NOT_JSONRPC = (
    'the message is not a JSON-RPC 2.0 message this endpoint takes: one JSON object with "jsonrpc": "2.0", '
    'a "method" string, an "id" (a string or an integer) for a request, and "params" as an object.'
)


def request_id_problem(message: Any) -> str | None:
    """Why a JSON-RPC request's id is unusable, or None. MCP requires a string
    or an integer (never null); JSON's true and false are no integers."""
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return None
    request_id = message["id"]
    if isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool)):
        return None
    kind = (
        "null"
        if request_id is None
        else {bool: "a boolean", float: "a number written with a fraction or an exponent", list: "an array"}.get(
            type(request_id), "an object"
        )
    )
    return f"the request id must be a string or an integer; it is {kind}."


# --- Worker threads ------------------------------------------------------------------
# Under ASGI, Django runs a sync view in a thread of its own per request
# (asgiref's ThreadSensitiveContext), and Django's connections are per thread:
# every request opened a new PostgreSQL connection and left the old one open
# until the thread was collected. A view wrapped here runs in the event loop's
# executor threads instead, like the MCP tools (mcp_server.dialect) and the REST
# route: the threads and their connections are reused, closed when stale
# (CONN_MAX_AGE) or broken, around every call.


def in_worker_thread(view: Callable[..., HttpResponse]) -> Callable[..., Coroutine[Any, Any, HttpResponse]]:
    """The sync ``view`` as an async view that runs it in a reused worker thread."""
    run = fresh_connections(view)

    @functools.wraps(view)
    async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return await sync_to_async(run, thread_sensitive=False)(request, *args, **kwargs)

    return wrapper


# --- Idempotency keys ----------------------------------------------------------------
# On the plain HTTP surfaces that are not a dialect's tool route: roampal's
# writing hooks (/api/hooks/stop, /api/ingest) and the LangGraph store. A
# request with an Idempotency-Key header runs through
# memory.services.idempotency: a retry with the same key and the same body gets
# the first answer back, with Idempotent-Replayed: true, and stores nothing; the
# same key with another body is a CONFLICT. The request is identified by its
# bytes (with its content type and query string), so a retry must resend the
# same body, as a retrying client does. Only a success is kept with its key: an
# error answer rolls the write back, and a retry runs again. (The dialect
# routes, /api/<toolset>/<tool>, do the same in mcp_server.dialect.)

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"

View = Callable[[HttpRequest, Caller], HttpResponse]


class _NotKept(Exception):
    """An error answer: its write is rolled back and its key not kept."""

    def __init__(self, response: HttpResponse) -> None:
        super().__init__(response.status_code)
        self.response = response


def idempotent_response(
    request: HttpRequest, caller: Caller, scope: str, identity: bytes, respond: Callable[[], HttpResponse]
) -> HttpResponse:
    """``respond()`` at most once per Idempotency-Key. ``identity`` is what makes
    two requests the same one. Raises the service's DomainErrors (CONFLICT,
    TIMEOUT, INVALID_ARGUMENT) for the surface to render."""
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return respond()

    def run() -> dict[str, object]:
        response = respond()
        if not 200 <= response.status_code < 300:
            raise _NotKept(response)
        return {
            "status": response.status_code,
            "content_type": response.get("Content-Type", "application/json"),
            "body": response.content.decode("utf-8"),
        }

    try:
        outcome = api.idempotent(caller=caller, scope=scope, key=key, request=identity, run=run)
    except _NotKept as failed:
        return failed.response
    answer = outcome.answer
    response = HttpResponse(answer["body"], status=answer["status"], content_type=answer["content_type"])
    if outcome.replayed:
        response[REPLAYED_HEADER] = "true"
    return response


def rate_limit_charge(request: HttpRequest, calls: int) -> HttpResponse | None:
    """Make a request that runs several operations cost ``calls`` calls of the
    token's rate limit (one per operation), through the budget the rate-limit
    middleware put in the request's scope; None when they are counted (or the
    request is served without a limit), else the answer that refuses it (429
    over the limit, 503 with the limiter saturated; the middleware adds
    Retry-After and X-RateLimit-*)."""
    budget = getattr(request, "scope", {}).get(BUDGET_SCOPE_KEY)
    if budget is None:
        return None
    refusal = budget.charge(calls)
    if refusal is None:
        return None
    status, body, content_type = refusal
    return HttpResponse(body, status=status, content_type=content_type)


def idempotent_view(scope: str, limit: int) -> Callable[[View], View]:
    """For a view ``(request, caller)`` that writes: with an Idempotency-Key,
    its body (at most ``limit`` + 1 bytes, the view refuses more itself) is read
    here to identify the request, and handed to the view again."""

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, caller: Caller) -> HttpResponse:
            if IDEMPOTENCY_HEADER not in request.headers:
                return view(request, caller)
            data = request.read(limit + 1)
            # The view reads the body as sent.
            request._stream = io.BytesIO(data)  # type: ignore[attr-defined]
            identity = b"\n".join(
                [(request.content_type or "").encode(), request.META.get("QUERY_STRING", "").encode(), data]
            )
            return idempotent_response(request, caller, scope, identity, lambda: view(request, caller))

        return wrapper

    return decorate
