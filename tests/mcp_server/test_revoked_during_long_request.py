"""A token revoked while one of its requests is still running: the request in
flight may finish, but every request after the revocation is refused within the
documented bound - at once on HTTP (MCP and /api, the revocation bumps the
generation every web process checks, docs/policy.md), within the token cache's
window on stdio (docs/connecting.md). The long request is a write held on a
lock of the memories table, taken here on a connection of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import psycopg
import pytest
from django.db import connection

from memory.models import Memory
from policy import tokencache
from policy.models import ApiToken
from policy.services.tokens import token_revoke
from tests.mcp_server.test_stdio_transport import StdioPeer, call, coded
from tests.memproj.test_edge import MCP_HEADERS, server  # noqa: F401 - a real web process

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def writes_held() -> Iterator[None]:
    """Writes to the memories table wait (reads go on) until the block ends."""
    db = connection.settings_dict
    with psycopg.connect(
        dbname=db["NAME"], user=db["USER"], host=db["HOST"], password=db.get("PASSWORD") or None
    ) as held:
        held.execute(f"LOCK TABLE {Memory._meta.db_table} IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            held.rollback()


def contents(member) -> set[str]:
    return set(Memory.objects.filter(tenant_id=member.caller.tenant_id).values_list("content", flat=True))


def test_stdio_refuses_within_the_token_cache_window_while_a_request_runs(member):
    peer = StdioPeer(member.token)
    try:
        peer.handshake()
        with writes_held():
            peer.send(call(1, "memory_store_fact", subject="user", predicate="editor", content="long write"))
            time.sleep(1.0)
            assert peer.answers.empty(), "the write did not wait for the lock"
            assert token_revoke(ApiToken.objects.filter(id=member.caller.token_id)) == 1
            revoked_at = time.monotonic()
            request_id = 2
            while True:
                peer.send({"jsonrpc": "2.0", "id": request_id, "method": "ping"})
                answer = peer.answer()
                assert answer["id"] == request_id
                if "error" in answer:
                    break
                request_id += 1
                time.sleep(0.2)
            refused_after = time.monotonic() - revoked_at
            assert coded(answer) == "PERMISSION_DENIED"
            # The documented bound, with room for a busy machine's scheduling.
            assert refused_after < tokencache.TOKEN_CACHE_SECONDS + 1.5, refused_after
            peer.send(call(100, "memory_store_fact", subject="user", predicate="os", content="after revoke"))
            answer = peer.answer()
            assert answer["id"] == 100 and coded(answer) == "PERMISSION_DENIED"
        # The request admitted before the revocation is answered once its write may go on.
        assert peer.answer()["id"] == 1
    finally:
        peer.close()
    assert "after revoke" not in contents(member)


def test_http_refuses_the_first_request_after_the_revocation_while_a_request_runs(server, member):  # noqa: F811
    base = f"http://127.0.0.1:{server[1]}"
    auth = {"Authorization": f"Bearer {member.token}"}
    with httpx.Client(base_url=base, headers=auth, timeout=120) as http:
        served = http.post("/api/memory/memory_store_episode", json={"content": "before", "butler": "ops"})
        assert served.status_code == 200, served.text
        long_answer: list[httpx.Response] = []
        with writes_held():
            runner = threading.Thread(
                target=lambda: long_answer.append(
                    http.post("/api/memory/memory_store_episode", json={"content": "long write", "butler": "ops"})
                )
            )
            runner.start()
            time.sleep(1.0)
            assert not long_answer, "the write did not wait for the lock"
            assert token_revoke(ApiToken.objects.filter(id=member.caller.token_id)) == 1
            rest = http.post("/api/memory/memory_store_episode", json={"content": "after, rest", "butler": "ops"})
            assert rest.status_code == 401, rest.text
            assert rest.json()["error"]["code"] == "PERMISSION_DENIED"
            mcp = http.post(
                "/mcp/memory/",
                headers=MCP_HEADERS,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "memory_store_episode", "arguments": {"content": "after, mcp", "butler": "ops"}},
                },
            )
            assert mcp.status_code == 401, mcp.text
            assert "after" not in mcp.text
        runner.join(timeout=120)
        assert long_answer and long_answer[0].status_code in (200, 401), long_answer
        again = http.post("/api/memory/memory_search", json={"query": "before"})
        assert again.status_code == 401
    stored = contents(member)
    assert "before" in stored
    assert not {"after, rest", "after, mcp"} & stored
