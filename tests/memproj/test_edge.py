"""The web process's edge, against the real server `make run` starts
(``memproj.serve``'s web command) over real sockets: bodies bounded before
they are read and before authentication, header and idle timeouts, the
connection limit, the exact Host check of /mcp/, and a revoked token refused
from the next request on."""

from __future__ import annotations

import json
import os
import random
import select
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memproj.httpserver import BODY_MIN_BYTES_PER_SECOND
from memproj.serve import PROCESSES
from tests.conftest import call
from tests.harness.ports import HeldPort, on_held_port, serve_until_ready, stop_server

ROOT = Path(__file__).resolve().parents[2]
MAX_BODY = 64 * 1024
HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
# Longer than the header timeout, as by default: idleness between requests is the keep-alive's alone.
# Well above it, so that a client stalled on a loaded machine between waiting out
# the header timeout and its next request still finds the connection open.
KEEP_ALIVE = 8
CONNECTION_LIMIT = 40
# One web process for the whole module, on one xdist worker.
pytestmark = pytest.mark.xdist_group("edge_server")
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _database_url(db: dict) -> str:
    """The test database as the web process reaches it (with the role's password, if it has one)."""
    user = quote(db["USER"], safe="")
    if db.get("PASSWORD"):
        user += ":" + quote(db["PASSWORD"], safe="")
    return f"postgres://{user}@/{db['NAME']}?host={db['HOST']}"


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[tuple[str, int]]:
    from django.conf import settings
    from django.db import connection

    with django_db_blocker.unblock():
        db = connection.settings_dict
    # The port stays bound until the web process serves on it (see tests.harness.ports).
    held = HeldPort()
    port = held.port
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="memproj.settings.base",
        DATABASE_URL=_database_url(db),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        CELERY_TASK_ALWAYS_EAGER="true",
        MEMPROJ_TOOL_TIMEOUT_SCALE=str(settings.MEMPROJ_TOOL_TIMEOUT_SCALE),
        PYTHONPATH=str(ROOT),
        PORT=str(port),
        MEMPROJ_PUBLIC_URL=f"http://127.0.0.1:{port}",
        MEMPROJ_HTTP_MAX_BODY_BYTES=str(MAX_BODY),
        MEMPROJ_HTTP_HEADER_TIMEOUT=str(HEADER_TIMEOUT),
        MEMPROJ_HTTP_BODY_TIMEOUT=str(BODY_TIMEOUT),
        MEMPROJ_HTTP_KEEP_ALIVE_TIMEOUT=str(KEEP_ALIVE),
        MEMPROJ_HTTP_LIMIT_CONCURRENCY=str(CONNECTION_LIMIT),
        # A window no other server uses: this server's address bucket is its own.
        MEMPROJ_ANONYMOUS_RATE_LIMIT="1000000",
        MEMPROJ_ANONYMOUS_RATE_WINDOW=str(random.randint(100_000, 900_000)),
    )
    log_path = tmp_path_factory.mktemp("edge") / "web.log"
    with held:
        proc = serve_until_ready(
            on_held_port(PROCESSES["web"], held),
            held,
            log_path=log_path,
            name="the web process",
            timeout=180,
            env=env,
            cwd=ROOT,
        )
    yield "127.0.0.1", port
    stop_server(proc, log_path=log_path, name="the web process", timeout=30)


