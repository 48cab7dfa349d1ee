"""Contention in one tenant: many writers and readers over MCP HTTP while the
worker checks conflicts and every beat sweep runs each minute."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.harness.generators.workloads import contention_write
from tests.harness.load.writes import pending_follow_ups, texts_not_found
from tests.harness.stack import Stack
from tests.harness.surfaces.answers import answer_text
from tests.harness.surfaces.mcp_http import mcp_call


def deadlocks_so_far(stack: Stack) -> int:
    """PostgreSQL's own count of transactions it aborted as deadlock victims."""
    return int(stack.sql("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")[0][0])


def deadlock_reports(stack: Stack, limit: int = 3) -> list[str]:
    """The server log's account of each deadlock (the processes, the locks they
    waited for and their statements), so a failed run names the lock order to mend."""
    log = stack.var_dir / "pgdata" / "log"
    if not log.exists():
        return []
    reports: list[str] = []
    lines = log.read_text(errors="replace").splitlines()
    for index, line in enumerate(lines):
        if "deadlock detected" in line and len(reports) < limit:
            reports.append("\n".join(lines[index : index + 12]))
    return reports


# A write-heavy stack for contention runs: every beat sweep each minute, and the
# drain sweep racing the worker's own follow-up tasks after two seconds.
CONTENTION_ENV = {
    **{
        name: "* * * * *"
        for name in (
            "MEMPROJ_BEAT_FOLLOWUPS",
            "MEMPROJ_BEAT_EMBEDDINGS_RETRY",
            "MEMPROJ_BEAT_CONSOLIDATE",
            "MEMPROJ_BEAT_EXPIRE",
            "MEMPROJ_BEAT_DECAY",
            "MEMPROJ_BEAT_MATURITY",
            "MEMPROJ_BEAT_LIFECYCLE",
        )
    },
    "MEMPROJ_FOLLOWUP_GRACE_SECONDS": "2",
    "MEMPROJ_EMBED_RETRY_GRACE_SECONDS": "2",
    "MEMPROJ_CONSOLIDATE_SETTLE_HOURS": "0",
}


@dataclass
class ContentionReport:
    writers: int
    seconds: float
    writes: int = 0
    accepted: int = 0
    error_answers: int = 0
    reads: int = 0  # memento searches and memory recalls beside the writers (their access bookkeeping writes)
    read_errors: int = 0
    deadlocks: int = 0  # pg_stat_database.deadlocks during the run
    merged: int = 0  # superseded by the conflict check as the same statement (the text stays findable)
    open_candidates: int = 0  # near-identical pairs left for review
    replaced_by_key: int = 0  # keyed facts superseded by a newer write of the same subject+predicate
    lost: int = 0  # accepted, not found by a search for its own text, and retired by no audited rule
    unsearchable: int = 0  # accepted, but the search for its own text failed on every attempt
    follow_ups_pending: int = 0
    samples: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not (
            self.error_answers
            or self.read_errors
            or self.deadlocks
            or self.lost
            or self.unsearchable
            or self.follow_ups_pending
        )


async def _found_by_mode(stack: Stack, token: str, text: str) -> dict[str, bool | str]:
    """Whether each mode of memory_search finds ``text`` now (limit 10)."""
    import httpx

    found: dict[str, bool | str] = {}
    async with httpx.AsyncClient(timeout=httpx.Timeout(60, connect=5)) as http:
        for mode in ("hybrid", "keyword", "semantic"):
            answer = await mcp_call(
                http, f"{stack.url}/mcp/memory", token, "memory_search", {"query": text, "limit": 10, "mode": mode}
            )
            found[mode] = text in answer_text(answer) if answer.outcome == "ok" else answer.outcome
    return found


