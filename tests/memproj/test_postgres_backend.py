"""The connection health check of memproj's PostgreSQL backend
(memproj/postgres/base.py): a kept connection is checked by its socket, so a
healthy one costs no statement, and one the server ended is still found and
replaced before a call's first statement fails on it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.db import connection, connections

from memproj.postgres.base import DatabaseWrapper


@pytest.fixture
def kept() -> Iterator[DatabaseWrapper]:
    """A second connection, as a web process keeps one between calls."""
    wrapper = connections.create_connection("default")
    assert isinstance(wrapper, DatabaseWrapper)
    wrapper.ensure_connection()
    assert wrapper.health_check_enabled  # type: ignore[attr-defined]  # CONN_HEALTH_CHECKS, read on connecting
    try:
        yield wrapper
    finally:
        wrapper.close()


def _backend_pid(wrapper: DatabaseWrapper) -> int:
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid() AS marker_statement")
        return int(cursor.fetchone()[0])


def _last_statement(pid: int) -> str:
    """What the server last saw from that backend (pg_stat_activity.query)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return "" if row is None else str(row[0])


def _start_call(wrapper: DatabaseWrapper) -> None:
    """What the start of a request does to a kept connection: its next cursor is checked."""
    wrapper.health_check_done = False  # type: ignore[attr-defined]  # not in django-stubs


@pytest.mark.django_db
def test_a_healthy_idle_connection_is_checked_without_a_statement(kept):
    pid = _backend_pid(kept)
    assert "marker_statement" in _last_statement(pid)
    _start_call(kept)
    with kept.cursor():  # the check runs here, before the call's first statement
        pass
    assert kept.health_check_done
    assert _backend_pid(kept) == pid
    _start_call(kept)
    assert kept.is_usable()
    assert "marker_statement" in _last_statement(pid)  # no SELECT 1 reached the server


@pytest.mark.django_db
def test_a_connection_the_server_ended_is_replaced_before_the_calls_first_statement(kept):
    pid = _backend_pid(kept)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        assert cursor.fetchone()[0] is True
    deadline = time.monotonic() + 10
    while _last_statement(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    _start_call(kept)
    assert not kept.is_usable()
    new_pid = _backend_pid(kept)  # no error: the check closed the dead connection and a new one opened
    assert new_pid != pid


@pytest.mark.django_db
def test_a_connection_with_something_waiting_is_checked_as_django_checks_it(kept):
    """A notification the server sent unprompted makes the socket readable on a
    healthy connection: then the check sends Django's SELECT 1 and keeps it."""
    pid = _backend_pid(kept)
    with kept.cursor() as cursor:
        cursor.execute("LISTEN memproj_health_check_test")
    notifier = connections.create_connection("default")  # autocommit: the test's own connection never commits
    try:
        with notifier.cursor() as cursor:
            cursor.execute("NOTIFY memproj_health_check_test")
    finally:
        notifier.close()
    deadline = time.monotonic() + 10
    _start_call(kept)
    while time.monotonic() < deadline and "SELECT 1" not in _last_statement(pid):
        assert kept.is_usable()
        time.sleep(0.02)
    assert "SELECT 1" in _last_statement(pid)
    assert _backend_pid(kept) == pid
