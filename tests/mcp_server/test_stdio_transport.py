"""The stdio server as a client's mistakes meet it: raw lines on a real
``python -m mcp_server`` subprocess, read back as a client reads them."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from memory.models import Memory
from policy.models import ApiToken
from policy.services.tokens import token_revoke
from tests.mcp_server.test_transports import ROOT, _env_for_test_database

pytestmark = pytest.mark.django_db(transaction=True)
ANSWER_TIMEOUT = 120.0


class StdioPeer:
    """A stdio server subprocess and a client that writes raw lines."""

    def __init__(self, token: str, *, database_host: str | None = None) -> None:
        env = _env_for_test_database(MEMPROJ_TOKEN=token)
        if database_host is not None:  # the database through another socket directory (a relay)
            env["DATABASE_URL"] = env["DATABASE_URL"].rsplit("?host=", 1)[0] + f"?host={database_host}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mcp_server", "--toolset", "memory"],
            env=env,
            cwd=str(ROOT),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.answers: queue.Queue[dict[str, Any]] = queue.Queue()
        # Cleared: the client stops reading its answers (after the line it may be waiting for).
        self.reading = threading.Event()
        self.reading.set()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while self.reading.wait():
            line = self.proc.stdout.readline()
            if not line:
                return
            self.answers.put(json.loads(line))

    def send(self, line: bytes | dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        data = line if isinstance(line, bytes) else json.dumps(line).encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        return self.answers.get(timeout=ANSWER_TIMEOUT)

    def handshake(self) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
        assert self.answer()["id"] == 0
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def stdio_peer(member) -> Iterator[StdioPeer]:
    peer = StdioPeer(member.token)
    try:
        yield peer
    finally:
        peer.close()


def call(request_id: int, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def coded(answer: dict[str, Any]) -> str:
    """The error code a client reads from an answer (JSON-RPC error or tool error)."""
    if "error" in answer:
        assert "Traceback" not in answer["error"]["message"]
        return str(answer["error"]["data"]["code"])
    return json.loads(answer["result"]["content"][0]["text"])["error"]["code"]


BAD_LINES = [
    # (line, the JSON-RPC id it is answered with, the JSON-RPC error code)
    (b"this is not json", None, -32700),
    (b'{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "memory_search", "argu', None, -32700),
    (b'{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": "x"}', 12, -32600),
    (
        b'{"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "memory_search", '
        b'"arguments": {"query": "\\ud800"}}}',
        13,
        -32700,
    ),
    (
        b'{"jsonrpc": "2.0", "id": 14, "method": "tools/call", "params": {"name": "memory_search", '
        b'"arguments": {"query": "caf\xe9"}}}',
        None,
        -32700,
    ),
    (
        b'{"jsonrpc": "2.0", "id": 15, "method": "tools/call", "params": {"name": "memory_search", "arguments": [1]}}',
        15,
        -32602,
    ),
    (b'{"jsonrpc": "2.0", "id": 16, "method": "tools/call", "params": {"name": 7, "arguments": {}}}', 16, -32602),
    (b"[1, 2]", None, -32600),
]


def test_every_line_that_is_no_valid_request_is_answered_with_the_dialects_code(stdio_peer, member):
    stdio_peer.handshake()
    for line, request_id, jsonrpc_code in BAD_LINES:
        stdio_peer.send(line)
        answer = stdio_peer.answer()
        assert answer["id"] == request_id, line
        assert answer["error"]["code"] == jsonrpc_code, line
        assert coded(answer) == "INVALID_ARGUMENT", line
    stdio_peer.send(call(20, "memory_store_fact", subject="user", predicate="editor", content="Uses Helix"))
    stored = stdio_peer.answer()
    assert stored["id"] == 20 and not stored["result"].get("isError"), stored
    assert Memory.objects.filter(tenant_id=member.caller.tenant_id).count() == 1


def test_a_line_longer_than_the_limit_is_refused_without_being_held(stdio_peer, settings):
    stdio_peer.handshake()
    limit = settings.MEMPROJ_HTTP["MAX_BODY_BYTES"]
    # A first call grows the process once (threads, connections, caches): measure after it.
    stdio_peer.send(call(29, "memory_search", query="warm up"))
    assert stdio_peer.answer()["id"] == 29
    before = stdio_peer.rss_bytes()
    huge = b'{"jsonrpc": "2.0", "id": 30, "method": "tools/call", "params": {"name": "memory_search", "arguments": '
    stdio_peer.send(huge + b'{"query": "' + b"a" * (25 * limit) + b'"}}}')
    answer = stdio_peer.answer()
    assert answer["id"] is None and coded(answer) == "INVALID_ARGUMENT"
    assert str(limit) in answer["error"]["message"]
    # The reader holds one bounded chunk, never the line (25 times the limit).
    assert stdio_peer.rss_bytes() - before < 4 * limit
    stdio_peer.send({"jsonrpc": "2.0", "id": 31, "method": "ping"})
    assert stdio_peer.answer() == {"jsonrpc": "2.0", "id": 31, "result": {}}


def test_a_client_that_stops_reading_stops_the_server_reading(stdio_peer):
    stdio_peer.handshake()
    stdio_peer.reading.clear()
    requests = 3000
    lines = b"".join(
        json.dumps({"jsonrpc": "2.0", "id": 100 + i, "method": "tools/list"}).encode() + b"\n" for i in range(requests)
    )
    written = [0]

    def flood() -> None:
        assert stdio_peer.proc.stdin is not None
        fd = stdio_peer.proc.stdin.fileno()
        view = memoryview(lines)
        while written[0] < len(lines):
            written[0] += os.write(fd, view[written[0] : written[0] + 4096])

    threading.Thread(target=flood, daemon=True).start()
    # Wait until the server has stopped taking lines.
    last, steady_since = -1, time.monotonic()
    while time.monotonic() - steady_since < 3.0:
        time.sleep(0.25)
        if written[0] != last:
            last, steady_since = written[0], time.monotonic()
    assert written[0] < len(lines), "the server read every request while no answer was read"
    # Back-pressure, not loss: once the client reads again, every request is answered.
    stdio_peer.reading.set()
    answered = {stdio_peer.answer()["id"] for _ in range(requests)}
    assert answered == set(range(100, 100 + requests))


def test_a_token_revoked_while_the_server_runs_is_refused(stdio_peer, member):
    stdio_peer.handshake()
    stdio_peer.send(call(40, "memory_store_fact", subject="user", predicate="shell", content="Uses fish"))
    assert not stdio_peer.answer()["result"].get("isError")
    assert token_revoke(ApiToken.objects.filter(id=member.caller.token_id)) == 1
    deadline = time.monotonic() + 30
    request_id = 41
    while True:
        stdio_peer.send(call(request_id, "memory_store_fact", subject="user", predicate="os", content=f"v{request_id}"))
        answer = stdio_peer.answer()
        if "error" in answer:
            break
        assert time.monotonic() < deadline, "a revoked token kept working for 30 s"
        request_id += 1
        time.sleep(0.5)
    assert answer["id"] == request_id and coded(answer) == "PERMISSION_DENIED"
    assert "MEMPROJ_TOKEN" in answer["error"]["message"]
    kept = Memory.objects.filter(tenant_id=member.caller.tenant_id).count()
    stdio_peer.send(call(request_id + 1, "memory_search", query="fish"))
    assert coded(stdio_peer.answer()) == "PERMISSION_DENIED"
    assert Memory.objects.filter(tenant_id=member.caller.tenant_id).count() == kept
