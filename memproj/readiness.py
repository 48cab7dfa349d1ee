"""Readiness: whether this web process can serve requests now, for a load
balancer's health check (``/readyz``; ``/healthz`` is liveness only).

The process needs PostgreSQL: every call reads or writes it. The check opens a
connection of its own with the process's database settings and runs
``SELECT 1``, the whole of it bounded by ``DATABASE_BOUND_SECONDS`` on the
client's side: libpq has no read timeout, and a server that is frozen or behind
a partitioned network accepts the connection and then answers nothing, so a
server-side ``statement_timeout`` would never fire. Its own connection, because
the request threads' may be the ones stuck, and its own thread, because the
event loop's executor may be full of calls waiting on such a database.
Concurrent probes share the check under way, and a probe soon after a completed
check is answered by it (``FRESH_SECONDS``), so a burst of probes opens one
connection.

Redis is reported but never makes the process unready: the service is built to
serve without it (the rate limiter fails open, a write's follow-up waits in the
outbox until the broker is back), so taking every web process out of rotation
when Redis stops would turn a degraded service into none."""

from __future__ import annotations

import asyncio
import logging
import select
import threading
import time
from concurrent.futures import Future
from typing import Literal

import psycopg
from django.db import connections
from psycopg import pq

from policy.ratelimit import redis_url

logger = logging.getLogger(__name__)

# libpq rounds a connect_timeout under 2 s up to 2 s.
DATABASE_BOUND_SECONDS = 2.0
REDIS_BOUND_SECONDS = 1.0

Outcome = Literal["ok", "timeout", "unavailable"]


class DeadlinePassed(Exception):  # noqa: N818 - the bound, not an error of the database
    pass


def _wait_for_socket(fileno: int, *, write: bool, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlinePassed
    readable, writable, _ = select.select([] if write else [fileno], [fileno] if write else [], [], remaining)
    if not (readable or writable):
        raise DeadlinePassed


def select_one_within(connection: psycopg.Connection, deadline: float) -> None:
    """``SELECT 1`` on ``connection``, waiting for the server until ``deadline``
    at most (psycopg's own execute waits without a bound)."""
    pgconn = connection.pgconn
    pgconn.send_query(b"SELECT 1")
    while pgconn.flush():
        _wait_for_socket(pgconn.socket, write=True, deadline=deadline)
    while True:
        pgconn.consume_input()
        if not pgconn.is_busy():
            break
        _wait_for_socket(pgconn.socket, write=False, deadline=deadline)
    statuses = []
    while (result := pgconn.get_result()) is not None:
        statuses.append(result.status)
    if statuses != [pq.ExecStatus.TUPLES_OK]:
        raise psycopg.OperationalError("SELECT 1 did not answer one row")


def database_check(bound: float = DATABASE_BOUND_SECONDS) -> Outcome:
    """Whether PostgreSQL answers ``SELECT 1`` within ``bound`` seconds, on a
    connection of its own with the process's settings."""
    deadline = time.monotonic() + bound
    params = connections["default"].get_connection_params()
    params.update(connect_timeout=max(2, round(bound)), autocommit=True)
    connection = None
    try:
        connection = psycopg.Connection.connect(**params)
        select_one_within(connection, deadline)
    except (DeadlinePassed, psycopg.errors.ConnectionTimeout):
        return "timeout"
    except (psycopg.Error, OSError) as exc:
        logger.warning("readiness: the database check failed: %s", type(exc).__name__)
        return "unavailable"
    finally:
        if connection is not None:
            # Closing sends no more than a Terminate the socket takes without waiting.
            connection.close()
    return "ok"


_database_check_lock = threading.Lock()
_database_check_under_way: Future[Outcome] | None = None


def _shared_database_check() -> Future[Outcome]:
    """The database check under way, or a new one in a thread of its own."""
    global _database_check_under_way
    with _database_check_lock:
        if _database_check_under_way is not None and not _database_check_under_way.done():
            return _database_check_under_way
        future: Future[Outcome] = Future()
        future.set_running_or_notify_cancel()  # a probe that stops waiting cancels nothing

        def run() -> None:
            try:
                future.set_result(database_check())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting probes
                future.set_exception(exc)

        threading.Thread(target=run, name="readiness-database", daemon=True).start()
        _database_check_under_way = future
        return future


async def redis_check(url: str, bound: float = REDIS_BOUND_SECONDS) -> Outcome:
    """Whether the Redis at ``url`` answers PING within ``bound`` seconds."""
    import redis.asyncio
    from redis.exceptions import RedisError
    from redis.exceptions import TimeoutError as RedisTimeout

    client = redis.asyncio.from_url(url, socket_timeout=bound, socket_connect_timeout=bound)
    try:
        async with asyncio.timeout(bound + 0.5):
            await client.ping()
    except (RedisTimeout, TimeoutError):
        return "timeout"
    except (RedisError, OSError):
        return "unavailable"
    finally:
        await client.aclose()
    return "ok"


# A probe within this long of the last completed check is answered by it: probes
# are not rate limited (a balancer's must never be refused), so a flood of them
# opens at most one database and one Redis connection a second, while a balancer
# probing every few seconds still sees a change at its next probe.
FRESH_SECONDS = 1.0
_last_checks: tuple[float, dict[str, Outcome]] | None = None


async def readiness_checks() -> dict[str, Outcome]:
    """Each dependency's state: ``database`` (PostgreSQL) decides readiness;
    ``redis`` (the rate limiter's, by default the broker) is informative. Both
    are checked at once, so the answer comes within the database's bound; the
    answer of a check completed less than ``FRESH_SECONDS`` ago is reused."""
    global _last_checks
    last = _last_checks
    if last is not None and time.monotonic() - last[0] < FRESH_SECONDS:
        return dict(last[1])
    checks = await _check_dependencies()
    _last_checks = (time.monotonic(), checks)
    return dict(checks)


async def _check_dependencies() -> dict[str, Outcome]:
    redis_state = asyncio.ensure_future(redis_check(redis_url()))
    database = asyncio.wrap_future(_shared_database_check())
    try:
        # The check bounds itself; this bounds the answer too when a host name
        # resolves to several addresses, each tried for connect_timeout.
        database_state = await asyncio.wait_for(asyncio.shield(database), DATABASE_BOUND_SECONDS + 0.5)
    except TimeoutError:
        database_state = "timeout"
    return {"database": database_state, "redis": await redis_state}


# The dependencies without which the process cannot serve; the others are reported only.
REQUIRED = ("database",)


def unready_because(checks: dict[str, Outcome]) -> list[str]:
    """The required dependencies that failed their check: none means ready."""
    return [name for name in REQUIRED if checks[name] != "ok"]
