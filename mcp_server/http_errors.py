"""What every plain HTTP surface (``/api/*``) shares when it answers an error:
a JSON body that names a code, never an HTML page or a traceback; and for an
error a client may retry (the store unreachable, the embedder down, a timeout)
the status 503 with ``Retry-After``, so that clients back off and retry
instead of giving up (a 4xx) or retrying blindly (a bare 500).

Each surface keeps its own body shape (a dialect's error text on
``/api/<toolset>/<tool>``, ``{"error": {"code", "message"}}`` on the LangGraph
store, roampal's ``{"error": "..."}`` plus ``code`` on its hooks); this module
decides the status and headers, and answers for Django itself (``handler500``
and friends in ``memproj.urls``) on ``/api/`` and ``/mcp/`` paths."""

from __future__ import annotations

import logging
import sys
from typing import TypeVar

from django.db import DatabaseError, InterfaceError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from policy.errors import StorageUnavailable

logger = logging.getLogger(__name__)

# Seconds a client should wait before retrying while the store is unreachable.
RETRY_AFTER_SECONDS = 5
RETRYABLE = frozenset({StorageUnavailable.code, "EMBEDDING_ERROR", "TIMEOUT"})
STORAGE_MESSAGE = f"the memory store is unavailable right now; retry in {RETRY_AFTER_SECONDS} seconds."
API_PREFIXES = ("/api/", "/mcp/")
Response = TypeVar("Response", bound=HttpResponse)


def retryable(code: str) -> bool:
    return code in RETRYABLE


def retry_later(response: Response) -> Response:
    """A retryable error's answer: 503 with Retry-After."""
    response.status_code = 503
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def storage_failure(exc: BaseException) -> bool:
    """A database failure: the store is unreachable or refused the statement."""
    return isinstance(exc, (DatabaseError, InterfaceError))


def _for_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIXES)


def _coded(code: str, message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's handler500. Django calls it while handling the exception, so
    the exception is at hand: a database failure is a retryable 503."""
    if not _for_api(request):
        return defaults.server_error(request)
    exc = sys.exc_info()[1]
    if exc is not None and storage_failure(exc):
        logger.warning("%s: storage failure: %r", request.path, exc)
        return retry_later(_coded(StorageUnavailable.code, STORAGE_MESSAGE, 503))
    return _coded("INTERNAL", "unexpected internal error; it has been logged.", 500)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _for_api(request):
        return defaults.page_not_found(request, exception)
    return _coded("NOT_FOUND", f"no endpoint at {request.path[:200]}.", 404)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _for_api(request):
        return defaults.bad_request(request, exception)
    return _coded("INVALID_ARGUMENT", "the request could not be read (bad headers or an oversized body).", 400)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _for_api(request):
        return defaults.permission_denied(request, exception)
    return _coded("PERMISSION_DENIED", "this request is not allowed.", 403)
