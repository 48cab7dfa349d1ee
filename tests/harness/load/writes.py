"""Writers and readers on a running stack over MCP HTTP, and what was kept
afterwards: the follow-ups still pending, the texts a search no longer finds."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tests.harness.generators.workloads import WRITE_KINDS, write_arguments
from tests.harness.stack import Stack
from tests.harness.surfaces.answers import Answer, answer_text
from tests.harness.surfaces.mcp_http import mcp_call


@dataclass
class Read:
    started: float  # time.monotonic()
    marker: str
    answer: Answer

    @property
    def found(self) -> bool:
        return self.marker in answer_text(self.answer)


async def read_load(stack: Stack, token: str, accepted: Callable[[], list[str]], stop_at: float) -> list[Read]:
    """One reader searching for markers whose write was accepted (episodes):
    found by keyword even while no query can be embedded."""
    import httpx

    reads: list[Read] = []
    rng = random.Random(15)
    url = f"{stack.url}/mcp/memory"
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, connect=5)) as http:
        while time.monotonic() < stop_at:
            markers = accepted()
            if not markers:
                await asyncio.sleep(0.2)
                continue
            marker = rng.choice(markers[-50:])
            started = time.monotonic()
            answer = await mcp_call(http, url, token, "memory_search", {"query": marker, "limit": 5})
            reads.append(Read(started, marker, answer))
    return reads


async def write_load(
    stack: Stack,
    token: str,
    *,
    run_id: str,
    clients: int,
    seconds: float,
    retries: int,
    timeline: Callable[[float], Any] | None = None,
    answers: dict[str, list[Answer]] | None = None,
) -> dict[str, list[Answer]]:
    """Writers storing unique markers; like a real client, a write answered with
    an error is retried (same content) up to ``retries`` times."""
    import httpx

    collected: dict[str, list[Answer]] = {} if answers is None else answers
    counter = itertools.count()
    url = f"{stack.url}/mcp/memory"
    stop_at = time.monotonic() + seconds

    async def writer(http: Any) -> None:
        while time.monotonic() < stop_at:
            n = next(counter)
            marker = f"{run_id}x{n}"
            name, args = write_arguments(WRITE_KINDS[n % 3], marker)
            collected[marker] = []
            for attempt in range(retries + 1):
                # One key per write, as a careful client sends: a retry after a lost answer stores nothing twice.
                answer = await mcp_call(http, url, token, name, args, idempotency_key=marker)
                collected[marker].append(answer)
                if answer.outcome == "ok":
                    break
                await asyncio.sleep(min(0.25 * 2**attempt, 2))

    async with httpx.AsyncClient(timeout=httpx.Timeout(30, connect=5)) as http:
        tasks = [asyncio.create_task(writer(http)) for _ in range(clients)]
        if timeline is not None:
            tasks.append(asyncio.create_task(timeline(stop_at)))
        await asyncio.gather(*tasks)
    return collected


def pending_follow_ups(stack: Stack, run_id: str) -> int:
    pending = stack.sql(
        "SELECT count(*) FROM memory_memory WHERE content LIKE %s AND embedding_status <> 'ready'", [f"%{run_id}x%"]
    )[0][0]
    # The outbox of issue 15 item 1 (any table named *followup* / *outbox* with a done_at column).
    for (table,) in stack.sql(
        "SELECT table_name FROM information_schema.columns WHERE column_name = 'done_at' "
        "AND (table_name LIKE '%%followup%%' OR table_name LIKE '%%outbox%%')"
    ):
        pending += stack.sql(
            f'SELECT count(*) FROM "{table}" WHERE done_at IS NULL AND memory_id IN '  # noqa: S608
            "(SELECT id FROM memory_memory WHERE content LIKE %s)",
            [f"%{run_id}x%"],
        )[0][0]
    return int(pending)


async def texts_not_found(
    stack: Stack, token: str, texts: Sequence[str], *, clients: int = 8, limit: int = 10
) -> dict[str, Answer]:
    """The texts that a ``memory_search`` for the text itself does not return
    (what a user calls lost, whatever rows the database holds), each with the
    search's last answer: an answer whose outcome is not ``ok`` means the search
    itself failed four times, which the caller counts apart from a miss."""
    import httpx

    pending = list(dict.fromkeys(texts))
    missing: dict[str, Answer] = {}
    url = f"{stack.url}/mcp/memory"

    async def searcher(http: Any) -> None:
        while pending:
            text = pending.pop()
            for attempt in range(4):
                answer = await mcp_call(http, url, token, "memory_search", {"query": text, "limit": limit})
                if answer.outcome == "ok":
                    break
                await asyncio.sleep(0.5 * 2**attempt)
            if text not in answer_text(answer):
                missing[text] = answer

    async with httpx.AsyncClient(timeout=httpx.Timeout(60, connect=5)) as http:
        await asyncio.gather(*(searcher(http) for _ in range(clients)))
    return missing
