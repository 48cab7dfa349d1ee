"""Sync Django views served from the shared worker threads (issue 13).

Under ASGI, Django runs a sync view in a thread of its own per request
(asgiref's ThreadSensitiveContext), and Django's connections are per thread: every
request opened a new PostgreSQL connection (about 35 ms of the roampal hook's
70) and left the old one open until the thread was collected. A view wrapped
here runs in the event loop's executor threads instead, like the MCP tools
(mcp_server.dialect) and the REST route: the threads and their connections are
reused, closed when stale (CONN_MAX_AGE) or broken, around every call."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse

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


def in_worker_thread(view: Callable[..., HttpResponse]) -> Callable[..., Coroutine[Any, Any, HttpResponse]]:
    """The sync ``view`` as an async view that runs it in a reused worker thread."""
    run = fresh_connections(view)

    @functools.wraps(view)
    async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return await sync_to_async(run, thread_sensitive=False)(request, *args, **kwargs)

    return wrapper
