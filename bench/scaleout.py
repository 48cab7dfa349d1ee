"""Scale-out: N web processes and M Celery workers against one PostgreSQL and
one Redis, started as ordinary servers on loopback TCP ports, behind Debian's
haproxy; the closed-loop mixed workload (30% memory_store_episode, 70% hybrid
memory_search) through the load balancer, with the CPU each tier used.

    scripts/install_loadbalancer.sh                     # haproxy, once
    .venv/bin/python bench/scaleout.py                  # N = 1, 2, 4 web processes, 1 worker, 32 clients
    .venv/bin/python bench/scaleout.py --webs 1,2 --seconds 10 --size 2000
    .venv/bin/python bench/scaleout.py --tiny           # smoke test

All web processes are started once; each step points haproxy at the first N of
them (an idle web process costs no CPU), and the steps run in the order given
and then back (1, 2, 4, 4, 2, 1 with --rounds 2), so that the machine's load
drifting during the run hits every N alike; the table gives the median per N.
The dataset is bench/perf.py's (synthetic memories, the measured tenant beside
others), loaded into the fresh database.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.harness.load.percall import CALL_KINDS, _closed_loop  # noqa: E402
from tests.harness.reports.tables import markdown_table  # noqa: E402
from tests.harness.scaleout import Deployment  # noqa: E402

TIERS = ("web", "postgres", "workers", "redis", "haproxy")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--webs", default="1,2,4", help="web processes per step, comma separated")
    p.add_argument("--workers", type=int, default=1, help="Celery worker processes (concurrency 1 each)")
    p.add_argument("--clients", type=int, default=32, help="closed-loop HTTP clients")
    p.add_argument("--seconds", type=float, default=15.0, help="seconds per step")
    p.add_argument("--rounds", type=int, default=2, help="passes over --webs, every other one reversed")
    p.add_argument("--size", type=int, default=10000, help="memories in the measured tenant")
    p.add_argument("--other-tenants", type=int, default=1, help="other tenants of --size / 10 memories each")
    p.add_argument("--kind", default="mixed", help=f"the call sent, one of: {', '.join(CALL_KINDS)}")
    p.add_argument("--tiny", action="store_true", help="smoke test: 300 memories, N = 1, 2, two-second steps")
    args = p.parse_args(argv)
    if args.tiny:
        args.webs, args.seconds, args.rounds, args.size, args.clients = "1,2", 2.0, 1, 300, 4
    args.web_list = [int(n) for n in args.webs.split(",") if n.strip()]
    return args


def load_dataset(deployment: Deployment, args: argparse.Namespace) -> str:
    """bench/perf.py's tenants in the deployment's database; the measured tenant's token."""
    os.environ["MEMPROJ_BENCH_DB"] = deployment.database_url
    os.environ["CELERY_BROKER_URL"] = deployment.redis_url
    os.environ["MEMPROJ_RATE_LIMIT_REDIS_URL"] = deployment.redis_url
    from tests.harness.generators.dataset import ensure_tenants
    from tests.harness.stack import setup_bench_django

    setup_bench_django()
    dataset = argparse.Namespace(
        size_list=[args.size],
        other_tenants=args.other_tenants,
        other_size=max(100, args.size // 10),
        prefix="benchtiny" if args.tiny else "bench",
        reload=False,
        maintenance_work_mem="",
    )
    env = ensure_tenants(dataset)
    _caller, token = env["callers"][f"{dataset.prefix}-{args.size}"]  # type: ignore[index]
    return str(token)


def step(deployment: Deployment, token: str, webs: int, args: argparse.Namespace, seed: int) -> dict:
    deployment.balance(webs)
    asyncio.run(_closed_loop(deployment.url, token, CALL_KINDS[args.kind], 2, 1.0, seed))  # connections open
    before, me0 = deployment.tier_cpu(), time.process_time()
    result = asyncio.run(_closed_loop(deployment.url, token, CALL_KINDS[args.kind], args.clients, args.seconds, seed))
    after, me1 = deployment.tier_cpu(), time.process_time()
    calls = max(1, result["calls"])
    result["cpu_ms"] = {tier: (after[tier] - before[tier]) * 1000.0 / calls for tier in TIERS}
    result["cpu_ms"]["client"] = (me1 - me0) * 1000.0 / calls
    result["cores"] = {tier: (after[tier] - before[tier]) / result["seconds"] for tier in TIERS}
    result["cores"]["client"] = (me1 - me0) / result["seconds"]
    return {"webs": webs, **result}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    deployment = Deployment()
    steps = []
    try:
        print("  starting PostgreSQL and Redis on loopback TCP ...", file=sys.stderr, flush=True)
        deployment.start_data_tier()
        token = load_dataset(deployment, args)
        print(f"  starting {max(args.web_list)} web processes, {args.workers} workers ...", file=sys.stderr)
        deployment.start_web(max(args.web_list))
        deployment.start_workers(args.workers)
        for n in range(1, max(args.web_list) + 1):  # every web process loads its model before anything is timed
            deployment.balance(n)
            asyncio.run(_closed_loop(deployment.webs[n - 1][1], token, CALL_KINDS["memory_search"], 1, 2.0, 1))
        order: list[int] = []
        for r in range(args.rounds):
            order += args.web_list if r % 2 == 0 else list(reversed(args.web_list))
        for i, webs in enumerate(order):
            print(f"  {webs} web process(es), {args.clients} clients, {args.seconds:g} s ...", file=sys.stderr)
            steps.append(step(deployment, token, webs, args, seed=100 + i))
    finally:
        deployment.close()
    print(report(args, steps))
    return 0


def report(args: argparse.Namespace, steps: list[dict]) -> str:
    rows = []
    for webs in args.web_list:
        mine = [s for s in steps if s["webs"] == webs]
        if not mine:
            continue

        def med(get, mine=mine):  # type: ignore[no-untyped-def]
            return statistics.median(get(s) for s in mine)

        total = med(lambda s: sum(s["cpu_ms"][t] for t in TIERS))
        rows.append(
            [
                webs,
                args.workers,
                med(lambda s: s["per_s"]),
                med(lambda s: s["p50"]),
                med(lambda s: s["p95"]),
                *(med(lambda s, t=t: s["cpu_ms"][t]) for t in TIERS),
                total,
                med(lambda s: s["cpu_ms"]["client"]),
                " / ".join(f"{med(lambda s, t=t: s['cores'][t]):.2f}" for t in ("web", "postgres", "client")),
                sum(s["errors"] for s in mine),
            ]
        )
    return "\n".join(
        [
            f"# Scale-out: {args.kind} through haproxy, {args.clients} closed-loop clients, {args.size} memories",
            "",
            f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`; {os.cpu_count()} cores; "
            f"{args.rounds} round(s) of {args.seconds:g} s steps, medians per N; load average "
            f"{os.getloadavg()[0]:.1f} at the end. CPU in ms per answered call by tier (total: the service's "
            "tiers; the load generator, this process, runs on the same cores).",
            "",
            markdown_table(
                [
                    "web processes",
                    "workers",
                    "calls/s",
                    "p50 ms",
                    "p95 ms",
                    *(f"{t} CPU" for t in TIERS),
                    "total CPU",
                    "load generator CPU",
                    "cores used web / postgres / load generator",
                    "errors",
                ],
                rows,
            ),
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
