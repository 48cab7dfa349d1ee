"""A mixed load: concurrent HTTP MCP clients, half stores, half searches, with
the web process's memory before and after."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.harness.generators.arguments import WORDS
from tests.harness.generators.workloads import WRITE_KINDS, write_arguments
from tests.harness.stack import Stack
from tests.harness.surfaces.mcp_http import mcp_call


@dataclass
class LoadReport:
    clients: int
    seconds: float
    calls: int = 0
    errors: int = 0
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    rss_start_mib: float = 0.0
    rss_end_mib: float = 0.0
    samples: list[str] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0


def load(stack: Stack, tokens: Sequence[str], *, clients: int, seconds: float) -> LoadReport:
    """N concurrent HTTP MCP clients for T seconds, half stores, half searches."""
    import httpx

    report = LoadReport(clients, seconds)
    web = stack.child("web")
    report.rss_start_mib = web.memory_info().rss / 2**20 if web else 0.0
    latencies: list[float] = []
    url = f"{stack.url}/mcp/memory"

    async def client(i: int, http: Any, stop_at: float) -> None:
        token = tokens[i % len(tokens)]
        rng = random.Random(i)
        while time.monotonic() < stop_at:
            if rng.random() < 0.5:
                name, args = write_arguments(rng.choice(WRITE_KINDS), f"load{uuid.uuid4().hex[:10]}")
            else:
                name, args = "memory_search", {"query": " ".join(rng.sample(WORDS, 3)), "limit": 10}
            answer = await mcp_call(http, url, token, name, args)
            report.calls += 1
            latencies.append(answer.seconds)
            if answer.outcome != "ok":
                report.errors += 1
                if len(report.samples) < 4:
                    report.samples.append(f"{name}: {answer.text[:200]}")

    async def main() -> None:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(timeout=60, limits=limits) as http:
            stop_at = time.monotonic() + seconds
            await asyncio.gather(*(client(i, http, stop_at) for i in range(clients)))

    asyncio.run(main())
    web = stack.child("web")
    report.rss_end_mib = web.memory_info().rss / 2**20 if web else 0.0
    if latencies:
        ordered = sorted(latencies)
        report.p50_ms = statistics.median(ordered) * 1000
        report.p95_ms = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000
    return report