def _connect(server: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(server, timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_response(sock: socket.socket, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length body."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 "), data[:200]
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    """True if the server closes the connection within ``within`` seconds
    (anything it writes first, a 408, is read and ignored)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        readable, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        if readable:
            try:
                if sock.recv(65536) == b"":
                    return True
            except (ConnectionResetError, OSError):
                return True
    return False


# --- bodies --------------------------------------------------------------------------

# A path of each surface, and the shape its errors take.
SURFACES = [
    ("/api/memory/memory_search", "rest"),
    ("/mcp/memory/", "mcp"),
    ("/api/hooks/stop", "roampal"),
    ("/healthz", "plain"),
]


@pytest.mark.parametrize(("path", "kind"), SURFACES)
def test_a_huge_declared_body_gets_413_before_a_byte_of_it_is_sent_and_without_a_token(server, path, kind):
    """2 GB declared, none sent, no token: the answer comes at once (the server
    never waits for the body, nor asks who is calling)."""
    sock = _connect(server)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server[1]}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {2 * 1024**3}\r\n\r\n".encode()
    )
    status, headers, body = _read_response(sock, timeout=10)
    sock.close()
    assert status == 413 and headers["content-type"].startswith("application/json")
    payload = json.loads(body)
    if kind == "mcp":
        assert payload["jsonrpc"] == "2.0" and payload["error"]["data"]["code"] == "INVALID_ARGUMENT"
        assert payload["error"]["data"]["limit"] == MAX_BODY
    elif kind == "rest":
        assert payload["error"]["code"] == "INVALID_ARGUMENT" and str(MAX_BODY) in payload["error"]["message"]
    elif kind == "roampal":  # the body of roampal's other errors
        assert payload["code"] == "PAYLOAD_TOO_LARGE" and str(MAX_BODY) in payload["error"]
    else:
        assert payload["error"]["code"] == "PAYLOAD_TOO_LARGE"


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_is_cut_off_at_the_limit(server, member):
    """No Content-Length to refuse by: the body is counted as it streams, and
    the 413 comes while the client still has most of its 64 MB to send. (With
    a valid token: a request without one is refused before its body is read.)"""
    sock = _connect(server)
    sock.sendall(
        f"POST /api/memory/memory_search HTTP/1.1\r\nHost: 127.0.0.1:{server[1]}\r\n"
        f"Authorization: Bearer {member.token}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    )
    chunk = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
    planned, sent, answered = 1024, 0, False
    try:
        for _ in range(planned):
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                answered = True
                break
            sock.sendall(chunk)
            sent += 1
    except (BrokenPipeError, ConnectionResetError):
        answered = True
    assert answered and sent < planned, f"the server read all {sent} chunks without answering"
    status, _, body = _read_response(sock)
    sock.close()
    assert status == 413 and json.loads(body)["error"]["code"] == "INVALID_ARGUMENT"


def _send_part_of_a_body(
    server: tuple[str, int], path: str, token: str | None = None, declared: int = 1000
) -> socket.socket:
    """Headers declaring a ``declared``-byte body, and 3 bytes of it."""
    sock = _connect(server)
    authorization = f"Authorization: Bearer {token}\r\n" if token else ""
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server[1]}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\n{authorization}Content-Length: {declared}\r\n\r\n"
        '{"q'.encode()
    )
    return sock


def _trickle_until_answered(sock: socket.socket, within: float) -> float:
    """Send the body a byte every 0.2 s until the server answers or closes;
    the seconds that took (``within`` if it never did)."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        readable, _, _ = select.select([sock], [], [], 0.2)
        if readable:
            break
        try:
            sock.send(b" ")
        except (BrokenPipeError, ConnectionResetError):
            break
    return time.monotonic() - started


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("path", "kind"), SURFACES)
def test_a_trickled_body_gets_a_coded_408_at_the_body_timeout_and_its_connection_closed(server, member, path, kind):
    """A valid token, a body that never completes, a byte of it every 0.2 s:
    the deadline is the whole body's, so the trickle does not stretch it."""
    sock = _send_part_of_a_body(server, path, member.token)
    elapsed = _trickle_until_answered(sock, BODY_TIMEOUT * 5)
    status, headers, body = _read_response(sock, timeout=5)
    assert status == 408 and BODY_TIMEOUT - 0.5 < elapsed < BODY_TIMEOUT * 3, (status, elapsed)
    assert headers["connection"] == "close" and headers["content-type"].startswith("application/json")
    payload = json.loads(body)
    if kind == "mcp":
        assert payload["jsonrpc"] == "2.0" and payload["error"]["data"]["code"] == "INVALID_ARGUMENT"
        assert payload["error"]["data"]["timeout"] == BODY_TIMEOUT
    elif kind == "rest":
        assert payload["error"]["code"] == "INVALID_ARGUMENT" and f"{BODY_TIMEOUT:g} s" in payload["error"]["message"]
    elif kind == "roampal":
        assert payload["code"] == "REQUEST_TIMEOUT"
    else:
        assert payload["error"]["code"] == "REQUEST_TIMEOUT"
    assert _closed_by_server(sock, 1)
    sock.close()
    assert httpx.get(f"http://127.0.0.1:{server[1]}/healthz", timeout=10).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_large_declared_body_gets_the_time_its_length_takes_at_the_slowest_allowed_rate(server, member):
    """An upload the route allows, over a slow link: its deadline grows with its
    declared length (64 KiB/s), so it is not cut at the bare body timeout."""
    declared = 4 * BODY_MIN_BYTES_PER_SECOND  # four more seconds
    sock = _send_part_of_a_body(server, "/api/memory/memory_search", member.token, declared=declared)
    elapsed = _trickle_until_answered(sock, BODY_TIMEOUT * 10)
    status, _, _ = _read_response(sock, timeout=5)
    sock.close()
    assert status == 408 and BODY_TIMEOUT + 4 - 0.5 < elapsed < BODY_TIMEOUT * 3 + 4, (status, elapsed)


@pytest.mark.parametrize("token", [None, "mp_made-up-token"])
@pytest.mark.parametrize("path", ["/api/memory/memory_search", "/mcp/memory/"])
def test_without_valid_credentials_an_incomplete_body_gets_401_at_once(server, path, token):
    """No token or a made-up one: refused without waiting for the body; a
    client that goes on trickling it is disconnected at the body timeout."""
    started = time.monotonic()
    sock = _send_part_of_a_body(server, path, token)
    status, headers, body = _read_response(sock, timeout=BODY_TIMEOUT * 3)
    assert status == 401 and time.monotonic() - started < BODY_TIMEOUT / 2, (status, time.monotonic() - started)
    assert headers["www-authenticate"].startswith("Bearer")
    payload = json.loads(body)
    if path.startswith("/api/"):
        assert payload["error"]["code"] == "PERMISSION_DENIED", payload
    elif token is not None:  # a missing token is the SDK's to answer, in OAuth's shape
        assert payload["error"]["data"]["code"] == "PERMISSION_DENIED", payload
    if path.startswith("/api/"):
        assert ("invalid_token" in headers["www-authenticate"]) == (token is not None)
    assert _trickle_until_answered(sock, BODY_TIMEOUT * 5) < BODY_TIMEOUT * 3
    assert _closed_by_server(sock, 1)
    sock.close()


# --- timeouts and the connection limit -----------------------------------------------


def test_slow_headers_are_timed_out_on_200_sockets(server):
    """200 clients that trickle their headers a byte at a time (and 10 that
    send nothing) are all disconnected soon after the header timeout; the
    server answers normally afterwards."""
    slow = [_connect(server) for _ in range(200)]
    silent = [_connect(server) for _ in range(10)]
    for sock in slow:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server[1]}\r\n".encode())
    started = time.monotonic()
    open_sockets = list(slow)
    while open_sockets and time.monotonic() - started < HEADER_TIMEOUT * 4:
        still = []
        for sock in open_sockets:
            try:
                sock.send(b"X")
                still.append(sock)
            except (BrokenPipeError, ConnectionResetError):
                pass
        open_sockets = still
        time.sleep(0.2)
    closed = [sock for sock in open_sockets if _closed_by_server(sock, 0.5)]
    assert len(open_sockets) == len(closed), f"{len(open_sockets) - len(closed)} slow sockets still open"
    assert all(_closed_by_server(sock, HEADER_TIMEOUT) for sock in silent)
    for sock in slow + silent:
        sock.close()
    assert httpx.get(f"http://127.0.0.1:{server[1]}/healthz", timeout=10).status_code == 200


