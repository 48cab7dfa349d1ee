"""Issue 13: the plan and timing of the retrieval statement of filtered reads
(langmem: facts in a namespace; memento: facts; unfiltered hybrid) against an
existing bench database, read only (EXPLAIN ANALYZE and a small timing loop; no
migration, no writes). The statement is the service's own (retrieval.channel_statement).

    .venv/bin/python bench/plan_filters.py DB VARIANT READS [--socket DIR]

VARIANT "before" rewrites the namespace predicate back to the slice alone and,
with EXTRA_SET="SET LOCAL work_mem = '4MB'", restores the old settings; any
other name runs the current code. EXPLAIN_IDX picks the explained query, NQ
the number of queries, NOVEC=1 the keyword channel alone. Plans go to
/tmp/plan/explain-DB-READ-VARIANT.txt, returned rows to /tmp/plan/rows-*.json."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types
from datetime import UTC, datetime
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
OUT = Path("/tmp/plan")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("variant")
    p.add_argument("reads", help="comma-separated: langmem, memento, hybrid, rare_ns, ns_deep, collection")
    p.add_argument("--socket", default=str(BASE_DIR / "var" / "pgdata"), help="the embedded server's socket directory")
    args = p.parse_args()
    os.environ["DATABASE_URL"] = f"postgres://memproj_app@/{args.db}?host={args.socket}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(BASE_DIR))
    import django

    django.setup()
    from django.db import connection, transaction

    from memory import retrieval
    from memory.embeddings import embed_query
    from memory.scoring import RetrievalParams
    from tests.harness.generators import synthetic

    # The bench tenants' policy shows these classes to answer:task reads; no Caller needed.
    retrieval.boundary_where = lambda caller, tags: (  # type: ignore[assignment]
        "m.boundary_class = ANY(%(boundary_classes)s)",
        {"boundary_classes": ["internal", "public"]},
    )
    with connection.cursor() as c:
        c.execute("SELECT tenant_id FROM memory_tenantstat ORDER BY docs DESC LIMIT 1")
        tenant = c.fetchone()[0]
    queries = synthetic.queries(int(os.environ.get("NQ", "8")), seed=100000)
    vectors = [embed_query(q) for q in queries]
    caller = types.SimpleNamespace(tenant_id=tenant)
    now = datetime.now(UTC)
    flt = retrieval.RetrievalFilter
    filters = {
        "langmem": flt(kinds=["fact"], now=now, namespace_prefix=("user", "bench")),
        "memento": flt(kinds=["fact"], now=now),
        "hybrid": flt(kinds=["episode", "fact", "procedure", "preference", "document"], now=now),
        "rare_ns": flt(kinds=["fact"], now=now, namespace_prefix=("user", "nobody")),
        "ns_deep": flt(kinds=["fact"], now=now, namespace_prefix=("user",)),
        "collection": flt(kinds=["fact", "episode"], now=now, collections=["memory_bank"]),
    }
    params = RetrievalParams(k_vec=96, k_txt=48)
    OUT.mkdir(exist_ok=True)
    explain_idx = int(os.environ.get("EXPLAIN_IDX", "0"))
    for name in args.reads.split(","):
        timings, rows_by_query = [], {}
        for i, (query, vector) in enumerate(zip(queries, vectors, strict=True)):
            statement = retrieval.channel_statement(
                caller=caller,  # type: ignore[arg-type]
                flt=filters[name],
                query_text=query,
                query_vector=None if os.environ.get("NOVEC") else vector,
                params=params,
            )
            assert statement is not None
            sql, sql_params, run_vec = statement
            if args.variant == "before":
                sql = sql.replace(retrieval._NS_PREFIX_ESTIMABLE, retrieval._NS_PREFIX_SLICE)
            with transaction.atomic(), connection.cursor() as c:
                retrieval._statement_settings(c, run_vec)
                for extra in os.environ.get("EXTRA_SET", "").split(";"):
                    if extra.strip():
                        c.execute(extra)
                if i == explain_idx:
                    c.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, sql_params)
                    text = "\n".join(r[0] for r in c.fetchall())
                    (OUT / f"explain-{args.db}-{name}-{args.variant}.txt").write_text(sql + "\n\n" + text)
                    scan = [ln.strip() for ln in text.splitlines() if "on memory_memory m " in ln and "Scan" in ln]
                    total = [ln for ln in text.splitlines() if "Execution Time" in ln]
                    print(name, args.variant, scan[0][:90] if scan else "?", total)
                samples = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    c.execute(sql, sql_params)
                    rows = c.fetchall()
                    samples.append((time.perf_counter() - t0) * 1000)
            timings.append(sorted(samples)[1])
            rows_by_query[i] = sorted((r[0], str(r[1]), float(r[2])) for r in rows)
        print(f"  {name} {args.variant}: median-of-3 ms per query:", [round(t, 1) for t in timings])
        (OUT / f"rows-{args.db}-{name}-{args.variant}.json").write_text(json.dumps(rows_by_query))


if __name__ == "__main__":
    main()
