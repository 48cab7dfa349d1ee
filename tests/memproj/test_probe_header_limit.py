"""MEMPROJ_HTTP_MAX_HEADER_BYTES (16 KiB by default) bounds a request head
however it arrives. Found over real HTTP: a head that came whole in one read
(a 100 KB header sent at once, as any client on a fast link sends it) was
served; only a head still incomplete after a read was held to the limit
(h11's max_incomplete_event_size), so the effective limit was asyncio's read
size, about 128 KiB. It is answered with the coded 400 an unparseable head gets."""

from __future__ import annotations

import json

import pytest

from tests.memproj.test_edge import (
    _connect,
    _read_response,
    server,  # noqa: F401 (the live web process)
)

pytestmark = pytest.mark.xdist_group("edge_server")

LIMIT = 16 * 1024


def _head(extra: int) -> bytes:
    return b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"x" * extra + b"\r\n\r\n"


@pytest.mark.parametrize("size", [LIMIT + 100, 60_000, 100_000])
def test_a_head_over_the_limit_sent_at_once_gets_the_coded_400(server, size):  # noqa: F811
    sock = _connect(server)
    try:
        sock.sendall(_head(size))
        status, headers, body = _read_response(sock)
    finally:
        sock.close()
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "INVALID_REQUEST"


def test_a_head_within_the_limit_is_served_also_with_its_body_in_the_same_read(server):  # noqa: F811
    sock = _connect(server)
    try:
        sock.sendall(_head(LIMIT - 200))
        status, _, _ = _read_response(sock)
        body = b"{" + b'"pad": "' + b"y" * 40_000 + b'"}'
        sock.sendall(
            b"POST /api/memory/memory_search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + b"Content-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        second, _, _ = _read_response(sock)
    finally:
        sock.close()
    assert status == 200
    assert second == 401  # no token: the head and body were read, the request answered
