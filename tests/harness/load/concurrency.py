"""Throughput of the served web process: closed-loop steps of concurrent HTTP
clients and open-loop steps of calls arriving at a fixed rate, each with the CPU
time spent per answered call."""

from __future__ import annotations

import asyncio
import sys
import time

from tests.harness.generators import synthetic
from tests.harness.generators.workloads import mixed_call
from tests.harness.load.cpu import cpu_seconds, loop_cpu_seconds, postmaster_pid
from tests.harness.measure.timing import percentile
from tests.harness.surfaces.mcp_http import MCP_HEADERS, post_tool_call


def _step_summary(latencies: dict[str, list[float]], errors: list[str], elapsed: float) -> dict:
    every = latencies["store"] + latencies["search"]
    return {
        "seconds": elapsed,
        "calls": len(every),
        "per_s": len(every) / elapsed,
        "p50": percentile(every, 50),
        "p95": percentile(every, 95),
        "store_p95": percentile(latencies["store"], 95),
        "search_p95": percentile(latencies["search"], 95),
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
    }


async def _concurrency_step(url: str, token: str, clients: int, seconds: float, store_share: float, seed: int):  # type: ignore[no-untyped-def]
    """``clients`` HTTP clients, each sending one JSON-RPC tool call after the
    other (stateless streamable HTTP: one POST per call) for ``seconds``: a mixed
    workload of memory_store_episode and hybrid memory_search (closed loop)."""
    import random

    import httpx

    qs = synthetic.queries(512, seed=seed)
    latencies: dict[str, list[float]] = {"store": [], "search": []}
    errors: list[str] = []
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(
        headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}, timeout=60.0, limits=limits
    ) as http:

        async def client(c: int) -> None:
            rng = random.Random(seed * 1000 + c)
            k = 0
            while time.perf_counter() < deadline:
                k += 1
                kind, body = mixed_call(rng, qs, store_share, seed * 10**6 + c * 10**4 + k, k)
                t0 = time.perf_counter()
                if await post_tool_call(http, url, body, errors):
                    latencies[kind].append((time.perf_counter() - t0) * 1000.0)

        start = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(clients)))
        elapsed = time.perf_counter() - start
    return {"clients": clients, **_step_summary(latencies, errors, elapsed)}


async def _open_loop_step(
    url: str, token: str, rate: float, clients: int, seconds: float, store_share: float, seed: int
):  # type: ignore[no-untyped-def]
    """Calls arriving at ``rate`` per second (Poisson) for ``seconds``, sent over
    at most ``clients`` HTTP connections (a call that finds them all busy waits
    its turn): the same mixed workload as the closed loop. Each latency runs from
    the call's scheduled arrival, so the time a call waits for a connection counts
    (no coordinated omission)."""
    import random

    import httpx

    qs = synthetic.queries(512, seed=seed)
    rng = random.Random(seed)
    latencies: dict[str, list[float]] = {"store": [], "search": []}
    errors: list[str] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"},
        timeout=httpx.Timeout(60.0, pool=None),
        limits=limits,
    ) as http:

        async def call(kind: str, body: dict, due: float) -> None:
            if await post_tool_call(http, url, body, errors):
                latencies[kind].append((time.perf_counter() - due) * 1000.0)

        start = time.perf_counter()
        due = start
        tasks = []
        k = 0
        while True:
            due += rng.expovariate(rate)
            if due - start >= seconds:
                break
            k += 1
            kind, body = mixed_call(rng, qs, store_share, seed * 10**6 + k, k)
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.create_task(call(kind, body, due)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    return {"rate": rate, "clients": clients, "offered": k, **_step_summary(latencies, errors, elapsed)}


def bench_concurrency(
    url: str, token: str, levels: list[int], seconds: float, store_share: float, web_pid: int | None = None
) -> list[dict]:
    """Each step also records the CPU time the web process(es), PostgreSQL and this
    client spent per answered call: less noisy than latency on a shared machine."""
    out = []
    pg_pid = postmaster_pid()
    for i, clients in enumerate(levels):
        print(f"  concurrency: {clients} clients for {seconds:.0f}s ...", file=sys.stderr, flush=True)
        web0 = cpu_seconds(web_pid) if web_pid else None
        loop0 = loop_cpu_seconds(web_pid) if web_pid else None
        pg0 = cpu_seconds(pg_pid, reaped=True) if pg_pid else None
        me0 = time.process_time()
        step = asyncio.run(_concurrency_step(url, token, clients, seconds, store_share, seed=100 + i))
        calls = max(1, step["calls"])
        step["web_cpu_ms"] = (
            (cpu_seconds(web_pid) - web0) * 1000.0 / calls if web_pid and web0 is not None else float("nan")
        )
        step["loop_cpu_ms"] = (
            (loop_cpu_seconds(web_pid) - loop0) * 1000.0 / calls if web_pid and loop0 is not None else float("nan")
        )
        step["pg_cpu_ms"] = (
            (cpu_seconds(pg_pid, reaped=True) - pg0) * 1000.0 / calls if pg_pid and pg0 is not None else float("nan")
        )
        step["client_cpu_ms"] = (time.process_time() - me0) * 1000.0 / calls
        out.append(step)
    return out


def bench_open_loop(
    url: str, token: str, rates: list[float], clients: int, seconds: float, store_share: float
) -> list[dict]:
    """The same workload at fixed arrival rates over ``clients`` connections: the
    throughput the server sustains at a p95 goal (the closed loop's p95 at 32
    clients is 32 / throughput by Little's law, whatever the server does)."""
    out = []
    for i, rate in enumerate(rates):
        print(
            f"  open loop: {rate:g} calls/s over {clients} connections for {seconds:.0f}s ...",
            file=sys.stderr,
            flush=True,
        )
        out.append(asyncio.run(_open_loop_step(url, token, rate, clients, seconds, store_share, seed=300 + i)))
    return out
