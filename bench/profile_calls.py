"""Where an answered call's CPU goes: the web process (py-spy) and PostgreSQL
(every statement of the call, EXPLAIN (ANALYZE, BUFFERS) of each), for a store
and every dialect's main read.

    .venv/bin/python bench/profile_calls.py                         # 10k memories per tenant, 8 clients, 15 s per kind
    .venv/bin/python bench/profile_calls.py --size 100000 --kinds memory_search,store_episode
    .venv/bin/python bench/profile_calls.py --tiny                  # smoke test

Per kind of call: a closed loop of --clients HTTP clients sending only that call
to uvicorn (as bench/perf.py's concurrency steps do) while py-spy samples the
web process; the CPU per answered call of the web process, its event loop and
the measured database's backends; then the same call in this process through
the dialect's MCP server with every statement it sends recorded and explained.
py-spy's raw stacks are kept under var/bench/profile/ (flame graphs: e.g.
``inferno-flamegraph``). Uses the speed benchmark's database and tenants.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.harness.generators import synthetic  # noqa: E402
from tests.harness.generators.dataset import ensure_tenants  # noqa: E402
from tests.harness.load.percall import CALL_KINDS, Server, percall_step, py_spy_record  # noqa: E402
from tests.harness.measure import pyspy  # noqa: E402
from tests.harness.measure.statements import plan_lines, profile_call  # noqa: E402
from tests.harness.paths import VAR_BENCH  # noqa: E402
from tests.harness.reports.tables import markdown_table  # noqa: E402
from tests.harness.stack import BENCH_DB_NAME, setup_bench_django, start_web  # noqa: E402

DEFAULT_KINDS = ",".join(
    (
        "store_episode",
        "memory_search",
        "memento_search_memories",
        "langmem_search_memory",
        "roampal_get_context_insights",
        "pce_activate",
    )
)
PROFILES = VAR_BENCH / "profile"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=10000, help="memories in the measured tenant")
    p.add_argument("--kinds", default=DEFAULT_KINDS, help=f"calls to profile, of: {', '.join(CALL_KINDS)}")
    p.add_argument("--clients", type=int, default=8, help="closed-loop HTTP clients per kind")
    p.add_argument("--seconds", type=float, default=15.0, help="seconds of load (and of sampling) per kind")
    p.add_argument("--rate", type=int, default=97, help="py-spy samples per second")
    p.add_argument("--no-spy", action="store_true", help="CPU per call only, no sampling")
    p.add_argument(
        "--gil", action="store_true", help="sample only the thread holding the GIL (Python's own CPU, no waits)"
    )
    p.add_argument("--no-statements", action="store_true", help="skip the statements and their plans")
    p.add_argument("--top", type=int, default=12, help="memproj functions listed per kind")
    p.add_argument(
        "--database", default=BENCH_DB_NAME, help="bench database (bench/perf.py's --database, e.g. memproj_bench_1m)"
    )
    p.add_argument("--plans", type=float, metavar="MS", help="print the plan of each statement executing >= MS")
    p.add_argument("--tiny", action="store_true", help="smoke test: a few hundred memories, seconds of load")
    args = p.parse_args(argv)
    if args.tiny:
        args.size, args.seconds, args.clients = 300, 2.0, 2
    args.kind_list = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in args.kind_list if k not in CALL_KINDS]
    if unknown:
        p.error(f"unknown kinds {unknown}; known: {', '.join(CALL_KINDS)}")
    return args


def _dataset_args(args: argparse.Namespace) -> argparse.Namespace:
    """What ensure_tenants reads: bench/perf.py's dataset (same tenants, same rows)."""
    return argparse.Namespace(
        size_list=[args.size],
        other_tenants=1 if args.tiny else 3,
        other_size=100 if args.tiny else 10000,
        prefix="benchtiny" if args.tiny else "bench",
        reload=False,
        maintenance_work_mem="",
    )


