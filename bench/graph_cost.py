"""What one HNSW graph costs to grow and how well it finds, per element type and
build setting (issue 13: graph insertion is most of the worker's vector UPDATE).

Copies the bench database's embeddings (``bench/perf.py --prepare-only`` makes
them) into scratch tables of ``vector(384)`` and ``halfvec(384)``, builds each
graph, then inserts held-out vectors in statements of 256 rows (rolled back) and
probes held-out queries against the exact top 10. Prints one table.

    .venv/bin/python bench/graph_cost.py [--rows 160000] [--ef-constructions 64,32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _common import setup_django, table

SCHEMA = "graph_cost"
INSERT_BATCH = 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=160_000, help="graph size (the bench database's embeddings)")
    parser.add_argument("--ef-constructions", default="64,32")
    parser.add_argument("--types", default="vector,halfvec")
    parser.add_argument("--ms", default="16", help="HNSW m values (neighbours per node)")
    parser.add_argument("--inserts", type=int, default=3, help="rolled-back statements of 256 rows per graph")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    setup_django()
    import psycopg

    held_out = INSERT_BATCH * args.inserts + args.queries
    rows_out = []
    with psycopg.connect(os.environ.get("DATABASE_OWNER_URL") or os.environ["DATABASE_URL"], autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(
            f"CREATE TABLE {SCHEMA}.source AS SELECT row_number() OVER () AS n, embedding AS v "
            "FROM (SELECT embedding FROM memory_memory WHERE embedding IS NOT NULL LIMIT %s) s",
            [args.rows + held_out],
        )
        counted = conn.execute(f"SELECT count(*) FROM {SCHEMA}.source").fetchone()
        assert counted is not None
        total = counted[0]
        base = total - held_out
        if total < args.rows + held_out:
            conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
            raise SystemExit(
                f"the bench database holds {total} embeddings, {args.rows + held_out} are needed (--rows plus "
                f"{held_out} held out): run `bench/perf.py --prepare-only` first, or lower --rows"
            )
        queries_from = base + INSERT_BATCH * args.inserts
        conn.execute("SET maintenance_work_mem = '2GB'")
        queries: dict[int, str] = dict(
            conn.execute(f"SELECT n, v::text FROM {SCHEMA}.source WHERE n > %s", [queries_from]).fetchall()
        )
        exact = {
            n: [
                r[0]
                for r in conn.execute(
                    f"SELECT n FROM {SCHEMA}.source WHERE n <= %s ORDER BY v <=> %s::vector LIMIT 10", [base, q]
                )
            ]
            for n, q in queries.items()
        }
        for kind, m, efc in (
            (kind, int(m), int(efc))
            for kind in args.types.split(",")
            for m in args.ms.split(",")
            for efc in args.ef_constructions.split(",")
        ):
            conn.execute(f"DROP TABLE IF EXISTS {SCHEMA}.g")
            conn.execute(
                f"CREATE TABLE {SCHEMA}.g AS SELECT n, v::{kind}(384) AS v FROM {SCHEMA}.source WHERE n <= %s",
                [base],
            )
            start = time.perf_counter()
            conn.execute(
                f"CREATE INDEX g_hnsw ON {SCHEMA}.g USING hnsw (v {kind}_cosine_ops) "
                f"WITH (m = {m}, ef_construction = {efc})"
            )
            build_s = time.perf_counter() - start
            size = conn.execute("SELECT pg_relation_size(%s) / 1048576.0::float8", [f"{SCHEMA}.g_hnsw"]).fetchone()
            assert size is not None
            graph_mb = size[0]
            per_row = []
            for i in range(args.inserts):
                low = base + i * INSERT_BATCH
                with conn.transaction(force_rollback=True):
                    start = time.perf_counter()
                    conn.execute(
                        f"INSERT INTO {SCHEMA}.g SELECT n, v::{kind}(384) FROM {SCHEMA}.source "
                        "WHERE n > %s AND n <= %s",
                        [low, low + INSERT_BATCH],
                    )
                    per_row.append((time.perf_counter() - start) * 1000 / INSERT_BATCH)
            recalls = {}
            probe_ms = []
            for ef in (40, 100):
                found = []
                with conn.transaction():
                    conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
                    for n, truth in exact.items():
                        start = time.perf_counter()
                        got = [
                            r[0]
                            for r in conn.execute(
                                f"SELECT n FROM {SCHEMA}.g ORDER BY v <=> %s::{kind}(384) LIMIT 10", [queries[n]]
                            )
                        ]
                        if ef == 100:
                            probe_ms.append((time.perf_counter() - start) * 1000)
                        found.append(len(set(got) & set(truth)) / 10)
                recalls[ef] = statistics.mean(found)
            rows_out.append(
                [
                    kind,
                    m,
                    efc,
                    base,
                    build_s,
                    graph_mb,
                    statistics.median(per_row),
                    recalls[40],
                    recalls[100],
                    statistics.median(probe_ms),
                ]
            )
            print(rows_out[-1], flush=True)
        conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    print(
        table(
            [
                "type",
                "m",
                "ef_construction",
                "rows",
                "build s",
                "graph MB",
                "insert ms/row (median)",
                "recall@10 ef_search 40",
                "recall@10 ef_search 100",
                "probe ms (median, ef_search 100)",
            ],
            rows_out,
        )
    )


if __name__ == "__main__":
    main()
