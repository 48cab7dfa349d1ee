"""In-process MCP clients: ``mcp.Client(build_server(toolset, static_caller=...))``
sessions for each identity on each served toolset, callable from synchronous code."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tests.harness.surfaces.answers import Answer, answer_from_result


def toolset_names() -> list[str]:
    """Every registered toolset (dialect), sorted: what the suite covers."""
    from mcp_server.registry import TOOLSETS

    return sorted(TOOLSETS)


def warm_up_embedder() -> None:
    """Load the embedding model before the first timed call: loading torch can
    take a minute on a busy machine, which is not a hang of the call that pays it."""
    from memory.embeddings import EmbeddingUnavailable, embed_one

    with contextlib.suppress(EmbeddingUnavailable):
        embed_one("warm up")


@dataclass
class ToolSpec:
    toolset: str
    name: str
    schema: dict[str, Any]


class InProcessClients:
    """Open ``mcp.Client(build_server(toolset, static_caller=...))`` sessions on a
    private event loop thread, so synchronous code (a Hypothesis state machine,
    Django ORM checks in the calling thread) can call tools one at a time."""

    def __init__(self, callers: dict[str, Any], toolsets: Sequence[str]) -> None:
        self.callers = callers
        self.toolsets = list(toolsets)
        self.clients: dict[tuple[str, str], Any] = {}
        self.tools: dict[str, list[ToolSpec]] = {}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp-clients", daemon=True)
        self._closing: asyncio.Event | None = None
        self._holder: concurrent.futures.Future[None] | None = None

    def __enter__(self) -> InProcessClients:
        warm_up_embedder()
        self.thread.start()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._holder = asyncio.run_coroutine_threadsafe(self._hold(ready), self.loop)
        ready.result(timeout=300)
        return self

    async def _hold(self, ready: concurrent.futures.Future[None]) -> None:
        # Sessions are entered and left in this one task (anyio's rule).
        from mcp import Client

        from mcp_server.server import build_server

        self._closing = asyncio.Event()
        try:
            async with contextlib.AsyncExitStack() as stack:
                for who, caller in self.callers.items():
                    for toolset in self.toolsets:
                        client = Client(build_server(toolset, static_caller=caller))
                        self.clients[(who, toolset)] = await stack.enter_async_context(client)
                first = next(iter(self.callers))
                for toolset in self.toolsets:
                    listed = await self.clients[(first, toolset)].list_tools()
                    self.tools[toolset] = [ToolSpec(toolset, t.name, dict(t.input_schema)) for t in listed.tools]
                ready.set_result(None)
                await self._closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    def __exit__(self, *exc: object) -> None:
        if self._closing is not None:
            self.loop.call_soon_threadsafe(self._closing.set)
        if self._holder is not None:
            with contextlib.suppress(Exception):
                self._holder.result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)

    def call(self, who: str, toolset: str, name: str, arguments: dict[str, Any], timeout: float = 60) -> Answer:
        client = self.clients[(who, toolset)]
        started = time.perf_counter()
        future = asyncio.run_coroutine_threadsafe(client.call_tool(name, arguments), self.loop)
        try:
            result = future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return Answer("hang", f"no answer in {timeout:g} s", seconds=time.perf_counter() - started)
        except Exception as exc:  # a protocol-level error: JSON-RPC error or a broken session
            text = f"{type(exc).__name__}: {exc}"
            code = getattr(getattr(exc, "error", None), "code", None)
            return Answer(
                "exception", text, str(code) if code is not None else None, None, time.perf_counter() - started
            )
        return answer_from_result(result, time.perf_counter() - started)
