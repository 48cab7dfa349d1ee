"""Speed benchmark: latency of every read and write, through the service layer
and end to end through the MCP streamable-HTTP endpoint, at several tenant
sizes with other tenants present; bulk-ingest throughput; and the baselines
(raw embedder, raw pgvector top-k) measured in the same run.

    .venv/bin/python bench/perf.py                    # full run: 10k and 100k per tenant
    .venv/bin/python bench/perf.py --sizes 10000      # one size
    .venv/bin/python bench/perf.py --sizes 10000,100000,1000000   # the cost curve, one command
    nice -n 10 .venv/bin/python bench/perf.py --sizes 1000000 --database memproj_bench_1m --prepare-only
    .venv/bin/python bench/perf.py --tiny             # smoke test (seconds)

Every size is one tenant of that many memories in one table, with other tenants
present. Above 100k memories nothing new is embedded (BASE_VECTORS): the cached
vectors are reused with small perturbations and varied texts (the header says so).
A load drops and rebuilds the HNSW and GIN indexes and times COPY, both builds and
ANALYZE; --prepare-only stops there (run it under nice: the server backend and its
parallel workers get the same niceness).

Runs against its own database (see bench/_common.py), never the dev database.
The embedded synthetic dataset is cached under var/bench/ between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
import synthetic  # noqa: E402

# p95 goals on a 2-core machine (issue 13), per operation, service layer; end to end
# through MCP over HTTP each must be within MCP_MARGIN_MS of its service-layer figure.
GOALS_MS = {
    "store_episode": 40.0,
    "store_fact_supersede": 40.0,
    "search_hybrid": 30.0,
    "search_semantic": 30.0,
    "search_keyword": 30.0,
    "recall": 35.0,
    "context": 60.0,
    "get": 8.0,
}
MCP_MARGIN_MS = 15.0
# Seed 002's latency targets for memento, measured end to end through /mcp/memento/ (floors).
# Its search target (200 ms) is not listed: search_memories is a dialect read with the
# issue's stricter hybrid-search goal (DIALECT_GOAL_OF).
MEMENTO_FLOORS_MS = {
    "memento_store": 500.0,
    "memento_supersede": 100.0,
    "memento_list_recent": 100.0,
}
INGEST_GOAL = 0.9  # bulk ingest / raw batch embedder throughput
CONCURRENCY_GOAL_X = 3.0  # throughput at 32 clients vs the 24 calls/s measured before issue 13
CONCURRENCY_BEFORE_PER_S = 24.0
CONCURRENCY_P95_MS = 300.0
DATASET_VERSION = "v1"
# Texts embedded once and cached (var/bench/synthetic-v1-100000.npy). A larger
# tenant embeds nothing new: row i >= BASE_VECTORS reuses vector i % BASE_VECTORS
# plus Gaussian noise of PERTURB_SIGMA per dimension, re-normalised (cosine to the
# original ~0.98), with a varied text (synthetic.scaled_spec). Said in the header.
BASE_VECTORS = 100_000
PERTURB_SIGMA = 0.01
VECTOR_FORMAT = "[" + ",".join(["%.6g"] * 384) + "]"
LOAD_CHUNK = 20_000  # rows per COPY statement (bounded memory; one trigger call each)
# Bench rows carry this source; a change of the row layout (namespaces for langmem)
# changes it, so an older load is replaced rather than measured.
BENCH_SOURCE = "bench-v2"
# Calls a minute the measured tenants may make: the concurrency steps send more
# than the default policy's 1,000, and an answer of 429 is no measurement.
BENCH_RATE_LIMIT = 1_000_000
LANGMEM_NAMESPACE = ("user", "bench")  # /mcp/langmem/?configurable.user_id=bench


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10000,100000", help="memories in the measured tenant, comma separated")
    p.add_argument("--other-tenants", type=int, default=3, help="extra tenants present in the table")
    p.add_argument("--other-size", type=int, default=10000, help="memories in each extra tenant")
    p.add_argument("--repeat", type=int, default=60, help="timed calls per service-layer operation")
    p.add_argument("--mcp-repeat", type=int, default=40, help="timed calls per MCP operation")
    p.add_argument("--ingest", type=int, default=2000, help="memories in the bulk-ingest measurement")
    p.add_argument("--skip-mcp", action="store_true", help="service layer only")
    p.add_argument("--reload", action="store_true", help="drop and re-insert the bench tenants")
    p.add_argument("--json", type=Path, default=None, help="also write raw results as JSON here")
    p.add_argument("--clients", default="1,2,4,8,16,32", help="concurrency curve: HTTP clients per step")
    p.add_argument("--conc-seconds", type=float, default=15.0, help="seconds per concurrency step (0 = skip)")
    p.add_argument("--store-share", type=float, default=0.3, help="share of stores in the mixed workload")
    p.add_argument(
        "--open-rates",
        default="24,32,40,48,56,64,72,96",
        help="open loop: arrival rates (calls/s) over the largest --clients connections, --conc-seconds each",
    )
    p.add_argument("--web-workers", type=int, default=0, help="uvicorn worker processes (0 = MEMPROJ_WEB_WORKERS)")
    p.add_argument(
        "--embedder",
        action="store_true",
        help="only compare the embedder backends (ONNX Runtime vs PyTorch, same weights) and exit",
    )
    p.add_argument("--tiny", action="store_true", help="smoke-test size (a few hundred memories, few repeats)")
    p.add_argument(
        "--database",
        default=_common.BENCH_DB_NAME,
        help="bench database on the embedded server (e.g. a separate one for the 1M tenant)",
    )
    p.add_argument("--prepare-only", action="store_true", help="load, index and analyse, then exit (run under nice)")
    p.add_argument(
        "--maintenance-work-mem",
        default="",
        help="for the index builds after a bulk load (default: 4GB above 500k rows loaded, else 1GB)",
    )
    p.add_argument("--explain", action="store_true", default=True, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.tiny:
        args.sizes, args.other_tenants, args.other_size = "300", 1, 100
        args.repeat, args.mcp_repeat, args.ingest = 5, 3, 64
        args.clients, args.conc_seconds, args.open_rates = "1,4", 2.0, "10"
    args.size_list = [int(s) for s in str(args.sizes).split(",") if s.strip()]
    args.client_list = [int(c) for c in str(args.clients).split(",") if c.strip()]
    args.open_rate_list = [float(r) for r in str(args.open_rates).split(",") if r.strip()]
    args.prefix = "benchtiny" if args.tiny else "bench"  # the smoke test never churns the full dataset
    return args


# --------------------------------------------------------------------------- dataset


def dataset_vectors(n: int):  # type: ignore[no-untyped-def]
    """Vectors of synthetic texts 0..n-1, from the cache when a large-enough one exists."""
    import numpy as np

    from memory.embeddings import get_embedder

    _common.VAR_BENCH.mkdir(parents=True, exist_ok=True)
    cached = sorted(_common.VAR_BENCH.glob(f"synthetic-{DATASET_VERSION}-*.npy"))
    for path in cached:
        size = int(path.stem.rsplit("-", 1)[1])
        if size >= n:
            return np.load(path, mmap_mode="r")[:n]
    embedder = get_embedder()
    out = np.zeros((n, 384), dtype=np.float32)
    start = time.perf_counter()
    chunk = 2048
    # Chunks are kept as they are made, so an interrupted run resumes where it stopped.
    parts = _common.VAR_BENCH / f"chunks-{DATASET_VERSION}"
    parts.mkdir(exist_ok=True)
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        part = parts / f"{lo:07d}-{chunk}.npy"
        if part.exists() and len(np.load(part, mmap_mode="r")) >= hi - lo:
            out[lo:hi] = np.load(part)[: hi - lo]
            continue
        texts = [synthetic.memory_spec(i)["content"] for i in range(lo, hi)]
        out[lo:hi] = np.asarray(embedder.embed(texts), dtype=np.float32)
        if hi - lo == chunk:
            np.save(part, out[lo:hi])
        if n > 5000:
            rate = hi / (time.perf_counter() - start)
            print(f"  embedded {hi}/{n} synthetic texts ({rate:.0f}/s)", file=sys.stderr, flush=True)
    path = _common.VAR_BENCH / f"synthetic-{DATASET_VERSION}-{n}.npy"
    np.save(path, out)
    return out


def _pg_text(value: object) -> str:
    if value is None:
        return "\\N"
    s = str(value)
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


COPY_COLUMNS = [
    "id",
    "tenant_id",
    "principal_id",
    "kind",
    "content",
    "content_hash",
    "butler",
    "session_id",
    "scope",
    "namespace",
    "tags",
    "metadata",
    "source",
    "importance",
    "confidence",
    "permanence",
    "decay_rate",
    "last_confirmed_at",
    "expires_at",
    "subject",
    "predicate",
    "validity",
    "superseded_by_id",
    "maturity",
    "success_count",
    "harmful_count",
    "applied_count",
    "effectiveness_score",
    "last_applied_at",
    "reference_count",
    "last_referenced_at",
    "consolidated_at",
    "embedding",
    "embedding_model",
    "embedding_status",
    "embedding_attempts",
    "embedding_error",
    "created_at",
    "updated_at",
]


def _chunk_vectors(base, rows):  # type: ignore[no-untyped-def]
    """Vectors of dataset rows ``rows`` (a numpy index array): row i is base row
    i % len(base), perturbed and re-normalised when i >= len(base). The noise is
    seeded by the chunk's first row (loads always start chunks at the same rows)."""
    import numpy as np

    n_base = len(base)
    out = np.asarray(base[rows % n_base], dtype=np.float32)
    reused = rows >= n_base
    if reused.any():
        noise = np.random.default_rng(int(rows[0])).normal(0.0, PERTURB_SIGMA, (int(reused.sum()), out.shape[1]))
        v = out[reused] + noise.astype(np.float32)
        out[reused] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def bulk_load(tenant_id: uuid.UUID, base, offset: int, n: int, *, namespace_facts: bool = False) -> None:  # type: ignore[no-untyped-def]
    """COPY n synthetic memories into one tenant, LOAD_CHUNK rows per statement.
    A tenant that fits the embedded texts takes texts offset..offset+n-1 (wrapping);
    a larger one takes rows 0..n-1 of the scaled dataset (synthetic.scaled_spec and
    _chunk_vectors). ``namespace_facts``: every other fact lives in LANGMEM_NAMESPACE,
    so langmem's search_memory finds data (the rest stay in the root namespace)."""
    import numpy as np
    from django.db import connection

    from memory import scoring, validation

    now = datetime.now(UTC)
    n_base = len(base)
    scaled = n > n_base
    ns_literal = "{" + ",".join(LANGMEM_NAMESPACE) + "}"
    connection.ensure_connection()
    raw = connection.connection
    for lo in range(0, n, LOAD_CHUNK):
        hi = min(n, lo + LOAD_CHUNK)
        rows = np.arange(offset + lo, offset + hi) if scaled else (np.arange(offset + lo, offset + hi) % n_base)
        vectors = _chunk_vectors(base, rows).tolist()
        with raw.cursor() as cur, cur.copy(f"COPY memory_memory ({', '.join(COPY_COLUMNS)}) FROM STDIN") as copy:
            buf = io.StringIO()
            for k, (i, vector) in enumerate(zip(rows.tolist(), vectors, strict=True)):
                spec = synthetic.scaled_spec(i, n_base)
                created = now - timedelta(minutes=(i * 37) % (90 * 24 * 60))
                kind = spec["kind"]
                episode = kind == "episode"
                row = {
                    "id": uuid.uuid4(),
                    "tenant_id": tenant_id,
                    "principal_id": None,
                    "kind": kind,
                    "content": spec["content"],
                    "content_hash": validation.content_hash(spec["content"]),
                    "butler": spec["butler"] if episode else "",
                    "session_id": "",
                    "scope": "global" if (i % 5) < 3 else spec["butler"],
                    "namespace": ns_literal if (namespace_facts and kind == "fact" and i % 2 == 0) else "{}",
                    "tags": "{}",
                    "metadata": "{}",
                    "source": BENCH_SOURCE,
                    "importance": spec["importance"],
                    "confidence": 0.5 if kind == "rule" else 1.0,
                    "permanence": "" if episode else "standard",
                    "decay_rate": 0.0 if episode else scoring.DECAY_RATES["standard"],
                    "last_confirmed_at": None if episode else created,
                    "expires_at": now + timedelta(days=365) if episode else None,
                    "subject": spec.get("subject", ""),
                    "predicate": spec.get("predicate", ""),
                    "validity": "active",
                    "superseded_by_id": None,
                    "maturity": spec.get("maturity", ""),
                    "success_count": 0,
                    "harmful_count": 0,
                    "applied_count": 0,
                    "effectiveness_score": 0.0,
                    "last_applied_at": None,
                    "reference_count": 0,
                    "last_referenced_at": None,
                    "consolidated_at": None,
                    "embedding": VECTOR_FORMAT % tuple(vector),  # one C call per row: the load's hot spot
                    "embedding_model": "all-MiniLM-L6-v2",
                    "embedding_status": "ready",
                    "embedding_attempts": 0,
                    "embedding_error": "",
                    "created_at": created,
                    "updated_at": created,
                }
                buf.write("\t".join(_pg_text(row[c]) for c in COPY_COLUMNS) + "\n")
                if k % 500 == 499:  # stream: the server parses while the next rows are formatted
                    copy.write(buf.getvalue())
                    buf = io.StringIO()
            copy.write(buf.getvalue())
        raw.commit() if not raw.autocommit else None
        if n > 100_000:
            print(f"    copied {hi}/{n} rows", file=sys.stderr, flush=True)


