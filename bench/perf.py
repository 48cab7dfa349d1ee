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

Runs against its own database (see tests/harness/stack.py), never the dev database.
The embedded synthetic dataset is cached under var/bench/ between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.harness.generators.dataset import ensure_tenants  # noqa: E402
from tests.harness.load.concurrency import bench_concurrency, bench_open_loop  # noqa: E402
from tests.harness.measure.embedders import bench_embedders, bench_onnx_threads  # noqa: E402
from tests.harness.measure.ingest import INGEST_BULK_BATCH, bench_ingest  # noqa: E402
from tests.harness.measure.mcp_http import bench_mcp  # noqa: E402
from tests.harness.measure.service import bench_service  # noqa: E402
from tests.harness.reports.perf import report  # noqa: E402
from tests.harness.stack import BENCH_DB_NAME, setup_bench_django, start_web  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10000,100000", help="memories in the measured tenant, comma separated")
    p.add_argument("--other-tenants", type=int, default=3, help="extra tenants present in the table")
    p.add_argument("--other-size", type=int, default=10000, help="memories in each extra tenant")
    p.add_argument("--repeat", type=int, default=60, help="timed calls per service-layer operation")
    p.add_argument("--mcp-repeat", type=int, default=40, help="timed calls per MCP operation")
    p.add_argument("--ingest", type=int, default=2000, help="memories in the bulk-ingest measurement")
    p.add_argument(
        "--ingest-only",
        action="store_true",
        help="only the bulk-ingest measurement (both paths, --ingest memories each) into the table as the "
        "database holds it: no tenant load, no other step",
    )
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
        help="only compare the embedder backends (ONNX Runtime vs PyTorch, same weights; ONNX passes on one "
        "thread vs every core) and exit",
    )
    p.add_argument("--tiny", action="store_true", help="smoke-test size (a few hundred memories, few repeats)")
    p.add_argument(
        "--database",
        default=BENCH_DB_NAME,
        help="bench database on the embedded server (e.g. a separate one for the 1M tenant)",
    )
    p.add_argument("--prepare-only", action="store_true", help="load, index and analyse, then exit (run under nice)")
    p.add_argument(
        "--maintenance-work-mem",
        default="",
        help="for the index builds after a bulk load (default: 4GB above 500k rows loaded, else 1GB)",
    )
    p.add_argument(
        "--ab",
        default="",
        metavar="A_DIR,B_DIR",
        help="A/B only: serve two copies of the code (e.g. a checkout before a change and one after) against the "
        "same database and measure each --ab-kinds call's CPU per answered call, kind by kind, the two servers in "
        "turn (--ab-rounds rounds of --conc-seconds at the largest --clients), then exit",
    )
    p.add_argument(
        "--ab-kinds",
        default="store_episode,memory_search,memento_search_memories,langmem_search_memory,"
        "roampal_get_context_insights,pce_activate,mixed",
    )
    p.add_argument("--ab-rounds", type=int, default=3)
    p.add_argument(
        "--ab-database-b",
        default="",
        metavar="NAME",
        help="A/B only: B serves this database instead of --database (a copy of it laid out otherwise, e.g. "
        "rewritten by VACUUM FULL after a storage change); A and B may then be the same code",
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.embedder:
        setup_bench_django()
        print(bench_embedders(args.repeat))
        print(bench_onnx_threads(args.repeat))
        return 0
    db_url = setup_bench_django(db_name=args.database)
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

    if args.ingest_only:
        return ingest_main(args, server)
    env: dict[str, Any] = ensure_tenants(args)
    if args.ab:
        return ab_main(args, env, db_url)
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
            proc, url = start_web(db_url, env["web_workers"])
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


def ingest_main(args: argparse.Namespace, server: str) -> int:
    """--ingest-only: the two ingest paths and nothing else."""
    from memory.models import Memory
    from tests.harness.reports.tables import markdown_table

    rows = Memory.objects.count()
    runs = [bench_ingest(args.ingest), bench_ingest(args.ingest, bulk=min(INGEST_BULK_BATCH, args.ingest))]
    print(f"{server}; {rows} memories in the table before; load average {os.getloadavg()[0]:.1f} at the end")
    print(
        markdown_table(
            ["n", "store_path", "raw_embedder_per_s", "store_per_s", "ingest_per_s", "ratio", "cpu_ratio"],
            [
                [
                    r["n"],
                    r["path"],
                    r["raw_embedder_per_s"],
                    r["store_async_per_s"],
                    r["ingest_per_s"],
                    f"{r['ingest_per_s'] / r['raw_embedder_per_s']:.0%}",
                    f"{r['cpu_ratio']:.0%}",
                ]
                for r in runs
            ],
        )
    )
    return 0


def _with_database(db_url: str, name: str) -> str:
    """``db_url`` (postgres://...@host/<database>?...) naming another database."""
    head, _, tail = db_url.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{tail}" if tail else "")


def _copy_token(token: str, db_url: str) -> None:
    """The run's token, issued in --database, also valid in the database at
    ``db_url`` (a copy made before the token was issued: same tenants and principals)."""
    import psycopg

    from policy.models import ApiToken
    from policy.services.tokens import hash_token

    row = ApiToken.objects.filter(token_hash=hash_token(token)).values().get()
    column_of = {f.attname: f.column for f in ApiToken._meta.concrete_fields}
    columns = [column_of[name] for name in row]
    with psycopg.connect(db_url) as other:
        other.execute(
            f"INSERT INTO {ApiToken._meta.db_table} ({', '.join(columns)}) "  # noqa: S608 - the model's own names
            f"VALUES ({', '.join(['%s'] * len(columns))}) ON CONFLICT DO NOTHING",
            list(row.values()),
        )


def ab_main(args: argparse.Namespace, env: dict, db_url: str) -> int:
    """Two copies of the code served side by side, measured in turn (tests/harness/load/percall.py)."""
    from tests.harness.load.percall import AB_HEADERS, Server, ab_table, interleaved, summarise
    from tests.harness.reports.tables import markdown_table

    dirs = [Path(d).resolve() for d in args.ab.split(",")]
    if len(dirs) != 2 or not all((d / "memproj" / "asgi.py").exists() for d in dirs):
        raise SystemExit("--ab takes two directories holding memproj's code: A_DIR,B_DIR")
    _caller, token = env["callers"][f"{args.prefix}-{args.size_list[-1]}"]
    databases = (args.database, args.ab_database_b or args.database)
    if databases[1] != databases[0]:
        _copy_token(token, _with_database(db_url, databases[1]))
    procs, servers = [], []
    try:
        for label, code_dir, database in zip(("A", "B"), dirs, databases, strict=True):
            proc, url = start_web(_with_database(db_url, database), 1, code_dir=code_dir)
            procs.append(proc)
            servers.append(Server(label, proc.pid, url.removesuffix("/mcp/memory"), database))
        kinds = [k for k in args.ab_kinds.split(",") if k]
        steps = interleaved(
            servers,
            token,
            kinds,
            clients=max(args.client_list),
            seconds=args.conc_seconds,
            rounds=args.ab_rounds,
            database=args.database,
            progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True),
        )
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(
        f"A = {dirs[0]} on {databases[0]}, B = {dirs[1]} on {databases[1]}; "
        f"{args.size_list[-1]} memories in the tenant; "
        f"{max(args.client_list)} closed-loop clients, {args.conc_seconds:g} s per step, {args.ab_rounds} rounds, "
        f"A and B in turn; medians over rounds; load average {os.getloadavg()[0]:.1f} at the end\n"
    )
    print(markdown_table(AB_HEADERS, ab_table(summarise(steps), ("A", "B"))))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(steps, default=str, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
