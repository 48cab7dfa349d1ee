"""Builds one MCPServer per toolset (dialect)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import AnyHttpUrl

from mcp_server.auth import MemprojTokenVerifier, current_caller
from memory.errors import MemoryError_, StorageUnavailable
from policy.caller import Caller

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


class ToolContext:
    """What a toolset needs to resolve its caller; one per server."""

    def __init__(self, toolset: str, static_caller: Caller | None) -> None:
        self.toolset = toolset
        self.static_caller = static_caller

    def caller(self) -> Caller:
        return current_caller(static_caller=self.static_caller, toolset=self.toolset)


def guarded(error_code: Callable[[MemoryError_], str]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Wrap a sync tool: fresh DB connections for the worker thread, and domain
    errors turned into ToolErrors that carry the dialect's code."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            close_old_connections()
            try:
                return fn(*args, **kwargs)
            except MemoryError_ as exc:
                raise ToolError(f"[{error_code(exc)}] {exc}") from exc
            except (OperationalError, InterfaceError) as exc:
                # A database outage mid-call: the dialect's storage error, no driver detail.
                unavailable = StorageUnavailable("the database is unavailable; retry in a few seconds.")
                raise ToolError(f"[{error_code(unavailable)}] {unavailable}") from exc
            finally:
                close_old_connections()

        return wrapper

    return decorate


def build_server(toolset: str, *, static_caller: Caller | None = None, http: bool = False) -> MCPServer[Any]:
    from mcp_server.toolsets import TOOLSETS

    if toolset not in TOOLSETS:
        raise ValueError(f"unknown toolset {toolset!r}; choose one of {', '.join(sorted(TOOLSETS))}")
    module = TOOLSETS[toolset]
    kwargs: dict[str, Any] = {}
    if http:
        public_url = settings.MEMPROJ_PUBLIC_URL.rstrip("/")
        kwargs["token_verifier"] = MemprojTokenVerifier()
        kwargs["auth"] = AuthSettings(
            issuer_url=AnyHttpUrl(public_url),
            resource_server_url=AnyHttpUrl(f"{public_url}/mcp/{toolset}"),
            required_scopes=[],
        )
    server: MCPServer[Any] = MCPServer(
        f"memproj-{toolset}", instructions=module.INSTRUCTIONS, log_level="WARNING", **kwargs
    )
    module.register(server, ToolContext(toolset, static_caller))
    return server
