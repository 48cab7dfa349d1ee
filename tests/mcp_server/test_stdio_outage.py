"""The stdio server when PostgreSQL goes away and comes back: a real
``python -m mcp_server`` subprocess whose database connections pass through a
Unix-socket relay this test cuts (every open connection dropped, new ones
refused) and restores, so the outage is the subprocess's alone."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mcp_server import stdio
from mcp_server.http import STORAGE_MESSAGE
from memory.models import Memory
from policy import tokencache
from tests.harness.pgrelay import PostgresRelay, postgres_relay
from tests.mcp_server.test_stdio_transport import StdioPeer, call, coded

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def relay() -> Iterator[PostgresRelay]:
    with postgres_relay() as relay:
        yield relay


def outage_answer(answer: dict) -> None:
    """The dialect's coded storage error, as a client reads it, with no library text."""
    if "error" in answer:
        assert coded(answer) == "STORAGE_ERROR", answer
    else:  # a tool's error: the memory dialect's "[CODE] message" text
        assert answer["result"]["isError"] is True, answer
        assert answer["result"]["content"][0]["text"].startswith("[STORAGE_ERROR] "), answer
    text = str(answer)
    for leak in ("Traceback", "psycopg", "socket", "OperationalError", "connection to server"):
        assert leak not in text, answer


def test_stdio_answers_the_storage_error_while_postgres_is_down_and_serves_again_after(member, relay):
    peer = StdioPeer(member.token, database_host=str(relay.directory))
    try:
        peer.handshake()
        peer.send(call(1, "memory_store_fact", subject="user", predicate="editor", content="Uses Helix"))
        assert not peer.answer()["result"].get("isError")

        relay.down()
        # A tool call while the token is still in the process's cache: the tool's own storage error.
        peer.send(call(2, "memory_search", query="editor"))
        answer = peer.answer()
        assert answer["id"] == 2
        outage_answer(answer)
        # Once the cached token is stale, the token check itself meets the outage.
        time.sleep(tokencache.TOKEN_CACHE_SECONDS + 0.5)
        for request_id in (3, 4):
            peer.send(call(request_id, "memory_store_fact", subject="user", predicate="os", content="Linux"))
            answer = peer.answer()
            assert answer["id"] == request_id
            outage_answer(answer)
            assert STORAGE_MESSAGE in answer["error"]["message"]
        # Every request is answered (each checks the token), and the process lives on.
        peer.send({"jsonrpc": "2.0", "id": 5, "method": "ping"})
        answer = peer.answer()
        assert answer["id"] == 5
        outage_answer(answer)
        assert peer.proc.poll() is None

        relay.up()
        peer.send(call(6, "memory_store_fact", subject="user", predicate="shell", content="Uses fish"))
        answer = peer.answer()
        assert answer["id"] == 6 and "error" not in answer and not answer["result"].get("isError"), answer
        peer.send(call(7, "memory_search", query="fish shell"))
        answer = peer.answer()
        assert answer["id"] == 7 and not answer["result"].get("isError"), answer
    finally:
        peer.close()
    contents = set(Memory.objects.filter(tenant_id=member.caller.tenant_id).values_list("content", flat=True))
    assert "Linux" not in " ".join(contents)
    assert any("fish" in c for c in contents)


def test_stdio_answers_the_storage_error_in_bounded_time_while_postgres_hangs(member, relay):
    """PostgreSQL stops answering without closing anything (frozen, or the
    network partitioned): each request still gets the storage error within the
    token check's bound, a ping too, and the first request after PostgreSQL
    answers again is served."""
    peer = StdioPeer(member.token, database_host=str(relay.directory))
    try:
        peer.handshake()
        peer.send(call(1, "memory_store_fact", subject="user", predicate="editor", content="Uses Helix"))
        assert not peer.answer()["result"].get("isError")
        relay.stall()
        time.sleep(tokencache.TOKEN_CACHE_SECONDS + 0.5)  # the token is checked against the database again
        for request_id in (2, 3):
            started = time.monotonic()
            peer.send({"jsonrpc": "2.0", "id": request_id, "method": "ping"})
            answer = peer.answers.get(timeout=stdio.TOKEN_CHECK_SECONDS + 20)
            assert answer["id"] == request_id
            outage_answer(answer)
            assert time.monotonic() - started < stdio.TOKEN_CHECK_SECONDS + 10
        relay.flow()
        deadline = time.monotonic() + 60
        request_id = 10
        while True:
            peer.send(call(request_id, "memory_search", query="editor"))
            answer = peer.answer()
            assert answer["id"] == request_id
            if "error" not in answer and not answer["result"].get("isError"):
                break
            assert time.monotonic() < deadline, answer
            request_id += 1
            time.sleep(0.5)
        assert peer.proc.poll() is None
    finally:
        peer.close()
