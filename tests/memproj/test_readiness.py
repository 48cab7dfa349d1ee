"""/readyz, the load balancer's health check, through the ASGI application:
ready while PostgreSQL answers; a coded, retryable 503 naming the database
within its bound when PostgreSQL is frozen (a relay that keeps every
connection open and passes nothing on) or gone; ready whatever Redis does,
since the service serves without it. /healthz, liveness, stays 200 meanwhile.

A probe that hangs fails here through the client's bound, which is far above
the check's own: the tests assert answers, not times. A probe soon after a check
is answered by it (``FRESH_SECONDS``), so after each change of a dependency the
tests wait that long before the probe that must see it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from django.db import connections

from memproj import readiness
from memproj.readiness import DeadlinePassed, select_one_within
from tests.harness.pgrelay import PostgresRelay, postgres_relay
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db

# Generous: only a hang reaches it.
CLIENT_BOUND_SECONDS = 15.0
LEAKS = ("Traceback", "psycopg", "OperationalError", "socket", "connection to server", "pgrelay", "password")


@pytest.fixture(autouse=True)
def _no_check_from_another_test(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readiness, "_last_checks", None)


async def _past_the_last_check() -> None:
    await asyncio.sleep(readiness.FRESH_SECONDS)


@pytest.fixture
def relay() -> Iterator[PostgresRelay]:
    """The test database behind a relay that the test stalls or cuts; the
    service's new connections go through it."""
    with postgres_relay() as relay:
        settings_dict = connections["default"].settings_dict
        saved = settings_dict["HOST"]
        settings_dict["HOST"] = str(relay.directory)
        try:
            yield relay
        finally:
            settings_dict["HOST"] = saved


async def _get(path: str) -> httpx.Response:
    from memproj.asgi import application

    async with httpx.AsyncClient(transport=asgi_transport(application), base_url="http://testserver") as client:
        async with asyncio.timeout(CLIENT_BOUND_SECONDS):
            return await client.get(path)


def _unready(answer: httpx.Response) -> dict[str, Any]:
    """The coded, retryable 503 of an unready process, with no library text."""
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "5"
    body = answer.json()
    assert set(body) == {"error", "request_id"}, body
    assert body["error"]["code"] == "STORAGE_ERROR" and body["error"]["details"]["failed"] == ["database"], body
    for leak in LEAKS:
        assert leak not in answer.text, answer.text
    details: dict[str, Any] = body["error"]["details"]
    return details


async def test_ready_while_the_database_and_redis_answer():
    answer = await _get("/readyz")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "ready", "checks": {"database": "ok", "redis": "ok"}}


async def test_a_frozen_database_is_a_503_within_the_bound_and_liveness_stays(relay):
    assert (await _get("/readyz")).status_code == 200  # through the relay, flowing
    relay.stall()
    await _past_the_last_check()
    details = _unready(await _get("/readyz"))
    assert details["checks"]["database"] == "timeout"
    # Liveness touches no dependency: the process is not restarted for an outage.
    health = await _get("/healthz")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    relay.flow()
    await _past_the_last_check()
    answer = await _get("/readyz")
    assert answer.status_code == 200 and answer.json()["status"] == "ready", answer.text


async def test_a_stopped_database_is_a_503(relay):
    relay.down()
    details = _unready(await _get("/readyz"))
    assert details["checks"]["database"] == "unavailable"


def test_a_database_that_freezes_after_the_connection_is_open_is_bounded_too(relay):
    """The query itself is bounded on the client's side: a frozen server never
    answers it, so a server-side statement_timeout could not end it."""
    params = connections["default"].get_connection_params()
    connection = psycopg.Connection.connect(**params, autocommit=True)
    try:
        select_one_within(connection, time.monotonic() + 2)  # flowing: answered
        relay.stall()
        with pytest.raises(DeadlinePassed):
            select_one_within(connection, time.monotonic() + 1)
    finally:
        connection.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _silent_listener() -> Iterator[int]:
    """A TCP port that accepts connections and never answers, as a frozen Redis."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.close()
        for sock in held:
            sock.close()


async def test_redis_gone_leaves_the_process_ready(settings):
    # The rate limiter serves without a limit and follow-ups wait in the outbox:
    # the process still serves, so it stays in rotation.
    settings.MEMPROJ_RATE_LIMIT_REDIS_URL = f"redis://127.0.0.1:{_closed_port()}/0"
    answer = await _get("/readyz")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "ready", "checks": {"database": "ok", "redis": "unavailable"}}


async def test_redis_frozen_leaves_the_process_ready(settings):
    with _silent_listener() as port:
        settings.MEMPROJ_RATE_LIMIT_REDIS_URL = f"redis://127.0.0.1:{port}/0"
        answer = await _get("/readyz")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "ready", "checks": {"database": "ok", "redis": "timeout"}}


async def test_a_flood_of_probes_is_answered_by_one_check_until_it_is_a_second_old(monkeypatch):
    """Probes are not rate limited, so each must not open connections of its
    own: probes within FRESH_SECONDS of a check reuse its answer, and the next
    probe after that checks again."""
    checks: list[str] = []

    def counted_database_check(bound: float = readiness.DATABASE_BOUND_SECONDS) -> readiness.Outcome:
        checks.append("database")
        return "ok"

    async def counted_redis_check(url: str, bound: float = readiness.REDIS_BOUND_SECONDS) -> readiness.Outcome:
        checks.append("redis")
        return "ok"

    monkeypatch.setattr(readiness, "database_check", counted_database_check)
    monkeypatch.setattr(readiness, "redis_check", counted_redis_check)
    monkeypatch.setattr(readiness, "FRESH_SECONDS", 3600.0)
    answers = [await _get("/readyz") for _ in range(10)]
    assert [a.status_code for a in answers] == [200] * 10
    assert sorted(checks) == ["database", "redis"]
    monkeypatch.setattr(readiness, "FRESH_SECONDS", 0.0)
    assert (await _get("/readyz")).status_code == 200
    assert sorted(checks) == ["database", "database", "redis", "redis"]
