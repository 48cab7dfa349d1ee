"""Builds the MCP server of one registered toolset (dialect)."""

from __future__ import annotations

from mcp_server.dialect import DialectServer
from mcp_server.dialect import build_server as build_dialect_server
from mcp_server.registry import TOOLSETS
from policy.caller import Caller


def build_server(toolset: str, *, static_caller: Caller | None = None, http: bool = False) -> DialectServer:
    if toolset not in TOOLSETS:
        raise ValueError(f"unknown toolset {toolset!r}; choose one of {', '.join(sorted(TOOLSETS))}")
    return build_dialect_server(TOOLSETS[toolset], static_caller=static_caller, http=http)
