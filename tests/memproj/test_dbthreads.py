"""Side-by-side reads (memproj/dbthreads.py): at the same time on their own
connections outside a transaction, in turn on the caller's connection inside one,
and no side read outlives the call, even when one of them fails."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from memproj import dbthreads
from memproj.dbthreads import side_by_side


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_reads_run_at_the_same_time_on_their_own_connections():
    both_running = threading.Barrier(2, timeout=10)  # broken if the reads ran one after the other

    def read(value: str) -> tuple[str, int, int]:
        both_running.wait()
        return value, threading.get_ident(), backend_pid()

    first, second = side_by_side(lambda: read("first"), lambda: read("second"))
    assert (first[0], second[0]) == ("first", "second")
    assert first[1] == threading.get_ident() and second[1] != first[1]
    assert second[2] != first[2]


@pytest.mark.django_db
def test_inside_a_transaction_the_reads_run_in_turn_and_see_its_writes():
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("CREATE TEMPORARY TABLE side_probe (n int) ON COMMIT DROP")
            cursor.execute("INSERT INTO side_probe VALUES (7)")

        def read() -> tuple[int, int]:
            with connection.cursor() as cursor:
                cursor.execute("SELECT n FROM side_probe")
                return int(cursor.fetchone()[0]), threading.get_ident()

        results = side_by_side(read, read)
    assert results == [(7, threading.get_ident())] * 2


@pytest.mark.django_db(transaction=True)
def test_without_side_threads_the_reads_run_in_turn(settings):
    settings.MEMPROJ = {**settings.MEMPROJ, "SIDE_READ_THREADS": 0}
    threads = side_by_side(threading.get_ident, threading.get_ident, threading.get_ident)
    assert threads == [threading.get_ident()] * 3


@pytest.mark.django_db(transaction=True)
def test_an_error_is_raised_only_after_every_side_read_finished():
    side_finished = threading.Event()

    def slow_side_read() -> int:
        time.sleep(0.2)
        side_finished.set()
        return 1

    def failing_read() -> int:
        raise ValueError("first read failed")

    with pytest.raises(ValueError, match="first read failed"):
        side_by_side(failing_read, slow_side_read)
    assert side_finished.is_set()

    def failing_side_read() -> int:
        raise KeyError("side read failed")

    with pytest.raises(KeyError, match="side read failed"):
        side_by_side(lambda: 1, failing_side_read)


@pytest.mark.django_db
def test_in_turn_every_read_runs_even_after_one_failed():
    ran = []

    def failing() -> int:
        ran.append("first")
        raise ValueError("first read failed")

    def second() -> int:
        ran.append("second")
        return 2

    with pytest.raises(ValueError, match="first read failed"):
        side_by_side(failing, second)
    assert ran == ["first", "second"]


@pytest.mark.django_db(transaction=True)
def test_with_every_side_thread_busy_a_nested_call_runs_in_turn_instead_of_waiting(settings):
    """A side call may run side_by_side itself (roampal's second search runs its
    two channels): with the only side-read thread taken, that inner call runs in
    turn in the side thread rather than queue behind a thread that waits for it."""
    settings.MEMPROJ = {**settings.MEMPROJ, "SIDE_READ_THREADS": 1}

    def inner() -> list[str]:
        return side_by_side(lambda: threading.current_thread().name, lambda: threading.current_thread().name)

    outer_thread, (inner_first, inner_second) = side_by_side(lambda: threading.current_thread().name, inner)
    assert outer_thread == threading.current_thread().name
    assert inner_first == inner_second and inner_first.startswith("side-read")


@pytest.mark.django_db(transaction=True)
def test_a_busy_process_runs_the_reads_in_turn(monkeypatch):
    """More reads in flight than cores: the cores are busy anyway, and a second
    connection's transaction would only add work."""
    monkeypatch.setattr(dbthreads, "_BUSY_READS", 0)
    threads = side_by_side(threading.get_ident, threading.get_ident)
    assert threads == [threading.get_ident()] * 2
