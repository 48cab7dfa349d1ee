"""Latency at the service layer: every read and write the tools call, the
dialects' main reads, and the baselines measured beside them (the raw embedder,
the raw pgvector top-k, an ef_search sweep, EXPLAIN of the retrieval statement)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from tests.harness.generators import synthetic
from tests.harness.generators.dataset import LANGMEM_NAMESPACE
from tests.harness.measure.timing import timed
from tests.harness.paths import VAR_BENCH


def bench_service(size: int, caller, repeat: int) -> tuple[list[dict], dict]:  # type: ignore[no-untyped-def]
    from django.db import connection, transaction

    from memory.context import build_context
    from memory.embeddings import get_embedder
    from memory.models import EMBEDDING_DIM, GRAPH_GROUP_SQL, GRAPH_VECTOR_SQL
    from memory.retrieval import vector_literal
    from memory.selectors.memories import SearchQuery, memory_search
    from memory.services.memories import episode_store, fact_store
    from memory.services.referencing import memory_get, memory_recall

    embedder = get_embedder()
    qs = synthetic.queries(max(repeat + 4, 16), seed=size)
    qi = iter(range(10**9))

    def next_query() -> str:
        return qs[next(qi) % len(qs)]

    # Baselines: the raw embedder on one query; the raw pgvector top-k query
    # (same tenant filter and HNSW settings, a precomputed vector, no ORM).
    base: dict[str, Any] = {}
    base["embed_one"] = timed(lambda: embedder.embed([next_query()]), repeat)
    qvecs = [vector_literal(v) for v in embedder.embed(qs[:16])]

    def raw_topk() -> None:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("SET LOCAL hnsw.iterative_scan = 'relaxed_order'")
            cur.execute("SET LOCAL hnsw.ef_search = 100")
            cur.execute(
                f"SELECT id FROM memory_memory m WHERE tenant_id = %(tenant)s AND {GRAPH_GROUP_SQL} "
                f"ORDER BY {GRAPH_VECTOR_SQL} <=> %(qvec)s::halfvec({EMBEDDING_DIM}) LIMIT 20",
                {"tenant": caller.tenant_id, "qvec": qvecs[next(qi) % len(qvecs)]},
            )
            cur.fetchall()

    base["pgvector_topk"] = timed(raw_topk, repeat)

    from memory.models import Memory

    counter = iter(range(10**9))
    ids = list(Memory.objects.filter(tenant_id=caller.tenant_id, validity="active").values_list("kind", "id")[:500])

    def get_one() -> object:
        kind, pk = ids[next(counter) % len(ids)]
        return memory_get(caller=caller, kind=kind, memory_id=pk)

    ops = [
        (
            "store_episode",
            "store",
            lambda: episode_store(
                caller=caller, content=synthetic.fresh_episode(size * 1000 + next(counter)), butler="general"
            ),
        ),
        # Five keys in rotation: every call after the first five supersedes an active fact.
        (
            "store_fact_supersede",
            "store",
            lambda: fact_store(
                caller=caller,
                subject="bench-user",
                predicate=f"pref-{next(counter) % 5}",
                content=synthetic.fresh_episode(size * 1000 + next(counter)),
            ),
        ),
        (
            "search_hybrid",
            "search",
            lambda: memory_search(caller=caller, query=SearchQuery(next_query(), mode="hybrid")),
        ),
        (
            "search_semantic",
            "search",
            lambda: memory_search(caller=caller, query=SearchQuery(next_query(), mode="semantic")),
        ),
        (
            "search_keyword",
            "search",
            lambda: memory_search(caller=caller, query=SearchQuery(next_query(), mode="keyword")),
        ),
        ("recall", "search", lambda: memory_recall(caller=caller, topic=next_query())),
        ("get", "get", get_one),
        ("context", "context", lambda: build_context(caller=caller, trigger_prompt=next_query(), butler="general")),
    ]
    ops += dialect_service_ops(caller, next_query)
    rows = []
    for name, group, fn in ops:
        # Every timed call pays its query embedding: the query cache is emptied first
        # (the synthetic queries repeat; agents' real repeats would only make it faster).
        # The most any of the first calls found: the queries cycle over every kind of
        # question, and one about rules finds no fact (a hit needs evidence).
        counts = [count_found(fn()) for _ in range(FOUND_PROBES)]
        found = None if all(c is None for c in counts) else max(c or 0 for c in counts)

        def uncached(fn: Callable[[], object] = fn) -> object:
            embedder.clear_query_cache()
            return fn()

        samples = timed(uncached, repeat)
        rows.append({"size": size, "path": "service", "op": name, "group": group, "samples": samples, "found": found})
    base["ann"] = ann_sweep(caller, qvecs)
    base["explain"] = [
        explain_search(
            caller,
            mode,
            qs[0],
            size,
            lambda q, mode=mode: memory_search(caller=caller, query=SearchQuery(q, mode=mode)),
        )
        for mode in ("hybrid", "keyword")
    ]
    # langmem's read: facts of one namespace (a filter the HNSW scan applies row by row).
    base["explain"].append(
        explain_search(
            caller,
            "hybrid facts in a namespace (langmem)",
            qs[0],
            size,
            lambda q: memory_search(
                caller=caller, query=SearchQuery(q, types=["fact"], limit=10, namespace_prefix=LANGMEM_NAMESPACE)
            ),
        )
    )
    return rows, base


def dialect_service_ops(caller, next_query) -> list[tuple]:  # type: ignore[no-untyped-def]
    """What each dialect's tool (or the roampal hook's view) calls in memory.api,
    with the arguments the bench's MCP calls send."""
    from memory import api

    def hook_get_context() -> object:
        # The view's service calls, in its order (mcp_server/dialects/roampal/routes.py get_context).
        query = next_query()
        pending = api.exchange_pending_scoring(caller=caller, conversation_id="bench")
        context = api.known_context(caller=caller, query=query)
        api.exchange_open(
            caller=caller, conversation_id="bench", user_message=query, surfaced_ids=context.memory_ids, scores=pending
        )
        return context

    return [
        (
            "memento_search_memories",
            "dialect",
            lambda: api.memory_search_accessed(
                caller=caller, query=api.SearchQuery(next_query(), types=["fact"], limit=5)
            ),
        ),
        (
            "langmem_search_memory",
            "dialect",
            lambda: api.memory_search_accessed(
                caller=caller,
                query=api.SearchQuery(next_query(), types=["fact"], limit=10, namespace_prefix=LANGMEM_NAMESPACE),
            ),
        ),
        ("roampal_get_context_insights", "dialect", lambda: api.known_context(caller=caller, query=next_query())),
        ("roampal_hook_get_context", "dialect", hook_get_context),
        ("pce_activate", "dialect", lambda: api.claims_activate(caller=caller, query=next_query())),
    ]


