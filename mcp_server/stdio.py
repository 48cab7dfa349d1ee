"""The stdio transport of ``python -m mcp_server``: the MCP SDK's session over
the process's stdin and stdout, behind a reader that gives a client's mistakes
an answer and keeps the server's size bounded.

The SDK's own stdio reader reads a line of any length, answers nothing to a
line that is no JSON-RPC message (a client waiting for that id waits for
ever), and reads on while its answers wait to be written, one task per
request, so a client that stops reading grows the server without bound. Here:

- a line is read up to the HTTP tier's body limit, never further; a longer one
  is skipped to its end and refused;
- a line that is not UTF-8 JSON, or no JSON-RPC message, is answered with the
  dialect's coded INVALID_ARGUMENT, with the request's id when it has one, as
  the HTTP endpoint answers such a body; so is one that names a key twice in
  one object (``memory.validation.json_document``), before the SDK takes the
  last of the two;
- at most ``MAX_IN_FLIGHT`` requests are read ahead of their answers: a client
  that does not read its answers stops the server reading, not its memory;
- the token is verified again before each request, through the HTTP tier's
  token cache, so a token revoked (or expired) while the server runs is
  refused within ``TOKEN_CACHE_SECONDS``, as on HTTP without Redis;
- a token check waits at most ``TOKEN_CHECK_SECONDS`` for the database: a
  database that stops answering without closing its connections (frozen, or
  the network partitioned) gets each request the storage error, not a reader
  stuck on it for ever, and requests meanwhile share the one check under way.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any, BinaryIO, cast

import anyio
import mcp_types as types
from django.conf import settings
from django.db import DatabaseError
from mcp.server.stdio import stdio_server
from pydantic import ValidationError

from mcp_server.auth import verified_caller
from mcp_server.dialect import DialectServer
from mcp_server.http import NOT_JSON, NOT_JSONRPC, STORAGE_MESSAGE, request_id_problem
from memory.errors import InvalidArgument, StorageUnavailable
from memory.validation import json_document
from policy.caller import Caller
from policy.middleware import JSONRPC_INVALID_REQUEST, jsonrpc_error

# Requests read and not yet answered: enough for a client's parallel calls,
# few enough that one that stops reading holds little.
MAX_IN_FLIGHT = 16
JSONRPC_PARSE_ERROR = -32700
# The token check is one indexed query: a database that has not answered it by
# then is, for the client waiting, unavailable (libpq has no read timeout).
TOKEN_CHECK_SECONDS = 10.0
_DRAIN_CHUNK = 64 * 1024
STDIO_CREDENTIALS_REFUSED = (
    "MEMPROJ_TOKEN was refused: it is unknown, revoked or expired. Issue a new one with "
    "`python manage.py issue_token --tenant <tenant> --principal <principal>` or in the admin (API tokens), "
    "and restart the server with it."
)


def max_line_bytes() -> int:
    """One message's bound: the HTTP tier's largest request body."""
    return int(settings.MEMPROJ_HTTP["MAX_BODY_BYTES"])


class _Wire:
    """The client's end of stdout: whole lines, one writer at a time. Each answer
    written frees its request's place among those in flight."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.lock = anyio.Lock()
        self.in_flight: set[str] = set()
        self.slots = anyio.Semaphore(MAX_IN_FLIGHT)

    async def send(self, line: bytes) -> None:
        async with self.lock:
            await anyio.to_thread.run_sync(self._write, line)

    def _write(self, line: bytes) -> None:
        self.out.write(line.rstrip(b"\n") + b"\n")
        self.out.flush()

    # The SDK's writer calls ``write`` then ``flush`` on a text file.
    async def write(self, text: str) -> None:
        await self.send(text.encode("utf-8", "backslashreplace"))
        try:
            message = json.loads(text)
        except ValueError:
            return
        if isinstance(message, dict) and "method" not in message and "id" in message:
            self.answered(message["id"])

    async def flush(self) -> None:
        return None

    async def admit(self, request_id: Any) -> bool:
        """Take a place for a request; False if its id is already in flight."""
        key = json.dumps(request_id)
        if key in self.in_flight:
            return False
        await self.slots.acquire()
        self.in_flight.add(key)
        return True

    def answered(self, request_id: Any) -> None:
        """The request was answered, or cancelled (a cancelled request is never answered)."""
        key = json.dumps(request_id)
        if key in self.in_flight:
            self.in_flight.remove(key)
            self.slots.release()