def test_an_idle_kept_alive_connection_is_closed(server):
    sock = _connect(server)
    sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server[1]}\r\n\r\n".encode())
    status, _, _ = _read_response(sock)
    assert status == 200
    assert _closed_by_server(sock, KEEP_ALIVE + 5)  # the slack is for a server slowed by a loaded machine
    sock.close()


def test_a_kept_alive_connection_idle_past_the_header_timeout_still_gets_its_next_request_answered(server):
    """A pooled client reuses a connection it still counts fresh. Closing it
    at the header timeout instead of the keep-alive's would race that
    request, which would then end without any answer."""
    request = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server[1]}\r\n\r\n".encode()
    sock = _connect(server)
    sock.sendall(request)
    assert _read_response(sock)[0] == 200
    assert not _closed_by_server(sock, HEADER_TIMEOUT + 1)
    sock.sendall(request)
    assert _read_response(sock)[0] == 200
    sock.close()


def test_by_default_a_kept_alive_connection_outlives_a_pooled_clients_idle_expiry():
    """The MCP SDK's client pools with httpx; a server closing first races its next request."""
    from memproj.settings.environment import setting

    keep_alive = setting("MEMPROJ_HTTP_KEEP_ALIVE_TIMEOUT").default
    assert keep_alive > httpx.Limits().keepalive_expiry
    assert keep_alive > setting("MEMPROJ_HTTP_HEADER_TIMEOUT").default


def test_a_kept_alive_connections_next_header_gets_the_header_timeout_from_its_first_byte(server):
    """The keep-alive idleness does not extend a trickled header: once the next
    request starts, its line and headers must arrive within the header timeout."""
    sock = _connect(server)
    sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server[1]}\r\n\r\n".encode())
    assert _read_response(sock)[0] == 200
    time.sleep(1)
    sock.sendall(b"GET /healthz HTTP/1.1\r\n")
    status, _, body = _read_response(sock, timeout=HEADER_TIMEOUT + 2)
    assert status == 408
    assert json.loads(body)["error"]["code"] == "REQUEST_TIMEOUT"
    assert _closed_by_server(sock, 1)
    sock.close()