def _renice_backend(niceness: int, leaders: list[int], stop) -> None:  # type: ignore[no-untyped-def]
    """While ``stop`` is unset, give the server backends ``leaders`` and their parallel
    workers our niceness: ``nice -n 10 perf.py --prepare-only`` then slows the
    COPY, index builds and ANALYZE for the other users of the machine, not only
    this client (the server processes are not our children)."""
    import threading

    import psycopg

    def loop() -> None:
        with psycopg.connect(_owner_url(), autocommit=True) as other:
            while not stop.is_set():
                rows = other.execute(
                    "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s) OR leader_pid = ANY(%s)", [leaders, leaders]
                ).fetchall()
                for (pid,) in rows:
                    with contextlib.suppress(OSError):  # a worker that already ended
                        os.setpriority(os.PRIO_PROCESS, pid, niceness)
                stop.wait(2.0)

    threading.Thread(target=loop, name="bench-renice", daemon=True).start()


def _owner_url() -> str:
    """The bench database as its schema owner (set by _common.setup_django): index
    DDL and ANALYZE need the owner; the service's app role may only read and write rows."""
    return os.environ.get("DATABASE_OWNER_URL") or os.environ["DATABASE_URL"]


def _model_index_sql(name: str) -> str:
    from django.db import connection

    from memory.models import Memory

    (index,) = [i for i in Memory._meta.indexes if i.name == name]
    with connection.schema_editor(collect_sql=True) as editor:
        return str(index.create_sql(Memory, editor))


