"""Latency end to end through the MCP streamable-HTTP endpoints (the MCP SDK's
client), each dialect's main read, and roampal's hook endpoint."""

from __future__ import annotations

import asyncio
import json
import time

from tests.harness.generators import synthetic
from tests.harness.generators.dataset import LANGMEM_NAMESPACE


async def _bench_mcp_async(url: str, token: str, size: int, repeat: int, ids: list) -> tuple[list[dict], list[float]]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    qs = synthetic.queries(max(repeat + 4, 16), seed=size + 1)
    counter = iter(range(10**9))

    def q() -> str:
        return qs[next(counter) % len(qs)]

    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120.0) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):
        if True:  # keeps the body's indentation

            async def call(tool: str, args: dict) -> None:
                result = await client.call_tool(tool, args)
                if result.is_error:
                    raise RuntimeError(f"{tool} failed over MCP: {result.content}")

            async def timed(fn, n: int) -> list[float]:  # type: ignore[no-untyped-def]
                for _ in range(2):
                    await fn()
                out = []
                for _ in range(n):
                    t0 = time.perf_counter()
                    await fn()
                    out.append((time.perf_counter() - t0) * 1000.0)
                return out

            # Transport baseline: one authenticated round trip that touches no memory
            # (tools/list; the client cache is off so every call goes over HTTP).
            ping = await timed(lambda: client.list_tools(), repeat)

            def pick() -> dict:
                kind, pk = ids[next(counter) % len(ids)]
                return {"type": kind, "id": str(pk)}

            ops = [
                (
                    "store_episode",
                    "store",
                    lambda: call(
                        "memory_store_episode",
                        {
                            "content": synthetic.fresh_episode(size * 1000 + 500_000 + next(counter)),
                            "butler": "general",
                        },
                    ),
                ),
                (
                    "store_fact_supersede",
                    "store",
                    lambda: call(
                        "memory_store_fact",
                        {
                            "subject": "bench-user-mcp",
                            "predicate": f"pref-{next(counter) % 5}",
                            "content": synthetic.fresh_episode(size * 1000 + 700_000 + next(counter)),
                        },
                    ),
                ),
                ("search_hybrid", "search", lambda: call("memory_search", {"query": q(), "mode": "hybrid"})),
                ("search_semantic", "search", lambda: call("memory_search", {"query": q(), "mode": "semantic"})),
                ("search_keyword", "search", lambda: call("memory_search", {"query": q(), "mode": "keyword"})),
                ("recall", "search", lambda: call("memory_recall", {"topic": q()})),
                ("get", "get", lambda: call("memory_get", pick())),
                ("context", "context", lambda: call("memory_context", {"trigger_prompt": q(), "butler": "general"})),
            ]
            rows = []
            for name, group, fn in ops:
                samples = await timed(fn, repeat)
                rows.append({"size": size, "path": "mcp_http", "op": name, "group": group, "samples": samples})
    rows += await _bench_memento(url.replace("/mcp/memory", "/mcp/memento"), headers, size, repeat, q)
    rows += await _bench_dialects(url.removesuffix("/mcp/memory"), headers, size, repeat, q)
    return rows, ping


def count_found_json(data: object) -> int | None:
    """count_found for a tool's JSON answer (structured content or JSON text)."""
    if isinstance(data, list):
        return len(data)
    if not isinstance(data, dict):
        return None
    if "user_facts" in data and "relevant_memories" in data:
        return len(data["user_facts"]) + len(data["relevant_memories"])
    for key in ("memories", "results", "result", "claims", "data"):
        if key in data:
            return count_found_json(data[key])
    return None


