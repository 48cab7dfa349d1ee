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
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse

from memproj.dbthreads import fresh_connections


def in_worker_thread(view: Callable[..., HttpResponse]) -> Callable[..., Coroutine[Any, Any, HttpResponse]]:
    """The sync ``view`` as an async view that runs it in a reused worker thread."""
    run = fresh_connections(view)

    @functools.wraps(view)
    async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return await sync_to_async(run, thread_sensitive=False)(request, *args, **kwargs)

    return wrapper
