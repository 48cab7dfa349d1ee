"""uvicorn's h11 protocol with what uvicorn lacks: a header timeout, and coded
JSON for the answers the server writes itself (``memproj.serve`` runs the web
process with it: ``--http memproj.httpserver:GuardedH11Protocol``).

- Header timeout: from the moment a connection opens, and from the first byte
  of each later request on a kept-alive connection, a client has
  ``MEMPROJ_HTTP_HEADER_TIMEOUT`` seconds to send a complete request line and
  headers. uvicorn only times out a kept-alive connection that sends nothing;
  one that trickles a header a byte at a time, or never sends one on a fresh
  connection, would otherwise hold its socket (and a place under the
  connection limit) for ever. Cut off mid-headers, the client gets a coded 408;
  a fresh connection that sent nothing is closed silently. Between requests, a
  kept-alive connection's idleness is uvicorn's ``timeout_keep_alive`` alone:
  closing it sooner, while a pooled client still counts it fresh, races the
  client's next request, which then ends without an answer.
- Body timeout: from the end of a request's headers, a client has
  ``MEMPROJ_HTTP_BODY_TIMEOUT`` seconds, plus its declared length at 64 KiB/s,
  to send its whole body (one deadline, not an idle timeout between chunks,
  so trickling cannot stretch it). Not
  answered yet, it gets a coded 408 in the vocabulary of the path's surface
  (``memproj.edge.body_timed_out``) and the app is told the client has gone;
  answered already (a 401 or 413 given before the body was read), the
  connection is closed. uvicorn waits for a body as long as bytes keep coming,
  and past the answer re-arms no timer while they do. No 408 is given while
  the server itself has paused reading (the app has not yet taken what came):
  that delay is not the client's.
- Connection limit: uvicorn's ``limit_concurrency`` (open connections, or
  requests in flight, per process) with its 503 answered as coded JSON with
  ``Retry-After``, in the vocabulary of the path's surface.
- A request line or headers uvicorn cannot parse, or over
  ``h11_max_incomplete_event_size``, get a coded JSON 400 instead of text.

Django settings are read when the first connection comes, after uvicorn has
imported the app (which sets Django up)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from memproj.edge import body_timed_out
from policy.middleware import BUSY_RETRY_AFTER, surface_error

logger = logging.getLogger("uvicorn.error")
# The slowest upload a body's deadline allows for beyond MEMPROJ_HTTP_BODY_TIMEOUT.
BODY_MIN_BYTES_PER_SECOND = 64 * 1024


def _raw_response(
    status: int, reason: str, code: str, message: str, *, coded: tuple[bytes, str] | None = None
) -> bytes:
    """A whole HTTP/1.1 response, written outside h11's state machine (which
    has no request to answer yet, or an app's answer not yet started),
    closing the connection. ``coded``: a body and content type to send instead
    of the plain coded one."""
    body, content_type = coded or (
        json.dumps({"error": {"code": code, "message": message, "details": {}}}).encode(),
        "application/json",
    )
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


async def server_busy(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The answer over the connection limit (uvicorn's own is plain text)."""
    logger.warning("Exceeded concurrency limit.")
    body, content_type = surface_error(
        scope.get("path", ""),
        "TIMEOUT",
        f"the server is at its connection limit; retry in {BUSY_RETRY_AFTER} s.",
        {"retry_after": BUSY_RETRY_AFTER},
        plain_code="SERVER_BUSY",
    )
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(BUSY_RETRY_AFTER).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class GuardedH11Protocol(H11Protocol):
    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        from django.conf import settings

        self.header_timeout: float = settings.MEMPROJ_HTTP["HEADER_TIMEOUT"]
        self.header_timer: asyncio.TimerHandle | None = None
        self.header_bytes = 0
        self.max_head_bytes: int = settings.MEMPROJ_HTTP["MAX_HEADER_BYTES"]
        self.body_timeout: float = settings.MEMPROJ_HTTP["BODY_TIMEOUT"]
        self.body_timer: asyncio.TimerHandle | None = None
        # The connection limit is checked here, so that its answer is ours.
        self.connection_limit = self.limit_concurrency
        self.limit_concurrency = None
        self.served_app = self.app

    # --- header timeout -------------------------------------------------------------
    def _await_headers(self) -> None:
        self._stop_header_timer()
        self.header_bytes = 0
        self.header_timer = self.loop.call_later(self.header_timeout, self._headers_timed_out)

    def _stop_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _headers_timed_out(self) -> None:
        self.header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.header_bytes:
            self.transport.write(
                _raw_response(
                    408,
                    "Request Timeout",
                    "REQUEST_TIMEOUT",
                    f"the request line and headers did not arrive within {self.header_timeout:g} s.",
                )
            )
        self.transport.close()

    # --- body timeout -----------------------------------------------------------------
    def _track_body(self) -> None:
        """Start the body clock when a request's headers are in and its body
        is not; stop it once the body is complete."""
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            if self.body_timer is None:
                self.body_timer = self.loop.call_later(self._body_deadline(), self._body_timed_out)
        else:
            self._stop_body_timer()

    def _body_deadline(self) -> float:
        """The body timeout, and the time its declared length takes at
        ``BODY_MIN_BYTES_PER_SECOND``: a large upload the route allows (an
        admin import, a roampal document) over a slow link is not cut off,
        while a trickled one stays bounded (the edge refuses a declared
        length over the route's limit before this)."""
        declared = 0
        if self.cycle is not None:
            for name, value in self.cycle.scope.get("headers", []):
                if name == b"content-length" and value.isdigit():
                    declared = int(value)
        return self.body_timeout + declared / BODY_MIN_BYTES_PER_SECOND

    def _stop_body_timer(self) -> None:
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None

    def _body_timed_out(self) -> None:
        self.body_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        if self.flow.read_paused:
            # The server is not reading (the app has not taken what came): not
            # the client's delay. Checked again shortly.
            self.body_timer = self.loop.call_later(0.5, self._body_timed_out)
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_started and not cycle.response_complete:
            path = cycle.scope.get("path", "")
            self.transport.write(
                _raw_response(408, "Request Timeout", "", "", coded=body_timed_out(path, self.body_timeout))
            )
        if cycle is not None and not cycle.response_complete:
            # As connection_lost will: the app's next receive says the client
            # has gone, and whatever it sends from now on is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            if self.header_timer is None and not self.header_bytes:
                # The first byte of a kept-alive connection's next request.
                self._await_headers()
            self.header_bytes += len(data)
            if self._head_too_large(data):
                self.send_400_response("request head over MEMPROJ_HTTP_MAX_HEADER_BYTES")
                return
        self.app = self._app_for_next_request()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._stop_header_timer()
        self._track_body()

    def on_response_complete(self) -> None:
        self.app = self._app_for_next_request()
        super().on_response_complete()
        # The next request's header clock starts at its first byte, which may
        # already be buffered (sent while this response was being written).
        self._stop_header_timer()
        self.header_bytes = 0
        buffered = len(self.conn.trailing_data[0])
        if buffered and not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await_headers()
            self.header_bytes = buffered
        # A pipelined request may have been taken up (its body clock starts),
        # or this one's body is still coming after its answer (it keeps its clock).
        self._track_body()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        self._stop_body_timer()
        super().connection_lost(exc)

    # --- connection limit -------------------------------------------------------------
    def _app_for_next_request(self) -> Any:
        limit = self.connection_limit
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            return server_busy
        return self.served_app

    # --- request head size ------------------------------------------------------------------
    def _head_too_large(self, data: bytes) -> bool:
        """Whether the request head being read (request line and headers, up
        to their blank line) is over ``MAX_HEADER_BYTES``. h11's
        ``max_incomplete_event_size`` only bounds a head that is still
        incomplete after a read: one that came whole in a single read (up to
        asyncio's read size, 128 KiB and more) passed whatever its size."""
        buffered = bytes(self.conn.trailing_data[0]) + data
        window = buffered[: self.max_head_bytes + 4]
        ends = [found for found in (window.find(b"\r\n\r\n"), window.find(b"\n\n")) if found >= 0]
        if ends:
            return min(ends) > self.max_head_bytes
        return len(buffered) > self.max_head_bytes

    # --- unparseable requests -----------------------------------------------------------
    def send_400_response(self, msg: str) -> None:
        self._stop_header_timer()
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self.transport.write(
                _raw_response(
                    400,
                    "Bad Request",
                    "INVALID_REQUEST",
                    "the request line or headers are malformed, or larger than the server accepts.",
                )
            )
        self.transport.close()
