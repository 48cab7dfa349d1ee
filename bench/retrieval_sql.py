"""What the keyword channel's SQL costs in a large tenant: EXPLAIN ANALYZE and
timings of the keyword channel (BM25 and cover density, with and without the
candidate bound) on a tenant of N synthetic memories (tests/harness/generators/synthetic.py).

    .venv/bin/python bench/retrieval_sql.py --n 100000          # builds the tenant once, then measures
    .venv/bin/python bench/retrieval_sql.py --n 100000 --explain # also prints one EXPLAIN ANALYZE per scorer

The tenant lives in its own database (memproj_bench_sql) and carries no vectors:
the vector channel's cost is bench/perf.py's (the speed benchmark). The
synthetic texts draw on a few hundred words, so every query term is frequent:
the worst case for an any-word keyword query, which is what the bound is for.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402 - puts the repository on the path

from tests.harness.generators import synthetic  # noqa: E402


def build(caller, n: int) -> None:  # type: ignore[no-untyped-def]
    from memory import validation
    from memory.models import Memory

    have = Memory.objects.filter(tenant_id=caller.tenant_id).count()
    if have == n:
        return
    Memory.objects.filter(tenant_id=caller.tenant_id).delete()
    t0 = time.perf_counter()
    batch = []
    for i in range(n):
        spec = synthetic.memory_spec(i)
        batch.append(
            Memory(
                tenant_id=caller.tenant_id,
                kind=spec["kind"],
                content=spec["content"],
                content_hash=validation.content_hash(spec["content"]),
                butler=spec["butler"],
                subject=spec.get("subject", ""),
                predicate=spec.get("predicate", ""),
                maturity=spec.get("maturity", ""),
                importance=spec["importance"],
            )
        )
        if len(batch) == 5000:
            Memory.objects.bulk_create(batch)
            batch = []
            print(f"  {i + 1}/{n} rows ({time.perf_counter() - t0:.0f}s)", file=sys.stderr, flush=True)
    if batch:
        Memory.objects.bulk_create(batch)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE memory_memory")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=40)
    p.add_argument("--explain", action="store_true")
    args = p.parse_args(argv)
    _common.setup_django(db_name="memproj_bench_sql")
    from django.db import connection
    from django.utils import timezone

    from memory import retrieval
    from memory.retrieval import RetrievalFilter, channel_hits
    from memory.scoring import RetrievalParams
    from policy.services.tokens import token_authenticate, token_issue

    caller = token_authenticate(token_issue(tenant_slug=f"bench-sql-{args.n}", principal_name="bench").token)
    assert caller is not None
    build(caller, args.n)
    queries = synthetic.queries(args.queries)
    flt = RetrievalFilter(kinds=["episode", "fact", "rule"], now=timezone.now())
    variants = {
        "bm25, budget 1000 (default)": RetrievalParams(keyword_scorer="bm25", txt_candidates=1000),
        "bm25, budget 4000": RetrievalParams(keyword_scorer="bm25", txt_candidates=4000),
        "bm25, budget 300": RetrievalParams(keyword_scorer="bm25", txt_candidates=300),
        "bm25, unbounded": RetrievalParams(keyword_scorer="bm25", txt_candidates=100_000),
        "cover density, budget 1000": RetrievalParams(keyword_scorer="cover_density", txt_candidates=1000),
        "cover density, unbounded": RetrievalParams(keyword_scorer="cover_density", txt_candidates=100_000),
    }
    rows = []
    for name, params in variants.items():

        def run(q: str, params: RetrievalParams = params) -> None:
            channel_hits(caller=caller, flt=flt, query_text=q, query_vector=None, params=params)

        for q in queries[:3]:
            run(q)  # warm the cache
        samples = []
        for q in queries:
            start = time.perf_counter()
            run(q)
            samples.append((time.perf_counter() - start) * 1000)
        p50, p95, worst = _common.summary(samples)
        rows.append([name, args.n, len(samples), p50, p95, worst])
    print(f"keyword channel at {args.n} memories in one tenant (service layer, ms)")
    print(_common.table(["variant", "tenant size", "n", "p50_ms", "p95_ms", "max_ms"], rows))
    if args.explain:
        name = "bm25, budget 1000 (default)"
        statement = retrieval.channel_statement(
            caller=caller, flt=flt, query_text=queries[0], query_vector=None, params=variants[name]
        )
        assert statement is not None
        sql, bound, _ = statement
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, bound)
            plan = "\n".join(r[0] for r in cursor.fetchall())
        print(f"\nEXPLAIN ANALYZE, {name}, query {queries[0]!r}\n{plan}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
