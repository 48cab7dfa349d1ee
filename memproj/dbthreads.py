"""Database work in threads other than the request's own (issue 13).

Django's connections are per thread. A reused thread (the event loop's executor
threads that run tools and pooled views, the side-by-side read threads below)
keeps its connection between calls, so stale or broken connections are closed
around each call (``fresh_connections``), as Django does around a request.

``side_by_side`` runs independent reads of one request at the same time, each
on its own connection: roampal's known context runs two searches (memory_bank
facts, then the other collections) whose statements each wait on PostgreSQL
while the other core is idle. Inside a transaction the reads run one after the
other in the caller's thread instead, since another connection could not see
the transaction's own writes (and a test's transaction is one of them)."""

from __future__ import annotations

import functools
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


def _side_pool() -> ThreadPoolExecutor | None:
    """The process's side-read threads (and so at most this many extra database
    connections), started on first use; None when MEMPROJ_SIDE_READ_THREADS is 0."""
    global _pool
    threads = int(settings.MEMPROJ["SIDE_READ_THREADS"])
    if threads <= 0:
        return None
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="side-read")
        return _pool


def side_by_side(first: Callable[[], R], *others: Callable[[], R]) -> list[R]:
    """The results of ``first`` (run in this thread) and of ``others`` (run in
    the side-read threads meanwhile), in that order. Every call is waited for
    before an error is raised (the first error, in that order)."""
    pool = None if connection.in_atomic_block else _side_pool()
    if pool is None or not others:
        return [first(), *(call() for call in others)]
    futures: list[Future[R]] = [pool.submit(fresh_connections(call)) for call in others]
    try:
        head = first()
    finally:
        wait(futures)  # even when ``first`` failed: no side read outlives the request
    return [head, *(future.result() for future in futures)]