# Indexes rebuilt after a big load: one build is much cheaper than maintaining them row by row.
REBUILT_INDEXES = (
    "memory_embedding_hnsw",
    "memory_fact_hnsw",
    "memory_rule_hnsw",
    "memory_document_hnsw",
    "memory_search_vector_gin",
)


def ensure_tenants(args: argparse.Namespace) -> dict[str, object]:
    """The measured tenants (one per size) plus the others, each loaded once;
    the timings of a load (COPY, index builds, ANALYZE) are returned for the header."""
    import threading

    import psycopg
    from django.db import connection

    from memory.models import Memory
    from policy.document import SEED_EXAMPLE_YAML
    from policy.selectors.policies import policy_current, policy_is_applied
    from policy.services.policies import policy_apply
    from policy.services.tokens import token_authenticate, token_issue

    wanted = {f"{args.prefix}-{n}": (n, 0) for n in args.size_list}
    for j in range(args.other_tenants):
        wanted[f"{args.prefix}-other-{j}"] = (args.other_size, 104_729 * (j + 1))
    callers = {}
    to_load = []
    for slug, (n, offset) in wanted.items():
        issued = token_issue(tenant_slug=slug, principal_name="bench", role="admin")
        caller = token_authenticate(issued.token)
        assert caller is not None
        if (
            not policy_is_applied(tenant_id=caller.tenant_id)
            or policy_current(tenant_id=caller.tenant_id).rate_limit.limit < BENCH_RATE_LIMIT
        ):
            # pce's tools need an applied policy; the seed example has the default's values,
            # and a rate limit the concurrency steps cannot reach.
            rate_limit = f"rate_limit:\n  limit: {BENCH_RATE_LIMIT}\n  window_seconds: 60\n"
            policy_apply(caller=caller, yaml=SEED_EXAMPLE_YAML + rate_limit)
            caller = token_authenticate(issued.token)
            assert caller is not None
        have = Memory.objects.filter(tenant_id=caller.tenant_id, source=BENCH_SOURCE).count()
        if have != n or args.reload:
            to_load.append((slug, caller, n, offset, have))
        callers[slug] = (caller, issued.token)
    timings: dict[str, float] = {}
    if to_load:
        base = dataset_vectors(min(BASE_VECTORS, max(n for _, _, n, _, _ in to_load)))
        loaded = sum(n for _, _, n, _, _ in to_load)
        rebuild = loaded > 20_000
        stop = threading.Event()
        owner = psycopg.connect(_owner_url(), autocommit=True)
        if os.nice(0) > 0:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                app_pid = cur.fetchone()[0]
            _renice_backend(os.nice(0), [app_pid, owner.info.backend_pid], stop)
        indexdefs = {}
        for name in REBUILT_INDEXES:
            row = owner.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name]).fetchone()
            # An index a killed load left dropped is rebuilt from the model's definition.
            indexdefs[name] = row[0] if row else _model_index_sql(name)
            if rebuild and row:
                owner.execute(f"DROP INDEX {name}")
        try:
            t_all = time.perf_counter()
            for slug, caller, n, offset, _have in to_load:
                with connection.cursor() as cur:  # bench rows only; audit events are untouched
                    cur.execute(
                        "DELETE FROM memory_memory WHERE tenant_id = %s AND source LIKE 'bench%%'", [caller.tenant_id]
                    )
                t0 = time.perf_counter()
                bulk_load(caller.tenant_id, base, offset, n, namespace_facts="-other-" not in slug)
                print(f"  loaded {n} memories into {slug} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
            timings["copy_s"] = time.perf_counter() - t_all
            timings["rows_loaded"] = loaded
        finally:
            if rebuild:
                mwm = args.maintenance_work_mem or ("4GB" if loaded > 500_000 else "1GB")
                # The HNSW graph is built in memory when it fits (else far slower);
                # one parallel worker besides the leader on this 2-core machine.
                owner.execute(f"SET maintenance_work_mem = '{mwm}'")
                owner.execute("SET max_parallel_maintenance_workers = 1")
                for name, indexdef in indexdefs.items():
                    if (
                        indexdef is None
                        or owner.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [name]).fetchone()
                    ):
                        continue
                    print(f"  building {name} ...", file=sys.stderr, flush=True)
                    t0 = time.perf_counter()
                    owner.execute(indexdef)
                    timings[f"build_{name}_s"] = time.perf_counter() - t0
                    print(f"  built {name} in {timings[f'build_{name}_s']:.1f}s", file=sys.stderr, flush=True)
                timings["maintenance_work_mem"] = mwm  # type: ignore[assignment]
            stop.set()
            owner.close()
    with psycopg.connect(_owner_url(), autocommit=True) as owner:
        # The keyword channel's BM25 statistics live in their own tables (kept by
        # the COPY's statement triggers): the planner needs them analysed too.
        # As the owner: the app role's ANALYZE would skip these tables with a warning.
        # VACUUM too: every run adds memories and the accessed_at updates of memento and
        # langmem reads leave dead rows, which made later runs slower than earlier ones.
        t0 = time.perf_counter()
        owner.execute("VACUUM (ANALYZE) memory_memory, memory_termstat, memory_tenantstat")
        timings["vacuum_analyze_s"] = time.perf_counter() - t0
        rows, tenants = owner.execute("SELECT count(*), count(DISTINCT tenant_id) FROM memory_memory").fetchone()
        found = owner.execute(
            "SELECT pg_size_pretty(pg_table_size('memory_memory')), "
            "pg_size_pretty(pg_relation_size('memory_embedding_hnsw') + pg_relation_size('memory_fact_hnsw') "
            "+ pg_relation_size('memory_rule_hnsw') + pg_relation_size('memory_document_hnsw')), "
            "pg_size_pretty(pg_relation_size('memory_search_vector_gin')), "
            "pg_size_pretty(pg_total_relation_size('memory_termstat')), current_setting('shared_buffers')"
        ).fetchone()
        sizes = dict(zip(("heap", "hnsw", "gin", "termstat", "shared_buffers"), found, strict=True))
    return {"callers": callers, "rows": rows, "tenants": tenants, "load_timings": timings, "sizes": sizes}