def statement_profiles(caller: Any, kinds: list[str]) -> dict[str, dict[str, Any]]:
    """Each kind's call through its dialect's MCP server in this process, its statements explained."""
    import random

    from mcp import Client

    from mcp_server.dialect import connection_options
    from mcp_server.server import build_server

    qs = synthetic.queries(64, seed=7)
    rng = random.Random(7)
    counter = iter(range(10**9))
    out = {}
    # One event loop for every call: its executor threads (where the tools run)
    # and their database connections are reused, as in the web process.
    loop = asyncio.new_event_loop()
    for name in kinds:
        kind = CALL_KINDS[name]
        toolset, options = kind.toolset, kind.options

        async def one(kind=kind, toolset=toolset, options=options) -> None:  # type: ignore[no-untyped-def]
            token = connection_options.set(options)
            try:
                async with Client(build_server(toolset, static_caller=caller)) as client:
                    result = await client.call_tool(kind.tool, kind.arguments(rng, qs, 9_000_000 + next(counter)))
                    if result.is_error:
                        raise RuntimeError(f"{kind.tool}: {result.content}")
            finally:
                connection_options.reset(token)

        def call(one: Callable[[], Coroutine[Any, Any, None]] = one) -> None:
            loop.run_until_complete(one())

        out[name] = profile_call(call)
    loop.close()
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    db_url = setup_bench_django(db_name=args.database)
    from memory.embeddings import embed_one

    embed_one("warm up")
    env = ensure_tenants(_dataset_args(args))
    caller, token = env["callers"][f"{'benchtiny' if args.tiny else 'bench'}-{args.size}"]  # type: ignore[index]
    PROFILES.mkdir(parents=True, exist_ok=True)
    statements = {} if args.no_statements else statement_profiles(caller, args.kind_list)

    proc, url = start_web(db_url)
    server = Server("web", proc.pid, url.removesuffix("/mcp/memory"))
    steps, spies = [], {}
    try:
        percall_step(server, token, "memory_search", 2, 3.0, args.database, seed=1)  # the model loads
        for name in args.kind_list:
            print(f"  {name}: {args.clients} clients for {args.seconds:g} s ...", file=sys.stderr, flush=True)
            out = PROFILES / f"{name}-{args.size}.txt"
            spy = None if args.no_spy else py_spy_record(proc.pid, args.seconds, out, rate=args.rate, gil=args.gil)
            time.sleep(0 if spy is None else 0.5)  # py-spy attaches
            steps.append(percall_step(server, token, name, args.clients, args.seconds, args.database, seed=20))
            if spy is not None:
                spy.wait(timeout=args.seconds + 60)
                if out.exists():
                    spies[name] = pyspy.read_stacks(out)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(report(args, steps, spies, statements))
    return 0


def report(args: argparse.Namespace, steps: list[dict], spies: dict, statements: dict) -> str:
    lines = [
        f"# Profile of an answered call, {args.size} memories in the tenant",
        "",
        f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`; load average {os.getloadavg()[0]:.1f} "
        f"at the end; {args.clients} closed-loop clients, {args.seconds:g} s per kind.",
        "",
        "## CPU per answered call (ms)",
        "",
        markdown_table(
            ["call", "calls/s", "p50 ms", "p95 ms", "web", "of it event loop", "PostgreSQL", "total", "errors"],
            [
                [s["kind"], s["per_s"], s["p50"], s["p95"], s["web_cpu_ms"], s["loop_cpu_ms"], s["pg_cpu_ms"]]
                + [s["cpu_ms"], s["errors"]]
                for s in steps
            ],
        ),
    ]
    if spies:
        kinds = list(spies)
        categories = list(dict.fromkeys(c for k in kinds for c, _, _ in pyspy.by_category(spies[k])))
        shares = {k: {c: share for c, _, share in pyspy.by_category(spies[k])} for k in kinds}
        lines += [
            "",
            "## Web process CPU by library (share of py-spy samples, innermost known frame)",
            "",
            markdown_table(
                ["library", *kinds], [[c, *(f"{100 * shares[k].get(c, 0):.0f}%" for k in kinds)] for c in categories]
            ),
        ]
        for k in kinds:
            lines += [
                "",
                f"### {k}: memproj functions by inclusive share of the web process's samples",
                "",
                markdown_table(
                    ["function", "share"],
                    [[n, f"{100 * s:.1f}%"] for n, _, s in pyspy.own_functions(spies[k], args.top)],
                ),
                "",
                f"### {k}: hottest leaf functions",
                "",
                markdown_table(
                    ["function", "share"], [[n, f"{100 * s:.1f}%"] for n, _, s in pyspy.leaf_functions(spies[k], 10)]
                ),
            ]
    for k, prof in statements.items():
        lines += [
            "",
            f"## {k}: {prof['statements']} statements, {prof['wait_ms']:.1f} ms waited (median of 3), "
            f"EXPLAIN ANALYZE: {prof['exec_ms']:.1f} ms executing + {prof['plan_ms']:.1f} ms planning",
            "",
            markdown_table(
                ["#", "statement", "waited ms", "exec ms", "plan ms", "buffers hit", "read"],
                [
                    [i + 1, r["label"], r["ms"], r["exec_ms"] if r["exec_ms"] is not None else "", r["plan_ms"] or ""]
                    + [r["hit"], r["read"]]
                    for i, r in enumerate(prof["rows"])
                ],
            ),
        ]
        if args.plans is not None:
            for i, r in enumerate(prof["rows"]):
                if r["plan"] is not None and (r["exec_ms"] or 0.0) >= args.plans:
                    lines += ["", f"Statement {i + 1} ({r['label']}):", "", "```", *plan_lines(r["plan"]), "```"]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