def _one_over_the_connection_limit(server: tuple[str, int]) -> tuple[int, dict[str, str], bytes, float]:
    """Hold CONNECTION_LIMIT silent connections and send one request more; also
    how long after the first held connection opened its answer came."""
    started = time.monotonic()
    held = [_connect(server) for _ in range(CONNECTION_LIMIT)]
    try:
        time.sleep(0.2)
        sock = _connect(server)
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server[1]}\r\n\r\n".encode())
        status, headers, body = _read_response(sock)
        sock.close()
    finally:
        for other in held:
            other.close()
    return status, headers, body, time.monotonic() - started


def test_over_the_connection_limit_a_request_gets_a_coded_503_with_retry_after(server):
    # The held connections send nothing, so the header timeout closes them
    # HEADER_TIMEOUT after they opened. An answer that came later proves
    # nothing either way (a loaded machine can stall this long): try again.
    # One that came sooner must be the 503, or the limit is broken.
    for _ in range(5):
        status, headers, body, elapsed = _one_over_the_connection_limit(server)
        if status == 503 or elapsed < HEADER_TIMEOUT:
            break
    assert status == 503 and int(headers["retry-after"]) >= 1, (status, elapsed)
    assert json.loads(body)["error"]["code"] == "SERVER_BUSY"
    # Once the held connections are closed the server answers again; it sees
    # them close when its event loop gets to them, which a loaded machine delays.
    deadline = time.monotonic() + 30
    while (answer := httpx.get(f"http://127.0.0.1:{server[1]}/healthz", timeout=10)).status_code == 503:
        assert time.monotonic() < deadline, "the server stayed at its connection limit"
        time.sleep(0.3)
    assert answer.status_code == 200


# --- the source address's bucket --------------------------------------------------------


def test_made_up_tokens_and_forwarded_addresses_share_the_source_address_bucket(server):
    """Each request carries a fresh made-up token and claims another client in
    X-Forwarded-For: all of them count in one bucket, the connection's address."""
    url = f"http://127.0.0.1:{server[1]}/api/memory/memory_search"
    remaining = []
    for n in range(4):
        answer = httpx.post(
            url,
            json={"query": "x"},
            headers={"Authorization": f"Bearer mp_made-up-{uuid.uuid4()}", "X-Forwarded-For": f"203.0.113.{n}"},
            timeout=30,
        )
        assert answer.status_code == 401
        remaining.append(int(answer.headers["x-ratelimit-remaining"]))
    assert remaining == [remaining[0] - n for n in range(4)], remaining


# --- Host check and revocation over /mcp/ ----------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_mcp_host_check_is_exact(server, member):
    url = f"http://127.0.0.1:{server[1]}/mcp/memory/"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {member.token}"}

    def post(**extra: str) -> httpx.Response:
        return httpx.post(url, json=body, headers={**headers, **extra}, timeout=30)

    assert post().status_code == 200
    assert post(Host="localhost:8011").status_code == 200
    for host in (f"127.0.0.1:{server[1]}.evil.example", "127.0.0.1:", "127.0.0.1:80x", "evil.example"):
        refused = post(Host=host)
        assert refused.status_code == 421, host
        assert refused.json()["error"]["data"]["code"] == "PERMISSION_DENIED"
    assert post(Origin=f"http://127.0.0.1:{server[1]}").status_code == 200
    origin = post(Origin=f"http://127.0.0.1:{server[1]}.evil.example")
    assert origin.status_code == 403 and origin.json()["error"]["data"]["code"] == "PERMISSION_DENIED"


@pytest.mark.django_db(transaction=True)
async def test_a_revoked_token_writes_nothing_from_the_next_request_on(server, member):
    """The web process has just verified the token (and cached it); another
    process revokes it: the very next write over /mcp/ is refused."""
    from asgiref.sync import sync_to_async

    from memory.models import Memory
    from policy.models import ApiToken
    from policy.services.tokens import token_revoke

    url = f"http://127.0.0.1:{server[1]}/mcp/memory/"
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {member.token}"}, timeout=60)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        await call(client, "memory_store_episode", content="before the revocation", butler="ops")
        await sync_to_async(token_revoke)(ApiToken.objects.filter(pk=member.caller.token_id))
        with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK raises on a 401 mid-session
            await client.call_tool("memory_store_episode", {"content": "after the revocation", "butler": "ops"})
    contents = [m async for m in Memory.objects.values_list("content", flat=True)]
    assert contents == ["before the revocation"]