FOUND_PROBES = 5


def count_found(result: object) -> int | None:
    """How many memories a read returned (the first call of each operation): a
    read that finds nothing would be measured cheaply and wrongly."""
    if isinstance(result, list | tuple):
        return len(result)
    for names in (("user_facts", "relevant"), ("items",)):
        if all(hasattr(result, n) for n in names):
            return sum(len(getattr(result, n)) for n in names)
    included = getattr(result, "included", None)  # a ContextBlock: memories per section
    if isinstance(included, dict):
        return sum(len(v) for v in included.values())
    return None


def ann_sweep(caller, qvecs: list[str]) -> list[dict]:  # type: ignore[no-untyped-def]
    """The raw tenant-filtered top-20 at several ef_search values: p50 and two
    recalls against the exact top-20 (a sequential scan of the tenant): the id
    overlap, and the share of returned rows at most as far as the exact 20th
    (the synthetic texts repeat, so exact ties make id overlap understate)."""
    from django.db import connection, transaction

    from memory.models import EMBEDDING_DIM, GRAPH_GROUP_SQL, GRAPH_VECTOR_SQL

    def top20(qvec: str, ef: int | None) -> list[tuple]:
        with transaction.atomic(), connection.cursor() as cur:
            if ef is None:
                cur.execute("SET LOCAL enable_indexscan = off")
            else:
                cur.execute(f"SET LOCAL hnsw.iterative_scan = 'relaxed_order'; SET LOCAL hnsw.ef_search = {int(ef)}")
            # The exact order in float32; the graphs' walk in their half precision.
            order = (
                "embedding <=> %(qvec)s::vector"
                if ef is None
                else f"{GRAPH_VECTOR_SQL} <=> %(qvec)s::halfvec({EMBEDDING_DIM})"
            )
            cur.execute(
                "SELECT id, embedding <=> %(qvec)s::vector FROM memory_memory m WHERE tenant_id = %(tenant)s "
                f"AND {GRAPH_GROUP_SQL} AND embedding IS NOT NULL ORDER BY {order} LIMIT 20",
                {"qvec": qvec, "tenant": caller.tenant_id},
            )
            return cur.fetchall()

    exact = []
    exact_ms = []
    for v in qvecs[:8]:
        t0 = time.perf_counter()
        exact.append(top20(v, None))
        exact_ms.append((time.perf_counter() - t0) * 1000.0)
    out = [{"ef_search": "exact (seq scan)", "p50": statistics.median(exact_ms), "recall": 1.0, "dist_recall": 1.0}]
    for ef in (40, 100, 200, 400):
        ms, overlap, within = [], [], []
        for v, truth in zip(qvecs[:8], exact, strict=True):
            top20(v, ef)  # warm
            t0 = time.perf_counter()
            got = top20(v, ef)
            ms.append((time.perf_counter() - t0) * 1000.0)
            overlap.append(len({r[0] for r in got} & {r[0] for r in truth}) / 20.0)
            cut = max(r[1] for r in truth) + 1e-6
            within.append(sum(1 for r in got if r[1] <= cut) / 20.0)
        out.append(
            {
                "ef_search": ef,
                "p50": statistics.median(ms),
                "recall": sum(overlap) / len(overlap),
                "dist_recall": sum(within) / len(within),
            }
        )
    return out