# --------------------------------------------------------------------------- service layer


def bench_service(size: int, caller, repeat: int) -> tuple[list[dict], dict]:  # type: ignore[no-untyped-def]
    from django.db import connection, transaction

    from memory.context import build_context
    from memory.embeddings import get_embedder
    from memory.models import EMBEDDING_DIM, GRAPH_VECTOR_SQL
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
    base = {}
    base["embed_one"] = _common.timed(lambda: embedder.embed([next_query()]), repeat)
    qvecs = [vector_literal(v) for v in embedder.embed(qs[:16])]

    def raw_topk() -> None:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("SET LOCAL hnsw.iterative_scan = 'relaxed_order'")
            cur.execute("SET LOCAL hnsw.ef_search = 100")
            cur.execute(
                "SELECT id FROM memory_memory m WHERE tenant_id = %s "
                f"ORDER BY {GRAPH_VECTOR_SQL} <=> %s::halfvec({EMBEDDING_DIM}) LIMIT 20",
                [caller.tenant_id, qvecs[next(qi) % len(qvecs)]],
            )
            cur.fetchall()

    base["pgvector_topk"] = _common.timed(raw_topk, repeat)

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
        found = count_found(fn())
        samples = _common.timed(lambda fn=fn: (embedder.clear_query_cache(), fn()), repeat)
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


# The dialects' main reads (issue 13) and the core operation whose goal each shares:
# the two searches are hybrid searches of facts; get_context_insights, the hook's
# get-context and pce's activate each build a context for a prompt.
DIALECT_GOAL_OF = {
    "memento_search_memories": "search_hybrid",
    "langmem_search_memory": "search_hybrid",
    "roampal_get_context_insights": "context",
    "roampal_hook_get_context": "context",
    "pce_activate": "context",
}


