"""The registry of served dialects: toolset name -> Dialect, and what the
dialects add to the site besides their MCP endpoints.

A dialect is a package under ``mcp_server/dialects/<name>/`` whose ``tools``
module declares a module-level ``dialect``; add it to ``TOOLSETS`` below. It is
then served at ``/mcp/<name>/``, at ``/api/<name>/<tool>``, by
``python -m mcp_server --toolset <name>``, its plain HTTP routes (if its
``Dialect`` names a ``routes`` module) are part of the site, and the contract
tests cover it."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

from django.http import HttpResponse
from django.urls import URLPattern, URLResolver, include, path

from mcp_server.dialect import Dialect
from mcp_server.dialects.langmem.tools import dialect as langmem
from mcp_server.dialects.memento.tools import dialect as memento
from mcp_server.dialects.memory.tools import dialect as memory
from mcp_server.dialects.pce.tools import dialect as pce
from mcp_server.dialects.roampal.tools import dialect as roampal
from policy.middleware import register_route_error_body

TOOLSETS: dict[str, Dialect] = {d.name: d for d in (memory, memento, langmem, pce, roampal)}


def dialect_urlpatterns() -> list[URLPattern | URLResolver]:
    """Every dialect's own plain HTTP routes, at the site root."""
    return [path("", include(d.routes)) for d in TOOLSETS.values() if d.routes]


def register_route_errors() -> None:
    """Each dialect route's own error body (``route_errors`` in its routes
    module: path -> body), so that a request the rate limiter refuses before
    the route runs is answered in the shape of the route's other errors."""
    for d in TOOLSETS.values():
        if d.routes:
            for route, body in getattr(import_module(d.routes), "route_errors", {}).items():
                register_route_error_body(route, body)


# At import: the served application imports the registry before it serves a request.
register_route_errors()


def dialect_body_limits() -> dict[str, int]:
    """Request body limits (path -> bytes) the dialects' routes declare."""
    limits: dict[str, int] = {}
    for d in TOOLSETS.values():
        if d.routes:
            limits.update(getattr(import_module(d.routes), "body_limits", {}))
    return limits


def dialect_unauthenticated_answers() -> dict[str, Callable[[str], HttpResponse]]:
    """The 401 each dialect route answers a request whose ``Authorization``
    header (the argument) names no caller (path -> answer), so that the router
    refuses it before the body is read."""
    answers: dict[str, Callable[[str], HttpResponse]] = {}
    for d in TOOLSETS.values():
        if d.routes:
            answers.update(getattr(import_module(d.routes), "unauthenticated_answers", {}))
    return answers