def contention_scenario(stack: Stack, token: str, *, writers: int, seconds: float, drain: float) -> ContentionReport:
    """``writers`` concurrent clients of one tenant write for ``seconds`` (four
    more read) while the worker checks conflicts and the beat sweeps run; then, once every
    follow-up is done, each acknowledged write is searched for by its own text."""
    import httpx

    run_id = f"ct{uuid.uuid4().hex[:6]}"
    report = ContentionReport(writers, seconds)
    deadlocks_before = deadlocks_so_far(stack)
    accepted: list[tuple[str, dict[str, Any]]] = []
    accepted_memento: list[str] = []
    counter = itertools.count()
    stop_at = time.monotonic() + seconds

    async def writer(http: Any) -> None:
        while time.monotonic() < stop_at:
            toolset, name, args = contention_write(run_id, next(counter), accepted_memento)
            report.writes += 1
            answer = await mcp_call(http, f"{stack.url}/mcp/{toolset}", token, name, args)
            if answer.outcome != "ok":
                report.error_answers += 1
                if len(report.samples) < 6:
                    report.samples.append(f"{name}: {answer.outcome} {answer.text[:200]}")
                continue
            report.accepted += 1
            accepted.append((name, args))
            if name == "store_memory" and "Service" in args["content"]:
                accepted_memento.append(args["content"])

    async def reader(http: Any, index: int) -> None:
        # Reads that write: memento's search moves accessed_at, memory_recall bumps reference counts.
        memento = ("memento", "search_memories", "query")
        toolset, name, query = memento if index % 2 else ("memory", "memory_recall", "topic")
        while time.monotonic() < stop_at:
            if not accepted_memento:
                await asyncio.sleep(0.2)
                continue
            answer = await mcp_call(http, f"{stack.url}/mcp/{toolset}", token, name, {query: accepted_memento[-1]})
            report.reads += 1
            if answer.outcome != "ok":
                report.read_errors += 1
                if len(report.samples) < 6:
                    report.samples.append(f"{name}: {answer.outcome} {answer.text[:200]}")

    async def run() -> None:
        limits = httpx.Limits(max_connections=writers + 8)
        async with httpx.AsyncClient(timeout=httpx.Timeout(60, connect=5), limits=limits) as http:
            await asyncio.gather(*(writer(http) for _ in range(writers)), *(reader(http, i) for i in range(4)))

    asyncio.run(run())
    # The beat keeps consolidating while this waits, so new follow-ups can appear
    # at any moment: what is reported is the count that ended the wait.
    deadline = time.monotonic() + drain
    while (pending := pending_follow_ups(stack, run_id)) and time.monotonic() < deadline:
        time.sleep(1)
    report.follow_ups_pending = pending
    if report.follow_ups_pending:
        # Which work is stuck, and on what: a failing check retries with its error in the worker's log.
        report.samples.extend(
            f"pending: {row}"
            for row in stack.sql(
                "SELECT f.kind, f.attempts, f.created_at, m.kind, m.validity, m.embedding_status, m.embedding_error, "
                "left(m.content, 80) FROM memory_followup f JOIN memory_memory m ON m.id = f.memory_id "
                "WHERE f.done_at IS NULL AND m.content LIKE %s LIMIT 5",
                [f"%{run_id}x%"],
            )
        )
        errors = [line for line in stack.log_tail(20_000).splitlines() if "ERROR" in line or "Error" in line]
        report.samples.extend(errors[-8:])
    report.deadlocks = deadlocks_so_far(stack) - deadlocks_before
    if report.deadlocks:
        report.samples.extend(deadlock_reports(stack))
    like = [f"%{run_id}%"]
    report.merged = stack.sql(
        "SELECT count(*) FROM memory_memoryevent e JOIN memory_memory m ON m.id = e.memory_id "
        "WHERE e.event_type = 'superseded' AND e.payload->>'reason' = 'duplicate' AND m.content LIKE %s",
        like,
    )[0][0]
    report.open_candidates = stack.sql(
        "SELECT count(*) FROM memory_conflictcandidate c JOIN memory_memory m ON m.id = c.memory_id "
        "WHERE c.status = 'open' AND m.content LIKE %s",
        like,
    )[0][0]
    replaced = {
        content
        for (content,) in stack.sql(
            "SELECT m.content FROM memory_memory m JOIN memory_memoryevent e ON e.memory_id = m.id "
            "WHERE m.validity = 'superseded' AND e.event_type = 'superseded' "
            "AND e.payload->>'reason' = 'same subject and predicate' AND m.content LIKE %s",
            like,
        )
    }
    texts = [args["content"] for _, args in accepted]
    missing = asyncio.run(texts_not_found(stack, token, texts))
    report.replaced_by_key = len(replaced)
    unanswered = {text: answer for text, answer in missing.items() if answer.outcome != "ok"}
    report.unsearchable = len(unanswered)
    report.samples.extend(
        f"search failed: {text}: {a.outcome} {a.text[:200]}" for text, a in list(unanswered.items())[:3]
    )
    lost = {text: answer for text, answer in missing.items() if text not in replaced and text not in unanswered}
    report.lost = len(lost)
    for text, answer in list(lost.items())[:4]:
        # Which side lost it: the rows (merged, superseded, unembedded, filtered) or the search.
        rows = stack.sql(
            "SELECT m.kind, m.validity, m.embedding_status, m.expires_at, m.boundary_class, m.scope, m.namespace, "
            "m.tenant_id = (SELECT tenant_id FROM memory_memory WHERE content LIKE %s LIMIT 1), (SELECT "
            "e.payload->>'reason' FROM memory_memoryevent e WHERE e.memory_id = m.id AND e.event_type = 'superseded' "
            "ORDER BY e.id DESC LIMIT 1) FROM memory_memory m WHERE m.content = %s",
            [f"%{run_id}x%", text],
        )
        # Each term of the text: the tenant's document frequency against the rows that hold it.
        terms = stack.sql(
            "SELECT t, s.df, (SELECT count(*) FROM memory_memory m WHERE m.tenant_id = s.tenant_id "
            "AND m.search_vector @@ memproj_any_query(ARRAY[t])) FROM unnest(memproj_query_terms(%s)) t "
            "LEFT JOIN memory_termstat s ON s.term = t AND s.tenant_id = "
            "(SELECT tenant_id FROM memory_memory WHERE content = %s LIMIT 1)",
            [text, text],
        )
        modes = asyncio.run(_found_by_mode(stack, token, text))
        report.samples.append(
            f"not found: {text}; rows (kind, validity, embedding, expires_at, class, scope, namespace, same tenant, "
            f"superseded): {rows}; terms (term, df, rows): {terms}; found by mode: {modes}; "
            f"the search returned: {answer.text[:600]}"
        )
    return report