async def _bench_dialects(base: str, headers: dict, size: int, repeat: int, q) -> list[dict]:  # type: ignore[no-untyped-def]
    """The dialects' main reads end to end: each toolset's own MCP endpoint (and
    roampal's hook endpoint, a plain POST), same token, same tenant."""
    import httpx
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    calls = [
        ("memento_search_memories", "/mcp/memento", "search_memories", lambda: {"query": q(), "limit": 5}),
        (
            "langmem_search_memory",
            f"/mcp/langmem?configurable.user_id={LANGMEM_NAMESPACE[1]}",
            "search_memory",
            lambda: {"query": q(), "limit": 10},
        ),
        ("roampal_get_context_insights", "/mcp/roampal", "get_context_insights", lambda: {"query": q()}),
        ("pce_activate", "/mcp/pce", "pce_memory_activate", lambda: {"q": q()}),
    ]
    rows = []
    for op, path, tool, arguments in calls:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120.0) as http,
            Client(streamable_http_client(base + path, http_client=http), cache=None) as client,
        ):

            async def call(tool: str = tool, arguments=arguments) -> int | None:  # type: ignore[no-untyped-def]
                result = await client.call_tool(tool, arguments())
                if result.is_error:
                    raise RuntimeError(f"{tool} failed over MCP: {result.content}")
                if result.structured_content:
                    return count_found_json(result.structured_content)
                text = getattr(result.content[0], "text", "") if result.content else ""
                try:
                    return count_found_json(json.loads(text))
                except ValueError:
                    return None

            found = await call()
            await call()
            samples = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                await call()
                samples.append((time.perf_counter() - t0) * 1000.0)
        rows.append(
            {"size": size, "path": "mcp_http", "op": op, "group": "dialect", "samples": samples, "found": found}
        )

    # The roampal hook (UserPromptSubmit): POST /api/hooks/get-context, JSON in and out.
    async with httpx.AsyncClient(headers=headers, timeout=120.0) as hook_http:

        async def hook() -> int:
            response = await hook_http.post(
                base + "/api/hooks/get-context", json={"query": q(), "conversation_id": "bench"}
            )
            if response.status_code != 200:
                raise RuntimeError(f"hook get-context answered {response.status_code}: {response.text[:200]}")
            data = response.json()
            return len(data["user_facts"]) + len(data["relevant_memories"])

        found = await hook()
        await hook()
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            await hook()
            samples.append((time.perf_counter() - t0) * 1000.0)
    rows.append(
        {
            "size": size,
            "path": "http_hook",
            "op": "roampal_hook_get_context",
            "group": "dialect",
            "samples": samples,
            "found": found,
        }
    )
    return rows


async def _bench_memento(url: str, headers: dict, size: int, repeat: int, q) -> list[dict]:  # type: ignore[no-untyped-def]
    """memento's store, supersede and list tools through /mcp/memento/ (the latency
    targets of memento's tool specification are floors; its search is measured with
    the other dialects' reads)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    counter = iter(range(10**9))
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120.0) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):

        async def call(tool: str, args: dict) -> dict:
            result = await client.call_tool(tool, args)
            if result.is_error:
                raise RuntimeError(f"{tool} failed over MCP: {result.content}")
            return result.structured_content or {}

        async def store() -> dict:
            text = synthetic.fresh_episode(size * 1000 + 900_000 + next(counter))
            return await call("store_memory", {"content": text, "source": "explicit"})

        # Fresh (old, new) pairs for supersede: each pair can be superseded once.
        pairs = []
        for _ in range(repeat + 2):
            pairs.append(((await store())["created"]["id"], (await store())["created"]["id"]))
        pair_iter = iter(pairs)

        async def supersede() -> None:
            old, new = next(pair_iter)
            await call("supersede_memory", {"old_memory_id": old, "new_memory_id": new})

        ops = [
            ("memento_store", "store", store),
            ("memento_supersede", "supersede", supersede),
            ("memento_list_recent", "list", lambda: call("list_recent_memories", {"limit": 10})),
        ]
        rows = []
        for name, group, fn in ops:
            for _ in range(2) if name != "memento_supersede" else ():
                await fn()
            out = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                await fn()
                out.append((time.perf_counter() - t0) * 1000.0)
            rows.append({"size": size, "path": "mcp_http", "op": name, "group": group, "samples": out})
    return rows


def bench_mcp(url: str, token: str, size: int, caller, repeat: int) -> tuple[list[dict], list[float]]:  # type: ignore[no-untyped-def]
    from memory.models import Memory

    ids = list(Memory.objects.filter(tenant_id=caller.tenant_id, validity="active").values_list("kind", "id")[:500])
    return asyncio.run(_bench_mcp_async(url, token, size, repeat, ids))