def dialect_service_ops(caller, next_query) -> list[tuple]:  # type: ignore[no-untyped-def]
    """What each dialect's tool (or the roampal hook's view) calls in memory.api,
    with the arguments the bench's MCP calls send."""
    from memory import api

    def hook_get_context() -> object:
        # The view's service calls, in its order (mcp_server/hooks.py get_context).
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

    from memory.models import EMBEDDING_DIM, GRAPH_VECTOR_SQL

    def top20(qvec: str, ef: int | None) -> list[tuple]:
        with transaction.atomic(), connection.cursor() as cur:
            if ef is None:
                cur.execute("SET LOCAL enable_indexscan = off")
            else:
                cur.execute(f"SET LOCAL hnsw.iterative_scan = 'relaxed_order'; SET LOCAL hnsw.ef_search = {int(ef)}")
            # The exact order in float32; the graphs' walk in their half precision.
            order = "embedding <=> %s::vector" if ef is None else f"{GRAPH_VECTOR_SQL} <=> %s::halfvec({EMBEDDING_DIM})"
            cur.execute(
                "SELECT id, embedding <=> %s::vector FROM memory_memory m WHERE tenant_id = %s "
                f"AND embedding IS NOT NULL ORDER BY {order} LIMIT 20",
                [qvec, caller.tenant_id, qvec],
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

    captured: list[tuple[str, object, float]] = []

    def wrapper(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            captured.append((sql, params, (time.perf_counter() - t0) * 1000.0))

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
    path = _common.VAR_BENCH / f"explain-{size}-{mode.split()[-1].strip('()')}.txt"
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


# --------------------------------------------------------------------------- MCP over HTTP


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(db_url: str, workers: int = 1) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    # No query cache in the server either: every search pays its embedding.
    env = dict(
        os.environ, DATABASE_URL=db_url, MEMPROJ_EMBED_MODE="sync", LOG_LEVEL="WARNING", MEMPROJ_EMBED_QUERY_CACHE="0"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "memproj.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--lifespan",
            "on",
            "--log-level",
            "warning",
            "--no-access-log",
            "--workers",
            str(max(1, workers)),
        ],
        cwd=str(_common.BASE_DIR),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("uvicorn exited: " + (proc.stderr.read().decode() if proc.stderr else ""))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"http://127.0.0.1:{port}/mcp/memory"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("uvicorn did not start within 120 s")


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
                text = result.content[0].text if result.content else ""
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
    async with httpx.AsyncClient(headers=headers, timeout=120.0) as http:

        async def hook() -> int:
            response = await http.post(base + "/api/hooks/get-context", json={"query": q(), "conversation_id": "bench"})
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
    """Seed 002's four tools through /mcp/memento/ (their latency targets are floors)."""
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


# --------------------------------------------------------------------------- ingest


INGEST_BULK_BATCH = 250  # episodes per episodes_store_bulk call (an import's transaction)
INGEST_WORKERS = int(os.environ.get("MEMPROJ_WORKER_CONCURRENCY", "2"))


def bench_ingest(n: int, *, bulk: int = 0) -> dict:
    """Bulk ingest through the worker path, with the two phases overlapped as they
    are in production: a writer stores without a vector (the write commits and
    enqueues a job; here the enqueue goes to an in-process queue, the broker is
    not measured) while worker threads take the queued ids in batches of up to
    256 and run the worker's ``memory_embed_batch`` (two, as `make run` starts two
    worker processes: one embeds while the other writes). The writer stores one
    ``episode_store`` call per memory (``bulk=0``: an agent's tool calls) or
    ``episodes_store_bulk`` calls of ``bulk`` memories (an import,
    ``manage.py ingest_episodes``). Wall time from the first store to the last
    vector, against the raw embedder's batch throughput (no guard, no batcher) on
    the same texts in the same process."""
    import queue
    import threading

    from django.conf import settings
    from django.db import connection

    from memory.embeddings import get_embedder
    from memory.models import FollowUpKind
    from memory.services.followups import followup_register, followup_transport
    from memory.services.memories import episode_store, episodes_store_bulk
    from memory.services.vectors import memory_embed_batch
    from policy.services.tokens import token_authenticate, token_issue

    texts = [f"{synthetic.fresh_episode(9_000_000 + i)} (ingest {uuid.uuid4().hex[:6]})" for i in range(n)]
    embedder = get_embedder()
    raw = getattr(embedder, "inner", embedder)
    raw.embed(texts[:64])  # warm
    t0 = time.perf_counter()
    raw.embed(texts)
    raw_s = time.perf_counter() - t0

    issued = token_issue(tenant_slug=f"bench-ingest-{uuid.uuid4().hex[:8]}", principal_name="bench")
    caller = token_authenticate(issued.token)
    queued: queue.SimpleQueue[str | None] = queue.SimpleQueue()
    # The worker path: each stored memory's embed follow-up goes to this
    # process's batching worker thread instead of the broker.
    original_transport = followup_transport(FollowUpKind.EMBED)

    def enqueue(ids: list[str]) -> None:
        for pk in ids:
            queued.put(pk)

    followup_register(FollowUpKind.EMBED, enqueue)
    previous_mode = settings.MEMPROJ["EMBED_MODE"]
    settings.MEMPROJ["EMBED_MODE"] = "async"
    done: list[int] = []  # per batch; list.append is atomic
    stored_at = [0.0]
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            finished = False
            while not finished:
                first = queued.get()
                batch = [] if first is None else [first]
                finished = first is None
                while not finished and len(batch) < 256:
                    try:
                        item = queued.get(timeout=0.05)  # a short wait lets the batch fill while stores run
                    except Exception:  # queue.Empty
                        break
                    if item is None:
                        finished = True
                    else:
                        batch.append(item)
                if batch:
                    done.append(memory_embed_batch(memory_ids=[uuid.UUID(x) for x in batch]))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    try:
        t0 = time.perf_counter()
        # As many embedding workers as `make run` starts (MEMPROJ_WORKER_CONCURRENCY, 2):
        # one embeds a batch while the other writes its vectors.
        threads = [threading.Thread(target=worker, name=f"bench-ingest-worker-{i}") for i in range(INGEST_WORKERS)]
        for thread in threads:
            thread.start()
        if bulk:
            for start in range(0, n, bulk):
                chunk = texts[start : start + bulk]
                episodes_store_bulk(caller=caller, episodes=[{"content": t, "butler": "general"} for t in chunk])
        else:
            for text in texts:
                episode_store(caller=caller, content=text, butler="general")
        stored_at[0] = time.perf_counter() - t0
        for _ in threads:
            queued.put(None)
        for thread in threads:
            thread.join()
        total_s = time.perf_counter() - t0
    finally:
        settings.MEMPROJ["EMBED_MODE"] = previous_mode
        if original_transport is not None:
            followup_register(FollowUpKind.EMBED, original_transport)
    if errors:
        raise errors[0]
    assert sum(done) == n, f"embedded {sum(done)} of {n}"
    return {
        "n": n,
        "path": f"episodes_store_bulk x{bulk}" if bulk else "episode_store per memory",
        "raw_embedder_per_s": n / raw_s,
        "store_async_per_s": n / stored_at[0],
        "ingest_per_s": n / total_s,
        "backend": getattr(embedder, "backend", "?"),
    }


# --------------------------------------------------------------------------- concurrency


MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-06-18",
}


def _mixed_call(rng, queries: list[str], store_share: float, text_seed: int, k: int) -> tuple[str, dict]:  # type: ignore[no-untyped-def]
    """One call of the mixed workload: (kind, JSON-RPC body), memory_store_episode
    with ``store_share`` probability, else a hybrid memory_search."""
    if rng.random() < store_share:
        kind, name = "store", "memory_store_episode"
        arguments = {"content": synthetic.fresh_episode(text_seed), "butler": "general"}
    else:
        kind, name = "search", "memory_search"
        arguments = {"query": queries[rng.randrange(len(queries))], "mode": "hybrid"}
    return kind, {"jsonrpc": "2.0", "id": k, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


async def _post_call(http, url: str, body: dict, errors: list[str]) -> bool:  # type: ignore[no-untyped-def]
    """POST one tool call; False (and the error noted) unless it answered without an error."""
    try:
        response = await http.post(url, json=body)
        payload = response.json()
        if response.status_code != 200 or "error" in payload or payload["result"].get("isError"):
            errors.append(f"{response.status_code} {str(payload)[:200]}")
            return False
    except Exception as exc:  # noqa: BLE001 - counted as an error of the run
        errors.append(f"{type(exc).__name__}: {exc}")
        return False
    return True


def _step_summary(latencies: dict[str, list[float]], errors: list[str], elapsed: float) -> dict:
    every = latencies["store"] + latencies["search"]
    return {
        "seconds": elapsed,
        "calls": len(every),
        "per_s": len(every) / elapsed,
        "p50": _common.percentile(every, 50),
        "p95": _common.percentile(every, 95),
        "store_p95": _common.percentile(latencies["store"], 95),
        "search_p95": _common.percentile(latencies["search"], 95),
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
                kind, body = _mixed_call(rng, qs, store_share, seed * 10**6 + c * 10**4 + k, k)
                t0 = time.perf_counter()
                if await _post_call(http, url, body, errors):
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
            if await _post_call(http, url, body, errors):
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
            kind, body = _mixed_call(rng, qs, store_share, seed * 10**6 + k, k)
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.create_task(call(kind, body, due)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    return {"rate": rate, "clients": clients, "offered": k, **_step_summary(latencies, errors, elapsed)}


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat(pid: int) -> tuple[int, list[str]] | None:
    """(parent pid, fields after the command name) of /proc/<pid>/stat, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), fields


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat is not None:
                tree.setdefault(stat[0], []).append(int(entry.name))
    return tree


def cpu_seconds(root: int, *, reaped: bool = False) -> float:
    """CPU time (user + system, every thread) of a process and its live descendants;
    with ``reaped``, also of its children that have exited and been waited for
    (PostgreSQL backends of closed connections count in the postmaster's cutime)."""
    tree = _children()
    total = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        stat = _proc_stat(pid)
        if stat is None:
            continue
        fields = stat[1]
        # fields[0] is the state; utime, stime, cutime, cstime are stat fields 14-17.
        total += int(fields[11]) + int(fields[12])
        if reaped and pid == root:
            total += int(fields[13]) + int(fields[14])
        stack.extend(tree.get(pid, []))
    return total / _CLK_TCK


def loop_cpu_seconds(root: int) -> float:
    """CPU time of the main thread of every process in the web tree: uvicorn's
    event loop (the supervisor of several workers adds next to nothing). Tool
    bodies, the embedder and its runtime run in other threads."""
    tree = _children()
    total = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            raw = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
        stack.extend(tree.get(pid, []))
    return total / _CLK_TCK


def postmaster_pid() -> int | None:
    """The PostgreSQL server the bench runs against, when it is the embedded one."""
    from django.db import connection

    if connection.settings_dict.get("HOST", "") and not str(connection.settings_dict["HOST"]).startswith("/"):
        return None
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend = int(cur.fetchone()[0])
    stat = _proc_stat(backend)
    return stat[0] if stat is not None else None


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
        step["web_cpu_ms"] = (cpu_seconds(web_pid) - web0) * 1000.0 / calls if web0 is not None else float("nan")
        step["loop_cpu_ms"] = (
            (loop_cpu_seconds(web_pid) - loop0) * 1000.0 / calls if loop0 is not None else float("nan")
        )
        step["pg_cpu_ms"] = (
            (cpu_seconds(pg_pid, reaped=True) - pg0) * 1000.0 / calls if pg0 is not None else float("nan")
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


def open_loop_sustained(step: dict) -> bool:
    """A rate is sustained when every call offered was answered without an error
    and the p95 (from arrival, so a growing queue shows) is within the goal."""
    return step["errors"] == 0 and step["calls"] == step["offered"] and step["p95"] <= CONCURRENCY_P95_MS


# --------------------------------------------------------------------------- report


def goal_cells(op: str, path: str, p95: float) -> tuple[str, str]:
    """Service layer: the issue's p95 goal (a dialect read: the goal of the core
    operation it shares, DIALECT_GOAL_OF). End to end (MCP over HTTP, or the hook's
    HTTP endpoint): within MCP_MARGIN_MS of that goal (the issue's 'within 15 ms of
    its service-layer figure', read against the goal so an end-to-end row cannot
    pass on a slow service row)."""
    if op in MEMENTO_FLOORS_MS:
        floor = MEMENTO_FLOORS_MS[op]
        return f"< {floor:.0f}", "met" if p95 < floor else "MISSED"
    target = GOALS_MS.get(DIALECT_GOAL_OF.get(op, op))
    if target is None:
        return "-", "-"
    if path != "service":
        target += MCP_MARGIN_MS
    return f"<= {target:.0f}", "met" if p95 <= target else "MISSED"


# The physical work each operation contains, from the same run's baselines: one
# query embedding, one raw tenant-filtered pgvector top-k; end to end also one
# authenticated MCP round trip (tools/list). p50 over that floor = our overhead.
FLOOR_OF = {
    "store_episode": ("embed_one",),
    "store_fact_supersede": ("embed_one",),
    "memento_store": ("embed_one",),
    "search_keyword": ("pgvector_topk",),
    **{
        op: ("embed_one", "pgvector_topk")
        for op in ("search_semantic", "search_hybrid", "recall", "context", *DIALECT_GOAL_OF)
    },
}


def floor_of(op: str, path: str, base: dict) -> tuple[str, float] | None:
    parts = FLOOR_OF.get(op)
    if parts is None:
        return None
    if path != "service" and "mcp_list_tools" in base:
        parts = (*parts, "mcp_list_tools")
    if not all(p in base for p in parts):
        return None
    return " + ".join(parts), sum(_common.summary(base[p])[0] for p in parts)


def machine() -> str:
    """CPU model, cores and memory of this machine (Linux; '?' elsewhere)."""
    model, mem_gb = "?", 0.0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gb = int(line.split()[1]) / 1024 / 1024
                break
    except OSError:
        pass
    return f"{platform.node()}: {os.cpu_count()} cores ({model}), {mem_gb:.0f} GB RAM"


def report(
    args,
    env: dict,
    results: list[dict],
    baselines: dict,
    ingest: list[dict] | None,  # type: ignore[no-untyped-def]
    concurrency: list[dict] | None = None,
    open_loop: list[dict] | None = None,
) -> str:
    out = []
    load1, load5, load15 = os.getloadavg()
    out.append(
        f"memproj perf - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - {machine()} - "
        f"Python {platform.python_version()} - {env['server']} - embedder {env.get('backend', '?')}"
    )
    out.append(f"command: {env.get('command', '?')}")
    out.append(
        f"load average at start {env.get('load', '?')}, at the end {load1:.2f} {load5:.2f} {load15:.2f} "
        "(a shared machine: absolute figures are from a loaded machine; the ratios to the same-run baselines "
        "are the comparable part)"
    )
    out.append(
        f"table: {env['rows']} memories in {env['tenants']} tenants (measured tenants: "
        f"{', '.join(str(n) for n in args.size_list)}; {args.other_tenants} others of {args.other_size}); "
        f"repeats: service {args.repeat}, MCP {args.mcp_repeat}; sizes: {env.get('sizes', {})}"
    )
    if any(n > BASE_VECTORS for n in args.size_list):
        out.append(
            f"above {BASE_VECTORS} memories nothing new is embedded: memory i reuses the cached vector of text "
            f"i mod {BASE_VECTORS} plus Gaussian noise (sigma {PERTURB_SIGMA} per dimension, re-normalised, "
            "cosine ~0.98) and carries that text with a varied clause (bench/synthetic.py scaled_spec)"
        )
    timings = env.get("load_timings") or {}
    if timings:
        out.append(
            "load this run: "
            + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in timings.items())
        )
    out.append("")
    rows = []
    svc_p95 = {}
    for r in results:
        p50, p95, mx = _common.summary(r["samples"])
        goal, met = goal_cells(r["op"], r["path"], p95)
        extra = "-"
        if r["path"] == "service":
            svc_p95[(r["size"], r["op"])] = p95
        elif (r["size"], r["op"]) in svc_p95:
            extra = f"{p95 - svc_p95[(r['size'], r['op'])]:+.1f}"
        floor = floor_of(r["op"], r["path"], baselines.get(r["size"], {}))
        found = r.get("found")
        rows.append(
            [
                r["size"],
                r["path"],
                r["op"],
                len(r["samples"]),
                "-" if found is None else found,
                p50,
                p95,
                mx,
                goal,
                met,
                extra,
                f"{p50 / floor[1]:.2f}x" if floor else "-",
                f"{floor[0]} = {floor[1]:.1f}" if floor else "-",
            ]
        )
    out.append("Latency (ms); found = memories the first call returned; x_floor = p50 / the same-run floor")
    out.append(
        _common.table(
            [
                "size",
                "path",
                "op",
                "n",
                "found",
                "p50_ms",
                "p95_ms",
                "max_ms",
                "goal_p95",
                "met",
                "e2e_minus_service_p95",
                "x_floor",
                "floor_p50_ms",
            ],
            rows,
        )
    )
    out.append("")
    brows = []
    for size, base in baselines.items():
        for name, samples in base.items():
            if name in ("hnsw_recall_at_20", "ann", "explain"):
                continue
            p50, p95, mx = _common.summary(samples)
            brows.append([size, name, len(samples), p50, p95, mx])
    out.append("Baselines measured in the same run (ms)")
    out.append(_common.table(["size", "baseline", "n", "p50_ms", "p95_ms", "max_ms"], brows))
    out.append("")
    arows = []
    for size, base in baselines.items():
        for a in base.get("ann", []):
            arows.append([size, a["ef_search"], a["p50"], f"{a['recall']:.3f}", f"{a['dist_recall']:.3f}"])
    if arows:
        out.append(
            "Raw tenant-filtered top-20 (iterative HNSW scan) by ef_search: p50, id overlap with the exact top-20, "
            "and the share no farther than the exact 20th (ties) (8 queries; the service uses ef_search 100)"
        )
        out.append(_common.table(["size", "ef_search", "p50_ms", "recall_at_20", "within_exact_20th"], arows))
        out.append("")
    erows = []
    for size, base in baselines.items():
        for e in base.get("explain", []):
            if "exec_ms" not in e:
                continue
            erows.append(
                [
                    size,
                    e["mode"],
                    e["statements"],
                    e["slowest_ms"],
                    e["plan_ms"],
                    e["exec_ms"],
                    e["hit"],
                    e["read"],
                    e["scans"],
                    e["file"],
                ]
            )
    if erows:
        out.append(
            "EXPLAIN (ANALYZE, BUFFERS) of the retrieval statement of one search (shared buffers: hit = in "
            "PostgreSQL's cache, read = from the OS; plans in var/bench/)"
        )
        out.append(
            _common.table(
                ["size", "mode", "statements", "slowest_ms", "plan_ms", "exec_ms", "hit", "read", "scans", "plan"],
                erows,
            )
        )
    if ingest:
        out.append("")
        out.append(f"Bulk ingest, store and embed overlapped (memories/s; embedder {ingest[0]['backend']})")
        ingest_rows = []
        for run in ingest:
            ratio = run["ingest_per_s"] / run["raw_embedder_per_s"]
            ingest_rows.append(
                [
                    run["n"],
                    run["path"],
                    run["raw_embedder_per_s"],
                    run["store_async_per_s"],
                    run["ingest_per_s"],
                    f"{ratio:.0%}",
                    f">= {INGEST_GOAL:.0%}",
                    "met" if ratio >= INGEST_GOAL else "MISSED",
                ]
            )
        out.append(
            _common.table(
                ["n", "store_path", "raw_embedder_per_s", "store_async_per_s", "ingest_per_s", "ratio", "goal", "met"],
                ingest_rows,
            )
        )
    if concurrency:
        out.append("")
        out.append(
            f"Concurrency: HTTP clients on a mixed workload ({args.store_share:.0%} memory_store_episode, "
            f"the rest hybrid memory_search), {args.conc_seconds:.0f} s per step, "
            f"{env.get('web_workers', 1)} web worker process(es)"
        )
        crow = []
        for c in concurrency:
            crow.append(
                [
                    c["clients"],
                    c["calls"],
                    c["per_s"],
                    c["p50"],
                    c["p95"],
                    c["store_p95"],
                    c["search_p95"],
                    c["errors"],
                    c.get("web_cpu_ms", float("nan")),
                    c.get("loop_cpu_ms", float("nan")),
                    c.get("pg_cpu_ms", float("nan")),
                    c.get("client_cpu_ms", float("nan")),
                ]
            )
        out.append(
            _common.table(
                [
                    "clients",
                    "calls",
                    "calls_per_s",
                    "p50_ms",
                    "p95_ms",
                    "store_p95_ms",
                    "search_p95_ms",
                    "errors",
                    "web_cpu_ms_per_call",
                    "of_which_loop_ms",
                    "pg_cpu_ms_per_call",
                    "client_cpu_ms_per_call",
                ],
                crow,
            )
        )
        out.append(
            "cpu_ms_per_call: user+system CPU per answered call of the web process(es) (of_which_loop: their "
            "main threads, the event loop; the rest is tool threads, the embedder and its runtime), of the "
            "PostgreSQL server (its exited backends included) and of this bench client, over the step"
        )
        top = max(concurrency, key=lambda c: c["clients"])
        goal_rate = CONCURRENCY_GOAL_X * CONCURRENCY_BEFORE_PER_S
        met = top["per_s"] >= goal_rate and top["p95"] <= CONCURRENCY_P95_MS and top["errors"] == 0
        out.append(
            f"goal at {top['clients']} clients: >= {goal_rate:.0f} calls/s (3x the 24/s before) at p95 <= "
            f"{CONCURRENCY_P95_MS:.0f} ms, 0 errors: {top['per_s']:.1f} calls/s, p95 {top['p95']:.0f} ms, "
            f"{top['errors']} errors -> {'met' if met else 'MISSED'}"
        )
        if top["first_error"]:
            out.append(f"first error: {top['first_error']}")
    if open_loop:
        out.append("")
        out.append(
            f"Open loop: calls arriving at a fixed rate (Poisson) over {open_loop[0]['clients']} HTTP connections, "
            f"the same workload, {args.conc_seconds:.0f} s per rate; latency from each call's arrival, its wait "
            "for a free connection included"
        )
        orow = [
            [
                o["rate"],
                o["offered"],
                o["calls"],
                o["per_s"],
                o["p50"],
                o["p95"],
                o["store_p95"],
                o["search_p95"],
                o["errors"],
                "yes" if open_loop_sustained(o) else "no",
            ]
            for o in open_loop
        ]
        out.append(
            _common.table(
                [
                    "offered_per_s",
                    "calls_offered",
                    "answered",
                    "answered_per_s",
                    "p50_ms",
                    "p95_ms",
                    "store_p95_ms",
                    "search_p95_ms",
                    "errors",
                    f"sustained_at_p95<={CONCURRENCY_P95_MS:.0f}",
                ],
                orow,
            )
        )
        goal_rate = CONCURRENCY_GOAL_X * CONCURRENCY_BEFORE_PER_S
        sustained = [o["rate"] for o in open_loop if open_loop_sustained(o)]
        best = max(sustained, default=0.0)
        out.append(
            f"throughput at p95 <= {CONCURRENCY_P95_MS:.0f} ms over {open_loop[0]['clients']} connections: the highest "
            f"rate sustained, {best:g} calls/s (goal >= {goal_rate:.0f}) -> {'met' if best >= goal_rate else 'MISSED'}"
        )
    return "\n".join(out)


def bench_embedders(repeat: int) -> str:
    """The two local backends of the same model, raw (no guard, no batcher): one
    query, a batch of 64 texts, and how far apart their vectors are."""
    import numpy as np

    from memory.embeddings import LocalEmbedder

    texts = [synthetic.memory_spec(i)["content"] for i in range(64)]
    queries = synthetic.queries(repeat + 4, seed=5)
    rows, vectors = [], {}
    for backend in ("onnx", "torch"):
        embedder = LocalEmbedder(backend=backend)
        t0 = time.perf_counter()
        embedder.embed(["load"])
        load_s = time.perf_counter() - t0
        qi = iter(range(10**9))
        one = _common.timed(lambda e=embedder, it=qi: e.embed([queries[next(it) % len(queries)]]), repeat)
        batch = _common.timed(lambda e=embedder: e.embed(texts), 5, warmup=1)
        vectors[backend] = np.asarray(embedder.embed(texts + queries))
        p50, p95, _ = _common.summary(one)
        rows.append([embedder.backend, load_s, p50, p95, 64_000.0 / statistics.median(batch)])
    a, b = vectors["onnx"], vectors["torch"]
    cosines = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    out = [
        f"Embedder backends, all-MiniLM-L6-v2 from the packaged weights - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - "
        f"{os.cpu_count()} cores - load average {os.getloadavg()[0]:.1f}",
        _common.table(["backend", "load_s", "one_query_p50_ms", "one_query_p95_ms", "batch64_texts_per_s"], rows),
        f"cosine(ONNX, PyTorch) over {len(cosines)} texts: min {cosines.min():.6f}, mean {cosines.mean():.6f}",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.embedder:
        _common.setup_django()
        print(bench_embedders(args.repeat))
        return 0
    db_url = _common.setup_django(db_name=args.database)
    from django.db import connection

    from memory.embeddings import embed_one

    with connection.cursor() as cur:
        cur.execute("SELECT version(), (SELECT extversion FROM pg_extension WHERE extname = 'vector')")
        version, vector_version = cur.fetchone()
    server = f"{version.split(' on ')[0]} + pgvector {vector_version}"
    if not args.prepare_only:
        embed_one("warm up")  # load the model before anything is timed
    from django.conf import settings

    from memory.embeddings import get_embedder

    env = ensure_tenants(args)
    if args.prepare_only:
        print(f"prepared: {env['rows']} rows in {env['tenants']} tenants; {env['load_timings']}; {env['sizes']}")
        return 0
    env["command"] = " ".join([Path(sys.executable).name, *sys.argv])
    env["server"] = server
    env["backend"] = get_embedder().backend
    env["load"] = f"{os.getloadavg()[0]:.1f}"
    env["web_workers"] = args.web_workers or settings.MEMPROJ_WEB_WORKERS
    concurrency: list[dict] = []
    open_loop: list[dict] = []
    results: list[dict] = []
    baselines: dict[int, dict] = {}
    proc = None
    try:
        if not args.skip_mcp:
            proc, url = start_server(db_url, env["web_workers"])
            # The server loads its model in a background thread at start-up; let that
            # finish (one real search waits for it) so it does not steal CPU from what is timed.
            first_caller, first_token = env["callers"][f"{args.prefix}-{args.size_list[0]}"]
            bench_mcp(url, first_token, args.size_list[0], first_caller, 1)
        for size in args.size_list:
            caller, token = env["callers"][f"{args.prefix}-{size}"]
            print(f"  measuring service layer at {size} ...", file=sys.stderr, flush=True)
            rows, base = bench_service(size, caller, args.repeat)
            results += rows
            baselines[size] = base
            if proc is not None:
                print(f"  measuring MCP over HTTP at {size} ...", file=sys.stderr, flush=True)
                rows, ping = bench_mcp(url, token, size, caller, args.mcp_repeat)
                results += rows
                baselines[size]["mcp_list_tools"] = ping
        if proc is not None and args.conc_seconds > 0:
            caller, token = env["callers"][f"{args.prefix}-{args.size_list[-1]}"]
            concurrency = bench_concurrency(
                url, token, args.client_list, args.conc_seconds, args.store_share, web_pid=proc.pid
            )
            open_loop = bench_open_loop(
                url, token, args.open_rate_list, max(args.client_list), args.conc_seconds, args.store_share
            )
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    print("  measuring bulk ingest ...", file=sys.stderr, flush=True)
    ingest = (
        [bench_ingest(args.ingest), bench_ingest(args.ingest, bulk=min(INGEST_BULK_BATCH, args.ingest))]
        if args.ingest > 0
        else None
    )
    text = report(args, env, results, baselines, ingest, concurrency, open_loop)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "results": results,
                    "baselines": {str(k): v for k, v in baselines.items()},
                    "ingest": ingest,
                    "concurrency": concurrency,
                    "open_loop": open_loop,
                    "env": {k: v for k, v in env.items() if k != "callers"},
                },
                default=str,
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