def explain_search(caller, mode: str, query: str, size: int, search) -> dict:  # type: ignore[no-untyped-def]
    """EXPLAIN (ANALYZE, BUFFERS) of the retrieval statement of one search: the
    statements are captured as the service runs them, then the slowest channel
    statement is explained after replaying the SET statements that preceded it
    (hnsw settings). The full plan goes to var/bench/explain-<size>-<mode>.txt."""
    from django.db import connection, transaction

    from memory.retrieval import split_settings

    captured: list[tuple[str, Any, float]] = []

    def wrapper(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            # A retrieval channel's one query holds its settings and its statement: recorded apart.
            settings, statement = split_settings(sql)
            if settings:
                captured.append((settings, None, 0.0))
            captured.append((statement, params, (time.perf_counter() - t0) * 1000.0))

    with connection.execute_wrapper(wrapper):
        search(query)
    selects = [(i, c) for i, c in enumerate(captured) if c[0].lstrip().upper().startswith(("SELECT", "WITH"))]
    # The retrieval statement (vector top-k and/or BM25 channel) when there is one.
    channel = [(i, c) for i, c in selects if "<=>" in c[0] or "memory_termstat" in c[0]]
    selects = channel or selects
    if not selects:
        return {"size": size, "mode": mode, "statements": len(captured)}
    index, (sql, params, ms) = max(selects, key=lambda x: x[1][2])
    sets = [c[0] for c in captured[:index] if c[0].lstrip().upper().startswith("SET")]
    with transaction.atomic(), connection.cursor() as cur:
        for statement in sets:
            cur.execute(statement)
        cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        plan = cur.fetchone()[0]
        plan = plan[0] if isinstance(plan, list) else json.loads(plan)[0]
        cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        text = "\n".join(r[0] for r in cur.fetchall())
    path = VAR_BENCH / f"explain-{size}-{mode.split()[-1].strip('()')}.txt"
    path.write_text(f"-- {mode} search, {size} memories in the tenant: {query!r}\n{sql}\n\n{text}\n")
    top = plan["Plan"]
    nodes: dict[str, float] = {}

    def walk(node: dict) -> None:
        # Each scan with the rows it produced (all loops): the candidates each channel ranked.
        label = node["Node Type"] + (f" on {node.get('Index Name') or node.get('Relation Name')}")
        scans = ("Index Scan", "Bitmap Index Scan", "Seq Scan", "Index Only Scan", "Bitmap Heap Scan")
        if node["Node Type"] in scans:
            produced = float(node.get("Actual Rows", 0)) * float(node.get("Actual Loops", 1))
            nodes[label] = nodes.get(label, 0.0) + produced
        for child in node.get("Plans", []):
            walk(child)

    walk(top)
    return {
        "size": size,
        "mode": mode,
        "statements": len(captured),
        "slowest_ms": ms,
        "exec_ms": plan.get("Execution Time"),
        "plan_ms": plan.get("Planning Time"),
        "hit": top.get("Shared Hit Blocks", 0),
        "read": top.get("Shared Read Blocks", 0),
        "scans": ", ".join(f"{label} ({rows:.0f} rows)" for label, rows in nodes.items()),
        "file": path.name,
    }