class _Lines:
    """stdin as the SDK's reader iterates it: only lines that are JSON-RPC
    messages, each request admitted by ``_Wire`` and by the token check; every
    other line is answered here."""

    def __init__(self, source: BinaryIO, wire: _Wire, server: DialectServer, token: str) -> None:
        self.source = source
        self.wire = wire
        self.server = server
        self.token = token
        self.limit = max_line_bytes()
        # The token check under way: one at a time, however long the database takes.
        self._check: asyncio.Future[Caller | None] | None = None

    def __aiter__(self) -> AsyncIterator[str]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[str]:
        while True:
            line = await anyio.to_thread.run_sync(self.source.readline, self.limit + 1, abandon_on_cancel=True)
            if not line:
                return
            if len(line) > self.limit and not line.endswith(b"\n"):
                await anyio.to_thread.run_sync(self._skip_rest_of_line, abandon_on_cancel=True)
                await self._refuse(
                    b"", f"a message is at most {self.limit} bytes on one line.", JSONRPC_INVALID_REQUEST
                )
                continue
            if not line.strip():
                continue
            text = await self._admitted(line)
            if text is not None:
                yield text

    def _skip_rest_of_line(self) -> None:
        while True:
            chunk = self.source.readline(_DRAIN_CHUNK)
            if not chunk or chunk.endswith(b"\n"):
                return

    async def _admitted(self, line: bytes) -> str | None:
        try:
            text = line.decode("utf-8")
            types.jsonrpc_message_adapter.validate_json(text, by_name=False)
        except ValueError as error:
            await self._refuse(line, *_envelope_problem(error))
            return None
        try:
            message = json_document(text)
        except InvalidArgument as refusal:
            # A key twice in one object, at any depth: the SDK would take the last.
            await self._refuse(line, str(refusal))
            return None
        problem = request_id_problem(message)
        if problem is not None:
            # The SDK takes such a request for a notification: it would never be answered.
            await self._refuse(line, problem)
            return None
        if "method" in message and "id" in message:
            refused = await self._token_refusal()
            if refused is not None:
                await self._refuse(line, refused[1], code=refused[0])
                return None
            if not await self.wire.admit(message["id"]):
                await self._refuse(line, "a request with this id is still in flight: give each request its own id.")
                return None
        elif message.get("method") == "notifications/cancelled":
            request_id = (message.get("params") or {}).get("requestId")
            if request_id is not None:
                self.wire.answered(request_id)
        return text

    async def _token_refusal(self) -> tuple[str, str] | None:
        """None if the token still holds; else the code and message to answer with."""
        if self._check is None or self._check.done():
            self._check = asyncio.ensure_future(verified_caller(self.token))
            # Its failure is read here, or by no one if it ends after its bound.
            self._check.add_done_callback(lambda check: check.cancelled() or check.exception())
        try:
            caller = await asyncio.wait_for(asyncio.shield(self._check), TOKEN_CHECK_SECONDS)
        except (DatabaseError, TimeoutError):
            # The store is down: this request is refused as retryable; the server goes on.
            return StorageUnavailable.code, STORAGE_MESSAGE
        if caller is None:
            return "PERMISSION_DENIED", STDIO_CREDENTIALS_REFUSED
        # The token's row as it is now (its scopes may have been edited).
        self.server.static_caller = caller
        return None

    async def _refuse(
        self, line: bytes, message: str, jsonrpc_code: int = JSONRPC_INVALID_REQUEST, code: str = InvalidArgument.code
    ) -> None:
        render = self.server.dialect.render_error
        await self.wire.send(jsonrpc_error(code, message, {}, line, render=render, jsonrpc_code=jsonrpc_code))


def _envelope_problem(error: ValueError) -> tuple[str, int]:
    """What is wrong with a line the SDK's parser refused, in the HTTP endpoint's words."""
    not_json = isinstance(error, UnicodeDecodeError) or (
        isinstance(error, ValidationError) and any(e["type"] == "json_invalid" for e in error.errors())
    )
    return (NOT_JSON, JSONRPC_PARSE_ERROR) if not_json else (NOT_JSONRPC, JSONRPC_INVALID_REQUEST)


def _claimed_stdio() -> tuple[BinaryIO, BinaryIO]:
    """The wire's stdin and stdout, on private descriptors; fd 0 reads the null
    device and fd 1 writes to stderr while serving, so a stray print or a child
    process cannot corrupt the wire."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
        os.dup2(2, 1)
    finally:
        os.close(devnull)
    # Never closed: a reader thread may still be blocked on the wire when the
    # server stops, and closing its file under it would wait on that thread.
    return os.fdopen(wire_in, "rb", buffering=64 * 1024, closefd=False), os.fdopen(wire_out, "wb", closefd=False)


async def serve_stdio(server: DialectServer, token: str) -> None:
    """Serve ``server`` over stdin and stdout for the client that started it."""
    source, out = _claimed_stdio()
    wire = _Wire(out)
    lines = _Lines(source, wire, server, token)
    lowlevel = server._lowlevel_server
    async with stdio_server(stdin=cast(Any, lines), stdout=cast(Any, wire)) as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
