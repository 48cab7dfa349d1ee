"""Database work in threads other than the request's own.

Django's connections are per thread. A reused thread (the event loop's executor
threads that run tools and pooled views, the side-by-side read threads below)
keeps its connection between calls, so stale or broken connections are closed
around each call (``fresh_connections``), as Django does around a request.

``side_by_side`` runs independent reads of one request at the same time, each
on its own connection: a hybrid search's keyword channel runs while its vector
channel waits for the query's embedding and runs; roampal's known context runs
its two searches (memory_bank facts, the other collections). Each statement
waits on PostgreSQL while the other core would otherwise be idle. They run one
after the other in the caller's thread instead inside a transaction (another
connection could not see its writes; a test's transaction is one of them) and
when the process is busy (more reads in flight than cores)."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import ParamSpec, TypeVar

from django.conf import settings
from django.db import close_old_connections, connection

P = ParamSpec("P")
R = TypeVar("R")


def fresh_connections(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` for a reused worker thread: the thread's stale or broken database
    connections are closed before and after it runs."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return run


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_slots_taken = 0  # side calls running now, at most MEMPROJ_SIDE_READ_THREADS
_reads_in_flight = 0  # side_by_side calls running now, in any thread
# Overlapping a read's statements pays when a core would otherwise idle: with as
# many reads in flight as cores, they already keep the cores busy, and a second
# connection's transaction is then pure cost (fewer calls per second under load).
_BUSY_READS = os.cpu_count() or 2


def _side_reads_available() -> bool:
    """Whether ``side_by_side`` may run its calls at the same time here: outside
    a transaction, with side-read threads configured (MEMPROJ_SIDE_READ_THREADS)."""
    return not connection.in_atomic_block and int(settings.MEMPROJ["SIDE_READ_THREADS"]) > 0


def _take_slots(count: int) -> ThreadPoolExecutor | None:
    """The side-read pool with ``count`` of its threads reserved, or None when
    they are taken or the process is busy: a reserved thread is never queued
    behind another request's call (a side call may itself run ``side_by_side``)."""
    global _pool, _slots_taken
    threads = int(settings.MEMPROJ["SIDE_READ_THREADS"])
    with _pool_lock:
        if _slots_taken + count > threads or _reads_in_flight > _BUSY_READS:
            return None
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="side-read")
        _slots_taken += count
        return _pool


def _give_slots(count: int) -> None:
    global _slots_taken
    with _pool_lock:
        _slots_taken -= count


def _in_turn(calls: list[Callable[[], R]]) -> list[R]:
    results: list[R] = []
    error: BaseException | None = None
    for call in calls:
        try:
            results.append(call())
        except BaseException as exc:  # noqa: BLE001 - the first one is raised once every call ran
            error = error or exc
    if error is not None:
        raise error
    return results


def side_by_side(first: Callable[[], R], *others: Callable[[], R]) -> list[R]:
    """The results of ``first`` (run in this thread) and of ``others`` (run in
    side-read threads meanwhile), in that order; in turn, in that order, in this
    thread inside a transaction, when the side-read threads are taken, or when
    more reads are in flight in the process than it has cores. Every
    call runs to its end before an error is raised (the first error, in that
    order), even after another one failed."""
    global _reads_in_flight
    with _pool_lock:
        _reads_in_flight += 1
    try:
        return _side_by_side(first, others)
    finally:
        with _pool_lock:
            _reads_in_flight -= 1


def _side_by_side(first: Callable[[], R], others: tuple[Callable[[], R], ...]) -> list[R]:
    pool = _take_slots(len(others)) if others and _side_reads_available() else None
    if pool is None:
        return _in_turn([first, *others])
    try:
        futures: list[Future[R]] = [pool.submit(fresh_connections(call)) for call in others]
        try:
            head = first()
        finally:
            wait(futures)  # even when ``first`` failed: no side read outlives the request
    finally:
        _give_slots(len(others))
    return [head, *(future.result() for future in futures)]
