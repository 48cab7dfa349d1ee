"""Idempotency keys on the plain HTTP surfaces that are not a dialect's tool
route: roampal's writing hooks (``/api/hooks/stop``, ``/api/ingest``) and the
LangGraph store. A request with an ``Idempotency-Key`` header runs through
``memory.services.idempotency``: a retry with the same key and the same body
gets the first answer back, with ``Idempotent-Replayed: true``, and stores
nothing; the same key with another body is a CONFLICT. The request is
identified by its bytes (with its content type and query string), so a retry
must resend the same body, as a retrying client does. Only a success is kept
with its key: an error answer rolls the write back, and a retry runs again.
(The dialect routes, ``/api/<toolset>/<tool>``, do the same in
``mcp_server.dialect``.)"""

from __future__ import annotations

import io
from collections.abc import Callable
from functools import wraps

from django.http import HttpRequest, HttpResponse

from memory import api
from policy.caller import Caller

HEADER = "Idempotency-Key"
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
    key = request.headers.get(HEADER)
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


def idempotent_view(scope: str, limit: int) -> Callable[[View], View]:
    """For a view ``(request, caller)`` that writes: with an Idempotency-Key,
    its body (at most ``limit`` + 1 bytes, the view refuses more itself) is read
    here to identify the request, and handed to the view again."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, caller: Caller) -> HttpResponse:
            if HEADER not in request.headers:
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
